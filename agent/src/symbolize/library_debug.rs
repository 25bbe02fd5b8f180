//! A mapped library's separate debug file whose DWARF is compressed,
//! used for its symbol table only.
//!
//! Debian's `libc6-dbg` ships libc's DWARF zlib-compressed
//! (`SHF_COMPRESSED`). Reading that DWARF means inflating every section
//! whole (blazesym, following libc's debuglink, also checksums the file):
//! ~35 ms in every recording, for the ~100 samples of a 30 s recording of
//! MariaDB 10.2.11 that land in libc. An inflated copy kept on disk
//! (2026-11-26 to 11-28) saved that in later recordings but cost the first
//! one ~40 ms more (inflating 4.2 MB into 8.6 MB and writing a 10.4 MB
//! copy) and left 10 MB per libc version in the kept directory. The debug
//! file's own symbol table is not compressed and lists every function of
//! libc, static ones included (the library's `.dynsym` lists only the
//! exported ones): named from it, a libc frame gets its function, as
//! `perf report` shows libc, without inlined calls or source lines inside
//! libc, which a DBA reading a server's stacks has no use for.
//!
//! A debug file whose DWARF is not compressed is not taken here: the
//! library is named as any other, DWARF included (by blazesym, following
//! its debuglink).
//!
//! Trust: the debug file is looked up only by the library's build-id under
//! `/usr/lib/debug/.build-id` (root's directories, as gdb and
//! [`crate::resolve::debuginfo`] do), must be root's regular file nobody
//! else can write and carry the same build-id.

use std::path::Path;
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::resolve::debuginfo::build_id_path;
use crate::resolve::debuginfo::DebugFile;
use crate::resolve::elf::{hex, OffsetMap};
use crate::resolve::mapped::Mapped;
use crate::target::rootfs::TargetFile;

/// Where debug files are looked up by build-id.
const DEBUG_ROOT: &str = "/usr/lib/debug";
/// A debug file larger than this is not used (libc6-dbg's libc: 4.2 MB).
const MAX_BYTES: u64 = 256 << 20;

/// `library`'s debug file, to name `library`'s offsets from by its symbol
/// table; None when the library has no such debug file, the debug file's
/// DWARF is not compressed, or anything about it is not as it should be
/// (the library is then named as it was: by blazesym, following its
/// debuglink).
pub fn for_library(library: &TargetFile) -> Option<DebugFile> {
    for_library_in(library, Path::new(DEBUG_ROOT))
}

fn for_library_in(library: &TargetFile, debug_root: &Path) -> Option<DebugFile> {
    let lib_map = Mapped::of(library.file()).ok()?;
    let (build_id, offsets) = {
        let elf = object::File::parse(lib_map.bytes()).ok()?;
        let id = elf.build_id().ok()??.to_vec();
        (id, OffsetMap::of(&elf))
    };
    lib_map.release();
    let debug_path = build_id_path(debug_root, &hex(&build_id))?;
    let (debug, _) = crate::persist::open_root_file(&debug_path, MAX_BYTES)?;
    let map = Mapped::of(&debug).ok()?;
    let usable = {
        let elf = object::File::parse(map.bytes()).ok()?;
        let compressed = elf.sections().any(|s| {
            s.name().is_ok_and(|n| n.starts_with(".debug_"))
                && matches!(
                    s.flags(),
                    object::SectionFlags::Elf { sh_flags }
                        if sh_flags & u64::from(object::elf::SHF_COMPRESSED) != 0
                )
        });
        elf.build_id().ok()?? == build_id.as_slice()
            && compressed
            && elf.section_by_name(".symtab").is_some()
    };
    map.release();
    if !usable {
        return None;
    }
    Some(DebugFile {
        file: Arc::new(TargetFile::from_open(debug).ok()?),
        offsets,
        dwarf: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn libc() -> TargetFile {
        TargetFile::from_open(File::open("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap()
    }

    /// libc named through its libc6-dbg file gets, at every offset, the
    /// function the debug file's symbol table puts there (static ones
    /// included, which libc's own `.dynsym` lacks), one frame each, and
    /// writes nothing anywhere.
    #[test]
    fn libc_is_named_from_its_debug_files_symbols() {
        use crate::symbolize::{FrameKind, StackSymbolizer};
        use object::ObjectSymbol;
        let lib = Arc::new(libc());
        let debug = for_library_in(&lib, Path::new(DEBUG_ROOT))
            .expect("libc6-dbg is installed and its DWARF compressed");
        assert!(!debug.dwarf);
        let dmap = Mapped::of(debug.file.file()).unwrap();
        let delf = object::File::parse(dmap.bytes()).unwrap();
        let map = Mapped::of(lib.file()).unwrap();
        let elf = object::File::parse(map.bytes()).unwrap();
        let text = elf.section_by_name(".text").unwrap();
        let (text_addr, text_off) = (text.address(), text.file_range().unwrap().0);
        // Offsets a few bytes into the debug file's text functions, exported
        // or not: what each is named, by address.
        let mut functions: Vec<(u64, u64, String)> = delf
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 16)
            .filter(|s| s.address() >= text_addr && s.address() < text_addr + text.size())
            .map(|s| (s.address(), s.size(), s.name().unwrap().to_string()))
            .collect();
        functions.sort();
        let exported: std::collections::HashSet<u64> =
            elf.dynamic_symbols().map(|s| s.address()).collect();
        // One name per address (aliases share one): keep addresses with a
        // single text symbol, so the expected name is unambiguous.
        let mut by_address: std::collections::BTreeMap<u64, Vec<(u64, String)>> =
            Default::default();
        for (a, size, n) in functions {
            by_address.entry(a).or_default().push((size, n));
        }
        let cases: Vec<(u64, String, bool)> = by_address
            .into_iter()
            .filter(|(_, v)| v.len() == 1)
            .map(|(a, v)| {
                let (size, name) = v.into_iter().next().unwrap();
                (
                    a - text_addr + text_off + size / 2,
                    name,
                    exported.contains(&a),
                )
            })
            .take(600)
            .collect();
        assert!(
            cases.iter().filter(|c| !c.2).count() > 100,
            "static functions among them"
        );
        let offsets: Vec<u64> = cases.iter().map(|c| c.0).collect();
        let mut s = StackSymbolizer::new(crate::symbolize::ProcessMaps::default());
        let named = s.name_file_offsets(&lib, Some(&debug), "libc.so.6", &offsets);
        for ((off, name, _), frames) in cases.iter().zip(&named) {
            assert_eq!(frames.len(), 1, "offset {off:#x}: {frames:?}");
            assert_eq!(frames[0].kind, FrameKind::User, "offset {off:#x}");
            assert_eq!(&frames[0].name, name, "offset {off:#x}");
        }
    }

    /// Nothing is taken for a file without a debug file under the root.
    #[test]
    fn no_debug_file_nothing_taken() {
        let d = tempfile::tempdir().unwrap();
        assert!(for_library_in(&libc(), d.path()).is_none());
    }
}
