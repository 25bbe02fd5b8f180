//! S5: commits waiting for a slow redo log flush. With
//! innodb_flush_log_at_trx_commit=1 every commit waits in
//! `log_write_up_to` for the redo log's write and fsync; when the device
//! under the log is slow, that wait is the commit's latency.

use crate::findings::measure::{probe, waiting_threads};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::{ProbeResult, Summary};

/// The redo log's own fsync where the server has one (MariaDB 10.2:
/// `log_write_flush_to_disk_low`), else the commit's wait for the log.
const FLUSH_PROBES: &[&str] = &["innodb.redo.flush", "innodb.redo.write_up_to"];
const COMMIT_WAIT: &str = "innodb.redo.write_up_to";

/// A flush this slow is a slow device: a local SSD or this VM's disk
/// flushes in under 4 ms at p99; the S5 incident (100 writes/s) takes
/// 10 ms and more.
const SLOW_NS: u64 = 8_000_000;
/// Share of flushes at least that slow.
const WARN_SLOW_SHARE: f64 = 0.10;
const CRITICAL_SLOW_SHARE: f64 = 0.50;
/// Fewer flushes say nothing about the device.
const MIN_FLUSHES: u64 = 20;

fn slow_share(p: &ProbeResult) -> f64 {
    let all = crate::model::saturating_sum(p.histogram.iter().map(|b| b.count));
    let slow = crate::model::saturating_sum(
        p.histogram
            .iter()
            .filter(|b| b.low_ns >= SLOW_NS)
            .map(|b| b.count),
    );
    slow as f64 / all.max(1) as f64
}

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let flush = FLUSH_PROBES
        .iter()
        .find_map(|n| probe(s, n).filter(|p| p.calls >= MIN_FLUSHES))?;
    let share = slow_share(flush);
    let severity = if share >= CRITICAL_SLOW_SHARE {
        Severity::Critical
    } else if share >= WARN_SLOW_SHARE {
        Severity::Warning
    } else {
        return None;
    };
    let p99 = flush
        .wait_ns_p99
        .map_or("-".to_string(), crate::text::units::ns);
    let mut evidence = vec![Evidence {
        text: format!(
            "{}: {:.0} % of {} redo flushes took 8 ms or more (p99 <= {p99}, mean {})",
            flush.name,
            share * 100.0,
            flush.calls,
            flush
                .wait_ns_avg
                .map_or("-".to_string(), crate::text::units::ns)
        ),
        anchor: "histograms".into(),
    }];
    let waiting = probe(s, COMMIT_WAIT).and_then(|p| waiting_threads(s, p));
    if let Some(w) = waiting {
        evidence.push(Evidence {
            text: format!("{COMMIT_WAIT}: {w:.2} threads waiting for the redo log on average (commits and log flushes)"),
            anchor: "summary".into(),
        });
    }
    evidence.extend(crate::findings::measure::statements_at(s, COMMIT_WAIT, 2));
    Some(Finding {
        rule: "redo_flush_latency".into(),
        severity,
        title: "Commits wait on slow redo log flushes: the device under the redo log is slow".into(),
        evidence,
        cause: "With innodb_flush_log_at_trx_commit=1 (and sync_binlog=1) each commit waits for the redo log's write and fsync; when the log's device takes milliseconds per write (a throttled or shared volume, a degraded RAID, writeback stalls), every commit pays it.".into(),
        next: vec![
            "Check the device under the redo log (innodb_log_group_home_dir): iostat -x 1 for its await and utilisation, dmesg for I/O errors.".into(),
            "Check the durability settings in force: SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog; relaxing them trades durability for commit latency.".into(),
            "Put the redo log on a faster device, or group commits (fewer, larger transactions).".into(),
        ],
        weight: waiting.unwrap_or(0.0),
        explained_by: None,
    })
}
