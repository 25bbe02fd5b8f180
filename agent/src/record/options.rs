//! What a recording is asked to do, and what can go wrong.

use crate::attach::{AttachError, MapLimits};
use crate::collect::CollectError;
use crate::cost::calibrate::Calibrator;
use crate::cost::governor::GovernorConfig;
use crate::cpu::{CpuError, CpuOptions};
use crate::plan::catalog::CatalogError;
use crate::plan::probeset::ProbeRequest;
use crate::resolve::debuginfo::DebugSearch;
use crate::resolve::ElfError;
use crate::target::privileges::PrivilegeError;
use crate::target::TargetError;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
    #[error(transparent)]
    Kernel(#[from] crate::target::kernel::KernelError),
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Cpu(#[from] CpuError),
    #[error(transparent)]
    FlameGraph(#[from] crate::report::flamegraph::FlameGraphError),
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
    /// A probe's stack at most once per this on each CPU (`--stack-interval`).
    pub stack_interval: std::time::Duration,
    /// CPU profiling alongside the probes; `None` with `--no-cpu`.
    pub cpu: Option<CpuOptions>,
    /// Overhead budget for probe hits; `None`: no governor.
    pub governor: Option<GovernorConfig>,
    /// BPF map capacities (hidden `--max-stacks`/`--max-callsites`).
    pub limits: MapLimits,
    /// Measure the hit cost even when this boot has one (`--recalibrate`).
    pub recalibrate: bool,
    /// Where the hit cost is measured when it is.
    pub calibrator: Calibrator,
    /// Whose processes innoprof attaches to (`--trust-user`).
    pub trust: crate::target::trust::Trust,
    /// Name user frames at the end (false: `record --no-symbolize`, named
    /// later from the raw addresses by `innoprof report`).
    pub symbolize: bool,
    /// Keep one raw text per statement fingerprint in the bundle
    /// (`--statement-text`); otherwise fingerprints only (no literal).
    pub statement_text: bool,
    /// Tie client connections' hits to their statements (`--no-statements`: not).
    pub statements: bool,
}

impl RecordOptions {
    /// What every command starts from (`top` and `serve` as they are):
    /// `probes` on `pid`, attached to as `trust` allows, without stacks
    /// or CPU profiling, under `governor`, with default map sizes, the
    /// hit cost of this boot reused where there is one. `record` adds
    /// stacks and the CPU profile with the setters below.
    pub fn new(
        pid: u32,
        probes: ProbeRequest,
        governor: Option<GovernorConfig>,
        calibrator: Calibrator,
        trust: crate::target::trust::Trust,
    ) -> Self {
        Self {
            pid,
            force: false,
            probes,
            debuginfo: DebugSearch::default(),
            capture_stacks: false,
            stack_interval: crate::attach::DEFAULT_STACK_INTERVAL,
            cpu: None,
            governor,
            limits: MapLimits::default(),
            recalibrate: false,
            calibrator,
            trust,
            symbolize: true,
            statement_text: false,
            statements: true,
        }
    }

    /// Whether hits are tied to statements (`--no-statements`: not).
    pub fn statements(self, statements: bool) -> Self {
        Self { statements, ..self }
    }

    /// Whether statements keep a raw text sample (`--statement-text`).
    pub fn statement_text(self, statement_text: bool) -> Self {
        Self {
            statement_text,
            ..self
        }
    }

    /// Whether user frames are named at the end (`--no-symbolize`: not).
    pub fn symbolize(self, symbolize: bool) -> Self {
        Self { symbolize, ..self }
    }

    /// Profile a process that is not mysqld/mariadbd (`--force`).
    pub fn force(self, force: bool) -> Self {
        Self { force, ..self }
    }

    /// Where separate debug info of a stripped binary is looked for.
    pub fn debuginfo(self, debuginfo: DebugSearch) -> Self {
        Self { debuginfo, ..self }
    }

    /// Probes' stacks, at most once per `interval` on each CPU.
    pub fn stacks(self, capture: bool, interval: std::time::Duration) -> Self {
        Self {
            capture_stacks: capture,
            stack_interval: interval,
            ..self
        }
    }

    /// CPU profiling alongside the probes (`None`: none).
    pub fn cpu(self, cpu: Option<CpuOptions>) -> Self {
        Self { cpu, ..self }
    }

    /// BPF map capacities.
    pub fn limits(self, limits: MapLimits) -> Self {
        Self { limits, ..self }
    }

    /// Measure the hit cost even when this boot has one.
    pub fn recalibrate(self, recalibrate: bool) -> Self {
        Self {
            recalibrate,
            ..self
        }
    }

    /// The same options for another process of the server (`serve --all`,
    /// a restart followed).
    pub fn for_pid(&self, pid: u32) -> Self {
        Self {
            pid,
            ..self.clone()
        }
    }
}

/// When a recording takes its probes' stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackCapture {
    /// Never (`--no-stacks`, `top`).
    Off,
    /// From the first hit to the last (`record`).
    Always,
    /// Only while [`Recorder::open_stack_window`] has a window open, for
    /// the probes it names (`serve`'s `/debug/pprof/waits`): between
    /// requests no hit walks a stack.
    OnDemand,
}
