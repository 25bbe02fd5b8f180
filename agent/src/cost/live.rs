//! What probe hits cost the server, measured in the target while recording.
//!
//! A hit costs a trap (the breakpoint, the kernel's uprobe handling, the
//! return trampoline of a timed probe) plus the BPF programs' run. The
//! programs' run time in the target is what the kernel's run-time
//! statistics report (run count and nanoseconds per program, switched on by
//! the session): it includes the stack walks through the server's 30–60
//! frames, contention on the shared maps and cache misses that a shallow
//! calibration function in innoprof does not see. The trap is the calibrated
//! per-call cost less the programs' own run time during calibration.
//!
//! So the cost of one call at a slot is `trap(measure, entry)` (calibrated)
//! plus the programs' average run time in the target (live), re-estimated
//! from the kernel's figures over the last second or more.

use crate::attach::{ProgramRuns, RunStats};
use crate::bpf::abi::SlotId;
use crate::collect::SlotCount;
use crate::cost::governor::SlotCost;
use crate::cost::hit_cost::HitCost;
use crate::plan::catalog::Measure;
use crate::resolve::EntryInsn;
use std::collections::HashMap;

/// Fewer runs than this in a window say too little: keep the last average.
const MIN_RUNS: u64 = 200;

/// Average BPF run time per program run, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProgramAverages {
    pub enter: Option<f64>,
    pub ret: Option<f64>,
    pub count: Option<f64>,
}

impl ProgramAverages {
    /// Each program's run time per run from `old` to `new`, where it ran
    /// at least `min_runs` times.
    fn between(new: RunStats, old: RunStats, min_runs: u64) -> Self {
        let avg = |new: ProgramRuns, old: ProgramRuns| {
            let runs = new.runs.saturating_sub(old.runs);
            (runs >= min_runs.max(1))
                .then(|| new.run_ns.saturating_sub(old.run_ns) as f64 / runs as f64)
        };
        Self {
            enter: avg(new.enter, old.enter),
            ret: avg(new.ret, old.ret),
            count: avg(new.count, old.count),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LiveCost {
    hit: HitCost,
    /// The programs' statistics when the recording started.
    start: RunStats,
    /// At the last re-estimate.
    last: RunStats,
    recent: ProgramAverages,
    /// Per slot: its counts when its stack share was last measured, and
    /// that share (stacks taken per call). With the stack interval, a hot
    /// probe takes far fewer stacks than one per hit in `stack_every`.
    slots_last: HashMap<SlotId, SlotCount>,
    stack_share: HashMap<SlotId, f64>,
}

impl LiveCost {
    pub fn new(hit: HitCost, start: RunStats) -> Self {
        Self {
            hit,
            start,
            last: start,
            recent: ProgramAverages::default(),
            slots_last: HashMap::new(),
            stack_share: HashMap::new(),
        }
    }

    /// Re-measures each slot's share of calls that took a stack, where
    /// enough calls happened since its last measure.
    pub fn observe_slots(&mut self, counts: &HashMap<SlotId, SlotCount>) {
        for (&slot, &now) in counts {
            let last = self.slots_last.get(&slot).copied().unwrap_or_default();
            let calls = now.calls.saturating_sub(last.calls);
            if calls >= MIN_RUNS {
                let stacks = now.stacks.saturating_sub(last.stacks);
                self.stack_share.insert(slot, stacks as f64 / calls as f64);
                self.slots_last.insert(slot, now);
            }
        }
    }

    /// Re-estimates the programs' run time from the kernel's figures since
    /// the last call (where enough runs happened).
    pub fn observe(&mut self, now: RunStats) {
        let window = ProgramAverages::between(now, self.last, MIN_RUNS);
        let r = self.recent;
        self.recent = ProgramAverages {
            enter: window.enter.or(r.enter),
            ret: window.ret.or(r.ret),
            count: window.count.or(r.count),
        };
        self.last = now;
    }

    /// The current estimate of one call's cost at a slot, in ns.
    pub fn per_call_ns(&self, measure: Measure, entry: EntryInsn) -> f64 {
        self.hit.trap_ns(measure, entry) + self.bpf_ns(measure, &self.recent)
    }

    /// The governor's view of a slot: what every hit costs and what the
    /// stacks add at one hit in 1 (`SlotCost::stack_ns`; one in N costs
    /// 1/N of it). The programs' measured run time includes the stacks
    /// taken at the slot's current rate, so their share is taken out of
    /// the base. That rate is measured (stacks taken per call, see
    /// [`Self::observe_slots`]): the stack interval makes it far lower than
    /// one in `stack_every` on a hot probe, and the governor must not
    /// expect savings from sampling stacks that are already rare. Until
    /// measured it is taken as one in `stack_every`. The walk's own cost
    /// is the calibrated one (a shallow stack: deeper ones cost more, so
    /// the saving from sampling is if anything understated).
    pub fn slot_cost(
        &self,
        measure: Measure,
        entry: EntryInsn,
        stack_every: u32,
        slot: SlotId,
    ) -> SlotCost {
        let total = self.per_call_ns(measure, entry);
        let walk_ns = if self.hit.with_stacks {
            self.hit.stack_ns
        } else {
            0.0
        };
        let (share_now, at_one_in_one) = match (self.stack_share.get(&slot), stack_every) {
            (_, 0) => (0.0, walk_ns),
            (Some(&share), every) => (
                walk_ns * share,
                walk_ns * (share * f64::from(every)).min(1.0),
            ),
            (None, every) => (walk_ns / f64::from(every), walk_ns),
        };
        SlotCost {
            base_ns: (total - share_now).max(self.hit.trap_ns(measure, entry)),
            stack_ns: at_one_in_one,
        }
    }

    /// The programs' run time per call, from `avg` or else calibration.
    fn bpf_ns(&self, measure: Measure, avg: &ProgramAverages) -> f64 {
        match measure {
            Measure::Latency => match (avg.enter, avg.ret) {
                (Some(e), Some(r)) => e + r,
                _ => self.hit.bpf_latency_ns,
            },
            Measure::Count => avg.count.unwrap_or(self.hit.bpf_count_ns),
        }
    }

    /// Per-call cost over the whole recording up to `now` (the programs'
    /// average since the start).
    pub fn per_call_ns_overall(&self, measure: Measure, entry: EntryInsn, now: RunStats) -> f64 {
        self.per_call_ns_between(measure, entry, self.start, now)
    }

    /// Per-call cost over a span of the recording, `then` to `now`: the
    /// calibrated trap plus the programs' average over that span. The one
    /// price of past hits (`cost::price`, the governor's looks) and of the
    /// summary (the whole recording as one span), so that the spans' costs
    /// add up to the summary's; it follows the stack rate as the governor
    /// moves it.
    pub fn per_call_ns_between(
        &self,
        measure: Measure,
        entry: EntryInsn,
        then: RunStats,
        now: RunStats,
    ) -> f64 {
        let span = ProgramAverages::between(now, then, 1);
        self.hit.trap_ns(measure, entry) + self.bpf_ns(measure, &span)
    }

    /// The programs' statistics when the recording started.
    pub fn start(&self) -> RunStats {
        self.start
    }

    /// Nanoseconds the programs ran in the target since the start.
    pub fn bpf_run_ns_since_start(&self, now: RunStats) -> u64 {
        now.total_run_ns().saturating_sub(self.start.total_run_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit() -> HitCost {
        HitCost {
            latency_emulated_ns: 1800.0,
            latency_stepped_ns: 12000.0,
            count_emulated_ns: 900.0,
            count_stepped_ns: 9000.0,
            with_stacks: true,
            bpf_latency_ns: 300.0,
            bpf_count_ns: 150.0,
            stack_ns: 700.0,
        }
    }

    fn runs(enter: (u64, u64), ret: (u64, u64), count: (u64, u64)) -> RunStats {
        let p = |(runs, run_ns)| ProgramRuns { runs, run_ns };
        RunStats {
            enter: p(enter),
            ret: p(ret),
            count: p(count),
        }
    }

    #[test]
    fn calibration_until_the_target_says_otherwise() {
        let c = LiveCost::new(hit(), RunStats::default());
        // Trap 1500 + calibrated BPF 300.
        assert_eq!(c.per_call_ns(Measure::Latency, EntryInsn::Push), 1800.0);
        assert_eq!(c.per_call_ns(Measure::Count, EntryInsn::Other), 9000.0);
    }

    #[test]
    fn the_targets_program_time_replaces_the_calibrated_one() {
        let mut c = LiveCost::new(hit(), RunStats::default());
        // In the server: 1,000 entries at 400 ns, returns at 1,100 ns
        // (deep stacks): a timed call costs trap 1500 + 1500.
        c.observe(runs((1000, 400_000), (1000, 1_100_000), (0, 0)));
        assert_eq!(c.per_call_ns(Measure::Latency, EntryInsn::Push), 3000.0);
        // Too few runs in the next window: the estimate stays.
        c.observe(runs((1010, 500_000), (1010, 1_200_000), (0, 0)));
        assert_eq!(c.per_call_ns(Measure::Latency, EntryInsn::Push), 3000.0);
        // The governor's split: 700 ns of stack walk taken out of the base
        // while every hit takes a stack; an eighth of it when 1 in 8 does.
        let sc = c.slot_cost(Measure::Latency, EntryInsn::Push, 1, SlotId::of_index(0));
        assert_eq!((sc.base_ns, sc.stack_ns), (2300.0, 700.0));
        let sc = c.slot_cost(Measure::Latency, EntryInsn::Push, 8, SlotId::of_index(0));
        assert_eq!(sc.base_ns, 3000.0 - 87.5);
        // Count-only: nothing seen yet, calibration holds.
        assert_eq!(c.per_call_ns(Measure::Count, EntryInsn::Push), 900.0);
        let now = runs((2000, 600_000), (2000, 1_400_000), (0, 0));
        assert_eq!(c.bpf_run_ns_since_start(now), 2_000_000);
        // Overall: 300 + 700 ns per call on average.
        assert_eq!(
            c.per_call_ns_overall(Measure::Latency, EntryInsn::Push, now),
            2500.0
        );
    }

    /// A hot probe under the stack interval: one call in 100 took a stack.
    /// Its measured run time holds a hundredth of a walk, so the base is
    /// nearly all of it and sampling stacks further would save ~nothing.
    #[test]
    fn a_measured_stack_share_replaces_one_in_every() {
        let mut c = LiveCost::new(hit(), RunStats::default());
        c.observe(runs((1000, 400_000), (1000, 1_100_000), (0, 0)));
        let count = |calls, stacks| SlotCount {
            calls,
            wait_ns: 0,
            stacks,
            off_hits: 0,
        };
        // Too few calls: not measured yet, one in `stack_every` assumed.
        let three = SlotId::of_index(3);
        c.observe_slots(&HashMap::from([(three, count(100, 1))]));
        let sc = c.slot_cost(Measure::Latency, EntryInsn::Push, 1, three);
        assert_eq!((sc.base_ns, sc.stack_ns), (2300.0, 700.0));
        c.observe_slots(&HashMap::from([(three, count(10_000, 100))]));
        let sc = c.slot_cost(Measure::Latency, EntryInsn::Push, 1, three);
        assert_eq!((sc.base_ns, sc.stack_ns), (3000.0 - 7.0, 7.0));
        // At one in 4 of the hits past the interval, 1 % took stacks: at
        // one in 1 it would be 4 %.
        let sc = c.slot_cost(Measure::Latency, EntryInsn::Push, 4, three);
        assert_eq!((sc.base_ns, sc.stack_ns), (3000.0 - 7.0, 28.0));
        // The projection at the current rate is the measured total.
        assert_eq!(sc.base_ns + sc.stack_ns / 4.0, 3000.0);
    }
}
