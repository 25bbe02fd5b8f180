//! `top` as plain text: what is printed each refresh when stdout is not a
//! terminal, and once for a saved recording. The cell formats are shared
//! with the terminal UI.

use std::fmt::Write;

use innoprof::live::{Frame, ProbeRow, SortKey, Spend, WaitRow};
use innoprof::report::cpu_table;

/// Rows of the latch and call-site tables.
pub const SITE_ROWS: usize = 10;

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
    match &frame.cpu {
        Some(cpu) => out.push_str(&cpu_table::render_rows(cpu, cpu_rows, cpu_rows / 2)),
        None => out.push_str("\non-CPU: not profiled\n"),
    }
    out
}

/// The first `left` columns (names) left-aligned, the numbers right-aligned.
fn table<const N: usize>(
    out: &mut String,
    header: &[String; N],
    rows: &[[String; N]],
    left: usize,
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
            if i < left {
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
}
