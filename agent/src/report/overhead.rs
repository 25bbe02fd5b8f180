//! The overhead lines of the summary: what probe hits cost the server, what
//! innoprof cost itself, and which probes the governor duty-cycled.

use super::model::{SamplingState, Summary};
use super::units;
use crate::calibrate::HitCost;

pub fn render(summary: &Summary) -> String {
    let o = &summary.overhead;
    let budget = match o.budget_pct_of_core {
        Some(b) => format!("budget {b}% of one core"),
        None => "no budget (governor off)".to_string(),
    };
    let mut out = format!(
        "overhead: probe hits cost the server ~{:.2}% of one core ({budget}); innoprof itself {:.2}% CPU, {} MiB peak RSS\n",
        o.probes_pct_of_core,
        o.agent_cpu_pct_of_core,
        o.agent_max_rss_kb / 1024,
    );
    out.push_str(&render_hit_cost(&o.hit_cost));
    if let Some(note) = &o.calibration_note {
        out.push_str(&format!("  ({note})\n"));
    }
    for p in &summary.probes {
        let Some(s) = &p.sampling else { continue };
        out.push_str(&match s.state {
            SamplingState::DutyCycled => format!(
                "sampled: {} attached {:.1}% of the time (fully on it would cost ~{:.1}% of a core); {} calls seen, counts and totals scaled x{:.1}\n",
                p.name,
                s.attached_fraction * 100.0,
                s.projected_full_pct_of_core,
                s.observed_calls,
                s.scale,
            ),
            SamplingState::Detached => format!(
                "detached: {} by the governor after {:.1}% of the time (fully on it would cost ~{:.1}% of a core); counts scaled from {} calls seen\n",
                p.name,
                s.attached_fraction * 100.0,
                s.projected_full_pct_of_core,
                s.observed_calls,
            ),
        });
    }
    for e in &o.governor_errors {
        out.push_str(&format!("governor: {e}\n"));
    }
    out
}

/// One line: what a probe hit costs here, by kind.
pub fn render_hit_cost(c: &HitCost) -> String {
    let ns = |v: f64| units::ns(v.round() as u64);
    format!(
        "per-call probe cost here{}: timed {} (push entry, emulated) / {} (single-stepped entry); count-only {} / {}\n",
        if c.with_stacks { " (with stacks)" } else { "" },
        ns(c.latency_emulated_ns),
        ns(c.latency_stepped_ns),
        ns(c.count_emulated_ns),
        ns(c.count_stepped_ns),
    )
}
