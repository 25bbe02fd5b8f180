//! S1: readers rebuilding old row versions. A read view opened long ago
//! (a REPEATABLE READ transaction, a long SELECT) keeps purge from
//! removing old versions, so every read of a row updated since walks the
//! undo log back to the version its snapshot sees: `trx_undo_prev_version_build`
//! once per version, from `row_vers_build_for_consistent_read`.

use crate::findings::{
    counter_rate, cpu_share, probe, thousands, watched_rate, Evidence, Finding, Severity,
};
use crate::report::model::Summary;

const UNDO: &str = "innodb.undo.prev_version";
const CONSISTENT_READ: &str = "innodb.row_vers.consistent_read";
/// Functions of the walk, for their share of CPU samples.
const WALK_FUNCTIONS: &[&str] = &[
    "trx_undo_prev_version_build",
    "row_vers_build_for_consistent_read",
];

/// Versions walked back per read that needed an old version: the undo
/// chain's length. Healthy sysbench oltp_read_write (4 threads, every
/// probe on): ~2 on MariaDB 10.2.11 and MySQL 5.6.24 (2,800-3,900 walks/s
/// for ~1,600 such reads/s); the S1 incident: 20,000-50,000.
const WARN_VERSIONS_PER_READ: f64 = 100.0;
const CRITICAL_VERSIONS_PER_READ: f64 = 1_000.0;
/// Without the consistent-read probe, walks a second while watched: the
/// healthy loads above reach 4,000/s; the S1 incident 70,000-280,000/s.
const WARN_WALKS_PER_S: f64 = 20_000.0;
const CRITICAL_WALKS_PER_S: f64 = 100_000.0;
/// Or the walk's share of the server's CPU samples (S1: 13-17 %).
const WARN_CPU_SHARE: f64 = 0.05;
const CRITICAL_CPU_SHARE: f64 = 0.15;
/// What one version build costs, to weigh a recording without CPU
/// samples (~2 µs a walk step under S1, the probe's own average).
const WALK_COST_S: f64 = 2e-6;

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let undo = probe(s, UNDO)?;
    let rate = watched_rate(s, undo)?;
    let cpu = cpu_share(s, WALK_FUNCTIONS);
    let cpu_v = cpu.unwrap_or(0.0);
    let reads = probe(s, CONSISTENT_READ)
        .and_then(|p| watched_rate(s, p))
        .filter(|r| *r > 0.0);
    // The chain length where the reads are watched, else the raw rate.
    let (critical, warn) = match reads {
        Some(r) => (
            rate / r >= CRITICAL_VERSIONS_PER_READ,
            rate / r >= WARN_VERSIONS_PER_READ,
        ),
        None => (rate >= CRITICAL_WALKS_PER_S, rate >= WARN_WALKS_PER_S),
    };
    let severity = if critical || cpu_v >= CRITICAL_CPU_SHARE {
        Severity::Critical
    } else if warn || cpu_v >= WARN_CPU_SHARE {
        Severity::Warning
    } else {
        return None;
    };
    let watched = undo.sampling_ratio();
    let mut evidence = vec![Evidence {
        text: format!(
            "{UNDO}: {} old row versions rebuilt per second{}",
            thousands(rate),
            if watched < 1.0 {
                format!(
                    " while watched ({:.0} % of the recording; the governor cut it)",
                    watched * 100.0
                )
            } else {
                String::new()
            }
        ),
        anchor: "summary".into(),
    }];
    let reader = probe(s, CONSISTENT_READ);
    if let Some(reads) = reader.and_then(|p| watched_rate(s, p)).filter(|r| *r > 0.0) {
        let took = reader
            .and_then(|p| p.wait_ns_avg)
            .map(|ns| format!(", taking {} on average", crate::report::units::ns(ns)))
            .unwrap_or_default();
        // Each read that needs an old version walks the chain back: the
        // walks per read are the chain's length.
        evidence.push(Evidence {
            text: format!(
                "{CONSISTENT_READ}: {} reads a second needed an old version, each walking ~{} versions back{took}",
                thousands(reads),
                thousands(rate / reads)
            ),
            anchor: "summary".into(),
        });
    }
    if let Some(trx) = counter_rate(s, "innodb.trx_sys.trx_ids").filter(|t| *t > 0.0) {
        evidence.push(Evidence {
            text: format!(
                "{} transaction ids a second (InnoDB's counter, exact): the writes that lengthen the chains",
                thousands(trx)
            ),
            anchor: "counters".into(),
        });
    }
    if let Some(c) = cpu.filter(|c| *c > 0.0) {
        evidence.push(Evidence {
            text: format!(
                "{:.1} % of the server's CPU samples are in the undo walk ({})",
                c * 100.0,
                WALK_FUNCTIONS.join(", ")
            ),
            anchor: "cpu".into(),
        });
    }
    Some(Finding {
        rule: "many_row_versions".into(),
        severity,
        title: "Reads rebuild old row versions from the undo log: a long-open read view is holding back purge".into(),
        evidence,
        cause: "A transaction that opened its read view long ago (REPEATABLE READ, START TRANSACTION WITH CONSISTENT SNAPSHOT, a long SELECT or an idle open transaction) keeps purge from removing old versions; every read of a row updated since walks the undo log back to the version that snapshot sees, once per version, and the chains grow with every update.".into(),
        next: vec![
            "Find the oldest transactions: SELECT trx_id, trx_started, trx_state, trx_isolation_level, trx_mysql_thread_id, trx_query FROM information_schema.innodb_trx ORDER BY trx_started LIMIT 5;".into(),
            "Check `History list length` in SHOW ENGINE INNODB STATUS: it grows while purge is held back.".into(),
            "Commit or end that transaction (or KILL its thread id); keep snapshots short, or read at READ COMMITTED where the application allows.".into(),
        ],
        weight: cpu.unwrap_or(rate * WALK_COST_S),
    })
}
