//! What can go wrong writing, reading or replacing a bundle.

use std::path::PathBuf;

use crate::bundle::read::BundleReadError;
use crate::report::flamegraph::FlameGraphError;
use crate::report::OutputError;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    Read(#[from] BundleReadError),
    #[error("{path} is not valid")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{0} holds no innoprof recording (no summary.json); give the directory `innoprof record --out` wrote")]
    NotABundle(PathBuf),
    #[error(transparent)]
    FlameGraph(#[from] FlameGraphError),
    #[error(transparent)]
    Contract(#[from] crate::bundle::contract::ContractError),
}
