//! What the recorder reads at each of the governor's looks besides the
//! probes: the work counter for the in-target fit, the auxiliary counters
//! for ratio estimates, and the one price of a slot's calls.

use std::collections::HashMap;

use crate::attach::Session;
use crate::bpf::abi::SlotId;
use crate::collect::SlotCount;
use crate::cost::hit_cost::HitCost;
use crate::plan::memcounters::CounterRecorder;
use crate::record::recording_plan::RecordingPlan;

/// The in-target measurement and what it needs at each look.
#[derive(Debug)]
pub(super) struct InTargetLooks {
    pub(super) cost: crate::cost::in_target::InTargetCost,
    /// The work counter's index in `counters`.
    pub(super) work: usize,
    /// The slots' counts at the last look.
    pub(super) last: HashMap<SlotId, SlotCount>,
    /// The programs' run statistics then (None before the first look: the
    /// recording's start).
    pub(super) last_runs: Option<crate::attach::RunStats>,
}

/// Reads the auxiliary counter of each probe with a slot in `slots` (just
/// switched), at `t_s` seconds into the recording.
pub(super) fn mark_aux(
    aux: &mut [Option<(usize, crate::cost::estimate::AuxMarks)>],
    counters: &CounterRecorder,
    session: &Session,
    slots: &[SlotId],
    t_s: f64,
) {
    if slots.is_empty() {
        return;
    }
    for (probe, a) in aux.iter_mut().enumerate() {
        let Some((i, marks)) = a.as_mut() else {
            continue;
        };
        if session.slots_of(probe).any(|(s, _)| slots.contains(&s)) {
            if let Some(v) = counters.read_one(*i) {
                marks.marks.push((t_s, v));
            }
        }
    }
}

/// What one call at slot `s` cost the server from `then` (None: the
/// recording's start) to `now`, in ns: the calibrated trap plus the
/// programs' measured run time over that span, else the calibration alone.
/// The one price of the governor's looks, the series, the live readers and
/// the summary (see [`crate::cost::price`]).
pub(super) fn slot_price_ns(
    cost: Option<&crate::cost::live::LiveCost>,
    hit_cost: &HitCost,
    s: &crate::attach::Slot,
    then: Option<crate::attach::RunStats>,
    now: crate::attach::RunStats,
) -> f64 {
    match cost {
        Some(c) => c.per_call_ns_between(s.measure, s.symbol.entry, then.unwrap_or(c.start()), now),
        None => hit_cost.per_call_ns(s.measure, s.symbol.entry),
    }
}

/// The in-target measurement where it can be made: a governor to vary the
/// probes' cost, the work counter readable, the server's CPU clock.
pub(super) fn in_target_looks(
    plan: &RecordingPlan,
    counters: &CounterRecorder,
    governed: bool,
) -> Result<InTargetLooks, String> {
    if !governed {
        return Err("no governor: the probes were on throughout, nothing to compare".into());
    }
    let work = counters
        .counters()
        .iter()
        .position(|c| c.spec.name == crate::cost::in_target::WORK_COUNTER)
        .ok_or_else(|| {
            format!(
                "{} is not in this server's catalog or probe set",
                crate::cost::in_target::WORK_COUNTER
            )
        })?;
    counters.counters()[work].layout.as_ref().map_err(|why| {
        format!(
            "{} cannot be read: {why}",
            crate::cost::in_target::WORK_COUNTER
        )
    })?;
    let clock = crate::cost::in_target::ServerCpuClock::of(plan.target.pid)
        .ok_or("the server's CPU clock cannot be read")?;
    Ok(InTargetLooks {
        cost: crate::cost::in_target::InTargetCost::new(
            clock,
            crate::cost::in_target::WORK_COUNTER,
        ),
        work,
        last: HashMap::new(),
        last_runs: None,
    })
}

/// Each planned probe's auxiliary counter where the catalog ties one to it
/// and it can be read, with its reading at the start.
pub(super) fn aux_counters(
    plan: &RecordingPlan,
    counters: &CounterRecorder,
    governed: bool,
) -> Vec<Option<(usize, crate::cost::estimate::AuxMarks)>> {
    plan.probes
        .iter()
        .map(|p| {
            let name = crate::cost::estimate::auxiliary_of(&p.spec.name).filter(|_| governed)?;
            let i = counters
                .counters()
                .iter()
                .position(|c| c.spec.name == name)?;
            let start = counters.read_one(i)?;
            Some((
                i,
                crate::cost::estimate::AuxMarks {
                    counter: name.to_string(),
                    marks: vec![(0.0, start)],
                },
            ))
        })
        .collect()
}
