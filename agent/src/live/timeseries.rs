//! `record --interval`: calls and wait time per interval, per probe and per
//! call site. The BPF counters are cumulative; they are read while the
//! probes stay attached (per-slot stats and the call-site map only, never
//! stacks) and each interval is the difference between two reads, so the
//! intervals add up exactly to the recording's totals.
//!
//! Written as `timeseries.json` and `timeseries.csv` (the contract the HTML
//! report reads): `t_ms` is the end of the interval in milliseconds since
//! the recording started; `callsite` is null (empty in CSV) for the
//! probe's total, else one of the probe's 10 busiest call sites over the
//! whole recording (most wait, then most calls), or "other" for the rest;
//! `attached_ms` is how long the probe was switched on within the
//! interval: the whole interval unless the overhead governor detached it
//! part of the time. `calls`/`wait_ns` are always what was seen (counted
//! only while on), never scaled: the series carries no estimate, so none
//! lacks a bound (summary.json's `sampling.estimate` has the recording's,
//! interpolated between on-windows, with its 95 % bound). `off_hits`, on
//! the probe's total row, counts the hits while it was switched off in BPF:
//! the uprobe still trapped and the server paid the trap, so what the
//! probes cost the server in an interval is `calls + off_hits` hits, not
//! `calls` (0 on call-site rows: a switched-off hit reads no caller).
//! `cost_ns`, on the same row, is what those hits cost by innoprof's
//! model: the calibrated trap plus the BPF programs' run time per hit over
//! that interval as the kernel measured it, the price `summary.json` puts
//! on the whole recording (so the intervals add up to it). A benchmark
//! comparing the server's measured CPU over some seconds prices them with
//! it, not at the recording's average: the governor moves the stack rate,
//! and with it the price, while it records.
//!
//! The in-memory counters (catalog `measure = "counter"`, see
//! `memcounters`) are rows like a probe's total: `probe` is the counter's
//! name, `calls` the counter's increase within the interval (exact),
//! `wait_ns` 0 and `attached_ms` the whole interval (a counter is never
//! off). Their intervals add up to `summary.json`'s `counters[].count`.

use crate::collect::Counts;
use crate::model::timeseries::{Point, TimeSeries};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::collect::{CollectError, Counters, LiveProbe};
use crate::cost::price::HitPricer;
use crate::record::Recorder;
use crate::symbolize::callsite::{CallsiteNamer, LabelCache};

/// Call sites per probe that get their own rows; the rest are "other".
pub const TOP_CALLSITES: usize = 10;
pub const OTHER: &str = "other";

/// One probe's cumulative counts at a read: its total and, when the
/// catalog gives call sites, per call-site label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeCounts {
    pub total: Counts,
    pub sites: BTreeMap<String, Counts>,
    /// Milliseconds the probe was switched on.
    pub attached_ms: u64,
    /// Hits while it was switched off.
    pub off_hits: u64,
    /// What its hits have cost the server by the model, ns: each
    /// interval's hits at that interval's price (see
    /// [`Recorder::per_call_ns_between`]).
    pub cost_ns: u64,
}

#[derive(Debug, Clone)]
struct Interval {
    t_ms: u64,
    /// Per probe (in `IntervalSeries::probes` order): deltas.
    deltas: Vec<ProbeCounts>,
}

/// Collects the intervals while the recording runs.
#[derive(Debug)]
pub struct IntervalSeries {
    interval_ms: u64,
    started_unix_ms: u128,
    probes: Vec<LiveProbe>,
    /// In-memory counters read at start: (index in the recorder's
    /// counters, name, value at start).
    counters: Vec<(usize, String, u64)>,
    labels: LabelCache,
    /// Per probe, then per counter.
    last: Vec<ProbeCounts>,
    intervals: Vec<Interval>,
    pricer: HitPricer,
    /// Per probe, what its hits have cost so far (ns, unrounded).
    cost_ns: Vec<f64>,
}

impl IntervalSeries {
    pub fn new(probes: Vec<LiveProbe>, interval: Duration, started_unix_ms: u128) -> Self {
        let last = vec![ProbeCounts::default(); probes.len()];
        let cost_ns = vec![0.0; probes.len()];
        Self {
            interval_ms: interval.as_millis() as u64,
            started_unix_ms,
            probes,
            counters: Vec::new(),
            labels: LabelCache::default(),
            last,
            intervals: Vec::new(),
            pricer: HitPricer::default(),
            cost_ns,
        }
    }

    /// For a recording that has just started.
    pub fn for_recorder(recorder: &Recorder, interval: Duration) -> Self {
        let mut me = Self::new(recorder.live_probes(), interval, recorder.started_unix_ms());
        let mem = recorder.memory_counters();
        me.with_counters(
            mem.counters()
                .iter()
                .zip(mem.start_readings())
                .enumerate()
                .filter_map(|(i, (c, start))| Some((i, c.spec.name.clone(), *start.as_ref().ok()?)))
                .collect(),
        );
        me
    }

    /// Adds in-memory counters (index, name, value at start) as rows.
    pub fn with_counters(&mut self, counters: Vec<(usize, String, u64)>) {
        self.last
            .extend(counters.iter().map(|_| ProbeCounts::default()));
        self.counters = counters;
    }

    /// Cumulative rows of the counters from their values now: increase
    /// since start; a failed read keeps the last value (a zero interval).
    pub fn counter_counts(&self, values: &[Result<u64, String>], t_ms: u64) -> Vec<ProbeCounts> {
        self.counters
            .iter()
            .enumerate()
            .map(|(k, (i, _, start))| {
                let last = &self.last[self.probes.len() + k];
                let calls = match values.get(*i) {
                    Some(Ok(v)) => v.saturating_sub(*start).max(last.total.calls),
                    _ => last.total.calls,
                };
                ProbeCounts {
                    total: Counts::of(calls, 0),
                    sites: BTreeMap::new(),
                    attached_ms: t_ms,
                    off_hits: 0,
                    cost_ns: 0,
                }
            })
            .collect()
    }

    /// Row names: the probes', then the counters'.
    fn name(&self, i: usize) -> &str {
        match self.probes.get(i) {
            Some(p) => &p.name,
            None => &self.counters[i - self.probes.len()].1,
        }
    }

    /// Ends an interval now: reads the counters with the probes attached.
    pub fn sample(&mut self, recorder: &Recorder) -> Result<(), CollectError> {
        let counters = recorder.read_counters()?;
        let t_ms = recorder.elapsed().as_millis() as u64;
        let mut namer = CallsiteNamer::new(recorder.target().pid, &recorder.plan().image);
        let mut now = self.cumulative(&counters, &mut namer);
        let attached = recorder.attached_seconds();
        let priced = self.pricer.read(recorder, &counters);
        for ((counts, p), cost_ns) in now.iter_mut().zip(&self.probes).zip(&mut self.cost_ns) {
            let on_s = attached.get(p.probe).copied().unwrap_or(0.0);
            counts.attached_ms = (on_s * 1000.0).round() as u64;
            *cost_ns += p.slots.iter().filter_map(|s| priced.get(s)).sum::<f64>();
            counts.cost_ns = cost_ns.round() as u64;
        }
        if !self.counters.is_empty() {
            let values = recorder.memory_counters().current();
            now.extend(self.counter_counts(&values, t_ms));
        }
        self.push(t_ms, now);
        Ok(())
    }

    /// Detaches the probes and ends the last interval with the final
    /// counters, the same ones `Recorder::finish` reports.
    pub fn finish(mut self, recorder: &mut Recorder) -> Result<TimeSeries, CollectError> {
        recorder.detach_probes();
        self.sample(recorder)?;
        Ok(self.into_series())
    }

    /// Cumulative counts per probe, call sites summed per label.
    pub fn cumulative(
        &mut self,
        counters: &Counters,
        namer: &mut CallsiteNamer,
    ) -> Vec<ProbeCounts> {
        self.probes
            .iter()
            .map(|p| {
                let total = counters.probe_total(&p.slots);
                let sites = if p.has_callsites {
                    self.labels
                        .by_label(counters.probe_sites(&p.slots), namer)
                        .into_iter()
                        .map(|(label, v)| {
                            let counts = Counts::of(v.calls, v.wait_ns_total);
                            (label, counts)
                        })
                        .collect()
                } else {
                    BTreeMap::new()
                };
                ProbeCounts {
                    total: Counts::of(total.calls, total.wait_ns_total),
                    sites,
                    attached_ms: 0,
                    off_hits: total.off_hits,
                    cost_ns: 0,
                }
            })
            .collect()
    }

    /// Ends an interval at `t_ms` with these cumulative counts. A read
    /// less than a tenth of an interval after the previous one (the
    /// recording's end right after a tick) is folded into that interval
    /// rather than written as a sliver.
    pub fn push(&mut self, t_ms: u64, now: Vec<ProbeCounts>) {
        let deltas: Vec<ProbeCounts> = now
            .iter()
            .zip(&self.last)
            .map(|(n, l)| ProbeCounts {
                total: n.total.since(l.total),
                sites: n
                    .sites
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.since(l.sites.get(k).copied().unwrap_or_default()),
                        )
                    })
                    .filter(|(_, d)| *d != Counts::default())
                    .collect(),
                attached_ms: n.attached_ms.saturating_sub(l.attached_ms),
                off_hits: n.off_hits.saturating_sub(l.off_hits),
                cost_ns: n.cost_ns.saturating_sub(l.cost_ns),
            })
            .collect();
        self.last = now;
        match self.intervals.last_mut() {
            Some(prev) if t_ms.saturating_sub(prev.t_ms) < self.interval_ms / 10 => {
                prev.t_ms = t_ms;
                for (p, d) in prev.deltas.iter_mut().zip(deltas) {
                    p.total.add(d.total);
                    p.attached_ms += d.attached_ms;
                    p.off_hits += d.off_hits;
                    p.cost_ns += d.cost_ns;
                    for (k, v) in d.sites {
                        p.sites.entry(k).or_default().add(v);
                    }
                }
            }
            _ => self.intervals.push(Interval { t_ms, deltas }),
        }
    }

    /// The rows: per interval, each probe's total, then its busiest call
    /// sites over the whole recording and "other".
    pub fn into_series(self) -> TimeSeries {
        let rows = self.probes.len() + self.counters.len();
        let tops: Vec<Vec<String>> = (0..rows)
            .map(|i| busiest_sites(&self.last[i].sites, TOP_CALLSITES))
            .collect();
        let mut points = Vec::new();
        for interval in &self.intervals {
            for (i, (d, top)) in interval.deltas.iter().zip(&tops).enumerate() {
                let point = |callsite: Option<String>, c: Counts| Point {
                    t_ms: interval.t_ms,
                    probe: self.name(i).to_string(),
                    off_hits: if callsite.is_none() { d.off_hits } else { 0 },
                    cost_ns: if callsite.is_none() { d.cost_ns } else { 0 },
                    callsite,
                    calls: c.calls,
                    wait_ns: c.wait_ns,
                    attached_ms: d.attached_ms,
                };
                points.push(point(None, d.total));
                for label in top {
                    let c = d.sites.get(label).copied().unwrap_or_default();
                    points.push(point(Some(label.clone()), c));
                }
                if self.last[i].sites.len() > top.len() {
                    let mut other = Counts::default();
                    for (_, c) in d.sites.iter().filter(|(k, _)| !top.contains(k)) {
                        other.add(*c);
                    }
                    points.push(point(Some(OTHER.to_string()), other));
                }
            }
        }
        TimeSeries {
            format_version: crate::model::files::FORMAT_VERSION,
            interval_ms: self.interval_ms,
            started_unix_ms: self.started_unix_ms,
            points,
        }
    }
}

/// The `n` labels with the most wait (then calls: count-only probes have
/// no wait), first the busiest: the order of `summary.json`'s call sites.
fn busiest_sites(totals: &BTreeMap<String, Counts>, n: usize) -> Vec<String> {
    let mut ranked: Vec<(&String, &Counts)> = totals.iter().collect();
    ranked.sort_by(|a, b| (b.1.wait_ns, b.1.calls, a.0).cmp(&(a.1.wait_ns, a.1.calls, b.0)));
    ranked.into_iter().take(n).map(|(k, _)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::timeseries::totals_by_probe;
    use crate::plan::catalog::Measure;

    fn probe(name: &str, has_callsites: bool) -> LiveProbe {
        LiveProbe {
            probe: 0,
            name: name.into(),
            measure: Measure::Latency,
            has_callsites,
            slots: vec![crate::bpf::abi::SlotId::of_index(0)],
        }
    }

    fn counts(calls: u64, wait_ns: u64) -> Counts {
        Counts::of(calls, wait_ns)
    }

    fn cumulative(total: Counts, sites: &[(&str, Counts)]) -> Vec<ProbeCounts> {
        vec![ProbeCounts {
            total,
            sites: sites.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            attached_ms: 0,
            off_hits: 0,
            cost_ns: 0,
        }]
    }

    #[test]
    fn intervals_are_deltas_that_add_up_to_the_totals() {
        let mut s = IntervalSeries::new(vec![probe("p", false)], Duration::from_secs(1), 7);
        s.push(1000, cumulative(counts(10, 100), &[]));
        s.push(2000, cumulative(counts(15, 100), &[]));
        s.push(3001, cumulative(counts(40, 900), &[]));
        let series = s.into_series();
        assert_eq!(series.interval_ms, 1000);
        assert_eq!(series.started_unix_ms, 7);
        let calls: Vec<(u64, u64, u64)> = series
            .points
            .iter()
            .map(|p| (p.t_ms, p.calls, p.wait_ns))
            .collect();
        assert_eq!(calls, [(1000, 10, 100), (2000, 5, 0), (3001, 25, 800)]);
        assert_eq!(totals_by_probe(&series)["p"], counts(40, 900));
        assert_eq!(series.intervals(), 3);
    }

    /// A duty-cycled probe: its attached time per interval is the
    /// difference of the governor's cumulative account.
    #[test]
    fn attached_time_is_per_interval() {
        let mut s = IntervalSeries::new(vec![probe("p", false)], Duration::from_secs(1), 0);
        for (t, on) in [(1000, 1000), (2000, 1200), (3000, 1200), (4000, 1450)] {
            let mut now = cumulative(counts(t / 10, 0), &[]);
            now[0].attached_ms = on;
            s.push(t, now);
        }
        let on: Vec<u64> = s
            .into_series()
            .points
            .iter()
            .map(|p| p.attached_ms)
            .collect();
        assert_eq!(on, [1000, 200, 0, 250]);
    }

    /// Hits while switched off are per interval too, on the probe's total
    /// row only: summed with the call-site rows they would count twice.
    #[test]
    fn switched_off_hits_and_cost_are_per_interval_on_the_total_row() {
        let mut s = IntervalSeries::new(vec![probe("p", true)], Duration::from_secs(1), 0);
        for (t, off) in [(1000, 0), (2000, 700), (3000, 700), (4000, 1900)] {
            let mut now = cumulative(counts(t / 10, 0), &[("a.cc:1", counts(t / 10, 0))]);
            now[0].off_hits = off;
            now[0].cost_ns = 3 * off;
            s.push(t, now);
        }
        let rows: Vec<(Option<String>, u64, u64)> = s
            .into_series()
            .points
            .into_iter()
            .map(|p| (p.callsite, p.off_hits, p.cost_ns))
            .collect();
        let total: Vec<(u64, u64)> = rows
            .iter()
            .filter(|r| r.0.is_none())
            .map(|r| (r.1, r.2))
            .collect();
        assert_eq!(total, [(0, 0), (700, 2100), (0, 0), (1200, 3600)]);
        assert!(
            rows.iter()
                .filter(|r| r.0.is_some())
                .all(|r| (r.1, r.2) == (0, 0)),
            "{rows:?}"
        );
    }

    /// Counters are rows of their own: exact increases per interval, the
    /// whole interval attached, and a failed read is a zero interval, not
    /// a drop the next read would turn into a spike.
    #[test]
    fn counters_are_rows_of_exact_increases() {
        let mut s = IntervalSeries::new(vec![probe("p", false)], Duration::from_secs(1), 0);
        s.with_counters(vec![(1, "innodb.redo.lsn".into(), 5000)]);
        let reads: [(u64, Result<u64, String>); 3] = [
            (1000, Ok(5600)),
            (2000, Err("gone".into())),
            (3000, Ok(9000)),
        ];
        for (t, v) in reads {
            let mut now = cumulative(counts(t / 100, 0), &[]);
            now.extend(s.counter_counts(&[Err("other".into()), v], t));
            s.push(t, now);
        }
        let series = s.into_series();
        let lsn: Vec<(u64, u64, u64)> = series
            .points
            .iter()
            .filter(|p| p.probe == "innodb.redo.lsn")
            .map(|p| (p.t_ms, p.calls, p.attached_ms))
            .collect();
        assert_eq!(
            lsn,
            [(1000, 600, 1000), (2000, 0, 1000), (3000, 3400, 1000)]
        );
        assert_eq!(totals_by_probe(&series)["innodb.redo.lsn"].calls, 4000);
        assert_eq!(totals_by_probe(&series)["p"].calls, 30);
    }

    #[test]
    fn a_last_read_right_after_a_tick_joins_the_last_interval() {
        let mut s = IntervalSeries::new(vec![probe("p", false)], Duration::from_secs(1), 0);
        s.push(1000, cumulative(counts(10, 0), &[]));
        s.push(1040, cumulative(counts(12, 0), &[]));
        let series = s.into_series();
        assert_eq!(series.points.len(), 1);
        assert_eq!((series.points[0].t_ms, series.points[0].calls), (1040, 12));
    }

    #[test]
    fn busiest_ten_call_sites_then_other() {
        let mut s = IntervalSeries::new(vec![probe("m", true)], Duration::from_secs(1), 0);
        // 12 sites; site i has i+1 calls by the end. Interval 1 has only
        // the two quietest sites, which end up in "other".
        let first = [("a.cc:0", counts(1, 1)), ("a.cc:1", counts(2, 2))];
        s.push(1000, cumulative(counts(3, 3), &first));
        let all: Vec<(String, Counts)> = (0..12u64)
            .map(|i| (format!("a.cc:{i}"), counts(i + 1, i + 1)))
            .collect();
        let all_ref: Vec<(&str, Counts)> = all.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        s.push(2000, cumulative(counts(78, 78), &all_ref));
        let series = s.into_series();
        let rows_at =
            |t: u64| -> Vec<&Point> { series.points.iter().filter(|p| p.t_ms == t).collect() };
        for t in [1000, 2000] {
            let rows = rows_at(t);
            assert_eq!(rows.len(), 1 + TOP_CALLSITES + 1, "total, 10 sites, other");
            assert_eq!(rows[0].callsite, None);
            assert_eq!(
                rows[1].callsite.as_deref(),
                Some("a.cc:11"),
                "busiest first"
            );
            assert_eq!(rows[11].callsite.as_deref(), Some(OTHER));
            let sites: u64 = rows[1..].iter().map(|p| p.calls).sum();
            assert_eq!(sites, rows[0].calls, "sites add up to the total at {t}");
        }
        assert_eq!(
            rows_at(1000)[11].calls,
            3,
            "the quiet sites' first interval"
        );
        assert_eq!(rows_at(2000)[11].calls, 0);
        assert_eq!(rows_at(2000)[1].calls, 12);
    }

    #[test]
    fn csv_matches_the_contract() {
        let mut series = TimeSeries {
            format_version: crate::model::files::FORMAT_VERSION,
            interval_ms: 1000,
            started_unix_ms: 1,
            points: vec![
                Point {
                    t_ms: 1000,
                    probe: "innodb.mutex.enter".into(),
                    callsite: None,
                    calls: 3,
                    wait_ns: 40,
                    attached_ms: 1000,
                    off_hits: 9,
                    cost_ns: 21_600,
                },
                Point {
                    t_ms: 1000,
                    probe: "f(int, long)".into(),
                    callsite: Some("btr0cur.cc:304".into()),
                    calls: 2,
                    wait_ns: 0,
                    attached_ms: 250,
                    off_hits: 0,
                    cost_ns: 0,
                },
            ],
        };
        let mut unwatched = series.points[1].clone();
        unwatched.t_ms = 2000;
        unwatched.attached_ms = 0;
        series.points.push(unwatched);
        let csv = String::from_utf8(series.to_csv()).unwrap();
        // Rates per second watched: 2 calls in the 250 ms the probe was on
        // are 8/s, not 2/s; an interval it was never on has no rate.
        assert_eq!(
            csv,
            "t_ms,probe,callsite,calls,wait_ns,attached_ms,off_hits,cost_ns,calls_per_s,wait_ns_per_s\n\
             1000,innodb.mutex.enter,,3,40,1000,9,21600,3.0,40.0\n\
             1000,\"f(int, long)\",btr0cur.cc:304,2,0,250,0,0,8.0,0.0\n\
             2000,\"f(int, long)\",btr0cur.cc:304,2,0,0,0,0,,\n"
        );
        let json: serde_json::Value = serde_json::from_slice(&series.to_json()).unwrap();
        assert_eq!(json["interval_ms"], 1000);
        assert!(json["points"][0]["callsite"].is_null());
        assert_eq!(json["points"][1]["callsite"], "btr0cur.cc:304");
    }
}
