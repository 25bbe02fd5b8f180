//! The seed incidents (PRODUCT.md S1, S2, S5, S6), reproduced on real
//! servers under real load and diagnosed with the innoprof CLI the way a DBA
//! would: record a baseline, record the incident, read the tables, diff.
//!
//! Each test is also a demo (`scripts/scenario.sh s1|s2|s5|s6`): with
//! `INNOPROF_SCENARIO_OUT=DIR` the recordings are kept under DIR, and the
//! lines a DBA would read are printed (`--nocapture` shows them).
//! `INNOPROF_LONG=1` runs each load phase three times longer.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use innoprof::model::finding::{Finding, Severity};
use innoprof::model::server_state::Snapshot;
use innoprof::model::summary::CounterStatus;
use innoprof_e2e::*;

/// Seconds of one load phase, stretched by `INNOPROF_LONG=1`.
fn secs(short: u64) -> u64 {
    if std::env::var_os("INNOPROF_LONG").is_some_and(|v| v == "1") {
        short * 3
    } else {
        short
    }
}

/// Where a scenario's recordings go: kept under `INNOPROF_SCENARIO_OUT`,
/// else a temporary directory removed with it.
struct ScenarioDir {
    path: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl ScenarioDir {
    fn new(scenario: &str, server: &str) -> Self {
        match std::env::var_os("INNOPROF_SCENARIO_OUT") {
            Some(root) => {
                let path = Path::new(&root).join(format!("{scenario}-{server}"));
                let _ = std::fs::remove_dir_all(&path);
                std::fs::create_dir_all(&path).unwrap();
                Self { path, _tmp: None }
            }
            None => {
                let tmp = tempfile::tempdir().unwrap();
                Self {
                    path: tmp.path().to_path_buf(),
                    _tmp: Some(tmp),
                }
            }
        }
    }

    fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// `innoprof record` into `out` while the caller's load runs; returns the
/// summary and how much `status` (a server counter) grew while attached.
/// `Handler_update` counts rows updated in every server line (MariaDB 11.4
/// has no `Innodb_rows_updated`).
fn record_with_counter(
    server: &Server,
    args: &[&str],
    out: &Path,
    seconds: u64,
    status: &str,
) -> (Summary, u64) {
    let pid = server.pid.to_string();
    let duration = format!("{seconds}s");
    let mut full = vec!["--pid", &pid, "--duration", &duration];
    full.extend_from_slice(args);
    let mut rec = Recording::start_to(&full, out);
    rec.wait_attached();
    let before = server.status(status);
    let started = Instant::now();
    // The counter is read again when innoprof's clock says the recording
    // ends, not after it has symbolised and written everything.
    std::thread::sleep(Duration::from_secs(seconds).saturating_sub(started.elapsed()));
    let grew = server.status(status) - before;
    let (code, _stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    (rec.summary(), grew)
}

fn probe_calls(summary: &Summary, name: &str) -> u64 {
    probe(summary, name).calls
}

/// A counter's exact count (`summary.json` `counters`); it must have been read.
fn counter_count(summary: &Summary, name: &str) -> u64 {
    let c = summary
        .counters
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name} in {:?}", summary.counters));
    assert_eq!(c.status, CounterStatus::Read, "{c:?}");
    c.count.unwrap()
}

/// Shares (%) of the baseline's and the incident's on-CPU samples with a
/// frame of `function` anywhere on the stack (inlined or not), read from
/// the differential folded file of `innoprof diff` (`stack before after`).
fn diff_shares(diff_folded: &Path, function: &str) -> (f64, f64) {
    let text = std::fs::read_to_string(diff_folded).unwrap();
    let (mut all, mut with) = ([0u64; 2], [0u64; 2]);
    for line in text.lines() {
        let mut fields = line.rsplitn(3, ' ');
        let after: u64 = fields.next().unwrap().parse().unwrap();
        let before: u64 = fields.next().unwrap().parse().unwrap();
        let stack = fields.next().unwrap();
        all = [all[0] + before, all[1] + after];
        if stack.split(';').any(|f| f.starts_with(function)) {
            with = [with[0] + before, with[1] + after];
        }
    }
    let pct = |i: usize| 100.0 * with[i] as f64 / all[i].max(1) as f64;
    (pct(0), pct(1))
}

/// Calls in a count-folded file whose stack has every one of `frames`
/// (as frame-name prefixes).
fn calls_under(folded: &Path, frames: &[&str]) -> u64 {
    std::fs::read_to_string(folded)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| {
            frames
                .iter()
                .all(|want| stack.split(';').any(|f| f.starts_with(want)))
        })
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

/// A finding's evidence, its items' texts one a line.
fn evidence_text(f: &Finding) -> String {
    f.evidence
        .iter()
        .map(|e| e.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A recording's (or a diff's) findings as (rule, severity), printed with
/// their evidence.
fn findings_of(what: &str, all: &[Finding]) -> Vec<(String, Severity)> {
    for f in all {
        println!(
            "{what}: [{}] {} {:?}",
            f.severity,
            f.title,
            f.evidence.iter().map(|e| &e.text).collect::<Vec<_>>()
        );
    }
    if all.is_empty() {
        println!("{what}: no finding");
    }
    all.iter().map(|f| (f.rule.clone(), f.severity)).collect()
}

/// diff.json's findings, typed (diff.json itself is read as raw JSON: its
/// report type is not deserialisable).
fn diff_findings(diff: &serde_json::Value) -> Vec<Finding> {
    serde_json::from_value(diff["findings"].clone())
        .unwrap_or_else(|e| panic!("diff.json findings: {e}: {}", diff["findings"]))
}

/// `rule` fired above info.
fn raised(findings: &[(String, Severity)], rule: &str) -> bool {
    findings
        .iter()
        .any(|(r, s)| r == rule && *s != Severity::Info)
}

/// The first finding is `rule`, above info: what the DBA reads first.
fn first_is(findings: &[(String, Severity)], rule: &str) {
    assert!(
        findings
            .first()
            .is_some_and(|(r, s)| r == rule && *s != Severity::Info),
        "the first finding should be {rule}: {findings:?}"
    );
}

/// Runs `innoprof diff`, returns diff.json and prints diff.txt's head.
fn diff(baseline: &Path, incident: &Path, out: &Path, lines: usize) -> serde_json::Value {
    let o = run_innoprof(&[
        "diff",
        baseline.to_str().unwrap(),
        incident.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    println!(
        "{}",
        text.lines().take(lines).collect::<Vec<_>>().join("\n")
    );
    read_json(&out.join("diff.json"))
}

// ---------------------------------------------------------------------------
// S1 + S6: a hot row and a long REPEATABLE READ snapshot (seed 003)
// ---------------------------------------------------------------------------

/// What S1 records in one phase (baseline or incident).
struct RowVersionsPhase {
    probes: Summary,
    rows_updated: u64,
    /// The connection holding the oldest transaction as the recording
    /// ended (the incident's snapshot reader), by the server's own view.
    oldest_trx_connection: Option<u64>,
}

/// The default set: it holds the undo walk (`innodb.undo.prev_version`,
/// `default = true` in every catalog) and `innodb.row_vers.consistent_read`,
/// so the climb shows as a probe in a default recording (issue 12, item 7),
/// under the default 1 % governor: on MariaDB 11.4.5 the incident's undo
/// probe (~500k calls in 4 s fully on) is cut after its first window and
/// still shows 3 -> 5,101 calls seen (x2,900 per row updated; 3 -> 523,081
/// with the governor off).
const UNDO_PROBES: &str = "default";

/// sysbench `oltp_update_non_index` on a 1-row table, and a reader selecting
/// that row ten times a second, in a snapshot held open (`incident`) or in
/// autocommit statements (baseline). Records CPU only (as `operf` would),
/// then the undo probes.
///
/// The seed used update_index; with a secondary index on the updated
/// column, purge also walks the hot row's versions (checking whether old
/// secondary-index entries may go): 2.5 to 47 calls per updated row in
/// baselines on MySQL 5.6, MariaDB 11.4 and MySQL 8.0, varying 10x between
/// runs, which drowns the walk the seed is about: the snapshot's SELECT.
fn row_versions_phase(
    server: &Server,
    dir: &ScenarioDir,
    phase: &str,
    incident: bool,
) -> RowVersionsPhase {
    let mut sysbench = server.sysbench(&[
        "run",
        "oltp_update_non_index",
        "--tables=1",
        "--table-size=1",
        "--threads=2",
        "--time=300",
    ]);
    sysbench.stdout(Stdio::null()).stderr(Stdio::null());
    let load = Background::spawn(sysbench);
    let mut reader = String::new();
    if incident {
        reader.push_str("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n");
    }
    for _ in 0..3000 {
        reader.push_str("SELECT c FROM sbtest1 LIMIT 1; SELECT SLEEP(0.1);\n");
    }
    let reader = server.sql_background(&format!("USE sbtest;\n{reader}"));
    // Let the history build up (incident) and the load settle.
    std::thread::sleep(Duration::from_secs(2));
    record_with_counter(
        server,
        &["--probes", "none", "--freq", "499"],
        &dir.join(&format!("{phase}-cpu")),
        secs(4),
        "Handler_update",
    );
    let (probes, rows_updated) = record_with_counter(
        server,
        // --interval: the server's cheap state every second as well.
        &[
            "--probes",
            UNDO_PROBES,
            "--no-cpu",
            "--max-overhead",
            "1",
            "--interval",
            "1s",
        ],
        &dir.join(phase),
        secs(4),
        "Handler_update",
    );
    let oldest_trx_connection = server
        .sql("SELECT trx_mysql_thread_id FROM information_schema.innodb_trx ORDER BY trx_started LIMIT 1")
        .trim()
        .parse()
        .ok();
    drop(reader);
    drop(load);
    assert!(
        rows_updated > 100,
        "{phase}: sysbench updated {rows_updated} rows"
    );
    RowVersionsPhase {
        probes,
        rows_updated,
        oldest_trx_connection,
    }
}

fn many_row_versions(server_name: &str) {
    let _k = kernel_lock();
    let dir = ScenarioDir::new("s1", server_name);
    // MySQL 8.0 logs binlog by default: with_hot_row turns its flushes off.
    let server = Server::with_hot_row(server_name);

    let base = row_versions_phase(&server, &dir, "baseline", false);
    let inc = row_versions_phase(&server, &dir, "incident", true);

    // S1: undo version builds per updated row.
    let undo = "innodb.undo.prev_version";
    let (b_calls, i_calls) = (
        probe_calls(&base.probes, undo),
        probe_calls(&inc.probes, undo),
    );
    // Under the default governor the undo probe may be cut for part of
    // the phase (its calls are those seen while on): compare with the rows
    // updated while it was on, the steady load's rows x the probe's
    // attached fraction. A baseline with no call at all counts as one, so
    // the factor is finite.
    let on = |s: &Summary| probe(s, undo).attached_fraction();
    let b_per_row = b_calls.max(1) as f64 / (base.rows_updated as f64 * on(&base.probes));
    let i_per_row = i_calls as f64 / (inc.rows_updated as f64 * on(&inc.probes));
    let factor = i_per_row / b_per_row;
    println!(
        "S1 {server_name}: trx_undo_prev_version_build {b_calls} calls / {} rows updated \
         = {b_per_row:.5} per row (baseline) -> {i_calls} / {} = {i_per_row:.2} per row \
         (open snapshot): x{factor:.0}",
        base.rows_updated, inc.rows_updated
    );
    // Measured x120,000 (MySQL 8.0.15) to x18,000,000 (MariaDB 11.4.5).
    assert!(
        factor > 1000.0,
        "undo version builds per updated row grew only x{factor:.1} ({b_per_row} -> {i_per_row})"
    );

    // Its stacks reach the consistent-read path of the SELECT in the
    // snapshot (all of them here; purge would walk versions too if the
    // updated column were indexed).
    let read_path = ["row_search", "row_vers_build_for_consistent_read"];
    let folded = |phase: &str| dir.join(phase).join(format!("{undo}.count.folded"));
    let (b_read, i_read) = (
        calls_under(&folded("baseline"), &read_path),
        calls_under(&folded("incident"), &read_path),
    );
    // Per row updated while the probe was on, as for the factor above: a
    // 4 s incident recording may see the cut probe for its first 50 ms only.
    let read_factor = (i_read as f64 / (inc.rows_updated as f64 * on(&inc.probes)))
        / (b_read.max(1) as f64 / (base.rows_updated as f64 * on(&base.probes)));
    println!(
        "S1 {server_name}: under row_search*;row_vers_build_for_consistent_read: {b_read} -> {i_read} of {i_calls} calls (x{read_factor:.0} per row updated)"
    );
    assert!(
        i_read * 4 > i_calls && read_factor > 1000.0,
        "consistent-read version builds: {b_read} -> {i_read} of {i_calls}"
    );

    // `innodb diff` puts it first among the wait probes that changed.
    let d = diff(
        &dir.join("baseline"),
        &dir.join("incident"),
        &dir.join("diff"),
        8,
    );
    assert_eq!(d["probes"][0]["name"], undo, "{}", d["probes"]);

    // The findings say it first, in the incident and in the diff, and not
    // in the baseline.
    first_is(
        &findings_of(&format!("S1 {server_name} incident"), &inc.probes.findings),
        "many_row_versions",
    );
    // It names the connection whose snapshot holds purge back, as the
    // server itself lists it (read by innoprof over the server's socket).
    let holder = inc
        .oldest_trx_connection
        .expect("the incident's snapshot is an open transaction");
    let title = &inc.probes.findings[0].title;
    assert!(
        title.contains(&format!(
            "connection {holder} has kept a REPEATABLE READ transaction open"
        )),
        "{title}"
    );
    let state = inc
        .probes
        .server_state
        .as_ref()
        .expect("the incident read the server's state");
    assert!(state.error.is_none(), "{state:?}");
    let snapshot = |snap: &str, s: &Option<Snapshot>| -> Option<u64> {
        let s = s
            .as_ref()
            .unwrap_or_else(|| panic!("no {snap} snapshot: {state:?}"));
        assert!(s.errors.is_empty(), "{snap}: {state:?}");
        assert!(s.history_list_length.is_some(), "{state:?}");
        s.history_list_length
    };
    let (start_hll, end_hll) = (snapshot("start", &state.start), snapshot("end", &state.end));
    assert!(end_hll > start_hll, "purge held back: {state:?}");
    // And at each second in between: the same connection holds the oldest
    // transaction, open longer each time, while the history list grows.
    let samples = &state.samples;
    assert!(!samples.is_empty(), "--interval samples: {state:?}");
    assert!(samples.len() + 1 >= secs(4) as usize, "{state:?}");
    for p in samples {
        assert!(p.errors.is_empty(), "{p:?}");
        assert_eq!(p.oldest_trx_connection, Some(holder), "{p:?}");
    }
    let (first, last) = (&samples[0], &samples[samples.len() - 1]);
    assert!(
        last.oldest_trx_age_s > first.oldest_trx_age_s
            && last.history_list_length > first.history_list_length,
        "{samples:?}"
    );
    assert!(
        std::fs::read_to_string(dir.join("incident").join("summary.txt"))
            .unwrap()
            .contains("  at each interval ("),
        "summary.txt has the samples' line"
    );
    let base_findings = findings_of(&format!("S1 {server_name} baseline"), &base.probes.findings);
    // The healthy hot-row load (the demo's baseline, innodb_flush_log_at_
    // trx_commit=2): no rule raises more than info on it.
    assert!(
        base_findings.iter().all(|(_, s)| *s == Severity::Info),
        "{base_findings:?}"
    );
    first_is(
        &findings_of(&format!("S1 {server_name} diff"), &diff_findings(&d)),
        "many_row_versions",
    );

    // S6: the oprofile-style CPU table of the same pair, no probes attached.
    let dc = diff(
        &dir.join("baseline-cpu"),
        &dir.join("incident-cpu"),
        &dir.join("diff-cpu"),
        16,
    );
    // Sampled, no probe attached: the version walk's functions were absent
    // from the baseline and take 14-26 % of the incident's samples on 5.6,
    // 10.2 and 11.4. MySQL 8.0's dedicated log threads spin (log_writer,
    // ut_delay: 35-50 % of all samples on a busy 2-core host), which
    // dilutes the walk to 3.8-5.2 % there; the climb from nothing is the
    // signal, so the floor is 2 %.
    for f in [
        "row_vers_build_for_consistent_read",
        "trx_undo_prev_version_build",
    ] {
        let (b, i) = diff_shares(&dir.join("diff-cpu").join("diff.oncpu.folded"), f);
        println!("S6 {server_name}: {f} on-CPU total {b:.2} % -> {i:.2} %");
        assert!(
            b < 1.0 && i > 2.0,
            "{f}: {b:.2} % -> {i:.2} % of on-CPU samples"
        );
    }
    // Every function in the diff's table keeps its module: each recording
    // keeps it for its 50 heaviest, and for every other function with
    // >= 0.1 % of its samples (self or total), which every row with a
    // visible share has in one of them; the undo walk's is the server's
    // (where it made the table: not on 8.0, diluted).
    let rows = dc["profiles"][0]["symbols"].as_array().unwrap();
    let server_module = |r: &serde_json::Value| {
        ["mysqld", "mariadbd"].contains(&r["module"].as_str().unwrap_or_default())
    };
    assert!(rows.iter().any(server_module), "{}", dc["profiles"][0]);
    // "[unknown]" pools every frame no module could name (it has no one
    // module): the last CI run had it at 0.48 % on MySQL 5.6.24.
    for r in rows.iter().filter(|r| r["symbol"] != "[unknown]") {
        let share = [
            "baseline_self_pct",
            "incident_self_pct",
            "baseline_total_pct",
            "incident_total_pct",
        ]
        .iter()
        .map(|k| r[*k].as_f64().unwrap())
        .fold(0.0, f64::max);
        assert!(
            share < 0.1 || !r["module"].as_str().unwrap().is_empty(),
            "no module for {r}"
        );
    }
    if let Some(walk_row) = rows.iter().find(|r| {
        r["symbol"]
            .as_str()
            .unwrap()
            .starts_with("trx_undo_prev_version_build")
    }) {
        assert!(server_module(walk_row), "{walk_row}");
    }
    let dc_findings = diff_findings(&dc);
    let cpu_findings = findings_of(&format!("S6 {server_name} CPU diff"), &dc_findings);
    // Where CPU moved, by subsystem: the undo walk, first, except on 8.0
    // whose spinning log threads dilute it (above). The one finding it
    // may follow is latch spinning: readers walking versions hold the
    // page latches that writers then spin on (MySQL 5.6.24 under a loaded
    // host: undo and MVCC +13 points, latch spinning +13 points).
    if server_name != "mysql-8.0.15" {
        first_is(&cpu_findings, "cpu_hot_path");
        let walk = dc_findings
            .iter()
            .position(|f| f.rule == "cpu_hot_path" && f.title.contains("undo and MVCC"))
            .unwrap_or_else(|| panic!("no undo and MVCC finding: {dc_findings:?}"));
        assert!(
            walk == 0 || (walk == 1 && dc_findings[0].title.contains("latch spinning")),
            "{dc_findings:?}"
        );
    }
}

#[test]
fn s1_s6_many_row_versions_mariadb_10_2_11() {
    many_row_versions("mariadb-10.2.11");
}

#[test]
fn s1_s6_many_row_versions_mysql_5_6_24() {
    many_row_versions("mysql-5.6.24");
}

#[test]
fn s1_s6_many_row_versions_mariadb_11_4_5() {
    many_row_versions("mariadb-11.4.5");
}

/// MySQL 8.0.15 is stripped to `.dynsym`, where InnoDB's functions are
/// exported: the undo probes and the stacks' InnoDB frames resolve.
#[test]
fn s1_s6_many_row_versions_mysql_8_0_15() {
    many_row_versions("mysql-8.0.15");
}

/// Issue 52: a transaction holding purge back is a finding before any read
/// walks its versions. One sysbench thread updates a 1-row table while
/// another connection keeps a consistent snapshot open and idle; nothing
/// reads the row. The finding names that connection (as the server lists
/// it) and the history list's growth, which the server's own counter shows.
fn purge_held_back(server_name: &str) {
    let _k = kernel_lock();
    let server = Server::with_hot_row(server_name);
    let (_holder, _open) = server.sql_session(
        "USE sbtest;\nSTART TRANSACTION WITH CONSISTENT SNAPSHOT;\nSELECT CONNECTION_ID();\n",
    );
    // The holder is the oldest transaction once its snapshot is open.
    let deadline = Instant::now() + Duration::from_secs(20);
    let holder: u64 = loop {
        let id = server.sql(
            "SELECT trx_mysql_thread_id FROM information_schema.innodb_trx ORDER BY trx_started LIMIT 1",
        );
        if let Ok(id) = id.trim().parse() {
            break id;
        }
        assert!(Instant::now() < deadline, "the snapshot never opened");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut sysbench = server.sysbench(&[
        "run",
        "oltp_update_non_index",
        "--tables=1",
        "--table-size=1",
        "--threads=1",
        "--time=300",
    ]);
    sysbench.stdout(Stdio::null()).stderr(Stdio::null());
    let load = Background::spawn(sysbench);
    std::thread::sleep(Duration::from_secs(1));
    let pid = server.pid.to_string();
    let (code, stdout, rec) = Recording::start(&[
        "--pid",
        &pid,
        "--duration",
        "10s",
        "--probes",
        "default",
        "--no-cpu",
    ])
    .finish();
    drop(load);
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let s = rec.summary();
    let state = s
        .server_state
        .as_ref()
        .expect("the server's state was read");
    let (start, end) = state.history_list_lengths();
    println!("purge held back {server_name}: history list {start:?} -> {end:?}\n{stdout}");
    let f = s
        .findings
        .iter()
        .find(|f| f.rule == "purge_held_back")
        .unwrap_or_else(|| panic!("no purge_held_back finding: {:?}\n{stdout}", s.findings));
    assert!(
        f.title.contains(&format!("connection {holder} ")),
        "holder {holder}: {}",
        f.title
    );
    assert!(
        end.unwrap() >= start.unwrap() + 10_000,
        "{start:?} -> {end:?}"
    );
    assert!(
        !s.findings.iter().any(|f| f.rule == "many_row_versions"),
        "nothing read the row: {:?}",
        s.findings
    );
}

#[test]
fn purge_held_back_mariadb_11_4_5() {
    purge_held_back("mariadb-11.4.5");
}

#[test]
fn purge_held_back_mysql_5_6_24() {
    purge_held_back("mysql-5.6.24");
}

// ---------------------------------------------------------------------------
// S2: INSERTs into a table without a primary key (seed 000)
// ---------------------------------------------------------------------------

/// One S2 run: 16 connections, 3,000 multi-row INSERTs (9,000 with
/// `INNOPROF_LONG=1`) of 20 rows.
fn s2_events() -> u64 {
    secs(1) * 3000
}
const S2_ROWS_PER_INSERT: u64 = 20;

/// Tables each kind of S2 run inserts into, one per connection: `t_nopk1`
/// ... `t_nopk16`. Into one table, the 16 connections queued on its last
/// page or its index lock (5.6.24: 4-5 threads waiting, 8 with a primary
/// key too) far more than on the dictionary mutex, which is not what
/// seed 000 is about: the row-id counter is shared by every table without
/// a primary key, server-wide.
const S2_TABLES: u32 = 16;

/// `SELECT` of the rows in the S2 tables named `prefix`1..N, together.
fn s2_count_rows(prefix: &str) -> String {
    let parts: Vec<String> = (1..=S2_TABLES)
        .map(|i| format!("SELECT COUNT(*) AS n FROM sbtest.{prefix}{i}"))
        .collect();
    format!("SELECT SUM(n) FROM ({}) AS t", parts.join(" UNION ALL "))
}

/// Records while `insert_rows.lua` inserts a fixed number of rows into
/// the tables `table`1..N; returns the summary and the rows they gained.
fn insert_rows(server: &Server, dir: &ScenarioDir, table: &str, probes: &str) -> (Summary, u64) {
    let before: u64 = server.sql(&s2_count_rows(table)).trim().parse().unwrap();
    let pid = server.pid.to_string();
    // Long enough for any load here; ended by SIGINT once the load is done.
    let mut rec = Recording::start_to(
        &[
            "--pid",
            &pid,
            "--duration",
            "120s",
            "--probes",
            probes,
            "--no-cpu",
        ],
        &dir.join(table),
    );
    rec.wait_attached();
    let script = repo_root().join("tests/fixture/insert_rows.lua");
    server.sysbench_ok(&[
        "run",
        script.to_str().unwrap(),
        &format!("--table={table}"),
        &format!("--tables={S2_TABLES}"),
        &format!("--rows-per-insert={S2_ROWS_PER_INSERT}"),
        "--threads=16",
        "--time=0",
        &format!("--events={}", s2_events()),
    ]);
    rec.signal(libc::SIGINT);
    let (code, _stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let after: u64 = server.sql(&s2_count_rows(table)).trim().parse().unwrap();
    (rec.summary(), after - before)
}

/// dict_sys mutex waits of a recording: contended `mutex_spin_wait` calls
/// whose caller is dict0boot.ic (MySQL 5.6: the mutex_enter inside
/// dict_sys_get_new_row_id), or sync-array waits whose stack passes through
/// the inlined dict_sys_get_new_row_id (MariaDB 10.2, where the spin is
/// inlined too and only the OS wait is a function).
fn dict_sys_row_id_waits(summary: &Summary, dir: &Path) -> u64 {
    let mut waits = 0;
    for p in &summary.probes {
        if p.name == "innodb.mutex.wait" {
            let sites: Vec<&CallsiteResult> = p
                .callsites
                .iter()
                .filter(|c| c.site.starts_with("dict0boot.ic:"))
                .collect();
            // The mutex itself, read from the object: the one dict_init
            // creates (dict_sys->mutex), not just a caller in dict0boot.ic.
            for c in &sites {
                let latch = c.latch.as_deref().unwrap_or_default();
                assert!(
                    latch.starts_with("created in dict_init (dict0dict.cc:"),
                    "{c:?}"
                );
            }
            waits += sites.iter().map(|c| c.calls).sum::<u64>();
        }
        if p.name == "innodb.sync.wait_event" {
            let folded = std::fs::read_to_string(dir.join("innodb.sync.wait_event.count.folded"))
                .unwrap_or_default();
            waits += folded
                .lines()
                .filter(|l| l.contains("dict_sys_get_new_row_id"))
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum::<u64>();
        }
    }
    waits
}

/// `waits_visible`: whether the dict_sys mutex's contended path is a
/// function a probe sees (MySQL 5.6: `mutex_spin_wait`), not only inlined.
fn tables_without_primary_key(server_name: &str, wait_probes: &str, waits_visible: bool) {
    let _k = kernel_lock();
    let dir = ScenarioDir::new("s2", server_name);
    // No thread cache: every connection is a new thread, which a uprobe
    // scoped to the server's PID once missed entirely (see attach.rs).
    // No automatic statistics recalculation: 60,000 rows into 32 fresh
    // tables made the stats thread save statistics again and again, each
    // save under dict_operation_lock in X mode (dict_stats_save), and once
    // in CI the purge thread's S waits on it (row0purge.cc:852) reached
    // 0.26 threads waiting in the recording without primary keys only: a
    // latch finding of a background thread's, ranked first in the diff by
    // chance, which this scenario is not about.
    let server = Server::start(
        server_name,
        &[
            "--innodb-flush-log-at-trx-commit=2",
            "--thread-cache-size=0",
            "--innodb-stats-auto-recalc=0",
        ],
    );
    let create: String = (1..=S2_TABLES)
        .map(|i| {
            format!(
                "CREATE TABLE sbtest.t_nopk{i} (k INT NOT NULL, c CHAR(60) NOT NULL) ENGINE=InnoDB; \
                 CREATE TABLE sbtest.t_pk{i} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                                              k INT NOT NULL, c CHAR(60) NOT NULL) ENGINE=InnoDB; "
            )
        })
        .collect();
    server.sql(&create);
    // The default set includes the row-id counter (read from memory, no
    // probe); the inline-site probe counts the same allocations by trapping.
    let probes = format!("default,innodb.dict_sys.row_id,{wait_probes}");
    let (nopk, nopk_rows) = insert_rows(&server, &dir, "t_nopk", &probes);
    let (pk, pk_rows) = insert_rows(&server, &dir, "t_pk", &probes);
    let row_id = "innodb.dict_sys.row_id";
    let (nopk_ids, pk_ids) = (probe_calls(&nopk, row_id), probe_calls(&pk, row_id));
    let (nopk_counted, pk_counted) = (
        counter_count(&nopk, "innodb.dict_sys.row_ids"),
        counter_count(&pk, "innodb.dict_sys.row_ids"),
    );
    let (nopk_waits, pk_waits) = (
        dict_sys_row_id_waits(&nopk, &dir.join("t_nopk")),
        dict_sys_row_id_waits(&pk, &dir.join("t_pk")),
    );
    println!(
        "S2 {server_name}: without a primary key {nopk_rows} rows inserted, {nopk_ids} row ids \
         allocated (probe), {nopk_counted} (counter), {nopk_waits} dict_sys mutex waits; with one \
         {pk_rows} rows, {pk_ids} row ids (probe), {pk_counted} (counter), {pk_waits} waits"
    );
    for line in std::fs::read_to_string(dir.join("t_nopk").join("summary.txt"))
        .unwrap()
        .lines()
    {
        if line.contains("row_id")
            || line.contains("dict0boot")
            || line.starts_with("| probe")
            || line.starts_with("| counter")
        {
            println!("{line}");
        }
    }
    // Every row of a table without a usable primary key takes one row id,
    // while the recording watches; the server's own tables all have keys,
    // so nothing else allocates one (exactness was seen in every run).
    assert_eq!(nopk_rows, s2_events() * S2_ROWS_PER_INSERT);
    // The server's own row-id counter, read at start and end of a default
    // recording: exact, with no probe on the path.
    assert_eq!(
        nopk_counted, nopk_rows,
        "row-id counter delta equals the rows inserted without a primary key"
    );
    assert_eq!(
        pk_counted, 0,
        "the row-id counter stands still with a primary key"
    );
    assert_eq!(
        nopk_ids, nopk_rows,
        "one row id per row inserted without a primary key"
    );
    assert_eq!(pk_rows, nopk_rows);
    assert_eq!(pk_ids, 0, "no row id is allocated with a primary key");
    assert_eq!(
        pk_waits, 0,
        "dict_sys row-id waits without row-id allocations"
    );
    // The finding: raised in the recording without a primary key, absent
    // with one, and first in the diff of the two (what changed when the
    // tables lost their key). Not always first in the recording alone: on
    // this 2-core VM the dictionary mutex itself barely queues (0-70 waits
    // per 60,000 rows), while 16 connections inserting row by row queue on
    // the redo log mutex (5.6.24: ~1 thread waiting, 2.5 with primary keys,
    // where rows go in faster), which the latch finding rightly ranks above
    // it, and which is in both recordings.
    let without_pk = findings_of(
        &format!("S2 {server_name} without a primary key"),
        &nopk.findings,
    );
    let with_pk = findings_of(
        &format!("S2 {server_name} with a primary key"),
        &pk.findings,
    );
    assert!(
        raised(&without_pk, "tables_without_primary_key"),
        "{without_pk:?}"
    );
    // Named by table, from the server's dictionary (GEN_CLUST_INDEX) and
    // its rows-changed counter, read over its socket.
    let f = nopk
        .findings
        .iter()
        .find(|f| f.rule == "tables_without_primary_key")
        .unwrap();
    assert!(
        f.title
            .contains(&format!("Inserts into {S2_TABLES} tables (sbtest.t_nopk")),
        "{f:?}"
    );
    assert!(f.next[0].contains("ALTER TABLE sbtest.t_nopk"), "{f:?}");
    assert!(
        with_pk
            .iter()
            .all(|(r, _)| r != "tables_without_primary_key"),
        "{with_pk:?}"
    );
    let d = diff(&dir.join("t_pk"), &dir.join("t_nopk"), &dir.join("diff"), 8);
    first_is(
        &findings_of(&format!("S2 {server_name} diff"), &diff_findings(&d)),
        "tables_without_primary_key",
    );
    if waits_visible {
        // 8-16 connections on 2 CPUs: 1-20 contended entries per 20,000 rows
        // seen, hence 60,000 rows.
        assert!(
            nopk_waits > 0,
            "no dict_sys mutex wait while allocating {nopk_ids} row ids"
        );
    }
}

#[test]
fn s2_tables_without_primary_key_mysql_5_6_24() {
    tables_without_primary_key("mysql-5.6.24", "innodb.mutex.wait", true);
}

#[test]
fn s2_tables_without_primary_key_mariadb_10_2_11() {
    // The dict_sys mutex_enter, spin included, is inlined into row_ins_step:
    // only a wait that reaches the OS (sync_array_wait_event) is visible,
    // and none did in any run here (8-16 connections, 2 CPUs).
    tables_without_primary_key("mariadb-10.2.11", "innodb.sync.wait_event", false);
}

// ---------------------------------------------------------------------------
// S4: performance_schema timing everything (seed 001)
// ---------------------------------------------------------------------------

/// oltp_read_only with performance_schema as shipped, then with every
/// instrument enabled and timed and every consumer on (what seed 001
/// measured at 4-20 % of throughput): the finding is info first, then a
/// warning ranked first, naming the latch timers, with innoprof's own
/// cost beside it.
#[test]
fn s4_performance_schema_all_timed_mysql_5_6_24() {
    let _k = kernel_lock();
    let dir = ScenarioDir::new("s4", "mysql-5.6.24");
    let server = Server::start("mysql-5.6.24", &[]);
    server.prepare("oltp_read_only");
    let load = server.sysbench_load("oltp_read_only", 2, (8 + 2 * secs(4) + 8) as u32);
    std::thread::sleep(Duration::from_secs(2));
    let (base, base_selects) = record_with_counter(
        &server,
        &["--probes", "default"],
        &dir.join("baseline"),
        secs(4),
        "Com_select",
    );
    server.sql(
        "UPDATE performance_schema.setup_instruments SET ENABLED='YES', TIMED='YES'; \
         UPDATE performance_schema.setup_consumers SET ENABLED='YES'",
    );
    let (inc, inc_selects) = record_with_counter(
        &server,
        &["--probes", "default"],
        &dir.join("incident"),
        secs(4),
        "Com_select",
    );
    load.join().unwrap();
    println!(
        "S4: {} -> {} SELECTs/s with every instrument timed; innoprof's probes {:.2} % of a core (estimate)",
        base_selects / secs(4),
        inc_selects / secs(4),
        inc.overhead.probes_pct_of_core
    );
    let base_findings = findings_of("S4 shipped performance_schema", &base.findings);
    assert!(
        !raised(&base_findings, "performance_schema_overhead"),
        "{base_findings:?}"
    );
    assert!(
        base_findings
            .iter()
            .any(|(r, _)| r == "performance_schema_overhead"),
        "performance_schema ON is said, as info: {base_findings:?}"
    );
    let found = findings_of("S4 all timed", &inc.findings);
    first_is(&found, "performance_schema_overhead");
    let f = &inc.findings[0];
    let pfs = inc
        .server_state
        .as_ref()
        .and_then(|s| s.end.as_ref())
        .and_then(|end| end.performance_schema.as_ref())
        .expect("performance_schema's state at the end");
    assert!(pfs.synch_timed > 100, "{pfs:?}");
    assert_eq!(pfs.timed, pfs.instruments, "{pfs:?}");
    let evidence = evidence_text(f);
    assert!(evidence.contains("mutex/rw-lock/condition timers"), "{f:?}");
    // Its own functions, in the server's CPU samples, and innoprof's cost beside.
    assert!(
        evidence.contains("of the server's CPU samples are in performance_schema's own functions"),
        "{f:?}"
    );
    assert!(
        evidence.contains("innoprof, for comparison: its probes cost"),
        "{f:?}"
    );
}

// ---------------------------------------------------------------------------
// S5: redo log write latency, apart from data-file I/O (seed 004)
// ---------------------------------------------------------------------------

/// cgroup v1 blkio limits of the root group: every writer is under it,
/// the kernel's writeback and ext4 journal threads included.
const BLKIO_WRITE_IOPS: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device";

/// An ext4 filesystem on a loop device backed by a file in RAM (/dev/shm):
/// fsync costs microseconds and does not vary with the VM's disk, so the
/// only change between two recordings is the one the test makes. Its writes
/// can be limited to N per second, which turns it into a slow disk (each
/// write waits ~1/N s for its turn). Undone on drop, also when a test fails.
struct RamDisk {
    image: PathBuf,
    device: String,
    /// `major:minor`
    dev_id: String,
    mount: PathBuf,
}

impl RamDisk {
    fn create(name: &str) -> Self {
        let tag = format!("innoprof-{name}-{}", std::process::id());
        let image = Path::new("/dev/shm").join(format!("{tag}.img"));
        let mount = std::env::temp_dir().join(&tag);
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        let out = run("losetup", &["--find", "--show", image.to_str().unwrap()]);
        let device = out.trim().to_string();
        // From here on, Drop undoes whatever was set up.
        let mut disk = Self {
            image,
            device,
            dev_id: String::new(),
            mount,
        };
        run("mkfs.ext4", &["-q", &disk.device]);
        run("mount", &[&disk.device, disk.mount.to_str().unwrap()]);
        let rdev = run("stat", &["-L", "-c", "%t:%T", &disk.device]);
        let (major, minor) = rdev.trim().split_once(':').unwrap();
        disk.dev_id = format!(
            "{}:{}",
            u32::from_str_radix(major, 16).unwrap(),
            u32::from_str_radix(minor, 16).unwrap()
        );
        disk
    }

    fn path(&self) -> &Path {
        &self.mount
    }

    /// Limits writes to `iops` a second (0 lifts the limit).
    fn throttle_writes(&self, iops: u32) {
        std::fs::write(BLKIO_WRITE_IOPS, format!("{} {iops}", self.dev_id)).unwrap_or_else(|e| {
            panic!("{BLKIO_WRITE_IOPS}: {e} (needs root and cgroup v1 blkio with throttling)")
        });
    }
}

impl Drop for RamDisk {
    fn drop(&mut self) {
        if !self.dev_id.is_empty() {
            let _ = std::fs::write(BLKIO_WRITE_IOPS, format!("{} 0", self.dev_id));
        }
        let mount = self.mount.to_str().unwrap();
        let unmounted = (0..20).any(|_| {
            let ok = Command::new("umount")
                .arg(mount)
                .status()
                .is_ok_and(|s| s.success())
                || !is_mounted(&self.mount);
            if !ok {
                std::thread::sleep(Duration::from_millis(250));
            }
            ok
        });
        if !unmounted {
            let _ = Command::new("umount").args(["-l", mount]).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mount);
    }
}

fn is_mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == path.to_str())
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (calls, mean ns) of `innodb.file.flush` split by stack: redo fsyncs
/// (a `log_*` frame of the redo writer) and the others (data files).
/// The fsync function is shared by both; only the stack tells them apart.
fn file_flush_by_kind(dir: &Path) -> [(u64, f64); 2] {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let (by_wait, by_count) = (
        read("innodb.file.flush.folded"),
        read("innodb.file.flush.count.folded"),
    );
    let mut sums = [(0u64, 0u64); 2];
    for (text, is_wait) in [(&by_wait, true), (&by_count, false)] {
        for line in text.lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            let redo = stack.split(';').any(|f| f.starts_with("log_"));
            let s = &mut sums[usize::from(!redo)];
            if is_wait {
                s.1 += n;
            } else {
                s.0 += n;
            }
        }
    }
    sums.map(|(calls, ns)| {
        (
            calls,
            if calls > 0 {
                ns as f64 / calls as f64
            } else {
                0.0
            },
        )
    })
}

/// Share of a probe's calls that took at least `ns`, from its histogram.
fn share_at_least(summary: &Summary, name: &str, ns: u64) -> f64 {
    let hist = &probe(summary, name).histogram;
    let all: u64 = hist.iter().map(|b| b.count).sum();
    let slow: u64 = hist
        .iter()
        .filter(|b| b.low_ns >= ns)
        .map(|b| b.count)
        .sum();
    slow as f64 / all.max(1) as f64
}

/// Injected: 100 writes a second on the redo disk, 10 ms a write.
const REDO_IOPS: u32 = 100;
const SLOW_NS: u64 = 8_000_000;

fn redo_log_latency(server_name: &str, redo_flush_probe: Option<&str>) {
    let _k = kernel_lock();
    let dir = ScenarioDir::new("s5", server_name);
    // Declared before the server: dropped (unmounted) after it stops.
    let data_disk = RamDisk::create("data");
    let redo_disk = RamDisk::create("redo");
    let log_dir = format!("--innodb-log-group-home-dir={}", redo_disk.path().display());
    let server = Server::start_under(
        server_name,
        data_disk.path(),
        &[&log_dir, "--innodb-flush-log-at-trx-commit=1"],
    );
    server.sysbench_ok(&["prepare", "oltp_write_only"]);
    let mut sysbench = server.sysbench(&["run", "oltp_write_only", "--threads=1", "--time=300"]);
    sysbench.stdout(Stdio::null()).stderr(Stdio::null());
    let _load = Background::spawn(sysbench);
    std::thread::sleep(Duration::from_secs(1));

    let probes = [
        "--probes",
        "innodb.redo.*,innodb.file.*,sql.commit",
        "--no-cpu",
    ];
    let (base, base_commits) = record_with_counter(
        &server,
        &probes,
        &dir.join("baseline"),
        secs(5),
        "Com_commit",
    );
    redo_disk.throttle_writes(REDO_IOPS);
    std::thread::sleep(Duration::from_secs(1));
    let (slow, slow_commits) = record_with_counter(
        &server,
        &probes,
        &dir.join("slow-redo"),
        secs(5),
        "Com_commit",
    );
    redo_disk.throttle_writes(0);

    for (phase, recording, commits) in [
        ("baseline", "baseline", base_commits),
        ("slow redo", "slow-redo", slow_commits),
    ] {
        println!("S5 {server_name} {phase}: {commits} commits");
        let text = std::fs::read_to_string(dir.join(recording).join("summary.txt")).unwrap();
        let wanted = ["| probe ", "| innodb.redo", "| innodb.file", "| sql.commit"];
        for line in text
            .lines()
            .filter(|l| wanted.iter().any(|w| l.starts_with(w)))
            .take(6)
        {
            println!("{line}");
        }
    }
    let [(b_redo_n, b_redo), (b_data_n, b_data)] = file_flush_by_kind(&dir.join("baseline"));
    let [(s_redo_n, s_redo), (s_data_n, s_data)] = file_flush_by_kind(&dir.join("slow-redo"));
    println!(
        "S5 {server_name}: redo fsync mean {:.3} ms ({b_redo_n} calls) -> {:.3} ms ({s_redo_n}); \
         data-file fsync mean {:.3} ms ({b_data_n}) -> {:.3} ms ({s_data_n})",
        b_redo / 1e6,
        s_redo / 1e6,
        b_data / 1e6,
        s_data / 1e6
    );
    // Baseline means of 0.08-0.8 ms were seen (the RAM disk's fsync slows
    // when other work loads the machine); throttled, 24-30 ms.
    assert!(
        b_redo_n > 50 && s_redo_n > 10,
        "too few redo fsyncs: {b_redo_n}, {s_redo_n}"
    );
    assert!(
        s_redo > 5.0 * b_redo && s_redo >= REDO_IOPS_NS as f64 / 2.0,
        "redo fsync mean {b_redo} ns -> {s_redo} ns"
    );
    // The data files live on the unthrottled disk: their fsyncs (if the
    // page cleaner flushed any) did not move with the redo log's. They
    // are few (10-20 in a phase), so one stalled flush moves their mean:
    // a CI run saw 0.43 -> 6.95 ms (15 calls) beside redo's 0.13 -> 31.7
    // ms. Stalls or not, they stay well below the throttled redo fsyncs.
    if b_data_n > 0 && s_data_n > 0 {
        assert!(
            s_data < (3.0 * b_data).max(2e6) || s_data * 3.0 < s_redo,
            "data-file fsync {b_data} ns -> {s_data} ns, redo {b_redo} ns -> {s_redo} ns"
        );
    }
    if let Some(p) = redo_flush_probe {
        let (b, s) = (
            share_at_least(&base, p, SLOW_NS),
            share_at_least(&slow, p, SLOW_NS),
        );
        println!(
            "S5 {server_name}: {p} calls taking >= 8 ms: {:.1} % -> {:.1} %",
            b * 100.0,
            s * 100.0
        );
        assert!(b < 0.05 && s > 0.2, "{p}: share >= 8 ms {b:.3} -> {s:.3}");
    }
    first_is(
        &findings_of(&format!("S5 {server_name} slow redo"), &slow.findings),
        "redo_flush_latency",
    );
    // The same load on the unthrottled disk, every commit flushing: a
    // healthy durable load, on which no rule raises more than info.
    let calm = findings_of(&format!("S5 {server_name} baseline"), &base.findings);
    assert!(calm.iter().all(|(_, s)| *s == Severity::Info), "{calm:?}");
    drop(server);
}

/// The same slow redo disk under innodb_flush_log_at_trx_commit=2 and
/// sync_binlog=0 (the demo's settings): a commit only hands the log to the
/// OS, and the fsyncs that meet the throttled disk are the master
/// thread's and the page cleaner's. The flushes are slow, as in S5's
/// incident; no finding may say the commits wait on them, and the redo
/// rule says, as info, that only background flushes pay it.
fn slow_redo_disk_commits_do_not_wait_for(server_name: &str, redo_flush_probe: &str) {
    let _k = kernel_lock();
    let dir = ScenarioDir::new("s5-relaxed", server_name);
    let data_disk = RamDisk::create("data");
    let redo_disk = RamDisk::create("redo");
    let log_dir = format!("--innodb-log-group-home-dir={}", redo_disk.path().display());
    let server = Server::start_under(
        server_name,
        data_disk.path(),
        &[
            &log_dir,
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
        ],
    );
    server.sysbench_ok(&["prepare", "oltp_write_only"]);
    let mut sysbench = server.sysbench(&["run", "oltp_write_only", "--threads=1", "--time=300"]);
    sysbench.stdout(Stdio::null()).stderr(Stdio::null());
    let _load = Background::spawn(sysbench);
    redo_disk.throttle_writes(REDO_IOPS);
    std::thread::sleep(Duration::from_secs(1));
    let (slow, commits) = record_with_counter(
        &server,
        &[
            "--probes",
            "innodb.redo.*,innodb.file.*,sql.commit",
            "--no-cpu",
        ],
        &dir.join("slow-redo"),
        secs(5),
        "Com_commit",
    );
    redo_disk.throttle_writes(0);
    let found = findings_of(
        &format!("S5 {server_name} relaxed, slow redo"),
        &slow.findings,
    );
    let share = share_at_least(&slow, redo_flush_probe, SLOW_NS);
    let flushes = probe(&slow, redo_flush_probe).calls;
    println!(
        "S5 {server_name} relaxed: {commits} commits; {redo_flush_probe}: {flushes} calls, {:.1} % >= 8 ms",
        share * 100.0
    );
    assert!(commits > 100, "{commits} commits");
    assert!(
        found
            .iter()
            .all(|(_, severity)| *severity == Severity::Info),
        "a healthy load (commits do not flush) raised more than info: {found:?}"
    );
    // Where the background flushes were enough to judge the device (the
    // rule's 20) and as slow as in the incident (what the rule warned on
    // before it read settings and roles), it says so, as info.
    if flushes >= 20 && share >= 0.10 {
        let redo = slow
            .findings
            .iter()
            .find(|f| f.rule == "redo_flush_latency")
            .unwrap_or_else(|| panic!("slow flushes are said, as info: {found:?}"));
        assert!(redo.title.contains("commits do not wait"), "{}", redo.title);
    }
    drop(server);
}

#[test]
fn s5_a_slow_redo_disk_commits_do_not_wait_for_is_info_mariadb_10_2_11() {
    slow_redo_disk_commits_do_not_wait_for("mariadb-10.2.11", "innodb.redo.flush");
}

/// One write at REDO_IOPS a second waits this long for its turn.
const REDO_IOPS_NS: u64 = 1_000_000_000 / REDO_IOPS as u64;

/// MariaDB 10.2 has a redo-only fsync function (innodb.redo.flush).
#[test]
fn s5_redo_log_latency_mariadb_10_2_11() {
    redo_log_latency("mariadb-10.2.11", Some("innodb.redo.flush"));
}

/// MySQL 5.6 fsyncs the redo log through fil_flush, as the data files.
#[test]
fn s5_redo_log_latency_mysql_5_6_24() {
    redo_log_latency("mysql-5.6.24", None);
}
