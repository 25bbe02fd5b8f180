//! Loading the latency BPF object and attaching it to resolved symbols, in
//! batches, with detach on every path (explicit `detach()`, drop, or
//! process death: links are file descriptors, so the kernel removes the
//! uprobes when they close, even after SIGKILL).
//!
//! **Batched attach.** Where the kernel has uprobe_multi links (>= 6.6),
//! each probe gets one link per program, carrying every offset and cookie
//! of its symbols: one syscall to attach, one RCU grace period to detach.
//! A perf-event uprobe costs ~85–100 ms to attach or detach here, serialised
//! and under the target's mmap lock, so `--probes all` (~100 links) spent
//! ~5 s on it and the governor's switching cost the server throughput.
//! Elsewhere (or with `INNOPROF_ATTACH=perf`) every symbol gets its own
//! perf-event link, as before, and the reason is reported.
//!
//! **Scope.** On kernels >= 6.10 the multi links carry the target's PID, so
//! the kernel installs breakpoints only in the target's memory and runs the
//! programs only for its threads (6.6–6.9 checked only the thread that
//! attached: there the links cover every process, as perf links do, and the
//! programs drop other processes' hits by `target_tgid`).
//!
//! libbpf (through libbpf-rs) loads this object because aya 0.14 cannot make
//! a program for uprobe_multi links: the kernel wants
//! `BPF_TRACE_UPROBE_MULTI` as the program's expected attach type, and aya
//! never sets one for uprobes. The CPU profiler's object is loaded by
//! libbpf too (`crate::cpu`).

pub mod errno;

use crate::bpf::layout::latency as bpf;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use libbpf_rs::{Link, MapCore, MapFlags, Object, ObjectBuilder, ProgramAttachType, UprobeOpts};
use serde::Serialize;

use crate::bpf::abi::{SlotId, LATENCY_OBJ};
use crate::plan::catalog::{CostClass, Measure};
use crate::plan::links::{choose_mode, Mode};
use crate::plan::probeset::PlannedProbe;
use crate::resolve::{ResolvedSymbol, SymbolTable};

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("opening the BPF object failed")]
    Open(#[source] libbpf_rs::Error),
    #[error("the BPF programs failed to load (verifier or permissions)")]
    Load(#[source] libbpf_rs::Error),
    #[error("no probe could be attached: {0}")]
    NothingAttached(String),
    #[error("BPF program or map `{0}` missing from the object")]
    Missing(&'static str),
    #[error("attaching {probe}")]
    Link {
        probe: String,
        #[source]
        source: LinkError,
    },
}

/// Why the kernel refused a link: the errno and what it means for a uprobe
/// (see [`crate::attach::errno`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LinkError(pub crate::attach::errno::AttachErrno);

impl AttachError {
    /// The kernel refused the kind of link (a kernel built without
    /// uprobe_multi): worth falling back to perf-event links.
    fn link_kind_unsupported(&self) -> bool {
        matches!(self, Self::Link { source, .. } if source.errno() == libc::EOPNOTSUPP)
    }
}

impl LinkError {
    fn from_libbpf(e: &libbpf_rs::Error) -> Self {
        // libbpf-rs keeps the syscall's io::Error; its message carries the
        // errno ("… (os error 22)") when the source chain does not.
        let errno = crate::attach::errno::errno_in(e).unwrap_or_else(|| {
            let text = format!("{e:#}");
            text.rsplit_once("os error ")
                .and_then(|(_, n)| n.split(')').next()?.parse().ok())
                .unwrap_or(0)
        });
        Self(crate::attach::errno::explain(errno))
    }

    fn errno(&self) -> i32 {
        self.0.errno
    }
}

const ENTER: &str = bpf::programs::LAT_ENTER;
const RETURN: &str = bpf::programs::LAT_RETURN;
const COUNT: &str = bpf::programs::COUNT_HIT;

/// One attached symbol. Its index in `Session::slots` is its [`SlotId`].
#[derive(Debug, Clone)]
pub struct Slot {
    pub probe: usize,
    pub symbol: ResolvedSymbol,
    /// How it is attached (inline sites count even in a timed probe).
    pub measure: Measure,
    pub cookie: u64,
    /// False when the kernel refused it: its id stays taken (ids are in
    /// the cookies of the other slots' links), it just never counts.
    pub attached: bool,
}

/// What happened to each planned probe.
#[derive(Debug, Clone, Default)]
pub struct AttachOutcome {
    pub attached_symbols: usize,
    /// The symbols the kernel refused, each with why.
    pub failures: Vec<Refusal>,
}

/// A symbol that could not be attached. Kept typed (the cause chain
/// intact) until a summary or the terminal says it: `mysqld_foo: attaching
/// probe x: …`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{symbol}")]
pub struct Refusal {
    pub symbol: String,
    #[source]
    pub reason: RefusalReason,
}

/// Why a symbol was refused: the kernel's errno for its link, or the
/// failure of the whole link call it was part of.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RefusalReason {
    #[error(transparent)]
    Link(LinkError),
    #[error(transparent)]
    Attach(std::sync::Arc<AttachError>),
}

impl Refusal {
    /// `symbol: reason`, each cause said once.
    pub fn said(&self) -> String {
        crate::error_chain(self)
    }
}

/// How the probes are attached, and what attaching and detaching cost.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, schemars::JsonSchema)]
pub struct AttachInfo {
    /// `uprobe_multi` (one link per probe and program) or `perf_event`
    /// (one link per symbol and program).
    pub mode: String,
    /// Why perf-event links are used, when they are.
    pub fallback_reason: Option<String>,
    /// The kernel installs breakpoints only in the target process.
    pub pid_scoped: bool,
    /// Links created at the start.
    pub links: usize,
    /// Probe points (symbol offsets, entry and return counted apart).
    pub points: usize,
    pub attach_ms: f64,
    /// Time to detach everything at the end (0 until then).
    pub detach_ms: f64,
    /// Links created and destroyed later by the overhead governor.
    pub governor_switches: u64,
}

/// The links of one probe (multi mode: one per program; perf mode: one
/// per symbol and program). Detached and re-created together.
struct LinkGroup {
    probe: usize,
    slots: Vec<SlotId>,
    links: Vec<(&'static str, Link)>,
    /// Batches of this group's links handed to the detach thread and not
    /// yet detached. A group is not re-attached while any is pending: the
    /// old and the new links would both run the programs on every hit (a
    /// count probe counted twice), which spread windows a second apart
    /// under a slow detach (~1 s on a loaded host) would otherwise hit.
    pending: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

pub struct Session {
    object: Object,
    pub slots: Vec<Slot>,
    pub outcomes: Vec<AttachOutcome>,
    groups: Vec<LinkGroup>,
    binary: PathBuf,
    pid: u32,
    mode: Mode,
    pub info: AttachInfo,
    /// Detaches suspended links off the caller's thread (see `suspend`).
    reaper: Option<Reaper>,
    /// Keeps the kernel's per-program run-time statistics on.
    _stats: Option<OwnedFd>,
    /// The governor's alarm (`wakes`, see `arm_alarm`); None where the
    /// ring buffer could not be set up (the governor then looks on its
    /// own clock alone).
    alarm: Option<libbpf_rs::RingBuffer<'static>>,
}

/// A thread that drops (detaches) links handed to it, in order. A detach
/// waits for an RCU grace period, which the governor's loop must not.
/// It also times each batch, from its hand-over to its last detach: the
/// governor plans with how long its switch-offs take to end the hits.
/// What the detach thread is handed: when, the links, and the counters of
/// their groups' pending batches, decremented once detached.
type ReapBatch = (
    std::time::Instant,
    Vec<(&'static str, Link)>,
    Vec<std::sync::Arc<std::sync::atomic::AtomicU32>>,
);

struct Reaper {
    tx: std::sync::mpsc::Sender<ReapBatch>,
    thread: std::thread::JoinHandle<()>,
    took: std::sync::Arc<std::sync::Mutex<Vec<std::time::Duration>>>,
}

impl Reaper {
    fn spawn() -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<ReapBatch>();
        let took = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let times = std::sync::Arc::clone(&took);
        let thread = std::thread::Builder::new()
            .name("innoprof-detach".into())
            .spawn(move || {
                for (handed, batch, pending) in rx {
                    drop_at_once(batch);
                    for p in pending {
                        p.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    }
                    if let Ok(mut t) = times.lock() {
                        t.push(handed.elapsed());
                    }
                }
            })
            .ok()?;
        Some(Self { tx, thread, took })
    }

    /// Waits until every link handed over so far is detached.
    fn finish(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

pub struct SessionOptions {
    pub pid: u32,
    /// Whether the BPF side may take stacks at all.
    pub capture_stacks: bool,
    /// Whether every slot takes its stacks from the start; otherwise none
    /// does until [`Session::set_stack_every`] says so (serve takes stacks
    /// only while a waits profile is asked for).
    pub stacks_from_start: bool,
    /// τ of the stack sampling, ns (BPF `wait_sampled`): a timed hit
    /// waiting at least this long takes its stack, a shorter one with
    /// probability wait/τ; a count-only slot at most once per τ on each
    /// CPU, the hits between riding on the next (0: every hit).
    pub stack_interval_ns: u64,
    pub limits: MapLimits,
    /// The target's thread-role marker functions (`thread_role`); empty:
    /// every thread's role is unknown.
    pub role_ranges: Vec<crate::bpf::abi::RoleRange>,
    /// Where connections' THDs are (`plan::thd`); `how` 0: statements off.
    pub thd: crate::bpf::abi::ThdLayout,
}

/// The shipped stack interval: at most 1,000 stacks a second per probe and
/// CPU (perf samples at 1–4 kHz), so a hot probe's average hit costs
/// about what a hit without a stack does.
pub const DEFAULT_STACK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// Capacities of the BPF maps that can fill up during a recording; `None`
/// keeps the size compiled into `bpf/latency.bpf.c`. Whatever does not fit
/// is counted in the `drops` map and reported, never silently lost.
#[derive(Debug, Clone, Copy, Default)]
pub struct MapLimits {
    /// Distinct stacks (`stacks`) and (probe, stack, call site) counters (`stack_counts`).
    pub stacks: Option<u32>,
    /// (probe, call site) counters (`site_stats`).
    pub callsites: Option<u32>,
}

pub use crate::bpf::run_stats::ProgramRuns;

/// The three programs' run statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunStats {
    pub enter: ProgramRuns,
    pub ret: ProgramRuns,
    pub count: ProgramRuns,
}

impl RunStats {
    /// Nanoseconds all three programs have run so far.
    pub fn total_run_ns(&self) -> u64 {
        self.enter.run_ns + self.ret.run_ns + self.count.run_ns
    }
}

impl Session {
    /// Loads the programs and attaches every resolved symbol of every probe.
    /// Individual symbol failures are recorded; it fails only if nothing attaches.
    pub fn attach(
        binary: &Path,
        plan: &[PlannedProbe],
        opts: &SessionOptions,
    ) -> Result<Self, AttachError> {
        let (mode, fallback) = choose_mode();
        match Self::attach_as(binary, plan, opts, mode, fallback.clone()) {
            // A kernel built without uprobe_multi says so on the first link.
            Err(e) if matches!(mode, Mode::Multi { .. }) && e.link_kind_unsupported() => {
                let why = format!(
                    "the kernel refused uprobe_multi links: {}",
                    crate::error_chain(&e)
                );
                Self::attach_as(binary, plan, opts, Mode::Perf, Some(why))
            }
            other => other,
        }
    }

    fn attach_as(
        binary: &Path,
        plan: &[PlannedProbe],
        opts: &SessionOptions,
        mode: Mode,
        fallback_reason: Option<String>,
    ) -> Result<Self, AttachError> {
        // libbpf's own messages go to stderr otherwise; errors come back
        // as values and are reported once, with their meaning.
        libbpf_rs::set_print(None);
        let slots: usize = plan.iter().map(|p| p.resolution.symbols.len()).sum();
        let measures: Vec<Measure> = plan
            .iter()
            .flat_map(|p| p.resolution.symbols.iter().map(|s| slot_measure(p, s)))
            .collect();
        let object = load_object(opts, mode, slots, &measures)?;
        let stats = crate::bpf::run_stats::enable();
        let mut session = Self {
            object,
            slots: Vec::new(),
            outcomes: vec![AttachOutcome::default(); plan.len()],
            groups: Vec::new(),
            binary: binary.to_path_buf(),
            pid: opts.pid,
            mode,
            info: AttachInfo {
                mode: match mode {
                    Mode::Multi { .. } => "uprobe_multi".into(),
                    Mode::Perf => "perf_event".into(),
                },
                fallback_reason,
                pid_scoped: matches!(mode, Mode::Multi { pid_scoped: true }),
                links: 0,
                points: 0,
                attach_ms: 0.0,
                detach_ms: 0.0,
                governor_switches: 0,
            },
            reaper: None,
            _stats: stats,
            alarm: None,
        };
        session.alarm = session.open_alarm();
        session.set_role_ranges(&opts.role_ranges);
        session.plan_slots(plan, opts.capture_stacks && opts.stacks_from_start);
        let started = Instant::now();
        // Hot probes last: whatever attaches first fires while the rest
        // attach, before the governor is watching.
        let mut order: Vec<usize> = (0..plan.len()).collect();
        order.sort_by_key(|&i| plan[i].spec.cost == CostClass::Hot);
        let mut groups = Vec::new();
        for probe in order {
            // Every slot is attached until its probe's links are tried.
            let slots: Vec<SlotId> = session.slots_of(probe).map(|(s, _)| s).collect();
            if slots.is_empty() {
                continue;
            }
            match session.link_probe(&plan[probe].spec.name, &slots) {
                Ok((links, refused)) => {
                    let attached = without(&slots, &refused);
                    for (slot, e) in refused {
                        session.refuse(probe, slot, RefusalReason::Link(e));
                    }
                    session.outcomes[probe].attached_symbols += attached.len();
                    if !links.is_empty() {
                        groups.push(LinkGroup {
                            probe,
                            slots: attached,
                            links,
                            pending: Default::default(),
                        });
                    }
                }
                // Only the first probe tells whether the kind of link works.
                Err(e)
                    if groups.is_empty()
                        && matches!(mode, Mode::Multi { .. })
                        && e.link_kind_unsupported() =>
                {
                    return Err(e)
                }
                Err(e) => {
                    let reason = match e {
                        AttachError::Link { source, .. } => RefusalReason::Link(source),
                        other => RefusalReason::Attach(std::sync::Arc::new(other)),
                    };
                    for &slot in &slots {
                        session.refuse(probe, slot, reason.clone());
                    }
                }
            }
        }
        session.groups = groups;
        session.info.attach_ms = started.elapsed().as_secs_f64() * 1e3;
        session.info.links = session.attached_links();
        session.info.points = session
            .groups
            .iter()
            .flat_map(|g| g.slots.iter())
            .map(|&s| {
                if session.slots[s.index()].measure == Measure::Latency {
                    2
                } else {
                    1
                }
            })
            .sum();
        if session.groups.is_empty() {
            let why: Vec<String> = session
                .outcomes
                .iter()
                .flat_map(|o| o.failures.iter().map(Refusal::said))
                .collect();
            let why = if why.is_empty() {
                "no symbol resolved".to_string()
            } else {
                why.join("; ")
            };
            return Err(AttachError::NothingAttached(why));
        }
        Ok(session)
    }

    /// Every attached slot, with its id.
    pub fn attached_slots(&self) -> impl Iterator<Item = (SlotId, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.attached)
            .map(|(i, s)| (SlotId::of_index(i), s))
    }

    /// The attached slots of planned probe `probe`, with their ids: the
    /// one grouping of slots by probe.
    pub fn slots_of(&self, probe: usize) -> impl Iterator<Item = (SlotId, &Slot)> {
        self.attached_slots().filter(move |(_, s)| s.probe == probe)
    }

    /// A slot the kernel refused: off, not attached, and the reason kept.
    fn refuse(&mut self, probe: usize, slot: SlotId, reason: RefusalReason) {
        self.slots[slot.index()].attached = false;
        let symbol = self.slots[slot.index()].symbol.name.clone();
        self.outcomes[probe]
            .failures
            .push(Refusal { symbol, reason });
        self.set_enabled(&[slot], false);
    }

    /// One slot per resolved symbol, with its cookie and creation-site
    /// entry; every slot starts switched on.
    fn plan_slots(&mut self, plan: &[PlannedProbe], capture_stacks: bool) {
        for (probe_idx, planned) in plan.iter().enumerate() {
            for symbol in &planned.resolution.symbols {
                // A clone (.constprop, .isra) may have dropped or moved
                // arguments: never read call-site registers there.
                let site_args = planned
                    .spec
                    .callsite
                    .filter(|_| symbol.clone.is_none())
                    .map(|c| (c.file_arg, c.line_arg));
                // Where the latch id or creation site is, for this symbol.
                let latch_plan = planned
                    .spec
                    .latch
                    .as_ref()
                    .zip(planned.latch.as_ref())
                    .filter(|_| symbol.clone.is_none());
                let latch = latch_plan.and_then(|(spec, plan)| {
                    let field = plan.layout.fields.get(&symbol.address)?;
                    Some(crate::bpf::abi::LatchArg {
                        arg: spec.arg,
                        offset: field.offset,
                        size: field.size,
                    })
                });
                let created = latch_plan.and_then(|(spec, plan)| {
                    let f = plan.layout.created.get(&symbol.address)?;
                    Some(crate::bpf::abi::CreatedField {
                        file_off: f.file_offset,
                        line_off: f.line_offset,
                        arg: spec.arg,
                        line_size: f.line_size,
                        line_shift: f.line_shift,
                        line_bits: f.line_bits,
                        pad: 0,
                    })
                });
                let holder = holder_field(plan, planned, symbol, latch_plan);
                let holder_site = latch_plan.and_then(|(_, plan)| {
                    let f = plan.layout.holder_sites.get(&symbol.address)?;
                    Some(crate::bpf::abi::CreatedField {
                        file_off: f.file_offset,
                        line_off: f.line_offset,
                        arg: 0,
                        line_size: f.line_size,
                        line_shift: f.line_shift,
                        line_bits: f.line_bits,
                        pad: 0,
                    })
                });
                let id = SlotId::of_index(self.slots.len());
                let created = created.is_some_and(|f| self.set_created(id, f));
                if let Some(h) = holder {
                    self.set_holder(id, h);
                }
                if let Some(site) = holder_site {
                    self.set_holder_site(id, site);
                }
                let cookie = crate::bpf::abi::cookie(id, site_args, latch, created);
                let measure = slot_measure(planned, symbol);
                // On before the links go in, so no hit of a fresh link is lost;
                // every hit's stack until the governor says otherwise.
                self.set_enabled(&[id], true);
                self.set_stack_every(&[(id, u32::from(capture_stacks))]);
                self.slots.push(Slot {
                    probe: probe_idx,
                    symbol: symbol.clone(),
                    measure,
                    cookie,
                    attached: true,
                });
            }
        }
    }

    /// Creates the links of one probe's slots. Returns them and the slots
    /// the kernel refused (multi mode: found by attaching the probe's
    /// offsets one at a time after the batch failed).
    #[allow(clippy::type_complexity)]
    fn link_probe(
        &mut self,
        probe_name: &str,
        slots: &[SlotId],
    ) -> Result<(Vec<(&'static str, Link)>, Vec<(SlotId, LinkError)>), AttachError> {
        let link_err = |source| AttachError::Link {
            probe: probe_name.to_string(),
            source,
        };
        match self.mode {
            Mode::Perf => {
                let mut links = Vec::new();
                let mut refused = Vec::new();
                for &s in slots {
                    match self.link_perf(s) {
                        Ok(mut l) => links.append(&mut l),
                        Err(e) => refused.push((s, e)),
                    }
                }
                if links.is_empty() {
                    if let Some((_, e)) = refused.first() {
                        return Err(link_err(e.clone()));
                    }
                }
                Ok((links, refused))
            }
            Mode::Multi { .. } => match self.link_multi(slots) {
                Ok(links) => Ok((links, Vec::new())),
                Err(e) if e.errno() == libc::EOPNOTSUPP => Err(link_err(e)),
                Err(batch_error) => {
                    // Find the refused offsets: each alone, then the rest together.
                    let mut refused = Vec::new();
                    for &s in slots {
                        match self.link_multi(&[s]) {
                            Ok(probe_links) => drop_concurrently(probe_links),
                            Err(e) => refused.push((s, e)),
                        }
                    }
                    let good = without(slots, &refused);
                    if good.is_empty() {
                        return Err(link_err(
                            refused
                                .first()
                                .map(|(_, e)| e.clone())
                                .unwrap_or(batch_error),
                        ));
                    }
                    let links = self.link_multi(&good).map_err(link_err)?;
                    Ok((links, refused))
                }
            },
        }
    }

    /// One uprobe_multi link per program for these slots (entry before
    /// return: a return without its entry is only counted as missed).
    fn link_multi(&self, slots: &[SlotId]) -> Result<Vec<(&'static str, Link)>, LinkError> {
        let pid = match self.mode {
            Mode::Multi { pid_scoped: true } => self.pid as i32,
            _ => -1,
        };
        let mut batches = Vec::new();
        for (name, retprobe, measure) in [
            (ENTER, false, Measure::Latency),
            (RETURN, true, Measure::Latency),
            (COUNT, false, Measure::Count),
        ] {
            let mine: Vec<&Slot> = slots
                .iter()
                .map(|&s| &self.slots[s.index()])
                .filter(|s| s.measure == measure)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let opts = libbpf_rs::UprobeMultiOpts {
                offsets: mine.iter().map(|s| s.symbol.file_offset as usize).collect(),
                cookies: mine.iter().map(|s| s.cookie).collect(),
                retprobe,
                ..Default::default()
            };
            batches.push((name, opts));
        }
        self.link_each(batches, |p, opts| {
            p.attach_uprobe_multi_with_opts(pid, &self.binary, "", opts.clone())
        })
    }

    /// Perf-event links of one slot (all processes of the binary: a
    /// perf uprobe scoped to a PID is scoped to that one thread, and missed
    /// every connection thread MySQL 5.6 created later).
    fn link_perf(&self, slot: SlotId) -> Result<Vec<(&'static str, Link)>, LinkError> {
        let s = &self.slots[slot.index()];
        let programs: &[(&'static str, bool)] = match s.measure {
            Measure::Count => &[(COUNT, false)],
            Measure::Latency => &[(ENTER, false), (RETURN, true)],
        };
        let points = programs.iter().map(|&(name, retprobe)| {
            let opts = UprobeOpts {
                cookie: s.cookie,
                retprobe,
                ..Default::default()
            };
            (name, opts)
        });
        self.link_each(points, |p, opts| {
            p.attach_uprobe_with_opts(
                -1,
                &self.binary,
                s.symbol.file_offset as usize,
                opts.clone(),
            )
        })
    }

    /// Attaches program by program (each try paced by `retry`); on the
    /// first refusal detaches what it attached and returns the refusal, so
    /// a slot or batch is all in or all out.
    fn link_each<T>(
        &self,
        items: impl IntoIterator<Item = (&'static str, T)>,
        attach: impl Fn(&libbpf_rs::ProgramMut<'_>, &T) -> libbpf_rs::Result<Link>,
    ) -> Result<Vec<(&'static str, Link)>, LinkError> {
        let mut links = Vec::new();
        for (name, arg) in items {
            let link = retry(|| {
                let program = self.program(name)?;
                attach(&program, &arg).map_err(|e| LinkError::from_libbpf(&e))
            });
            match link {
                Ok(l) => links.push((name, l)),
                Err(e) => {
                    drop_concurrently(links);
                    return Err(e);
                }
            }
        }
        Ok(links)
    }

    fn program(&self, name: &'static str) -> Result<libbpf_rs::ProgramMut<'_>, LinkError> {
        self.object
            .progs_mut()
            .find(|p| p.name() == name)
            .ok_or(LinkError(crate::attach::errno::explain(libc::ENOENT)))
    }

    fn map(&self, name: &'static str) -> Option<libbpf_rs::Map<'_>> {
        self.object.maps().find(|m| m.name() == name)
    }

    /// Switches the given slots off at once in BPF and detaches their
    /// probes' links off the caller's thread; their counts so far stay in
    /// the maps. Links go per probe: every probe with a slot here.
    pub fn suspend(&mut self, slots: &[SlotId]) {
        if slots.is_empty() {
            return;
        }
        self.set_enabled(slots, false);
        let (off, pending) = self.take_links(slots);
        if off.is_empty() {
            return;
        }
        self.info.governor_switches += 1;
        if self.reaper.is_none() {
            self.reaper = Reaper::spawn();
        }
        let done = |pending: &[std::sync::Arc<std::sync::atomic::AtomicU32>]| {
            for p in pending {
                p.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        };
        match &self.reaper {
            Some(r) => {
                if let Err(unsent) = r.tx.send((std::time::Instant::now(), off, pending)) {
                    let (_, links, pending) = unsent.0;
                    drop(links);
                    done(&pending);
                }
            }
            None => {
                drop_concurrently(off);
                done(&pending);
            }
        }
    }

    /// Whether any of `slots`' groups still has links being detached (it
    /// is not re-attached until they are: see [`LinkGroup::pending`]).
    pub fn detaching(&self, slots: &[SlotId]) -> bool {
        self.groups.iter().any(|g| {
            g.slots.iter().any(|s| slots.contains(s))
                && g.pending.load(std::sync::atomic::Ordering::Acquire) > 0
        })
    }

    /// How long each switch-off handed to the detach thread since the
    /// last call took to be detached, in order.
    pub fn detach_times(&self) -> Vec<std::time::Duration> {
        self.reaper
            .as_ref()
            .and_then(|r| r.took.lock().ok().map(|mut t| std::mem::take(&mut *t)))
            .unwrap_or_default()
    }

    /// The links of every group holding one of `slots`, returns first, and
    /// those groups' pending-detach counters (each counted once more).
    #[allow(clippy::type_complexity)]
    fn take_links(
        &mut self,
        slots: &[SlotId],
    ) -> (
        Vec<(&'static str, Link)>,
        Vec<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    ) {
        let mut off = Vec::new();
        let mut pending = Vec::new();
        for g in self
            .groups
            .iter_mut()
            .filter(|g| g.slots.iter().any(|s| slots.contains(s)) && !g.links.is_empty())
        {
            off.append(&mut g.links);
            g.pending.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            pending.push(std::sync::Arc::clone(&g.pending));
        }
        off.sort_by_key(|(p, _)| if *p == RETURN { 0 } else { 1 });
        (off, pending)
    }

    /// Re-attaches suspended slots (their whole probes); a probe the kernel
    /// now refuses stays off.
    pub fn resume(&mut self, slots: &[SlotId]) -> Result<(), AttachError> {
        let mut error = None;
        let groups: Vec<usize> = (0..self.groups.len())
            .filter(|&g| {
                self.groups[g].links.is_empty()
                    && self.groups[g].slots.iter().any(|s| slots.contains(s))
            })
            .collect();
        for g in groups {
            let group_slots = self.groups[g].slots.clone();
            let links = match self.mode {
                Mode::Multi { .. } => self.link_multi(&group_slots),
                Mode::Perf => {
                    let mut all = Vec::new();
                    let mut res = Ok(());
                    for &s in &group_slots {
                        match self.link_perf(s) {
                            Ok(mut l) => all.append(&mut l),
                            Err(e) => {
                                res = Err(e);
                                break;
                            }
                        }
                    }
                    res.map(|()| all)
                }
            };
            match links {
                Ok(l) => {
                    self.groups[g].links = l;
                    self.info.governor_switches += 1;
                }
                Err(source) => {
                    let probe = self.groups[g].probe;
                    error = Some(AttachError::Link {
                        probe: format!("probe #{probe}"),
                        source,
                    });
                }
            }
        }
        // All on together once attached, when the governor starts their on-time.
        self.set_enabled(slots, true);
        error.map_or(Ok(()), Err)
    }

    /// Where the target's thread-role markers are, before any probe fires
    /// (a thread's role is found at its first hit). A range the map
    /// refuses is left out: its threads' role is then unknown.
    fn set_role_ranges(&mut self, ranges: &[crate::bpf::abi::RoleRange]) {
        let Some(map) = self.map(bpf::maps::ROLE_RANGES) else {
            return;
        };
        for (i, r) in ranges
            .iter()
            .take(crate::bpf::abi::MAX_ROLE_RANGES)
            .enumerate()
        {
            let _ = map.update(
                &(i as u32).to_ne_bytes(),
                bytemuck::bytes_of(r),
                MapFlags::ANY,
            );
        }
    }

    /// Tells the probes of `slot` where its latch's exclusive holder is.
    fn set_holder(&mut self, slot: SlotId, field: crate::bpf::abi::HolderField) {
        if let Some(map) = self.map(bpf::maps::HOLDER_AT) {
            let _ = map.update(&slot.key(), bytemuck::bytes_of(&field), MapFlags::ANY);
        }
    }

    /// Tells the probes of `slot` where its latch records the exclusive
    /// holder's lock site (read on the object the holder is read on).
    fn set_holder_site(&mut self, slot: SlotId, field: crate::bpf::abi::CreatedField) {
        if let Some(map) = self.map(bpf::maps::HOLDER_SITE_AT) {
            let _ = map.update(&slot.key(), bytemuck::bytes_of(&field), MapFlags::ANY);
        }
    }

    /// Tells the probes of `slot` where its latch's creation site is;
    /// false if the map refused (then the cookie does not ask for it).
    fn set_created(&mut self, slot: SlotId, field: crate::bpf::abi::CreatedField) -> bool {
        let Some(map) = self.map(bpf::maps::CREATED_AT) else {
            return false;
        };
        map.update(&slot.key(), bytemuck::bytes_of(&field), MapFlags::ANY)
            .is_ok()
    }

    /// Takes the stack of one hit in N at each slot (0: none, 1: every
    /// hit): the governor's first lever, switched in BPF at once, with no
    /// uprobe attached or detached. Counts stay exact on every hit.
    pub fn set_stack_every(&mut self, slots: &[(SlotId, u32)]) {
        let Some(map) = self.map(bpf::maps::STACK_EVERY) else {
            return;
        };
        for &(slot, n) in slots {
            let _ = map.update(&slot.key(), &n.to_ne_bytes(), MapFlags::ANY);
        }
    }

    fn open_alarm(&self) -> Option<libbpf_rs::RingBuffer<'static>> {
        let map = self.map(bpf::maps::WAKES)?;
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        // The record says which CPU rang; that it rang is all that matters.
        builder.add(&map, |_| 0).ok()?;
        builder.build().ok()
    }

    /// Arms the governor's alarm: it rings (`alarm_fd` becomes readable)
    /// once some CPU has taken `hits_per_cpu` more hits (counted calls and
    /// hits on slots switched off); 0 disarms it. One write for all CPUs.
    pub fn arm_alarm(&self, hits_per_cpu: u64) {
        let Some(map) = self.map(bpf::maps::WAKE_LEFT) else {
            return;
        };
        let Ok(cpus) = crate::bpf::percpu::possible_cpus() else {
            return;
        };
        let left = i64::try_from(hits_per_cpu).unwrap_or(i64::MAX);
        let values = vec![left.to_ne_bytes().to_vec(); cpus];
        let _ = map.update_percpu(&0u32.to_ne_bytes(), &values, MapFlags::ANY);
    }

    /// A descriptor readable when the alarm has rung and
    /// [`Self::take_alarm`] has not been called since (a duplicate of the
    /// ring buffer's: the caller owns it); None without an alarm.
    pub fn alarm_fd(&self) -> Option<OwnedFd> {
        self.alarm.as_ref()?;
        let map = self.map(bpf::maps::WAKES)?;
        std::os::fd::AsFd::as_fd(&map).try_clone_to_owned().ok()
    }

    /// Whether the alarm rang since the last call (and quiets it). No
    /// syscall: the ring buffer's positions are mapped.
    pub fn take_alarm(&self) -> bool {
        self.alarm
            .as_ref()
            .is_some_and(|ring| ring.consume_raw() > 0)
    }

    /// Sets the slots' flag in the `enabled` map (a slot counts only while on).
    fn set_enabled(&mut self, slots: &[SlotId], on: bool) {
        let Some(map) = self.map(bpf::maps::ENABLED) else {
            return;
        };
        for &slot in slots {
            let _ = map.update(&slot.key(), &u32::from(on).to_ne_bytes(), MapFlags::ANY);
        }
    }

    /// The loaded object, for [`crate::collect`]'s readers.
    pub(crate) fn object(&self) -> &Object {
        &self.object
    }

    /// How many slots the session planned (map keys run 0..this).
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The kernel's run statistics of the three programs (zero where the
    /// kernel keeps none: statistics could not be switched on).
    pub fn run_stats(&self) -> RunStats {
        let runs = |name| {
            self.object
                .progs()
                .find(|p| p.name() == name)
                .and_then(|p| crate::bpf::run_stats::of_program(p.as_fd().as_raw_fd()))
                .unwrap_or_default()
        };
        RunStats {
            enter: runs(ENTER),
            ret: runs(RETURN),
            count: runs(COUNT),
        }
    }

    /// Detaches return probes first, then entry probes, so no entry is
    /// recorded whose return can no longer be seen. Idempotent; the time
    /// it took is in `info.detach_ms`.
    pub fn detach(&mut self) {
        let all: Vec<SlotId> = (0..self.slots.len()).map(SlotId::of_index).collect();
        let (links, _) = self.take_links(&all);
        if links.is_empty() && self.reaper.is_none() {
            return;
        }
        let started = Instant::now();
        drop_concurrently(links);
        if let Some(r) = self.reaper.take() {
            r.finish();
        }
        self.info.detach_ms += started.elapsed().as_secs_f64() * 1e3;
    }

    pub fn attached_links(&self) -> usize {
        self.groups.iter().map(|g| g.links.len()).sum()
    }
}

/// `slots` less the refused ones.
fn without(slots: &[SlotId], refused: &[(SlotId, LinkError)]) -> Vec<SlotId> {
    slots
        .iter()
        .copied()
        .filter(|s| !refused.iter().any(|(r, _)| r == s))
        .collect()
}

/// Tries again while the kernel says "busy" (a concurrent teardown, an
/// interrupted call), as `attach_errno::retry_delay` paces it.
fn retry<T>(mut f: impl FnMut() -> Result<T, LinkError>) -> Result<T, LinkError> {
    // Retries are numbered from 1 (`retry_delay` gives none for 0: it
    // began at 0 here, and no transient failure was ever tried again).
    let mut attempt = 1;
    loop {
        match f() {
            Err(e) => match crate::attach::errno::retry_delay(e.errno(), attempt) {
                Some(wait) => {
                    std::thread::sleep(wait);
                    attempt += 1;
                }
                None => return Err(e),
            },
            ok => return ok,
        }
    }
}

/// What a symbol of a probe measures: inline code has no return of its
/// own, so it is counted only.
fn slot_measure(planned: &PlannedProbe, symbol: &ResolvedSymbol) -> Measure {
    if symbol.table == SymbolTable::DwarfInline {
        Measure::Count
    } else {
        planned.spec.measure
    }
}

/// Opens the object, sets the read-only configuration and map sizes, makes
/// the programs uprobe_multi programs in that mode, and loads it.
/// The latency object, its per-slot maps sized for `slots` slots: the
/// kernel allocates and zeroes arrays whole, per CPU for the per-CPU ones,
/// and at the compiled MAX_SLOTS (4,096) the statistics and stack-hold
/// arrays were ~6 MB per load on 2 CPUs, ~15 ms of CPU at every start,
/// for the ~20 slots of the default probe set.
///
/// Only the programs some slot's measure needs are loaded: the verifier
/// takes a few ms per program at every start (the default set counts
/// nothing, so `count_hit` is left out).
fn load_object(
    opts: &SessionOptions,
    mode: Mode,
    slots: usize,
    measures: &[Measure],
) -> Result<Object, AttachError> {
    let slots = slots.clamp(1, crate::bpf::abi::MAX_SLOTS) as u32;
    let mut builder = ObjectBuilder::default();
    let mut open = builder
        .open_memory(LATENCY_OBJ)
        .map_err(AttachError::Open)?;
    for mut map in open.maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if name.ends_with(".rodata") {
            let data = map
                .initial_value_mut()
                .ok_or(AttachError::Missing(".rodata"))?;
            write_rodata(data, bpf::globals::TARGET_TGID, &opts.pid.to_ne_bytes())?;
            write_rodata(
                data,
                bpf::globals::CAPTURE_STACKS,
                &[u8::from(opts.capture_stacks)],
            )?;
            write_rodata(
                data,
                bpf::globals::STACK_INTERVAL_NS,
                &opts.stack_interval_ns.to_ne_bytes(),
            )?;
            write_rodata(data, bpf::globals::STACK_SEED, &random_u64().to_ne_bytes())?;
            write_rodata(data, bpf::globals::THD, bytemuck::bytes_of(&opts.thd))?;
            write_rodata(
                data,
                bpf::globals::CONNECTION_ROLE,
                &crate::plan::thread_role::connection_role_id().to_ne_bytes(),
            )?;
            continue;
        }
        let size = match name.as_str() {
            bpf::maps::STACKS | bpf::maps::STACK_COUNTS => opts.limits.stacks,
            bpf::maps::SITE_STATS => opts.limits.callsites,
            bpf::maps::STATS
            | bpf::maps::STACK_HOLD
            | bpf::maps::ENABLED
            | bpf::maps::STACK_EVERY
            | bpf::maps::CREATED_AT
            | bpf::maps::HOLDER_AT
            | bpf::maps::HOLDER_SITE_AT => Some(slots),
            _ => None,
        };
        if let Some(n) = size {
            map.set_max_entries(n).map_err(AttachError::Open)?;
        }
    }
    for mut prog in open.progs_mut() {
        let needed = match prog.name().to_str() {
            Some(ENTER | RETURN) => measures.contains(&Measure::Latency),
            Some(COUNT) => measures.contains(&Measure::Count),
            _ => true,
        };
        if !needed {
            prog.set_autoload(false);
        } else if matches!(mode, Mode::Multi { .. }) {
            prog.set_attach_type(ProgramAttachType::TraceUprobeMulti);
        }
    }
    open.load().map_err(AttachError::Load)
}

/// A random key for the stack hash, so that no target can make two of
/// its stacks merge (the kernel's entropy; 0 only if it fails).
fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == 8 {
        u64::from_ne_bytes(buf)
    } else {
        0
    }
}

/// Writes a `const volatile` global of the object into its .rodata image.
fn write_rodata(data: &mut [u8], name: &'static str, value: &[u8]) -> Result<(), AttachError> {
    crate::bpf::abi::write_rodata(LATENCY_OBJ, data, name, value).ok_or(AttachError::Missing(name))
}

/// Detaches the links of switched-off slots, each on its own thread, all
/// at once. Their programs already return at once (the slots' flags are
/// off: an entry records nothing, a return finds no entry), so no order is
/// needed; and each detach removes its breakpoints before it waits for its
/// RCU grace period. Dropped returns first (as [`drop_concurrently`]
/// does), the entry breakpoints stayed for the returns' grace period: on
/// S1 (12 s), 214,203 hits after switch-offs on MariaDB 10.2.11 (2.66 % of
/// a core) and 32,068-329,074 on 11.4.5; all at once, 66,357 and 4,183.
fn drop_at_once(links: Vec<(&'static str, Link)>) {
    std::thread::scope(|scope| {
        for (_, link) in links {
            // Out of threads, the closure (and the link in it) is dropped
            // right here, detaching on this thread instead.
            let _ = std::thread::Builder::new().spawn_scoped(scope, move || drop(link));
        }
    });
}

/// Detaches links, each on its own thread: the RCU grace periods each
/// detach waits for then overlap. Return links are all detached before
/// any entry link.
fn drop_concurrently(links: Vec<(&'static str, Link)>) {
    let (returns, entries): (Vec<_>, Vec<_>) = links.into_iter().partition(|(p, _)| *p == RETURN);
    for group in [returns, entries] {
        std::thread::scope(|scope| {
            for (_, link) in group {
                // Out of threads, the closure (and the link in it) is
                // dropped right here, detaching on this thread instead.
                let _ = std::thread::Builder::new().spawn_scoped(scope, move || drop(link));
            }
        });
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The ring buffer's mappings before the map's object.
        self.alarm = None;
        self.detach();
    }
}

/// Where a slot's latch records its holder, whether its waits look for
/// the release that ended them, and whether its hits are such releases;
/// None when none of these applies.
fn holder_field(
    plan: &[PlannedProbe],
    planned: &PlannedProbe,
    symbol: &crate::resolve::ResolvedSymbol,
    latch_plan: Option<(
        &crate::plan::catalog::LatchSpec,
        &crate::plan::probeset::LatchPlan,
    )>,
) -> Option<crate::bpf::abi::HolderField> {
    use crate::bpf::abi::{HolderField, WOKEN_BY_MEMBER, WOKEN_BY_OBJECT};
    let mut field = HolderField::default();
    if let Some((spec, latch)) = latch_plan {
        field.arg = spec.arg;
        if let Some(f) = latch.layout.holders.get(&symbol.address) {
            field.thread_off = f.thread_offset;
            field.valid_off = f.valid_offset;
            field.valid_size = f.valid_size;
            field.nonpositive = u8::from(f.valid_nonpositive);
        }
        // Only when the release's probe is attached with this one.
        let waker_planned = spec.woken_by.as_deref().is_some_and(|by| {
            plan.iter()
                .any(|p| p.spec.name == by && p.spec.wake.is_some())
        });
        if waker_planned {
            match spec.woken_key {
                None => field.woken = WOKEN_BY_OBJECT,
                Some(_) => {
                    if let Some(off) = latch.layout.woken.get(&symbol.address) {
                        field.woken = WOKEN_BY_MEMBER;
                        field.woken_off = *off;
                    }
                }
            }
        }
    }
    if symbol.clone.is_none() {
        if let Some(w) = planned.spec.wake {
            field.waker_arg = w.arg;
        }
    }
    (field.valid_size != 0 || field.woken != 0 || field.waker_arg != 0).then_some(field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::errno::{explain, ATTEMPTS};

    fn failing(
        errno: i32,
        times: u32,
    ) -> (
        impl FnMut() -> Result<u32, LinkError>,
        std::rc::Rc<std::cell::Cell<u32>>,
    ) {
        let calls = std::rc::Rc::new(std::cell::Cell::new(0));
        let seen = std::rc::Rc::clone(&calls);
        let f = move || {
            seen.set(seen.get() + 1);
            if seen.get() <= times {
                Err(LinkError(explain(errno)))
            } else {
                Ok(seen.get())
            }
        };
        (f, calls)
    }

    #[test]
    fn a_busy_attach_is_tried_again_until_it_succeeds() {
        let (f, calls) = failing(libc::EBUSY, 2);
        assert_eq!(retry(f).unwrap(), 3);
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn a_busy_attach_gives_up_after_its_attempts() {
        let (f, calls) = failing(libc::EBUSY, ATTEMPTS + 5);
        assert_eq!(retry(f).unwrap_err().errno(), libc::EBUSY);
        assert_eq!(calls.get(), ATTEMPTS);
    }

    #[test]
    fn a_refusal_is_not_tried_again() {
        let (f, calls) = failing(libc::EINVAL, 1);
        assert_eq!(retry(f).unwrap_err().errno(), libc::EINVAL);
        assert_eq!(calls.get(), 1);
    }
}
