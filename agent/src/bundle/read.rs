//! Reading a file of a saved bundle (`innoprof report DIR`, `innoprof diff
//! A B`). Every read of a bundle file goes through [`BundleDir::read`].
//!
//! A bundle may come from a ticket: tar keeps symbolic links and FIFOs, and
//! summary.json names further files. innoprof often runs as root, so a
//! bundle holding `oncpu.svg -> /etc/shadow` must not copy that file into
//! report.html. Hence: only plain names (what innoprof itself writes, no
//! `/`, no `..`), opened with O_NOFOLLOW, only regular files (a FIFO would
//! block the reader forever, a device may act on open), and at most
//! [`MAX_FILE_BYTES`] each. The bundle directory itself may be a link: the
//! user chose it.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest bundle file innoprof reads. A 10-minute recording of a busy
/// server with every probe writes folded files of a few MiB; 256 MiB is
/// far past that and still fits in memory on a database host.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BundleReadError {
    #[error("{dir}: the bundle names the file {name:?}, which is not a plain file name inside it; refused (innoprof reads only the files it writes, directly in the bundle directory)")]
    BadName { dir: PathBuf, name: String },
    #[error("{path} is a symbolic link; refused: innoprof does not follow links inside a bundle (copy the real file in its place if you trust it)")]
    Symlink { path: PathBuf },
    #[error("{path} is a {kind}, not a regular file; refused (a bundle holds only regular files)")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path} is larger than innoprof's limit of {} MiB per bundle file; refused (not a file innoprof wrote?)", MAX_FILE_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("{0} does not exist; give the directory `innoprof record --out` wrote")]
    NoDirectory(PathBuf),
    #[error("{0} is not a directory; give the directory `innoprof record --out` wrote (unpack a .tar.gz first)")]
    NotADirectory(PathBuf),
    #[error("reading {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A saved bundle directory, read one named file at a time.
#[derive(Debug, Clone)]
pub struct BundleDir {
    dir: PathBuf,
}

impl BundleDir {
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The bytes of `name`, `None` when the bundle has no such file.
    /// The bundle directory itself exists (followed: the user chose it).
    fn check_dir(&self) -> Result<(), BundleReadError> {
        match std::fs::metadata(&self.dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(BundleReadError::NotADirectory(self.dir.clone())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(BundleReadError::NoDirectory(self.dir.clone()))
            }
            Err(source) => Err(BundleReadError::Io {
                path: self.dir.clone(),
                source,
            }),
        }
    }

    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, BundleReadError> {
        if !is_plain_name(name) {
            return Err(BundleReadError::BadName {
                dir: self.dir.clone(),
                name: name.into(),
            });
        }
        let path = self.dir.join(name);
        let io = |source| BundleReadError::Io {
            path: path.clone(),
            source,
        };
        // Checked before opening too: opening a device can act on it.
        match std::fs::symlink_metadata(&path) {
            Ok(m) => check_type(&path, m.file_type())?,
            // A missing file of an existing bundle is the caller's to
            // judge; a missing bundle is said as such.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.check_dir()?;
                return Ok(None);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(BundleReadError::NotADirectory(self.dir.clone()))
            }
            Err(e) => return Err(io(e)),
        }
        // O_NONBLOCK: a FIFO swapped in after the check does not block the
        // open; O_NOFOLLOW: nor is a link swapped in followed.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(BundleReadError::Symlink { path })
            }
            Err(e) => return Err(io(e)),
        };
        // What was opened decides, not what the name pointed at before.
        let meta = file.metadata().map_err(io)?;
        check_type(&path, meta.file_type())?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(BundleReadError::TooLarge { path });
        }
        read_bounded(file, meta.len())
            .map_err(io)?
            .map_or(Err(BundleReadError::TooLarge { path: path.clone() }), |b| {
                Ok(Some(b))
            })
    }

    /// Like [`read`](Self::read), as text; invalid UTF-8 is an error.
    pub fn read_text(&self, name: &str) -> Result<Option<String>, BundleReadError> {
        self.read(name)?
            .map(|b| {
                String::from_utf8(b).map_err(|e| BundleReadError::Io {
                    path: self.dir.join(name),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
                })
            })
            .transpose()
    }
}

/// A name innoprof could have written: one path component, not `.`/`..`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

fn check_type(path: &Path, t: std::fs::FileType) -> Result<(), BundleReadError> {
    let kind = if t.is_file() {
        return Ok(());
    } else if t.is_symlink() {
        return Err(BundleReadError::Symlink { path: path.into() });
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() || t.is_char_device() {
        "device"
    } else {
        "special file"
    };
    Err(BundleReadError::NotRegular {
        path: path.into(),
        kind,
    })
}

/// The whole file, or `None` when it grew past the limit while read.
fn read_bounded(file: File, size_hint: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::with_capacity(size_hint as usize);
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= MAX_FILE_BYTES).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing bundle, or a file where the bundle should be, is said as
    /// such; a file missing from an existing bundle is `None`.
    #[test]
    fn a_missing_bundle_is_not_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        assert!(matches!(
            BundleDir::new(&gone).read("summary.json"),
            Err(BundleReadError::NoDirectory(p)) if p == gone
        ));
        let file = dir.path().join("f.tar.gz");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            BundleDir::new(&file).read("summary.json"),
            Err(BundleReadError::NotADirectory(_))
        ));
        assert!(BundleDir::new(dir.path())
            .read("summary.json")
            .unwrap()
            .is_none());
    }

    #[test]
    fn refuses_names_that_leave_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let b = BundleDir::new(dir.path());
        for name in ["", ".", "..", "../x", "/etc/passwd", "a/b"] {
            let err = b.read(name).unwrap_err();
            assert!(
                matches!(err, BundleReadError::BadName { .. }),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn reads_regular_files_and_refuses_links_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let b = BundleDir::new(dir.path());
        std::fs::write(dir.path().join("a"), "x").unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("l")).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert_eq!(b.read("a").unwrap(), Some(b"x".to_vec()));
        assert_eq!(b.read("absent").unwrap(), None);
        assert!(matches!(
            b.read("l").unwrap_err(),
            BundleReadError::Symlink { .. }
        ));
        let err = b.read("d").unwrap_err().to_string();
        assert!(err.contains("is a directory, not a regular file"), "{err}");
    }
}
