//! What the probe hits between two reads cost the server, by innoprof's
//! model: each hit (a counted call or a trap while switched off in BPF) at
//! the calibrated trap plus the BPF programs' run time per hit over the
//! same span, as the kernel measured it.
//!
//! One price for every reader: the `--interval` series, the Prometheus
//! exporter and `summary.json` (the whole recording as one span) put the
//! same kernel figures on the same hits, so the series' intervals add up
//! to the summary and a scrape's `rate()` agrees with both. A price taken
//! at some other moment (the governor's latest estimate, the recording's
//! average) would misprice a span where the governor moved the stack rate.

use std::collections::HashMap;

use crate::attach::RunStats;
use crate::bpf::abi::{SlotId, SlotStats};
use crate::collect::Counters;

/// What the pricer needs of a recording: the BPF programs' run statistics
/// now, and one call's price at a slot over a span of them (the recorder
/// gives both; a test gives its own).
pub trait SlotPrices {
    fn run_stats(&self) -> RunStats;
    /// What one call at `slot` cost the server from `then` (None: the
    /// recording's start) to `now`, in ns.
    fn per_call_ns_between(
        &self,
        slot: SlotId,
        then: Option<RunStats>,
        now: RunStats,
    ) -> Option<f64>;
}

/// Remembers the last read: each slot's hits and the programs' run
/// statistics then.
#[derive(Debug, Default, Clone)]
pub struct HitPricer {
    /// None before the first read: the recording's start.
    last_runs: Option<RunStats>,
    last_hits: HashMap<SlotId, u64>,
}

impl HitPricer {
    /// Per slot, what its hits since the last read cost the server, ns.
    /// `counters` must have been read just before (the hits and the run
    /// time then cover the same span).
    pub fn read(
        &mut self,
        recorder: &impl SlotPrices,
        counters: &Counters,
    ) -> HashMap<SlotId, f64> {
        let now = recorder.run_stats();
        self.read_with(counters, now, |slot, then| {
            recorder.per_call_ns_between(slot, then, now).unwrap_or(0.0)
        })
    }

    /// [`Self::read`] with the price of one hit at a slot over the span
    /// from `then` given.
    fn read_with(
        &mut self,
        counters: &Counters,
        now: RunStats,
        price: impl Fn(SlotId, Option<RunStats>) -> f64,
    ) -> HashMap<SlotId, f64> {
        let then = self.last_runs.replace(now);
        counters
            .slots
            .iter()
            .map(|(&slot, st)| {
                let hits = SlotStats::hits(st);
                let before = self.last_hits.insert(slot, hits).unwrap_or(0);
                let new = hits.saturating_sub(before);
                let ns = if new == 0 {
                    0.0
                } else {
                    new as f64 * price(slot, then)
                };
                (slot, ns)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::ProgramRuns;

    fn counters(slots: &[(SlotId, u64, u64)]) -> Counters {
        let mut c = Counters::default();
        for &(slot, calls, off_hits) in slots {
            let st = SlotStats {
                calls,
                off_hits,
                ..SlotStats::default()
            };
            c.slots.insert(slot, st);
        }
        c
    }

    fn runs(n: u64) -> RunStats {
        RunStats {
            enter: ProgramRuns { runs: n, run_ns: n },
            ..RunStats::default()
        }
    }

    /// Each span's hits (calls and switched-off traps) at that span's
    /// price, slot by slot: a price that moves re-prices only the hits
    /// after it, and each span is priced from the run statistics of the
    /// read before it.
    #[test]
    fn hits_are_priced_over_their_own_span() {
        let (a, b) = (SlotId::of_index(0), SlotId::of_index(1));
        let mut p = HitPricer::default();
        let first = p.read_with(
            &counters(&[(a, 10, 0), (b, 5, 0)]),
            runs(15),
            |slot, then| {
                assert_eq!(then, None, "the first span starts with the recording");
                if slot == a {
                    2000.0
                } else {
                    100.0
                }
            },
        );
        assert_eq!((first[&a], first[&b]), (20_000.0, 500.0));
        // 4 more hits on a, 3 of them switched off, now at 1,500 ns; b idle.
        let second = p.read_with(&counters(&[(a, 11, 3), (b, 5, 0)]), runs(19), |_, then| {
            assert_eq!(then, Some(runs(15)));
            1500.0
        });
        assert_eq!((second[&a], second[&b]), (6_000.0, 0.0));
    }
}
