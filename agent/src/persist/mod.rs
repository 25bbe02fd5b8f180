//! innoprof's two directories of what it measured or derived once and
//! reuses:
//!
//! - the per-boot directory (`/run/innoprof`, tmpfs: gone at reboot), for
//!   what holds for this boot only: the hit cost ([`crate::cost::kept_hit_cost`],
//!   measured on this boot's kernel) and the kernel's function names
//!   ([`crate::symbolize::kernel_symbols`], at this boot's addresses);
//! - the kept directory (`/var/cache/innoprof`, kept across boots, as
//!   perf keeps its build-id cache), for what one file's bytes and
//!   innoprof's own code alone decide: the unwind rows of the files a
//!   server maps ([`crate::cpu::unwind_cache`]), the index of a server's
//!   DWARF units ([`crate::resolve::lines::UnitIndex`]), the functions of
//!   the units a stack walk read ([`crate::symbolize::kept_functions`]),
//!   the server's version, its counters' layouts, its latch creators and
//!   the probe set a request resolved to ([`crate::plan::kept_plan`]). Each is
//!   kept for one file version (device, inode, size, modification and
//!   change time) read by one innoprof binary; each kind is capped by
//!   count, the least recently used file of the kind making room.
//!
//! innoprof runs as root next to production, so a directory is only used
//! while root alone can change it: root's own, no symlink, no group or
//! other access. Files are read only when they are root's regular files
//! nobody else can write, within a size limit, and written beside their
//! final name under an exclusively created temporary name, then renamed
//! over it: a reader sees the old file or the new one, never half of one.
//! Nothing outside these two directories is ever clobbered or removed, and
//! inside them only files of innoprof's own names.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub mod stamp;

use crate::target::rootfs::FileId;
use stamp::{file_stamp, FileStamp};

/// Where the per-boot caches live.
pub const DEFAULT_DIR: &str = "/run/innoprof";

/// Where what holds across boots is kept.
pub const KEPT_DIR: &str = "/var/cache/innoprof";

/// The per-boot directory: [`DEFAULT_DIR`], or the absolute path in
/// `INNOPROF_RUN_DIR` (checked like it, see [`trusted_dir`]); for the
/// agent's own unit tests, one apart (`innoprof-unit-tests-run` in the
/// temp directory). A test binary is a new file at every build, and what
/// tests keep for it would otherwise fill the real directories' caps.
///
/// What is kept holds for one innoprof binary, in one file per server file
/// (or one for the kernel), so two builds run in turns replace each other's
/// and both start cold every time: `scripts/agentcost.py` gives each build
/// its own directories, as a DBA's repeated recordings with one binary find
/// theirs warm.
pub fn default_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| configured("INNOPROF_RUN_DIR", DEFAULT_DIR, "innoprof-unit-tests-run"))
}

/// The absolute path in the environment variable `var`, else `default`;
/// in the agent's unit tests, `test_name` in the temp directory.
fn configured(var: &str, default: &str, test_name: &str) -> PathBuf {
    if cfg!(test) {
        return std::env::temp_dir().join(test_name);
    }
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(default))
}

/// The kept directory (across boots): [`KEPT_DIR`], or the absolute path
/// in `INNOPROF_CACHE_DIR` (checked like it, see [`trusted_dir`]); for the
/// agent's own unit tests, one apart (`innoprof-unit-tests-kept`).
pub fn kept_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| configured("INNOPROF_CACHE_DIR", KEPT_DIR, "innoprof-unit-tests-kept"))
}

/// A directory only root can change: root's own, no symlink, no group or
/// other access.
pub fn trusted_dir(dir: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    let mode = meta.permissions().mode();
    if meta.is_dir() && meta.uid() == 0 && mode & 0o077 == 0 {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is not a directory only root can use", dir.display()),
        ))
    }
}

/// Creates `dir` (0700) if it is missing, then checks it is trusted.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    trusted_dir(dir)
}

/// `path` opened for reading if it is a regular file of root's that
/// nobody else can write, of at most `max_len` bytes, with its length:
/// checked before opening (so a FIFO is never opened), and again on the
/// open file; a symlink at its end is not followed.
pub fn open_root_file(path: &Path, max_len: u64) -> Option<(std::fs::File, u64)> {
    let fits = |m: &std::fs::Metadata| {
        m.is_file() && m.uid() == 0 && m.mode() & 0o022 == 0 && m.len() <= max_len
    };
    if !fits(&std::fs::symlink_metadata(path).ok()?) {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    fits(&meta).then_some((f, meta.len()))
}

/// The bytes of `path` in a trusted `dir`, if it is a regular file of
/// root's that nobody else can write, of at most `max_len` bytes.
pub fn read_own_file(dir: &Path, path: &Path, max_len: u64) -> Option<Vec<u8>> {
    trusted_dir(dir).ok()?;
    let (f, len) = open_root_file(path, max_len)?;
    mark_used(&f);
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grew since it was looked at.
    f.take(max_len + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max_len).then_some(bytes)
}

/// Sets an open kept file's modification time to now when it is over an
/// hour old, so the least recently used of a kind is the one that makes
/// room (see [`make_room`]); at most one metadata write an hour per file.
pub fn mark_used(f: &std::fs::File) {
    let now = SystemTime::now();
    let stale = f
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|m| now.duration_since(m).is_ok_and(|age| age.as_secs() > 3600));
    if stale {
        let _ = f.set_modified(now);
    }
}

/// Writes `bytes` to `path` in `dir` (created 0700 if missing) through a
/// temporary file of this process's, renamed over `path`.
pub fn write_own_file(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    ensure_dir(dir)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    };
    let written = write();
    if written.is_err() {
        // Only the file this call created exclusively.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// This innoprof binary (device, inode, size, mtime of `/proc/self/exe`):
/// what a kept result derived by innoprof's own code holds for. Another
/// build may compute it differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    pub exe_dev: u64,
    pub exe_ino: u64,
    pub exe_size: u64,
    pub exe_mtime_ns: i128,
}

impl Build {
    pub fn current() -> Option<Self> {
        let exe = std::fs::metadata("/proc/self/exe").ok()?;
        Some(Self {
            exe_dev: exe.dev(),
            exe_ino: exe.ino(),
            exe_size: exe.size(),
            exe_mtime_ns: i128::from(exe.mtime()) * 1_000_000_000 + i128::from(exe.mtime_nsec()),
        })
    }
}

/// This boot and this innoprof binary: what a result measured on this
/// boot's kernel (the hit cost, the kernel's symbol addresses) holds for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootAndBuild {
    pub boot_id: String,
    pub build: Build,
}

impl BootAndBuild {
    pub fn current() -> Option<Self> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(Self {
            boot_id: boot_id.trim().to_string(),
            build: Build::current()?,
        })
    }
}

/// What a result derived from one file's bytes is kept for: this innoprof
/// binary, and the very same file version (device, inode, size,
/// modification and change time; see [`FileStamp`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileKey {
    pub build: Build,
    pub file: FileId,
    pub stamp: FileStamp,
}

impl FileKey {
    pub fn of(build: &Build, file: &std::fs::File) -> Option<Self> {
        Some(Self {
            build: build.clone(),
            file: FileId::of(file).ok()?,
            stamp: file_stamp(file)?,
        })
    }

    /// `{prefix}-MAJOR-MINOR-INODE.{ext}`: one kept file per file identity,
    /// so a file replaced in place (same inode) overwrites its entry.
    pub fn file_name(&self, prefix: &str, ext: &str) -> String {
        let FileId {
            major,
            minor,
            inode,
        } = self.file;
        format!("{prefix}-{major:x}-{minor:x}-{inode:x}.{ext}")
    }
}

/// One kind of kept file in a directory, `{prefix}-MAJOR-MINOR-INODE.{ext}`
/// per file identity, at most `max_files` of them: the unwind rows of a
/// mapped file, the functions of a DWARF file's units.
pub struct KeptKind {
    dir: PathBuf,
    /// This innoprof binary, read once (a recording), not per file;
    /// None: nothing is kept or reused.
    build: Option<Build>,
    prefix: &'static str,
    ext: &'static str,
    max_files: usize,
}

impl KeptKind {
    pub fn in_dir(
        dir: impl Into<PathBuf>,
        prefix: &'static str,
        ext: &'static str,
        max_files: usize,
    ) -> Self {
        Self {
            dir: dir.into(),
            build: Build::current(),
            prefix,
            ext,
            max_files,
        }
    }

    /// What `file`'s kept file would be kept for.
    pub fn key(&self, file: &std::fs::File) -> Option<FileKey> {
        FileKey::of(self.build.as_ref()?, file)
    }

    pub fn path(&self, key: &FileKey) -> PathBuf {
        self.dir.join(key.file_name(self.prefix, self.ext))
    }

    /// The kept file's bytes for `key` (see [`read_own_file`]); the caller
    /// checks the key written in them.
    pub fn read(&self, key: &FileKey, max_len: u64) -> Option<Vec<u8>> {
        read_own_file(&self.dir, &self.path(key), max_len)
    }

    /// Keeps `bytes` for `key`; when `max_files` of this kind are there
    /// already and this one is not among them, the least recently used
    /// makes room (see [`make_room`]).
    pub fn write(&self, key: &FileKey, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.path(key);
        make_room(&self.dir, &path, self.prefix, self.ext, self.max_files)?;
        write_own_file(&self.dir, &path, bytes)
    }
}

/// A value derived from one file, kept as JSON with the key it holds for.
#[derive(Serialize, Deserialize)]
struct KeptJson<T> {
    key: FileKey,
    value: T,
}

/// The value kept as `{prefix}-MAJOR-MINOR-INODE.json` in `dir` for
/// `key`, if that file is ours (see [`read_own_file`]), at most `max_len`
/// bytes, parses, and was kept for this very key.
pub fn load_json<T: serde::de::DeserializeOwned>(
    dir: &Path,
    key: &FileKey,
    prefix: &str,
    max_len: u64,
) -> Option<T> {
    let bytes = read_own_file(dir, &dir.join(key.file_name(prefix, "json")), max_len)?;
    let kept: KeptJson<T> = serde_json::from_slice(&bytes).ok()?;
    (kept.key == *key).then_some(kept.value)
}

/// Keeps `value` for `key` as `{prefix}-MAJOR-MINOR-INODE.json` in `dir`,
/// the least recently used such file making room when `dir` holds
/// `max_files` of them (see [`make_room`]). A failure only means deriving
/// the value again next time.
pub fn store_json<T: Serialize>(
    dir: &Path,
    key: &FileKey,
    prefix: &str,
    max_files: usize,
    value: &T,
) {
    let path = dir.join(key.file_name(prefix, "json"));
    if make_room(dir, &path, prefix, "json", max_files).is_err() {
        return;
    }
    let kept = KeptJson {
        key: key.clone(),
        value,
    };
    if let Ok(bytes) = serde_json::to_vec(&kept) {
        let _ = write_own_file(dir, &path, &bytes);
    }
}

/// How many of `dir`'s files are named `{prefix}-*.{ext}`: each kind of
/// kept file is capped by count.
pub fn count_kept(dir: &Path, prefix: &str, ext: &str) -> usize {
    kept_files(dir, prefix, ext).len()
}

/// `dir`'s root-owned regular files (not symlinks) named as
/// [`FileKey::file_name`] names them, `{prefix}-MAJOR-MINOR-INODE.{ext}`
/// in hex, with their modification times.
fn kept_files(dir: &Path, prefix: &str, ext: &str) -> Vec<(PathBuf, SystemTime)> {
    let file_id = |id: &str| {
        let parts: Vec<&str> = id.split('-').collect();
        parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    kept_files_named(dir, prefix, ext, file_id)
        .into_iter()
        .map(|(path, modified, _)| (path, modified))
        .collect()
}

/// `dir`'s root-owned regular files (not symlinks) named
/// `{prefix}-{ID}.{ext}` where `id_ok(ID)`, with their modification times
/// and lengths.
fn kept_files_named(
    dir: &Path,
    prefix: &str,
    ext: &str,
    id_ok: impl Fn(&str) -> bool,
) -> Vec<(PathBuf, SystemTime, u64)> {
    let (prefix, ext) = (format!("{prefix}-"), format!(".{ext}"));
    let ours = |name: &str| {
        name.strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(&ext))
            .is_some_and(&id_ok)
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(ours))
        .filter_map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).ok()?;
            let modified = meta.modified().ok()?;
            (meta.is_file() && meta.uid() == 0).then(|| (e.path(), modified, meta.len()))
        })
        .collect()
}

/// A build id as the kept files of [`KeptById`] are named by it: lower-case
/// hex, 2 to 128 digits (GNU ld writes 20 bytes, lld and gold 8 to 20).
pub fn is_build_id(id: &str) -> bool {
    (2..=128).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One kind of kept file named by what it holds rather than by the file it
/// was derived from: `{prefix}-BUILDID.{ext}`, e.g. a debug file fetched
/// from debuginfod (`resolve::debuginfod`), whose bytes its build id names
/// (and which is checked against it before it is kept and when it is
/// used). Capped by count, and by the bytes of everything in the
/// directory (other kinds and names included, though only this kind's
/// files are ever removed to make room), the least recently used file
/// making room. Written as an unnamed file (`O_TMPFILE`) linked into
/// place once whole, so a process killed mid-write leaves nothing; where
/// the file system has no unnamed files, under a temporary name of this
/// process's (`{prefix}-BUILDID.{ext}.tmp.PID`), which a later write
/// removes once that process is gone.
pub struct KeptById {
    dir: PathBuf,
    prefix: &'static str,
    ext: &'static str,
    max_files: usize,
    max_bytes: u64,
}

/// A file being written for [`KeptById`]: kept ([`KeptById::keep`]) or
/// dropped ([`KeptById::discard`]).
#[derive(Debug)]
pub struct KeptTemp {
    pub file: std::fs::File,
    /// None: unnamed (`O_TMPFILE`), gone when closed unless linked.
    name: Option<PathBuf>,
}

impl KeptById {
    pub fn in_dir(
        dir: impl Into<PathBuf>,
        prefix: &'static str,
        ext: &'static str,
        max_files: usize,
        max_bytes: u64,
    ) -> Self {
        Self {
            dir: dir.into(),
            prefix,
            ext,
            max_files,
            max_bytes,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `id`'s file is kept; None for anything but a build id (a
    /// name is never made of other text).
    pub fn path(&self, id: &str) -> Option<PathBuf> {
        is_build_id(id).then(|| self.dir.join(format!("{}-{id}.{}", self.prefix, self.ext)))
    }

    /// `id`'s kept file, open, with its length, if the directory is
    /// trusted and the file is root's regular file nobody else can write,
    /// of at most `max_len` bytes (see [`open_root_file`]); marked used.
    pub fn open(&self, id: &str, max_len: u64) -> Option<(std::fs::File, u64, PathBuf)> {
        let path = self.path(id)?;
        trusted_dir(&self.dir).ok()?;
        let (f, len) = open_root_file(&path, max_len)?;
        mark_used(&f);
        Some((f, len, path))
    }

    /// Removes `id`'s kept file (one that failed its check when used): only
    /// in a trusted directory, only root's regular file of this kind's name.
    pub fn remove(&self, id: &str) -> std::io::Result<()> {
        let path = self.path(id).ok_or_else(not_a_build_id)?;
        trusted_dir(&self.dir)?;
        let meta = std::fs::symlink_metadata(&path)?;
        if !(meta.is_file() && meta.uid() == 0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} is not a file innoprof kept", path.display()),
            ));
        }
        std::fs::remove_file(path)
    }

    /// A new, empty file for `id` in the directory (created 0700 if
    /// missing, then checked), 0600: unnamed where the file system can
    /// (`O_TMPFILE`), else created exclusively under a temporary name (no
    /// symlink followed). Temporary names of processes no longer running
    /// are removed first. The caller writes it, then [`Self::keep`]s or
    /// [`Self::discard`]s it.
    pub fn create_temp(&self, id: &str) -> std::io::Result<KeptTemp> {
        let final_path = self.path(id).ok_or_else(not_a_build_id)?;
        ensure_dir(&self.dir)?;
        self.remove_stale_temps();
        let unnamed = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_NOFOLLOW)
            .open(&self.dir);
        match unnamed {
            Ok(file) => return Ok(KeptTemp { file, name: None }),
            // No unnamed files here (EOPNOTSUPP; EISDIR or EINVAL from
            // kernels or file systems that predate them): a named one.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) => {}
            Err(e) => return Err(e),
        }
        let tmp = self.temp_name(&final_path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        Ok(KeptTemp {
            file,
            name: Some(tmp),
        })
    }

    fn temp_name(&self, final_path: &Path) -> PathBuf {
        final_path.with_extension(format!("{}.tmp.{}", self.ext, std::process::id()))
    }

    /// Gives `tmp` of [`Self::create_temp`] (of `len` bytes) `id`'s name,
    /// the least recently used files of the kind removed first until the
    /// count and byte caps hold with it. On failure a named temporary file
    /// is removed (it is this call's own); an unnamed one goes when closed.
    pub fn keep(&self, id: &str, tmp: &KeptTemp, len: u64) -> std::io::Result<PathBuf> {
        let kept = self.path(id).ok_or_else(not_a_build_id).and_then(|path| {
            self.make_room(&path, len)?;
            match &tmp.name {
                Some(name) => std::fs::rename(name, &path)?,
                None => self.link_unnamed(&tmp.file, &path)?,
            }
            Ok(path)
        });
        if kept.is_err() {
            self.discard(tmp);
        }
        kept
    }

    /// Links the unnamed `file` in as `path`; over a file already there
    /// (another run kept the same id meanwhile) through a temporary name
    /// of this process's, renamed over it.
    fn link_unnamed(&self, file: &std::fs::File, path: &Path) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let link = |to: &Path| {
            rustix::fs::linkat(
                rustix::fs::CWD,
                fd_path.as_str(),
                rustix::fs::CWD,
                to,
                rustix::fs::AtFlags::SYMLINK_FOLLOW,
            )
        };
        match link(path) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => {
                let tmp = self.temp_name(path);
                link(&tmp)?;
                std::fs::rename(&tmp, path).inspect_err(|_| {
                    let _ = std::fs::remove_file(&tmp);
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Drops a file [`Self::create_temp`] made (a named one is removed).
    pub fn discard(&self, tmp: &KeptTemp) {
        if let Some(name) = &tmp.name {
            let _ = std::fs::remove_file(name);
        }
    }

    /// Removes this kind's temporary files (`{prefix}-BUILDID.{ext}.tmp.PID`)
    /// whose process is gone: what a process killed mid-write left under a
    /// temporary name (this build writes unnamed files where it can).
    fn remove_stale_temps(&self) {
        if trusted_dir(&self.dir).is_err() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| self.temp_pid(n)) else {
                continue;
            };
            let meta = std::fs::symlink_metadata(entry.path());
            if meta.is_ok_and(|m| m.is_file() && m.uid() == 0) && !process_exists(pid) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// The PID in a temporary name of this kind, `{prefix}-ID.{ext}.tmp.PID`.
    fn temp_pid(&self, name: &str) -> Option<i32> {
        let rest = name.strip_prefix(self.prefix)?.strip_prefix('-')?;
        let (id, pid) = rest.split_once(&format!(".{}.tmp.", self.ext))?;
        if !is_build_id(id) || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        pid.parse().ok().filter(|&p| p > 0)
    }

    /// Before `path` (of `len` bytes) is kept: removes the least recently
    /// used files of this kind (other than `path`) until one more file of
    /// `len` bytes fits both caps, the byte cap counting every file in the
    /// directory (what this kind cannot remove of it, the cap still
    /// holds). Only in a trusted directory, only root's regular files of
    /// this kind's name are removed.
    fn make_room(&self, path: &Path, len: u64) -> std::io::Result<()> {
        trusted_dir(&self.dir)?;
        let mut kept: Vec<_> = kept_files_named(&self.dir, self.prefix, self.ext, is_build_id)
            .into_iter()
            .filter(|(p, _, _)| p != path)
            .collect();
        kept.sort_by_key(|&(_, modified, _)| modified);
        let mut count = kept.len();
        // Everything but `path` (replaced): this kind's files and the rest.
        let mut bytes = dir_bytes(&self.dir, path);
        let others = bytes.saturating_sub(kept.iter().map(|k| k.2).sum());
        if others.saturating_add(len) > self.max_bytes {
            // No room even with every file of the kind gone: none is.
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "{len} bytes more would pass the {} bytes kept there ({others} held by other files)",
                    self.max_bytes
                ),
            ));
        }
        for (old, _, old_len) in kept {
            if count < self.max_files.max(1) && bytes.saturating_add(len) <= self.max_bytes {
                break;
            }
            std::fs::remove_file(old)?;
            count -= 1;
            bytes = bytes.saturating_sub(old_len);
        }
        Ok(())
    }
}

fn not_a_build_id() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a build id")
}

/// The bytes of `dir`'s regular files (not following symlinks), `except`
/// left out.
fn dir_bytes(dir: &Path, except: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.path() != except)
        .filter_map(|e| std::fs::symlink_metadata(e.path()).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Whether a process `pid` exists (signal 0: no signal is sent).
fn process_exists(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Before `path` is written in `dir`: when it is not there and `dir`
/// holds `max_files` of its kind (`{prefix}-*.{ext}`) already, removes the
/// least recently used of them (oldest modification time: a read marks a
/// file used, see [`read_own_file`]) until one more fits. Only in a
/// trusted directory and only files of that kind's name, which in a
/// directory only root can change are innoprof's own.
fn make_room(
    dir: &Path,
    path: &Path,
    prefix: &str,
    ext: &str,
    max_files: usize,
) -> std::io::Result<()> {
    if path.exists() {
        return Ok(());
    }
    remove_retired(dir);
    let mut kept = kept_files(dir, prefix, ext);
    if kept.len() < max_files {
        return Ok(());
    }
    trusted_dir(dir)?;
    kept.sort_by_key(|&(_, modified)| modified);
    let excess = kept.len() + 1 - max_files.max(1);
    for (old, _) in kept.into_iter().take(excess) {
        std::fs::remove_file(old)?;
    }
    Ok(())
}

/// Kinds of kept file (`{prefix}-*.{ext}`) earlier innoprof builds wrote
/// and this one neither writes nor reads: no write of their kind ever
/// makes room among them, so they are removed when another kind is
/// written. `inflated-*.debug`: libc's debug file inflated whole, ~10 MB
/// per libc version, kept from 2026-11-26 to 11-28 (see
/// `library_debug`).
const RETIRED: &[(&str, &str)] = &[("inflated", "debug")];

/// Removes the retired kinds' files from `dir`, only when `dir` is
/// trusted, only root's regular files of those kinds' names (see
/// [`kept_files`]); a failure leaves them for the next write.
fn remove_retired(dir: &Path) {
    if trusted_dir(dir).is_err() {
        return;
    }
    for (prefix, ext) in RETIRED {
        for (old, _) in kept_files(dir, prefix, ext) {
            let _ = std::fs::remove_file(old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_round_trip_and_foreign_ones_are_not_read() {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("run");
        let file = run.join("x.bin");
        write_own_file(&run, &file, b"hello").unwrap();
        assert_eq!(std::fs::metadata(&run).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            read_own_file(&run, &file, 5).as_deref(),
            Some(&b"hello"[..])
        );
        // Over the limit: not read.
        assert_eq!(read_own_file(&run, &file, 4), None);
        // Writable by others: not read.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_own_file(&run, &file, 5), None);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A symlink in its place: not followed.
        let elsewhere = d.path().join("elsewhere");
        std::fs::write(&elsewhere, b"other").unwrap();
        let link = run.join("link.bin");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert_eq!(read_own_file(&run, &link, 5), None);
        // A directory open to others: neither read nor written.
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(read_own_file(&run, &file, 5), None);
        assert!(write_own_file(&run, &file, b"again").is_err());
        // Nothing but what was written is left (no temporary file).
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&run)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["link.bin", "x.bin"]);
    }

    /// A full kind makes room by its least recently used file, a read
    /// marking a file used; other kinds, other names and symlinks are
    /// never removed.
    #[test]
    fn a_full_kind_evicts_its_least_recently_used_file_only() {
        let d = tempfile::tempdir().unwrap();
        let kept = d.path().join("kept");
        ensure_dir(&kept).unwrap();
        let hours_ago = |h: u64| SystemTime::now() - std::time::Duration::from_secs(h * 3600);
        let put = |name: &str, age_h: u64| {
            let path = kept.join(name);
            write_own_file(&kept, &path, name.as_bytes()).unwrap();
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(hours_ago(age_h))
                .unwrap();
        };
        put("rows-0-1-a.rows", 5);
        put("rows-0-1-b.rows", 3);
        put("rows-0-1-c.rows", 4);
        put("other-0-1-e.rows", 100);
        put("rows-0-1-e.json", 100);
        // Not a name innoprof gives: never counted nor removed.
        put("rows-notes.rows", 100);
        put("rows-0-1-xyz.rows", 100);
        let target = d.path().join("elsewhere");
        std::fs::write(&target, b"not ours").unwrap();
        std::os::unix::fs::symlink(&target, kept.join("rows-0-1-y.rows")).unwrap();
        // The oldest (a) is read: now the most recently used.
        assert!(read_own_file(&kept, &kept.join("rows-0-1-a.rows"), 64).is_some());
        make_room(&kept, &kept.join("rows-0-1-d.rows"), "rows", "rows", 3).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&kept)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "other-0-1-e.rows",
                "rows-0-1-a.rows",
                "rows-0-1-b.rows",
                "rows-0-1-e.json",
                "rows-0-1-xyz.rows",
                "rows-0-1-y.rows",
                "rows-notes.rows",
            ],
            "c, the least recently used rows file, made room"
        );
        assert!(target.exists());
        // A retired kind's files go at the next write of another kind; a
        // name innoprof never gave stays.
        put("inflated-0-1-f.debug", 10);
        put("inflated-notes.debug", 10);
        make_room(&kept, &kept.join("rows-0-1-g.rows"), "rows", "rows", 9).unwrap();
        assert!(!kept.join("inflated-0-1-f.debug").exists());
        assert!(kept.join("inflated-notes.debug").exists());
        // A file already kept is replaced in place: nothing removed.
        make_room(&kept, &kept.join("rows-0-1-a.rows"), "rows", "rows", 2).unwrap();
        assert_eq!(count_kept(&kept, "rows", "rows"), 2);
        // A directory open to others: nothing removed.
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(make_room(&kept, &kept.join("rows-0-1-e.rows"), "rows", "rows", 2).is_err());
        assert_eq!(count_kept(&kept, "rows", "rows"), 2);
    }

    /// A kind kept by build id: only build ids make names, a file comes
    /// back only from a trusted directory, and keeping one more makes room
    /// by count and by bytes, least recently used first, never touching
    /// another kind or a name innoprof never gave.
    #[test]
    fn kept_by_id_caps_count_and_bytes_least_recently_used_first() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("kept");
        let kind = KeptById::in_dir(&dir, "dbg", "debug", 3, 100);
        assert!(kind.path("../etc").is_none() && kind.path("ABCD").is_none());
        let put = |id: &str, len: usize, age_h: u64| {
            let mut tmp = kind.create_temp(id).unwrap();
            tmp.file.write_all(&vec![b'x'; len]).unwrap();
            let path = kind.keep(id, &tmp, len as u64).unwrap();
            tmp.file
                .set_modified(SystemTime::now() - std::time::Duration::from_secs(age_h * 3600))
                .unwrap();
            path
        };
        put("aa01", 30, 5);
        put("aa02", 30, 4);
        put("aa03", 30, 3);
        std::fs::write(dir.join("dbg-notes.debug"), b"not ours").unwrap();
        std::fs::write(dir.join("rows-0-1-a.debug"), b"another kind").unwrap();
        // The oldest is used: now the newest.
        assert_eq!(kind.open("aa01", 100).unwrap().1, 30);
        // A fourth file: the count cap removes the least recently used (02).
        put("aa04", 10, 0);
        let exists = |id: &str| dir.join(format!("dbg-{id}.debug")).exists();
        assert!(!exists("aa02") && exists("aa01") && exists("aa03") && exists("aa04"));
        // 70 bytes kept, 70 more: 03 (count and bytes), then 01 (bytes).
        put("aa05", 70, 0);
        assert!(!exists("aa03") && !exists("aa01") && exists("aa04") && exists("aa05"));
        assert!(dir.join("dbg-notes.debug").exists() && dir.join("rows-0-1-a.debug").exists());
        // No temporary file is left behind.
        assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".tmp.")));
        // A directory open to others: nothing comes back from it.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(kind.open("aa04", 100).is_none());
    }

    /// The byte cap counts every file in the directory, though only the
    /// kind's own are removed to make room; a temporary name whose process
    /// is gone is removed at the next write, a live one's is not.
    #[test]
    fn kept_by_id_counts_every_byte_and_removes_dead_temporaries() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("kept");
        let kind = KeptById::in_dir(&dir, "dbg", "debug", 8, 100);
        let put = |id: &str, len: usize| {
            let mut tmp = kind.create_temp(id)?;
            tmp.file.write_all(&vec![b'x'; len])?;
            kind.keep(id, &tmp, len as u64)
        };
        put("aa01", 30).unwrap();
        write_own_file(&dir, &dir.join("notes.txt"), &[b'n'; 60]).unwrap();
        // 30 + 60 held: 50 more does not fit even with aa01 gone, so
        // nothing is removed; 40 fits once aa01 goes.
        let err = put("aa02", 50).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
        assert!(dir.join("dbg-aa01.debug").exists(), "{err}");
        put("aa03", 40).unwrap();
        assert!(!dir.join("dbg-aa01.debug").exists());
        assert!(
            dir.join("notes.txt").exists(),
            "another name is never removed"
        );
        assert_eq!(dir_bytes(&dir, Path::new("")), 100);

        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let stale = dir.join(format!("dbg-aa04.debug.tmp.{dead_pid}"));
        let live = dir.join(format!("dbg-aa05.debug.tmp.{}", std::process::id()));
        let foreign = dir.join(format!("other-aa04.debug.tmp.{dead_pid}"));
        for p in [&stale, &live, &foreign] {
            write_own_file(&dir, p, b"t").unwrap();
        }
        drop(kind.create_temp("aa06").unwrap());
        assert!(
            !stale.exists(),
            "the dead process's temporary file is removed"
        );
        assert!(live.exists() && foreign.exists());
        // The unnamed file was never linked: nothing named aa06.
        assert!(!dir.join("dbg-aa06.debug").exists());
    }

    /// A file's key holds across boots (no boot id in it) and tells a file
    /// whose modification time was set back to the original's from the
    /// original: its change time moved.
    #[test]
    fn a_file_key_holds_across_boots_and_sees_a_forged_mtime() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("lib.so");
        std::fs::write(&path, b"version one").unwrap();
        let build = Build::current().unwrap();
        let before = FileKey::of(&build, &std::fs::File::open(&path).unwrap()).unwrap();
        assert!(!serde_json::to_string(&before).unwrap().contains("boot"));
        let mtime = before.stamp.modified;
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"version two").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let after = FileKey::of(&build, &std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(
            (after.file, after.stamp.len, after.stamp.modified),
            (before.file, before.stamp.len, mtime)
        );
        assert_ne!(after, before);
    }
}
