//! The stamp of a kept file's source: what tells a file innoprof kept
//! results for from one changed in place since: with its `FileId`, the
//! very same file (also `crate::cpu::unwind_cache`).

/// What tells one version of a file from another at the same identity
/// (device, inode): its size, modification time and inode change time.
/// The change time is in because a file's owner can set its modification
/// time to anything (`touch -d`) but not its change time, which the kernel
/// sets to now on every write, rename or chmod: a file made to look like
/// one innoprof kept results for still differs there, across boots too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStamp {
    pub len: u64,
    pub modified: std::time::SystemTime,
    pub changed_ns: i128,
}

pub fn file_stamp(file: &std::fs::File) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    Some(FileStamp {
        len: meta.len(),
        modified: meta.modified().ok()?,
        changed_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    })
}
