//! `top` as plain text: what is printed each refresh when stdout is not a
//! terminal, and once for a saved recording. The cell formats are shared
//! with the terminal UI.

use std::fmt::Write;

use innoprof::live::statements::{ConnectionRow, StatementRow, Statements};
use innoprof::live::{Frame, ProbeRow, SortKey, Spend, WaitRow};
use innoprof::record::statements::OTHER_CONNECTION;
use innoprof::report::cpu_table;

/// Rows of the latch and call-site tables.
pub const SITE_ROWS: usize = 10;
/// Rows of the statements table in plain text.
pub const STATEMENT_ROWS: usize = 10;

/// A rate of calls: `1234.5`, `45.3k`.
pub fn calls(per_s: f64) -> String {
    innoprof::text::units::count((per_s * 10.0).round() / 10.0)
}

/// Wait per second, as the time spent waiting per second of wall clock.
pub fn wait(ns_per_s: f64) -> String {
    if ns_per_s >= 1e9 {
        format!("{:.2} s/s", ns_per_s / 1e9)
    } else if ns_per_s >= 1e6 || ns_per_s == 0.0 {
        format!("{:.2} ms/s", ns_per_s / 1e6)
    } else {
        format!("{:.1} us/s", ns_per_s / 1e3)
    }
}

pub fn p99(row: &ProbeRow) -> String {
    match row.p99_ns {
        Some(ns) => innoprof::text::units::ns(ns),
        None => "-".into(),
    }
}

/// Share of the interval the probe was on: blank when all of it, `off`
/// when none (the governor switched it off: its zeros mean nothing).
pub fn on(row: &ProbeRow) -> String {
    if row.on_fraction >= 0.999 {
        String::new()
    } else if row.on_fraction < 0.005 {
        "off".into()
    } else {
        format!("{:.0}%", row.on_fraction * 100.0)
    }
}

/// The wait table's column headers, the sorted one marked with `*`.
pub fn headers(sort: SortKey) -> [String; 5] {
    let mark = |k: SortKey| {
        if k == sort {
            format!("*{}", k.header())
        } else {
            k.header().to_string()
        }
    };
    [
        "probe".into(),
        mark(SortKey::CallsPerSec),
        mark(SortKey::WaitPerSec),
        mark(SortKey::P99),
        "on".into(),
    ]
}

/// The governor's line: what the probes cost against the budget.
pub fn spend(s: &Spend) -> String {
    let budget = match s.budget_pct_of_core {
        Some(b) => format!(" of a {b}% budget"),
        None => " (no budget: --max-overhead off)".into(),
    };
    let agent = s
        .agent_pct_of_core
        .map(|a| format!("; innoprof {a:.2}% of a core"))
        .unwrap_or_default();
    let profiler = s
        .cpu_profiler_pct_of_core
        .map(|c| format!("; CPU profiler {c:.2}% of a core (kernel-measured)"))
        .unwrap_or_default();
    let cut = match s.probes_cut {
        0 => String::new(),
        n => format!("; {n} probe(s) duty-cycled (rates are over their on time)"),
    };
    format!(
        "governor: probes cost {:.3}% of a core{budget}{profiler}{agent}{cut}",
        s.probes_pct_of_core
    )
}

pub fn site_row(r: &WaitRow) -> [String; 4] {
    [
        r.name.clone(),
        r.probe.clone(),
        calls(r.calls_per_s),
        wait(r.wait_ns_per_s),
    ]
}

/// The statements table's column headers.
pub const STATEMENT_HEADERS: [&str; 7] = [
    "wait/s",
    "calls/s",
    "exec/s",
    "conns",
    "users",
    "top probe",
    "fingerprint",
];

/// A statement's cells, in [`STATEMENT_HEADERS`]' order.
pub fn statement_row(r: &StatementRow) -> [String; 7] {
    [
        wait(r.wait_ns_per_s),
        calls(r.calls_per_s),
        calls(r.executions_per_s),
        r.connections.to_string(),
        if r.users.is_empty() {
            "-".into()
        } else {
            r.users.join(",")
        },
        r.top_probe.clone().unwrap_or_else(|| "-".into()),
        r.fingerprint.clone(),
    ]
}

/// The connections table's column headers.
pub const CONNECTION_HEADERS: [&str; 7] = [
    "id",
    "user",
    "host",
    "db",
    "wait/s",
    "calls/s",
    "top statement",
];

/// A connection's cells, in [`CONNECTION_HEADERS`]' order.
pub fn connection_row(r: &ConnectionRow) -> [String; 7] {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    [
        if r.id == OTHER_CONNECTION {
            "other".into()
        } else {
            r.id.to_string()
        },
        or_dash(&r.user),
        or_dash(&r.host),
        or_dash(&r.db),
        wait(r.wait_ns_per_s),
        calls(r.calls_per_s),
        or_dash(&r.top_statement),
    ]
}

/// What to know when reading the statements' rates: users unknown, the
/// probes the governor cut (`cut`: how many), hits tied to no statement.
pub fn statements_notes(s: &Statements, cut: usize) -> Vec<String> {
    let mut notes = Vec::new();
    if !s.named {
        notes.push("users, hosts and dbs unknown (no processlist read): connections by id".into());
    }
    if cut > 0 {
        notes.push(format!(
            "{cut} probe(s) duty-cycled: their hits count only while on"
        ));
    }
    if s.unattributed_per_s > 0.0 {
        notes.push(format!(
            "{} calls/s tied to no statement",
            calls(s.unattributed_per_s)
        ));
    }
    notes
}

/// All tables of a frame, sorted by `sort`; `cpu_rows`: rows of the
/// on-CPU table. Names came from the target or a bundle: control
/// characters are escaped (see [`innoprof::text`]).
pub fn render(title: &str, frame: &Frame, sort: SortKey, cpu_rows: usize) -> String {
    innoprof::text::printable_lines(&render_raw(title, frame, sort, cpu_rows)).into_owned()
}

fn render_raw(title: &str, frame: &Frame, sort: SortKey, cpu_rows: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(out, "{}", spend(&frame.spend));
    let _ = writeln!(out, "\nwaits (sorted by {}):", sort.header());
    let rows: Vec<[String; 5]> = frame
        .probes
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                calls(r.calls_per_s),
                if r.timed {
                    wait(r.wait_ns_per_s)
                } else {
                    "-".into()
                },
                p99(r),
                on(r),
            ]
        })
        .collect();
    table(&mut out, &headers(sort), &rows, 1);
    for (what, sites) in [
        ("latches", &frame.latches),
        ("call sites", &frame.callsites),
    ] {
        if sites.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\ntop {what} by wait:");
        let rows: Vec<[String; 4]> = sites.iter().take(SITE_ROWS).map(site_row).collect();
        let name = if what == "latches" {
            "latch"
        } else {
            "call site"
        };
        table(
            &mut out,
            &[
                name.into(),
                "probe".into(),
                "calls/s".into(),
                "wait/s".into(),
            ],
            &rows,
            2,
        );
    }
    if let Some(s) = &frame.statements {
        render_statements(&mut out, s, frame.spend.probes_cut);
    }
    match &frame.cpu {
        Some(cpu) => out.push_str(&cpu_table::render_rows(cpu, cpu_rows, cpu_rows / 2)),
        None => out.push_str("\non-CPU: not profiled\n"),
    }
    out
}

/// The top statements, one line each, most wait first; or why there are none.
fn render_statements(out: &mut String, s: &Statements, cut: usize) {
    if !s.attributed {
        let _ = writeln!(out, "\n{}", s.how);
        return;
    }
    let notes = statements_notes(s, cut);
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!("; {}", notes.join("; "))
    };
    let _ = writeln!(out, "\ntop statements by wait{notes}:");
    if s.statements.is_empty() {
        let _ = writeln!(out, "(no statement hit a probe)");
        return;
    }
    let rows: Vec<[String; 7]> = s
        .statements
        .iter()
        .take(STATEMENT_ROWS)
        .map(statement_row)
        .collect();
    let header = STATEMENT_HEADERS.map(String::from);
    aligned(out, &header, &rows, |i| i >= 4);
    if s.statements.len() > STATEMENT_ROWS {
        let _ = writeln!(out, "(+{} more)", s.statements.len() - STATEMENT_ROWS);
    }
}

/// The first `left` columns (names) left-aligned, the numbers right-aligned.
fn table<const N: usize>(
    out: &mut String,
    header: &[String; N],
    rows: &[[String; N]],
    left: usize,
) {
    aligned(out, header, rows, |i| i < left)
}

/// The columns `left(i)` says left-aligned, the others right-aligned.
fn aligned<const N: usize>(
    out: &mut String,
    header: &[String; N],
    rows: &[[String; N]],
    left: impl Fn(usize) -> bool,
) {
    let mut width = [0usize; N];
    for r in std::iter::once(header).chain(rows) {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in r.iter().zip(width).enumerate() {
            let gap = if i == 0 { "" } else { "  " };
            if left(i) {
                let _ = write!(line, "{gap}{cell:<w$}");
            } else {
                let _ = write!(line, "{gap}{cell:>w$}");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells() {
        assert_eq!(wait(2_500_000.0), "2.50 ms/s");
        assert_eq!(wait(1.5e9), "1.50 s/s");
        assert_eq!(wait(1_500.0), "1.5 us/s");
        assert_eq!(wait(0.0), "0.00 ms/s");
        assert_eq!(calls(45_321.0), "45.3k");
        assert_eq!(calls(12.04), "12");
        assert_eq!(headers(SortKey::P99)[3], "*p99");
        assert_eq!(headers(SortKey::P99)[1], "calls/s");
    }

    #[test]
    fn renders_every_table() {
        let frame = Frame {
            interval_s: 1.0,
            probes: vec![ProbeRow {
                name: "sql.commit".into(),
                timed: true,
                calls_per_s: 120.0,
                wait_ns_per_s: 3e6,
                p99_ns: Some(1 << 20),
                on_fraction: 0.5,
            }],
            callsites: vec![WaitRow {
                probe: "innodb.mutex.enter".into(),
                name: "trx0trx.cc:120".into(),
                calls_per_s: 10.0,
                wait_ns_per_s: 1e3,
            }],
            ..Default::default()
        };
        let text = render("t", &frame, SortKey::WaitPerSec, 5);
        assert!(
            text.contains("probe       calls/s    *wait/s      p99   on\n"),
            "{text}"
        );
        assert!(
            text.contains("sql.commit      120  3.00 ms/s  1.05 ms  50%\n"),
            "{text}"
        );
        assert!(
            text.contains("trx0trx.cc:120  innodb.mutex.enter       10  1.0 us/s"),
            "{text}"
        );
        assert!(text.contains("top call sites by wait:"), "{text}");
        assert!(!text.contains("top latches"), "{text}");
        assert!(text.contains("on-CPU: not profiled"), "{text}");
    }

    #[test]
    fn the_statements_block_after_the_probes() {
        use innoprof::live::statements::{StatementRow, Statements};
        let row = |fingerprint: &str, wait, calls| StatementRow {
            id: "x".into(),
            fingerprint: fingerprint.into(),
            wait_ns_per_s: wait,
            calls_per_s: calls,
            executions_per_s: 12.0,
            connections: 2,
            users: Vec::new(),
            top_probe: Some("sql.commit".into()),
        };
        let mut frame = Frame {
            interval_s: 1.0,
            statements: Some(Statements {
                interval_s: 1.0,
                attributed: true,
                // As `Statements` has them: most wait first.
                statements: [row("COMMIT", 1.2e6, 450.0)]
                    .into_iter()
                    .chain(
                        (0..12).map(|i| row(&format!("SELECT {i}"), 1e3 * f64::from(12 - i), 5.0)),
                    )
                    .collect(),
                unattributed_per_s: 3.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        frame.spend.probes_cut = 1;
        let text = render("t", &frame, SortKey::WaitPerSec, 5);
        let block = text
            .split("top statements by wait")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        assert!(text.find("waits (sorted").unwrap() < text.find("top statements").unwrap());
        assert!(
            block.starts_with("; users, hosts and dbs unknown"),
            "{block}"
        );
        assert!(block.contains("1 probe(s) duty-cycled"), "{block}");
        assert!(block.contains("3 calls/s tied to no statement"), "{block}");
        assert!(
            block.contains("   wait/s  calls/s  exec/s  conns  users  top probe   fingerprint\n"),
            "{block}"
        );
        assert!(
            block.contains("1.20 ms/s      450      12      2  -      sql.commit  COMMIT\n"),
            "{block}"
        );
        // Ten rows, most wait first, and how many more.
        assert!(block.contains("SELECT 8\n(+3 more)"), "{block}");
        assert!(!block.contains("SELECT 9"), "{block}");

        frame.statements = Some(Statements::not_attributed(
            "statements not attributed: switched off (--no-statements)".into(),
        ));
        let text = render("t", &frame, SortKey::WaitPerSec, 5);
        assert!(
            text.contains("\nstatements not attributed: switched off (--no-statements)\n"),
            "{text}"
        );
        assert!(!text.contains("top statements"), "{text}");
    }
}
