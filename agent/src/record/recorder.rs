//! The recorder: attaches the plan's probes, governs them while the
//! caller waits, reads the maps, and detaches; [`super::results`] builds
//! the results from what it collected.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::attach::{Session, SessionOptions};
use crate::bpf::abi::SlotId;
use crate::collect::SlotCount;
use crate::collect::{self, CollectError, Counters, LiveProbe};
use crate::cost::calibrate::CalibrateError;
use crate::cost::governor::{GovernedProbe, Governor, SlotCost};
use crate::cost::hit_cost::HitCost;
use crate::cpu::CpuProfiler;
use crate::model::summary::EndReason;
use crate::plan::memcounters::CounterRecorder;
use crate::record::looks::{aux_counters, in_target_looks, slot_price_ns, InTargetLooks};
use crate::record::options::{RecordError, StackCapture};
use crate::record::recording::Recording;
use crate::record::recording_plan::RecordingPlan;
use crate::record::results;
use crate::record::results::{probe_slots, Finished};
use crate::record::statements::StatementBook;
use crate::symbolize::ProcessMaps;
use crate::target::own_usage::{debug_phase, own_cpu_time};
use crate::target::Target;

/// How often a live run folds the rows of exited threads
/// ([`Recorder::fold_exited_threads`]): a read of the thread map and a
/// look in /proc per thread, cheap at this pace.
pub const FOLD_EXITED_EVERY: Duration = Duration::from_secs(10);

/// Per (slot, role id): the calls and wait of threads that have exited.
type ExitedThreads = HashMap<(SlotId, u32), crate::bpf::abi::ThreadVal>;

/// Probes attached and counting.
pub struct Recorder {
    pub(super) plan: RecordingPlan,
    /// None with no uprobe probes (`--probes none`).
    pub(super) session: Option<Session>,
    pub(super) cpu: Option<CpuProfiler>,
    /// The CPU profile as the window ended ([`Recorder::detach_probes`]),
    /// its sampler stopped: what `finish` reports.
    pub(super) cpu_at_end: Option<Result<crate::cpu::RawCpuProfile, crate::cpu::CpuError>>,
    pub(super) maps: ProcessMaps,
    pub(super) started: Instant,
    /// When detaching began (`detach_probes`, or `finish`): the end of the
    /// watched window. Rates and the governor's on-time stop here, not
    /// when the results are built: detaching a loaded server's probes
    /// took seconds, and counting them made `--interval` recordings'
    /// calls/s 17-55 % low.
    pub(super) detached_at: Option<Instant>,
    pub(super) started_unix_ms: u128,
    pub(super) hit_cost: HitCost,
    /// Why the calibrated cost is a fallback, if it is.
    pub(super) calibration_note: Option<String>,
    /// Set when the hit cost is this boot's earlier measurement.
    pub(super) calibration_reused: Option<String>,
    pub(super) governor: Option<Governor>,
    /// Per-call cost: calibrated trap + the programs' run time in the target.
    pub(super) cost: Option<crate::cost::live::LiveCost>,
    /// When `cost` last re-read the kernel's run statistics.
    pub(super) cost_observed: Instant,
    /// The stack sampling the governor set per slot (absent: every hit).
    pub(super) stack_every: HashMap<SlotId, u32>,
    /// With [`StackCapture::OnDemand`]: whether each slot takes stacks
    /// now, and until when the open window lasts.
    pub(super) stack_gate: Option<(Vec<bool>, Option<Instant>)>,
    /// Resumes the kernel refused (the probe then stays off).
    pub(super) governor_errors: Vec<String>,
    /// The governor decision the BPF alarm was last armed after.
    pub(super) alarm_armed_for: u64,
    /// `INNOPROF_BENCH_TOGGLE_MS` without a governor: every probe switched
    /// off and on again on a period (the benchmark's switching cost).
    pub(super) bench_toggle: Option<crate::cost::bench_toggle::Toggle>,
    pub(super) agent_cpu_at_start: Duration,
    /// The host's CPU times when the probes were attached, and when
    /// detaching began (see `host_idle`).
    pub(super) host_cpu_at_start: Option<crate::target::host_idle::CpuTimes>,
    pub(super) host_cpu_at_end: Option<crate::target::host_idle::CpuTimes>,
    /// The in-memory counters, read at start and end (see `memcounters`).
    pub(super) counters: CounterRecorder,
    /// What the probes cost the server measured in it (see `in_target`),
    /// fed at each governor look; or why it is not measured.
    pub(super) in_target: Result<InTargetLooks, String>,
    /// Per planned probe with an auxiliary counter (see
    /// [`crate::cost::estimate::AUXILIARY`]): the counter's index and its
    /// readings at the probe's switches, for the ratio estimate.
    pub(super) aux: Vec<Option<(usize, crate::cost::estimate::AuxMarks)>>,
    /// The machine as the recording started (metadata.json's `host`).
    pub(super) host: crate::target::host::HostInfo,
    /// Live runs only ([`Recorder::fold_exited_threads`]): per (slot,
    /// role), the calls and wait of threads that exited, taken out of the
    /// per-thread map; and when that was last done.
    pub(super) exited_threads: Option<(ExitedThreads, Instant)>,
    /// The statements behind the hits, drained from the maps every
    /// [`DRAIN_STATEMENTS_EVERY`]; None when statements are not read.
    pub(super) statements: Option<(StatementBook, Instant)>,
    /// The last drain found the statement maps filling (see
    /// [`DRAIN_STATEMENTS_BUSY`]).
    pub(super) statements_busy: bool,
}

/// How often the statement maps are drained into the book: they fill
/// with every statement that hits a probe (thousands a second).
pub const DRAIN_STATEMENTS_EVERY: Duration = Duration::from_secs(1);
/// ... and when the last drain found them a quarter full or more, or
/// losing statements: at every look of the recording loop (every 250 ms
/// in `record`), which is at least this far apart.
pub const DRAIN_STATEMENTS_BUSY: Duration = Duration::from_millis(200);
/// Stack records (`stack_stmt`, ~23,000 fit) in one drain that make the
/// next drains come at the busy pace.
const STACK_RECORDS_BUSY: usize = 4096;

impl Recorder {
    pub fn start(mut plan: RecordingPlan, stacks: StackCapture) -> Result<Self, RecordError> {
        let agent_cpu_at_start = plan.cpu_at_plan;
        // Finished before attaching to the target, so its probes are not in the way.
        let calibrated = plan
            .calibration
            .take()
            .map(|h| h.join().unwrap_or(Err(CalibrateError::Panicked)));
        debug_phase("after calibration joined");
        let calibration_reused = match &calibrated {
            Some(Ok(c)) => c.reused_age.map(reused_note),
            _ => None,
        };
        let (hit_cost, calibration_note) = match calibrated {
            Some(Ok(c)) => (c.cost, None),
            Some(Err(e)) => (
                FALLBACK_HIT_COST,
                Some(format!(
                    "calibration failed ({}); using typical costs",
                    crate::error_chain(&e)
                )),
            ),
            None => (FALLBACK_HIT_COST, Some("not calibrated".to_string())),
        };
        let opts = SessionOptions {
            pid: plan.target.pid,
            capture_stacks: stacks != StackCapture::Off,
            stacks_from_start: stacks == StackCapture::Always,
            stack_interval_ns: plan.stack_interval_ns(),
            limits: plan.limits,
            role_ranges: plan.role_ranges(),
            thd: plan.thd.as_ref().copied().unwrap_or_default(),
        };
        // RecordingPlan::build let an all-unresolved set through only for a CPU profile.
        let any_symbol = plan.probes.iter().any(|p| !p.resolution.symbols.is_empty());
        let session = if !any_symbol {
            None
        } else {
            Some(Session::attach(&plan.target.binary, &plan.probes, &opts)?)
        };
        debug_phase("after probes attached");
        // On failure the session drops here, detaching its probes.
        // Samples of connections count under their statements where the
        // wait probes read statements: the sampler shares their maps, so
        // the statements' drain takes both.
        let share =
            session
                .as_ref()
                .filter(|_| plan.thd.is_ok())
                .map(|s| crate::cpu::StatementShare {
                    latency: s.object(),
                    thd: opts.thd,
                    // Stacks keyed by statement only where they are written out
                    // at a bounded end (`record`); `top` and `serve` sample
                    // without end, and a key per statement run would fill the
                    // stack map.
                    key_stacks: stacks == StackCapture::Always,
                });
        let cpu = plan
            .cpu
            .as_ref()
            .map(|o| CpuProfiler::start_sharing(plan.target.pid, o, share))
            .transpose()?;
        let maps = ProcessMaps::read(plan.target.pid).unwrap_or_default();
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let counters = CounterRecorder::start(plan.target.pid, &plan.image, &plan.counters);
        let started = Instant::now();
        let host_cpu_at_start = crate::target::host_idle::CpuTimes::now();
        let host = crate::target::host::HostInfo::at_start(plan.target.pid);
        let cost = session
            .as_ref()
            .map(|s| crate::cost::live::LiveCost::new(hit_cost, s.run_stats()));
        let governor = plan.governor.zip(session.as_ref()).map(|(cfg, s)| {
            let mut probes = vec![GovernedProbe { slots: Vec::new() }; plan.probes.len()];
            for (probe, governed) in probes.iter_mut().enumerate() {
                governed.slots = s
                    .slots_of(probe)
                    .map(|(i, slot)| (i, hit_cost.slot_cost(slot.measure, slot.symbol.entry)))
                    .collect();
            }
            let so_far = crate::collect::read_slot_counts(s).unwrap_or_default();
            Governor::new(cfg, probes, &so_far, started)
        });
        let in_target = in_target_looks(&plan, &counters, governor.is_some());
        let aux = aux_counters(&plan, &counters, governor.is_some());
        let n_slots = session.as_ref().map_or(0, |s| s.slots.len());
        let bench_toggle = match plan.governor {
            None => crate::cost::bench_toggle::Toggle::from_env(started),
            Some(_) => None,
        };
        let statements = (plan.thd.is_ok() && session.is_some())
            .then(|| (StatementBook::new(plan.statement_text), started));
        Ok(Self {
            plan,
            session,
            cpu,
            cpu_at_end: None,
            maps,
            started,
            detached_at: None,
            started_unix_ms,
            hit_cost,
            calibration_note,
            calibration_reused,
            governor,
            cost,
            cost_observed: started,
            stack_every: HashMap::new(),
            stack_gate: (stacks == StackCapture::OnDemand).then(|| (vec![false; n_slots], None)),
            governor_errors: Vec::new(),
            alarm_armed_for: 0,
            bench_toggle,
            agent_cpu_at_start,
            host_cpu_at_start,
            host_cpu_at_end: None,
            counters,
            in_target,
            aux,
            host,
            exited_threads: None,
            statements,
            // Busy until a drain says otherwise: a busy server fills the
            // maps within the first second, before a drain could tell.
            statements_busy: true,
        })
    }

    /// What one probe hit costs here (calibrated at start).
    pub fn hit_cost(&self) -> &HitCost {
        &self.hit_cost
    }

    pub fn target(&self) -> &Target {
        &self.plan.target
    }

    /// When [`Self::govern`] must run next: the governor's next decision,
    /// unless the alarm ([`Self::alarm_fd`]) rings first. None without a
    /// governor (call it on the governor's `tick` then: other duties,
    /// such as closing a stack window, ride on it).
    pub fn next_govern_at(&self) -> Option<Instant> {
        self.governor.as_ref().map(Governor::next_decision)
    }

    /// Readable when the governor's alarm has rung: call
    /// [`Self::govern`] then. None without probes or a governor.
    pub fn alarm_fd(&self) -> Option<std::os::fd::OwnedFd> {
        self.governor.as_ref()?;
        self.session.as_ref()?.alarm_fd()
    }

    /// Index of the attached probe named `name`.
    pub fn probe_index(&self, name: &str) -> Option<usize> {
        self.attached_probe_ids()
            .into_iter()
            .find(|&i| self.plan.probes[i].spec.name == name)
    }

    /// Indexes of the probes with an attached slot, in plan order.
    pub fn attached_probe_ids(&self) -> Vec<usize> {
        (0..self.plan.probes.len())
            .filter(|&i| !probe_slots(self.session.as_ref(), i).is_empty())
            .collect()
    }

    /// Names of the probes with an attached slot.
    pub fn attached_probes(&self) -> Vec<&str> {
        self.attached_probe_ids()
            .into_iter()
            .map(|i| self.plan.probes[i].spec.name.as_str())
            .collect()
    }

    pub fn plan(&self) -> &RecordingPlan {
        &self.plan
    }

    pub fn attached_links(&self) -> usize {
        self.session.as_ref().map_or(0, Session::attached_links)
    }

    /// How the probes were attached and what it cost (None: no uprobes).
    pub fn attach_info(&self) -> Option<&crate::attach::AttachInfo> {
        self.session.as_ref().map(|s| &s.info)
    }

    /// The CPU profiler's perf events and tracepoint links (0 without one).
    pub fn cpu_links(&self) -> usize {
        self.cpu.as_ref().map_or(0, CpuProfiler::attached_links)
    }

    /// The attached probes and their slots, for live readers.
    pub fn live_probes(&self) -> Vec<LiveProbe> {
        self.plan
            .probes
            .iter()
            .enumerate()
            .map(|(idx, p)| LiveProbe {
                probe: idx,
                name: p.spec.name.clone(),
                measure: p.spec.measure,
                has_callsites: p.spec.callsite.is_some(),
                slots: probe_slots(self.session.as_ref(), idx)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect(),
            })
            .filter(|p| !p.slots.is_empty())
            .collect()
    }

    /// The CPU profiler's totals so far, still sampling (None: no profiler).
    pub fn cpu_snapshot(&self) -> Option<Result<crate::cpu::RawCpuProfile, crate::cpu::CpuError>> {
        self.cpu.as_ref().map(CpuProfiler::snapshot)
    }

    /// What the probes cost the server measured in it: the fit so far, or
    /// why there is none.
    pub fn in_target(&self) -> Result<crate::cost::in_target::InTargetFit, String> {
        self.in_target.as_ref().map_err(Clone::clone)?.cost.result()
    }

    /// CPU time innoprof itself has used since it started attaching.
    pub fn agent_cpu(&self) -> Duration {
        own_cpu_time().saturating_sub(self.agent_cpu_at_start)
    }

    /// The counters as they stand, read while the probes stay attached
    /// (with the roles of threads since exited, where they are folded).
    pub fn read_counters(&self) -> Result<Counters, CollectError> {
        let mut counters = match &self.session {
            Some(session) => crate::collect::read_counters(session)?,
            None => return Ok(Counters::default()),
        };
        if let Some((exited, _)) = &self.exited_threads {
            for (&(slot, role), v) in exited {
                match counters
                    .roles
                    .iter_mut()
                    .find(|(s, r, _)| *s == slot && *r == role)
                {
                    Some((_, _, sum)) => *sum += v,
                    None => counters.roles.push((slot, role, *v)),
                }
            }
        }
        Ok(counters)
    }

    /// For live runs (`serve`, `top`) that last for days: from now on,
    /// every [`FOLD_EXITED_EVERY`] of [`Recorder::govern`], the rows of
    /// threads that have exited leave the per-thread BPF map and are kept
    /// here per (slot, role), so the map keeps room for new threads and
    /// the per-role totals stay whole. Not for `record`: its results
    /// count threads one by one, which these sums no longer can.
    pub fn fold_exited_threads(&mut self) {
        self.exited_threads
            .get_or_insert_with(|| (HashMap::new(), Instant::now()));
    }

    /// The folding itself, when due.
    pub(super) fn fold_exited_threads_now(&mut self) {
        let (Some((exited, last)), Some(session)) =
            (self.exited_threads.as_mut(), self.session.as_ref())
        else {
            return;
        };
        if last.elapsed() < FOLD_EXITED_EVERY {
            return;
        }
        *last = Instant::now();
        let task = std::path::PathBuf::from(format!("/proc/{}/task", self.plan.target.pid));
        // The target itself gone: `serve` follows it, nothing to keep room for.
        if !task.is_dir() {
            return;
        }
        let alive = |tid: u32| task.join(tid.to_string()).exists();
        if let Ok(rows) = crate::collect::take_exited_threads(session, alive) {
            for (slot, role, v) in rows {
                *exited.entry((slot, role)).or_default() += &v;
            }
        }
    }

    /// Drains the statement maps into the book, when due (`force`: now).
    pub(super) fn drain_statements_now(&mut self, force: bool) {
        let (Some((book, last)), Some(session)) = (self.statements.as_mut(), self.session.as_ref())
        else {
            return;
        };
        // A busy server (tens of thousands of statements a second) fills
        // the maps within the second: drained at every look then.
        let every = if self.statements_busy {
            DRAIN_STATEMENTS_BUSY
        } else {
            DRAIN_STATEMENTS_EVERY
        };
        if !force && last.elapsed() < every {
            return;
        }
        *last = Instant::now();
        if let Ok(rows) = crate::collect::take_statements(session) {
            self.statements_busy = rows.stats.len() >= crate::bpf::abi::MAX_STMT_KEYS / 4
                || rows.stacks.len() >= STACK_RECORDS_BUSY
                || rows.texts.len() >= crate::bpf::abi::MAX_STMT_TEXTS / 4
                || rows.lost.keys_full + rows.lost.text_full > book.lost_so_far();
            book.add(rows);
        }
    }

    /// For live views (`top`): drains the statement maps now and returns
    /// the book's cumulative totals; two calls' difference is what ran
    /// between them. None when statements are not read (see `plan().thd`).
    pub fn statement_totals(&mut self) -> Option<crate::record::statements::BookTotals> {
        self.drain_statements_now(true);
        self.statements.as_ref().map(|(book, _)| book.totals())
    }

    /// Stack counters split by statement, as the book has them (see
    /// [`StatementBook::split_stacks`]); whole when statements are not read.
    pub(super) fn split_stacks(
        &self,
        samples: Vec<crate::collect::StackSample>,
    ) -> Vec<crate::collect::StackSample> {
        match &self.statements {
            Some((book, _)) => book.split_stacks(samples),
            None => samples,
        }
    }

    /// The statements as they stand, for the summary's `who`.
    fn who(&self) -> crate::model::who::Who {
        let how = match &self.plan.thd {
            Ok(l) => crate::plan::thd::describe(l),
            Err(why) => {
                return crate::model::who::Who {
                    how: format!("statements not attributed: {why}"),
                    ..Default::default()
                }
            }
        };
        let Some((book, _)) = &self.statements else {
            return crate::model::who::Who {
                how: "statements not attributed: no probe attached".into(),
                ..Default::default()
            };
        };
        let probe_of: HashMap<SlotId, String> = self
            .plan
            .probes
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                probe_slots(self.session.as_ref(), i)
                    .into_iter()
                    .map(move |(slot, _)| (slot, p.spec.name.clone()))
            })
            .collect();
        book.result(how, &probe_of)
    }

    /// The CPU profile's statements: its stacks' query ids named by the
    /// book (the `statement` label), and `who.cpu` said from the sampler's
    /// counters, or why its samples have no statement.
    fn name_statements(
        &self,
        mut raw: crate::cpu::RawCpuProfile,
        who: Option<&mut crate::model::who::Who>,
    ) -> crate::cpu::RawCpuProfile {
        use crate::cpu::abi::Counter;
        let book = self.statements.as_ref().map(|(b, _)| b);
        if let Some(book) = book.filter(|_| raw.statements) {
            raw.statement_names = book.cpu_fingerprints();
        }
        let cpu = crate::model::who::StatementCpu {
            attributed: raw.statements,
            note: (!raw.statements).then(|| {
                "CPU samples not tied to statements: the wait probes read none here (no probe attached, or statements off)".to_string()
            }),
            samples: raw.counter(Counter::StmtSamples),
            no_statement: raw.counter(Counter::ConnNoStmt),
            no_text: book.map_or(0, |b| b.cpu_no_text()),
        };
        if let Some(who) = who {
            who.cpu = Some(cpu);
        }
        raw
    }

    /// Detaches the uprobes now (`finish` would), so a last read of the
    /// counters sees the final totals `finish` reports.
    /// The plan, once the recorder is done with (its probes detach as the
    /// rest of it drops), for [`RecordingPlan::build_again`].
    pub fn into_plan(self) -> RecordingPlan {
        self.plan
    }

    /// Ends the watched window: the in-memory counters read, the probes
    /// detached and the CPU sampler stopped, so that what comes after (the
    /// end snapshot's SQL, which a stopped server leaves waiting for
    /// seconds; the results) is neither counted nor timed. Idempotent.
    pub fn detach_probes(&mut self) {
        self.mark_window_end();
        self.counters.finish();
        if let Some(session) = self.session.as_mut() {
            session.detach();
        }
        if let Some(cpu) = self.cpu.take() {
            self.cpu_at_end = Some(cpu.stop());
        }
    }

    /// Per-slot costs measured live (e.g. from the kernel's BPF run-time
    /// stats), replacing the calibrated ones from the governor's next tick.
    pub fn update_costs(&mut self, costs: &HashMap<SlotId, SlotCost>) {
        if let Some(g) = self.governor.as_mut() {
            g.update_costs(costs);
        }
    }

    /// Each planned probe's call estimate so far, where the governor cut
    /// it (None: on the whole time, its counts are exact), for live readers.
    pub fn live_estimates(&self) -> Vec<Option<crate::cost::estimate::CallEstimate>> {
        let (Some(g), Some(session)) = (self.governor.as_ref(), self.session.as_ref()) else {
            return vec![None; self.plan.probes.len()];
        };
        let counts = crate::collect::read_slot_counts(session).unwrap_or_default();
        let now = Instant::now();
        let (end_s, period_s) = (
            now.saturating_duration_since(self.started).as_secs_f64(),
            g.period().as_secs_f64(),
        );
        g.windows_now(now, &counts)
            .into_iter()
            .map(|w| {
                (w.len() > 1).then(|| crate::cost::estimate::estimate(&w, end_s, period_s, 0.0))
            })
            .collect()
    }

    /// The in-memory counters: start readings, and the values now (or at
    /// the end, once the probes are detached).
    pub fn memory_counters(&self) -> &CounterRecorder {
        &self.counters
    }

    /// Seconds each planned probe has been switched on: the governor's
    /// account, or the time since attaching without one.
    pub fn attached_seconds(&self) -> Vec<f64> {
        match &self.governor {
            Some(g) => g.attached_seconds(self.window_end()),
            None => vec![self.elapsed().as_secs_f64(); self.plan.probes.len()],
        }
    }

    /// Time watched: since the probes were attached, until now or until
    /// detaching began.
    pub fn elapsed(&self) -> std::time::Duration {
        self.window_end().saturating_duration_since(self.started)
    }

    /// The watched window ends now, unless it ended already: when
    /// detaching begins.
    fn mark_window_end(&mut self) -> Instant {
        if self.detached_at.is_none() {
            self.detached_at = Some(Instant::now());
            self.host_cpu_at_end = crate::target::host_idle::CpuTimes::now();
        }
        self.detached_at.expect("just set")
    }

    fn window_end(&self) -> Instant {
        self.detached_at.unwrap_or_else(Instant::now)
    }

    pub fn started_unix_ms(&self) -> u128 {
        self.started_unix_ms
    }

    /// Detaches every probe, reads the maps, and builds the results.
    pub fn finish(mut self, end_reason: EndReason) -> Result<Recording, RecordError> {
        let ended = self.mark_window_end();
        let duration_s = ended.saturating_duration_since(self.started).as_secs_f64();
        let counters = self.counters.results();
        for (i, marks) in self.aux.iter_mut().flatten() {
            if let Some(end) = counters.get(*i).and_then(|c| c.end) {
                marks.marks.push((duration_s, end));
            }
        }
        // Detach first: maps read while probes still fire would disagree
        // with each other (per-slot totals vs per-call-site counts).
        if let Some(session) = self.session.as_mut() {
            session.detach();
        }
        debug_phase("after detach");
        // The sampler stops before the last drain: every sample it counted
        // per statement is then in the drain, and so is the fingerprint of
        // every query id its stacks hold.
        let cpu_raw = match self.cpu_at_end.take() {
            Some(stopped) => Some(stopped),
            None => self.cpu.take().map(CpuProfiler::stop),
        }
        .transpose();
        debug_phase("after CPU profiler stop");
        self.drain_statements_now(true);
        let mut who = self.session.is_some().then(|| self.who());
        let cpu_raw = cpu_raw.map(|raw| raw.map(|r| self.name_statements(r, who.as_mut())));
        let snapshot = match &self.session {
            Some(session) => crate::collect::read(session),
            None => Ok(collect::MapsSnapshot::default()),
        };
        // The last window closes at the end, with every call seen until the
        // links were gone (returns of calls in flight included).
        let duties = match (self.governor.as_mut(), &snapshot) {
            (Some(g), Ok(snap)) => {
                let counts: HashMap<SlotId, SlotCount> = snap
                    .slots
                    .iter()
                    .map(|(slot, st)| (*slot, SlotCount::from(st)))
                    .collect();
                Some(g.finish(ended, &counts))
            }
            _ => None,
        };
        let mut snapshot = snapshot?;
        snapshot.stacks = self.split_stacks(std::mem::take(&mut snapshot.stacks));
        // Hits made before their thread's role was known, under the role
        // it settled on, in the cells and the stacks as in the role table.
        crate::collect::settle_unlabelled(crate::collect::Labelled {
            site_roles: &mut snapshot.site_roles,
            stacks: &mut snapshot.stacks,
            threads: &mut snapshot.threads,
            thread_roles: &snapshot.thread_roles,
        });
        // Weighted samples to the exact totals each slot's sampler saw,
        // split over call sites, latches and roles as the exact table is.
        let mut cells = crate::collect::cells_of(&snapshot.site_roles);
        crate::collect::role_cells(&snapshot.threads, &snapshot.thread_roles, &mut cells);
        crate::collect::scale_to_cells(&mut snapshot.stacks, &snapshot.stack_seen, &cells);
        let cpu_raw = cpu_raw?;
        if self.plan.target.is_alive() {
            // Libraries loaded during the run are in the fresher map.
            if let Ok(m) = ProcessMaps::read(self.plan.target.pid) {
                self.maps = m;
            }
        }

        let agent_cpu_at_start = self.agent_cpu_at_start;
        let mut recording = results::build(Finished {
            plan: &self.plan,
            session: self.session.as_ref(),
            snapshot,
            duties,
            cpu: cpu_raw,
            maps: self.maps.clone(),
            hit_cost: self.hit_cost,
            live_cost: self.cost.as_ref(),
            calibration_note: self.calibration_note.clone(),
            calibration_reused: self.calibration_reused.clone(),
            governor_errors: self.governor_errors.clone(),
            agent_cpu_at_start,
            host_cpu_idle_pct: self
                .host_cpu_at_start
                .zip(self.host_cpu_at_end)
                .and_then(|(start, end)| start.idle_pct_until(&end)),
            in_target: self.in_target(),
            counters,
            aux: self
                .aux
                .iter()
                .map(|a| a.as_ref().map(|(_, m)| m.clone()))
                .collect(),
            started_unix_ms: self.started_unix_ms,
            duration_s,
            end_reason,
            who,
        })?;
        recording.host = Some(self.host.clone().ended());
        Ok(recording)
    }
}

impl crate::cost::price::SlotPrices for Recorder {
    /// The programs' run statistics now (zero without probes).
    fn run_stats(&self) -> crate::attach::RunStats {
        self.session
            .as_ref()
            .map(crate::attach::Session::run_stats)
            .unwrap_or_default()
    }

    /// What one call at `slot` cost the server from `then` (None: the
    /// recording's start) to `now`, in ns ([`slot_price_ns`]).
    fn per_call_ns_between(
        &self,
        slot: SlotId,
        then: Option<crate::attach::RunStats>,
        now: crate::attach::RunStats,
    ) -> Option<f64> {
        let s = self.session.as_ref()?.slots.get(slot.index())?;
        Some(slot_price_ns(
            self.cost.as_ref(),
            &self.hit_cost,
            s,
            then,
            now,
        ))
    }
}

/// Says that the hit cost is this boot's cached measurement, and how old.
fn reused_note(age: Duration) -> String {
    format!(
        "calibrated {} min ago in this boot, reused from /run/innoprof; `innoprof calibrate` measures again",
        age.as_secs() / 60
    )
}

/// Typical costs (this machine class, idle) when calibration cannot run.
const FALLBACK_HIT_COST: HitCost = HitCost {
    latency_emulated_ns: 2_000.0,
    latency_stepped_ns: 30_000.0,
    count_emulated_ns: 1_000.0,
    count_stepped_ns: 15_000.0,
    with_stacks: true,
    bpf_latency_ns: 300.0,
    bpf_count_ns: 150.0,
    stack_ns: 700.0,
};
