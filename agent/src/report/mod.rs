//! Output formats. Each is a function from the recording to bytes; the
//! bundle writer puts them in the output directory.

pub mod cpu_table;
pub mod flamegraph;
pub mod folded;
pub mod histograms;
pub mod html;
pub mod metadata;
pub mod model;
pub mod overhead;
pub mod pprof;
pub mod table;
pub mod top_symbols;
pub mod units;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use model::Summary;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("output directory {path} is not usable: {source} (choose another --out, or fix its permissions)")]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Creates the directory if needed and proves it writable, before any
/// probe is attached.
pub fn prepare_dir(dir: &Path) -> Result<(), OutputError> {
    let err = |source| OutputError::NotWritable {
        path: dir.into(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    let probe = dir.join(".innoprof-write-check");
    write_file(&probe, b"").map_err(|e| match e {
        OutputError::Write { source, .. } => err(source),
        other => other,
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// Writes via a temporary file and rename, so an interrupted run never
/// leaves a half-written file; mode 0640 (profiles reveal code paths).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let err = |source| OutputError::Write {
        path: path.into(),
        source,
    };
    let tmp = path.with_extension("tmp~");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// A file name for a probe (ad-hoc probe names are arbitrary patterns).
pub fn file_stem(probe: &str) -> String {
    let s: String = probe
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.chars().take(100).collect()
}
