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
