//! The recording's data model, serialised as `summary.json`.

use serde::Serialize;

use crate::catalog::{CostClass, Measure};
use crate::collect::Drops;
use crate::histogram::Bucket;
use crate::resolve::{EntryInsn, SkippedSymbol, SymbolTable};
use crate::server::ServerInfo;

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub tool: &'static str,
    pub tool_version: &'static str,
    pub target: TargetInfo,
    /// Catalog file the probes came from, if any.
    pub catalog: Option<String>,
    pub started_unix_ms: u128,
    pub duration_s: f64,
    pub end_reason: EndReason,
    /// False when the recording ended early (interrupted, target exited).
    pub complete: bool,
    pub probes: Vec<ProbeResult>,
    pub drops: Drops,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetInfo {
    pub pid: u32,
    pub comm: String,
    /// Path as the target sees it.
    pub binary: String,
    pub build_id: Option<String>,
    pub server: ServerInfo,
    pub server_version: Option<String>,
    pub position_independent: bool,
    pub has_symtab: bool,
    pub has_debug_info: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Duration,
    Interrupted,
    TargetExited,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    Attached,
    Unresolved,
    AttachFailed,
}

#[derive(Debug, Clone, Serialize)]
pub struct SymbolInfo {
    pub name: String,
    pub raw: String,
    /// Virtual address in the binary, hex.
    pub address: String,
    pub file_offset: String,
    pub table: SymbolTable,
    pub clone: Option<String>,
    pub entry: EntryInsn,
    pub calls: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub name: String,
    pub description: String,
    pub measure: Measure,
    pub cost: CostClass,
    pub status: ProbeStatus,
    /// Why it is not attached, or which symbols the kernel refused.
    pub reason: Option<String>,
    pub symbols: Vec<SymbolInfo>,
    pub skipped: Vec<SkippedSymbol>,
    pub calls: u64,
    pub calls_per_sec: f64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    pub wait_ns_avg: Option<u64>,
    /// Upper bounds of the log2 buckets holding the quantile.
    pub wait_ns_p50: Option<u64>,
    pub wait_ns_p99: Option<u64>,
    pub histogram: Vec<Bucket>,
    pub stacks: StackStats,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StackStats {
    pub distinct: usize,
    /// Calls whose stack could not be captured (collision or error).
    pub lost_calls: u64,
    pub folded_by_wait: Option<String>,
    pub folded_by_count: Option<String>,
}
