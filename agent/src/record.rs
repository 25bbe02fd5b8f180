//! A recording from start to files: check, resolve, attach, wait (the
//! caller decides how long), collect, detach, write.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::attach::{AttachError, AttachOutcome, MapLimits, PlannedProbe, Session, SessionOptions};
use crate::bpf_abi::{Callsite, SiteVal};
use crate::callsite::CallsiteNamer;
use crate::catalog::{CatalogError, Measure};
use crate::collect::{self, CollectError};
use crate::cpu::{CpuError, CpuOptions, CpuProfiler};
use crate::histogram::Log2Histogram;
use crate::privileges::{self, PrivilegeError};
use crate::probeset::{ProbeRequest, ProbeSet};
use crate::report::folded::FoldedStacks;
use crate::report::model::{
    CallsiteResult, EndReason, ProbeResult, ProbeStatus, StackStats, Summary, SymbolInfo,
    TargetInfo,
};
use crate::report::{self, OutputError};
use crate::resolve::debuginfo::{attach_debug_info, DebugSearch};
use crate::resolve::{ElfError, ElfImage};
use crate::server::ServerInfo;
use crate::symbolize::{ProcessMaps, StackSymbolizer};
use crate::target::{Target, TargetError};

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    Cpu(#[from] CpuError),
    #[error("no probe requested: use --probes default|all|NAME,… or --probe PATTERN")]
    NoProbes,
    #[error("{binary} has none of the symbols the requested probes need:\n{details}")]
    NothingResolved { binary: String, details: String },
}

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub pid: u32,
    /// Profile a process that is not mysqld/mariadbd.
    pub force: bool,
    /// Which probes: `--probes`, `--probe`, `--catalog`.
    pub probes: ProbeRequest,
    /// Where to look for separate debug info of a stripped binary.
    pub debuginfo: DebugSearch,
    pub capture_stacks: bool,
    /// CPU profiling alongside the probes; `None` with `--no-cpu`.
    pub cpu: Option<CpuOptions>,
    /// BPF map capacities (hidden `--max-stacks`/`--max-callsites`).
    pub limits: MapLimits,
}

/// Everything decided before touching the kernel.
#[derive(Debug)]
pub struct Plan {
    pub target: Target,
    pub image: ElfImage,
    pub server: ServerInfo,
    pub catalog_file: Option<String>,
    pub probes: Vec<PlannedProbe>,
    pub cpu: Option<CpuOptions>,
    pub limits: MapLimits,
}

impl Plan {
    /// Checks privileges and the target, reads its binary, picks the catalog
    /// and resolves every requested probe. Changes nothing anywhere.
    pub fn build(opts: &RecordOptions) -> Result<Self, RecordError> {
        privileges::check()?;
        let target = Target::open(opts.pid, opts.force)?;
        let mut image = ElfImage::open(&target.binary)?;
        attach_debug_info(&mut image, &opts.debuginfo)?;
        let server = ServerInfo::detect(&image);
        let set = ProbeSet::resolve(&image, &server, &opts.probes)?;
        set.check_breadth()?;
        if set.probes.is_empty() && opts.cpu.is_none() {
            return Err(RecordError::NoProbes);
        }
        // Nothing resolved: an error when the user named the probes or there
        // is nothing else to record; with the default set and CPU sampling
        // on (a stripped server), record the CPU profile and report why.
        if !set.probes.is_empty()
            && !set.any_resolved()
            && (opts.probes.is_explicit() || opts.cpu.is_none())
        {
            return Err(RecordError::NothingResolved {
                binary: target.exe.display().to_string(),
                details: set.unresolved_report(),
            });
        }
        let ProbeSet {
            catalog_file,
            probes,
        } = set;
        Ok(Self {
            target,
            image,
            server,
            catalog_file,
            probes,
            cpu: opts.cpu.clone(),
            limits: opts.limits,
        })
    }
}

/// Probes attached and counting.
pub struct Recorder {
    plan: Plan,
    /// None with no uprobe probes (`--probes none`).
    session: Option<Session>,
    cpu: Option<CpuProfiler>,
    maps: ProcessMaps,
    started: Instant,
    started_unix_ms: u128,
}

impl Recorder {
    pub fn start(plan: Plan, capture_stacks: bool) -> Result<Self, RecordError> {
        let opts = SessionOptions {
            pid: plan.target.pid,
            capture_stacks,
            limits: plan.limits,
        };
        // Plan::build let an all-unresolved set through only for a CPU profile.
        let any_symbol = plan.probes.iter().any(|p| !p.resolution.symbols.is_empty());
        let session = if !any_symbol {
            None
        } else {
            Some(Session::attach(&plan.target.binary, &plan.probes, &opts)?)
        };
        // On failure the session drops here, detaching its probes.
        let cpu = plan
            .cpu
            .as_ref()
            .map(|o| CpuProfiler::start(plan.target.pid, o))
            .transpose()?;
        let maps = ProcessMaps::read(plan.target.pid).unwrap_or_default();
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Ok(Self {
            plan,
            session,
            cpu,
            maps,
            started: Instant::now(),
            started_unix_ms,
        })
    }

    pub fn target(&self) -> &Target {
        &self.plan.target
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn attached_links(&self) -> usize {
        self.session.as_ref().map_or(0, Session::attached_links)
    }

    /// The CPU profiler's perf events and tracepoint links (0 without one).
    pub fn cpu_links(&self) -> usize {
        self.cpu.as_ref().map_or(0, CpuProfiler::attached_links)
    }

    /// Detaches every probe, reads the maps, and builds the results.
    pub fn finish(mut self, end_reason: EndReason) -> Result<Recording, RecordError> {
        let duration_s = self.started.elapsed().as_secs_f64();
        // Detach first: maps read while probes still fire would disagree
        // with each other (per-slot totals vs per-call-site counts).
        if let Some(session) = self.session.as_mut() {
            session.detach();
        }
        let snapshot = match &self.session {
            Some(session) => collect::read(session.ebpf()),
            None => Ok(collect::Snapshot::default()),
        };
        let cpu_raw = self.cpu.take().map(CpuProfiler::stop).transpose();
        let snapshot = snapshot?;
        let cpu_raw = cpu_raw?;
        if self.plan.target.is_alive() {
            // Libraries loaded during the run are in the fresher map.
            if let Ok(m) = ProcessMaps::read(self.plan.target.pid) {
                self.maps = m;
            }
        }

        let plan = &self.plan;
        let slots: &[crate::attach::Slot] = self.session.as_ref().map_or(&[], |s| &s.slots);
        let mut symbolizer = StackSymbolizer::new(self.maps.clone());
        let mut namer = CallsiteNamer::new(plan.target.pid, &plan.image);
        let mut results = Vec::new();
        let mut folded = Vec::new();
        for (idx, planned) in plan.probes.iter().enumerate() {
            // No session when nothing resolved (CPU-only recording).
            let no_failures = AttachOutcome::default();
            let outcome = self
                .session
                .as_ref()
                .map_or(&no_failures, |s| &s.outcomes[idx]);
            let spec = &planned.spec;
            let my_slots: Vec<(u64, &crate::attach::Slot)> = slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.probe == idx)
                .map(|(i, s)| (i as u64, s))
                .collect();

            let mut calls = 0;
            let mut wait_total = 0;
            let mut wait_max = 0;
            let mut hist = Log2Histogram::new(&[0; crate::bpf_abi::HIST_SLOTS]);
            let mut symbols = Vec::new();
            for (slot_id, slot) in &my_slots {
                let st = snapshot.slots.get(slot_id).copied().unwrap_or_default();
                calls += st.calls;
                wait_total += st.wait_ns_total;
                wait_max = wait_max.max(st.wait_ns_max);
                hist.add(&Log2Histogram::new(&st.hist));
                let s = &slot.symbol;
                symbols.push(SymbolInfo {
                    name: s.name.clone(),
                    raw: s.raw.clone(),
                    address: format!("{:#x}", s.address),
                    file_offset: format!("{:#x}", s.file_offset),
                    table: s.table,
                    clone: s.clone.clone(),
                    entry: s.entry,
                    calls: st.calls,
                });
            }

            let (status, reason) = if !my_slots.is_empty() {
                let refused = outcome
                    .failures
                    .iter()
                    .map(|(s, e)| format!("{s}: {e}"))
                    .collect::<Vec<_>>();
                (
                    ProbeStatus::Attached,
                    (!refused.is_empty())
                        .then(|| format!("some symbols refused: {}", refused.join("; "))),
                )
            } else if let Some(u) = &planned.resolution.unresolved {
                (ProbeStatus::Unresolved, Some(u.to_string()))
            } else {
                let refused = outcome
                    .failures
                    .iter()
                    .map(|(s, e)| format!("{s}: {e}"))
                    .collect::<Vec<_>>();
                (ProbeStatus::AttachFailed, Some(refused.join("; ")))
            };

            let stacks = if status == ProbeStatus::Attached {
                let stem = report::file_stem(&spec.name);
                let (stats, files) = fold_stacks(
                    &stem,
                    spec.measure,
                    &my_slots,
                    &snapshot.stacks,
                    &mut symbolizer,
                    &mut namer,
                );
                folded.extend(files);
                stats
            } else {
                StackStats::default()
            };

            let timed = spec.measure == Measure::Latency && calls > 0;
            results.push(ProbeResult {
                name: spec.name.clone(),
                description: spec.description.clone(),
                measure: spec.measure,
                cost: spec.cost,
                status,
                reason,
                symbols,
                skipped: planned.resolution.skipped.clone(),
                calls,
                calls_per_sec: if duration_s > 0.0 {
                    calls as f64 / duration_s
                } else {
                    0.0
                },
                wait_ns_total: wait_total,
                wait_ns_max: wait_max,
                wait_ns_avg: timed.then(|| wait_total / calls),
                // A bucket's upper bound can exceed the largest wait seen.
                wait_ns_p50: if timed {
                    hist.quantile_upper_ns(0.5).map(|q| q.min(wait_max))
                } else {
                    None
                },
                wait_ns_p99: if timed {
                    hist.quantile_upper_ns(0.99).map(|q| q.min(wait_max))
                } else {
                    None
                },
                histogram: if spec.measure == Measure::Latency {
                    hist.buckets()
                } else {
                    Vec::new()
                },
                callsites: callsite_results(&my_slots, &snapshot.sites, &mut namer),
                stacks,
            });
        }

        let t = &plan.target;
        let cpu = cpu_raw.map(|raw| raw.symbolize(&mut symbolizer));
        if let Some(c) = &cpu {
            folded.extend(c.files()?);
        }
        let summary = Summary {
            tool: "innoprof",
            tool_version: env!("CARGO_PKG_VERSION"),
            target: TargetInfo {
                pid: t.pid,
                comm: t.comm.clone(),
                binary: t.exe.display().to_string(),
                build_id: plan.image.build_id.clone(),
                server_version: plan.server.version.map(|v| v.to_string()),
                server: plan.server.clone(),
                position_independent: plan.image.position_independent,
                has_symtab: plan.image.has_symtab,
                has_debug_info: plan.image.has_debug_info,
                debug_file: plan
                    .image
                    .debug_file
                    .as_ref()
                    .map(|p| p.display().to_string()),
            },
            catalog: plan.catalog_file.clone(),
            started_unix_ms: self.started_unix_ms,
            duration_s,
            end_reason,
            complete: end_reason == EndReason::Duration,
            probes: results,
            drops: snapshot.drops,
            cpu: cpu.map(|c| c.summary),
        };
        Ok(Recording { summary, folded })
    }
}

/// Call sites of one probe, merged across its symbols, most wait first.
fn callsite_results(
    slots: &[(u64, &crate::attach::Slot)],
    sites: &[(u64, Callsite, SiteVal)],
    namer: &mut CallsiteNamer,
) -> Vec<CallsiteResult> {
    let mut by_label: HashMap<String, CallsiteResult> = HashMap::new();
    for (_, site, val) in sites
        .iter()
        .filter(|(slot, _, _)| slots.iter().any(|(id, _)| id == slot))
    {
        let label = namer.label(*site);
        let entry = by_label
            .entry(label.clone())
            .or_insert_with(|| CallsiteResult {
                site: label,
                file: namer.file(site.file),
                line: site.line,
                calls: 0,
                wait_ns_total: 0,
                wait_ns_max: 0,
            });
        entry.calls += val.calls;
        entry.wait_ns_total += val.wait_ns_total;
        entry.wait_ns_max = entry.wait_ns_max.max(val.wait_ns_max);
    }
    let mut out: Vec<CallsiteResult> = by_label.into_values().collect();
    out.sort_by(|a, b| {
        (b.wait_ns_total, b.calls, &a.site).cmp(&(a.wait_ns_total, a.calls, &b.site))
    });
    out
}

/// Folded stacks of one probe, weighted by wait time and by count.
fn fold_stacks(
    stem: &str,
    measure: Measure,
    slots: &[(u64, &crate::attach::Slot)],
    samples: &[crate::collect::StackSample],
    symbolizer: &mut StackSymbolizer,
    namer: &mut CallsiteNamer,
) -> (StackStats, Vec<(String, String)>) {
    let names: HashMap<u64, &str> = slots
        .iter()
        .map(|(id, s)| (*id, s.symbol.short_name.as_str()))
        .collect();
    let mut by_wait = FoldedStacks::default();
    let mut by_count = FoldedStacks::default();
    let mut stats = StackStats::default();
    for sample in samples.iter().filter(|s| names.contains_key(&s.slot)) {
        let mut frames = if sample.ips.is_empty() {
            stats.lost_calls += sample.count;
            vec!["[lost stack]".to_string()]
        } else {
            stats.distinct += 1;
            // Latency stacks are taken at the return address, in the
            // caller; count stacks at the probed instruction itself.
            symbolizer.frames(&sample.ips, measure == Measure::Count)
        };
        if measure == Measure::Latency {
            frames.push(names[&sample.slot].to_string());
        }
        if sample.site.file != 0 {
            frames.push(format!("[{}]", namer.label(sample.site)));
        }
        by_count.add(&frames, sample.count);
        by_wait.add(&frames, sample.wait_ns);
    }
    let mut files = Vec::new();
    if !by_count.is_empty() {
        let name = format!("{stem}.count.folded");
        files.push((name.clone(), by_count.render()));
        stats.folded_by_count = Some(name);
    }
    if measure == Measure::Latency && !by_wait.is_empty() {
        let name = format!("{stem}.folded");
        files.push((name.clone(), by_wait.render()));
        stats.folded_by_wait = Some(name);
    }
    (stats, files)
}

pub struct Recording {
    pub summary: Summary,
    /// (file name, contents)
    pub folded: Vec<(String, String)>,
}

impl Recording {
    /// Writes every file it can, the summary first (it matters most when
    /// the disk is nearly full); returns the first failure.
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        report::check_dir_still_there(dir)?;
        let json = serde_json::to_vec_pretty(&self.summary).expect("summary serialises");
        let table = report::table::render(&self.summary);
        let files = [
            ("summary.json", json.as_slice()),
            ("summary.txt", table.as_bytes()),
        ]
        .into_iter()
        .chain(self.folded.iter().map(|(n, t)| (n.as_str(), t.as_bytes())));
        let mut first_error = None;
        for (name, bytes) in files {
            if let Err(e) = report::write_file(&dir.join(name), bytes) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
