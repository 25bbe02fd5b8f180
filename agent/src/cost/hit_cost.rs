//! What one probe hit costs on this host: calibrated per attach kind and
//! first-instruction handling (measured by `calibrate`, kept per boot by
//! `kept_hit_cost`).

use serde::{Deserialize, Serialize};

use crate::plan::catalog::Measure;
use crate::resolve::EntryInsn;

/// Nanoseconds of CPU one call of a probed function costs, by how the
/// probe is attached and how its first instruction is handled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HitCost {
    /// Timed probe (entry + return) on an emulated `push` prologue.
    pub latency_emulated_ns: f64,
    /// Timed probe on a single-stepped first instruction.
    pub latency_stepped_ns: f64,
    /// Count-only probe, emulated / single-stepped.
    pub count_emulated_ns: f64,
    pub count_stepped_ns: f64,
    /// Whether stacks were captured while measuring (they cost more).
    pub with_stacks: bool,
    /// Of the per-call costs, what the BPF programs themselves took (the
    /// kernel's run-time statistics): timed (entry + return) and count-only.
    /// The rest is the trap, which does not depend on the programs.
    #[serde(default)]
    pub bpf_latency_ns: f64,
    #[serde(default)]
    pub bpf_count_ns: f64,
    /// The stack walk's share of a timed, emulated hit (the same probe
    /// measured with its stacks switched off in BPF): what the governor
    /// saves per hit by sampling stacks 1-in-N. 0 without stacks.
    #[serde(default)]
    pub stack_ns: f64,
}

impl HitCost {
    /// The cost of one call at a symbol entered by `entry`, probed as `measure`.
    pub fn per_call_ns(&self, measure: Measure, entry: EntryInsn) -> f64 {
        match (measure, entry.emulated()) {
            (Measure::Latency, true) => self.latency_emulated_ns,
            (Measure::Latency, false) => self.latency_stepped_ns,
            (Measure::Count, true) => self.count_emulated_ns,
            (Measure::Count, false) => self.count_stepped_ns,
        }
    }

    /// The trap alone: the per-call cost less the BPF programs' run time.
    pub fn trap_ns(&self, measure: Measure, entry: EntryInsn) -> f64 {
        let bpf = match measure {
            Measure::Latency => self.bpf_latency_ns,
            Measure::Count => self.bpf_count_ns,
        };
        (self.per_call_ns(measure, entry) - bpf).max(0.0)
    }

    /// The same cost split into the part every hit pays and the stack
    /// walk, which the governor can sample 1-in-N.
    pub fn slot_cost(&self, measure: Measure, entry: EntryInsn) -> crate::cost::governor::SlotCost {
        let total = self.per_call_ns(measure, entry);
        let stack_ns = if self.with_stacks {
            self.stack_ns.min(total)
        } else {
            0.0
        };
        crate::cost::governor::SlotCost {
            base_ns: total - stack_ns,
            stack_ns,
        }
    }
}
