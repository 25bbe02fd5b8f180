//! The summary table printed on stdout: fixed width, plain ASCII, so it
//! pastes into a ticket unchanged.

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};

use super::model::{ProbeStatus, Summary};
use super::units;

pub fn render(summary: &Summary) -> String {
    let mut out = format!(
        "innoprof: {} pid {} ({}), {:.1}s, {}\n",
        summary.target.server,
        summary.target.pid,
        summary.target.binary,
        summary.duration_s,
        match summary.end_reason {
            super::model::EndReason::Duration => "complete",
            super::model::EndReason::Interrupted => "interrupted (partial)",
            super::model::EndReason::TargetExited => "TARGET EXITED during recording (partial)",
        }
    );
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([
        "probe",
        "symbol",
        "calls",
        "calls/s",
        "total wait",
        "avg",
        "p50<=",
        "p99<=",
        "max",
    ]);
    let dash = || "-".to_string();
    for p in summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        let symbol = match p.symbols.as_slice() {
            [one] => short(&one.name),
            [first, rest @ ..] => format!("{} (+{})", short(&first.name), rest.len()),
            [] => dash(),
        };
        let timed = p.wait_ns_avg.is_some();
        let t = |v: Option<u64>| v.map(units::ns).unwrap_or_else(dash);
        table.add_row([
            p.name.clone(),
            symbol,
            p.calls.to_string(),
            units::count(p.calls_per_sec),
            if timed {
                units::ns(p.wait_ns_total)
            } else {
                dash()
            },
            t(p.wait_ns_avg),
            t(p.wait_ns_p50),
            t(p.wait_ns_p99),
            if timed {
                units::ns(p.wait_ns_max)
            } else {
                dash()
            },
        ]);
    }
    for col in 2..9 {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    // A CPU-only recording (`--probes none`) has no probe table.
    if summary
        .probes
        .iter()
        .any(|p| p.status == ProbeStatus::Attached)
    {
        out.push_str(&table.to_string());
        out.push('\n');
    } else if !summary.probes.is_empty() {
        out.push_str("no wait probe attached (see below why)\n");
    }
    out.push_str(&callsites(summary, TOP_CALLSITES));
    for p in summary
        .probes
        .iter()
        .filter(|p| p.status != ProbeStatus::Attached)
    {
        out.push_str(&format!(
            "not attached: {} - {}\n",
            p.name,
            p.reason.as_deref().unwrap_or("")
        ));
    }
    out.push_str(&drops_line(&summary.drops));
    if let Some(cpu) = &summary.cpu {
        out.push_str(&super::cpu_table::render(cpu));
    }
    out
}

/// What the BPF maps could not hold, or nothing when all was recorded.
fn drops_line(d: &crate::collect::Drops) -> String {
    let lost_stacks = d.stack_collisions + d.stack_errors + d.stack_key_map_full;
    if lost_stacks
        + d.inflight_map_full
        + d.stats_map_full
        + d.callsite_map_full
        + d.returns_without_entry
        == 0
    {
        return String::new();
    }
    format!(
        "dropped: {} stacks ({} collisions, {} errors, {} stack-count map full), {} call sites (call-site map full), \
         {} in-flight entries (map full), {} returns without entry, {} stats (map full); \
         folded stacks and call sites undercount by these\n",
        lost_stacks,
        d.stack_collisions,
        d.stack_errors,
        d.stack_key_map_full,
        d.callsite_map_full,
        d.inflight_map_full,
        d.returns_without_entry,
        d.stats_map_full
    )
}

const TOP_CALLSITES: usize = 10;

/// The call sites with the most wait (or calls, for untimed probes) over
/// all probes: the per-`file:line` view SHOW ENGINE INNODB MUTEX gave.
fn callsites(summary: &Summary, top: usize) -> String {
    let mut rows: Vec<(&str, &super::model::CallsiteResult, bool)> = summary
        .probes
        .iter()
        .flat_map(|p| {
            p.callsites
                .iter()
                .map(move |c| (p.name.as_str(), c, p.wait_ns_avg.is_some()))
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    rows.sort_by_key(|r| std::cmp::Reverse((r.1.wait_ns_total, r.1.calls)));
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header(["probe", "call site", "calls", "total wait", "avg", "max"]);
    for (probe, c, timed) in rows.iter().take(top) {
        let t = |v: u64| {
            if *timed {
                units::ns(v)
            } else {
                "-".to_string()
            }
        };
        table.add_row([
            probe.to_string(),
            c.site.clone(),
            c.calls.to_string(),
            t(c.wait_ns_total),
            t(c.wait_ns_total / c.calls.max(1)),
            t(c.wait_ns_max),
        ]);
    }
    for col in 2..6 {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("top call sites:\n{table}\n")
}

/// `PolicyMutex<TTASEventMutex<GenericPolicy> >::enter(unsigned int, …)` →
/// `PolicyMutex<TTASEventMutex<GenericPolicy> >::enter`, at most 60 chars.
fn short(name: &str) -> String {
    let no_params = match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    if no_params.chars().count() > 60 {
        let tail: String = no_params
            .chars()
            .rev()
            .take(59)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    } else {
        no_params.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_names() {
        assert_eq!(super::short("fil_flush(unsigned long)"), "fil_flush");
        assert!(super::short(&"x".repeat(80)).starts_with('…'));
    }
}
