//! Issue 52: every connection's hit tied to its statement and its user.
//!
//! Three MySQL users on a real server, each with one connection:
//! `app_rw` updates the hot row (autocommit: each UPDATE commits and
//! waits for its redo), `app_ro` reads it inside REPEATABLE READ snapshots
//! opened anew every 20 reads (each read walks the row's versions back to
//! its snapshot), and `app_idle` holds a snapshot open and runs nothing.
//! The recording must put the redo waits on app_rw's UPDATE, the version
//! walks on app_ro's SELECT, nothing on app_idle, and account for every
//! connection hit.

use std::time::{Duration, Instant};

use innoprof::model::who::Who;
use innoprof_e2e::*;

const UPDATE: &str = "UPDATE sbtest1 SET k=k+? WHERE id=?";
const SELECT: &str = "SELECT c FROM sbtest1 WHERE id=?";

/// The processlist id of `user`'s one connection, once it is there.
fn connection_of(server: &Server, user: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = server.sql(&format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}'"
        ));
        if let Ok(id) = out.trim().parse() {
            return id;
        }
        assert!(Instant::now() < deadline, "{user} never connected");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Calls and wait the probe's client connections made (its `connection` role).
fn connection_share(s: &innoprof::model::summary::Summary, probe: &str) -> (u64, u64) {
    let p = s
        .probes
        .iter()
        .find(|p| p.name == probe)
        .unwrap_or_else(|| panic!("no probe {probe}"));
    p.roles
        .iter()
        .filter(|r| r.role == "connection")
        .fold((0, 0), |(c, w), r| (c + r.calls, w + r.wait_ns_total))
}

/// The calls and wait `who` puts on statement `fingerprint` for `probe`.
fn on_statement(who: &Who, fingerprint: &str, probe: &str) -> (u64, u64) {
    who.statements
        .iter()
        .filter(|s| s.fingerprint == fingerprint)
        .flat_map(|s| s.probes.iter().filter(|p| p.probe == probe))
        .fold((0, 0), |(c, w), p| (c + p.calls, w + p.wait_ns_total))
}

/// One statement text as performance_schema's DIGEST_TEXT and innoprof's
/// fingerprint both reduce to: quotes, spaces and case dropped (the two
/// differ only there: `UPDATE \`sbtest1\` SET \`k\` = \`k\` + ? ...`).
fn squeezed(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && *c != '`')
        .flat_map(char::to_lowercase)
        .collect()
}

/// performance_schema's recent statements (events_statements_history,
/// digests squeezed) of `user`'s threads.
fn ps_digests(server: &Server, user: &str) -> Vec<String> {
    server
        .sql(&format!(
            "SELECT DISTINCT h.DIGEST_TEXT FROM performance_schema.events_statements_history h \
             JOIN performance_schema.threads t USING (THREAD_ID) \
             WHERE t.PROCESSLIST_USER = '{user}' AND h.DIGEST_TEXT IS NOT NULL"
        ))
        .lines()
        .map(squeezed)
        .collect()
}

/// The statement kinds (`statement/sql/commit`) `user`'s threads ran,
/// as performance_schema counts them.
fn ps_events(server: &Server, user: &str) -> Vec<String> {
    server
        .sql(&format!(
            "SELECT DISTINCT s.EVENT_NAME FROM performance_schema.events_statements_summary_by_thread_by_event_name s \
             JOIN performance_schema.threads t USING (THREAD_ID) \
             WHERE t.PROCESSLIST_USER = '{user}' AND s.COUNT_STAR > 0"
        ))
        .lines()
        .map(str::to_string)
        .collect()
}

/// This test's own performance_schema queries, each on a connection of
/// its own that comes and goes while innoprof records (so the processlist
/// at the start and end never lists it: its user is `?`). A connection
/// is one from its login (`login_connection`), so they are seen too.
fn tests_own(st: &innoprof::model::who::StatementResult) -> bool {
    st.fingerprint.contains("performance_schema.")
}

/// How many statements of `event` (`statement/sql/update`) connection
/// `id` has run, as performance_schema counts them.
fn ps_count(server: &Server, id: u64, event: &str) -> u64 {
    let out = server.sql(&format!(
        "SELECT s.COUNT_STAR FROM performance_schema.events_statements_summary_by_thread_by_event_name s \
         JOIN performance_schema.threads t USING (THREAD_ID) \
         WHERE t.PROCESSLIST_ID = {id} AND s.EVENT_NAME = '{event}'"
    ));
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("performance_schema count: {out:?}"))
}

/// `cpu`: also profile CPU (the sampler then ties each sample of a
/// connection to its statement, through the wait probes' maps), and check
/// where the samples landed.
fn who_waits_and_runs_what(server_name: &str, cpu: bool, every_stack: bool) {
    let _k = kernel_lock();
    // Redo flushed at each commit (the default): every UPDATE waits for it.
    // performance_schema on, in this test only: what it lists per thread
    // is the reference innoprof's statements are checked against.
    let server = Server::start(
        server_name,
        &[
            "--performance-schema=ON",
            // The history is kept only behind the current statements
            // (MariaDB has that consumer off by default).
            "--performance-schema-consumer-events-statements-current=ON",
            "--performance-schema-consumer-events-statements-history=ON",
        ],
    );
    server.sysbench_ok(&[
        "prepare",
        "oltp_update_non_index",
        "--tables=1",
        "--table-size=1",
    ]);
    for user in ["app_rw", "app_ro", "app_idle"] {
        server.sql(&format!(
            "CREATE USER '{user}'@'localhost'; GRANT ALL ON sbtest.* TO '{user}'@'localhost'"
        ));
    }
    let (_idle, _idle_in) = server.sql_session_as(
        "app_idle",
        "USE sbtest;\nSTART TRANSACTION WITH CONSISTENT SNAPSHOT;\nSELECT 1;\n",
    );
    // The reader's snapshot opens first; each read then walks back over
    // every update made since.
    let (_ro, mut ro_in) = server.sql_session_as(
        "app_ro",
        "USE sbtest;\nSET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ;\n\
         START TRANSACTION WITH CONSISTENT SNAPSHOT;\nSELECT c FROM sbtest1 WHERE id=1;\n",
    );
    let (ro_id, idle_id) = (
        connection_of(&server, "app_ro"),
        connection_of(&server, "app_idle"),
    );
    // Paced (~1,000 a second at most), so the chains stay short.
    let updates = "USE sbtest;\n".to_string()
        + &"UPDATE sbtest1 SET k=k+1 WHERE id=1;\nDO SLEEP(0.001);\n".repeat(100_000);
    let _rw = server.sql_background_as("app_rw", &updates);
    let rw_id = connection_of(&server, "app_rw");
    let reads = ("COMMIT;\nSTART TRANSACTION WITH CONSISTENT SNAPSHOT;\n".to_string()
        + &"SELECT c FROM sbtest1 WHERE id=1;\nDO SLEEP(0.005);\n".repeat(20))
        .repeat(2_000);
    let reader = std::thread::spawn(move || {
        use std::io::Write;
        let _ = ro_in.write_all(reads.as_bytes());
        ro_in
    });
    // Until both loads run (performance_schema counts their statements):
    // on a loaded host a client can take seconds to start.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (selects, updates) = (
            ps_count(&server, ro_id, "statement/sql/select"),
            ps_count(&server, rw_id, "statement/sql/update"),
        );
        if selects >= 40 && updates >= 100 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the loads did not start: {selects} SELECTs, {updates} UPDATEs"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let pid = server.pid.to_string();
    let mut args = vec!["--pid", &pid, "--duration", "6s"];
    if !cpu {
        args.push("--no-cpu");
    }
    if every_stack {
        // Every hit its own stack: the wait profile's statement labels
        // are then the statements table's hits, checked one for one.
        args.extend(["--stack-interval", "0"]);
    }
    let mut rec = Recording::start(&args);
    rec.wait_attached();
    let updates_before = ps_count(&server, rw_id, "statement/sql/update");
    let selects_before = ps_count(&server, ro_id, "statement/sql/select");
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    // performance_schema's view of the same threads, right after.
    let updates_after = ps_count(&server, rw_id, "statement/sql/update");
    let selects_during = ps_count(&server, ro_id, "statement/sql/select") - selects_before;
    let (rw_digests, ro_digests) = (ps_digests(&server, "app_rw"), ps_digests(&server, "app_ro"));
    drop(reader);
    let s = rec.summary();
    let who = s.who.as_ref().expect("summary.json has who");
    println!(
        "{server_name}: {}\n{}",
        who.how,
        serde_json::to_string_pretty(who).unwrap()
    );
    assert!(who.attributed, "{}", who.how);

    // Every connection hit is under a statement: nothing lost.
    assert_eq!(
        who.unattributed,
        Default::default(),
        "{:?}",
        who.unattributed
    );
    for probe in s.probes.iter().map(|p| p.name.as_str()) {
        let total: (u64, u64) = who
            .statements
            .iter()
            .flat_map(|st| st.probes.iter().filter(|p| p.probe == probe))
            .fold((0, 0), |(c, w), p| (c + p.calls, w + p.wait_ns_total));
        if who.statements_more == 0 {
            assert_eq!(total, connection_share(&s, probe), "{probe}");
        }
    }

    // Redo waits at commit: on app_rw's UPDATE.
    let redo = "innodb.redo.write_up_to";
    let (commits, commit_wait) = connection_share(&s, redo);
    assert!(commits > 100, "{commits} redo waits seen");
    let (on_update, wait_on_update) = on_statement(who, UPDATE, redo);
    assert!(
        on_update as f64 >= 0.95 * commits as f64
            && wait_on_update as f64 >= 0.95 * commit_wait as f64,
        "{on_update} of {commits} redo waits on {UPDATE}"
    );
    let update = who
        .statements
        .iter()
        .find(|st| st.fingerprint == UPDATE)
        .unwrap();
    // Without a query_id (no DWARF: the plugin accessors give no query
    // id), one text run again with no hit between is one execution.
    let by_text = who.how.contains("no query_id");
    assert!(
        (by_text || update.executions > 100)
            && update.executions >= 1
            && update.executions <= update.calls,
        "{} executions",
        update.executions
    );
    assert_eq!(update.users, vec!["app_rw".to_string()]);
    assert_eq!(update.connections, 1);
    // performance_schema lists the same statement for app_rw's thread, and
    // ran at least the UPDATEs innoprof saw while it was attached (each
    // commits, so each waits for redo), and not many more: its count spans
    // attach to a little past detach.
    assert!(
        rw_digests.contains(&squeezed(UPDATE)),
        "performance_schema's digests for app_rw: {rw_digests:?}"
    );
    let ran = updates_after - updates_before;
    assert!(
        update.executions <= ran && (by_text || update.executions as f64 >= 0.5 * ran as f64),
        "{} UPDATE executions seen, performance_schema counts {ran}",
        update.executions
    );

    // Version walks: on app_ro's SELECT.
    let walk = "innodb.undo.prev_version";
    let (walks, walk_wait) = connection_share(&s, walk);
    assert!(
        walks > 100,
        "{walks} versions walked; app_ro ran {selects_during} SELECTs meanwhile"
    );
    let (on_select, wait_on_select) = on_statement(who, SELECT, walk);
    assert!(
        on_select as f64 >= 0.95 * walks as f64 && wait_on_select as f64 >= 0.95 * walk_wait as f64,
        "{on_select} of {walks} walks on {SELECT}"
    );
    let select = who
        .statements
        .iter()
        .find(|st| st.fingerprint == SELECT)
        .unwrap();
    assert_eq!(select.users, vec!["app_ro".to_string()]);
    assert!(
        ro_digests.contains(&squeezed(SELECT)),
        "performance_schema's digests for app_ro: {ro_digests:?}"
    );
    // Every statement innoprof attributed hits to is of a kind
    // performance_schema counts for its user's threads (its history keeps
    // only the last 10 a thread ran: a snapshot's COMMIT is long gone from
    // it). Statements seen only on CPU have no hits, hence no users.
    for st in who
        .statements
        .iter()
        .filter(|st| st.calls > 0 && !tests_own(st))
    {
        let kind = format!(
            "statement/sql/{}",
            st.fingerprint
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_lowercase()
        );
        let [user] = st.users.as_slice() else {
            panic!("{} run by {:?}", st.fingerprint, st.users);
        };
        // innoprof's own session (its end snapshot runs under the probes)
        // is named as such, never as a client; it has exited, so
        // performance_schema no longer lists its thread.
        if user.ends_with(" (innoprof)") {
            let own = who.connections.iter().filter(|c| c.innoprof).count();
            assert!(own <= 1, "{:?}", who.connections);
            assert!(
                kind == "statement/sql/show" || kind == "statement/sql/select",
                "innoprof ran {}",
                st.fingerprint
            );
            continue;
        }
        let events = ps_events(&server, user);
        assert!(
            events.contains(&kind),
            "{} ({user}): performance_schema counts no {kind} for {user}: {events:?}",
            st.fingerprint
        );
    }

    // The connections as the server lists them; the idle one made no hit.
    let conn = |id: u64| who.connections.iter().find(|c| c.id == id);
    let rw = conn(rw_id).unwrap_or_else(|| panic!("no connection {rw_id}: {stdout}"));
    assert_eq!(rw.user.as_deref(), Some("app_rw"));
    assert_eq!(rw.db.as_deref(), Some("sbtest"));
    assert_eq!(rw.top_statement.as_deref(), Some(update.id.as_str()));
    assert_eq!(conn(ro_id).and_then(|c| c.user.as_deref()), Some("app_ro"));
    assert!(conn(idle_id).is_none(), "the idle connection made hits");
    // Who blocks: where a latch records its writer (MySQL 5.6, MariaDB
    // 10.2), the only writing connection is app_rw's UPDATE.
    // (Holders found by their release may be either load's statements:
    // tests/e2e/holders.rs checks those.)
    let held: Vec<_> = who
        .blocking
        .iter()
        .filter(|b| b.holder_statement.is_some() && !b.released)
        .collect();
    println!("{} waits for a connection holding the latch", held.len());
    for b in &held {
        assert_eq!(b.holder_fingerprint.as_deref(), Some(UPDATE), "{b:?}");
        assert_eq!(b.holder_connection, Some(rw_id), "{b:?}");
    }
    waits_profile_labels_the_load(&s, &rec, redo, commits, UPDATE);
    waits_profile_labels_the_load(&s, &rec, walk, walks, SELECT);
    if cpu {
        cpu_samples_land_on_the_load(&s, who, &rec);
        // Per connection too: app_rw's UPDATEs burn CPU, and a statement
        // seen only on CPU (app_rw's or app_ro's `DO SLEEP(?)`) names its user.
        assert!(rw.cpu_samples > 0, "{rw:?}");
        let on_conns: u64 = who.connections.iter().map(|c| c.cpu_samples).sum();
        let cpu = who.cpu.as_ref().unwrap();
        assert!(on_conns <= cpu.samples, "{on_conns} > {}", cpu.samples);
        for st in who
            .statements
            .iter()
            .filter(|st| st.cpu_samples > 0 && !tests_own(st))
        {
            assert!(
                st.users.iter().all(|u| u == "app_rw" || u == "app_ro") && !st.users.is_empty(),
                "{} sampled on CPU, users {:?}",
                st.fingerprint,
                st.users
            );
        }
    } else {
        assert!(who.cpu.is_none(), "no CPU profile: {:?}", who.cpu);
    }
    // No literal is kept without --statement-text.
    assert!(!who.text_kept && who.statements.iter().all(|st| st.sample.is_none()));
    let text = std::fs::read_to_string(rec.out.join("summary.txt")).unwrap();
    assert!(text.contains(UPDATE) && text.contains("app_rw"), "{text}");
    let html = std::fs::read_to_string(rec.out.join("report.html")).unwrap();
    assert!(
        html.contains("id=\"statements\"") && html.contains("SELECT c FROM sbtest1 WHERE id=?")
    );
}

/// waits.pb.gz: `probe`'s stacks carry a `statement` label, the statement
/// whose hit took the stack standing for the hits the stack carried. The
/// labelled calls are at most the probe's calls (two maps counting the
/// same hits), most of the connections' (only a stack being taken when
/// another hit comes, or the last hits on a CPU, go unlabelled), and
/// nearly all on the statement that makes the probe's hits.
fn waits_profile_labels_the_load(
    s: &innoprof::model::summary::Summary,
    rec: &Recording,
    probe: &str,
    calls: u64,
    statement: &str,
) {
    let all = s.probes.iter().find(|p| p.name == probe).unwrap().calls;
    let gz = std::fs::read(rec.out.join("waits.pb.gz")).expect("waits.pb.gz");
    let p = innoprof::report::pprof::decode_gz(&gz).expect("a gzipped profile");
    let label = |sample: &innoprof::report::pprof::Sample, key: &str| {
        sample
            .label
            .iter()
            .find(|l| p.string_table[l.key as usize] == key)
            .map(|l| p.string_table[l.str as usize].clone())
    };
    let mut by_statement: std::collections::HashMap<String, u64> = Default::default();
    for sample in &p.sample {
        if label(sample, "probe").as_deref() != Some(probe) {
            continue;
        }
        if let Some(st) = label(sample, "statement") {
            *by_statement.entry(st).or_default() += sample.value[0] as u64;
        }
    }
    let labelled: u64 = by_statement.values().sum();
    let on = by_statement.get(statement).copied().unwrap_or(0);
    println!(
        "waits.pb.gz {probe}: {labelled} calls labelled ({calls} of connections, {all} in all), \
         {on} on {statement}: {by_statement:?}"
    );
    assert!(
        labelled <= all && labelled as f64 >= 0.8 * calls as f64,
        "{labelled} labelled calls of {calls}: {by_statement:?}"
    );
    assert!(
        on as f64 >= 0.9 * labelled as f64,
        "{on} of {labelled} labelled calls on {statement}: {by_statement:?}"
    );
}

/// The CPU profile's samples of the connections, by statement: the
/// busy connections' statements (app_rw's UPDATE, app_ro's version-walking
/// SELECT) have them, the one the idle connection ran before the
/// recording (`SELECT 1`, blocked in its read since) has none, and the
/// same statements label the samples of cpu.pb.gz.
fn cpu_samples_land_on_the_load(s: &innoprof::model::summary::Summary, who: &Who, rec: &Recording) {
    let cpu = who.cpu.as_ref().expect("who.cpu with a CPU profile");
    assert!(cpu.attributed, "{cpu:?}");
    let on_statements: u64 = who.statements.iter().map(|st| st.cpu_samples).sum();
    let mut by_cpu: Vec<_> = who
        .statements
        .iter()
        .filter(|st| st.cpu_samples > 0)
        .collect();
    by_cpu.sort_by_key(|st| std::cmp::Reverse(st.cpu_samples));
    let samples = s.cpu.as_ref().expect("summary.json has cpu").oncpu.samples;
    println!(
        "CPU samples: {samples} of the target, {} tied to statements ({on_statements} on the \
         listed ones), {} of connections running none; by statement: {:?}",
        cpu.samples,
        cpu.no_statement,
        by_cpu
            .iter()
            .map(|st| (st.fingerprint.as_str(), st.cpu_samples))
            .collect::<Vec<_>>()
    );
    assert!(on_statements > 0, "no CPU sample on a statement: {cpu:?}");
    // A sample between statements (or before a statement's text is set)
    // ties nothing: no statement is known by an empty text.
    assert!(
        who.statements.iter().all(|st| !st.fingerprint.is_empty()),
        "a statement with no text"
    );
    // The listed statements' samples are among those the sampler tied to
    // a statement (the rest: statements not listed, or whose text the
    // drain never saw), and those among the target's.
    assert!(
        on_statements <= cpu.samples && cpu.samples <= samples,
        "{cpu:?}"
    );
    let top = by_cpu[0].fingerprint.as_str();
    assert!(
        top == UPDATE || top == SELECT,
        "the statement with the most CPU samples is not the load's: {top}"
    );
    let idle = who
        .statements
        .iter()
        .find(|st| st.fingerprint == "SELECT ?");
    assert!(
        idle.is_none_or(|st| st.cpu_samples == 0),
        "the idle connection's statement has CPU samples: {idle:?}"
    );
    // cpu.pb.gz: the busy statements label samples.
    let gz = std::fs::read(rec.out.join("cpu.pb.gz")).expect("cpu.pb.gz");
    let p = innoprof::report::pprof::decode_gz(&gz).expect("a gzipped profile");
    let mut labelled: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for sample in &p.sample {
        for l in &sample.label {
            if p.string_table[l.key as usize] == "statement" {
                *labelled
                    .entry(p.string_table[l.str as usize].clone())
                    .or_default() += sample.value[0];
            }
        }
    }
    println!("cpu.pb.gz samples by statement label: {labelled:?}");
    assert!(
        labelled.get(top).copied().unwrap_or(0) > 0,
        "no sample of cpu.pb.gz labelled {top}: {labelled:?}"
    );
    assert!(!labelled.contains_key("SELECT ?"), "{labelled:?}");
}

/// With a CPU profile too: its samples are tied to statements (see
/// [`cpu_samples_land_on_the_load`]).
#[test]
fn who_mariadb_10_2_11_pthread_key() {
    who_waits_and_runs_what("mariadb-10.2.11", true, false);
}

/// Every hit takes its own stack: the statement labels are checked
/// against the statements table hit for hit (tests/support/consistency.rs).
#[test]
fn who_mariadb_11_4_5_tls() {
    who_waits_and_runs_what("mariadb-11.4.5", false, true);
}

#[test]
fn who_mysql_5_6_24_pthread_key() {
    who_waits_and_runs_what("mysql-5.6.24", false, false);
}

/// MySQL 8.0.15 ships without DWARF: the THD's members come from the
/// plugin API's accessors (`thd_get_thread_id`, `thd_query_unsafe`) and
/// `current_thd` from `.dynsym`; it has no query_id accessor, so the
/// query id is where `dispatch_command` stores `++atomic_global_query_id`,
/// and executions are counted as on the servers with DWARF.
#[test]
fn who_mysql_8_0_15_without_dwarf() {
    who_waits_and_runs_what("mysql-8.0.15", false, false);
}
