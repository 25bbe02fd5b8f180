//! `metadata.json`: what a ticket reader needs to know about a bundle
//! before opening anything else — where and when it was recorded, against
//! what, how it was called, what attached, what was lost, and what it cost.

use serde::{Deserialize, Serialize};

use super::overhead::{self, OverheadEstimate};
use crate::collect::Drops;
use crate::model::summary::{EndReason, ProbeStatus, Summary};
use crate::plan::server::ServerInfo;
pub use crate::target::host::HostInfo;
use crate::target::placement::Placement;

pub const FORMAT: &str = "innoprof-bundle";

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Metadata {
    pub format: String,
    /// The output contract version (docs/OUTPUTS.md) when written; 1 before the names
    /// were aligned with summary.json.
    pub format_version: u32,
    pub tool_version: String,
    pub host: HostInfo,
    pub server: ServerInfo,
    /// `10.2.11`, as a string for tools.
    pub server_version: Option<String>,
    pub binary: BinaryInfo,
    pub pid: u32,
    /// The cgroup and container the server ran in, and its namespaces
    /// (summary.json's `target.placement`; absent in older bundles).
    #[serde(default)]
    pub placement: Placement,
    pub started_unix_ms: u64,
    pub ended_unix_ms: u64,
    /// How innoprof was called (argv).
    pub command_line: Vec<String>,
    /// False when the recording ended early (`end_reason`).
    pub complete: bool,
    pub end_reason: EndReason,
    pub probes: ProbeCounts,
    pub dropped: Dropped,
    pub overhead: OverheadEstimate,
    /// Every file of the bundle, sorted.
    pub files: Vec<String>,
    /// What each of `files` is (from innoprof's list of bundle files); empty in bundles
    /// written before it existed.
    #[serde(default)]
    pub file_info: Vec<crate::model::files::FileInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BinaryInfo {
    pub path: String,
    pub build_id: Option<String>,
    /// Where its separate debug file came from (a path, innoprof's kept
    /// copies, elfutils' cache, a debuginfod server), or why there is
    /// none; empty in bundles written before it existed.
    #[serde(default)]
    pub debug: crate::resolve::debuginfo::DebugOrigin,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeCounts {
    pub attached: Vec<String>,
    /// Not attached: unresolved in this binary, or refused by the kernel.
    pub unresolved: Vec<NotAttached>,
    /// Per attached probe, the share of hits recorded (1.0: all of them).
    pub sampled: Vec<Sampled>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NotAttached {
    pub name: String,
    pub status: ProbeStatus,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sampled {
    pub name: String,
    /// Fraction of the recording it was attached, as summary.json's
    /// `sampling.attached_fraction` (1.0 for a probe never cut).
    #[serde(alias = "sampling_ratio")]
    pub attached_fraction: f64,
}

/// Everything the recording counted but could not keep.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dropped {
    /// The probe programs' own counters (stacks not taken, full maps):
    /// summary.json's `drops`.
    #[serde(alias = "probes")]
    pub drops: Drops,
    /// Probe hits whose stack was not captured (still counted).
    pub stack_lost_calls: u64,
    /// On-CPU samples not counted (stack map full).
    pub cpu_samples_lost: u64,
    /// Off-CPU blocks not counted (maps full).
    pub offcpu_blocks_lost: u64,
}

impl Metadata {
    pub fn new(summary: &Summary, command_line: &[String], host: HostInfo) -> Self {
        let t = &summary.target;
        let started = u64::try_from(summary.started_unix_ms).unwrap_or(u64::MAX);
        let probes = &summary.probes;
        let attached = || probes.iter().filter(|p| p.status == ProbeStatus::Attached);
        let cpu = summary.cpu.as_ref();
        Self {
            format: FORMAT.to_string(),
            format_version: crate::model::files::FORMAT_VERSION,
            tool_version: summary.tool_version.clone(),
            host,
            server: t.server.clone(),
            server_version: t.server_version.clone(),
            binary: BinaryInfo {
                path: t.binary.clone(),
                build_id: t.build_id.clone(),
                debug: t.debug_origin.clone(),
            },
            pid: t.pid,
            placement: t.placement.clone(),
            started_unix_ms: started,
            ended_unix_ms: started.saturating_add((summary.duration_s * 1000.0).round() as u64),
            command_line: command_line.to_vec(),
            complete: summary.complete,
            end_reason: summary.end_reason,
            probes: ProbeCounts {
                attached: attached().map(|p| p.name.clone()).collect(),
                unresolved: probes
                    .iter()
                    .filter(|p| p.status != ProbeStatus::Attached)
                    .map(|p| NotAttached {
                        name: p.name.clone(),
                        status: p.status,
                        reason: p.reason.clone(),
                    })
                    .collect(),
                sampled: attached()
                    .map(|p| Sampled {
                        name: p.name.clone(),
                        attached_fraction: p.attached_fraction(),
                    })
                    .collect(),
            },
            dropped: Dropped {
                drops: summary.drops.clone(),
                stack_lost_calls: crate::model::saturating_sum(
                    probes.iter().map(|p| p.stacks.lost_calls),
                ),
                cpu_samples_lost: cpu.map_or(0, |c| c.oncpu.lost.map_full),
                offcpu_blocks_lost: cpu
                    .and_then(|c| c.offcpu.as_ref())
                    .map_or(0, |o| o.lost.map_full + o.lost.start_map_full),
            },
            overhead: overhead::estimate(summary),
            files: Vec::new(),
            file_info: Vec::new(),
        }
    }
}
