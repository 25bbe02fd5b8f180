//! The overhead lines of the summary: what probe hits cost the server, what
//! innoprof cost itself, and which probes the governor duty-cycled.

use serde::{Deserialize, Serialize};

use super::model::{ProbeStatus, SamplingState, Summary};
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

/// The overhead figures `metadata.json` carries: observed hits × the per-call
/// cost calibrated at start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadEstimate {
    /// How the numbers were made, for whoever reads the file later.
    pub method: String,
    /// False when calibration failed and typical costs were used.
    pub calibrated: bool,
    /// Server CPU spent in probe hits over the whole recording.
    pub total_ns: u64,
    /// `total_ns` as a share of one CPU over the recording, in %.
    pub pct_of_one_cpu: f64,
    pub probes: Vec<ProbeOverhead>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOverhead {
    pub name: String,
    /// Hits seen (before any scaling of a duty-cycled probe).
    pub hits: u64,
    pub estimated_ns: u64,
}

pub fn estimate(summary: &Summary) -> OverheadEstimate {
    let wall_ns = summary.duration_s * 1e9;
    let probes: Vec<ProbeOverhead> = summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .map(|p| ProbeOverhead {
            name: p.name.clone(),
            hits: p.sampling.as_ref().map_or(p.calls, |s| s.observed_calls),
            estimated_ns: (p.overhead_pct_of_core / 100.0 * wall_ns).round() as u64,
        })
        .collect();
    let c = &summary.overhead.hit_cost;
    OverheadEstimate {
        method: format!(
            "hits seen x per-call cost calibrated at start{}: timed {:.0} ns (emulated entry) / {:.0} ns (single-stepped), count-only {:.0} / {:.0} ns",
            if c.with_stacks { " with stacks" } else { "" },
            c.latency_emulated_ns,
            c.latency_stepped_ns,
            c.count_emulated_ns,
            c.count_stepped_ns,
        ),
        calibrated: summary.overhead.calibration_note.is_none(),
        total_ns: probes.iter().map(|p| p.estimated_ns).sum(),
        pct_of_one_cpu: summary.overhead.probes_pct_of_core,
        probes,
    }
}
