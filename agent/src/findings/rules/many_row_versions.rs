//! S1: readers rebuilding old row versions. A read view opened long ago
//! (a REPEATABLE READ transaction, a long SELECT) keeps purge from
//! removing old versions, so every read of a row updated since walks the
//! undo log back to the version its snapshot sees: `trx_undo_prev_version_build`
//! once per version, from `row_vers_build_for_consistent_read`.

use crate::findings::measure::{counter_rate, cpu_share, probe, thousands, watched_rate};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::server_state::{HolderEvidence, ServerState, Transaction};
use crate::model::summary::{ProbeResult, Summary};

/// This rule's name.
pub(super) const RULE: &str = "many_row_versions";
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
/// A chain length is judged only where the walk is work: at ~2 us a step,
/// 1,000 steps a second are 0.2 % of a core. A read on a hot row walks
/// back over the updates made while it ran (S1's baseline on MySQL 5.6.24,
/// autocommit reads of a row updated 33,000 times a second: one read a
/// second walking ~153 versions, 114 steps a second), which is no purge
/// held back and was raised as a warning.
const MIN_WALKS_PER_S: f64 = 1_000.0;
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

/// The walk's rate over what was watched while the snapshot was open
/// (issue 50: the seed's evidence quoted the 0.7 s before it existed):
/// the spread windows that started after it opened, by the server's age
/// of the holder at the end. None where that cannot be told apart (the
/// probe never cut: one window for the whole recording; or the snapshot
/// older than the recording).
fn rate_since_opened(s: &Summary, undo: &ProbeResult) -> Option<(f64, f64, f64)> {
    let (holder, _) = s.server_state.as_ref()?.snapshot_holder()?;
    let opened = s.duration_s - holder.age_s as f64;
    let smp = undo.sampling.as_ref()?;
    if opened <= 0.0 {
        return None;
    }
    // The age is in whole seconds: a second's margin.
    let after: Vec<_> = smp
        .windows
        .iter()
        .filter(|w| w.start_s >= opened + 1.0)
        .collect();
    let watched: f64 = after.iter().map(|w| w.end_s - w.start_s).sum();
    let calls = crate::model::saturating_sum(after.iter().map(|w| w.calls));
    (watched > 0.0).then(|| (calls as f64 / watched, opened, watched))
}

/// What the rule judges by, measured once for every step below.
struct Measures<'s> {
    undo: &'s ProbeResult,
    /// The walk's rate since the snapshot opened, where that can be told
    /// apart (see [`rate_since_opened`]): rate, opened at, seconds watched.
    since: Option<(f64, f64, f64)>,
    /// The readers' walks a second (purge's own left out).
    rate: f64,
    /// The background threads' share of the walks.
    background: f64,
    /// The walk's share of the server's CPU samples, where sampled.
    cpu: Option<f64>,
    /// The consistent-read probe, where resolved.
    reader: Option<&'s ProbeResult>,
    /// Its reads a second while watched, where any.
    reads: Option<f64>,
}

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let m = measure(s)?;
    let severity = severity(&m)?;
    let holder = s
        .server_state
        .as_ref()
        .and_then(|st| st.snapshot_holder())
        .map(|(t, _)| t);
    Some(Finding {
        rule: RULE.into(),
        severity,
        title: title(holder),
        evidence: evidence(s, &m),
        cause: "A transaction that opened its read view long ago (REPEATABLE READ, START TRANSACTION WITH CONSISTENT SNAPSHOT, a long SELECT or an idle open transaction) keeps purge from removing old versions; every read of a row updated since walks the undo log back to the version that snapshot sees, once per version, and the chains grow with every update.".into(),
        next: next_steps(holder),
        weight: m.cpu.unwrap_or(m.rate * WALK_COST_S),
        explained_by: None,
    })
}

/// The readers' walk rate (since the snapshot opened where that can be
/// told apart, else over the watched time), the walk's CPU share and the
/// reads that needed an old version; None without the walk probe or any
/// time watched.
fn measure(s: &Summary) -> Option<Measures<'_>> {
    let undo = probe(s, UNDO)?;
    let since = rate_since_opened(s, undo);
    let rate = match since {
        Some((r, ..)) => r,
        None => watched_rate(s, undo)?,
    };
    // Purge builds old versions too, as its own work: only the readers'
    // walks (connections', and threads of unknown role) are the symptom.
    // The roles are over the whole recording; the rate is scaled by the
    // readers' share of the calls.
    let background = undo.background_calls() as f64 / undo.calls.max(1) as f64;
    let rate = rate * (1.0 - background);
    let reader = probe(s, CONSISTENT_READ);
    Some(Measures {
        undo,
        since,
        rate,
        background,
        cpu: cpu_share(s, WALK_FUNCTIONS),
        reader,
        reads: reader.and_then(|p| watched_rate(s, p)).filter(|r| *r > 0.0),
    })
}

/// Critical or warning by the chain's length where the reads are watched
/// (a healthy load walks fast over short chains), else by the raw rate,
/// or by the walk's CPU share; None below every threshold.
fn severity(m: &Measures) -> Option<Severity> {
    let rate = m.rate;
    let cpu_v = m.cpu.unwrap_or(0.0);
    // The chain length where the reads are watched, else the raw rate.
    let (critical, warn) = match m.reads {
        Some(r) => (
            rate >= MIN_WALKS_PER_S && rate / r >= CRITICAL_VERSIONS_PER_READ,
            rate >= MIN_WALKS_PER_S && rate / r >= WARN_VERSIONS_PER_READ,
        ),
        None => (rate >= CRITICAL_WALKS_PER_S, rate >= WARN_WALKS_PER_S),
    };
    if critical || cpu_v >= CRITICAL_CPU_SHARE {
        Some(Severity::Critical)
    } else if warn || cpu_v >= WARN_CPU_SHARE {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// The evidence, in the order it is read: the walk's rate, the chain's
/// length, the writes that lengthen it, its CPU, the snapshot's holder and
/// the history list; last, the side note on purge's own walks.
fn evidence(s: &Summary, m: &Measures) -> Vec<Evidence> {
    let state = s.server_state.as_ref();
    let mut evidence = vec![rate_line(m)];
    evidence.extend(chain_line(m));
    evidence.extend(writes_line(s));
    evidence.extend(cpu_line(m));
    // Who walks: the statements rebuilding old versions.
    evidence.extend(crate::findings::measure::statements_at(s, UNDO, 2));
    evidence.extend(state.and_then(|st| st.snapshot_holder()).map(holder_line));
    evidence.extend(state.and_then(history_line));
    // Last: a side note to the first line's rate.
    evidence.extend(background_line(m));
    evidence
}

/// The walk's rate, and over which time it was watched: since the snapshot
/// opened, or the governor's share of the recording.
fn rate_line(m: &Measures) -> Evidence {
    let watched = m.undo.attached_fraction();
    Evidence {
        text: format!(
            "{UNDO}: {} old row versions rebuilt per second{}",
            thousands(m.rate),
            if let Some((_, opened, secs)) = m.since {
                format!(
                    " while watched since the snapshot opened (~{opened:.0} s in; {secs:.1} s watched in windows spread over the rest)"
                )
            } else if watched < 1.0 {
                format!(
                    " while watched ({:.0} % of the recording, in windows spread over it)",
                    watched * 100.0
                )
            } else {
                String::new()
            }
        ),
        anchor: "summary".into(),
    }
}

/// The chain's length, where the reads that needed an old version are
/// watched.
fn chain_line(m: &Measures) -> Option<Evidence> {
    let reads = m.reads?;
    let took = m
        .reader
        .and_then(|p| p.wait_ns_avg)
        .map(|ns| format!(", taking {} on average", crate::text::units::ns(ns)))
        .unwrap_or_default();
    // Each read that needs an old version walks the chain back: the
    // walks per read are the chain's length.
    Some(Evidence {
        text: format!(
            "{CONSISTENT_READ}: {} reads a second needed an old version, each walking ~{} versions back{took}",
            thousands(reads),
            thousands(m.rate / reads)
        ),
        anchor: "summary".into(),
    })
}

/// The transactions a second, where InnoDB's counter was read: the writes
/// that make the chains.
fn writes_line(s: &Summary) -> Option<Evidence> {
    let trx = counter_rate(s, "innodb.trx_sys.trx_ids").filter(|t| *t > 0.0)?;
    Some(Evidence {
        text: format!(
            "{} transaction ids a second (InnoDB's counter, exact): the writes that lengthen the chains",
            thousands(trx)
        ),
        anchor: "counters".into(),
    })
}

/// The walk's share of the CPU samples, where it has any.
fn cpu_line(m: &Measures) -> Option<Evidence> {
    let c = m.cpu.filter(|c| *c > 0.0)?;
    Some(Evidence {
        text: format!(
            "{:.1} % of the server's CPU samples are in the undo walk ({})",
            c * 100.0,
            WALK_FUNCTIONS.join(", ")
        ),
        anchor: "cpu".into(),
    })
}

/// The transaction holding the snapshot, and how it is known to: InnoDB's
/// status shows its read view, or its isolation level implies one.
pub(super) fn holder_line((t, how): (&Transaction, HolderEvidence)) -> Evidence {
    Evidence {
        text: match how {
            HolderEvidence::ReadView => format!("the oldest read view (InnoDB's status): {}", describe(t)),
            HolderEvidence::Isolation => format!(
                "the oldest {} transaction, which keeps the read view of its first read until it ends: {}",
                t.isolation.as_deref().unwrap_or(""),
                describe(t)
            ),
        },
        anchor: "server-state".into(),
    }
}

/// The history list at both ends, where read at both: the undo purge is
/// kept from removing.
fn history_line(state: &ServerState) -> Option<Evidence> {
    let (Some(a), Some(b)) = state.history_list_lengths() else {
        return None;
    };
    Some(Evidence {
        text: format!(
            "History list length {} at the start, {} at the end: undo that purge could not remove yet",
            thousands(a as f64),
            thousands(b as f64)
        ),
        anchor: "server-state".into(),
    })
}

/// Purge's own version builds, left out of the rate, where they are a
/// noticeable share.
fn background_line(m: &Measures) -> Option<Evidence> {
    (m.background >= 0.05).then(|| Evidence {
        text: format!(
            "not counted in the rate above: {:.0} % of the version builds were background threads' (purge, its own work)",
            m.background * 100.0
        ),
        anchor: "who".into(),
    })
}

/// The title names the connection holding the snapshot, where known.
fn title(holder: Option<&Transaction>) -> String {
    match holder.and_then(|t| t.connection.map(|c| (c, t))) {
        Some((c, t)) => format!(
            "Reads rebuild old row versions from the undo log: connection {c} has kept a {} transaction open for {} s, holding back purge",
            t.isolation.as_deref().unwrap_or("snapshot"),
            t.age_s
        ),
        None => "Reads rebuild old row versions from the undo log: a long-open read view is holding back purge".into(),
    }
}

/// What to do: end the holder's transaction first where its connection is
/// known, then the steps that find and end it by hand.
pub(super) fn next_steps(holder: Option<&Transaction>) -> Vec<String> {
    let mut next: Vec<String> = Vec::new();
    if let Some((c, t)) = holder.and_then(|t| t.connection.map(|c| (c, t))) {
        next.push(format!(
            "End transaction {} of connection {c}{}: commit it in the application, or KILL {c};",
            t.trx_id,
            t.user
                .as_deref()
                .map(|u| format!(" ({u}@{})", t.host.as_deref().unwrap_or("?")))
                .unwrap_or_default()
        ));
    }
    next.into_iter().chain([
        "Find the oldest transactions: SELECT trx_id, trx_started, trx_state, trx_isolation_level, trx_mysql_thread_id, trx_query FROM information_schema.innodb_trx ORDER BY trx_started LIMIT 5;".into(),
        "Check `History list length` in SHOW ENGINE INNODB STATUS: it grows while purge is held back.".into(),
        "Commit or end that transaction (or KILL its thread id); keep snapshots short, or read at READ COMMITTED where the application allows.".into(),
    ]).collect()
}

/// `transaction 421…, connection 9 (root@localhost, db sbtest), open 37 s,
/// REPEATABLE READ, idle (Sleep)` or `…, running: SELECT …`.
fn describe(t: &Transaction) -> String {
    let who = match (&t.user, &t.host) {
        (Some(u), Some(h)) => format!(
            " ({u}@{h}{})",
            t.db.as_deref()
                .map(|d| format!(", db {d}"))
                .unwrap_or_default()
        ),
        _ => String::new(),
    };
    let conn = t
        .connection
        .map(|c| format!(", connection {c}"))
        .unwrap_or_default();
    let doing = match (&t.query, &t.command) {
        (Some(q), _) => format!("running: {}", q.chars().take(200).collect::<String>()),
        (None, Some(c)) => format!("between statements ({c})"),
        (None, None) => "between statements".into(),
    };
    format!(
        "transaction {}{conn}{who}, open {} s, {}, {} rows modified, {doing}",
        t.trx_id,
        t.age_s,
        t.isolation.as_deref().unwrap_or("isolation unknown"),
        t.rows_modified.unwrap_or(0),
    )
}
