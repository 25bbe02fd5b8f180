//! The summary table printed on stdout: fixed width, plain ASCII, so it
//! pastes into a ticket unchanged.

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};

use crate::model::summary::{ProbeStatus, Summary};
use crate::text::units;

/// `record --follow` across restarts: which processes were watched when,
/// and the gaps nothing watched. None for a single process.
pub fn segments_line(summary: &Summary) -> Option<String> {
    if summary.segments.len() < 2 {
        return None;
    }
    let parts: Vec<String> = summary
        .segments
        .iter()
        .map(|g| {
            format!(
                "pid {} {:.1}–{:.1} s",
                g.pid,
                g.start_s,
                g.start_s + g.duration_s
            )
        })
        .collect();
    let gaps: Vec<String> = summary
        .gaps()
        .iter()
        .map(|(a, b)| format!("{:.1}–{:.1} s", a, b))
        .collect();
    Some(format!(
        "followed across {} restart(s): {}; not watched (restarting): {}; counts and rates are \
         of the {:.1} s watched, nothing projected over a gap",
        summary.segments.len() - 1,
        parts.join(", "),
        gaps.join(", "),
        summary.watched_s()
    ))
}

/// summary.txt and `innoprof report`'s text. The summary came from a
/// target or from a bundle (untrusted): control characters in a probe,
/// frame or statement are escaped as the whole text is, its own line
/// breaks kept (see [`crate::text`]).
pub fn render(summary: &Summary) -> String {
    crate::text::printable_lines(&render_raw(summary)).into_owned()
}

fn render_raw(summary: &Summary) -> String {
    let mut out = format!(
        "innoprof: {} pid {} ({}), {:.1}s, {}\n",
        summary.target.server,
        summary.target.pid,
        summary.target.binary,
        summary.duration_s,
        end_text(summary.end_reason)
    );
    // A target-chosen label, already cut to a plain charset.
    if let Some(place) = summary.target.placement.describe() {
        out.push_str(&format!("in {place}\n"));
    }
    if let Some(line) = segments_line(summary) {
        out.push_str(&line);
        out.push('\n');
    }
    // What is wrong first; the numbers behind it follow.
    out.push_str(&crate::findings::render(&summary.findings));
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
        let (calls, rate) = calls_cells(p);
        table.add_row([
            p.name.clone(),
            symbol,
            calls,
            rate,
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
    out.push_str(&who_waits(summary, TOP_CALLSITES));
    out.push_str(&super::who_text::render(summary.who.as_ref()));
    out.push_str(&super::counter_table::render(&summary.counters));
    out.push_str(&super::state_text::render(summary.server_state.as_ref()));
    out.push_str(&latches(summary, TOP_CALLSITES));
    out.push_str(&callsites(summary, TOP_CALLSITES));
    if let Some(cpu) = &summary.cpu {
        out.push_str(&super::cpu_table::render(cpu));
    }
    if let Some(ts) = &summary.timeseries {
        out.push_str(&format!(
            "time series: {} intervals of {} written to {}\n",
            ts.intervals,
            units::ns(ts.interval_ms.saturating_mul(1_000_000)),
            ts.files.join(", ")
        ));
    }
    // The server first; how innoprof itself fared (what it could not
    // attach or hold, what it cost, how the governor sampled) last.
    out.push_str("\ninnoprof itself:\n");
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
    out.push_str(&super::overhead::render(summary));
    out
}

/// A probe's calls and calls/s cells: what it saw, exactly, and for a cut
/// probe the estimate with its bound when there are gaps between windows
/// (see `sampled:`); one form for summary.txt and report.html.
pub(crate) fn calls_cells(p: &crate::model::summary::ProbeResult) -> (String, String) {
    match &p.sampling {
        // A bound wider than half the estimate: what was seen and the
        // rate per second watched, not a total (issue 50).
        Some(s) if crate::cost::estimate::too_wide(&s.estimate) => {
            let (r, half) = crate::cost::estimate::watched_rate(&s.windows);
            (
                format!("{} seen", p.calls),
                format!("{}±{} watched", units::count(r), units::count(half)),
            )
        }
        Some(s) if s.estimate.gap_s > 0.0 => (
            format!(
                "{} seen, ~{}±{}",
                p.calls,
                s.estimate.calls.round(),
                s.estimate.calls_bound.ceil()
            ),
            format!("~{}", units::count(p.calls_per_sec)),
        ),
        Some(_) => (format!("{} seen", p.calls), units::count(p.calls_per_sec)),
        None => (p.calls.to_string(), units::count(p.calls_per_sec)),
    }
}

pub(crate) fn end_text(end: crate::model::summary::EndReason) -> &'static str {
    match end {
        crate::model::summary::EndReason::Duration => "complete",
        crate::model::summary::EndReason::Interrupted => "interrupted (partial)",
        crate::model::summary::EndReason::TargetExited => {
            "TARGET EXITED during recording (partial)"
        }
    }
}

/// What the BPF maps could not hold, or nothing when all was recorded.
fn drops_line(d: &crate::collect::Drops) -> String {
    // A bundle's counts may be anything: summed saturating.
    let sum = |n: &[u64]| n.iter().fold(0u64, |a, b| a.saturating_add(*b));
    let not_taken = sum(&[d.stack_map_full, d.stack_errors, d.stack_busy]);
    if sum(&[
        not_taken,
        d.stack_key_map_full,
        d.inflight_map_full,
        d.stats_map_full,
        d.callsite_map_full,
        d.returns_without_entry,
        d.thread_map_full,
    ]) == 0
    {
        return String::new();
    }
    format!(
        "dropped: {} stacks not taken ({} stack map full, {} errors, {} busy; their calls are under [lost stack]), \
         {} stack counts (stack-count map full), {} call sites (call-site map full), \
         {} in-flight entries (map full), {} returns without entry, {} stats (map full), \
         {} hits not tied to a thread (thread map full); \
         folded stacks, call sites and threads undercount by theirs\n",
        not_taken,
        d.stack_map_full,
        d.stack_errors,
        d.stack_busy,
        d.stack_key_map_full,
        d.callsite_map_full,
        d.inflight_map_full,
        d.returns_without_entry,
        d.stats_map_full,
        d.thread_map_full
    )
}

const TOP_CALLSITES: usize = 10;

/// The call sites with the most wait (or calls, for untimed probes) over
/// all probes: the per-`file:line` view SHOW ENGINE INNODB MUTEX gave,
/// with the latch taken where the probe names latches.
fn callsites(summary: &Summary, top: usize) -> String {
    let rows: Vec<WaitRow> = top_callsites(summary, top)
        .into_iter()
        .map(|(probe, c, timed)| WaitRow {
            probe,
            key: match &c.latch {
                Some(l) => format!("{l} @ {}", c.site),
                None => c.site.clone(),
            },
            calls: c.calls,
            wait_ns_total: c.wait_ns_total,
            wait_ns_max: c.wait_ns_max,
            background_wait_ns: c.background_wait_ns,
            timed,
        })
        .collect();
    wait_table("top call sites", "call site", rows, top)
}

/// Who made each probe's calls, per thread role: the rows with the most
/// wait (then calls) over all probes. Background threads' waits are the
/// server's own work (a purge worker queuing on srv_sys as it resumes),
/// never the workload's contention.
fn who_waits(summary: &Summary, top: usize) -> String {
    let mut rows: Vec<(&str, &crate::model::summary::RoleResult, bool, u64, u64)> = summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .flat_map(|p| {
            p.roles.iter().map(move |r| {
                (
                    p.name.as_str(),
                    r,
                    p.wait_ns_avg.is_some(),
                    p.wait_ns_total,
                    p.calls,
                )
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    rows.sort_by_key(|(_, r, ..)| std::cmp::Reverse((r.wait_ns_total, r.calls)));
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([
        "probe",
        "thread role",
        "threads",
        "calls",
        "total wait",
        "share",
    ]);
    for (probe, r, timed, wait, calls) in rows.iter().take(top) {
        let share = if *timed {
            100.0 * r.wait_ns_total as f64 / (*wait).max(1) as f64
        } else {
            100.0 * r.calls as f64 / (*calls).max(1) as f64
        };
        let role = match r.kind {
            crate::model::summary::RoleKind::Background => format!("{} (background)", r.role),
            _ => r.role.clone(),
        };
        table.add_row([
            probe.to_string(),
            role,
            r.threads.to_string(),
            r.calls.to_string(),
            if *timed {
                units::ns(r.wait_ns_total)
            } else {
                "-".to_string()
            },
            format!("{share:.0}%"),
        ]);
    }
    for col in 2..6 {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    // Hits made before their thread's role was known: `unknown` in the
    // flame graphs and pprof labels, said here so the two can be matched.
    let early: Vec<String> = rows
        .iter()
        .take(top)
        .filter(|(_, r, ..)| r.unlabelled_calls > 0)
        .map(|(probe, r, timed, ..)| {
            let wait = if *timed {
                format!(" ({})", units::ns(r.unlabelled_wait_ns))
            } else {
                String::new()
            };
            format!("{probe} {}: {} calls{wait}", r.role, r.unlabelled_calls)
        })
        .collect();
    let note = if early.is_empty() {
        String::new()
    } else {
        format!(
            "made before the thread's role was known, so `unknown` in the stacks: {}\n",
            early.join("; ")
        )
    };
    format!(
        "who waits (per thread role; share of the probe's wait, or calls where untimed; \
         background threads are the server's own work, not the workload's contention):\n{table}\n{note}"
    )
}

/// Per latch (`dict_sys_mutex`), for probes that name the latch they took.
fn latches(summary: &Summary, top: usize) -> String {
    let rows: Vec<WaitRow> = summary
        .probes
        .iter()
        .flat_map(|p| {
            p.latches.iter().map(move |l| WaitRow {
                probe: &p.name,
                key: l.latch.clone(),
                calls: l.calls,
                wait_ns_total: l.wait_ns_total,
                wait_ns_max: l.wait_ns_max,
                background_wait_ns: l.background_wait_ns,
                timed: p.wait_ns_avg.is_some(),
            })
        })
        .collect();
    wait_table("top latches", "latch", rows, top)
}

struct WaitRow<'a> {
    probe: &'a str,
    key: String,
    calls: u64,
    wait_ns_total: u64,
    wait_ns_max: u64,
    /// Of the wait, background threads'.
    background_wait_ns: u64,
    timed: bool,
}

/// The `top` rows with the most wait (then calls); empty when no rows.
fn wait_table(title: &str, key_header: &str, mut rows: Vec<WaitRow>, top: usize) -> String {
    if rows.is_empty() {
        return String::new();
    }
    // The workload's contention first: background threads' wait is shown
    // apart and does not rank a row.
    rows.sort_by_key(|r| {
        std::cmp::Reverse((
            r.wait_ns_total.saturating_sub(r.background_wait_ns),
            r.wait_ns_total,
            r.calls,
        ))
    });
    let mut table = Table::new();
    table.load_preset(ASCII_MARKDOWN);
    table.set_header([
        "probe",
        key_header,
        "calls",
        "total wait",
        "of it background",
        "avg",
        "max",
    ]);
    for r in rows.iter().take(top) {
        let t = |v: u64| {
            if r.timed {
                units::ns(v)
            } else {
                "-".to_string()
            }
        };
        table.add_row([
            r.probe.to_string(),
            r.key.clone(),
            r.calls.to_string(),
            t(r.wait_ns_total),
            t(r.background_wait_ns),
            t(r.wait_ns_total / r.calls.max(1)),
            t(r.wait_ns_max),
        ]);
    }
    for col in 2..7 {
        if let Some(c) = table.column_mut(col) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!("{title}:\n{table}\n")
}

/// The `top` call sites with the most wait (then calls) over all probes:
/// (probe, site, whether the probe is timed).
pub(crate) fn top_callsites(
    summary: &Summary,
    top: usize,
) -> Vec<(&str, &crate::model::summary::CallsiteResult, bool)> {
    let mut rows: Vec<(&str, &crate::model::summary::CallsiteResult, bool)> = summary
        .probes
        .iter()
        .flat_map(|p| {
            p.callsites
                .iter()
                .map(move |c| (p.name.as_str(), c, p.wait_ns_avg.is_some()))
        })
        .collect();
    // Ranked by the workload's wait: background threads' is not contention.
    rows.sort_by_key(|r| {
        std::cmp::Reverse((
            r.1.wait_ns_total.saturating_sub(r.1.background_wait_ns),
            r.1.wait_ns_total,
            r.1.calls,
        ))
    });
    rows.truncate(top);
    rows
}

/// `PolicyMutex<TTASEventMutex<GenericPolicy> >::enter(unsigned int, …)` →
/// `PolicyMutex<TTASEventMutex<GenericPolicy> >::enter`, at most 60 chars.
pub(crate) fn short(name: &str) -> String {
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
