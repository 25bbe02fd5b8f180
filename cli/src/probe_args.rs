//! Options that choose and resolve probes, shared by `record` and `probes`.

use std::path::PathBuf;

use clap::Args;
use innoprof::plan::probeset::ProbeRequest;
use innoprof::resolve::debuginfo::DebugSearch;
use innoprof::resolve::debuginfod::Debuginfod;

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
    /// A debuginfod server to fetch a missing debug file from by build id (repeatable;
    /// instead of DEBUGINFOD_URLS). Fetched files are checked and kept in /var/cache/innoprof.
    #[arg(long, value_name = "URL", value_parser = parse_debuginfod_url, conflicts_with = "no_debuginfod")]
    pub debuginfod: Vec<String>,
    /// Fetch nothing from debuginfod (DEBUGINFOD_URLS ignored); files fetched earlier and
    /// kept in /var/cache/innoprof are still used.
    #[arg(long)]
    pub no_debuginfod: bool,
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
        let mut debuginfod = Debuginfod::from_env();
        if self.no_debuginfod {
            debuginfod.urls.clear();
            debuginfod.ignored.clear();
            debuginfod.elfutils_cache = None;
        } else if !self.debuginfod.is_empty() {
            debuginfod.urls = self.debuginfod.clone();
            debuginfod.ignored.clear();
        }
        DebugSearch {
            explicit: self.debuginfo.clone(),
            dirs: self.debug_dir.clone(),
            debuginfod: Some(debuginfod),
        }
    }
}

/// `--debuginfod URL`: an http:// or https:// URL.
fn parse_debuginfod_url(s: &str) -> Result<String, String> {
    if innoprof::resolve::debuginfod::is_http_url(s) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not an http:// or https:// URL"))
    }
}
