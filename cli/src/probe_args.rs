//! Options that choose and resolve probes, shared by `record` and `probes`.

use std::path::PathBuf;

use clap::Args;
use innoprof::plan::probeset::ProbeRequest;
use innoprof::resolve::debuginfo::DebugSearch;

#[derive(Args, Clone)]
pub struct ProbeArgs {
    /// Catalog probes: `default` (contended/rare paths), `all` (adds hot paths), `none`, or NAME,… (globs allowed).
    #[arg(long)]
    pub probes: Option<String>,
    /// Ad-hoc probe on functions matching a demangled pattern (repeatable), e.g. 'fil_flush' or 'PolicyMutex<*>::enter'.
    #[arg(long = "probe", value_name = "PATTERN")]
    pub ad_hoc: Vec<String>,
    /// Use this catalog file instead of the built-in one.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
    /// Separate debug info for a stripped binary (e.g. from `objcopy --only-keep-debug`).
    #[arg(long, value_name = "PATH")]
    pub debuginfo: Option<PathBuf>,
    /// Where to look for debug files by build-id and .gnu_debuglink (repeatable).
    #[arg(long, value_name = "DIR", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    /// Most probe points (attached symbols) the set may have; a broader set is refused with
    /// its estimated attach and detach time. At most 4096.
    #[arg(long, value_name = "N", default_value_t = innoprof::plan::probeset::DEFAULT_MAX_POINTS as u32,
          value_parser = clap::value_parser!(u32).range(1..=innoprof::bpf::abi::MAX_SLOTS as i64))]
    pub max_probe_points: u32,
}

impl ProbeArgs {
    pub fn request(&self) -> ProbeRequest {
        ProbeRequest {
            selection: self.probes.clone(),
            ad_hoc: self.ad_hoc.clone(),
            catalog: self.catalog.clone(),
            max_points: self.max_probe_points as usize,
        }
    }

    pub fn debug_search(&self) -> DebugSearch {
        DebugSearch {
            explicit: self.debuginfo.clone(),
            dirs: self.debug_dir.clone(),
        }
    }
}
