//! S5: commits waiting for a slow redo log flush. With
//! innodb_flush_log_at_trx_commit=1 every commit waits in
//! `log_write_up_to` for the redo log's write and fsync; when the device
//! under the log is slow, that wait is the commit's latency.
//!
//! A slow flush alone does not make that claim: at
//! innodb_flush_log_at_trx_commit=2 (or 0) a commit only writes the log to
//! the OS, and the fsync is the master thread's and the page cleaner's,
//! once a second. So the rule reads the settings that decide whether
//! commits wait (innodb_flush_log_at_trx_commit, sync_binlog with the
//! binlog on) and the who-waits table (which threads paid the flush wait,
//! and how long the workload's own calls waited). A slow device that only
//! background flushes see is an info line that says so, never a warning.

use crate::findings::measure::{probe, thousands, watched_s};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::{ProbeResult, RoleKind, Summary};
use crate::text::units::ns;

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
/// The workload's calls to the commit wait, on average, at least this
/// long: commits feel the device. S5's throttled redo disk makes them
/// 10-30 ms; the demo's healthy baseline (flush at commit off) 17 us, and
/// a commit that flushes on this VM's disk ~0.1-0.8 ms.
const COMMIT_SLOW_NS: u64 = 1_000_000;

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

/// Whether the server's settings make a commit wait for a log flush, with
/// the settings that say so; None where they were not read.
struct Durability {
    commits_flush: bool,
    /// `innodb_flush_log_at_trx_commit=2 sync_binlog=0`
    settings: String,
}

fn durability(s: &Summary) -> Option<Durability> {
    let vars = &s.server_state.as_ref()?.latest()?.variables;
    let trx_commit = vars.get("innodb_flush_log_at_trx_commit")?.trim();
    let sync_binlog = vars.get("sync_binlog").map(|v| v.trim());
    let log_bin = vars
        .get("log_bin")
        .map(|v| v.trim().eq_ignore_ascii_case("on") || v.trim() == "1");
    // sync_binlog=1 fsyncs the binlog at each commit, on whatever device
    // holds it; without the binlog (log_bin OFF) it does nothing. Unread
    // log_bin: assume it is on, so the claim is not dropped on a guess.
    let binlog_flush = sync_binlog == Some("1") && log_bin != Some(false);
    let mut settings = format!("innodb_flush_log_at_trx_commit={trx_commit}");
    if let Some(v) = sync_binlog {
        settings.push_str(&format!(" sync_binlog={v}"));
    }
    if log_bin == Some(false) {
        settings.push_str(" log_bin=OFF");
    }
    Some(Durability {
        commits_flush: trx_commit == "1" || binlog_flush,
        settings,
    })
}

/// A probe's wait split by who paid it: the workload (connections, and
/// threads whose role is unknown: never counted as background on a guess)
/// and the server's background threads. Without roles (a bundle older
/// than them) all of it is the workload's.
#[derive(Clone, Copy)]
struct Paid {
    workload_calls: u64,
    workload_wait_ns: u64,
    background_wait_ns: u64,
}

impl Paid {
    fn of(p: &ProbeResult) -> Self {
        if p.roles.is_empty() {
            return Self {
                workload_calls: p.calls,
                workload_wait_ns: p.wait_ns_total,
                background_wait_ns: 0,
            };
        }
        let (mut calls, mut wait, mut background) = (0, 0, 0);
        // Saturating: a bundle's numbers are its own say.
        for r in &p.roles {
            if r.kind == RoleKind::Background {
                background = r.wait_ns_total.saturating_add(background);
            } else {
                calls = r.calls.saturating_add(calls);
                wait = r.wait_ns_total.saturating_add(wait);
            }
        }
        Self {
            workload_calls: calls,
            workload_wait_ns: wait,
            background_wait_ns: background,
        }
    }

    fn workload_mean_ns(&self) -> Option<u64> {
        (self.workload_calls > 0).then(|| self.workload_wait_ns / self.workload_calls)
    }

    fn background_share(&self) -> f64 {
        let all = self.background_wait_ns as f64 + self.workload_wait_ns as f64;
        if all > 0.0 {
            self.background_wait_ns as f64 / all
        } else {
            0.0
        }
    }
}

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let flush = FLUSH_PROBES
        .iter()
        .find_map(|n| probe(s, n).filter(|p| p.calls >= MIN_FLUSHES))?;
    let share = slow_share(flush);
    if share < WARN_SLOW_SHARE {
        return None;
    }
    let p99 = flush.wait_ns_p99.map_or("-".to_string(), ns);
    let mut evidence = vec![Evidence {
        text: format!(
            "{}: {:.0} % of {} redo flushes took 8 ms or more (p99 <= {p99}, mean {})",
            flush.name,
            share * 100.0,
            thousands(flush.calls as f64),
            flush.wait_ns_avg.map_or("-".to_string(), ns)
        ),
        anchor: "histograms".into(),
    }];
    let flush_paid = Paid::of(flush);
    if !flush.roles.is_empty() {
        evidence.push(Evidence {
            text: format!(
                "{}: {:.0} % of its wait paid by background threads (page cleaner, master thread, log writer), {:.0} % by the workload",
                flush.name,
                flush_paid.background_share() * 100.0,
                (1.0 - flush_paid.background_share()) * 100.0
            ),
            anchor: "who".into(),
        });
    }
    let commit = probe(s, COMMIT_WAIT);
    let commit_paid = commit.map(Paid::of);
    let commit_mean = commit_paid.and_then(|p| p.workload_mean_ns());
    // Threads of the workload waiting for the log, on average: what the
    // finding weighs (background threads' waits are the server's own).
    let waiting = commit.zip(commit_paid).and_then(|(p, paid)| {
        let secs = watched_s(s, p);
        (secs > 0.0).then(|| paid.workload_wait_ns as f64 / 1e9 / secs)
    });
    if let (Some(paid), Some(mean), Some(w)) = (commit_paid, commit_mean, waiting) {
        evidence.push(Evidence {
            text: format!(
                "{COMMIT_WAIT}: the workload's {} calls waited {} on average ({w:.2} threads waiting for the redo log)",
                thousands(paid.workload_calls as f64),
                ns(mean)
            ),
            anchor: "who".into(),
        });
    }
    let durability = durability(s);
    if let Some(d) = &durability {
        evidence.push(Evidence {
            text: format!(
                "{}: {}",
                d.settings,
                if d.commits_flush {
                    "each commit waits for a log flush"
                } else {
                    "commits do not wait for a log flush (the master thread fsyncs the log once a second)"
                }
            ),
            anchor: "server-state".into(),
        });
    }
    // The claim is the commits': it stands only where they can wait for
    // the flush and, where the who-waits table says how long they did,
    // where that wait is long.
    let commits_immune = durability.as_ref().is_some_and(|d| !d.commits_flush);
    let commits_fast = commit.is_some_and(|p| !p.roles.is_empty())
        && commit_mean.is_none_or(|m| m < COMMIT_SLOW_NS);
    if commits_immune || commits_fast {
        return Some(background_only(evidence, commits_immune));
    }
    let severity = if share >= CRITICAL_SLOW_SHARE {
        Severity::Critical
    } else {
        Severity::Warning
    };
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

/// Slow flushes that commits do not wait for: worth knowing (checkpoints
/// and page flushing slow down, and commits will pay it the day the
/// setting goes back to 1), nothing the workload feels now.
fn background_only(evidence: Vec<Evidence>, by_setting: bool) -> Finding {
    let why = if by_setting {
        "the settings in force make no commit wait for a log flush"
    } else {
        "the workload's commits waited well under a millisecond"
    };
    Finding {
        rule: "redo_flush_latency".into(),
        severity: Severity::Info,
        title: format!("Some redo log flushes are slow, but commits do not wait for them: {why}"),
        evidence,
        cause: "At innodb_flush_log_at_trx_commit=2 or 0 a commit only hands the redo log to the OS; the fsync is the master thread's (once a second) and the page cleaner's. Those background flushes are what took milliseconds: a busy or slow device under the log, felt by checkpoints and page flushing, not by commits.".into(),
        next: vec![
            "If commits should be durable (innodb_flush_log_at_trx_commit=1), check the device under the redo log first (iostat -x 1): each commit would pay these flushes.".into(),
        ],
        weight: 0.0,
        explained_by: None,
    }
}
