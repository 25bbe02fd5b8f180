//! S4: performance_schema timing everything. Each enabled instrument costs
//! a call per event, each timed one two timer reads, and the wait/synch
//! instruments fire on every mutex and rw-lock acquisition: seed 001
//! measured 4-20 % of sysbench throughput with all of it on, 1-11 % for the
//! timers alone. innoprof sees the same latches from outside at the cost
//! its own overhead line states, so the finding puts the two side by side.
//!
//! Needs the server's state (a login): the instruments are SQL tables.

use crate::model::finding::{Evidence, Finding, Severity};
use crate::model::summary::Summary;

/// performance_schema's own functions in the server binary: the PSI
/// interface implementations (`start_mutex_wait_v1` in MySQL 5.6 and
/// MariaDB, `pfs_start_mutex_wait_v1` in 8.0: all end in `_v1`/`_v2`),
/// the history inserts and the timers. Not InnoDB's `pfs_mutex_enter_func`
/// wrappers, which run with performance_schema off too.
fn is_pfs_function(symbol: &str) -> bool {
    let name = symbol.split('(').next().unwrap_or(symbol);
    name.ends_with("_v1")
        || name.ends_with("_v2")
        || ["insert_events_", "get_timer_", "my_timer_"]
            .iter()
            .any(|p| name.starts_with(p))
}
/// Timed instruments beyond which the finding is a warning even without
/// latch timers. Defaults measured here: MySQL 5.6.24 times 217 of 554
/// instruments, 8.0.15 281 of 1,206 (none of them wait/synch).
const WARN_TIMED: u64 = 500;

pub(super) fn check(s: &Summary) -> Option<Finding> {
    let state = s.server_state.as_ref()?;
    let pfs = state.latest()?.performance_schema.as_ref()?;
    let cpu = pfs_cpu_share(s);
    let severity = if pfs.synch_timed > 0 || pfs.timed >= WARN_TIMED {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut evidence = vec![Evidence {
        text: format!(
            "performance_schema is ON: {} of {} instruments enabled, {} timed, {} of them mutex/rw-lock/condition timers (wait/synch/%); consumers on: {}",
            pfs.enabled,
            pfs.instruments,
            pfs.timed,
            pfs.synch_timed,
            if pfs.consumers.is_empty() { "none".to_string() } else { pfs.consumers.join(", ") }
        ),
        anchor: "server-state".into(),
    }];
    if let Some(c) = cpu.filter(|c| *c > 0.0) {
        evidence.push(Evidence {
            text: format!(
                "at least {:.1} % of the server's CPU samples are in performance_schema's own functions (its *_v1 interface, history inserts and timers; self time)",
                c * 100.0
            ),
            anchor: "cpu".into(),
        });
    }
    evidence.push(Evidence {
        text: format!(
            "innoprof, for comparison: its probes cost an estimated {:.2} % of one core in this recording{}, its own process {:.2} %",
            s.overhead.probes_pct_of_core,
            s.overhead
                .budget_pct_of_core
                .map(|b| format!(" (budget {b} %)"))
                .unwrap_or_default(),
            s.overhead.agent_cpu_pct_of_core
        ),
        anchor: "summary".into(),
    });
    let title = if severity == Severity::Warning {
        "performance_schema times latches or most instruments: a cost on every event, measured at 4-20 % of throughput"
    } else {
        "performance_schema is on with its usual instruments (no latch timers)"
    };
    Some(Finding {
        rule: "performance_schema_overhead".into(),
        severity,
        title: title.into(),
        evidence,
        cause: "Every enabled instrument is a call on its event, every timed one two timer reads, and the wait/synch instruments fire on each mutex and rw-lock acquisition; consumers then copy each event into history tables. On a busy server that is percent of its CPU spent observing itself.".into(),
        next: vec![
            "Turn off the latch timers unless someone is reading them: UPDATE performance_schema.setup_instruments SET ENABLED='NO', TIMED='NO' WHERE NAME LIKE 'wait/synch/%';".into(),
            "Keep only the consumers in use: SELECT * FROM performance_schema.setup_consumers WHERE ENABLED='YES';".into(),
            "For latch waits during an incident, `innoprof record` gives counts, latencies and stacks at the cost stated in its overhead line.".into(),
        ],
        // The CPU it was seen to take, else a small weight: a warning of
        // cost not measured here ranks below measured ones.
        weight: cpu.unwrap_or(0.0).max(1e-4),
        explained_by: None,
    })
}

/// Share (0..1) of on-CPU samples whose leaf is a performance_schema
/// function (self time, summed over the top table: a lower bound).
fn pfs_cpu_share(s: &Summary) -> Option<f64> {
    let on = &s.cpu.as_ref()?.oncpu;
    (on.samples > 0).then(|| {
        on.top
            .rows
            .iter()
            .filter(|r| is_pfs_function(&r.symbol))
            .map(|r| r.self_pct)
            .sum::<f64>()
            / 100.0
    })
}
