//! What a recording will attach, made before anything attaches: the
//! target checked, its binary resolved to probe sites and counters, and
//! the calibration started.

use std::time::Duration;

use crate::attach::MapLimits;
use crate::cost::calibrate::{calibrate_or_reuse, measure_with, CalibrateError, Calibration};
use crate::cost::governor::GovernorConfig;
use crate::cpu::CpuOptions;
use crate::model::summary::TargetInfo;
use crate::plan::memcounters::PlannedCounter;
use crate::plan::probeset::{PlannedProbe, ProbeSet};
use crate::plan::server::ServerInfo;
use crate::resolve::debuginfo::{find_debug_info, DebugFile, DebugOrigin};
use crate::resolve::ElfImage;
use crate::symbolize::{ProcessMaps, StackSymbolizer};
use crate::target::own_usage::{debug_phase, own_cpu_time};
use crate::target::privileges::{self};
use crate::target::Target;

use crate::record::options::{RecordError, RecordOptions};

/// Everything decided before touching the kernel.
#[derive(Debug)]
pub struct RecordingPlan {
    pub target: Target,
    pub image: ElfImage,
    /// Where the binary's debug file came from, or why there is none.
    pub debug_origin: DebugOrigin,
    pub server: ServerInfo,
    pub catalog_file: Option<String>,
    pub probes: Vec<PlannedProbe>,
    /// Counters read from the target's memory, not probed.
    pub counters: Vec<PlannedCounter>,
    pub cpu: Option<CpuOptions>,
    pub governor: Option<GovernorConfig>,
    /// The per-hit cost calibration, running while the plan is made.
    pub(super) calibration: Option<std::thread::JoinHandle<Result<Calibration, CalibrateError>>>,
    pub limits: MapLimits,
    pub stack_interval: std::time::Duration,
    /// Whether user frames are named at the end (`record --no-symbolize`:
    /// not; `innoprof report` names them from the raw addresses).
    pub symbolize: bool,
    /// Whether statements keep a raw text (`--statement-text`).
    pub statement_text: bool,
    /// Where connections' THDs are, to tie hits to statements; or why not.
    pub thd: Result<crate::bpf::abi::ThdLayout, String>,
    /// innoprof's CPU time when planning began: what the recording costs
    /// innoprof counts from here (resolution and calibration included).
    pub(super) cpu_at_plan: Duration,
}

impl RecordingPlan {
    /// The target as summaries describe it.
    pub fn target_info(&self) -> TargetInfo {
        let t = &self.target;
        TargetInfo {
            pid: t.pid,
            comm: t.comm.clone(),
            binary: t.exe.display().to_string(),
            build_id: self.image.build_id.clone(),
            server_version: self.server.version.map(|v| v.to_string()),
            server: self.server.clone(),
            position_independent: self.image.position_independent,
            has_symtab: self.image.has_symtab,
            has_debug_info: self.image.has_debug_info,
            debug_file: self
                .image
                .debug_file
                .as_ref()
                .map(|p| p.display().to_string()),
            placement: t.placement.clone(),
            debug_origin: self.debug_origin.clone(),
        }
    }

    /// A symbolizer over `maps` that names the server binary's frames
    /// from its debug file when one was found (`--debuginfo`, build-id,
    /// debuglink).
    pub fn stack_symbolizer(&self, maps: ProcessMaps) -> StackSymbolizer {
        let mut symbolizer = StackSymbolizer::new(maps);
        if !self.symbolize {
            symbolizer.leave_user_unnamed();
            return symbolizer;
        }
        if let (Some(binary), Some(debug)) = (self.image.file_id, DebugFile::of(&self.image)) {
            symbolizer.use_debug_file(binary, debug);
        }
        symbolizer
    }

    /// The server's thread-role markers in the target's address space; none
    /// where its load address cannot be read (every role then unknown).
    pub fn role_ranges(&self) -> Vec<crate::bpf::abi::RoleRange> {
        let bias = if self.image.position_independent {
            match crate::plan::memcounters::load_bias(self.target.pid, &self.image) {
                Ok(b) => b,
                Err(_) => return Vec::new(),
            }
        } else {
            0
        };
        crate::plan::thread_role::marker_ranges(&self.image, bias)
    }

    /// `stack_interval` as the BPF side and the summary keep it.
    pub fn stack_interval_ns(&self) -> u64 {
        u64::try_from(self.stack_interval.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Checks privileges and the target, reads its binary, picks the catalog
    /// and resolves every requested probe. Changes nothing anywhere.
    pub fn build(opts: &RecordOptions) -> Result<Self, RecordError> {
        privileges::check()?;
        crate::target::kernel::check()?;
        let target = Target::open(opts.pid, opts.force, &opts.trust)?;
        Self::resolve(opts, target)
    }

    /// Reads `target`'s binary, picks the catalog and resolves every
    /// requested probe, calibrating meanwhile.
    fn resolve(opts: &RecordOptions, target: Target) -> Result<Self, RecordError> {
        let cpu_at_plan = own_cpu_time();
        let calibration = Some(spawn_calibration(opts));
        let mut image = ElfImage::open_target(&target)?;
        let debug_origin = find_debug_info(&mut image, &opts.debuginfo)?;
        let server = ServerInfo::detect(&image);
        let set = crate::plan::kept_plan::resolve(&image, &server, &opts.probes)?;
        set.check_breadth(opts.probes.max_points)?;
        let nothing_asked = set.probes.is_empty() && set.counters.is_empty();
        if nothing_asked && opts.cpu.is_none() {
            return Err(RecordError::NoProbes);
        }
        // Nothing resolved: an error when the user named the probes or there
        // is nothing else to record; with the default set and CPU sampling
        // on (a stripped server), record the CPU profile and report why.
        if !nothing_asked
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
            counters,
        } = set;
        let thd = if opts.statements {
            plan_thd(&target, &image)
        } else {
            Err("switched off (--no-statements)".into())
        };
        Ok(Self {
            thd,
            statement_text: opts.statement_text,
            target,
            image,
            debug_origin,
            server,
            catalog_file,
            probes,
            counters,
            cpu: opts.cpu.clone(),
            governor: opts.governor,
            calibration,
            limits: opts.limits,
            stack_interval: opts.stack_interval,
            symbolize: opts.symbolize,
            cpu_at_plan,
        })
    }
}

impl RecordingPlan {
    /// A plan for `opts.pid`, a new process of the server `earlier` was
    /// made for (serve following a restart). When the process runs the very
    /// file `earlier` resolved (same device, inode, size and modification
    /// time), its resolution is reused: a restart then costs no second read
    /// of the binary and its DWARF (tens of MiB touched and a few MiB
    /// allocated for a moment, and most of the re-attach time). Anything
    /// else (an upgrade, another binary) is resolved anew.
    /// `earlier` is kept when the new process cannot be opened yet (the
    /// next attempt may reuse it), and emptied otherwise.
    pub fn build_again(
        opts: &RecordOptions,
        earlier: &mut Option<RecordingPlan>,
    ) -> Result<Self, RecordError> {
        privileges::check()?;
        crate::target::kernel::check()?;
        let target = Target::open(opts.pid, opts.force, &opts.trust)?;
        match earlier.take().filter(|e| e.image.is_file(&target.binary)) {
            Some(earlier) => Ok(Self {
                thd: if opts.statements {
                    plan_thd(&target, &earlier.image)
                } else {
                    Err("switched off (--no-statements)".into())
                },
                target,
                cpu_at_plan: own_cpu_time(),
                calibration: Some(spawn_calibration(opts)),
                ..earlier
            }),
            None => Self::resolve(opts, target),
        }
    }
}

/// Where `target`'s connections keep their THD, or why it is unknown.
fn plan_thd(target: &Target, image: &ElfImage) -> Result<crate::bpf::abi::ThdLayout, String> {
    let started = std::time::Instant::now();
    let thd = crate::plan::thd::plan_thd(target.pid, image).map_err(|e| crate::error_chain(&e));
    debug_phase(&format!("THD planned in {:?}", started.elapsed()));
    thd
}

/// Calibration probes only innoprof itself (or a child innoprof); it runs
/// while the plan is made.
fn spawn_calibration(
    opts: &RecordOptions,
) -> std::thread::JoinHandle<Result<Calibration, CalibrateError>> {
    let (stacks, fresh, how) = (
        opts.capture_stacks,
        opts.recalibrate,
        opts.calibrator.clone(),
    );
    std::thread::spawn(move || {
        if fresh {
            measure_with(stacks, &how)
        } else {
            calibrate_or_reuse(stacks, &how)
        }
    })
}
