//! `innoprof top`: what the server waited on and ran in the last interval,
//! while the probes stay attached. The BPF counters are cumulative; a
//! [`Reading`] is one read of them (per probe: calls, wait, histogram,
//! seconds switched on; per call site and per latch: calls and wait) and a
//! [`Frame`] is the difference of two readings turned into rates, so every
//! refresh shows the last interval, not an average since the start.
//!
//! [`LiveView`] takes the readings from a [`Recorder`]; the arithmetic
//! ([`Frame::between`]) is separate and works on plain values, and
//! [`Frame::from_summary`] builds the same tables from a saved recording's
//! `summary.json` (`innoprof top DIR`). [`statements`] does the same for
//! the statements and connections behind the client connections' hits.

pub mod findings_window;
pub mod statements;
pub mod timeseries;

use std::collections::{BTreeMap, HashMap};

use crate::bpf::abi::{Callsite, HIST_SLOTS};
use crate::bpf::histogram::Log2Histogram;
pub use crate::collect::Counts;
use crate::collect::{CollectError, LiveProbe};
use crate::cost::price::HitPricer;
use crate::cpu::{CpuError, RawCpuProfile};
use crate::model::summary::{CpuSummary, ProbeStatus, Summary};
use crate::plan::catalog::Measure;
use crate::record::results::LatchNames;
use crate::record::Recorder;
use crate::symbolize::callsite::{CallsiteNamer, LabelCache};
use crate::symbolize::{ProcessMaps, StackSymbolizer};

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("reading the probe counters")]
    Collect(#[from] CollectError),
    #[error("reading the CPU profile")]
    Cpu(#[from] CpuError),
}

/// One probe's cumulative counters at a reading.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReading {
    pub counts: Counts,
    pub hist: [u64; HIST_SLOTS],
    /// Seconds the probe has been switched on (the governor's account).
    pub attached_s: f64,
    /// What its hits (calls, and traps while switched off in BPF) have
    /// cost the server so far, ns: each span between readings at its own
    /// price ([`crate::cost::price`]), so it only grows and two readings'
    /// difference is what the hits between them cost.
    pub cost_ns: f64,
}

impl Default for ProbeReading {
    fn default() -> Self {
        Self {
            counts: Counts::default(),
            hist: [0; HIST_SLOTS],
            attached_s: 0.0,
            cost_ns: 0.0,
        }
    }
}

/// A probe's change between two readings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeDelta {
    pub counts: Counts,
    pub hist: [u64; HIST_SLOTS],
    /// Seconds it was switched on in between (the governor's account; not
    /// clamped to the interval, which callers know).
    pub on_s: f64,
}

impl ProbeReading {
    /// What changed since `earlier`, a reading of the same probe.
    pub fn since(&self, earlier: &ProbeReading) -> ProbeDelta {
        let mut hist = [0u64; HIST_SLOTS];
        for (h, (n, b)) in hist.iter_mut().zip(self.hist.iter().zip(&earlier.hist)) {
            *h = n.saturating_sub(*b);
        }
        ProbeDelta {
            counts: self.counts.since(earlier.counts),
            hist,
            on_s: self.attached_s - earlier.attached_s,
        }
    }
}

/// The call sites (or latches) that moved between two readings, with
/// their change; a key new in `now` counts from zero.
pub fn moved<'a>(
    now: &'a BTreeMap<SiteKey, Counts>,
    before: &'a BTreeMap<SiteKey, Counts>,
) -> impl Iterator<Item = (&'a SiteKey, Counts)> + 'a {
    now.iter()
        .map(|(key, c)| (key, c.since(before.get(key).copied().unwrap_or_default())))
        .filter(|(_, d)| d.calls > 0)
}

/// A call site or a latch of one probe.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SiteKey {
    /// Index into the probes of the readings.
    pub probe: usize,
    /// The call site (`btr0cur.cc:304`) or the latch's name.
    pub name: String,
}

/// All counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Seconds since the probes were attached.
    pub elapsed_s: f64,
    /// Per probe, in the order of the names given to [`Frame::between`].
    pub probes: Vec<ProbeReading>,
    pub callsites: BTreeMap<SiteKey, Counts>,
    pub latches: BTreeMap<SiteKey, Counts>,
    /// CPU innoprof has used, in seconds (None: not measured).
    pub agent_cpu_s: Option<f64>,
}

/// A probe as the tables name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeName {
    pub name: String,
    /// Latency probes have wait time and a histogram; count probes only calls.
    pub timed: bool,
}

/// One row of the wait table.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRow {
    pub name: String,
    pub timed: bool,
    /// Calls per second while the probe was on (the governor may switch a
    /// dear probe off part of the time: see `on_fraction`).
    pub calls_per_s: f64,
    /// Nanoseconds of waiting per second (1e9 = one thread waiting all the time).
    pub wait_ns_per_s: f64,
    /// Upper bound of the log2 bucket holding the interval's 99th percentile.
    pub p99_ns: Option<u64>,
    /// Share of the interval the probe was switched on (1: all of it).
    pub on_fraction: f64,
}

/// A call site or latch row: most wait first.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitRow {
    pub probe: String,
    pub name: String,
    pub calls_per_s: f64,
    pub wait_ns_per_s: f64,
}

/// What the probes cost the server, against the governor's budget.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Spend {
    /// Probe hits' CPU, in % of one core.
    pub probes_pct_of_core: f64,
    /// The governor's budget (None: no governor).
    pub budget_pct_of_core: Option<f64>,
    /// innoprof's own CPU, in % of one core.
    pub agent_pct_of_core: Option<f64>,
    /// The CPU profiler's BPF programs, kernel-measured, in % of one core
    /// (None: no profiler, or not measured).
    pub cpu_profiler_pct_of_core: Option<f64>,
    /// Probes switched off part of the interval.
    pub probes_cut: usize,
}

/// What the wait table is sorted by (highest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    CallsPerSec,
    #[default]
    WaitPerSec,
    P99,
}

impl SortKey {
    pub const ALL: [SortKey; 3] = [SortKey::CallsPerSec, SortKey::WaitPerSec, SortKey::P99];

    /// The next column (the `s` key cycles through them).
    pub fn next(self) -> Self {
        match self {
            SortKey::CallsPerSec => SortKey::WaitPerSec,
            SortKey::WaitPerSec => SortKey::P99,
            SortKey::P99 => SortKey::CallsPerSec,
        }
    }

    /// The column header.
    pub fn header(self) -> &'static str {
        match self {
            SortKey::CallsPerSec => "calls/s",
            SortKey::WaitPerSec => "wait/s",
            SortKey::P99 => "p99",
        }
    }
}

/// One refresh's tables.
#[derive(Debug, Clone, Default)]
pub struct Frame {
    /// Seconds the frame covers.
    pub interval_s: f64,
    pub probes: Vec<ProbeRow>,
    pub latches: Vec<WaitRow>,
    pub callsites: Vec<WaitRow>,
    pub cpu: Option<CpuSummary>,
    pub spend: Spend,
    /// The statements and connections of the interval (None: not read;
    /// [`statements::StatementsView`] fills it live).
    pub statements: Option<statements::Statements>,
}

/// Below this, a probe counts as off for the interval (its rate would be noise).
const MIN_ON_S: f64 = 1e-3;

impl Frame {
    /// The interval between two readings of the same probes. `budget`:
    /// the governor's, in % of one core.
    pub fn between(
        names: &[ProbeName],
        earlier: &Reading,
        later: &Reading,
        budget: Option<f64>,
    ) -> Frame {
        let dt = (later.elapsed_s - earlier.elapsed_s).max(0.0);
        let per_s = |v: u64| if dt > 0.0 { v as f64 / dt } else { 0.0 };
        let empty = ProbeReading::default();
        let mut spent_ns = 0.0;
        let mut cut = 0;
        let mut probes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let now = later.probes.get(i).unwrap_or(&empty);
            let before = earlier.probes.get(i).unwrap_or(&empty);
            let ProbeDelta {
                counts: d,
                hist,
                on_s,
            } = now.since(before);
            let on_s = on_s.clamp(0.0, dt);
            if on_s + MIN_ON_S < dt {
                cut += 1;
            }
            // Calls seen while on, as a rate: the governor's off time
            // would otherwise read as a drop in the load.
            let rate = |v: u64| {
                if on_s >= MIN_ON_S {
                    v as f64 / on_s
                } else {
                    0.0
                }
            };
            spent_ns += (now.cost_ns - before.cost_ns).max(0.0);
            probes.push(ProbeRow {
                name: name.name.clone(),
                timed: name.timed,
                calls_per_s: rate(d.calls),
                wait_ns_per_s: if name.timed { rate(d.wait_ns) } else { 0.0 },
                p99_ns: if name.timed {
                    Log2Histogram::new(&hist).quantile_upper_ns(0.99)
                } else {
                    None
                },
                on_fraction: if dt > 0.0 { on_s / dt } else { 1.0 },
            });
        }
        let rows = |now: &BTreeMap<SiteKey, Counts>, before: &BTreeMap<SiteKey, Counts>| {
            let mut out: Vec<WaitRow> = moved(now, before)
                .map(|(key, d)| WaitRow {
                    probe: names
                        .get(key.probe)
                        .map_or_else(String::new, |n| n.name.clone()),
                    name: key.name.clone(),
                    calls_per_s: per_s(d.calls),
                    wait_ns_per_s: per_s(d.wait_ns),
                })
                .collect();
            sort_by_wait(&mut out);
            out
        };
        let agent_pct = match (earlier.agent_cpu_s, later.agent_cpu_s) {
            (Some(a), Some(b)) if dt > 0.0 => Some((b - a).max(0.0) / dt * 100.0),
            _ => None,
        };
        Frame {
            interval_s: dt,
            probes,
            latches: rows(&later.latches, &earlier.latches),
            callsites: rows(&later.callsites, &earlier.callsites),
            cpu: None,
            statements: None,
            spend: Spend {
                probes_pct_of_core: if dt > 0.0 {
                    spent_ns / 1e9 / dt * 100.0
                } else {
                    0.0
                },
                budget_pct_of_core: budget,
                agent_pct_of_core: agent_pct,
                cpu_profiler_pct_of_core: None,
                probes_cut: cut,
            },
        }
    }

    /// The same tables from a saved recording: each probe at its one rate
    /// ([`crate::model::summary::ProbeRate`], as summary.txt shows it), and
    /// its latches and call sites per second the probe was watched (a cut
    /// probe's rows divided by the whole recording would read as a drop).
    pub fn from_summary(summary: &Summary) -> Frame {
        // Seconds watched: a `--follow` recording's gaps (the server
        // restarting) are no seconds of its rates, as on every surface.
        let d = summary.watched_s();
        let per_s = |v: u64, s: f64| if s > 0.0 { v as f64 / s } else { 0.0 };
        let mut probes = Vec::new();
        let mut latches = Vec::new();
        let mut callsites = Vec::new();
        let mut cut = 0;
        for p in summary
            .probes
            .iter()
            .filter(|p| p.status == ProbeStatus::Attached)
        {
            let timed = p.measure == Measure::Latency;
            let on = p.sampling.as_ref().map_or(1.0, |s| s.attached_fraction);
            if on < 1.0 {
                cut += 1;
            }
            let rate = p.rate(d);
            let watched = d * on;
            probes.push(ProbeRow {
                name: p.name.clone(),
                timed,
                calls_per_s: rate.calls_per_s,
                wait_ns_per_s: if timed { rate.wait_ns_per_s } else { 0.0 },
                p99_ns: p.wait_ns_p99,
                on_fraction: on,
            });
            latches.extend(p.latches.iter().map(|l| WaitRow {
                probe: p.name.clone(),
                name: l.latch.clone(),
                calls_per_s: per_s(l.calls, watched),
                wait_ns_per_s: per_s(l.wait_ns_total, watched),
            }));
            callsites.extend(p.callsites.iter().map(|c| WaitRow {
                probe: p.name.clone(),
                name: match &c.latch {
                    Some(l) => format!("{} [{l}]", c.site),
                    None => c.site.clone(),
                },
                calls_per_s: per_s(c.calls, watched),
                wait_ns_per_s: per_s(c.wait_ns_total, watched),
            }));
        }
        sort_by_wait(&mut latches);
        sort_by_wait(&mut callsites);
        let o = &summary.overhead;
        Frame {
            interval_s: d,
            probes,
            latches,
            callsites,
            cpu: summary.cpu.clone(),
            statements: summary
                .who
                .as_ref()
                .map(|who| statements::Statements::from_who(who, d)),
            spend: Spend {
                probes_pct_of_core: o.probes_pct_of_core,
                budget_pct_of_core: o.budget_pct_of_core,
                agent_pct_of_core: Some(o.agent_cpu_pct_of_core),
                cpu_profiler_pct_of_core: o.cpu_profiler_pct_of_core,
                probes_cut: cut,
            },
        }
    }

    /// Sorts the wait table by `key`, highest first; ties by name.
    pub fn sort(&mut self, key: SortKey) {
        let value = |r: &ProbeRow| match key {
            SortKey::CallsPerSec => r.calls_per_s,
            SortKey::WaitPerSec => r.wait_ns_per_s,
            SortKey::P99 => r.p99_ns.map_or(-1.0, |v| v as f64),
        };
        self.probes.sort_by(|a, b| {
            value(b)
                .total_cmp(&value(a))
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

fn sort_by_wait(rows: &mut [WaitRow]) {
    rows.sort_by(|a, b| {
        b.wait_ns_per_s
            .total_cmp(&a.wait_ns_per_s)
            .then_with(|| b.calls_per_s.total_cmp(&a.calls_per_s))
            .then_with(|| (&a.probe, &a.name).cmp(&(&b.probe, &b.name)))
    });
}

/// Takes readings of a running recorder (and its CPU profiler) and turns
/// each pair into a [`Frame`].
pub struct LiveView {
    probes: Vec<LiveProbe>,
    names: Vec<ProbeName>,
    labels: LabelCache,
    /// Latch names per (probe, site): naming one by its creation site may
    /// read DWARF, so once per site, not every second.
    latch_names: HashMap<(usize, Callsite), Option<String>>,
    symbolizer: StackSymbolizer,
    maps: ProcessMaps,
    last: Reading,
    last_cpu: Option<RawCpuProfile>,
    pricer: HitPricer,
    /// Per probe, what its hits have cost so far (ns).
    cost_ns: Vec<f64>,
}

impl LiveView {
    /// Takes the first reading: the first frame covers the time from now.
    pub fn new(recorder: &Recorder) -> Result<Self, LiveError> {
        let probes = recorder.live_probes();
        let names = probes
            .iter()
            .map(|p| ProbeName {
                name: p.name.clone(),
                timed: p.measure == Measure::Latency,
            })
            .collect();
        let maps = ProcessMaps::read(recorder.target().pid).unwrap_or_default();
        let cost_ns = vec![0.0; probes.len()];
        let mut me = Self {
            cost_ns,
            pricer: HitPricer::default(),
            probes,
            names,
            labels: LabelCache::default(),
            latch_names: HashMap::new(),
            symbolizer: recorder.plan().stack_symbolizer(maps.clone()),
            maps,
            last: Reading::default(),
            last_cpu: None,
        };
        me.last = me.read(recorder)?;
        me.last_cpu = recorder.cpu_snapshot().transpose()?;
        Ok(me)
    }

    /// Whether naming the server's stacks can start from what an earlier
    /// run kept (see [`StackSymbolizer::names_kept_for`]); false on a
    /// host's first run, when the first CPU frame takes longest.
    pub fn stack_names_kept(&self, recorder: &Recorder) -> bool {
        recorder
            .plan()
            .image
            .file_id
            .is_some_and(|binary| self.symbolizer.names_kept_for(binary))
    }

    /// The interval since the last call (or since `new`).
    pub fn refresh(&mut self, recorder: &Recorder) -> Result<Frame, LiveError> {
        let now = self.read(recorder)?;
        let budget = recorder.plan().governor.map(|g| g.budget_pct);
        let mut frame = Frame::between(&self.names, &self.last, &now, budget);
        self.last = now;
        if let Some(cpu) = recorder.cpu_snapshot().transpose()? {
            // Libraries loaded since the last refresh are in a fresh map.
            if let Ok(fresh) = ProcessMaps::read(recorder.target().pid) {
                if fresh != self.maps {
                    self.symbolizer.set_maps(fresh.clone());
                    self.maps = fresh;
                }
            }
            if let Some(before) = &self.last_cpu {
                let delta = cpu.since(before).symbolize(&mut self.symbolizer);
                frame.spend.cpu_profiler_pct_of_core = delta.summary.program_pct_of_core();
                frame.cpu = Some(delta.summary);
            }
            self.last_cpu = Some(cpu);
        }
        Ok(frame)
    }

    /// Reads the counters now and returns the reading before it and this
    /// one (the next call starts from it): for callers that build their own
    /// view of the window (`serve`'s findings).
    pub fn advance(&mut self, recorder: &Recorder) -> Result<(Reading, Reading), LiveError> {
        let now = self.read(recorder)?;
        let before = std::mem::replace(&mut self.last, now.clone());
        Ok((before, now))
    }

    /// The probes the readings hold, in their order.
    pub fn probes(&self) -> &[crate::collect::LiveProbe] {
        &self.probes
    }

    fn read(&mut self, recorder: &Recorder) -> Result<Reading, LiveError> {
        let counters = recorder.read_counters()?;
        let attached = recorder.attached_seconds();
        let plan = recorder.plan();
        let mut namer = CallsiteNamer::new(recorder.target().pid, &plan.image);
        let mut reading = Reading {
            elapsed_s: recorder.elapsed().as_secs_f64(),
            agent_cpu_s: Some(recorder.agent_cpu().as_secs_f64()),
            ..Reading::default()
        };
        let priced = self.pricer.read(recorder, &counters);
        for (i, p) in self.probes.iter().enumerate() {
            let total = counters.probe_total(&p.slots);
            self.cost_ns[i] += p.slots.iter().filter_map(|s| priced.get(s)).sum::<f64>();
            reading.probes.push(ProbeReading {
                counts: Counts {
                    calls: total.calls,
                    wait_ns: total.wait_ns_total,
                    background_wait_ns: 0,
                },
                hist: total.hist,
                attached_s: attached.get(p.probe).copied().unwrap_or(0.0),
                cost_ns: self.cost_ns[i],
            });
            if p.has_callsites {
                for (label, v) in self
                    .labels
                    .by_label(counters.probe_sites(&p.slots), &mut namer)
                {
                    reading
                        .callsites
                        .entry(SiteKey {
                            probe: i,
                            name: label,
                        })
                        .or_default()
                        .add(Counts::of(v.calls, v.wait_ns_total));
                }
            }
            let Some(planned) = plan.probes.get(p.probe) else {
                continue;
            };
            let latch_names = LatchNames::new(planned);
            for (_, site, role, v) in counters
                .site_roles
                .iter()
                .filter(|(slot, ..)| p.slots.contains(slot))
            {
                let name = self
                    .latch_names
                    .entry((i, *site))
                    .or_insert_with(|| latch_names.of(site, &mut namer))
                    .clone();
                if let Some(name) = name {
                    let c = reading
                        .latches
                        .entry(SiteKey { probe: i, name })
                        .or_default();
                    c.add(Counts::of(v.calls, v.wait_ns_total));
                    if crate::plan::thread_role::role(*role).1
                        == crate::plan::thread_role::RoleKind::Background
                    {
                        c.background_wait_ns += v.wait_ns_total;
                    }
                }
            }
        }
        Ok(reading)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<ProbeName> {
        vec![
            ProbeName {
                name: "a.lat".into(),
                timed: true,
            },
            ProbeName {
                name: "b.count".into(),
                timed: false,
            },
        ]
    }

    fn probe(calls: u64, wait_ns: u64, hist: &[(usize, u64)], on_s: f64) -> ProbeReading {
        let mut h = [0; HIST_SLOTS];
        for (slot, n) in hist {
            h[*slot] = *n;
        }
        ProbeReading {
            counts: Counts {
                calls,
                wait_ns,
                background_wait_ns: 0,
            },
            hist: h,
            attached_s: on_s,
            cost_ns: calls as f64 * 1_000.0,
        }
    }

    #[test]
    fn rates_and_p99_come_from_the_interval_only() {
        let earlier = Reading {
            elapsed_s: 10.0,
            // 1000 slow calls before the interval: they must not show.
            probes: vec![
                probe(1000, 1_000_000_000, &[(20, 1000)], 10.0),
                probe(50, 0, &[], 10.0),
            ],
            agent_cpu_s: Some(1.0),
            ..Default::default()
        };
        let later = Reading {
            elapsed_s: 12.0,
            // +200 calls, 196 in [1024, 2048) ns and 4 in [1 Mi, 2 Mi) ns.
            probes: vec![
                probe(1200, 1_004_000_000, &[(10, 196), (20, 1004)], 12.0),
                probe(70, 0, &[], 12.0),
            ],
            agent_cpu_s: Some(1.02),
            ..Default::default()
        };
        let f = Frame::between(&names(), &earlier, &later, Some(1.0));
        assert_eq!(f.interval_s, 2.0);
        let a = &f.probes[0];
        assert_eq!(a.calls_per_s, 100.0);
        assert_eq!(a.wait_ns_per_s, 2_000_000.0);
        // The 198th of 200 is in the slow bucket: [1 Mi, 2 Mi), the
        // 1000 slow calls before the interval notwithstanding.
        assert_eq!(a.p99_ns, Some(2 << 20));
        assert_eq!(a.on_fraction, 1.0);
        let b = &f.probes[1];
        assert_eq!(
            (b.calls_per_s, b.wait_ns_per_s, b.p99_ns),
            (10.0, 0.0, None)
        );
        // 220 new calls at 1 us each over 2 s: 0.011 % of a core.
        assert!((f.spend.probes_pct_of_core - 0.011).abs() < 1e-9);
        assert_eq!(f.spend.budget_pct_of_core, Some(1.0));
        assert!((f.spend.agent_pct_of_core.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(f.spend.probes_cut, 0);
    }

    #[test]
    fn p99_below_one_percent_of_slow_calls_stays_in_the_fast_bucket() {
        let earlier = Reading {
            elapsed_s: 0.0,
            probes: vec![probe(0, 0, &[], 0.0)],
            ..Default::default()
        };
        let later = Reading {
            elapsed_s: 1.0,
            probes: vec![probe(1000, 0, &[(10, 995), (20, 5)], 1.0)],
            ..Default::default()
        };
        let f = Frame::between(&names()[..1], &earlier, &later, None);
        assert_eq!(f.probes[0].p99_ns, Some(2048));
        // No calls, no percentile.
        let f = Frame::between(&names()[..1], &later, &later, None);
        assert_eq!(f.probes[0].p99_ns, None);
        assert_eq!(f.probes[0].calls_per_s, 0.0);
    }

    #[test]
    fn a_cut_probe_is_rated_over_its_on_time() {
        let earlier = Reading {
            elapsed_s: 5.0,
            probes: vec![probe(0, 0, &[], 5.0)],
            ..Default::default()
        };
        let later = Reading {
            elapsed_s: 7.0,
            // On for 0.5 s of the 2 s.
            probes: vec![probe(500, 5_000_000, &[(12, 500)], 5.5)],
            ..Default::default()
        };
        let f = Frame::between(&names()[..1], &earlier, &later, Some(1.0));
        let p = &f.probes[0];
        assert_eq!(p.on_fraction, 0.25);
        assert_eq!(p.calls_per_s, 1000.0);
        assert_eq!(p.wait_ns_per_s, 10_000_000.0);
        assert_eq!(f.spend.probes_cut, 1);
    }

    #[test]
    fn sites_are_interval_deltas_most_wait_first_idle_ones_dropped() {
        let key = |probe, name: &str| SiteKey {
            probe,
            name: name.into(),
        };
        let c = |calls, wait_ns| Counts {
            calls,
            wait_ns,
            background_wait_ns: 0,
        };
        let earlier = Reading {
            elapsed_s: 1.0,
            callsites: [
                (key(0, "x.cc:1"), c(10, 100)),
                (key(0, "y.cc:2"), c(5, 5)),
                (key(0, "idle.cc:3"), c(7, 70)),
            ]
            .into(),
            ..Default::default()
        };
        let later = Reading {
            elapsed_s: 2.0,
            callsites: [
                (key(0, "x.cc:1"), c(12, 200)),
                (key(0, "y.cc:2"), c(105, 1005)),
                (key(0, "idle.cc:3"), c(7, 70)),
            ]
            .into(),
            latches: [(key(0, "dict_sys_mutex"), c(3, 3000))].into(),
            ..Default::default()
        };
        let f = Frame::between(&names(), &earlier, &later, None);
        let sites: Vec<(&str, f64, f64)> = f
            .callsites
            .iter()
            .map(|r| (r.name.as_str(), r.calls_per_s, r.wait_ns_per_s))
            .collect();
        assert_eq!(
            sites,
            vec![("y.cc:2", 100.0, 1000.0), ("x.cc:1", 2.0, 100.0)]
        );
        assert_eq!(f.latches.len(), 1);
        assert_eq!(f.latches[0].probe, "a.lat");
        assert_eq!(f.latches[0].wait_ns_per_s, 3000.0);
    }

    #[test]
    fn a_saved_recording_gives_whole_recording_rates() {
        let mut summary = crate::report::html::tests::summary();
        summary.probes[0].latches = vec![crate::model::summary::LatchResult {
            latch: "dict_sys_mutex".into(),
            calls: 20,
            wait_ns_total: 50_000,
            wait_ns_max: 9_000,
            background_wait_ns: 0,
        }];
        summary.overhead.budget_pct_of_core = Some(1.0);
        summary.overhead.probes_pct_of_core = 0.4;
        let f = Frame::from_summary(&summary);
        assert_eq!(f.interval_s, 10.0);
        let p = &f.probes[0];
        assert_eq!(p.name, "innodb.mutex.enter");
        assert_eq!((p.calls_per_s, p.wait_ns_per_s), (0.3, 300.0));
        assert_eq!((p.p99_ns, p.on_fraction), (Some(1500), 1.0));
        assert_eq!(f.callsites[0].name, "btr0cur.cc:304");
        assert_eq!(f.callsites[0].wait_ns_per_s, 300.0);
        assert_eq!(f.latches[0].name, "dict_sys_mutex");
        assert_eq!(
            (f.latches[0].calls_per_s, f.latches[0].wait_ns_per_s),
            (2.0, 5_000.0)
        );
        assert_eq!(f.spend.probes_pct_of_core, 0.4);
        assert_eq!(f.spend.budget_pct_of_core, Some(1.0));
        assert!(f.cpu.is_none());
    }

    #[test]
    fn sort_keys_cycle_and_order_rows() {
        assert_eq!(SortKey::default(), SortKey::WaitPerSec);
        let mut k = SortKey::CallsPerSec;
        for _ in 0..3 {
            k = k.next();
        }
        assert_eq!(k, SortKey::CallsPerSec);
        let row = |name: &str, calls, wait, p99| ProbeRow {
            name: name.into(),
            timed: true,
            calls_per_s: calls,
            wait_ns_per_s: wait,
            p99_ns: p99,
            on_fraction: 1.0,
        };
        let mut f = Frame {
            probes: vec![
                row("a", 10.0, 5.0, None),
                row("b", 1.0, 50.0, Some(8)),
                row("c", 100.0, 1.0, Some(4096)),
            ],
            ..Default::default()
        };
        let order = |f: &Frame| f.probes.iter().map(|r| r.name.clone()).collect::<String>();
        f.sort(SortKey::CallsPerSec);
        assert_eq!(order(&f), "cab");
        f.sort(SortKey::WaitPerSec);
        assert_eq!(order(&f), "bac");
        f.sort(SortKey::P99);
        assert_eq!(order(&f), "cba");
    }
}
