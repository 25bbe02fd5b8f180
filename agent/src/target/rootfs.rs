//! Opening the files a target process runs and maps, as that process sees
//! them and nothing else.
//!
//! A path the target reports (`/proc/PID/exe`'s link text, a path in
//! `/proc/PID/maps`) names a file inside the target's root. Opened as
//! `/proc/PID/root/<path>`, an absolute symlink planted there by the
//! target's (unprivileged) owner resolves against innoprof's own root, so
//! root-innoprof would read a root-only host file and attach to an
//! arbitrary host binary. So each file is opened by what the kernel
//! itself holds (`/proc/PID/exe`, `/proc/PID/map_files/START-END`), or,
//! where that is not allowed (map_files needs CAP_SYS_ADMIN), by path with
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` on the target's root:
//! `..` and absolute symlinks then stay inside that root. Either way the
//! opened file's device and inode must be the ones `/proc/PID/maps` shows,
//! and the open file is passed on (as `/proc/self/fd/N`, which resolves to
//! that very inode), never the path again.

pub use crate::target::file_id::FileId;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("cannot open {path} of PID {pid}")]
    Open {
        pid: u32,
        path: String,
        source: std::io::Error,
    },
    #[error("PID {pid} does not map {path} (not in /proc/{pid}/maps); refusing to read it")]
    NotMapped { pid: u32, path: String },
    #[error(
        "{path} inside PID {pid}'s root is not the file the process maps (opened {found}, mapped {mapped}): a symlink or a replaced file; refusing to read it"
    )]
    NotTheMappedFile {
        pid: u32,
        path: String,
        found: FileId,
        mapped: FileId,
    },
}

/// A file of the target, open and checked to be the one it maps.
#[derive(Debug)]
pub struct TargetFile {
    file: File,
    id: FileId,
}

impl TargetFile {
    /// A file innoprof opened itself (a debug file), as one: its identity
    /// taken from the open file.
    pub fn from_open(file: File) -> std::io::Result<Self> {
        let id = FileId::of(&file)?;
        Ok(Self { file, id })
    }

    /// A path that reaches exactly this open file (the kernel follows the
    /// fd link to its inode; no name is looked up again), for APIs that
    /// take a path: blazesym, libbpf's attach, memmap via `File::open`.
    /// Valid while `self` lives.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn id(&self) -> FileId {
        self.id
    }
}

/// Where a binary lives, to find files beside it (its debug file) in the
/// same root it was found in.
#[derive(Debug, Clone)]
pub enum Home {
    /// On innoprof's own file system (`--binary`): the user named it.
    Host { dir: PathBuf },
    /// A target's executable: its directory as the target sees it, and a
    /// handle on the target's root.
    Target { root: Arc<OwnedFd>, dir: PathBuf },
}

impl Home {
    /// The home of a file named by the user: its canonical directory
    /// (debug roots mirror absolute directories).
    pub fn host(binary: &Path) -> Self {
        let dir = binary.parent().unwrap_or(Path::new("/"));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        Self::Host {
            dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        }
    }

    /// The binary's directory, absolute, as its own root sees it.
    pub fn dir(&self) -> &Path {
        match self {
            Self::Host { dir } | Self::Target { dir, .. } => dir,
        }
    }

    /// Opens `dir/rel` inside the home's root. The file itself must not
    /// be a symlink and must be a regular file: a name planted by the
    /// target's owner leads nowhere else.
    pub fn open_beside(&self, rel: &Path) -> std::io::Result<File> {
        let path = self.dir().join(rel);
        let file = match self {
            Self::Host { .. } => std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)?,
            Self::Target { root, .. } => {
                use std::os::fd::AsFd;
                open_in_root(root.as_fd(), &path, libc::O_NOFOLLOW)?
            }
        };
        regular(file)
    }
}

/// Opens a file of innoprof's own file system (a debug root such as
/// `/usr/lib/debug`, root's to write) and checks it is a regular file
/// (not a FIFO or device that would block or never end).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    regular(File::open(path)?)
}

fn regular(file: File) -> std::io::Result<File> {
    if file.metadata()?.is_file() {
        Ok(file)
    } else {
        Err(std::io::Error::other("not a regular file"))
    }
}

/// The target's executable: `/proc/PID/exe` is the file the kernel runs
/// (whatever its path now leads to), checked against the maps entry of
/// `exe` (the link text, ` (deleted)` included, as maps writes it too)
/// where there is one.
pub fn open_exe(pid: u32, exe: &Path) -> Result<TargetFile, RootError> {
    let shown = exe.to_string_lossy().into_owned();
    let link = format!("/proc/{pid}/exe");
    let file = File::open(&link).map_err(|source| RootError::Open {
        pid,
        path: shown.clone(),
        source,
    })?;
    // The link is the kernel's own reference to the executed file, so it
    // needs no proof; maps, when it already lists the file (a process in
    // the middle of exec does not yet), must agree.
    match mapped_id(pid, &shown)? {
        Some(mapped) => verified(pid, &shown, file, mapped),
        None => {
            let id = FileId::of(&file).map_err(|source| RootError::Open {
                pid,
                path: shown.clone(),
                source,
            })?;
            Ok(TargetFile { file, id })
        }
    }
}

/// A file mapped at `[start, end)` under `path`, whose maps entry shows
/// `mapped`: through map_files, else by path inside the target's root.
pub fn open_mapped(
    pid: u32,
    start: u64,
    end: u64,
    path: &str,
    mapped: FileId,
) -> Result<TargetFile, RootError> {
    let by_kernel = File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
    let file = match by_kernel {
        Ok(f) => f,
        // map_files needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE); with
        // only CAP_SYS_PTRACE, resolve the name inside the target's root.
        Err(_) => {
            open_in_target_root(pid, Path::new(path), 0).map_err(|source| RootError::Open {
                pid,
                path: path.to_string(),
                source,
            })?
        }
    };
    verified(pid, path, file, mapped)
}

/// Opens `path` (as the target names it) inside the target's root and
/// checks it is the file the process maps under that name: the by-path
/// route of [`open_mapped`], public so its refusal can be shown on a real
/// process.
pub fn open_mapped_by_path(pid: u32, path: &str) -> Result<TargetFile, RootError> {
    let mapped = mapped_id(pid, path)?.ok_or(RootError::NotMapped {
        pid,
        path: path.to_string(),
    })?;
    let file = open_in_target_root(pid, Path::new(path), 0).map_err(|source| RootError::Open {
        pid,
        path: path.to_string(),
        source,
    })?;
    verified(pid, path, file, mapped)
}

/// A handle on the target's root directory (`O_PATH`), to resolve names
/// in with [`open_in_root`]. Holding it keeps resolving in the same root
/// even if the PID is reused.
pub fn open_root(pid: u32) -> std::io::Result<OwnedFd> {
    let path = std::ffi::CString::new(format!("/proc/{pid}/root")).expect("no NUL in a PID path");
    // SAFETY: a NUL-terminated path and plain flags; the result is checked.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` read-only with `root` as `/`: `..` stops at the root,
/// absolute symlinks are taken relative to it, and `/proc/*/fd`-style
/// magic links are refused, so nothing outside `root` can be reached.
/// `extra` adds open flags (`O_NOFOLLOW` for a file that must not be a
/// symlink itself).
pub fn open_in_root(root: BorrowedFd<'_>, path: &Path, extra: i32) -> std::io::Result<File> {
    use std::os::unix::ffi::OsStrExt;
    let rel = path.strip_prefix("/").unwrap_or(path);
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // The kernel's `struct open_how` (libc's is non-exhaustive, so it
    // cannot be built here).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | extra) as u64,
        mode: 0,
        resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    };
    loop {
        // SAFETY: a valid dirfd, a NUL-terminated path and an open_how of
        // the size passed; the result is checked.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a descriptor the kernel just gave us, owned from here on.
            return Ok(unsafe { File::from_raw_fd(fd as i32) });
        }
        let e = std::io::Error::last_os_error();
        // openat2 asks for a retry when a rename raced the lookup.
        if e.raw_os_error() != Some(libc::EAGAIN) && e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn open_in_target_root(pid: u32, path: &Path, extra: i32) -> std::io::Result<File> {
    let root = open_root(pid)?;
    use std::os::fd::AsFd;
    open_in_root(root.as_fd(), &in_target_root(pid, path), extra)
}

/// `path` as /proc shows it to innoprof, made relative to the target's
/// root. The kernel writes /proc/PID/exe and /proc/PID/maps paths as seen
/// from the reader's root: for a target in a chroot that innoprof's root
/// can reach, that is `/srv/jail/bin/x` while the target calls it
/// `/bin/x` (`/proc/PID/root` reads `/srv/jail`); for one in a container
/// (another mount namespace, pivoted root) it is already the target's own.
pub fn in_target_root(pid: u32, path: &Path) -> PathBuf {
    let Ok(root) = std::fs::read_link(format!("/proc/{pid}/root")) else {
        return path.to_path_buf();
    };
    match path.strip_prefix(&root) {
        Ok(rest) if root != Path::new("/") => Path::new("/").join(rest),
        _ => path.to_path_buf(),
    }
}

/// Device and inode of the first mapping of `path` in /proc/PID/maps.
fn mapped_id(pid: u32, path: &str) -> Result<Option<FileId>, RootError> {
    let maps = crate::target::maps::of(pid).map_err(|source| RootError::Open {
        pid,
        path: format!("/proc/{pid}/maps"),
        source,
    })?;
    // The path as maps spells it: a deleted file's with its suffix.
    Ok(maps
        .iter()
        .find(|m| m.path == path || (m.deleted && format!("{} (deleted)", m.path) == path))
        .map(|m| m.id))
}

fn verified(pid: u32, path: &str, file: File, mapped: FileId) -> Result<TargetFile, RootError> {
    let found = FileId::of(&file).map_err(|source| RootError::Open {
        pid,
        path: path.to_string(),
        source,
    })?;
    if found != mapped {
        return Err(RootError::NotTheMappedFile {
            pid,
            path: path.to_string(),
            found,
            mapped,
        });
    }
    Ok(TargetFile { file, id: found })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// `..` and absolute symlinks stay inside the root; magic links are refused.
    #[test]
    fn resolution_stays_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/inside"), "in").unwrap();
        std::fs::write(dir.path().join("outside"), "out").unwrap();
        std::os::unix::fs::symlink("/etc/inside", root.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../outside", root.join("up")).unwrap();
        std::os::unix::fs::symlink("/proc/self/root/etc/hostname", root.join("magic")).unwrap();
        let fd: OwnedFd = File::open(&root).unwrap().into();
        let read = |p: &str| {
            open_in_root(fd.as_fd(), Path::new(p), 0).map(|f| {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut &f, &mut s).unwrap();
                s
            })
        };
        assert_eq!(read("/abs").unwrap(), "in");
        assert_eq!(read("../../etc/inside").unwrap(), "in");
        // `../../outside` from the root is `/outside` inside it: absent.
        assert_eq!(
            read("/up").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        assert!(read("/magic").is_err());
        let nofollow = open_in_root(fd.as_fd(), Path::new("/abs"), libc::O_NOFOLLOW);
        assert_eq!(nofollow.unwrap_err().raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn own_executable_opens_and_matches_its_mapping() {
        let pid = std::process::id();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = open_exe(pid, &exe).unwrap();
        assert_eq!(
            FileId::of(&File::open(f.fd_path()).unwrap()).unwrap(),
            f.id()
        );
        let by_path = open_mapped_by_path(pid, &exe.to_string_lossy()).unwrap();
        assert_eq!(by_path.id(), f.id());
        assert!(matches!(
            open_mapped_by_path(pid, "/etc/hostname"),
            Err(RootError::NotMapped { .. })
        ));
    }
}
