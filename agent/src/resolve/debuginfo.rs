//! Finding separate debug info for a stripped binary, the way gdb does:
//! an explicit `--debuginfo` file, then `DIR/.build-id/ab/cdef….debug`
//! under each debug directory, then the `.gnu_debuglink` name next to the
//! binary, in its `.debug/`, and under each debug directory. A candidate
//! must carry the same build-id, or (without build-ids) match the
//! debuglink's CRC32.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::elf::{ElfError, ElfImage};

#[derive(Debug, Clone)]
pub struct DebugSearch {
    /// `--debuginfo PATH`: used as is (build-id still checked).
    pub explicit: Option<PathBuf>,
    /// Roots such as `/usr/lib/debug`.
    pub dirs: Vec<PathBuf>,
}

impl Default for DebugSearch {
    fn default() -> Self {
        Self {
            explicit: None,
            dirs: vec![PathBuf::from("/usr/lib/debug")],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    Explicit,
    BuildId,
    Debuglink,
}

/// Attaches separate debug info to `image` when it lacks `.symtab` or
/// DWARF and a matching file can be found. Returns how it was found.
pub fn attach_debug_info(
    image: &mut ElfImage,
    search: &DebugSearch,
) -> Result<Option<FoundBy>, ElfError> {
    if let Some(path) = &search.explicit {
        image.use_debug_file(path)?;
        return Ok(Some(FoundBy::Explicit));
    }
    if image.has_symtab && image.has_debug_info {
        return Ok(None);
    }
    if let Some(id) = image.build_id.clone().filter(|id| id.len() > 2) {
        for dir in &search.dirs {
            let candidate = dir
                .join(".build-id")
                .join(&id[..2])
                .join(format!("{}.debug", &id[2..]));
            if candidate.is_file() && image.use_debug_file(&candidate).is_ok() {
                return Ok(Some(FoundBy::BuildId));
            }
        }
    }
    if let Some((name, crc)) = image.debuglink() {
        for candidate in debuglink_candidates(&image.path, &name, &search.dirs) {
            if !candidate.is_file() || candidate == image.path {
                continue;
            }
            // Without build-ids on both sides, the CRC is the only proof.
            let crc_ok =
                image.build_id.is_some() || file_crc32(&candidate).is_some_and(|c| c == crc);
            if crc_ok && image.use_debug_file(&candidate).is_ok() {
                return Ok(Some(FoundBy::Debuglink));
            }
        }
    }
    Ok(None)
}

fn debuglink_candidates(binary: &Path, name: &str, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let bin_dir = binary.parent().unwrap_or(Path::new("/"));
    let mut out = vec![bin_dir.join(name), bin_dir.join(".debug").join(name)];
    // /usr/lib/debug mirrors the binary's absolute directory.
    let canonical = std::fs::canonicalize(bin_dir).unwrap_or_else(|_| bin_dir.to_path_buf());
    for dir in dirs {
        out.push(
            dir.join(canonical.strip_prefix("/").unwrap_or(&canonical))
                .join(name),
        );
    }
    out
}

/// Streamed: a debug file can be hundreds of MB.
fn file_crc32(path: &Path) -> Option<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some(hasher.finalize()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}
