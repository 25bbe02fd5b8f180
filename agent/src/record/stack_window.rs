//! Stacks on demand (`serve`'s `/debug/pprof/waits`): a window opens,
//! the asked probes take stacks until it closes, and what their stacks
//! carried meanwhile is named.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bpf::abi::{Callsite, SlotId};
use crate::model::named_stack::ProbeStackSet;
use crate::record::options::RecordError;
use crate::record::results::{fold_stacks, probe_slots, LatchNames};
use crate::report;
use crate::symbolize::callsite::CallsiteNamer;
use crate::symbolize::ProcessMaps;

use crate::record::recorder::Recorder;

/// Stacks being taken for some probes until a deadline
/// ([`Recorder::open_stack_window`]).
#[derive(Debug)]
pub struct StackWindow {
    probes: Vec<usize>,
    /// The stacks' counts when it opened: (slot, frames, site, thread) →
    /// (calls, wait ns).
    start: HashMap<StackIdentity, (u64, u64)>,
    /// Per slot, what its sampler had seen when it opened.
    seen_at_start: HashMap<SlotId, (u64, u64)>,
    /// The call-site table's cells when it opened: the window's stacks
    /// are split as the table's growth over the window.
    cells_at_start: crate::collect::Cells,
    started: Instant,
}

type StackIdentity = (SlotId, Vec<u64>, Callsite, u32, Option<String>);

fn stack_identity(s: &crate::collect::StackSample) -> StackIdentity {
    (s.slot, s.ips.clone(), s.site, s.role, s.statement.clone())
}

/// A stack window left open this long past its deadline is closed by the
/// next [`Recorder::govern`] (its requester went away).
pub(super) const STACK_WINDOW_GRACE: Duration = Duration::from_secs(5);

/// What each stack carried since the window opened: its counts at the end
/// less those at the start; a stack that carried nothing new is left out.
fn moved_since(
    start: &HashMap<StackIdentity, (u64, u64)>,
    end: Vec<crate::collect::StackSample>,
) -> Vec<crate::collect::StackSample> {
    end.into_iter()
        .filter_map(|mut s| {
            let (c, w) = start.get(&stack_identity(&s)).copied().unwrap_or((0, 0));
            s.count = s.count.saturating_sub(c);
            s.wait_ns = s.wait_ns.saturating_sub(w);
            (s.count > 0).then_some(s)
        })
        .collect()
}

impl Recorder {
    /// With [`StackCapture::OnDemand`]: `probes` take stacks from now
    /// until [`Self::close_stack_window`] (or `until` plus a grace, should
    /// nobody close it). `None` when stacks are not on demand, or a window
    /// is open already.
    pub fn open_stack_window(
        &mut self,
        probes: &[usize],
        until: Instant,
    ) -> Result<Option<StackWindow>, RecordError> {
        let (Some(session), Some((_, None))) = (self.session.as_ref(), self.stack_gate.as_ref())
        else {
            // No session, stacks not on demand, or a window open already.
            return Ok(None);
        };
        let crate::collect::StackRead {
            samples: start,
            seen: seen_at_start,
        } = crate::collect::read_stacks(session)?;
        let cells_at_start =
            crate::collect::cells_of(&crate::collect::read_counters(session)?.site_roles);
        self.drain_statements_now(true);
        let start = self
            .split_stacks(start)
            .iter()
            .map(|s| (stack_identity(s), (s.count, s.wait_ns)))
            .collect();
        let (Some(session), Some((gate, deadline))) =
            (self.session.as_mut(), self.stack_gate.as_mut())
        else {
            return Ok(None);
        };
        let on: Vec<(SlotId, u32)> = probes
            .iter()
            .flat_map(|&probe| session.slots_of(probe))
            .map(|(i, _)| (i, self.stack_every.get(&i).copied().unwrap_or(1)))
            .collect();
        for &(i, _) in &on {
            gate[i.index()] = true;
        }
        session.set_stack_every(&on);
        *deadline = Some(until);
        Ok(Some(StackWindow {
            probes: probes.to_vec(),
            start,
            seen_at_start,
            cells_at_start,
            started: Instant::now(),
        }))
    }

    /// Stops taking stacks; what each window probe's stacks carried since
    /// the window opened, named.
    pub fn close_stack_window(
        &mut self,
        window: StackWindow,
    ) -> Result<(Vec<ProbeStackSet>, Duration), RecordError> {
        let elapsed = window.started.elapsed();
        let Some(session) = self.session.as_ref() else {
            return Ok((Vec::new(), elapsed));
        };
        let end = crate::collect::read_stacks(session)?;
        let seen = end.seen_since(&window.seen_at_start);
        let cells = crate::collect::cells_since(
            &crate::collect::cells_of(&crate::collect::read_counters(session)?.site_roles),
            &window.cells_at_start,
        );
        self.drain_statements_now(true);
        let end = self.split_stacks(end.samples);
        if let Some((book, _)) = self.statements.as_mut() {
            book.forget_stacks();
        }
        self.stacks_off();
        let mut moved = moved_since(&window.start, end);
        crate::collect::scale_to_cells(&mut moved, &seen, &cells);
        Ok((self.name_probe_stacks(&window.probes, &moved), elapsed))
    }

    /// Every slot stops taking stacks; the window closes.
    pub(super) fn stacks_off(&mut self) {
        let (Some(session), Some((gate, deadline))) =
            (self.session.as_mut(), self.stack_gate.as_mut())
        else {
            return;
        };
        let off: Vec<(SlotId, u32)> = gate
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .map(|(i, _)| (SlotId::of_index(i), 0))
            .collect();
        session.set_stack_every(&off);
        gate.iter_mut().for_each(|g| *g = false);
        *deadline = None;
    }

    /// `samples` of `probes`, named as `finish` names a recording's.
    fn name_probe_stacks(
        &self,
        probes: &[usize],
        samples: &[crate::collect::StackSample],
    ) -> Vec<ProbeStackSet> {
        let plan = &self.plan;
        let maps = ProcessMaps::read(plan.target.pid).unwrap_or_else(|_| self.maps.clone());
        let mut symbolizer = plan.stack_symbolizer(maps);
        let mut namer = CallsiteNamer::new(plan.target.pid, &plan.image);
        let mut out = Vec::new();
        for &idx in probes {
            let planned = &plan.probes[idx];
            let my_slots = probe_slots(self.session.as_ref(), idx);
            let (_, _, set, _) = fold_stacks(
                &planned.spec.name,
                &report::file_stem(&planned.spec.name),
                planned.spec.measure,
                &my_slots,
                samples,
                &mut symbolizer,
                &mut namer,
                &LatchNames::new(planned),
            );
            out.push(set);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::StackSample;

    fn sample(slot: usize, ips: &[u64], role: u32, count: u64, wait_ns: u64) -> StackSample {
        StackSample {
            slot: SlotId::of_index(slot),
            ips: ips.to_vec(),
            site: Callsite::default(),
            role,
            count,
            wait_ns,
            key: bytemuck::Zeroable::zeroed(),
            statement: None,
            unsampled: false,
        }
    }

    /// A stack counts what it gained in the window: new stacks whole, grown
    /// ones by their growth; unchanged ones and ones that shrank (an entry
    /// evicted and recreated) carry nothing. The same frames on another
    /// slot or thread role are another stack.
    #[test]
    fn a_window_counts_what_each_stack_gained() {
        let before = [
            sample(0, &[1, 2], 1, 10, 1_000),
            sample(0, &[3], 1, 5, 50),
            sample(1, &[1, 2], 1, 7, 70),
        ];
        let start: HashMap<StackIdentity, (u64, u64)> = before
            .iter()
            .map(|s| (stack_identity(s), (s.count, s.wait_ns)))
            .collect();
        let end = vec![
            sample(0, &[1, 2], 1, 14, 1_800), // grew by 4 calls, 800 ns
            sample(0, &[3], 1, 5, 50),        // unchanged
            sample(1, &[1, 2], 1, 3, 30),     // shrank: evicted, recreated
            sample(0, &[1, 2], 2, 2, 20),     // same frames, another role: new
            sample(2, &[9], 1, 1, 5),         // new
        ];
        let moved = moved_since(&start, end);
        let got: Vec<(usize, Vec<u64>, u32, u64, u64)> = moved
            .iter()
            .map(|s| (s.slot.index(), s.ips.clone(), s.role, s.count, s.wait_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, vec![1, 2], 1, 4, 800),
                (0, vec![1, 2], 2, 2, 20),
                (2, vec![9], 1, 1, 5),
            ]
        );
    }
}
