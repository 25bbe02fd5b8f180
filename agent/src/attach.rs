//! Loading the BPF object and attaching it to resolved symbols, with
//! detach on every path (explicit `detach()`, drop, or process death:
//! every link is a perf-event fd, so the kernel removes the uprobes when
//! the fds close, even after SIGKILL).

use std::num::NonZeroU32;
use std::path::Path;

use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope};
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};
use serde::Serialize;

use crate::bpf_abi::LATENCY_OBJ;
use crate::catalog::{Measure, ProbeSpec};
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
}

/// One attached symbol. Its index in `Session::slots` is the BPF cookie.
#[derive(Debug, Clone)]
pub struct Slot {
    pub probe: usize,
    pub symbol: ResolvedSymbol,
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
    links: Vec<(&'static str, UProbeLinkId)>,
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

        let mut session = Self {
            ebpf,
            slots: Vec::new(),
            outcomes: vec![AttachOutcome::default(); plan.len()],
            links: Vec::new(),
        };
        let scope = UProbeScope::OneProcess(
            NonZeroU32::new(opts.pid).expect("pid checked non-zero by Target"),
        );
        for (probe_idx, planned) in plan.iter().enumerate() {
            for symbol in &planned.resolution.symbols {
                // A clone (.constprop, .isra) may have dropped or moved
                // arguments: never read call-site registers there.
                let site_args = planned
                    .spec
                    .callsite
                    .filter(|_| symbol.clone.is_none())
                    .map(|c| (c.file_arg, c.line_arg));
                let cookie = crate::bpf_abi::cookie(session.slots.len() as u32, site_args);
                // Inline code has no return of its own: count only.
                let measure = if symbol.table == SymbolTable::DwarfInline {
                    Measure::Count
                } else {
                    planned.spec.measure
                };
                match session.attach_symbol(binary, measure, symbol, cookie, scope) {
                    Ok(()) => {
                        session.slots.push(Slot {
                            probe: probe_idx,
                            symbol: symbol.clone(),
                        });
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

    fn attach_symbol(
        &mut self,
        binary: &Path,
        measure: Measure,
        symbol: &ResolvedSymbol,
        cookie: u64,
        scope: UProbeScope,
    ) -> Result<(), aya::programs::ProgramError> {
        let point = || UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(symbol.file_offset),
            cookie: Some(cookie),
        };
        match measure {
            Measure::Count => {
                let id = program(&mut self.ebpf, COUNT).expect("loaded").attach(
                    point(),
                    binary,
                    scope,
                )?;
                self.links.push((COUNT, id));
            }
            Measure::Latency => {
                // Entry first: a return without its entry is only counted as missed.
                let enter = program(&mut self.ebpf, ENTER).expect("loaded").attach(
                    point(),
                    binary,
                    scope,
                )?;
                self.links.push((ENTER, enter));
                match program(&mut self.ebpf, RETURN).expect("loaded").attach(
                    point(),
                    binary,
                    scope,
                ) {
                    Ok(ret) => self.links.push((RETURN, ret)),
                    Err(e) => {
                        let (name, id) = self.links.pop().expect("just pushed");
                        let _ = program(&mut self.ebpf, name).expect("loaded").detach(id);
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Detaches return probes first, then entry probes, so no entry is
    /// recorded whose return can no longer be seen. Idempotent.
    pub fn detach(&mut self) {
        let mut links = std::mem::take(&mut self.links);
        links.sort_by_key(|(name, _)| if *name == RETURN { 0 } else { 1 });
        for (name, id) in links {
            if let Ok(p) = program(&mut self.ebpf, name) {
                let _ = p.detach(id);
            }
        }
    }

    pub fn attached_links(&self) -> usize {
        self.links.len()
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
