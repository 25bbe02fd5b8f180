//! S3: one InnoDB latch where threads queue. The latch probes
//! (`innodb.rwlock.*`, `innodb.mutex.*`, `innodb.sync.wait_event`) name the
//! latch of each wait by its creation site or latch id; the one with the
//! most waiting, its busiest call site, and what it protects.

use crate::findings::measure::{thousands, watched_s};
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::{ProbeStatus, Summary};
use crate::plan::catalog::CostClass;

/// Threads waiting on one latch on average (thread-seconds per second).
/// Healthy sysbench on these servers: 0.003 (MariaDB 10.2.11, 2 threads,
/// ~1,000 tps) up to 0.10 (MySQL 5.6.24, 4 threads on 2 CPUs, a buffer
/// block's rw-lock, seen once in CI); S2's insert load: 0.8 to 5.
const WARN_WAITING: f64 = 0.25;
const CRITICAL_WAITING: f64 = 0.5;

/// What a latch protects, by the start of its name (latch id or creation
/// function), for the finding's text.
const PROTECTS: &[(&str, &str)] = &[
    ("dict_sys", "the data dictionary cache (and, before MySQL 8.0 / MariaDB 10.6, hidden row-id allocation)"),
    ("dict_", "the data dictionary cache"),
    ("lock_sys", "the row lock tables (every row lock taken or released)"),
    ("lock_", "the row lock tables"),
    ("trx_sys", "the transaction list and read-view creation"),
    ("purge_sys", "the purge view and undo purge"),
    ("trx_undo", "undo segments"),
    ("rseg", "a rollback segment (undo log allocation)"),
    ("log_sys", "the redo log buffer (every mini-transaction commit)"),
    ("log_", "the redo log"),
    ("log_flush", "redo log flushing"),
    ("buf_pool", "the buffer pool's lists (LRU, free, flush)"),
    ("buf_block", "one buffer-pool page (hot page: a B-tree root or a hot row's page)"),
    ("buf_", "the buffer pool"),
    ("btr_search", "the adaptive hash index"),
    ("index_tree", "one index's tree structure (page splits and merges)"),
    ("dict_index", "one index's tree structure (page splits and merges)"),
    ("fil_system", "the tablespace and file list"),
    ("fsp_", "tablespace space allocation"),
    ("srv_", "server-wide InnoDB state"),
];

fn protects(latch: &str) -> Option<&'static str> {
    // `LATCH_ID_DICT_SYS`, `dict_sys_mutex`, `created in buf_block_init (…)`.
    let name = latch
        .trim_start_matches("created in ")
        .trim_start_matches("LATCH_ID_")
        .to_ascii_lowercase();
    PROTECTS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, what)| *what)
}

pub(super) fn check(s: &Summary) -> Option<Finding> {
    // (waiting threads, latch, probe, calls/s, background threads waiting)
    // of the most waited latch. Background threads' waits (purge workers
    // queuing on srv_sys as they resume, the page cleaner) are the
    // server's own: they never make a latch hot.
    let mut best: Option<(f64, &str, &str, f64, f64)> = None;
    let mut all_waiting = 0.0;
    // A hot probe (every mutex enter) times each acquisition, contended or
    // not, and its own trap: that time is not queueing. The contended
    // paths (spin, sync-array wait) are.
    for p in s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached && p.cost != CostClass::Hot)
    {
        let secs = watched_s(s, p);
        if secs <= 0.0 {
            continue;
        }
        for l in &p.latches {
            let waiting = l.contention_wait_ns() as f64 / 1e9 / secs;
            let background = l.background_wait_ns as f64 / 1e9 / secs;
            all_waiting += waiting;
            if best.is_none_or(|b| waiting > b.0) {
                best = Some((
                    waiting,
                    &l.latch,
                    &p.name,
                    l.calls as f64 / secs,
                    background,
                ));
            }
        }
    }
    let (waiting, latch, probe_name, calls, background) = best?;
    let severity = if waiting >= CRITICAL_WAITING {
        Severity::Critical
    } else if waiting >= WARN_WAITING {
        Severity::Warning
    } else {
        return None;
    };
    let mut evidence = vec![Evidence {
        text: format!(
            "{latch}: {waiting:.2} threads waiting on average ({} waits/s, {probe_name}), {:.0} % of all latch waiting",
            thousands(calls),
            waiting / all_waiting.max(f64::MIN_POSITIVE) * 100.0
        ),
        anchor: "latches".into(),
    }];
    let site = s
        .probes
        .iter()
        .filter(|p| p.name == probe_name)
        .flat_map(|p| &p.callsites)
        .filter(|c| c.latch.as_deref() == Some(latch))
        .max_by_key(|c| c.wait_ns_total);
    if let Some(c) = site {
        evidence.push(Evidence {
            text: format!(
                "busiest call site: {} ({} waits)",
                c.site,
                thousands(c.calls as f64)
            ),
            anchor: "callsites".into(),
        });
    }
    // Which statements wait there: on this latch where the recording
    // counted statements per latch, else the probe's over all its latches.
    let statements = crate::findings::measure::statements_on_latch(s, probe_name, latch, 2)
        .or_else(|| crate::findings::measure::statements_at(s, probe_name, 2));
    let has_statements = statements.is_some();
    evidence.extend(statements);
    // And who held it, where the latch records its holder.
    evidence.extend(crate::findings::measure::holders_at(s, probe_name, 2));
    // After the call site: readers of the evidence take the line below the
    // latch for where it is taken.
    if background >= 0.01 {
        evidence.push(Evidence {
            text: format!(
                "not counted above: {background:.2} background threads waiting on it on average (purge, page cleaner, ...: the server's own work)"
            ),
            anchor: "who".into(),
        });
    }
    // A reader rebuilding old row versions holds the row's page latch
    // while it walks the undo chain (row_search_mvcc keeps the page
    // latched): waits on a buffer page's latch are then the walk's
    // consequence (seen in the S1 incident on MySQL 5.6.24: 0.57 threads
    // waiting on a buf_block latch ranked above the walk itself).
    let page_latch = latch
        .trim_start_matches("created in ")
        .to_ascii_lowercase()
        .starts_with("buf_block");
    let explained_by = (page_latch && super::many_row_versions::check(s).is_some())
        .then(|| super::many_row_versions::RULE.to_string());
    if explained_by.is_some() {
        evidence.push(Evidence {
            text: "readers rebuilding old row versions hold their page's latch while they walk the undo log (see the old row versions finding): these waits follow from it".into(),
            anchor: "findings".into(),
        });
    }
    let what = protects(latch)
        .map(|w| format!("it protects {w}"))
        .unwrap_or_else(|| {
            "see its creation site in the InnoDB source for what it protects".into()
        });
    Some(Finding {
        rule: "latch_hotspot".into(),
        severity,
        title: format!("Threads queue on one InnoDB latch: {latch}"),
        evidence,
        cause: format!("Many threads need the same latch at once; {what}. The call site says which operation takes it."),
        next: vec![
            if has_statements {
                "Look at the statements waiting there and spread them: fewer threads on one hot row or page, batched commits, a different index.".into()
            } else {
                "Look at the call site's statement pattern (SHOW PROCESSLIST during the wait) and spread it: fewer threads on one hot row or page, batched commits, a different index.".into()
            },
            "Compare SHOW ENGINE INNODB STATUS's SEMAPHORES section, which lists the same waits as they happen.".into(),
        ],
        weight: waiting,
        explained_by,
    })
}
