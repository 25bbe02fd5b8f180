//! innoprof's per-boot directory (`/run/innoprof`, tmpfs: gone at reboot),
//! where it keeps what it measured or derived once and may reuse until
//! the next boot: the hit cost ([`crate::hitcost_cache`]), the unwind
//! rows of the files a server maps ([`crate::cpu::unwind_cache`]), the
//! index of a server's DWARF units ([`crate::resolve::lines::UnitIndex`]),
//! the functions of the units a stack walk read
//! ([`crate::kept_functions`]), the kernel's function names
//! ([`crate::kernel_symbols`]), inflated copies of libraries' compressed
//! debug files ([`crate::inflated_debug`]) and the probe set a request
//! resolved to ([`crate::kept_plan`]).
//!
//! innoprof runs as root next to production, so the directory is only used
//! while root alone can change it: root's own, no symlink, no group or
//! other access. Files are read only when they are root's regular files
//! nobody else can write, within a size limit, and written beside their
//! final name under an exclusively created temporary name, then renamed
//! over it: a reader sees the old file or the new one, never half of one,
//! and nothing innoprof did not create is ever clobbered or removed.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::resolve::elf::file_stamp;
use crate::rootfs::FileId;

/// Where the per-boot caches live.
pub const DEFAULT_DIR: &str = "/run/innoprof";

/// The directory the caches use: [`DEFAULT_DIR`], or the absolute path in
/// `INNOPROF_RUN_DIR` (checked like it, see [`trusted_dir`]); for the
/// agent's own unit tests, one apart (`innoprof-unit-tests-run` in the
/// temp directory). A test binary is a new file at every build, and what
/// tests keep for it would otherwise count against the real directory's
/// caps until reboot.
///
/// What is kept holds for one innoprof binary, in one file per server file
/// (or one for the kernel), so two builds run in turns replace each other's
/// and both start cold every time: `scripts/agentcost.py` gives each build
/// its own directory, as a DBA's repeated recordings with one binary find
/// theirs warm.
pub fn default_dir() -> &'static Path {
    #[cfg(not(test))]
    {
        static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        DIR.get_or_init(|| {
            std::env::var_os("INNOPROF_RUN_DIR")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
        })
    }
    #[cfg(test)]
    {
        static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
        DIR.get_or_init(|| std::env::temp_dir().join("innoprof-unit-tests-run"))
    }
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
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grew since it was looked at.
    f.take(max_len + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max_len).then_some(bytes)
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

/// This boot and this innoprof binary (device, inode, size, mtime of
/// `/proc/self/exe`): what a kept result derived by innoprof's own code
/// holds for. Another build may compute it differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootAndBuild {
    pub boot_id: String,
    pub exe_dev: u64,
    pub exe_ino: u64,
    pub exe_size: u64,
    pub exe_mtime_ns: i128,
}

impl BootAndBuild {
    pub fn current() -> Option<Self> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let exe = std::fs::metadata("/proc/self/exe").ok()?;
        Some(Self {
            boot_id: boot_id.trim().to_string(),
            exe_dev: exe.dev(),
            exe_ino: exe.ino(),
            exe_size: exe.size(),
            exe_mtime_ns: i128::from(exe.mtime()) * 1_000_000_000 + i128::from(exe.mtime_nsec()),
        })
    }
}

/// What a result derived from one file's bytes is kept for: this boot and
/// innoprof binary, and the very same file (device, inode, size and
/// modification time, as `ElfImage::is_file` tells files apart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileKey {
    pub build: BootAndBuild,
    pub file: FileId,
    /// Size and modification time.
    pub stamp: (u64, SystemTime),
}

impl FileKey {
    pub fn of(build: &BootAndBuild, file: &std::fs::File) -> Option<Self> {
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
    /// This boot and binary, read once (a recording), not per file;
    /// None: nothing is kept or reused.
    build: Option<BootAndBuild>,
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
            build: BootAndBuild::current(),
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

    /// Keeps `bytes` for `key`, unless `max_files` of this kind are there
    /// already and this one is not among them.
    pub fn write(&self, key: &FileKey, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.path(key);
        if !path.exists() && count_kept(&self.dir, self.prefix, self.ext) >= self.max_files {
            return Err(std::io::Error::other(format!(
                "{} holds {} {}-*.{} files already",
                self.dir.display(),
                self.max_files,
                self.prefix,
                self.ext
            )));
        }
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
/// unless `dir` already holds `max_files` such files and this one is not
/// among them. A failure only means deriving the value again next time.
pub fn store_json<T: Serialize>(
    dir: &Path,
    key: &FileKey,
    prefix: &str,
    max_files: usize,
    value: &T,
) {
    let path = dir.join(key.file_name(prefix, "json"));
    if !path.exists() && count_kept(dir, prefix, "json") >= max_files {
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

/// How many of `dir`'s files are named `{prefix}-*.{ext}`: innoprof
/// never removes a file it did not write and does not track which ones
/// earlier runs wrote, so each kind of kept file is capped by count.
pub fn count_kept(dir: &Path, prefix: &str, ext: &str) -> usize {
    let (prefix, ext) = (format!("{prefix}-"), format!(".{ext}"));
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with(&prefix) && name.ends_with(&ext)
            })
            .count()
    })
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
}
