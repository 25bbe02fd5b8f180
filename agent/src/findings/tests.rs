//! Each rule on a hand-made recording: fires at its thresholds with the
//! evidence it names, stays silent below them, and ranks by severity then
//! by the share of the server's time it explains.

use super::*;
use crate::bpf::histogram::Bucket;
use crate::model::finding::Severity;
use crate::model::summary::{CallsiteResult, LatchResult, Sampling};

/// The fixture summary (10 s) with its one probe renamed and reshaped.
fn with_probe(name: &str, calls: u64, wait_ns_total: u64) -> Summary {
    let mut s = crate::report::html::tests::summary();
    let p = &mut s.probes[0];
    p.name = name.into();
    p.calls = calls;
    p.calls_per_sec = calls as f64 / s.duration_s;
    p.wait_ns_total = wait_ns_total;
    p.cost = crate::plan::catalog::CostClass::Contended;
    p.callsites.clear();
    s
}

#[test]
fn undo_walks_fire_on_chain_length_or_rate_over_the_watched_time_only() {
    // 150,000 walks in 10 s without the consistent-read probe: 15,000/s,
    // below the warning.
    assert!(evaluate(&with_probe("innodb.undo.prev_version", 150_000, 0)).is_empty());
    // The same seen in the 0.5 s the governor kept it on: 300,000/s.
    let mut s = with_probe("innodb.undo.prev_version", 150_000, 0);
    s.probes[0].sampling = Some(serde_json::from_value::<Sampling>(serde_json::json!({
        "state": "duty_cycled", "attached_fraction": 0.05, "observed_calls": 150000,
        "calls_before_start": 0, "windows": [],
        "estimate": {"observed_calls": 150000, "calls": 150000.0, "calls_bound": 0.0, "wait_ns": 0.0,
                     "wait_ns_bound": 0.0, "covered_s": 0.5, "gap_s": 0.0, "windows": 1,
                     "confidence": 0.95, "assumption": ""},
        "projected_full_pct_of_core": 5.0
    })).unwrap());
    let f = evaluate(&s);
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].rule.as_str(), f[0].severity),
        ("many_row_versions", Severity::Critical)
    );
    assert!(
        f[0].evidence[0]
            .text
            .contains("300,000 old row versions rebuilt per second while watched (5 %"),
        "{:?}",
        f[0].evidence
    );
    assert!(f[0].next[0].contains("information_schema.innodb_trx"));

    // With the reads watched, the chain length decides: a healthy load
    // walks ~2 versions per read, however many walks that makes.
    let with_reads = |walks: u64, reads: u64| {
        let mut s = with_probe("innodb.undo.prev_version", walks, 0);
        let mut r = s.probes[0].clone();
        r.name = "innodb.row_vers.consistent_read".into();
        r.calls = reads;
        r.wait_ns_avg = Some(61_000_000);
        s.probes.push(r);
        evaluate(&s)
    };
    assert!(with_reads(40_000, 16_000).is_empty());
    let f = with_reads(40_000, 200);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].evidence[1].text.contains("20 reads a second needed an old version, each walking ~200 versions back, taking 61.00 ms on average"), "{:?}", f[0].evidence);
    assert_eq!(with_reads(400_000, 200)[0].severity, Severity::Critical);
    // A read of a hot row walks back over the updates made while it ran:
    // S1's baseline on MySQL 5.6.24, ~153 versions for one read a second,
    // 114 walks a second (0.02 % of a core), is no purge held back.
    assert!(with_reads(1_140, 10).is_empty());
}

#[test]
fn row_ids_are_info_when_few_and_critical_when_the_dictionary_mutex_queues() {
    // A few rows into a table without a PK: said, as info.
    let f = evaluate(&with_probe("innodb.dict_sys.row_id", 50, 0));
    assert_eq!(
        (f[0].rule.as_str(), f[0].severity),
        ("tables_without_primary_key", Severity::Info)
    );
    assert!(f[0].evidence[0]
        .text
        .starts_with("5 hidden row ids allocated per second"));
    let f = evaluate(&with_probe("innodb.dict_sys.row_id", 50_000, 0));
    assert_eq!(f[0].severity, Severity::Warning);
    // Plus the dictionary mutex: 5 s of waiting in 10 s, 0.5 threads.
    let mut s = with_probe("innodb.dict_sys.row_id", 50_000, 0);
    let mut lock = s.probes[0].clone();
    lock.name = "innodb.dict_sys.lock".into();
    lock.wait_ns_total = 5_000_000_000;
    s.probes.push(lock);
    let f = evaluate(&s);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence[1]
            .text
            .contains("0.50 threads waiting on the dictionary mutex"),
        "{:?}",
        f[0].evidence
    );
}

#[test]
fn a_latch_with_threads_queued_is_named_with_its_call_site() {
    let mut s = with_probe("innodb.rwlock.s_wait", 1_000, 0);
    s.probes[0].latches = vec![
        LatchResult {
            latch: "buf_block_init (buf0buf.cc:1471)".into(),
            calls: 900,
            wait_ns_total: 3_000_000_000,
            wait_ns_max: 0,
            background_wait_ns: 0,
        },
        LatchResult {
            latch: "btr_search_sys_create (btr0sea.cc:193)".into(),
            calls: 100,
            wait_ns_total: 1_000_000_000,
            wait_ns_max: 0,
            background_wait_ns: 0,
        },
    ];
    s.probes[0].callsites = vec![CallsiteResult {
        site: "btr0cur.cc:5528".into(),
        file: None,
        line: 5528,
        latch: Some("buf_block_init (buf0buf.cc:1471)".into()),
        calls: 800,
        wait_ns_total: 2_500_000_000,
        wait_ns_max: 0,
        background_wait_ns: 0,
    }];
    let f = evaluate(&s);
    assert_eq!(
        (f[0].rule.as_str(), f[0].severity),
        ("latch_hotspot", Severity::Warning)
    );
    assert_eq!(
        f[0].title,
        "Threads queue on one InnoDB latch: buf_block_init (buf0buf.cc:1471)"
    );
    assert!(
        f[0].evidence[0]
            .text
            .contains("0.30 threads waiting on average (90 waits/s"),
        "{:?}",
        f[0].evidence
    );
    assert!(f[0].evidence[0].text.contains("75 % of all latch waiting"));
    assert!(f[0].evidence[1].text.contains("btr0cur.cc:5528"));
    assert!(f[0].cause.contains("one buffer-pool page"));
    // The same on a hot probe (every acquisition timed, contended or
    // not): not queueing, no finding.
    let mut hot = s.clone();
    hot.probes[0].cost = crate::plan::catalog::CostClass::Hot;
    assert!(evaluate(&hot).is_empty());
    // The same wait, nine tenths of it background threads' (purge
    // workers queuing on srv_sys as they resume): the server's own work,
    // not the workload's; what is left is healthy, no finding.
    let mut background = s.clone();
    for l in &mut background.probes[0].latches {
        l.background_wait_ns = l.wait_ns_total / 10 * 9;
    }
    assert!(
        evaluate(&background).is_empty(),
        "{:?}",
        evaluate(&background)
    );
    // A tenth of it: still queueing, and the background part said apart.
    for l in &mut background.probes[0].latches {
        l.background_wait_ns = l.wait_ns_total / 10;
    }
    let f = evaluate(&background);
    assert!(
        f[0].evidence[0].text.contains("0.27 threads waiting"),
        "{:?}",
        f[0].evidence
    );
    assert!(
        f[0].evidence[1].text.contains("btr0cur.cc:5528"),
        "{:?}",
        f[0].evidence
    );
    assert!(
        f[0].evidence[2]
            .text
            .contains("0.03 background threads waiting"),
        "{:?}",
        f[0].evidence
    );
    // A tenth of that: healthy, no finding.
    for l in &mut s.probes[0].latches {
        l.wait_ns_total /= 10;
    }
    assert!(evaluate(&s).is_empty());
}

/// A log2 histogram bucket from `low_ns` holding `count` calls.
fn bucket(low_ns: u64, count: u64) -> Bucket {
    Bucket {
        low_ns,
        high_ns: low_ns * 2,
        count,
    }
}

#[test]
fn slow_redo_flushes_fire_on_the_share_of_slow_ones() {
    let mut s = with_probe("innodb.redo.flush", 100, 0);
    s.probes[0].histogram = vec![bucket(1 << 20, 95), bucket(1 << 23, 5)];
    assert!(evaluate(&s).is_empty(), "5 % slow is not a slow device");
    s.probes[0].histogram = vec![bucket(1 << 20, 40), bucket(1 << 23, 60)];
    let f = evaluate(&s);
    assert_eq!(
        (f[0].rule.as_str(), f[0].severity),
        ("redo_flush_latency", Severity::Critical)
    );
    assert!(f[0].evidence[0]
        .text
        .contains("60 % of 100 redo flushes took 8 ms or more"));
    // Too few flushes to judge a device.
    s.probes[0].calls = 10;
    assert!(evaluate(&s).is_empty());
}

/// The redo rule's claim is the commits': at innodb_flush_log_at_trx_commit=2
/// (the demo's healthy baseline) slow background flushes are an info line
/// that says so; where the who-waits table shows the slow flushes are the
/// page cleaner's and the commits' own waits short, info too; commits
/// that wait milliseconds at =1 still warn, weighed by the workload's
/// waiting only.
#[test]
fn slow_redo_flushes_warn_only_where_commits_wait_for_them() {
    use crate::model::server_state::{ServerState, Snapshot};
    use crate::model::summary::{RoleKind, RoleResult};
    let role = |role: &str, kind, calls, wait_ns_total| RoleResult {
        role: role.into(),
        kind,
        threads: 1,
        calls,
        wait_ns_total,
        unlabelled_calls: 0,
        unlabelled_wait_ns: 0,
    };
    // MariaDB 10.2's shape: the redo fsync (30 % of it >= 8 ms, 96 % of
    // its wait the page cleaner's and the master thread's) and the
    // commits' wait for the log (17 us each).
    let recording = |settings: &[(&str, &str)], commit_wait_ns: u64| {
        let mut s = with_probe("innodb.redo.flush", 46, 400_000_000);
        s.probes[0].histogram = vec![bucket(1 << 20, 32), bucket(1 << 23, 14)];
        s.probes[0].roles = vec![
            role("page cleaner", RoleKind::Background, 30, 300_000_000),
            role("master thread", RoleKind::Background, 12, 84_000_000),
            role("connection", RoleKind::Connection, 4, 16_000_000),
        ];
        let mut commit = s.probes[0].clone();
        commit.name = "innodb.redo.write_up_to".into();
        commit.calls = 10_000;
        commit.histogram = vec![bucket(1 << 14, 10_000)];
        commit.roles = vec![
            role(
                "connection",
                RoleKind::Connection,
                9_990,
                9_990 * commit_wait_ns,
            ),
            role("page cleaner", RoleKind::Background, 10, 50_000_000),
        ];
        commit.wait_ns_total = commit.roles.iter().map(|r| r.wait_ns_total).sum();
        s.probes.push(commit);
        if !settings.is_empty() {
            let variables = settings
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            s.server_state = Some(ServerState {
                end: Some(Snapshot {
                    variables,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        s
    };
    let redo = |s: &Summary| {
        evaluate(s)
            .into_iter()
            .find(|f| f.rule == "redo_flush_latency")
            .expect("raised")
    };
    // The demo's baseline: commits do not flush, whatever the device does.
    let relaxed = [
        ("innodb_flush_log_at_trx_commit", "2"),
        ("sync_binlog", "0"),
        ("log_bin", "ON"),
    ];
    let f = redo(&recording(&relaxed, 16_800));
    assert_eq!(f.severity, Severity::Info, "{f:?}");
    assert!(f.title.contains("commits do not wait"), "{}", f.title);
    let text: Vec<&str> = f.evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("96 % of its wait paid by background threads")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t
            .starts_with("innodb_flush_log_at_trx_commit=2 sync_binlog=0: commits do not wait")),
        "{text:?}"
    );
    // Even at a slow device (every commit would pay milliseconds), =2
    // keeps commits out of it.
    assert_eq!(
        redo(&recording(&relaxed, 12_000_000)).severity,
        Severity::Info
    );
    // sync_binlog=1 with the binlog on: commits fsync the binlog; the
    // roles decide (short commit waits here: info).
    let binlog = [
        ("innodb_flush_log_at_trx_commit", "2"),
        ("sync_binlog", "1"),
        ("log_bin", "ON"),
    ];
    assert_eq!(redo(&recording(&binlog, 16_800)).severity, Severity::Info);
    // No settings read: the roles alone (17 us per commit) say commits
    // did not feel it.
    let f = redo(&recording(&[], 16_800));
    assert_eq!(f.severity, Severity::Info);
    assert!(f.title.contains("well under a millisecond"), "{}", f.title);
    // Durable commits that wait 12 ms each: the warning, weighed by the
    // connections' waiting (9,990 x 12 ms in 10 s), not the page cleaner's.
    let durable = [
        ("innodb_flush_log_at_trx_commit", "1"),
        ("sync_binlog", "0"),
    ];
    let f = redo(&recording(&durable, 12_000_000));
    assert_eq!(f.severity, Severity::Warning, "{f:?}");
    assert!(
        (f.weight - 9_990.0 * 0.012 / 10.0).abs() < 1e-6,
        "{}",
        f.weight
    );
    assert!(
        f.evidence.iter().any(|e| e
            .text
            .contains("the workload's 9,990 calls waited 12.00 ms on average")),
        "{:?}",
        f.evidence
    );
    // Durable, but the commits' waits short: the slow flushes were not
    // theirs.
    assert_eq!(redo(&recording(&durable, 16_800)).severity, Severity::Info);
}

/// The finding names the statements that wait where it looks, by their
/// share of the probe's connection wait; none without statements.
#[test]
fn a_finding_names_the_statements_waiting_at_its_probe() {
    use crate::model::who::{StatementProbe, StatementResult, Who};
    let mut s = with_probe("innodb.redo.write_up_to", 100, 0);
    s.probes[0].histogram = vec![bucket(1 << 23, 100)];
    let statement = |fp: &str, user: &str, wait: u64| StatementResult {
        id: crate::record::statements::statement_id(fp),
        fingerprint: fp.into(),
        sample: None,
        executions: 10,
        connections: 1,
        users: vec![user.into()],
        calls: 10,
        wait_ns_total: wait,
        probes: vec![StatementProbe {
            probe: "innodb.redo.write_up_to".into(),
            calls: 10,
            wait_ns_total: wait,
        }],
        cpu_samples: 0,
        connection_calls: Vec::new(),
    };
    let f = evaluate(&s);
    assert!(!f[0].evidence.iter().any(|e| e.anchor == "statements"));
    s.who = Some(Who {
        attributed: true,
        statements: vec![
            statement("COMMIT", "app_ro", 100),
            statement("UPDATE t SET k=k+? WHERE id=?", "app_rw", 300),
        ],
        ..Who::default()
    });
    let f = evaluate(&s);
    let e = f[0]
        .evidence
        .iter()
        .find(|e| e.anchor == "statements")
        .expect("statements named");
    assert_eq!(
        e.text,
        "the statements waiting at innodb.redo.write_up_to: 75 % under UPDATE t SET k=k+? WHERE id=? (app_rw, 1 connection); 25 % under COMMIT (app_ro, 1 connection)"
    );
}

#[test]
fn ranking_is_severity_then_weight() {
    let f = |rule: &str, severity, weight| Finding {
        rule: rule.into(),
        severity,
        title: String::new(),
        evidence: vec![],
        cause: String::new(),
        next: vec![],
        weight,
        explained_by: None,
    };
    let mut all = vec![
        f("a", Severity::Info, 9.0),
        f("b", Severity::Warning, 0.1),
        f("c", Severity::Warning, 0.5),
        f("d", Severity::Critical, 0.0),
    ];
    rank(&mut all);
    let order: Vec<&str> = all.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(order, ["d", "c", "b", "a"]);
    assert!(render(&all).starts_with("findings:\n1. [critical] \n"));
    assert_eq!(
        render(&[]),
        "findings: none (no rule fired; see the tables below)\n"
    );
    assert_eq!(thousands(1234567.0), "1,234,567");

    // A consequence comes right after its cause, whatever its weight.
    let mut all = vec![
        Finding {
            explained_by: Some("cause".into()),
            ..f("effect", Severity::Critical, 0.9)
        },
        f("other", Severity::Critical, 0.5),
        f("cause", Severity::Critical, 0.2),
        f("minor", Severity::Warning, 3.0),
    ];
    rank(&mut all);
    let order: Vec<&str> = all.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(order, ["other", "cause", "effect", "minor"]);

    // Findings naming each other keep their ranked order (no endless moves).
    let mut all = vec![
        Finding {
            explained_by: Some("y".into()),
            ..f("x", Severity::Critical, 0.9)
        },
        Finding {
            explained_by: Some("x".into()),
            ..f("y", Severity::Critical, 0.5)
        },
    ];
    rank(&mut all);
    let order: Vec<&str> = all.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(order, ["x", "y"]);
}

/// A recording's server state with these variables and a status counter
/// that grew `commits` over 10 s.
fn with_settings(vars: &[(&str, &str)], commits: u64) -> Summary {
    use crate::model::server_state::{ServerState, Snapshot};
    let mut s = crate::report::html::tests::summary();
    let snap = |at: u128, c: u64| Snapshot {
        taken_unix_ms: at,
        variables: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        status: [("Com_commit".to_string(), c)].into(),
        ..Default::default()
    };
    s.server_state = Some(ServerState {
        start: Some(snap(1_000, 500)),
        end: Some(snap(11_000, 500 + commits)),
        ..Default::default()
    });
    s
}

/// `diff`: a durability setting that changed is a warning naming it; a
/// setting only one side has (renamed across versions) is no change; the
/// same settings raise nothing; status rates are per second of each.
#[test]
fn a_changed_setting_is_a_finding_of_the_change() {
    let base = with_settings(
        &[
            ("innodb_flush_log_at_trx_commit", "2"),
            ("tx_isolation", "REPEATABLE-READ"),
        ],
        1_000,
    );
    let inc = with_settings(
        &[
            ("innodb_flush_log_at_trx_commit", "1"),
            ("transaction_isolation", "REPEATABLE-READ"),
        ],
        300,
    );
    let change = change::of_change(&base, &inc, &[]);
    let f = change
        .new
        .iter()
        .find(|f| f.rule == "settings_changed")
        .expect("raised");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(
        f.title,
        "The server's settings differ from the baseline: innodb_flush_log_at_trx_commit 2 -> 1"
    );
    let cmp = base
        .server_state
        .as_ref()
        .unwrap()
        .compare(inc.server_state.as_ref().unwrap())
        .unwrap();
    let commits = cmp.rates.iter().find(|r| r.name == "Com_commit").unwrap();
    assert_eq!(
        (commits.baseline_per_s, commits.incident_per_s),
        (100.0, 30.0)
    );

    let same = change::of_change(&base, &base, &[]);
    assert!(same.new.iter().all(|f| f.rule != "settings_changed"));
    // Another setting than the consequential ones: info.
    let a = with_settings(&[("max_connections", "151")], 10);
    let b = with_settings(&[("max_connections", "500")], 10);
    let f = change::of_change(&a, &b, &[])
        .new
        .into_iter()
        .find(|f| f.rule == "settings_changed")
        .unwrap();
    assert_eq!(f.severity, Severity::Info);
}

/// A snapshot open 9 s while the history list grew 3,224 -> 58,522 and no
/// read walked yet (the MariaDB 11.4.5 shape): a warning naming the
/// connection and the growth; silent for a young holder, a small growth,
/// a shrinking list, or when the walk's own finding names it already.
#[test]
fn a_transaction_holding_purge_back_is_named_before_anyone_walks() {
    use crate::model::server_state::{ServerState, Snapshot, Transaction};
    let recording = |age_s: u64, start: u64, end: u64, walks: u64| {
        let mut s = with_probe("innodb.undo.prev_version", walks, walks * 2_000);
        let holder = Transaction {
            trx_id: "421".into(),
            state: "RUNNING".into(),
            started: "2026-11-29 10:00:00".into(),
            age_s,
            isolation: Some("REPEATABLE READ".into()),
            rows_locked: None,
            rows_modified: Some(0),
            connection: Some(32),
            user: Some("app_ro".into()),
            host: Some("localhost".into()),
            db: Some("sbtest".into()),
            command: Some("Sleep".into()),
            query: None,
            read_view: true,
        };
        let snap = |at: u128, hll: u64, txs: Vec<Transaction>| Snapshot {
            taken_unix_ms: at,
            history_list_length: Some(hll),
            transactions: txs,
            ..Default::default()
        };
        s.server_state = Some(ServerState {
            start: Some(snap(1_000, start, vec![])),
            end: Some(snap(11_000, end, vec![holder])),
            ..Default::default()
        });
        s
    };
    let f = evaluate(&recording(9, 3_224, 58_522, 0));
    let f = f
        .iter()
        .find(|f| f.rule == "purge_held_back")
        .expect("fires");
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.title.contains("connection 32") && f.title.contains("9 s"),
        "{}",
        f.title
    );
    assert!(
        f.title.contains("3,224") && f.title.contains("58,522"),
        "{}",
        f.title
    );
    let text: Vec<&str> = f.evidence.iter().map(|e| e.text.as_str()).collect();
    assert!(text[0].contains("+5,530 a second"), "{text:?}");
    assert!(
        text[1].contains("app_ro@localhost") && text[1].contains("Sleep"),
        "{text:?}"
    );
    assert!(f.next[0].contains("KILL 32"), "{:?}", f.next);
    let fired = |s: &Summary| evaluate(s).iter().any(|f| f.rule == "purge_held_back");
    assert!(!fired(&recording(2, 3_224, 58_522, 0)), "young holder");
    assert!(!fired(&recording(9, 3_224, 9_000, 0)), "small growth");
    assert!(!fired(&recording(9, 58_522, 3_224, 0)), "list shrank");
    assert!(
        fired(&recording(60, 150_000, 150_500, 0)),
        "long and growing"
    );
    assert_eq!(
        evaluate(&recording(60, 1_000_000, 1_200_000, 0))
            .iter()
            .find(|f| f.rule == "purge_held_back")
            .map(|f| f.severity),
        Some(Severity::Critical)
    );
    // 300,000 walks a second: the walk's finding names the holder itself.
    let walking = evaluate(&recording(9, 3_224, 58_522, 3_000_000));
    assert!(walking.iter().any(|f| f.rule == "many_row_versions"));
    assert!(!walking.iter().any(|f| f.rule == "purge_held_back"));
}

/// The latch hot spot's holder line: holders summed over edges (a holder
/// statement's waiters together), most wait first, shares of the waits
/// tied to a holder; none without edges at that probe.
#[test]
fn holders_at_a_probe_are_named_by_statement_and_connection() {
    use crate::model::who::{Blocking, Who};
    let mut s = with_probe("innodb.rwlock.s_wait", 100, 0);
    assert!(crate::findings::measure::holders_at(&s, "innodb.rwlock.s_wait", 2).is_none());
    let edge = |waiter: &str, holder: Option<&str>, conn, thread, wait| Blocking {
        probe: "innodb.rwlock.s_wait".into(),
        waiter_statement: Some(waiter.into()),
        waiter_fingerprint: Some(waiter.into()),
        holder_statement: holder.map(str::to_string),
        holder_fingerprint: holder.map(str::to_string),
        holder_connection: conn,
        holder_thread: thread,
        calls: wait / 10,
        wait_ns_total: wait,
        ..Default::default()
    };
    s.who = Some(Who {
        attributed: true,
        blocking: vec![
            edge(
                "SELECT a",
                Some("UPDATE t SET k=k+? WHERE id=?"),
                Some(31),
                None,
                500,
            ),
            edge(
                "SELECT b",
                Some("UPDATE t SET k=k+? WHERE id=?"),
                Some(31),
                None,
                300,
            ),
            edge("SELECT a", None, None, Some(4242), 200),
            Blocking {
                probe: "innodb.mutex.wait".into(),
                ..edge("SELECT a", Some("DELETE"), Some(1), None, 9_000)
            },
        ],
        ..Who::default()
    });
    let e = crate::findings::measure::holders_at(&s, "innodb.rwlock.s_wait", 2).unwrap();
    assert_eq!(
        e.text,
        "held, for the 100 waits at innodb.rwlock.s_wait tied to a holder, by: \
         80 % UPDATE t SET k=k+? WHERE id=? (connection 31); \
         20 % thread 4242 (no statement)"
    );
    assert_eq!(e.anchor, "blocking");
    // With every edge's totals (the list keeps the biggest), a background
    // holder by its role, a lock site, and holders found by release.
    let who = s.who.as_mut().unwrap();
    who.blocking_totals = vec![crate::model::who::BlockingTotal {
        probe: "innodb.rwlock.s_wait".into(),
        calls: 200,
        wait_ns_total: 2_000,
    }];
    who.blocking[0].holder_site = Some("btr0cur.cc:1234".into());
    who.blocking[2].holder_role = Some("purge coordinator".into());
    who.blocking[2].released = true;
    let e = crate::findings::measure::holders_at(&s, "innodb.rwlock.s_wait", 3).unwrap();
    assert_eq!(
        e.text,
        "held, for the 200 waits at innodb.rwlock.s_wait tied to a holder \
         (20 of them by the thread whose release ended the wait), by: \
         25 % UPDATE t SET k=k+? WHERE id=? (connection 31) at btr0cur.cc:1234; \
         15 % UPDATE t SET k=k+? WHERE id=? (connection 31); \
         10 % purge coordinator (thread 4242)"
    );
}

/// The latch hot spot's waiting statements: those counted on that latch
/// (`who.latch_statements`), with users and connections where the
/// statement is listed, by fingerprint where not; none without rows for
/// that (probe, latch).
#[test]
fn statements_on_a_latch_are_its_own_not_the_probes() {
    use crate::model::who::{LatchStatement, StatementResult, Who};
    let mut s = with_probe("innodb.rwlock.s_wait", 100, 0);
    let row = |latch: &str, id: &str, fingerprint: &str, wait| LatchStatement {
        probe: "innodb.rwlock.s_wait".into(),
        latch: latch.into(),
        statement: id.into(),
        fingerprint: fingerprint.into(),
        calls: wait / 10,
        wait_ns_total: wait,
        raw_latch: None,
    };
    s.who = Some(Who {
        attributed: true,
        statements: vec![StatementResult {
            id: "s1".into(),
            fingerprint: "SELECT c FROM t WHERE id=?".into(),
            users: vec!["app_ro".into()],
            connections: 4,
            ..Default::default()
        }],
        latch_statements: vec![
            row("buf0buf.cc:1433", "s1", "SELECT c FROM t WHERE id=?", 600),
            row(
                "buf0buf.cc:1433",
                "u9",
                "UPDATE t SET k=k+? WHERE id=?",
                200,
            ),
            // Another latch of the probe: not this one's.
            row(
                "dict0dict.cc:1107",
                "u9",
                "UPDATE t SET k=k+? WHERE id=?",
                9_000,
            ),
        ],
        ..Who::default()
    });
    let e = crate::findings::measure::statements_on_latch(
        &s,
        "innodb.rwlock.s_wait",
        "buf0buf.cc:1433",
        2,
    )
    .unwrap();
    assert_eq!(
        e.text,
        "the statements waiting on buf0buf.cc:1433: \
         75 % under SELECT c FROM t WHERE id=? (app_ro, 4 connections); \
         25 % under UPDATE t SET k=k+? WHERE id=?"
    );
    assert!(crate::findings::measure::statements_on_latch(
        &s,
        "innodb.mutex.wait",
        "buf0buf.cc:1433",
        2
    )
    .is_none());
}
