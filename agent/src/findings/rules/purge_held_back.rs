//! A transaction holding purge back before anyone pays for it. An open
//! REPEATABLE READ snapshot keeps purge from removing any undo newer than
//! it: the history list grows with every write, and the reads that meet
//! those rows later walk the chains (`many_row_versions`, which names the
//! same holder when the walk is already there). On MariaDB 11.4.5, one
//! thread updating a 1-row table while another connection held a snapshot
//! open for 9 s: the history list went from 3,224 to 58,522 in a 12 s
//! recording and no read walked old versions yet.

use crate::findings::measure::{counter_rate, probe, thousands, watched_rate};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::server_state::Transaction;
use crate::model::summary::Summary;

use super::many_row_versions;

const RULE: &str = "purge_held_back";
/// A holder younger than this is an ordinary transaction: sysbench's
/// REPEATABLE READ transactions last milliseconds, and the server's state
/// is read with whole-second ages.
const MIN_HOLDER_AGE_S: u64 = 5;
/// Growth of the history list over the recording that is not a purge lag
/// of a busy second: the seed grew 55,298 in 12 s; healthy sysbench
/// oltp_read_write on the test servers stays within a few thousand.
const MIN_GROWTH: u64 = 10_000;
/// Or a list this long at the end, still growing: undo purge cannot
/// remove while the holder stays.
const LONG_LIST: u64 = 100_000;
/// InnoDB's own guidance treats a history list in the millions as
/// serious: every read of a changed row walks it and purge has hours of
/// backlog once the holder ends.
const CRITICAL_LIST: u64 = 1_000_000;

pub(super) fn check(s: &Summary) -> Option<Finding> {
    // The walk is already a finding that names the holder and the list.
    if many_row_versions::check(s).is_some() {
        return None;
    }
    let state = s.server_state.as_ref()?;
    let (Some(start), Some(end)) = state.history_list_lengths() else {
        return None;
    };
    let (holder, how) = state.snapshot_holder()?;
    if holder.age_s < MIN_HOLDER_AGE_S || end <= start {
        return None;
    }
    let growth = end - start;
    if growth < MIN_GROWTH && end < LONG_LIST {
        return None;
    }
    let severity = if end >= CRITICAL_LIST {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let secs = s.duration_s.max(1e-3);
    let mut evidence = vec![Evidence {
        text: format!(
            "History list length {} at the start, {} at the end of the {:.0} s recording: +{} a second of undo that purge may not remove while the snapshot below stays open",
            thousands(start as f64),
            thousands(end as f64),
            s.duration_s,
            thousands(growth as f64 / secs)
        ),
        anchor: "server-state".into(),
    }];
    evidence.push(many_row_versions::holder_line((holder, how)));
    if let Some(trx) = counter_rate(s, "innodb.trx_sys.trx_ids").filter(|t| *t > 0.0) {
        evidence.push(Evidence {
            text: format!(
                "{} transaction ids a second (InnoDB's counter, exact): the writes whose undo piles up",
                thousands(trx)
            ),
            anchor: "counters".into(),
        });
    }
    if let Some(rate) = probe(s, "innodb.undo.prev_version").and_then(|p| watched_rate(s, p)) {
        evidence.push(Evidence {
            text: format!(
                "innodb.undo.prev_version: {} old row versions rebuilt a second while watched: no read pays for it yet; the first that meets these rows will walk the chain",
                thousands(rate)
            ),
            anchor: "summary".into(),
        });
    }
    Some(Finding {
        rule: RULE.into(),
        severity,
        title: title(holder, start, end),
        evidence,
        cause: "A transaction that keeps a read view open (REPEATABLE READ after its first read, START TRANSACTION WITH CONSISTENT SNAPSHOT, an idle open transaction, a long SELECT) keeps purge from removing undo newer than its snapshot. The history list grows with every write; reads of the changed rows will rebuild old versions from it, and purge has the backlog to catch up once the transaction ends.".into(),
        next: many_row_versions::next_steps(Some(holder)),
        // No thread waits on it yet: ranked by severity alone.
        weight: 0.0,
        explained_by: None,
    })
}

fn title(holder: &Transaction, start: u64, end: u64) -> String {
    let who = match holder.connection {
        Some(c) => format!("connection {c}"),
        None => "a transaction".into(),
    };
    format!(
        "A transaction holds purge back: {who} has kept a {} transaction open for {} s while the history list grew from {} to {}",
        holder.isolation.as_deref().unwrap_or("snapshot"),
        holder.age_s,
        thousands(start as f64),
        thousands(end as f64)
    )
}
