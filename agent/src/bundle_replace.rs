//! Whether an existing `--out` directory is innoprof's own earlier bundle,
//! which a new recording may replace whole, and removing one without
//! following links or deleting anything innoprof did not write.
//!
//! A careless `--out ~/thesis` must never cost the user a file: a summary.json
//! beside their files is no proof (any tool writes one). Only a directory
//! whose metadata.json says format `innoprof-bundle`, and which holds
//! nothing but regular files under names innoprof writes, is replaced.

use std::path::{Path, PathBuf};

use crate::bundle::METADATA_JSON;
use crate::bundle_read::BundleDir;
use crate::report::metadata;

/// A name innoprof could have written into a bundle directory: a file of
/// [`crate::outputs::OUTPUTS`] (the bundle, what `innoprof diff` writes
/// into INCIDENT by default, the write check of `prepare_dir`), or such a
/// file's temporary twin `<name>.tmp~` left by a write cut short
/// (report::write_file).
pub fn is_innoprof_file(name: &str) -> bool {
    let listed = |n: &str| crate::outputs::describe(n).is_some();
    listed(name) || name.strip_suffix(".tmp~").is_some_and(stem_of_ours)
}

/// `<file_stem>` of a temporary file: innoprof's file stems keep
/// [A-Za-z0-9._-].
fn stem_of_ours(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Why `dir` is not a bundle innoprof may replace; `None` when it is one
/// (or is empty).
pub fn why_not_replaceable(dir: &Path) -> Option<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return Some(format!("cannot list it: {e}")),
    };
    let mut any = false;
    for e in entries {
        let e = match e {
            Ok(e) => e,
            Err(e) => return Some(format!("cannot list it: {e}")),
        };
        any = true;
        let name = e.file_name().to_string_lossy().into_owned();
        // DirEntry::file_type does not follow links.
        match e.file_type() {
            Ok(t) if t.is_file() => {}
            Ok(t) if t.is_symlink() => return Some(format!("{name} is a symbolic link")),
            Ok(t) if t.is_dir() => {
                return Some(format!(
                    "it holds the directory {name}/, innoprof writes none"
                ))
            }
            Ok(_) => return Some(format!("{name} is not a regular file")),
            Err(e) => return Some(format!("{name}: {e}")),
        }
        if !is_innoprof_file(&name) {
            return Some(format!("it holds {name}, which innoprof does not write"));
        }
    }
    if !any {
        return None;
    }
    match BundleDir::new(dir).read(METADATA_JSON) {
        Ok(None) => Some(format!("it has no {METADATA_JSON} of an innoprof bundle")),
        Err(e) => Some(crate::error_chain(&e)),
        Ok(Some(bytes)) => {
            let format = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|m| m["format"].as_str().map(str::to_string));
            match format.as_deref() {
                Some(metadata::FORMAT) => None,
                _ => Some(format!(
                    "its {METADATA_JSON} is not innoprof's (no format \"{}\")",
                    metadata::FORMAT
                )),
            }
        }
    }
}

/// Removes a directory of innoprof's files: only regular files under names
/// innoprof writes are unlinked (unlink never follows a link), then the
/// directory itself. Anything else found there (put in after the check)
/// is kept, and so is the directory, which is returned as the error.
pub fn remove_bundle_dir(dir: &Path) -> Result<(), RemoveError> {
    let err = |source| RemoveError {
        dir: dir.into(),
        source,
    };
    for e in std::fs::read_dir(dir).map_err(err)? {
        let e = e.map_err(err)?;
        let name = e.file_name();
        let ours = name.to_str().is_some_and(is_innoprof_file);
        if ours && e.file_type().is_ok_and(|t| t.is_file()) {
            match std::fs::remove_file(e.path()) {
                Err(x) if x.kind() != std::io::ErrorKind::NotFound => return Err(err(x)),
                _ => {}
            }
        }
    }
    std::fs::remove_dir(dir).map_err(err)
}

/// Removes a temporary directory of innoprof's if `path` is one (a real
/// directory, not a link); errors are ignored: it is only tidying.
pub fn remove_temp_dir(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        let _ = remove_bundle_dir(path);
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{dir} could not be removed whole (files innoprof did not write are kept there)")]
pub struct RemoveError {
    pub dir: PathBuf,
    #[source]
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_innoprof_writes() {
        for n in [
            "summary.json",
            "oncpu.folded",
            "innodb.mutex.enter.count.folded",
            "PolicyMutex_T_.enter.folded",
            "diff.offcpu.folded",
            "diff.txt",
            "diff.oncpu.svg",
            "innodb_status.start.txt",
            "timeseries.csv",
            "summary.tmp~",
        ] {
            assert!(is_innoprof_file(n), "{n}");
        }
        for n in ["thesis.csv", ".folded", "a b.folded", "notes.txt", "x.json"] {
            assert!(!is_innoprof_file(n), "{n}");
        }
    }

    #[test]
    fn summary_json_beside_a_users_file_is_not_a_bundle() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("summary.json"), "{}").unwrap();
        assert!(why_not_replaceable(dir.path())
            .unwrap()
            .contains("no metadata.json"));
        std::fs::write(dir.path().join("metadata.json"), r#"{"format":"other"}"#).unwrap();
        assert!(why_not_replaceable(dir.path())
            .unwrap()
            .contains("not innoprof's"));
        std::fs::write(
            dir.path().join("metadata.json"),
            r#"{"format":"innoprof-bundle"}"#,
        )
        .unwrap();
        assert_eq!(why_not_replaceable(dir.path()), None);
        std::fs::write(dir.path().join("thesis.csv"), "mine").unwrap();
        let why = why_not_replaceable(dir.path()).unwrap();
        assert!(
            why.contains("thesis.csv, which innoprof does not write"),
            "{why}"
        );
        // Removal keeps what is not innoprof's, and says so.
        assert!(remove_bundle_dir(dir.path()).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["thesis.csv"]);
    }
}
