//! Options that choose and resolve probes, shared by `record` and `probes`.

use std::path::PathBuf;

use clap::Args;
use innoprof::probeset::ProbeRequest;
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
}

impl ProbeArgs {
    pub fn request(&self) -> ProbeRequest {
        ProbeRequest {
            selection: self.probes.clone(),
            ad_hoc: self.ad_hoc.clone(),
            catalog: self.catalog.clone(),
        }
    }

    pub fn debug_search(&self) -> DebugSearch {
        DebugSearch {
            explicit: self.debuginfo.clone(),
            dirs: self.debug_dir.clone(),
        }
    }
}
