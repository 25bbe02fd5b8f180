//! `serve`: the live counters as Prometheus metrics (OpenMetrics text,
//! encoded by `prometheus-client`). Every scrape reads the BPF counters
//! while the probes stay attached (per-slot stats and the call-site map,
//! never stacks) and encodes them as they stand:
//!
//! - `innoprof_probe_calls_total{probe}`, `innoprof_probe_wait_seconds_total{probe}`
//! - `innoprof_callsite_calls_total{probe,callsite}`,
//!   `innoprof_callsite_wait_seconds_total{probe,callsite}` for probes whose
//!   catalog entry gives call sites
//! - `innoprof_latch_calls_total{probe,latch}`,
//!   `innoprof_latch_wait_seconds_total{probe,latch}` for probes that name
//!   the latch of each wait (its latch id or creation site)
//! - `innoprof_role_calls_total{probe,role}`,
//!   `innoprof_role_wait_seconds_total{probe,role}`: per thread role
//!   (`connection`, `purge worker`, `page cleaner`, ..., `unknown`; a
//!   bounded set), background roles apart from the workload's contention
//! - `innoprof_statement_calls_total{probe,statement,fingerprint}`,
//!   `innoprof_statement_wait_seconds_total{probe,statement,fingerprint}`:
//!   per client statement (`statement`: its 16-hex id, a hash of the
//!   fingerprint; `fingerprint`: literals as `?`, cut to 120 characters),
//!   from the statement book's cumulative totals. At most
//!   [`STATEMENT_LIMIT`] statements get a label (the most waited on since
//!   serve started, chosen as they are seen and kept for good); every other
//!   is summed as `statement="other",fingerprint=""`
//! - `innoprof_probe_latency_seconds{probe}`: the BPF log2 histogram
//! - `innoprof_probe_attached_seconds_total{probe}`: how long the probe was
//!   switched on. The overhead governor detaches a probe it cannot afford
//!   part of the time; its counters are the calls seen (exact), growing
//!   only while on, so `rate(calls) / rate(attached)` is its rate while
//!   watched
//! - `innoprof_probe_calls_estimate{probe}` and
//!   `innoprof_probe_calls_estimate_bound{probe}` for such a probe: seen +
//!   interpolated between its on-windows up to now (never projected past
//!   the last one), and the 95 % half-width of that estimate
//! - one counter per in-memory InnoDB counter (catalog `measure =
//!   "counter"`), named for its quantity and unit:
//!   `innoprof_innodb_redo_bytes_total`, `innoprof_innodb_trx_ids_total`,
//!   `innoprof_innodb_row_ids_total`, `innoprof_innodb_rows_read_total`:
//!   its increase since innoprof started, read from the server's memory at
//!   each scrape: exact, no probe. A failed read repeats the last value
//! - `innoprof_finding{rule,severity}` (present while a finding holds) and
//!   `innoprof_findings{severity}` (their number, always present)
//! - `innoprof_dropped_total{reason}`, `innoprof_attached_uprobes`,
//!   `innoprof_target_info{family,version,pid,binary}`, `innoprof_target_up`,
//!   `innoprof_target_restarts_total`
//! - the process's own: the standard `process_cpu_seconds_total` and
//!   `process_resident_memory_bytes`, `innoprof_build_info`, and what the
//!   probes cost (`innoprof_probe_cost_seconds_total`, …)
//!
//! Call-site and latch labels are capped per probe: the busiest
//! `callsite_limit` sites (by calls) or latches (by wait) get their own
//! label, everything else is `callsite="other"` or `latch="other"`.
//! A label is kept once given, and one given later keeps what "other"
//! already counted for it there, so every series stays a monotonic counter
//! (no false resets in `rate()`).

use std::collections::{BTreeMap, HashMap};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::bpf::abi::{Callsite, SiteVal, HIST_SLOTS};
use crate::collect::{CollectError, Counters, Counts, Drops, LiveProbe};
use crate::cost::price::HitPricer;
use crate::plan::catalog::Measure;
use crate::record::results::LatchNames;
use crate::record::statements::{statement_id, BookTotals};
use crate::record::Recorder;
use crate::symbolize::callsite::{CallsiteNamer, LabelCache};

/// The `Content-Type` of [`Exporter::scrape`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Default cap of call-site labels per probe (plus "other").
pub const DEFAULT_CALLSITE_LIMIT: usize = 20;
pub const OTHER: &str = "other";
/// Statements with a label of their own (summed over servers' restarts);
/// the rest is `statement="other"`.
pub const STATEMENT_LIMIT: usize = 20;
/// A statement's `fingerprint` label is cut to this many characters.
const FINGERPRINT_CHARS: usize = 120;

/// Histogram slots below this are merged into the first bucket: a uprobe
/// pair alone costs about a microsecond, so shorter waits are noise, and
/// ten fewer buckets per probe keep the series count down.
const FIRST_SLOT: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error("encoding the metrics failed")]
    Encode(#[from] std::fmt::Error),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExporterOptions {
    /// Call-site labels per probe before the rest goes to "other".
    pub callsite_limit: usize,
    /// innoprof's commit, for `innoprof_build_info` (the CLI knows it).
    pub commit: String,
    /// Labels on every series of this server (serve --all: `server`, its
    /// datadir, and where it runs, `cgroup` and `container`), so several
    /// servers' series stay apart; none for a lone server.
    pub instance: Vec<(&'static str, String)>,
}

impl Default for ExporterOptions {
    fn default() -> Self {
        Self {
            commit: String::new(),
            callsite_limit: DEFAULT_CALLSITE_LIMIT,
            instance: Vec::new(),
        }
    }
}

/// What the target is, for the info metric.
#[derive(Debug, Clone)]
pub struct TargetLabels {
    pub family: String,
    pub version: String,
    pub pid: u32,
    pub binary: String,
    /// Where this run runs ([`crate::target::placement`]): its cgroup and
    /// container id, empty when none (then left out of the info).
    pub cgroup: String,
    pub container: String,
}

/// A call site's calls and wait, as the crate counts them everywhere.
fn site_counts(v: &SiteVal) -> Counts {
    Counts::of(v.calls, v.wait_ns_total)
}

/// What decides which unlabelled keys get a label of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rank {
    /// Most calls first (call sites: where the calls come from).
    Calls,
    /// Most wait first (latches: where threads queue), then calls.
    Wait,
}

impl Rank {
    fn key(self, c: &Counts) -> (u64, u64) {
        match self {
            Rank::Calls => (c.calls, c.wait_ns),
            Rank::Wait => (c.wait_ns, c.calls),
        }
    }
}

/// One probe's capped labels (call sites or latches) across scrapes.
#[derive(Debug, Default)]
struct CallsiteLabels {
    /// Labels with a series of their own, with what "other" had already
    /// counted for them when they got it.
    own: BTreeMap<String, Counts>,
    /// The sites in "other" at the previous scrape, as counted then.
    in_other: BTreeMap<String, Counts>,
}

impl CallsiteLabels {
    /// The series for cumulative per-label counts `now`: own labels, then
    /// "other". Promotes the busiest unlabelled sites while there is room.
    fn series(
        &mut self,
        now: &BTreeMap<String, Counts>,
        limit: usize,
        rank: Rank,
    ) -> Vec<(String, Counts)> {
        let room = limit.saturating_sub(self.own.len());
        let mut candidates: Vec<(&String, &Counts)> = now
            .iter()
            .filter(|(label, _)| !self.own.contains_key(*label))
            .collect();
        candidates.sort_by(|a, b| (rank.key(b.1), a.0).cmp(&(rank.key(a.1), b.0)));
        for (label, _) in candidates.into_iter().take(room) {
            let already = self.in_other.get(label).copied().unwrap_or_default();
            self.own.insert(label.clone(), already);
        }
        let mut other = Counts::default();
        let mut out = Vec::with_capacity(self.own.len() + 1);
        for (label, offset) in &self.own {
            let c = now.get(label).copied().unwrap_or_default();
            out.push((label.clone(), c.since(*offset)));
            other.add(*offset);
        }
        self.in_other.clear();
        for (label, c) in now.iter().filter(|(l, _)| !self.own.contains_key(*l)) {
            other.add(*c);
            self.in_other.insert(label.clone(), *c);
        }
        out.push((OTHER.to_string(), other));
        out
    }
}

/// One statement's cumulative counts, per probe name, as the book has
/// them now.
#[derive(Debug, Clone, Default)]
struct StatementNow {
    fingerprint: String,
    probes: BTreeMap<String, Counts>,
}

impl StatementNow {
    /// Its rank: most wait first, then calls (summed over its probes).
    fn rank(&self) -> (u64, u64) {
        let mut total = Counts::default();
        for c in self.probes.values() {
            total.add(*c);
        }
        (total.wait_ns, total.calls)
    }
}

/// Per statement id, its counts now: the book's totals with probes named
/// by slot (`probe_of`); slots of no exported probe are left out.
fn statements_now(
    totals: &BookTotals,
    probe_of: &HashMap<crate::bpf::abi::SlotId, String>,
) -> BTreeMap<String, StatementNow> {
    let mut out: BTreeMap<String, StatementNow> = BTreeMap::new();
    for (&(digest, slot), c) in &totals.rows {
        let (Some(probe), Some((fingerprint, _))) =
            (probe_of.get(&slot), totals.statements.get(digest as usize))
        else {
            continue;
        };
        let st = out
            .entry(statement_id(fingerprint))
            .or_insert_with(|| StatementNow {
                fingerprint: fingerprint.clone(),
                probes: BTreeMap::new(),
            });
        st.probes.entry(probe.clone()).or_default().add(*c);
    }
    out
}

/// The `fingerprint` label: cut to [`FINGERPRINT_CHARS`] characters.
fn fingerprint_label(fingerprint: &str) -> String {
    fingerprint.chars().take(FINGERPRINT_CHARS).collect()
}

/// The statements with a label of their own, across scrapes: the first
/// `limit` seen, busiest (by wait) first, kept for good; the rest summed
/// per probe as "other". As with call sites, a statement labelled later
/// keeps what "other" already counted for it there, so no series goes back.
#[derive(Debug, Default, Clone)]
struct StatementLabels {
    /// Statement id -> its fingerprint label.
    chosen: BTreeMap<String, String>,
    /// Per (probe, statement id) labelled: what "other" had counted for
    /// it when it got its label.
    offsets: BTreeMap<(String, String), Counts>,
    /// The (probe, statement id) in "other" at the previous scrape.
    in_other: BTreeMap<(String, String), Counts>,
}

impl StatementLabels {
    /// Per probe name, its statement series for cumulative counts `now`:
    /// labelled statements, then "other" (for every probe with any).
    fn series(
        &mut self,
        now: &BTreeMap<String, StatementNow>,
        limit: usize,
    ) -> BTreeMap<String, Vec<(String, Counts)>> {
        let room = limit.saturating_sub(self.chosen.len());
        let mut candidates: Vec<(&String, (u64, u64))> = now
            .iter()
            .filter(|(id, _)| !self.chosen.contains_key(*id))
            .map(|(id, st)| (id, st.rank()))
            .collect();
        candidates.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
        for (id, _) in candidates.into_iter().take(room) {
            self.chosen
                .insert(id.clone(), fingerprint_label(&now[id].fingerprint));
            for ((probe, other), c) in &self.in_other {
                if other == id {
                    self.offsets.insert((probe.clone(), id.clone()), *c);
                }
            }
        }
        let mut out: BTreeMap<String, Vec<(String, Counts)>> = BTreeMap::new();
        let mut other: BTreeMap<String, Counts> = BTreeMap::new();
        for ((probe, _), offset) in &self.offsets {
            other.entry(probe.clone()).or_default().add(*offset);
        }
        self.in_other.clear();
        for (id, st) in now {
            let own = self.chosen.contains_key(id);
            for (probe, c) in &st.probes {
                let rest = other.entry(probe.clone()).or_default();
                if own {
                    let offset = self
                        .offsets
                        .get(&(probe.clone(), id.clone()))
                        .copied()
                        .unwrap_or_default();
                    out.entry(probe.clone())
                        .or_default()
                        .push((id.clone(), c.since(offset)));
                } else {
                    rest.add(*c);
                    self.in_other.insert((probe.clone(), id.clone()), *c);
                }
            }
        }
        for (probe, c) in other {
            out.entry(probe).or_default().push((OTHER.to_string(), c));
        }
        out
    }
}

/// Turns live reads of one recorder's counters into scrapes.
#[derive(Debug)]
pub struct Exporter {
    probes: Vec<LiveProbe>,
    target: TargetLabels,
    attached_uprobes: usize,
    limit: usize,
    labels: LabelCache,
    callsites: Vec<CallsiteLabels>,
    /// Per probe, its latch labels (capped like call sites, by wait).
    latches: Vec<CallsiteLabels>,
    /// Latch names per (probe, site): naming one by its creation site may
    /// read DWARF, so once per site, not every scrape.
    latch_names: HashMap<(usize, Callsite), Option<String>>,
    /// Highest attached seconds reported per probe (kept monotonic).
    attached: Vec<f64>,
    /// Per planned probe, for the next encode: (estimate, 95 % bound) of a
    /// probe the governor cut.
    estimates: Vec<Option<(f64, f64)>>,
    /// In-memory counters: (index in the recorder's counters, name, value
    /// at start, increase last reported).
    counters: Vec<(usize, String, u64, u64)>,
    /// The findings of the last evaluated window: (rule, severity).
    findings: Vec<(String, String)>,
    commit: String,
    instance: Vec<(&'static str, String)>,
    /// Server CPU time probe hits cost, summed per scrape as each slot's
    /// new hits (calls and switched-off traps) at the price over the
    /// scrape's span (see [`HitPricer`]): it only grows, and it is the
    /// price the series and the summary put on the same hits.
    probe_cost_s: f64,
    pricer: HitPricer,
    /// What the server's earlier runs counted (serve follows it across
    /// restarts): added to this run's series so each keeps growing.
    carried: Totals,
    /// This run's last scrape with `carried` added: what a follower
    /// exporter carries on from, and what is served while the server is down.
    last: Option<Scrape>,
    /// Times the server restarted while watched.
    restarts: u64,
    /// The statements with a label of their own (kept across restarts).
    statements: StatementLabels,
}

/// Cumulative series a restarted server's new run continues from.
#[derive(Debug, Clone, Default)]
struct Totals {
    probes: Vec<ProbeMetrics>,
    counters: Vec<(String, u64)>,
    drops: Drops,
    governor_switches: u64,
    fingerprints: BTreeMap<String, String>,
}

impl Totals {
    /// Adds these totals to a scrape of a later run, series by series
    /// (probe and counter by name, call site by label); a series the later
    /// run lacks (its build dropped a probe) stays, at its last value.
    fn add_to(&self, scrape: &mut Scrape) {
        for old in &self.probes {
            match scrape.probes.iter_mut().find(|p| p.name == old.name) {
                Some(p) => p.add(old),
                None => scrape.probes.push(old.clone()),
            }
        }
        for (name, n) in &self.counters {
            match scrape.counters.iter_mut().find(|(c, _)| c == name) {
                Some((_, v)) => *v += n,
                None => scrape.counters.push((name.clone(), *n)),
            }
        }
        scrape.drops.add(&self.drops);
        scrape.me.governor_switches += self.governor_switches;
        for (id, fingerprint) in &self.fingerprints {
            scrape
                .fingerprints
                .entry(id.clone())
                .or_insert_with(|| fingerprint.clone());
        }
    }

    fn of(scrape: &Scrape) -> Self {
        Self {
            probes: scrape.probes.clone(),
            counters: scrape.counters.clone(),
            drops: scrape.drops.clone(),
            governor_switches: scrape.me.governor_switches,
            fingerprints: scrape.fingerprints.clone(),
        }
    }
}

/// What innoprof spends on one server, exported beside its numbers.
#[derive(Debug, Clone, Default)]
struct SelfStats {
    probe_cost_s: f64,
    /// The governor's budget, in cores (None: governor off).
    budget_cores: Option<f64>,
    attach_s: f64,
    governor_switches: u64,
    /// What the server was measured to pay per modelled second of probe
    /// cost, with its 95 % interval (None: not measured, see `in_target`).
    in_target_factor: Option<(f64, f64, f64)>,
}

/// This process's resident set, from /proc/self/statm.
fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * crate::resolve::mapped::page_size() as u64
}

impl Exporter {
    pub fn new(
        probes: Vec<LiveProbe>,
        target: TargetLabels,
        attached_uprobes: usize,
        opts: ExporterOptions,
    ) -> Self {
        let callsites = probes.iter().map(|_| CallsiteLabels::default()).collect();
        let latches = probes.iter().map(|_| CallsiteLabels::default()).collect();
        let probes_len = probes.len();
        Self {
            probes,
            target,
            attached_uprobes,
            limit: opts.callsite_limit,
            labels: LabelCache::default(),
            attached: vec![0.0; probes_len],
            callsites,
            latches,
            latch_names: HashMap::new(),
            estimates: Vec::new(),
            counters: Vec::new(),
            findings: Vec::new(),
            commit: opts.commit,
            instance: opts.instance,
            probe_cost_s: 0.0,
            pricer: HitPricer::default(),
            carried: Totals::default(),
            last: None,
            restarts: 0,
            statements: StatementLabels::default(),
        }
    }

    /// Makes this exporter, for the new run of a server that restarted,
    /// carry on from `previous` (the old run's exporter, [`Exporter::retire`]d):
    /// every counter goes on from its last value, and
    /// `innoprof_target_restarts_total` counts one more.
    pub fn carry_on_from(&mut self, previous: &Exporter) {
        if let Some(last) = &previous.last {
            self.carried = Totals::of(last);
        }
        self.probe_cost_s = previous.probe_cost_s;
        self.restarts = previous.restarts + 1;
        // The same statements keep their labels (the new run's book starts
        // from nothing: nothing of it is in "other" yet).
        self.statements.chosen = previous.statements.chosen.clone();
    }

    /// Reads the old run's counters one last time (the BPF maps outlive
    /// the target process), so what it counted until it exited is carried.
    pub fn retire(&mut self, recorder: &mut Recorder) -> Result<(), ExportError> {
        self.read(recorder).map(drop)
    }

    /// [`Self::read_while_down`], encoded.
    pub fn scrape_while_down(&mut self) -> Result<String, ExportError> {
        render(vec![self.read_while_down()], &self.commit)
    }

    /// The server's numbers while it is down: the last values (so nothing
    /// goes back), `innoprof_target_up 0`, no uprobes, no findings.
    pub fn read_while_down(&self) -> Scrape {
        let mut scrape = match &self.last {
            Some(last) => last.clone(),
            None => Scrape {
                probes: Vec::new(),
                counters: Vec::new(),
                drops: Drops::default(),
                target: self.target.clone(),
                attached_uprobes: 0,
                findings: Vec::new(),
                me: SelfStats::default(),
                instance: self.instance.clone(),
                up: false,
                restarts: self.restarts,
                fingerprints: BTreeMap::new(),
            },
        };
        for p in &mut scrape.probes {
            p.estimate = None;
        }
        scrape.attached_uprobes = 0;
        scrape.findings.clear();
        scrape.up = false;
        scrape
    }

    /// The findings to export until the next window's replace them.
    pub fn set_findings(&mut self, findings: &[crate::model::finding::Finding]) {
        self.findings = findings
            .iter()
            .map(|f| (f.rule.clone(), f.severity.to_string()))
            .collect();
    }

    /// Exports these in-memory counters (index, name, value at start).
    pub fn with_counters(mut self, counters: Vec<(usize, String, u64)>) -> Self {
        self.counters = counters
            .into_iter()
            .map(|(i, name, start)| (i, name, start, 0))
            .collect();
        self
    }

    /// Updates the counters' increases from values read now; a failed read
    /// or a value below the last keeps the last (a counter never goes back).
    fn update_counters(&mut self, values: &[Result<u64, String>]) {
        for (i, _, start, last) in &mut self.counters {
            if let Some(Ok(v)) = values.get(*i) {
                *last = (*last).max(v.saturating_sub(*start));
            }
        }
    }

    pub fn for_recorder(recorder: &Recorder, opts: ExporterOptions) -> Self {
        let plan = recorder.plan();
        let target = TargetLabels {
            // As summary.json spells it: "mariadb", "mysql", ...
            family: serde_json::to_value(plan.server.family)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            version: plan
                .server
                .version
                .map(|v| v.to_string())
                .unwrap_or_default(),
            pid: plan.target.pid,
            binary: plan.target.exe.display().to_string(),
            cgroup: plan.target.placement.cgroup.clone().unwrap_or_default(),
            container: plan
                .target
                .placement
                .container_id
                .clone()
                .unwrap_or_default(),
        };
        let mem = recorder.memory_counters();
        let counters = mem
            .counters()
            .iter()
            .zip(mem.start_readings())
            .enumerate()
            .filter_map(|(i, (c, start))| Some((i, c.spec.name.clone(), *start.as_ref().ok()?)))
            .collect();
        Self::new(
            recorder.live_probes(),
            target,
            recorder.attached_links(),
            opts,
        )
        .with_counters(counters)
    }

    /// Reads the counters now and encodes them.
    pub fn scrape(&mut self, recorder: &mut Recorder) -> Result<String, ExportError> {
        render(vec![self.read(recorder)?], &self.commit)
    }

    /// Reads the counters now, for [`render`] (drains the statement maps
    /// into the book first, when statements are read).
    pub fn read(&mut self, recorder: &mut Recorder) -> Result<Scrape, ExportError> {
        let statements = match recorder.statement_totals() {
            Some(totals) => {
                let probe_of = self
                    .probes
                    .iter()
                    .flat_map(|p| p.slots.iter().map(|s| (*s, p.name.clone())))
                    .collect();
                statements_now(&totals, &probe_of)
            }
            None => BTreeMap::new(),
        };
        let counters = recorder.read_counters()?;
        if !self.counters.is_empty() {
            self.update_counters(&recorder.memory_counters().current());
        }
        let labelled = self.labelled(recorder, &counters);
        self.estimates = recorder
            .live_estimates()
            .into_iter()
            .map(|e| e.map(|e| (e.calls, e.calls_bound)))
            .collect();
        self.probe_cost_s += self.pricer.read(recorder, &counters).values().sum::<f64>() / 1e9;
        let own = recorder.attach_info();
        let me = SelfStats {
            probe_cost_s: self.probe_cost_s,
            budget_cores: recorder.plan().governor.map(|g| g.budget_pct / 100.0),
            attach_s: own.map_or(0.0, |a| a.attach_ms / 1e3),
            governor_switches: own.map_or(0, |a| a.governor_switches),
            in_target_factor: recorder
                .in_target()
                .ok()
                .map(|f| (f.factor, f.factor_low, f.factor_high)),
        };
        Ok(self.scrape_of(
            &counters,
            &labelled,
            &statements,
            &recorder.attached_seconds(),
            me,
        ))
    }

    /// Per probe, its calls and wait summed per call-site label and per
    /// latch name, cumulative.
    fn labelled(&mut self, recorder: &Recorder, counters: &Counters) -> Vec<ProbeLabels> {
        let plan = recorder.plan();
        let mut namer = CallsiteNamer::new(recorder.target().pid, &plan.image);
        let mut out = Vec::with_capacity(self.probes.len());
        for (i, p) in self.probes.iter().enumerate() {
            let mut labels = ProbeLabels::default();
            if p.has_callsites {
                labels.sites = self
                    .labels
                    .by_label(counters.probe_sites(&p.slots), &mut namer)
                    .iter()
                    .map(|(label, v)| (label.clone(), site_counts(v)))
                    .collect();
            }
            if let Some(planned) = plan.probes.get(p.probe) {
                let names = LatchNames::new(planned);
                for (site, v) in counters.probe_sites(&p.slots) {
                    let name = self
                        .latch_names
                        .entry((i, site))
                        .or_insert_with(|| names.of(&site, &mut namer));
                    if let Some(name) = name {
                        labels
                            .latches
                            .entry(name.clone())
                            .or_default()
                            .add(site_counts(&v));
                    }
                }
            }
            out.push(labels);
        }
        out
    }

    /// The scrape of counters whose call sites and latches are already
    /// summed per label; `attached`: seconds switched on, per planned probe.
    fn scrape_of(
        &mut self,
        counters: &Counters,
        labelled: &[ProbeLabels],
        statements: &BTreeMap<String, StatementNow>,
        attached: &[f64],
        me: SelfStats,
    ) -> Scrape {
        let mut per_statement = self.statements.series(statements, STATEMENT_LIMIT);
        let mut probes = Vec::with_capacity(self.probes.len());
        for ((((p, sites), latches), now), max_on) in self
            .probes
            .iter()
            .zip(&mut self.callsites)
            .zip(&mut self.latches)
            .zip(labelled)
            .zip(&mut self.attached)
        {
            let total = counters.probe_total(&p.slots);
            *max_on = max_on.max(attached.get(p.probe).copied().unwrap_or(0.0));
            probes.push(ProbeMetrics {
                estimate: self.estimates.get(p.probe).copied().flatten(),
                attached_s: *max_on,
                name: p.name.clone(),
                timed: p.measure == Measure::Latency,
                calls: total.calls,
                wait_ns: total.wait_ns_total,
                hist: total.hist,
                callsites: if p.has_callsites {
                    sites.series(&now.sites, self.limit, Rank::Calls)
                } else {
                    Vec::new()
                },
                // Only probes that name latches have any.
                latches: if now.latches.is_empty() && latches.own.is_empty() {
                    Vec::new()
                } else {
                    latches.series(&now.latches, self.limit, Rank::Wait)
                },
                roles: counters
                    .probe_roles(&p.slots)
                    .into_iter()
                    .map(|(role, v)| {
                        let c = Counts::of(v.calls, v.wait_ns);
                        (crate::plan::thread_role::role(role).0.to_string(), c)
                    })
                    .collect(),
                statements: per_statement.remove(&p.name).unwrap_or_default(),
            });
        }
        let mut scrape = Scrape {
            counters: self
                .counters
                .iter()
                .map(|(_, name, _, n)| (name.clone(), *n))
                .collect(),
            probes,
            drops: counters.drops.clone(),
            target: self.target.clone(),
            attached_uprobes: self.attached_uprobes,
            findings: self.findings.clone(),
            me,
            instance: self.instance.clone(),
            up: true,
            restarts: self.restarts,
            fingerprints: self.statements.chosen.clone(),
        };
        self.carried.add_to(&mut scrape);
        self.last = Some(scrape.clone());
        scrape
    }

    /// The options it was made with (for the exporter of a restarted
    /// server's new run).
    pub fn options(&self) -> ExporterOptions {
        ExporterOptions {
            callsite_limit: self.limit,
            commit: self.commit.clone(),
            instance: self.instance.clone(),
        }
    }
}

impl ProbeMetrics {
    /// Adds an earlier run's totals of the same probe.
    fn add(&mut self, old: &ProbeMetrics) {
        // An estimate stands for the calls; a run without one was exact.
        if self.estimate.is_some() || old.estimate.is_some() {
            let (e, b) = self.estimate.unwrap_or((self.calls as f64, 0.0));
            let (oe, ob) = old.estimate.unwrap_or((old.calls as f64, 0.0));
            self.estimate = Some((e + oe, b + ob));
        }
        self.calls += old.calls;
        self.wait_ns += old.wait_ns;
        self.attached_s += old.attached_s;
        for (h, o) in self.hist.iter_mut().zip(&old.hist) {
            *h += o;
        }
        add_labelled(&mut self.callsites, &old.callsites);
        add_labelled(&mut self.latches, &old.latches);
        add_labelled(&mut self.roles, &old.roles);
        add_labelled(&mut self.statements, &old.statements);
    }
}

/// Adds an earlier run's series to this run's, label by label.
fn add_labelled(now: &mut Vec<(String, Counts)>, old: &[(String, Counts)]) {
    for (label, c) in old {
        match now.iter_mut().find(|(l, _)| l == label) {
            Some((_, n)) => n.add(*c),
            None => now.push((label.clone(), *c)),
        }
    }
}

/// One probe's cumulative counts per call-site label and per latch name,
/// before the label caps.
#[derive(Debug, Clone, Default)]
struct ProbeLabels {
    sites: BTreeMap<String, Counts>,
    latches: BTreeMap<String, Counts>,
}

#[derive(Debug, Clone)]
struct ProbeMetrics {
    name: String,
    estimate: Option<(f64, f64)>,
    attached_s: f64,
    timed: bool,
    calls: u64,
    wait_ns: u64,
    hist: [u64; HIST_SLOTS],
    callsites: Vec<(String, Counts)>,
    latches: Vec<(String, Counts)>,
    /// Per thread role (a bounded set: [`crate::plan::thread_role::ROLES`]).
    roles: Vec<(String, Counts)>,
    /// Per statement id (at most [`STATEMENT_LIMIT`] per server) and "other".
    statements: Vec<(String, Counts)>,
}

/// One server's values at one scrape, encoded by [`render`].
#[derive(Debug, Clone)]
pub struct Scrape {
    probes: Vec<ProbeMetrics>,
    /// In-memory counters: name, increase since start.
    counters: Vec<(String, u64)>,
    drops: Drops,
    target: TargetLabels,
    attached_uprobes: usize,
    findings: Vec<(String, String)>,
    me: SelfStats,
    /// The labels of every series of this server (serve --all).
    instance: Vec<(&'static str, String)>,
    /// The server is running and watched (serve waits for it otherwise).
    up: bool,
    restarts: u64,
    /// The `fingerprint` label of each labelled statement id.
    fingerprints: BTreeMap<String, String>,
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Log2 slots as Prometheus buckets: (upper bound in seconds, count).
/// Slot `i` holds `[2^i, 2^(i+1))` ns; Prometheus' `le` is inclusive, so a
/// wait of exactly a power of two is counted one bucket up. The last slot
/// also holds everything longer: it is `+Inf`.
fn buckets(hist: &[u64; HIST_SLOTS]) -> Vec<(f64, u64)> {
    let mut out = vec![(seconds(1 << FIRST_SLOT), hist[..FIRST_SLOT].iter().sum())];
    for (i, &count) in hist
        .iter()
        .enumerate()
        .take(HIST_SLOTS - 1)
        .skip(FIRST_SLOT)
    {
        out.push((seconds(1 << (i + 1)), count));
    }
    out.push((f64::INFINITY, hist[HIST_SLOTS - 1]));
    out
}

/// Every watched server's scrape and innoprof's own process, as one
/// exposition: each family once, a sample per server (labelled `server`
/// when serve watches several).
#[derive(Debug)]
struct Exposition {
    scrapes: Vec<Scrape>,
    commit: String,
    /// The whole process's CPU (user + system) since it started.
    cpu_s: f64,
    rss_bytes: u64,
}

/// The OpenMetrics text of these scrapes (one per watched server; none
/// while serve --all finds no server) and innoprof's own numbers.
pub fn render(scrapes: Vec<Scrape>, commit: &str) -> Result<String, ExportError> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition {
        scrapes,
        commit: commit.to_string(),
        cpu_s: crate::target::own_usage::own_cpu_time().as_secs_f64(),
        rss_bytes: resident_bytes(),
    }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

impl Scrape {
    /// `labels`, after this server's own where it has one.
    fn labels<'a>(&'a self, labels: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        self.instance
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(labels.iter().copied())
            .collect()
    }
}

/// One sample per scrape of a family with no labels of its own: bare for
/// a lone scrape without a server label, else labelled by server.
fn per_server(
    mut m: MetricEncoder,
    scrapes: &[Scrape],
    mut f: impl FnMut(&Scrape, MetricEncoder) -> Result<(), std::fmt::Error>,
) -> Result<(), std::fmt::Error> {
    if let [only] = scrapes {
        if only.instance.is_empty() {
            return f(only, m);
        }
    }
    for sc in scrapes {
        f(sc, m.encode_family(&sc.labels(&[]))?)?;
    }
    Ok(())
}

/// The metric an in-memory counter is exported as: one family per
/// quantity, in its unit, so `rate()` of one never mixes bytes with ids.
#[derive(Debug, Clone)]
struct CounterMetric {
    /// Without the unit and `_total` suffixes the encoder adds.
    name: String,
    unit: Option<Unit>,
    help: String,
}

/// The catalog's in-memory counters and their metrics: (catalog name,
/// metric name, in bytes, help).
const INNODB_COUNTERS: &[(&str, &str, bool, &str)] = &[
    (
        "innodb.redo.lsn",
        "innoprof_innodb_redo",
        true,
        "Redo log InnoDB generated (its LSN's advance), read from the server's memory: \
         increase since innoprof started, exact, no probe",
    ),
    (
        "innodb.trx_sys.trx_ids",
        "innoprof_innodb_trx_ids",
        false,
        "Transaction ids and commit numbers InnoDB handed out (a read-write transaction takes \
         one at its first write and one at commit), read from the server's memory: increase \
         since innoprof started, exact, no probe",
    ),
    (
        "innodb.dict_sys.row_ids",
        "innoprof_innodb_row_ids",
        false,
        "Row ids (DB_ROW_ID) InnoDB handed out, for rows inserted into tables without a \
         usable primary key, read from the server's memory: increase since innoprof started",
    ),
    (
        "innodb.rows_read",
        "innoprof_innodb_rows_read",
        false,
        "Rows InnoDB returned to the server (Innodb_rows_read), read from the server's \
         memory: increase since innoprof started, exact, no probe",
    ),
];

impl CounterMetric {
    /// The metric for catalog counter `counter`; one the table does not
    /// know (a user's catalog) gets a name of its own, without a unit.
    fn of(counter: &str) -> Self {
        if let Some((_, name, bytes, help)) = INNODB_COUNTERS.iter().find(|c| c.0 == counter) {
            return Self {
                name: name.to_string(),
                unit: bytes.then_some(Unit::Bytes),
                help: help.to_string(),
            };
        }
        let tail: String = counter
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        Self {
            name: format!("innoprof_counter_{tail}"),
            unit: None,
            help: format!(
                "The probe catalog's in-memory counter {counter}: increase since innoprof \
                 started, read from the server's memory"
            ),
        }
    }
}

/// The findings' severities, each exported even when none holds.
const SEVERITIES: [&str; 3] = ["info", "warning", "critical"];

/// The `probe` label, after the server's.
fn probe_labels<'a>(sc: &'a Scrape, p: &'a ProbeMetrics) -> Vec<(&'a str, &'a str)> {
    sc.labels(&[("probe", p.name.as_str())])
}

/// The `probe`, `statement` and `fingerprint` labels, after the server's
/// ("other" has an empty fingerprint).
fn statement_labels<'a>(
    sc: &'a Scrape,
    p: &'a ProbeMetrics,
    id: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let fingerprint = sc.fingerprints.get(id).map_or("", String::as_str);
    sc.labels(&[
        ("probe", p.name.as_str()),
        ("statement", id),
        ("fingerprint", fingerprint),
    ])
}

type EncodeResult = Result<(), std::fmt::Error>;

impl Exposition {
    /// Every server's probes, with their server.
    fn probes(&self) -> impl Iterator<Item = (&Scrape, &ProbeMetrics)> {
        self.scrapes
            .iter()
            .flat_map(|sc| sc.probes.iter().map(move |p| (sc, p)))
    }

    fn encode_findings(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut m = enc.encode_descriptor(
            "innoprof_finding",
            "1 for each finding of the last evaluated window (serve --findings-window), by \
             rule and severity; absent when no rule fired",
            None,
            MetricType::Gauge,
        )?;
        for sc in &self.scrapes {
            for (rule, severity) in &sc.findings {
                ConstGauge::new(1i64).encode(m.encode_family(
                    &sc.labels(&[("rule", rule.as_str()), ("severity", severity.as_str())]),
                )?)?;
            }
        }
        // Always present, 0 when nothing fired: a panel or an alert on the
        // count needs no `absent()` and sees a finding end.
        let mut m = enc.encode_descriptor(
            "innoprof_findings",
            "Findings of the last evaluated window, by severity (0 when none)",
            None,
            MetricType::Gauge,
        )?;
        for sc in &self.scrapes {
            for severity in SEVERITIES {
                let n = sc.findings.iter().filter(|(_, s)| s == severity).count();
                ConstGauge::new(n as i64)
                    .encode(m.encode_family(&sc.labels(&[("severity", severity)]))?)?;
            }
        }
        Ok(())
    }

    /// Calls, estimates, time switched on and wait, per probe.
    fn encode_probe_counts(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut m = enc.encode_descriptor(
            "innoprof_probe_calls",
            "Calls of the probed functions, per probe, seen while the probe was switched on \
             (divide its rate by innoprof_probe_attached_seconds_total's for the rate while \
             watched)",
            None,
            MetricType::Counter,
        )?;
        for (sc, p) in self.probes() {
            ConstCounter::new(p.calls).encode(m.encode_family(&probe_labels(sc, p))?)?;
        }
        if self.probes().any(|(_, p)| p.estimate.is_some()) {
            self.encode_estimates(enc)?;
        }
        let mut m = enc.encode_descriptor(
            "innoprof_probe_attached",
            "Time each probe was switched on (the overhead governor detaches a probe it \
             cannot afford part of the time; its counters grow only while on)",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for (sc, p) in self.probes() {
            ConstCounter::new(p.attached_s).encode(m.encode_family(&probe_labels(sc, p))?)?;
        }
        let mut m = enc.encode_descriptor(
            "innoprof_probe_wait",
            "Time spent inside the probed functions (entry to return), per probe",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for (sc, p) in self.probes().filter(|(_, p)| p.timed) {
            ConstCounter::new(seconds(p.wait_ns)).encode(m.encode_family(&probe_labels(sc, p))?)?;
        }
        Ok(())
    }

    fn encode_estimates(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        for (name, help, pick) in [
            (
                "innoprof_probe_calls_estimate",
                "Calls of a probe the governor detached part of the time: seen + \
                 interpolated between its on-windows (never past the last one)",
                0,
            ),
            (
                "innoprof_probe_calls_estimate_bound",
                "95 % half-width of innoprof_probe_calls_estimate (the call rate in a gap \
                 within the spread of the windows' rates, plus Poisson noise)",
                1,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (sc, p) in self.probes() {
                if let Some(e) = p.estimate {
                    let v = if pick == 0 { e.0 } else { e.1 };
                    ConstGauge::new(v).encode(m.encode_family(&probe_labels(sc, p))?)?;
                }
            }
        }
        Ok(())
    }

    /// A pair of capped-label families (calls, and wait for timed probes):
    /// call sites or latches.
    fn encode_labelled(
        &self,
        enc: &mut DescriptorEncoder,
        what: &str,
        key: &str,
        helps: [&str; 2],
        series: impl Fn(&ProbeMetrics) -> &[(String, Counts)],
    ) -> EncodeResult {
        self.encode_series(enc, what, helps, series, |sc, p, label| {
            sc.labels(&[("probe", p.name.as_str()), (key, label)])
        })
    }

    /// [`Self::encode_labelled`] with each series' labels from `labels_of`
    /// (the statement series carry a second label, the fingerprint).
    fn encode_series<'s>(
        &'s self,
        enc: &mut DescriptorEncoder,
        what: &str,
        helps: [&str; 2],
        series: impl Fn(&'s ProbeMetrics) -> &'s [(String, Counts)],
        labels_of: impl Fn(&'s Scrape, &'s ProbeMetrics, &'s str) -> Vec<(&'s str, &'s str)>,
    ) -> EncodeResult {
        let (calls, wait) = (
            format!("innoprof_{what}_calls"),
            format!("innoprof_{what}_wait"),
        );
        let mut m = enc.encode_descriptor(&calls, helps[0], None, MetricType::Counter)?;
        for (sc, p) in self.probes() {
            for (label, c) in series(p) {
                let labels = labels_of(sc, p, label.as_str());
                ConstCounter::new(c.calls).encode(m.encode_family(&labels)?)?;
            }
        }
        let mut m =
            enc.encode_descriptor(&wait, helps[1], Some(&Unit::Seconds), MetricType::Counter)?;
        for (sc, p) in self.probes().filter(|(_, p)| p.timed) {
            for (label, c) in series(p) {
                let labels = labels_of(sc, p, label.as_str());
                ConstCounter::new(seconds(c.wait_ns)).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    /// Calls and wait per call site: where the calls come from.
    fn encode_callsites(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        self.encode_labelled(
            enc,
            "callsite",
            "callsite",
            [
                "Calls per caller file:line (busiest sites; the rest is callsite=\"other\")",
                "Time spent inside the probed functions per caller file:line",
            ],
            |p| &p.callsites,
        )
    }

    /// Calls and wait per latch, for probes that name the latch waited on:
    /// where threads queue.
    fn encode_latches(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        self.encode_labelled(
            enc,
            "latch",
            "latch",
            [
                "Calls per InnoDB latch (its id or creation site), for probes that name the \
                 latch; the latches waited on most have a label, the rest is latch=\"other\"",
                "Time spent waiting per InnoDB latch (thread-seconds per second under rate())",
            ],
            |p| &p.latches,
        )
    }

    /// Calls and wait per thread role: the server's background work apart
    /// from the workload's contention.
    fn encode_roles(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        self.encode_labelled(
            enc,
            "role",
            "role",
            [
                "Calls per thread role (connection, purge worker, page cleaner, ..., unknown): \
                 background roles are the server's own work, not the workload's contention",
                "Time spent inside the probed functions per thread role",
            ],
            |p| &p.roles,
        )
    }

    /// Calls and wait per client statement: what the workload ran that
    /// waited (a bounded set of statements, the rest as "other").
    fn encode_statements(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        self.encode_series(
            enc,
            "statement",
            [
                "Calls per client statement (statement: its id, a hash of the fingerprint; \
                 fingerprint: literals as ?, cut to 120 characters); the statements waited on most \
                 since serve started have a label, the rest is statement=\"other\"",
                "Time spent inside the probed functions per client statement",
            ],
            |p| &p.statements,
            statement_labels,
        )
    }

    fn encode_latency(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut m = enc.encode_descriptor(
            "innoprof_probe_latency",
            "Latency of the probed functions (log2 buckets kept in BPF: le = 2^k ns)",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (sc, p) in self.probes().filter(|(_, p)| p.timed) {
            let b = buckets(&p.hist);
            // The buckets' own total: calls and buckets are bumped one
            // after the other, and a live read can fall between.
            let count = b.iter().map(|(_, c)| c).sum();
            m.encode_family(&probe_labels(sc, p))?
                .encode_histogram::<NoLabelSet>(seconds(p.wait_ns), count, &b, None)?;
        }
        Ok(())
    }

    /// One family per in-memory counter, in the order first seen.
    fn encode_innodb_counters(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in self.scrapes.iter().flat_map(|sc| &sc.counters) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        for name in names {
            let metric = CounterMetric::of(name);
            let m = enc.encode_descriptor(
                &metric.name,
                &metric.help,
                metric.unit.as_ref(),
                MetricType::Counter,
            )?;
            per_server(m, &self.scrapes, |sc, m| {
                match sc.counters.iter().find(|(c, _)| c == name) {
                    Some((_, n)) => ConstCounter::new(*n).encode(m),
                    None => Ok(()),
                }
            })?;
        }
        Ok(())
    }

    fn encode_drops(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut m = enc.encode_descriptor(
            "innoprof_dropped",
            "Events the BPF side could not record, by reason",
            None,
            MetricType::Counter,
        )?;
        for sc in &self.scrapes {
            let d = &sc.drops;
            for (reason, n) in [
                ("stack_map_full", d.stack_map_full),
                ("stack_busy", d.stack_busy),
                ("stack_error", d.stack_errors),
                ("stack_key_map_full", d.stack_key_map_full),
                ("inflight_map_full", d.inflight_map_full),
                ("return_without_entry", d.returns_without_entry),
                ("stats_map_full", d.stats_map_full),
                ("callsite_map_full", d.callsite_map_full),
                ("thread_map_full", d.thread_map_full),
            ] {
                ConstCounter::new(n).encode(m.encode_family(&sc.labels(&[("reason", reason)]))?)?;
            }
        }
        Ok(())
    }

    /// innoprof's own process: build, CPU and memory under the standard
    /// `process_*` names every Prometheus dashboard already knows.
    fn encode_process(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let info = Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", self.commit.clone()),
        ]);
        let m = enc.encode_descriptor(
            "innoprof_build",
            "innoprof's version and commit",
            None,
            info.metric_type(),
        )?;
        info.encode(m)?;
        let m = enc.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds (innoprof's own process)",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        ConstCounter::new(self.cpu_s).encode(m)?;
        let m = enc.encode_descriptor(
            "process_resident_memory",
            "Resident memory size in bytes (innoprof's own process)",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.rss_bytes as i64).encode(m)
    }

    /// What the probes cost each server and the governor's state.
    fn encode_cost(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let all = &self.scrapes;
        let m = enc.encode_descriptor(
            "innoprof_probe_cost",
            "Server CPU time the probe hits cost, as innoprof estimates it (its calls at the \
             governor's per-call cost); rate() is the share of one core",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        per_server(m, all, |sc, m| {
            ConstCounter::new(sc.me.probe_cost_s).encode(m)
        })?;
        if all.iter().any(|sc| sc.me.in_target_factor.is_some()) {
            self.encode_measured_factor(enc)?;
        }
        if all.iter().any(|sc| sc.me.budget_cores.is_some()) {
            let m = enc.encode_descriptor(
                "innoprof_budget_cores",
                "The governor's budget for probe hits (--max-overhead), in cores; absent when off",
                None,
                MetricType::Gauge,
            )?;
            per_server(m, all, |sc, m| match sc.me.budget_cores {
                Some(budget) => ConstGauge::new(budget).encode(m),
                None => Ok(()),
            })?;
        }
        let m = enc.encode_descriptor(
            "innoprof_attach",
            "Time the start's attach of every probe took",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        per_server(m, all, |sc, m| ConstGauge::new(sc.me.attach_s).encode(m))?;
        let m = enc.encode_descriptor(
            "innoprof_governor_switches",
            "Links the overhead governor created or destroyed to switch probes",
            None,
            MetricType::Counter,
        )?;
        per_server(m, all, |sc, m| {
            ConstCounter::new(sc.me.governor_switches).encode(m)
        })
    }

    fn encode_measured_factor(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let mut m = enc.encode_descriptor(
            "innoprof_probe_cost_measured_factor",
            "Server CPU per second of innoprof_probe_cost, measured in the server (its CPU per \
             InnoDB row read at the governor's looks, against the probes' modelled cost \
             between them); bound=estimate, low or high (95 %); absent until measured",
            None,
            MetricType::Gauge,
        )?;
        for sc in &self.scrapes {
            let Some((estimate, low, high)) = sc.me.in_target_factor else {
                continue;
            };
            for (bound, v) in [("estimate", estimate), ("low", low), ("high", high)] {
                ConstGauge::new(v).encode(m.encode_family(&sc.labels(&[("bound", bound)]))?)?;
            }
        }
        Ok(())
    }

    /// The watched server itself: up, restarts, what it is.
    fn encode_target(&self, enc: &mut DescriptorEncoder) -> EncodeResult {
        let all = &self.scrapes;
        let m = enc.encode_descriptor(
            "innoprof_attached_uprobes",
            "Uprobes attached to the target",
            None,
            MetricType::Gauge,
        )?;
        per_server(m, all, |sc, m| {
            ConstGauge::new(sc.attached_uprobes as i64).encode(m)
        })?;
        let m = enc.encode_descriptor(
            "innoprof_target_up",
            "1 while the server runs and is watched; 0 while serve waits for it to start \
             again (its counters then keep their last values)",
            None,
            MetricType::Gauge,
        )?;
        per_server(m, all, |sc, m| ConstGauge::new(i64::from(sc.up)).encode(m))?;
        let m = enc.encode_descriptor(
            "innoprof_target_restarts",
            "Times the server restarted (a new process for the same datadir) while serve \
             watched it",
            None,
            MetricType::Counter,
        )?;
        per_server(m, all, |sc, m| ConstCounter::new(sc.restarts).encode(m))?;
        let m = enc.encode_descriptor(
            "innoprof_target",
            "The profiled server",
            None,
            MetricType::Info,
        )?;
        per_server(m, all, |sc, m| {
            let t = &sc.target;
            let mut info = vec![
                ("family", t.family.clone()),
                ("version", t.version.clone()),
                ("pid", t.pid.to_string()),
                ("binary", t.binary.clone()),
            ];
            // Where a lone server runs (serve --all has it in every
            // series' own labels, from when the instance was first seen).
            for (name, value) in [("cgroup", &t.cgroup), ("container", &t.container)] {
                if !value.is_empty() && sc.instance.is_empty() {
                    info.push((name, value.clone()));
                }
            }
            Info::new(info).encode(m)
        })
    }
}

impl Collector for Exposition {
    /// One step per group of families; the order of the steps is the
    /// order of the families in the text.
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_findings(&mut enc)?;
        self.encode_probe_counts(&mut enc)?;
        self.encode_callsites(&mut enc)?;
        self.encode_latches(&mut enc)?;
        self.encode_roles(&mut enc)?;
        self.encode_statements(&mut enc)?;
        self.encode_latency(&mut enc)?;
        self.encode_innodb_counters(&mut enc)?;
        self.encode_drops(&mut enc)?;
        self.encode_process(&mut enc)?;
        self.encode_cost(&mut enc)?;
        self.encode_target(&mut enc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::SlotStats;

    fn counts(calls: u64, wait_ns: u64) -> Counts {
        Counts::of(calls, wait_ns)
    }

    fn sites(v: &[(&str, u64)]) -> BTreeMap<String, Counts> {
        v.iter()
            .map(|(k, c)| (k.to_string(), counts(*c, *c * 10)))
            .collect()
    }

    #[test]
    fn callsite_labels_are_capped_and_stay_monotonic() {
        let mut l = CallsiteLabels::default();
        // Limit 2: a and b are busiest, c goes to other.
        let s1 = l.series(&sites(&[("a", 10), ("b", 5), ("c", 1)]), 2, Rank::Calls);
        assert_eq!(
            s1,
            [
                ("a".into(), counts(10, 100)),
                ("b".into(), counts(5, 50)),
                (OTHER.into(), counts(1, 10))
            ]
        );
        // c becomes the busiest: it keeps "other" as its label (no room),
        // and new site d joins it there.
        let s2 = l.series(
            &sites(&[("a", 11), ("b", 6), ("c", 100), ("d", 3)]),
            2,
            Rank::Calls,
        );
        assert_eq!(s2.len(), 3, "never more than limit + 1 labels");
        assert_eq!(s2[2], (OTHER.into(), counts(103, 1030)));

        // With room, a site promoted later starts from what "other" had not
        // yet counted for it, and "other" keeps the rest: no counter drops.
        let mut l = CallsiteLabels::default();
        let _ = l.series(&sites(&[("a", 10)]), 1, Rank::Calls);
        let s1 = l.series(&sites(&[("a", 10), ("b", 4)]), 1, Rank::Calls);
        assert_eq!(s1[1], (OTHER.into(), counts(4, 40)));
        let s2 = l.series(&sites(&[("a", 10), ("b", 9)]), 2, Rank::Calls);
        assert_eq!(s2[1], ("b".into(), counts(5, 50)));
        assert_eq!(s2[2], (OTHER.into(), counts(4, 40)));
    }

    #[test]
    fn latches_are_labelled_by_wait() {
        let mut l = CallsiteLabels::default();
        let now: BTreeMap<String, Counts> = [
            ("busy_but_free".to_string(), counts(1000, 10)),
            ("contended".to_string(), counts(10, 1_000_000)),
            ("idle".to_string(), counts(1, 1)),
        ]
        .into();
        let s = l.series(&now, 1, Rank::Wait);
        assert_eq!(
            s,
            [
                ("contended".into(), counts(10, 1_000_000)),
                (OTHER.into(), counts(1001, 11))
            ]
        );
    }

    /// A statement's calls and wait on one probe: (probe, calls, wait ns).
    type ProbeRow<'a> = (&'a str, u64, u64);
    /// A statement's rows: (fingerprint, per probe).
    type BookRow<'a> = (&'a str, &'a [ProbeRow<'a>]);

    /// Statements now: (fingerprint, per probe (calls, wait ns)).
    fn book(v: &[BookRow]) -> BTreeMap<String, StatementNow> {
        v.iter()
            .map(|(fp, probes)| {
                let st = StatementNow {
                    fingerprint: fp.to_string(),
                    probes: probes
                        .iter()
                        .map(|(p, calls, wait)| (p.to_string(), counts(*calls, *wait)))
                        .collect(),
                };
                (statement_id(fp), st)
            })
            .collect()
    }

    fn fp(i: usize) -> String {
        format!("SELECT c FROM t{i} WHERE id = ?")
    }

    #[test]
    fn statements_are_capped_with_the_rest_as_other() {
        // 25 statements on one probe, statement i waited i ms; 3 of them
        // also on a second probe.
        let fps: Vec<String> = (1..=25).map(fp).collect();
        let rows: Vec<(String, Vec<ProbeRow>)> = fps
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let i = i as u64 + 1;
                let mut probes = vec![("p", i, i * 1_000_000)];
                if i <= 3 {
                    probes.push(("q", 1, 10));
                }
                (f.clone(), probes)
            })
            .collect();
        let v: Vec<BookRow> = rows
            .iter()
            .map(|(f, p)| (f.as_str(), p.as_slice()))
            .collect();
        let mut l = StatementLabels::default();
        let s = l.series(&book(&v), STATEMENT_LIMIT);
        let p = &s["p"];
        assert_eq!(p.len(), STATEMENT_LIMIT + 1, "{p:?}");
        assert_eq!(l.chosen.len(), STATEMENT_LIMIT);
        // The 20 most waited on (6..=25) have a label, 1..=5 are "other".
        for i in 6..=25 {
            let id = statement_id(&fp(i));
            assert_eq!(l.chosen.get(&id), Some(&fp(i)), "{i}");
            let c = p.iter().find(|(l, _)| *l == id).unwrap().1;
            assert_eq!(c, counts(i as u64, i as u64 * 1_000_000));
        }
        assert_eq!(
            p.last().unwrap(),
            &(OTHER.to_string(), counts(15, 15_000_000))
        );
        // Probe q saw only unlabelled statements: "other" alone.
        assert_eq!(s["q"], [(OTHER.to_string(), counts(3, 30))]);
        // The fingerprint label is cut to 120 characters.
        let long = "x".repeat(300);
        assert_eq!(fingerprint_label(&long).chars().count(), FINGERPRINT_CHARS);
        assert_eq!(fingerprint_label("SELECT ?"), "SELECT ?");
    }

    #[test]
    fn statement_series_stay_monotonic_when_a_new_statement_overtakes() {
        let fps: Vec<String> = (1..=STATEMENT_LIMIT).map(fp).collect();
        let first: Vec<(&str, Vec<ProbeRow>)> = fps
            .iter()
            .map(|f| (f.as_str(), vec![("p", 10, 10_000)]))
            .collect();
        let v: Vec<BookRow> = first.iter().map(|(f, p)| (*f, p.as_slice())).collect();
        let mut l = StatementLabels::default();
        let s1 = l.series(&book(&v), STATEMENT_LIMIT);
        // A new statement waits more than all the others together, which
        // grow a little: no room for it, the old keep their series.
        let late = "UPDATE t SET k = k + ? WHERE id = ?";
        let mut second: Vec<(&str, Vec<ProbeRow>)> = fps
            .iter()
            .map(|f| (f.as_str(), vec![("p", 11, 11_000)]))
            .collect();
        second.push((late, vec![("p", 5, 1_000_000_000)]));
        let v: Vec<BookRow> = second.iter().map(|(f, p)| (*f, p.as_slice())).collect();
        let s2 = l.series(&book(&v), STATEMENT_LIMIT);
        let labels = |s: &BTreeMap<String, Vec<(String, Counts)>>| -> BTreeMap<String, Counts> {
            s["p"].iter().cloned().collect()
        };
        let (a, b) = (labels(&s1), labels(&s2));
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "no series vanished or appeared"
        );
        for (label, before) in &a {
            let after = b[label];
            assert!(
                after.calls >= before.calls && after.wait_ns >= before.wait_ns,
                "{label}: {before:?} -> {after:?}"
            );
        }
        assert!(!l.chosen.contains_key(&statement_id(late)));
        assert_eq!(b[OTHER], counts(5, 1_000_000_000));
        assert_eq!(b[&statement_id(&fps[0])], counts(11, 11_000));
    }

    /// An exporter of one timed probe, `innodb.mutex.enter`.
    fn statement_exporter() -> Exporter {
        let probes = vec![LiveProbe {
            probe: 0,
            name: "innodb.mutex.enter".into(),
            measure: Measure::Latency,
            has_callsites: false,
            slots: vec![crate::bpf::abi::SlotId::of_index(0)],
        }];
        let target = TargetLabels {
            family: "mariadb".into(),
            version: "10.2.11".into(),
            pid: 42,
            binary: "/usr/sbin/mysqld".into(),
            cgroup: String::new(),
            container: String::new(),
        };
        Exporter::new(probes, target, 1, ExporterOptions::default())
    }

    #[test]
    fn statement_labels_are_escaped_and_follow_the_server() {
        let odd = "SELECT \"a\\b\"\nFROM t";
        let mut e = statement_exporter();
        let now = book(&[
            (odd, &[("innodb.mutex.enter", 3, 2_000_000_000)]),
            ("SELECT ?", &[("innodb.mutex.enter", 1, 500_000_000)]),
        ]);
        let scrape = e.scrape_of(
            &Counters::default(),
            &[ProbeLabels::default()],
            &now,
            &[1.0],
            SelfStats::default(),
        );
        let text = render(vec![scrape.clone()], "").unwrap();
        let id = statement_id(odd);
        let plain = statement_id("SELECT ?");
        for line in [
            "# TYPE innoprof_statement_calls counter".to_string(),
            "# TYPE innoprof_statement_wait_seconds counter".to_string(),
            format!(
                "innoprof_statement_calls_total{{probe=\"innodb.mutex.enter\",statement=\"{id}\",\
                 fingerprint=\"SELECT \\\"a\\\\b\\\"\\nFROM t\"}} 3"
            ),
            format!(
                "innoprof_statement_wait_seconds_total{{probe=\"innodb.mutex.enter\",\
                 statement=\"{plain}\",fingerprint=\"SELECT ?\"}} 0.5"
            ),
            "innoprof_statement_calls_total{probe=\"innodb.mutex.enter\",statement=\"other\",\
             fingerprint=\"\"} 0"
                .to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        // serve --all: the server's labels first.
        let mut labelled = scrape;
        labelled.instance = vec![("server", "/srv/a".into())];
        let text = render(vec![labelled], "").unwrap();
        let line = format!(
            "innoprof_statement_calls_total{{server=\"/srv/a\",probe=\"innodb.mutex.enter\",\
             statement=\"{plain}\",fingerprint=\"SELECT ?\"}} 1"
        );
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }

    #[test]
    fn statement_series_carry_on_across_a_restart() {
        let mut old = statement_exporter();
        let now = book(&[("SELECT ?", &[("innodb.mutex.enter", 10, 1_000)])]);
        let _ = old.scrape_of(
            &Counters::default(),
            &[ProbeLabels::default()],
            &now,
            &[1.0],
            SelfStats::default(),
        );
        let mut new = statement_exporter();
        new.carry_on_from(&old);
        // The new run's book starts from nothing.
        let now = book(&[("SELECT ?", &[("innodb.mutex.enter", 2, 500)])]);
        let scrape = new.scrape_of(
            &Counters::default(),
            &[ProbeLabels::default()],
            &now,
            &[1.0],
            SelfStats::default(),
        );
        let p = &scrape.probes[0];
        let id = statement_id("SELECT ?");
        assert_eq!(
            p.statements.iter().find(|(l, _)| *l == id).unwrap().1,
            counts(12, 1_500)
        );
        assert_eq!(scrape.fingerprints.get(&id).unwrap(), "SELECT ?");
        assert_eq!(
            p.statements.iter().filter(|(l, _)| l == OTHER).count(),
            1,
            "{:?}",
            p.statements
        );
    }

    #[test]
    fn each_counter_is_its_own_metric_in_its_unit() {
        let redo = CounterMetric::of("innodb.redo.lsn");
        assert_eq!(redo.name, "innoprof_innodb_redo");
        assert!(matches!(redo.unit, Some(Unit::Bytes)));
        assert!(CounterMetric::of("innodb.trx_sys.trx_ids").unit.is_none());
        assert_eq!(
            CounterMetric::of("innodb.rows_read").name,
            "innoprof_innodb_rows_read"
        );
        // A user's catalog counter: a valid name of its own.
        assert_eq!(
            CounterMetric::of("my.odd-counter").name,
            "innoprof_counter_my_odd_counter"
        );
    }

    #[test]
    fn buckets_cover_every_slot_once() {
        let mut hist = [0u64; HIST_SLOTS];
        for (i, h) in hist.iter_mut().enumerate() {
            *h = i as u64 + 1;
        }
        let b = buckets(&hist);
        assert_eq!(
            b.iter().map(|(_, c)| c).sum::<u64>(),
            hist.iter().sum::<u64>()
        );
        assert_eq!(b[0], (1.024e-6, (1..=10).sum()));
        assert_eq!(b[1], (2.048e-6, 11));
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, 40));
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn scrape_text_has_every_family() {
        let slot = crate::bpf::abi::SlotId::of_index;
        let probes = vec![
            LiveProbe {
                probe: 0,
                name: "innodb.mutex.enter".into(),
                measure: Measure::Latency,
                has_callsites: true,
                slots: vec![slot(0), slot(1)],
            },
            LiveProbe {
                probe: 1,
                name: "innodb.dict_sys.row_id".into(),
                measure: Measure::Count,
                has_callsites: false,
                slots: vec![slot(2)],
            },
        ];
        let target = TargetLabels {
            family: "mariadb".into(),
            version: "10.2.11".into(),
            pid: 42,
            binary: "/usr/sbin/mysqld".into(),
            cgroup: String::new(),
            container: String::new(),
        };
        let mut e = Exporter::new(probes, target, 5, ExporterOptions::default())
            .with_counters(vec![(1, "innodb.redo.lsn".into(), 1000)]);
        e.update_counters(&[Err("unresolved".into()), Ok(5096)]);
        let mut c = Counters::default();
        let mut st = SlotStats {
            calls: 3,
            wait_ns_total: 3_000_000,
            wait_ns_max: 2_000_000,
            ..SlotStats::default()
        };
        st.hist[20] = 3;
        c.slots.insert(slot(0), st);
        c.slots.insert(slot(1), st);
        c.slots.insert(
            slot(2),
            SlotStats {
                calls: 7,
                ..SlotStats::default()
            },
        );
        let site_counts = vec![
            ProbeLabels {
                sites: sites(&[("btr0cur.cc:304", 6)]),
                latches: sites(&[("dict_sys_mutex", 4), ("log_sys_mutex", 2)]),
            },
            ProbeLabels::default(),
        ];
        let scrape = e.scrape_of(
            &c,
            &site_counts,
            &BTreeMap::new(),
            &[2.5, 0.25],
            SelfStats::default(),
        );
        let text = render(vec![scrape.clone()], "").unwrap();
        for line in [
            "innoprof_probe_calls_total{probe=\"innodb.mutex.enter\"} 6",
            "innoprof_probe_calls_total{probe=\"innodb.dict_sys.row_id\"} 7",
            "innoprof_probe_attached_seconds_total{probe=\"innodb.mutex.enter\"} 2.5",
            "innoprof_probe_attached_seconds_total{probe=\"innodb.dict_sys.row_id\"} 0.25",
            "innoprof_probe_wait_seconds_total{probe=\"innodb.mutex.enter\"} 0.006",
            "innoprof_callsite_calls_total{probe=\"innodb.mutex.enter\",callsite=\"btr0cur.cc:304\"} 6",
            "innoprof_callsite_calls_total{probe=\"innodb.mutex.enter\",callsite=\"other\"} 0",
            "innoprof_probe_latency_seconds_bucket{le=\"0.002097152\",probe=\"innodb.mutex.enter\"} 6",
            "innoprof_probe_latency_seconds_bucket{le=\"+Inf\",probe=\"innodb.mutex.enter\"} 6",
            "innoprof_probe_latency_seconds_count{probe=\"innodb.mutex.enter\"} 6",
            "innoprof_dropped_total{reason=\"stack_map_full\"} 0",
            "innoprof_attached_uprobes 5",
            "innoprof_innodb_redo_bytes_total 4096",
            "# UNIT innoprof_innodb_redo_bytes bytes",
            "innoprof_latch_calls_total{probe=\"innodb.mutex.enter\",latch=\"dict_sys_mutex\"} 4",
            "innoprof_latch_wait_seconds_total{probe=\"innodb.mutex.enter\",latch=\"log_sys_mutex\"} 2e-8",
            "innoprof_latch_calls_total{probe=\"innodb.mutex.enter\",latch=\"other\"} 0",
            "innoprof_findings{severity=\"critical\"} 0",
            "# TYPE process_cpu_seconds counter",
            "# TYPE process_resident_memory_bytes gauge",
            "innoprof_target_info{family=\"mariadb\",version=\"10.2.11\",pid=\"42\",binary=\"/usr/sbin/mysqld\"} 1",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
        // Attached time and counters never go back, whatever a later read says.
        e.update_counters(&[Ok(1), Err("gone".into())]);
        let again = render(
            vec![e.scrape_of(
                &c,
                &site_counts,
                &BTreeMap::new(),
                &[1.0, 0.5],
                SelfStats::default(),
            )],
            "",
        )
        .unwrap();
        assert!(again
            .contains("innoprof_probe_attached_seconds_total{probe=\"innodb.mutex.enter\"} 2.5\n"));
        assert!(again.contains("innoprof_innodb_redo_bytes_total 4096\n"));
        // A count-only probe has no wait or latency series.
        assert!(
            !text.contains("innoprof_probe_wait_seconds_total{probe=\"innodb.dict_sys.row_id\"}")
        );
        assert!(!text.contains("latency_seconds_count{probe=\"innodb.dict_sys.row_id\"}"));

        // Two servers (serve --all): each family once, every sample
        // labelled by its server, the process's own numbers once.
        let mut other = scrape.clone();
        let in_containers = scrape.clone();
        let mut labelled = scrape;
        labelled.instance = vec![("server", "/var/lib/mysql".into())];
        other.instance = vec![("server", "/srv/b".into())];
        other.target.pid = 43;
        let two = render(vec![labelled, other], "abc").unwrap();
        for line in [
            "innoprof_probe_calls_total{server=\"/var/lib/mysql\",probe=\"innodb.mutex.enter\"} 6",
            "innoprof_probe_calls_total{server=\"/srv/b\",probe=\"innodb.mutex.enter\"} 6",
            "innoprof_attached_uprobes{server=\"/srv/b\"} 5",
            "innoprof_target_up{server=\"/var/lib/mysql\"} 1",
            "innoprof_target_info{family=\"mariadb\",version=\"10.2.11\",pid=\"43\",binary=\"/usr/sbin/mysqld\",server=\"/srv/b\"} 1",
            "innoprof_build_info{version=\"0.1.0\",commit=\"abc\"} 1",
        ] {
            assert!(two.lines().any(|l| l == line), "no `{line}` in:\n{two}");
        }
        for family in [
            "# TYPE innoprof_probe_calls counter",
            "# TYPE innoprof_target info",
        ] {
            assert_eq!(two.matches(family).count(), 1, "{two}");
        }
        assert_eq!(two.matches("process_cpu_seconds_total ").count(), 1);
        assert!(two
            .lines()
            .any(|l| l == "innoprof_innodb_redo_bytes_total{server=\"/srv/b\"} 4096"));

        // Two containers, each calling its datadir /var/lib/mysql: apart by
        // where they run; the info names this run's cgroup and container.
        let [mut a, mut b] = [in_containers.clone(), in_containers];
        let id = "ab".repeat(32);
        a.instance = vec![("server", "/var/lib/mysql".into()), ("cgroup", "/a".into())];
        b.instance = vec![
            ("server", "/var/lib/mysql".into()),
            ("cgroup", format!("/docker/{id}")),
            ("container", id.clone()),
        ];
        b.target.cgroup = format!("/docker/{id}");
        b.target.container = id.clone();
        let mut b_alone = b.clone();
        b_alone.instance.clear();
        let two = render(vec![a, b], "abc").unwrap();
        for line in [
            "innoprof_target_up{server=\"/var/lib/mysql\",cgroup=\"/a\"} 1".to_string(),
            format!("innoprof_target_up{{server=\"/var/lib/mysql\",cgroup=\"/docker/{id}\",container=\"{id}\"}} 1"),
            format!("innoprof_target_info{{family=\"mariadb\",version=\"10.2.11\",pid=\"42\",binary=\"/usr/sbin/mysqld\",server=\"/var/lib/mysql\",cgroup=\"/docker/{id}\",container=\"{id}\"}} 1"),
        ] {
            assert!(two.lines().any(|l| l == line), "no `{line}` in:\n{two}");
        }
        // A lone server: its info says where it runs.
        let mut lone = render(vec![b_alone], "").unwrap();
        lone.retain(|c| c != '\n');
        assert!(
            lone.contains(&format!(
                "binary=\"/usr/sbin/mysqld\",cgroup=\"/docker/{id}\",container=\"{id}\"}} 1"
            )),
            "{lone}"
        );

        // The factor measured in the server: absent until measured, then
        // one gauge per bound.
        assert!(!text.contains("innoprof_probe_cost_measured_factor"));
        let measured = SelfStats {
            in_target_factor: Some((1.25, 1.0, 1.5)),
            ..SelfStats::default()
        };
        let text = render(
            vec![e.scrape_of(&c, &site_counts, &BTreeMap::new(), &[1.0, 0.5], measured)],
            "",
        )
        .unwrap();
        for line in [
            "# TYPE innoprof_probe_cost_measured_factor gauge",
            "innoprof_probe_cost_measured_factor{bound=\"estimate\"} 1.25",
            "innoprof_probe_cost_measured_factor{bound=\"low\"} 1.0",
            "innoprof_probe_cost_measured_factor{bound=\"high\"} 1.5",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
    }
}
