//! A recording from start to files: check, resolve, attach, wait (the
//! caller decides how long), collect, detach, write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::attach::{AttachError, PlannedProbe, Session, SessionOptions};
use crate::catalog::{Catalog, CatalogError, Measure, ProbeSpec};
use crate::collect::{self, CollectError};
use crate::histogram::Log2Histogram;
use crate::privileges::{self, PrivilegeError};
use crate::report::folded::FoldedStacks;
use crate::report::model::{
    EndReason, ProbeResult, ProbeStatus, StackStats, Summary, SymbolInfo, TargetInfo,
};
use crate::report::{self, OutputError};
use crate::resolve::{ElfError, ElfImage, Resolver};
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
    /// `default`, `all`, or names/globs; `None` when only `--probe` is used.
    pub selection: Option<String>,
    /// Ad-hoc symbol patterns.
    pub ad_hoc: Vec<String>,
    /// Replace the built-in catalog.
    pub catalog: Option<PathBuf>,
    pub capture_stacks: bool,
}

/// Everything decided before touching the kernel.
#[derive(Debug)]
pub struct Plan {
    pub target: Target,
    pub image: ElfImage,
    pub server: ServerInfo,
    pub catalog_file: Option<String>,
    pub probes: Vec<PlannedProbe>,
}

impl Plan {
    /// Checks privileges and the target, reads its binary, picks the catalog
    /// and resolves every requested probe. Changes nothing anywhere.
    pub fn build(opts: &RecordOptions) -> Result<Self, RecordError> {
        privileges::check()?;
        let target = Target::open(opts.pid, opts.force)?;
        let image = ElfImage::open(&target.binary)?;
        let server = ServerInfo::detect(&image);
        let catalog = match &opts.catalog {
            Some(path) => Catalog::from_path(path)?,
            None => Catalog::builtin(),
        };

        let mut specs: Vec<ProbeSpec> = Vec::new();
        let mut catalog_file = None;
        // With only --probe given, no catalog is needed (and none is used).
        let selection = opts
            .selection
            .clone()
            .or_else(|| opts.ad_hoc.is_empty().then(|| "default".to_string()));
        if let Some(selection) = selection {
            let file = catalog
                .for_server(&server)
                .or_else(|| (opts.catalog.is_some()).then(|| &catalog.files[0]))
                .ok_or_else(|| CatalogError::NoCatalog {
                    server: server.to_string(),
                })?;
            catalog_file = Some(file.file.clone());
            specs.extend(file.select(&selection)?);
        }
        specs.extend(opts.ad_hoc.iter().map(|p| ProbeSpec::ad_hoc(p)));
        if specs.is_empty() {
            return Err(RecordError::NoProbes);
        }

        let mut resolver = Resolver::new(&image);
        let probes: Vec<PlannedProbe> = specs
            .into_iter()
            .map(|spec| PlannedProbe {
                resolution: resolver.resolve(&spec.symbols),
                spec,
            })
            .collect();
        if probes.iter().all(|p| p.resolution.symbols.is_empty()) {
            let details = probes
                .iter()
                .map(|p| {
                    format!(
                        "  {} ({}): {}",
                        p.spec.name,
                        p.spec.symbols.join(", "),
                        p.resolution
                            .unresolved
                            .as_ref()
                            .map(|u| u.to_string())
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Err(RecordError::NothingResolved {
                binary: target.exe.display().to_string(),
                details,
            });
        }
        Ok(Self {
            target,
            image,
            server,
            catalog_file,
            probes,
        })
    }
}

/// Probes attached and counting.
pub struct Recorder {
    plan: Plan,
    session: Session,
    maps: ProcessMaps,
    started: Instant,
    started_unix_ms: u128,
}

impl Recorder {
    pub fn start(plan: Plan, capture_stacks: bool) -> Result<Self, RecordError> {
        let opts = SessionOptions {
            pid: plan.target.pid,
            capture_stacks,
        };
        let session = Session::attach(&plan.target.binary, &plan.probes, &opts)?;
        let maps = ProcessMaps::read(plan.target.pid).unwrap_or_default();
        let started_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Ok(Self {
            plan,
            session,
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
        self.session.attached_links()
    }

    /// Reads the maps, detaches every probe, and builds the results.
    pub fn finish(mut self, end_reason: EndReason) -> Result<Recording, RecordError> {
        let duration_s = self.started.elapsed().as_secs_f64();
        let snapshot = collect::read(self.session.ebpf());
        self.session.detach();
        let snapshot = snapshot?;
        if self.plan.target.is_alive() {
            // Libraries loaded during the run are in the fresher map.
            if let Ok(m) = ProcessMaps::read(self.plan.target.pid) {
                self.maps = m;
            }
        }

        let plan = &self.plan;
        let slots = &self.session.slots;
        let mut symbolizer = StackSymbolizer::new(self.maps.clone());
        let mut results = Vec::new();
        let mut folded = Vec::new();
        for (idx, planned) in plan.probes.iter().enumerate() {
            let outcome = &self.session.outcomes[idx];
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
                stacks,
            });
        }

        let t = &plan.target;
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
            },
            catalog: plan.catalog_file.clone(),
            started_unix_ms: self.started_unix_ms,
            duration_s,
            end_reason,
            complete: end_reason == EndReason::Duration,
            probes: results,
            drops: snapshot.drops,
        };
        Ok(Recording { summary, folded })
    }
}

/// Folded stacks of one probe, weighted by wait time and by count.
fn fold_stacks(
    stem: &str,
    measure: Measure,
    slots: &[(u64, &crate::attach::Slot)],
    samples: &[crate::collect::StackSample],
    symbolizer: &mut StackSymbolizer,
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
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        report::prepare_dir(dir)?;
        for (name, text) in &self.folded {
            report::write_file(&dir.join(name), text.as_bytes())?;
        }
        let table = report::table::render(&self.summary);
        report::write_file(&dir.join("summary.txt"), table.as_bytes())?;
        let json = serde_json::to_vec_pretty(&self.summary).expect("summary serialises");
        report::write_file(&dir.join("summary.json"), &json)
    }
}
