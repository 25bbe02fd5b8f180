//! Findings of a change (`innoprof diff`): what the incident has that the
//! baseline had not (or had milder), and where the server's CPU moved,
//! by InnoDB/SQL subsystem (S6).

use super::rank;
use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::Summary;

/// One function's share of on-CPU samples before and after (self %).
#[derive(Debug, Clone)]
pub struct CpuShift {
    pub symbol: String,
    pub module: String,
    pub baseline_pct: f64,
    pub incident_pct: f64,
    /// Total (inclusive) shares: the function and what it calls.
    pub baseline_total_pct: f64,
    pub incident_total_pct: f64,
}

/// Subsystems by function-name prefix, and what they do. First match wins.
const SUBSYSTEMS: &[(&[&str], &str, &str)] = &[
    (
        &[
            "trx_undo_",
            "row_vers_",
            // The read side's own steps into the walk (row_search_mvcc →
            // row_sel_build_prev_vers_for_mysql → row_vers_build_for_
            // consistent_read): 0 -> 13.1 points total in a CI run of S6 on
            // MariaDB 11.4.5, which counted as row operations until then.
            "row_sel_build_prev_vers",
            "row_sel_build_committed_vers",
            "trx_purge",
            "row_purge",
            "trx_undo",
        ],
        "undo and MVCC",
        "rebuilding old row versions for consistent reads, and purging them",
    ),
    (
        &[
            "ut_delay",
            "sync_array",
            "rw_lock_",
            "mutex_",
            "PolicyMutex",
            "TTASEventMutex",
            "os_event",
            "sync_",
        ],
        "latch spinning and waiting",
        "threads spinning on or sleeping for InnoDB mutexes and rw-locks",
    ),
    (
        &["lock_"],
        "row locks",
        "taking, checking and releasing row locks",
    ),
    (
        &["log_", "mtr_"],
        "redo log",
        "writing mini-transactions to the redo log buffer and flushing it",
    ),
    (
        &["buf_"],
        "buffer pool",
        "finding, reading and evicting pages in the buffer pool",
    ),
    (
        &["btr_", "page_", "rec_", "cmp_"],
        "B-tree access",
        "searching and modifying index pages",
    ),
    (
        &[
            "row_ins",
            "row_upd",
            "row_sel",
            "row_search",
            "row_",
            "que_",
        ],
        "InnoDB row operations",
        "inserts, updates and reads of rows inside InnoDB",
    ),
    (&["dict_"], "data dictionary", "table and index metadata"),
    (
        &["fil_", "os_file", "os_aio", "fsp_"],
        "file I/O",
        "tablespace files and their I/O",
    ),
    (
        &["trx_"],
        "transactions",
        "starting, committing and tracking transactions",
    ),
];

/// InnoDB functions every read or write passes through on its way to the
/// work: their total share grows with whatever that work is, so only their
/// self time speaks for their subsystem.
const ENTRY_POINTS: &[&str] = &[
    "row_search",
    "row_sel_step",
    // A read through a secondary index fetches the clustered record here,
    // and the old version is built under it.
    "row_sel_get_clust_rec",
    "row_ins_step",
    "row_upd_step",
    "row_insert_for_mysql",
    "row_update_for_mysql",
    "que_run_threads",
];

fn subsystem(symbol: &str, module: &str) -> (&'static str, &'static str) {
    if module == crate::symbolize::KERNEL_MODULE {
        return ("kernel", "system calls, scheduling, I/O and page faults");
    }
    SUBSYSTEMS
        .iter()
        .find(|(prefixes, _, _)| prefixes.iter().any(|p| symbol.starts_with(p)))
        .map(|(_, name, what)| (*name, *what))
        .unwrap_or(if module.starts_with("lib") {
            (
                "libraries",
                "libc and other shared libraries (memory allocation, copying)",
            )
        } else {
            (
                "SQL layer and other",
                "parsing, optimising and executing statements, and the rest of the server",
            )
        })
}

/// Growth of a subsystem's share of CPU samples, in points of %.
const INFO_POINTS: f64 = 5.0;
const WARN_POINTS: f64 = 10.0;
const CRITICAL_POINTS: f64 = 25.0;

/// At most this many subsystems are named where CPU moved.
const MAX_HOT_PATHS: usize = 3;

/// Where CPU moved: each subsystem whose functions' share grew by
/// [`INFO_POINTS`] or more, the largest growth first, up to
/// [`MAX_HOT_PATHS`]. One finding only (the largest) hid the second cause
/// when two moved together: on MySQL 5.6.24 under long snapshots, latch
/// spinning +14 points and the undo walk +12 (readers walking versions hold
/// the page latches writers spin on), and the diff named the spinning only.
pub fn cpu_hot_path(shifts: &[CpuShift]) -> Vec<Finding> {
    // Per subsystem: the sum of its functions' self-share growth, or the
    // largest growth of one of its functions' total share (an entry point
    // whose callees are elsewhere: the undo walk's time is partly in
    // memcpy and the heap), whichever is larger. Totals of one stack
    // overlap, so they are not added.
    let mut by: Vec<(&str, &str, f64, f64, Vec<&CpuShift>)> = Vec::new();
    for s in shifts {
        let (name, what) = subsystem(&s.symbol, &s.module);
        let own = s.incident_pct - s.baseline_pct;
        // Only an InnoDB subsystem's own function speaks for its callees:
        // the catch-all groups hold the entry points (dispatch_command's
        // total grows with any work under it: +20 points in one S1 run
        // while the undo walk grew +17), so they count self time only.
        // InnoDB's own entry points are the same: row_search_mvcc's total
        // holds the undo walk under it (+18 points in an S1 run on
        // MariaDB 11.4.5 while the walk grew +17).
        let named = SUBSYSTEMS
            .iter()
            .any(|(prefixes, _, _)| prefixes.iter().any(|p| s.symbol.starts_with(p)))
            && !ENTRY_POINTS.iter().any(|p| s.symbol.starts_with(p));
        let total = if named {
            s.incident_total_pct - s.baseline_total_pct
        } else {
            own
        };
        match by.iter_mut().find(|b| b.0 == name) {
            Some(b) => {
                b.2 += own;
                b.3 = b.3.max(total);
                b.4.push(s);
            }
            None => by.push((name, what, own, total, vec![s])),
        }
    }
    let mut moved: Vec<_> = by
        .into_iter()
        .map(|(n, w, own, total, m)| (n, w, own.max(total), m))
        .filter(|b| b.2 >= INFO_POINTS)
        .collect();
    moved.sort_by(|a, b| b.2.total_cmp(&a.2));
    moved
        .into_iter()
        .take(MAX_HOT_PATHS)
        .map(|(name, what, points, members)| hot_path(name, what, points, members))
        .collect()
}

/// The finding for one subsystem CPU moved to, `points` up.
fn hot_path(name: &str, what: &str, points: f64, mut members: Vec<&CpuShift>) -> Finding {
    let severity = if points >= CRITICAL_POINTS {
        Severity::Critical
    } else if points >= WARN_POINTS {
        Severity::Warning
    } else {
        Severity::Info
    };
    let growth = |m: &CpuShift| {
        (m.incident_pct - m.baseline_pct).max(m.incident_total_pct - m.baseline_total_pct)
    };
    members.sort_by(|a, b| growth(b).total_cmp(&growth(a)));
    let evidence = members
        .iter()
        .take(3)
        .map(|m| Evidence {
            text: format!(
                "{}{}: {:.1} % -> {:.1} % of CPU samples in it (total), {:.1} % -> {:.1} % in itself",
                short_name(&m.symbol),
                if m.module.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", m.module)
                },
                m.baseline_total_pct,
                m.incident_total_pct,
                m.baseline_pct,
                m.incident_pct
            ),
            anchor: "cpu".into(),
        })
        .collect();
    Finding {
        rule: "cpu_hot_path".into(),
        severity,
        title: format!("CPU moved to {name}: +{points:.0} points of the server's CPU samples"),
        evidence,
        cause: format!("The server now spends more of its CPU in {name}: {what}."),
        next: vec![
            "Open diff.oncpu.svg: red frames grew; the stacks above them say which statements pay."
                .into(),
            "Read the findings of the incident recording itself for the cause behind the shift."
                .into(),
        ],
        weight: points / 100.0,
        explained_by: None,
    }
}

/// A C++ name without its argument list: `trx_undo_prev_version_build`.
fn short_name(symbol: &str) -> &str {
    symbol.split('(').next().unwrap_or(symbol)
}

/// What a change brought, for `innoprof diff`.
#[derive(Debug, Clone, Default)]
pub struct ChangeFindings {
    /// The incident's findings the baseline did not have at that
    /// severity, with where CPU moved; most severe first.
    pub new: Vec<Finding>,
    /// The incident's findings the baseline had too: `latch_hotspot (warning)`.
    pub also_in_baseline: Vec<String>,
}

/// Each recording's findings, evaluated once, compared.
pub fn of_change(baseline: &Summary, incident: &Summary, shifts: &[CpuShift]) -> ChangeFindings {
    let before = super::evaluate(baseline);
    let mut out = ChangeFindings::default();
    for f in super::evaluate(incident) {
        match before
            .iter()
            .find(|b| b.rule == f.rule && b.severity >= f.severity)
        {
            Some(b) => out
                .also_in_baseline
                .push(format!("{} ({})", b.rule, b.severity)),
            None => out.new.push(f),
        }
    }
    out.new.extend(cpu_hot_path(shifts));
    out.new.extend(settings_changed(baseline, incident));
    rank(&mut out.new);
    out
}

/// The server ran with other settings in the incident than in the
/// baseline: often the whole explanation, and the first thing to rule out.
fn settings_changed(baseline: &Summary, incident: &Summary) -> Option<Finding> {
    let cmp = baseline
        .server_state
        .as_ref()?
        .compare(incident.server_state.as_ref()?)?;
    if cmp.settings_changed.is_empty() {
        return None;
    }
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "(unset)".into());
    let consequential = cmp
        .settings_changed
        .iter()
        .any(|c| crate::server_state::is_consequential(&c.name));
    let names: Vec<String> = cmp
        .settings_changed
        .iter()
        .map(|c| {
            format!(
                "{} {} -> {}",
                c.name,
                shown(&c.baseline),
                shown(&c.incident)
            )
        })
        .collect();
    Some(Finding {
        rule: "settings_changed".into(),
        severity: if consequential {
            Severity::Warning
        } else {
            Severity::Info
        },
        title: format!("The server's settings differ from the baseline: {}", names.join(", ")),
        evidence: names
            .iter()
            .map(|n| Evidence {
                text: format!("{n} (SHOW GLOBAL VARIABLES at each recording's end)"),
                anchor: "server-state".into(),
            })
            .collect(),
        cause: "The two recordings ran with different server settings (SET GLOBAL, an edited option file and a restart, or an upgrade). Durability, isolation, buffer and concurrency settings change the cost of every commit or read, and can explain the difference on their own.".into(),
        next: vec![
            "Check whether the change was intended: compare SHOW GLOBAL VARIABLES now with the baseline's summary.json (server_state.end.variables), and the option files' history.".into(),
            "Record the incident's load again with the baseline's settings to see how much of the change they explain.".into(),
        ],
        // Not a share of server time: it ranks after measured findings of
        // the same severity.
        weight: 0.0,
        explained_by: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shift(symbol: &str, module: &str, b: f64, a: f64) -> CpuShift {
        CpuShift {
            symbol: symbol.into(),
            module: module.into(),
            baseline_pct: b,
            incident_pct: a,
            baseline_total_pct: b,
            incident_total_pct: a,
        }
    }

    #[test]
    fn cpu_growth_is_grouped_by_subsystem() {
        let first = |shifts: &[CpuShift]| {
            let found = cpu_hot_path(shifts);
            assert_eq!(found.len(), 1, "{found:?}");
            found.into_iter().next().unwrap()
        };
        let f = first(&[
            shift("trx_undo_prev_version_build", "mysqld", 0.0, 8.0),
            shift("row_vers_build_for_consistent_read", "mysqld", 0.5, 7.0),
            shift("trx_undo_get_undo_rec_low", "mysqld", 0.0, 6.0),
            shift("MYSQLparse(THD*)", "mysqld", 9.0, 4.0),
            shift("ut_delay(unsigned long)", "mysqld", 3.0, 5.0),
        ]);
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.title,
            "CPU moved to undo and MVCC: +20 points of the server's CPU samples"
        );
        assert!(
            f.evidence[0].text.starts_with(
                "trx_undo_prev_version_build (mysqld): 0.0 % -> 8.0 % of CPU samples in it"
            ),
            "{:?}",
            f.evidence
        );
        assert_eq!(f.evidence.len(), 3);
        // An entry point of the SQL layer grows in total with any work
        // under it: its self time counts, not its total.
        let mut dispatch = shift("dispatch_command", "", 0.3, 0.1);
        dispatch.baseline_total_pct = 39.8;
        dispatch.incident_total_pct = 59.9;
        let mut walk = shift("row_vers_build_for_consistent_read", "", 0.0, 0.6);
        walk.incident_total_pct = 16.8;
        let f = first(&[dispatch, walk.clone()]);
        assert!(
            f.title
                .starts_with("CPU moved to undo and MVCC: +17 points"),
            "{}",
            f.title
        );
        // So does InnoDB's read entry point, whose total holds the walk.
        let mut search = shift("row_search_mvcc(unsigned char*)", "mysqld", 0.5, 0.0);
        search.baseline_total_pct = 8.8;
        search.incident_total_pct = 26.5;
        let f = first(&[search, walk]);
        assert!(
            f.title
                .starts_with("CPU moved to undo and MVCC: +17 points"),
            "{}",
            f.title
        );
        // An entry point whose time is in its callees: its total share.
        let mut entry = shift(
            "row_vers_build_for_consistent_read(unsigned char const*)",
            "",
            0.0,
            0.5,
        );
        entry.incident_total_pct = 18.0;
        let f = first(&[entry]);
        assert_eq!(
            f.title,
            "CPU moved to undo and MVCC: +18 points of the server's CPU samples"
        );
        assert!(
            f.evidence[0]
                .text
                .starts_with("row_vers_build_for_consistent_read: 0.0 % -> 18.0 %"),
            "{:?}",
            f.evidence
        );
        // The read side's step into the walk is the walk's (a CI run of S6
        // on MariaDB 11.4.5, its three largest rows).
        let mut prev = shift("row_sel_build_prev_vers_for_mysql", "mariadbd", 0.0, 0.0);
        prev.incident_total_pct = 13.1;
        let mut search = shift("row_search_mvcc", "mariadbd", 0.8, 0.4);
        search.baseline_total_pct = 9.4;
        search.incident_total_pct = 20.2;
        let mut upd = shift("row_upd_clust_rec", "mariadbd", 0.1, 0.1);
        upd.baseline_total_pct = 4.7;
        upd.incident_total_pct = 5.0;
        let f = first(&[prev, search, upd]);
        assert_eq!(
            f.title,
            "CPU moved to undo and MVCC: +13 points of the server's CPU samples"
        );
        assert!(cpu_hot_path(&[shift("ut_delay(unsigned long)", "mysqld", 3.0, 5.0)]).is_empty());
        assert_eq!(super::super::thousands(999.0), "999");
    }

    /// Two subsystems moved together (a CI run of S6 on MySQL 5.6.24, its
    /// largest rows): both are named, the larger first; under 5 points is
    /// not named.
    #[test]
    fn cpu_moving_to_two_subsystems_names_both() {
        let found = cpu_hot_path(&[
            shift("ut_delay(unsigned long)", "mysqld", 16.4, 29.9),
            shift("mutex_spin_wait", "mysqld", 0.0, 0.2),
            shift("trx_undo_prev_version_build", "mysqld", 0.0, 1.5),
            shift("row_vers_build_for_consistent_read", "mysqld", 0.0, 11.0),
            shift("buf_page_get_gen", "mysqld", 2.0, 4.0),
        ]);
        let titles: Vec<&str> = found.iter().map(|f| f.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "CPU moved to latch spinning and waiting: +14 points of the server's CPU samples",
                "CPU moved to undo and MVCC: +12 points of the server's CPU samples",
            ]
        );
    }
}
