//! Output formats. Each is a function from the recording to bytes; the
//! bundle writer puts them in the output directory.

pub mod counter_table;
pub mod cpu_table;
pub mod flamegraph;
pub mod folded;
pub mod folded_read;
pub mod frame_label;
pub mod histograms;
pub mod host_text;
pub mod html;
pub mod metadata;
pub mod overhead;
pub mod pprof;
pub mod state_text;
pub mod table;
pub mod who_text;

use crate::model::files::WRITE_CHECK;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub use crate::model::summary::Summary;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "output directory {path} is not usable (choose another --out, or fix its permissions)"
    )]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("output path {path} is a symbolic link; innoprof does not follow links for its output (pass the real directory to --out)")]
    Symlink { path: PathBuf },
    #[error("output directory {path} exists and is not an earlier innoprof recording: {why}; innoprof replaces only its own bundles (choose another --out, or move or remove it yourself)")]
    NotABundle { path: PathBuf, why: String },
    #[error("output directory {path} disappeared during the recording (removed?); nothing written there")]
    Vanished { path: PathBuf },
    #[error("writing {path}{hint}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
        hint: &'static str,
    },
}

/// Creates the directory if needed and proves it writable, before any
/// probe is attached. A symbolic link is refused, not followed: as root,
/// following one planted by another user would write where they chose.
pub fn prepare_dir(dir: &Path) -> Result<(), OutputError> {
    let err = |source| OutputError::NotWritable {
        path: dir.into(),
        source,
    };
    refuse_symlink(dir)?;
    // Created 0750 like the files' 0640: a profile names code paths.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(err)?;
    let probe = dir.join(WRITE_CHECK);
    write_file(&probe, b"").map_err(|e| match e {
        OutputError::Write { source, .. } => err(source),
        other => other,
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The directory prepared before the recording must still be there (and
/// still not a link) when the results are written.
pub fn check_dir_still_there(dir: &Path) -> Result<(), OutputError> {
    refuse_symlink(dir)?;
    if dir.is_dir() {
        Ok(())
    } else {
        Err(OutputError::Vanished { path: dir.into() })
    }
}

pub(crate) fn refuse_symlink(path: &Path) -> Result<(), OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(OutputError::Symlink { path: path.into() }),
        _ => Ok(()),
    }
}

/// A failed write, with a hint when the file system is full.
pub fn write_error(path: &Path, source: std::io::Error) -> OutputError {
    OutputError::Write {
        path: path.into(),
        hint: if source.raw_os_error() == Some(libc::ENOSPC) {
            " (the output file system is full: free space or choose another --out)"
        } else {
            ""
        },
        source,
    }
}

/// Writes via a temporary file and rename, so an interrupted run never
/// leaves a half-written file; mode 0640 (profiles reveal code paths).
/// The temporary file is created exclusively and never through a link.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let tmp = path.with_extension("tmp~");
    let err = |source: std::io::Error| write_error(path, source);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o640)
        .open(&tmp)
        .map_err(err)?;
    let written = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e));
    }
    Ok(())
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
