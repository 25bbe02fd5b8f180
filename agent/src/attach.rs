//! Loading the BPF object and attaching it to resolved symbols, with
//! detach on every path (explicit `detach()`, drop, or process death:
//! every link is a perf-event fd, so the kernel removes the uprobes when
//! the fds close, even after SIGKILL).

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use aya::programs::uprobe::{
    UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeLinkId, UProbeScope,
};
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};
use serde::Serialize;

use crate::bpf_abi::LATENCY_OBJ;
use crate::catalog::{CostClass, Measure, ProbeSpec};
use crate::resolve::latch::LatchLayout;
use crate::resolve::{Resolution, ResolvedSymbol, SymbolTable};

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("loading the BPF object failed: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("BPF program {name} failed to load (verifier or permissions): {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("no probe could be attached: {0}")]
    NothingAttached(String),
    #[error("BPF program `{0}` missing from the object")]
    MissingProgram(&'static str),
}

const ENTER: &str = "lat_enter";
const RETURN: &str = "lat_return";
const COUNT: &str = "count_hit";

/// A probe as planned: what the catalog asked for and what resolved.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedProbe {
    pub spec: ProbeSpec,
    pub resolution: Resolution,
    /// Where each symbol's latch id is, for probes whose spec names latches.
    pub latch: Option<LatchPlan>,
}

/// The latch layout found for a probe, or why none was.
#[derive(Debug, Clone, Serialize)]
pub struct LatchPlan {
    pub layout: LatchLayout,
    /// Set when no symbol's latch could be located (no DWARF, no member).
    pub unavailable: Option<String>,
}

/// One attached symbol. Its index in `Session::slots` is the BPF cookie.
#[derive(Debug, Clone)]
pub struct Slot {
    pub probe: usize,
    pub symbol: ResolvedSymbol,
    /// How it is attached (inline sites count even in a timed probe).
    pub measure: Measure,
    pub cookie: u64,
}

/// One kernel link of a slot (a timed slot has an entry and a return link).
struct Link {
    slot: usize,
    program: &'static str,
    id: UProbeLinkId,
}

/// What happened to each planned probe.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AttachOutcome {
    pub attached_symbols: usize,
    /// Per symbol: the kernel's refusal, if any.
    pub failures: Vec<(String, String)>,
}

pub struct Session {
    ebpf: Ebpf,
    pub slots: Vec<Slot>,
    pub outcomes: Vec<AttachOutcome>,
    links: Vec<Link>,
    binary: PathBuf,
    scope: UProbeScope,
    /// Detaches suspended links off the caller's thread (see `suspend`).
    reaper: Option<Reaper>,
}

/// A thread that drops (detaches) links handed to it, in order. A uprobe
/// detach waits for an RCU grace period — hundreds of ms on a busy host —
/// which the governor's timing loop must not wait for.
struct Reaper {
    tx: std::sync::mpsc::Sender<Vec<(&'static str, UProbeLink)>>,
    thread: std::thread::JoinHandle<()>,
}

impl Reaper {
    fn spawn() -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<(&'static str, UProbeLink)>>();
        let thread = std::thread::Builder::new()
            .name("innoprof-detach".into())
            .spawn(move || {
                for batch in rx {
                    drop_concurrently(batch);
                }
            })
            .ok()?;
        Some(Self { tx, thread })
    }

    /// Waits until every link handed over so far is detached.
    fn finish(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

pub struct SessionOptions {
    pub pid: u32,
    pub capture_stacks: bool,
    pub limits: MapLimits,
}

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

impl Session {
    /// Loads the programs and attaches every resolved symbol of every probe.
    /// Individual symbol failures are recorded; it fails only if nothing attaches.
    pub fn attach(
        binary: &Path,
        plan: &[PlannedProbe],
        opts: &SessionOptions,
    ) -> Result<Self, AttachError> {
        let stacks: u8 = opts.capture_stacks.into();
        let mut loader = EbpfLoader::new();
        loader
            .override_global("target_tgid", &opts.pid, true)
            .override_global("capture_stacks", &stacks, true);
        if let Some(n) = opts.limits.stacks {
            loader
                .map_max_entries("stacks", n)
                .map_max_entries("stack_counts", n);
        }
        if let Some(n) = opts.limits.callsites {
            loader.map_max_entries("site_stats", n);
        }
        let mut ebpf = loader.load(LATENCY_OBJ)?;
        for name in [ENTER, RETURN, COUNT] {
            program(&mut ebpf, name)?
                .load()
                .map_err(|source| AttachError::Program { name, source })?;
        }

        // Every process mapping the binary gets the breakpoint; the BPF
        // programs keep only the target's hits (`target_tgid`). A uprobe
        // scoped to the PID missed every hit in threads MySQL 5.6.24 created
        // per connection with thread_cache_size=0 (0 of 20,000 row ids; S2).
        let _ = NonZeroU32::new(opts.pid).expect("pid checked non-zero by Target");
        let scope = UProbeScope::AllProcesses;
        let mut session = Self {
            ebpf,
            slots: Vec::new(),
            outcomes: vec![AttachOutcome::default(); plan.len()],
            links: Vec::new(),
            binary: binary.to_path_buf(),
            scope,
            reaper: None,
        };
        // Hot probes last: whatever attaches first fires while the rest
        // attach (tens of ms each), before the governor is watching.
        let mut order: Vec<usize> = (0..plan.len()).collect();
        order.sort_by_key(|&i| plan[i].spec.cost == CostClass::Hot);
        for probe_idx in order {
            let planned = &plan[probe_idx];
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
                    Some(crate::bpf_abi::LatchArg {
                        arg: spec.arg,
                        offset: field.offset,
                        size: field.size,
                    })
                });
                let created = latch_plan.and_then(|(spec, plan)| {
                    let f = plan.layout.created.get(&symbol.address)?;
                    Some(crate::bpf_abi::CreatedField {
                        file_off: f.file_offset,
                        line_off: f.line_offset,
                        arg: spec.arg,
                        line_size: f.line_size,
                        line_shift: f.line_shift,
                        line_bits: f.line_bits,
                        pad: 0,
                    })
                });
                let index = session.slots.len();
                let created = created.is_some_and(|f| session.set_created(index, f));
                let cookie = crate::bpf_abi::cookie(index as u32, site_args, latch, created);
                // Inline code has no return of its own: count only.
                let measure = if symbol.table == SymbolTable::DwarfInline {
                    Measure::Count
                } else {
                    planned.spec.measure
                };
                let slot = Slot {
                    probe: probe_idx,
                    symbol: symbol.clone(),
                    measure,
                    cookie,
                };
                // On before the links go in, so no hit of a fresh link is lost.
                session.set_enabled(&[index], true);
                // Every hit's stack until the governor says otherwise.
                session.set_stack_every(&[(index, u32::from(opts.capture_stacks))]);
                match session.attach_slot(index, &slot) {
                    Ok(()) => {
                        session.slots.push(slot);
                        session.outcomes[probe_idx].attached_symbols += 1;
                    }
                    Err(e) => session.outcomes[probe_idx]
                        .failures
                        .push((symbol.name.clone(), e.to_string())),
                }
            }
        }
        if session.slots.is_empty() {
            let why: Vec<String> = session
                .outcomes
                .iter()
                .flat_map(|o| o.failures.iter().map(|(s, e)| format!("{s}: {e}")))
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

    fn attach_slot(
        &mut self,
        index: usize,
        slot: &Slot,
    ) -> Result<(), aya::programs::ProgramError> {
        let point = || UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(slot.symbol.file_offset),
            cookie: Some(slot.cookie),
        };
        let (binary, scope) = (self.binary.clone(), self.scope);
        let programs: &[&'static str] = match slot.measure {
            Measure::Count => &[COUNT],
            // Entry first: a return without its entry is only counted as missed.
            Measure::Latency => &[ENTER, RETURN],
        };
        for (i, &name) in programs.iter().enumerate() {
            match program(&mut self.ebpf, name)
                .expect("loaded")
                .attach(point(), &binary, scope)
            {
                Ok(id) => self.links.push(Link {
                    slot: index,
                    program: name,
                    id,
                }),
                Err(e) => {
                    for _ in 0..i {
                        let link = self.links.pop().expect("just pushed");
                        let _ = program(&mut self.ebpf, link.program)
                            .expect("loaded")
                            .detach(link.id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Detaches the given slots (a duty-cycled probe's off phase) without
    /// waiting for the kernel to finish; their counts so far stay in the
    /// maps. Return links go first, as in `detach`.
    pub fn suspend(&mut self, slots: &[usize]) {
        if slots.is_empty() {
            return;
        }
        // Off at once in BPF; the kernel detach that follows is slow.
        self.set_enabled(slots, false);
        let off = self.take_links(slots);
        if self.reaper.is_none() {
            self.reaper = Reaper::spawn();
        }
        match &self.reaper {
            Some(r) => {
                if let Err(unsent) = r.tx.send(off) {
                    drop(unsent.0);
                }
            }
            None => drop(off),
        }
    }

    /// Tells the probes of `slot` where its latch's creation site is;
    /// false if the map refused (then the cookie does not ask for it).
    fn set_created(&mut self, slot: usize, field: crate::bpf_abi::CreatedField) -> bool {
        let Some(map) = self.ebpf.map_mut("created_at") else {
            return false;
        };
        let Ok(mut fields) = aya::maps::Array::<_, crate::bpf_abi::CreatedField>::try_from(map)
        else {
            return false;
        };
        fields.set(slot as u32, field, 0).is_ok()
    }

    /// Takes the stack of one hit in N at each slot (0: none, 1: every
    /// hit): the governor's first lever, switched in BPF at once, with no
    /// uprobe attached or detached. Counts stay exact on every hit.
    pub fn set_stack_every(&mut self, slots: &[(usize, u32)]) {
        let Some(map) = self.ebpf.map_mut("stack_every") else {
            return;
        };
        let Ok(mut every) = aya::maps::Array::<_, u32>::try_from(map) else {
            return;
        };
        for &(slot, n) in slots {
            let _ = every.set(slot as u32, n, 0);
        }
    }

    /// Sets the slots' flag in the `enabled` map (a slot counts only while on).
    fn set_enabled(&mut self, slots: &[usize], on: bool) {
        let Some(map) = self.ebpf.map_mut("enabled") else {
            return;
        };
        let Ok(mut flags) = aya::maps::Array::<_, u32>::try_from(map) else {
            return;
        };
        for &slot in slots {
            let _ = flags.set(slot as u32, u32::from(on), 0);
        }
    }

    /// The slots' links, out of the programs, returns first; dropping
    /// them detaches (see `drop_concurrently`).
    fn take_links(&mut self, slots: &[usize]) -> Vec<(&'static str, UProbeLink)> {
        let (mut off, keep): (Vec<Link>, Vec<Link>) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|l| slots.contains(&l.slot));
        self.links = keep;
        off.sort_by_key(|l| if l.program == RETURN { 0 } else { 1 });
        off.into_iter()
            .filter_map(|l| {
                program(&mut self.ebpf, l.program)
                    .ok()
                    .and_then(|p| p.take_link(l.id).ok())
                    .map(|link| (l.program, link))
            })
            .collect()
    }

    /// Re-attaches suspended slots; a slot the kernel now refuses stays off.
    pub fn resume(&mut self, slots: &[usize]) -> Result<(), AttachError> {
        for &i in slots {
            if self.links.iter().any(|l| l.slot == i) {
                continue;
            }
            let slot = self.slots[i].clone();
            self.attach_slot(i, &slot)
                .map_err(|source| AttachError::Program {
                    name: ENTER,
                    source,
                })?;
        }
        // Each attach takes tens of ms: switch them all on together at the
        // end, when the governor starts their on-time.
        self.set_enabled(slots, true);
        Ok(())
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Detaches return probes first, then entry probes, so no entry is
    /// recorded whose return can no longer be seen. Idempotent.
    pub fn detach(&mut self) {
        let all: Vec<usize> = (0..self.slots.len()).collect();
        drop_concurrently(self.take_links(&all));
        if let Some(r) = self.reaper.take() {
            r.finish();
        }
    }

    pub fn attached_links(&self) -> usize {
        self.links.len()
    }
}

/// Detaches links, each on its own thread. A uprobe detach takes ~85 ms on
/// a busy 2-core host (measured) and the kernel serialises much of it, so
/// this mostly keeps the caller from waiting; the `enabled` flag is what
/// switches a slot off at once. Return links are all detached before any
/// entry link.
fn drop_concurrently(links: Vec<(&'static str, UProbeLink)>) {
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
        self.detach();
    }
}

fn program<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut UProbe, AttachError> {
    let prog = ebpf
        .program_mut(name)
        .ok_or(AttachError::MissingProgram(name))?;
    prog.try_into()
        .map_err(|source| AttachError::Program { name, source })
}
