//! Helpers for the end-to-end tests: the innoprof binary, the C++ fixture,
//! real servers (via scripts/servers.sh), sysbench, and kernel-side checks.
//! One module per concern; everything a test uses is re-exported here.

use std::path::{Path, PathBuf};

mod bundle;
mod consistency;
mod container;
mod fixture;
mod kernel;
mod load;
mod ready;
mod run;
mod serve;
mod server;

pub use bundle::*;
pub use consistency::disagreements;
pub use container::*;
pub use fixture::*;
pub use kernel::*;
pub use load::*;
pub use ready::*;
pub use run::*;
pub use serve::*;
pub use server::*;

/// The bundle's serde types, for tests that read summary.json typed.
pub use innoprof::model::summary::{CallsiteResult, EndReason, ProbeResult, ProbeStatus, Summary};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
