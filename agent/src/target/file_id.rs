//! What identifies a file across paths and opens: its device and inode.

use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// Device and inode: what identifies a file across paths and opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileId {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

impl std::fmt::Display for FileId {
    /// As /proc/PID/maps spells it: `fd:01 1234`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x}:{:02x} {}", self.major, self.minor, self.inode)
    }
}

impl FileId {
    pub fn of(file: &File) -> std::io::Result<Self> {
        let m = file.metadata()?;
        Ok(Self {
            major: libc::major(m.dev()),
            minor: libc::minor(m.dev()),
            inode: m.ino(),
        })
    }

    /// From the `dev` and `inode` columns of a /proc/PID/maps line.
    pub fn parse_maps(dev: &str, inode: &str) -> Option<Self> {
        let (major, minor) = dev.split_once(':')?;
        Some(Self {
            major: u32::from_str_radix(major, 16).ok()?,
            minor: u32::from_str_radix(minor, 16).ok()?,
            inode: inode.parse().ok()?,
        })
    }
}
