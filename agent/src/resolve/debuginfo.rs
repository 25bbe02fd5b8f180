//! Finding separate debug info for a stripped binary, the way gdb does:
//! an explicit `--debuginfo` file, then `DIR/.build-id/ab/cdef….debug`
//! under each debug directory, then the `.gnu_debuglink` name next to the
//! binary, in its `.debug/`, and under each debug directory. A candidate
//! must carry the same build-id, or (without build-ids) match the
//! debuglink's CRC32. Only when none is found, by build id from debuginfod
//! ([`super::debuginfod`]: innoprof's kept copies, elfutils' cache, then
//! the servers).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::debuginfod::{Debuginfod, Source};
use super::elf::{ElfError, ElfImage};
use crate::target::rootfs::{self, FileId, TargetFile};

#[derive(Debug, Clone)]
pub struct DebugSearch {
    /// `--debuginfo PATH`: used as is (build-id still checked).
    pub explicit: Option<PathBuf>,
    /// Roots such as `/usr/lib/debug`.
    pub dirs: Vec<PathBuf>,
    /// By build id from debuginfod when nothing above has it; None: not
    /// looked for there (the library's default: the CLI decides).
    pub debuginfod: Option<Debuginfod>,
}

impl Default for DebugSearch {
    fn default() -> Self {
        Self {
            explicit: None,
            dirs: vec![PathBuf::from("/usr/lib/debug")],
            debuginfod: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// `--debuginfo PATH`.
    Explicit,
    /// `DIR/.build-id/ab/cdef….debug` under a debug directory.
    BuildId,
    /// The binary's `.gnu_debuglink` name.
    Debuglink,
    /// Fetched from debuginfod by an earlier run, kept by innoprof.
    Kept,
    /// elfutils' debuginfod client cache (gdb, perf fetched it).
    ElfutilsCache,
    /// Fetched from a debuginfod server by this run.
    Debuginfod,
}

/// Where the binary's debug file came from, as summary.json and
/// metadata.json say it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DebugOrigin {
    /// How the separate debug file was found; null: none was used (the
    /// binary's own symbols and DWARF, if any).
    pub found_by: Option<FoundBy>,
    /// The file used, if one was.
    pub path: Option<String>,
    /// The debuginfod server it was fetched from by this run.
    pub url: Option<String>,
    /// One line: why no debug file was found where one was wanted (what
    /// each debuginfod server answered, or no build id to ask by), or why
    /// a fetched one was not kept.
    pub note: Option<String>,
}

/// [`find_debug_info`], saying only how the file was found.
pub fn attach_debug_info(
    image: &mut ElfImage,
    search: &DebugSearch,
) -> Result<Option<FoundBy>, ElfError> {
    find_debug_info(image, search).map(|o| o.found_by)
}

/// Attaches separate debug info to `image` when it lacks `.symtab` or
/// DWARF: found locally (see [`attach_local`]), else by build id through
/// `search.debuginfod`. Says where it came from, and why there is none
/// when one was wanted and not found; a line of that goes to
/// `image.notes` too (printed with the recording's start).
pub fn find_debug_info(
    image: &mut ElfImage,
    search: &DebugSearch,
) -> Result<DebugOrigin, ElfError> {
    let local = attach_local(image, search)?;
    let shown = |image: &ElfImage| image.debug_file.as_ref().map(|p| p.display().to_string());
    if local.is_some() || (image.has_symtab && image.has_debug_info) {
        return Ok(DebugOrigin {
            found_by: local,
            path: shown(image),
            ..Default::default()
        });
    }
    let Some(debuginfod) = &search.debuginfod else {
        return Ok(DebugOrigin::default());
    };
    for ignored in &debuginfod.ignored {
        image.notes.push(format!(
            "DEBUGINFOD_URLS: ignored {ignored:?}: not an http:// or https:// URL"
        ));
    }
    let Some(id) = image.build_id.clone() else {
        if debuginfod.urls.is_empty() {
            return Ok(DebugOrigin::default());
        }
        let note = format!(
            "{} has no build id (NT_GNU_BUILD_ID): debuginfod not asked; give --debuginfo PATH",
            image.path.display()
        );
        image.notes.push(note.clone());
        return Ok(DebugOrigin {
            note: Some(note),
            ..Default::default()
        });
    };
    let note = match debuginfod.find(&id) {
        Ok(found) => match image.use_debug_open(&found.file, &found.path) {
            Ok(()) => {
                let found_by = match found.found_by {
                    Source::Kept => FoundBy::Kept,
                    Source::ElfutilsCache => FoundBy::ElfutilsCache,
                    Source::Server => FoundBy::Debuginfod,
                };
                let path = found.path.display().to_string();
                image.notes.push(found_note(&id, &path, &found));
                return Ok(DebugOrigin {
                    found_by: Some(found_by),
                    path: Some(path),
                    url: found.url,
                    note: found.note,
                });
            }
            Err(e) => crate::error_chain(&e),
        },
        Err(failures) if failures.is_empty() => return Ok(DebugOrigin::default()),
        Err(failures) => super::debuginfod::failures_line(&failures),
    };
    let note = format!("no debug file of build id {id} from debuginfod: {note}");
    image.notes.push(note.clone());
    Ok(DebugOrigin {
        note: Some(note),
        ..Default::default()
    })
}

/// The line said when the recording starts: where the debug file of
/// build id `id`, shown as `path`, came from.
fn found_note(id: &str, path: &str, found: &super::debuginfod::Found) -> String {
    match (&found.url, found.found_by) {
        (Some(url), _) => match &found.note {
            Some(n) => format!("debug file of build id {id} fetched from {url} ({n})"),
            None => format!("debug file of build id {id} fetched from {url}, kept as {path}"),
        },
        (None, Source::ElfutilsCache) => {
            format!("debug file of build id {id} from elfutils' debuginfod cache: {path}")
        }
        (None, _) => {
            format!("debug file of build id {id} from innoprof's kept debuginfod files: {path}")
        }
    }
}

/// Attaches separate debug info to `image` when it lacks `.symtab` or
/// DWARF and a matching file can be found on this host. Returns how it
/// was found.
///
/// Every candidate is opened once and that open file is checked (regular
/// file, build-id or CRC) and used: no name is looked up twice. Debug
/// roots are innoprof's own (root's) directories; files beside the binary
/// are looked up in the binary's own root (a target's, for a target) and
/// must not be symlinks. A debuglink name is the binary's to say, so only
/// a bare file name is followed; anything else is ignored with a note.
fn attach_local(image: &mut ElfImage, search: &DebugSearch) -> Result<Option<FoundBy>, ElfError> {
    if let Some(path) = &search.explicit {
        image.use_debug_file(path)?;
        return Ok(Some(FoundBy::Explicit));
    }
    if image.has_symtab && image.has_debug_info {
        return Ok(None);
    }
    if let Some(id) = image.build_id.clone() {
        for candidate in search.dirs.iter().filter_map(|dir| build_id_path(dir, &id)) {
            if let Ok(file) = rootfs::open_regular(&candidate) {
                if image.use_debug_open(&file, &candidate).is_ok() {
                    return Ok(Some(FoundBy::BuildId));
                }
            }
        }
    }
    let Some((name, crc)) = image.debuglink() else {
        return Ok(None);
    };
    if !is_bare_file_name(&name) {
        image.notes.push(format!(
            "ignored .gnu_debuglink {name:?}: not a bare file name (a path could reach any file)"
        ));
        return Ok(None);
    }
    let home = image.home.clone();
    let beside = [PathBuf::from(&name), Path::new(".debug").join(&name)];
    let opened_beside = beside
        .iter()
        .map(|rel| (home.dir().join(rel), home.open_beside(rel)));
    // Debug roots mirror the binary's absolute directory (as its own root
    // sees it).
    let dir = home.dir().strip_prefix("/").unwrap_or(home.dir());
    let in_roots = search.dirs.iter().map(|root| {
        let path = root.join(dir).join(&name);
        let file = rootfs::open_regular(&path);
        (path, file)
    });
    for (path, file) in opened_beside.chain(in_roots) {
        let Ok(file) = file else { continue };
        if image.file_id.is_some() && FileId::of(&file).ok() == image.file_id {
            continue;
        }
        // Without build-ids on both sides, the CRC is the only proof.
        let crc_ok = image.build_id.is_some() || file_crc32(&file).is_some_and(|c| c == crc);
        if crc_ok && image.use_debug_open(&file, &path).is_ok() {
            return Ok(Some(FoundBy::Debuglink));
        }
    }
    Ok(None)
}

/// Where a debug root keeps the debug file of build-id `hex`, as gdb looks
/// for it: `ROOT/.build-id/ab/cdef….debug`. None for an id too short to
/// split so.
pub fn build_id_path(root: &Path, hex: &str) -> Option<PathBuf> {
    (hex.len() > 2 && hex.is_ascii()).then(|| {
        root.join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]))
    })
}

/// What gdb's debuglink means: a file name to look for in a few
/// directories. A `/`, `.` or `..` would make it a path out of them.
pub fn is_bare_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// Streamed: a debug file can be hundreds of MB.
fn file_crc32(mut file: &File) -> Option<u32> {
    use std::io::Read;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_names_are_debuglinks() {
        for ok in ["mysqld.debug", "a..b", ".hidden.debug"] {
            assert!(is_bare_file_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "/etc/shadow", "../../x", "a/b", "x\0y"] {
            assert!(!is_bare_file_name(bad), "{bad}");
        }
    }
}

/// A stripped binary's separate debug file, open, with the binary's own
/// offset-to-address map: the debug file has the binary's addresses, but
/// its sections hold no code, so its file offsets are not the binary's.
#[derive(Debug, Clone)]
pub struct DebugFile {
    pub file: Arc<TargetFile>,
    pub offsets: crate::resolve::elf::OffsetMap,
    /// Whether its DWARF is read (a stripped server's debug file), or
    /// only its symbol table ([`crate::symbolize::library_debug`]: a library's
    /// debug file whose DWARF is compressed).
    pub dwarf: bool,
}

impl DebugFile {
    /// The debug file `image` took, if it took one (see
    /// [`crate::resolve::debuginfo::attach_debug_info`]).
    pub fn of(image: &crate::resolve::elf::ElfImage) -> Option<Self> {
        Some(Self {
            file: Arc::clone(image.debug_open()?),
            offsets: image.offset_map(),
            dwarf: true,
        })
    }
}
