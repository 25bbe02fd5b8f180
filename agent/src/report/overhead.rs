//! What the probes cost the server: hits × a per-hit cost. The per-hit
//! cost is a documented constant per entry instruction, from the
//! measurements on these VMs (PRODUCT.md, "Cost model"); a calibrated value
//! replaces [`per_hit_cost_ns`] later, everything else stays.

use serde::{Deserialize, Serialize};

use super::model::{ProbeStatus, Summary};
use crate::catalog::Measure;
use crate::resolve::EntryInsn;

/// A uprobe whose first instruction the kernel emulates (`push`, NOP).
pub const EMULATED_HIT_NS: u64 = 1_000;
/// A uprobe whose first instruction is single-stepped out of line.
pub const SINGLE_STEPPED_HIT_NS: u64 = 15_000;
/// The return probe of a latency probe (1.6 µs for the pair, measured,
/// less the emulated entry).
pub const RETURN_HIT_NS: u64 = 700;

/// Server CPU time one hit of a symbol costs, in ns.
pub fn per_hit_cost_ns(entry: EntryInsn, measure: Measure) -> u64 {
    let entry_ns = if entry.emulated() {
        EMULATED_HIT_NS
    } else {
        SINGLE_STEPPED_HIT_NS
    };
    match measure {
        Measure::Latency => entry_ns + RETURN_HIT_NS,
        Measure::Count => entry_ns,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadEstimate {
    /// How the numbers were made, for whoever reads the file later.
    pub method: String,
    /// False while the per-hit costs are constants, not measured here.
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
    pub hits: u64,
    pub estimated_ns: u64,
}

pub fn estimate(summary: &Summary) -> OverheadEstimate {
    let probes: Vec<ProbeOverhead> = summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .map(|p| ProbeOverhead {
            name: p.name.clone(),
            hits: p.calls,
            estimated_ns: p
                .symbols
                .iter()
                .map(|s| s.calls.saturating_mul(per_hit_cost_ns(s.entry, p.measure)))
                .sum(),
        })
        .collect();
    let total_ns: u64 = probes.iter().map(|p| p.estimated_ns).sum();
    let wall_ns = summary.duration_s * 1e9;
    OverheadEstimate {
        method: format!(
            "hits x per-hit cost by first instruction: {EMULATED_HIT_NS} ns emulated, \
             {SINGLE_STEPPED_HIT_NS} ns single-stepped, +{RETURN_HIT_NS} ns for a latency probe's return"
        ),
        calibrated: false,
        total_ns,
        pct_of_one_cpu: if wall_ns > 0.0 {
            total_ns as f64 * 100.0 / wall_ns
        } else {
            0.0
        },
        probes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_stepped_costs_more_and_returns_add() {
        assert_eq!(per_hit_cost_ns(EntryInsn::Push, Measure::Count), 1_000);
        assert_eq!(per_hit_cost_ns(EntryInsn::Push, Measure::Latency), 1_700);
        assert_eq!(per_hit_cost_ns(EntryInsn::Other, Measure::Count), 15_000);
        assert_eq!(
            per_hit_cost_ns(EntryInsn::Endbr64, Measure::Latency),
            15_700
        );
    }
}
