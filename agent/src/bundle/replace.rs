//! Whether an existing `--out` directory is innoprof's own earlier bundle,
//! which a new recording may replace whole, and removing one without
//! following links or deleting anything innoprof did not write.
//!
//! A careless `--out ~/thesis` must never cost the user a file: a summary.json
//! beside their files is no proof (any tool writes one). Only a directory
//! whose metadata.json says format `innoprof-bundle`, and which holds
//! nothing but regular files under names innoprof writes, is replaced.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::bundle::read::BundleDir;
use crate::model::files::METADATA_JSON;
use crate::report::metadata;

/// A name innoprof could have written into a bundle directory: a file of
/// [`crate::model::files::FILES`] (the bundle, what `innoprof diff` writes
/// into INCIDENT by default, the write check of `prepare_dir`), or such a
/// file's temporary twin `<name>.tmp~` left by a write cut short
/// (report::write_file).
pub fn is_innoprof_file(name: &str) -> bool {
    let listed = |n: &str| crate::model::files::describe(n).is_some();
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

/// Removes a directory of innoprof's files without trusting its path past
/// the parent: the directory is opened `O_DIRECTORY|O_NOFOLLOW` (a link
/// swapped in, in a sticky /tmp say, is refused, not followed), must be
/// owned by innoprof's effective user, and its entries are looked at and
/// unlinked relative to that descriptor (`fstatat`, `unlinkat`): only
/// regular files of innoprof's names and owner go, then the directory
/// itself. Anything else found there (put in after the check) is kept,
/// and so is the directory, which is returned as the error.
pub fn remove_bundle_dir(dir: &Path) -> Result<(), RemoveError> {
    let err = |source| RemoveError {
        dir: dir.into(),
        source,
    };
    let (parent, name) = parent_and_name(dir).map_err(err)?;
    let parent = open_dir(rustix::fs::CWD, parent, OFlags::empty()).map_err(err)?;
    let fd = open_dir(&parent, name, OFlags::NOFOLLOW).map_err(err)?;
    let euid = rustix::process::geteuid().as_raw();
    let owner = rustix::fs::fstat(&fd).map_err(|e| err(e.into()))?.st_uid;
    if owner != euid {
        return Err(err(std::io::Error::other(format!(
            "owned by uid {owner}, not innoprof's"
        ))));
    }
    remove_our_files(&fd, euid).map_err(err)?;
    rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR).map_err(|e| err(e.into()))
}

/// Unlinks, in the directory `fd`, the regular files of innoprof's names
/// owned by `euid`; nothing is followed.
fn remove_our_files(fd: &OwnedFd, euid: u32) -> std::io::Result<()> {
    let mut entries = rustix::fs::Dir::read_from(fd)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_str().is_ok_and(is_innoprof_file) {
            continue;
        }
        let st = match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        if !regular || st.st_uid != euid {
            continue;
        }
        match rustix::fs::unlinkat(fd, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn open_dir<Fd: AsFd>(at: Fd, path: &Path, extra: OFlags) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra;
    Ok(rustix::fs::openat(at, path, flags, Mode::empty())?)
}

/// `dir`'s parent (`.` for a bare name) and last component.
fn parent_and_name(dir: &Path) -> std::io::Result<(&Path, &Path)> {
    let name = dir
        .file_name()
        .ok_or_else(|| std::io::Error::other("no directory name"))?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, Path::new(name)))
}

/// Removes a temporary directory of innoprof's if `path` is one (a real
/// directory of innoprof's user, not a link: see [`remove_bundle_dir`]);
/// errors are ignored: it is only tidying.
pub fn remove_temp_dir(path: &Path) {
    let _ = remove_bundle_dir(path);
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

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    /// A temporary directory swapped for a link to another directory
    /// (in a sticky /tmp, by its owner) is not followed: nothing there is
    /// unlinked, innoprof-named or not.
    #[test]
    fn tidying_never_follows_a_link() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("summary.json"), "theirs").unwrap();
        let tmp = root.path().join(".out.innoprof-tmp-1");
        std::os::unix::fs::symlink(&elsewhere, &tmp).unwrap();
        remove_temp_dir(&tmp);
        let e = remove_bundle_dir(&tmp).unwrap_err();
        // O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR (or ELOOP).
        assert!(
            matches!(e.source.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e:?}"
        );
        assert_eq!(names(&elsewhere), ["summary.json"]);
        assert!(std::fs::symlink_metadata(&tmp).unwrap().is_symlink());
    }

    /// Only innoprof's user's directories and files are tidied: as root,
    /// a directory (or a file in ours) owned by another user is kept.
    #[test]
    fn tidying_keeps_what_another_user_owns() {
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root to chown");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join(".a.innoprof-tmp-1");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("summary.json"), "x").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        remove_temp_dir(&theirs);
        assert_eq!(names(&theirs), ["summary.json"]);

        let ours = root.path().join(".b.innoprof-tmp-1");
        std::fs::create_dir(&ours).unwrap();
        std::fs::write(ours.join("summary.json"), "x").unwrap();
        std::fs::write(ours.join("summary.txt"), "x").unwrap();
        std::os::unix::fs::chown(ours.join("summary.txt"), Some(65534), None).unwrap();
        assert!(remove_bundle_dir(&ours).is_err(), "kept: not empty");
        assert_eq!(names(&ours), ["summary.txt"]);
    }
}
