//! The governor's look: what the recorder does when the governor asks
//! (or its alarm rings): read the slots, feed the cost and in-target
//! measurements, apply the governor's decisions to the BPF maps, rearm
//! the alarm, and close a stack window whose requester went away.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bpf::abi::SlotId;
use crate::cost::governor::SlotCost;

use crate::record::looks::{mark_aux, slot_price_ns};
use crate::record::recorder::Recorder;
use crate::record::stack_window::STACK_WINDOW_GRACE;

impl Recorder {
    /// Lets the overhead governor sample stacks and duty-cycle probes;
    /// call every 10–20 ms.
    pub fn govern(&mut self) {
        // A stack window whose requester went away closes by itself.
        if let Some((_, Some(until))) = &self.stack_gate {
            if Instant::now() > *until + STACK_WINDOW_GRACE {
                self.stacks_off();
            }
        }
        // The programs' cost in the target, re-read once a second, and the
        // governor's per-slot costs with it: the price `cost::price` puts on
        // the same hits (one price, issue 50). The in-target factor (what
        // the server was measured to pay per modelled ns) is reported, no
        // longer multiplied in: scaled up to 3x, the plan's "fully on would
        // cost" and its cuts were priced otherwise than its own accounting.
        if let (Some(cost), Some(session)) = (self.cost.as_mut(), self.session.as_ref()) {
            if self.cost_observed.elapsed() >= Duration::from_secs(1) {
                cost.observe(session.run_stats());
                cost.observe_slots(&crate::collect::read_slot_counts(session).unwrap_or_default());
                self.cost_observed = Instant::now();
                if let Some(g) = self.governor.as_mut() {
                    let costs: HashMap<SlotId, SlotCost> = session
                        .attached_slots()
                        .map(|(i, s)| {
                            let every = self.stack_every.get(&i).copied().unwrap_or(1);
                            (i, cost.slot_cost(s.measure, s.symbol.entry, every, i))
                        })
                        .collect();
                    g.update_costs(&costs);
                }
            }
        }
        self.fold_exited_threads_now();
        self.drain_statements_now(false);
        if let (Some(t), Some(session)) = (self.bench_toggle.as_mut(), self.session.as_mut()) {
            if let Some(on) = t.due(Instant::now()) {
                let all: Vec<SlotId> = session.attached_slots().map(|(i, _)| i).collect();
                if on {
                    if let Err(e) = session.resume(&all) {
                        self.governor_errors.push(crate::error_chain(&e));
                    }
                } else {
                    session.suspend(&all);
                }
            }
        }
        let (Some(g), Some(session)) = (self.governor.as_mut(), self.session.as_mut()) else {
            return;
        };
        if session.take_alarm() {
            g.wake();
        }
        for took in session.detach_times() {
            g.detach_took(took);
        }
        let mut looked = None;
        let actions = g.tick(Instant::now(), || {
            let counts = crate::collect::read_slot_counts(session).unwrap_or_default();
            looked = Some(counts.clone());
            counts
        });
        if let (Some(counts), Ok(it)) = (looked, self.in_target.as_mut()) {
            // What the model prices the hits since the last look at: each
            // at its slot's trap plus the programs' run time per hit the
            // kernel measured over the same span.
            let runs = session.run_stats();
            let then = it.last_runs.replace(runs);
            let model_ns: f64 = counts
                .iter()
                .filter_map(|(slot, now)| {
                    let before = it.last.get(slot).copied().unwrap_or_default();
                    let hits =
                        (now.calls + now.off_hits).saturating_sub(before.calls + before.off_hits);
                    let s = session.slots.get(slot.index())?;
                    let price = slot_price_ns(self.cost.as_ref(), &self.hit_cost, s, then, runs);
                    Some(hits as f64 * price)
                })
                .sum();
            let work = self.counters.read_one(it.work);
            it.cost.look(work, model_ns);
            it.last = counts;
        }
        let (decisions, alarm_hits) = g.alarm();
        if decisions != self.alarm_armed_for {
            session.arm_alarm(alarm_hits);
            self.alarm_armed_for = decisions;
        }
        // The BPF-side lever first: no uprobe is touched. On demand, only
        // the slots of an open window take stacks at all.
        self.stack_every.extend(actions.stack_every.iter().copied());
        match &self.stack_gate {
            None => session.set_stack_every(&actions.stack_every),
            Some((gate, _)) => {
                let open: Vec<(SlotId, u32)> = actions
                    .stack_every
                    .iter()
                    .copied()
                    .filter(|(slot, _)| gate.get(slot.index()).copied().unwrap_or(false))
                    .collect();
                session.set_stack_every(&open);
            }
        }
        session.suspend(&actions.suspend);
        let t_s = self.started.elapsed().as_secs_f64();
        mark_aux(
            &mut self.aux,
            &self.counters,
            session,
            &actions.suspend,
            t_s,
        );
        if !actions.resume.is_empty() {
            // A probe whose last switch-off is still being detached is not
            // re-attached (both links would run on every hit): it stays off
            // and the governor asks again at its next tick.
            let asked = Instant::now();
            let (later, now): (Vec<SlotId>, Vec<SlotId>) = actions
                .resume
                .iter()
                .partition(|s| session.detaching(std::slice::from_ref(s)));
            if !later.is_empty() {
                g.resume_deferred(&later, asked);
            }
            if !now.is_empty() {
                if let Err(e) = session.resume(&now) {
                    self.governor_errors.push(crate::error_chain(&e));
                }
                let resumed = Instant::now();
                g.resumed(&now, asked, resumed);
                let t_s = resumed
                    .saturating_duration_since(self.started)
                    .as_secs_f64();
                mark_aux(&mut self.aux, &self.counters, session, &now, t_s);
            }
        }
    }
}
