//! A mapped library's separate debug file with its compressed DWARF
//! inflated, kept across boots.
//!
//! Debian's `libc6-dbg` ships libc's DWARF zlib-compressed
//! (`SHF_COMPRESSED`). blazesym, following libc's debuglink, inflates every
//! DWARF section whole (and checksums the file) before it names one
//! address: ~35 ms of the agent's ~0.44 s for a 30 s recording of MariaDB
//! 10.2.11 under load (`perf record`), for the ~100 samples that land in
//! libc, in every recording. So the first recording writes an
//! uncompressed copy of the debug file to the kept directory
//! ([`crate::run_dir`]) and every recording names the library from that
//! copy, by address, as a stripped server binary is named from its debug
//! file: the same DWARF read the same way, inflated once.
//!
//! Trust: the debug file is looked up only by the library's build-id under
//! `/usr/lib/debug/.build-id` (root's directories, as gdb and
//! [`crate::resolve::debuginfo`] do), must be root's regular file nobody
//! else can write and carry the same build-id. The copy is innoprof's own
//! (root's, 0600, in the 0700 kept directory) and says what it was
//! made from in a `.innoprof.key` section: the debug file's identity and
//! this innoprof binary; a copy that does not say exactly that is
//! not used.

use std::fs::File;
use std::io::Read;
use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::sync::Arc;

use object::{Object, ObjectSection};

use crate::resolve::debuginfo::build_id_path;
use crate::resolve::elf::{hex, OffsetMap};
use crate::resolve::mapped::Mapped;
use crate::rootfs::TargetFile;
use crate::run_dir::{self, KeptKind};
use crate::symbolize::DebugFile;

/// Where debug files are looked up by build-id.
const DEBUG_ROOT: &str = "/usr/lib/debug";
/// The section of a copy that says what it is a copy of.
const KEY_SECTION: &str = ".innoprof.key";
/// A debug file larger than this, or a copy larger than this, is not
/// inflated (libc6-dbg's libc: 4.2 MB, 8.6 MB inflated).
const MAX_BYTES: u64 = 256 << 20;
/// Copies are named `inflated-*.debug`; past this many, the least
/// recently used makes room (see [`run_dir::count_kept`]).
const MAX_KEPT_FILES: usize = 16;

/// The inflated copy of `library`'s debug file (made now if there is
/// none yet), to name `library`'s offsets from; None when the library has
/// no such debug file, its DWARF is not compressed, or anything about it
/// or the copy is not as it should be (the library is then named as it
/// was: by blazesym, following its debuglink).
pub fn for_library(library: &TargetFile) -> Option<DebugFile> {
    for_library_in(library, Path::new(DEBUG_ROOT), run_dir::kept_dir())
}

fn for_library_in(library: &TargetFile, debug_root: &Path, kept_dir: &Path) -> Option<DebugFile> {
    let lib_map = Mapped::of(library.file()).ok()?;
    let (build_id, offsets) = {
        let elf = object::File::parse(lib_map.bytes()).ok()?;
        let id = elf.build_id().ok()??.to_vec();
        (id, OffsetMap::of(&elf))
    };
    lib_map.release();
    let debug_path = build_id_path(debug_root, &hex(&build_id))?;
    let (debug, _) = run_dir::open_root_file(&debug_path, MAX_BYTES)?;
    let kept = kept_kind(kept_dir);
    let key = kept.key(&debug)?;
    let key_text = serde_json::to_vec(&key).ok()?;
    let path = kept.path(&key);
    let copy = match open_copy(kept_dir, &path, &key_text) {
        Some(f) => f,
        None => {
            kept.write(&key, &inflate(&debug, &build_id, &key_text)?)
                .ok()?;
            open_copy(kept_dir, &path, &key_text)?
        }
    };
    Some(DebugFile {
        file: Arc::new(TargetFile::from_open(copy).ok()?),
        offsets,
    })
}

/// The copies, one per debug file's identity.
fn kept_kind(dir: &Path) -> KeptKind {
    KeptKind::in_dir(dir, "inflated", "debug", MAX_KEPT_FILES)
}

/// The kept copy at `path`, if the directory is still only root's and the
/// copy says it is the copy of `key_text`'s file for this innoprof binary.
fn open_copy(dir: &Path, path: &Path, key_text: &[u8]) -> Option<File> {
    run_dir::trusted_dir(dir).ok()?;
    let (f, _) = run_dir::open_root_file(path, MAX_BYTES)?;
    let map = Mapped::of(&f).ok()?;
    let said = object::File::parse(map.bytes())
        .ok()?
        .section_by_name(KEY_SECTION)?
        .data()
        .ok()?
        .to_vec();
    map.release();
    let ours = said == key_text;
    if ours {
        run_dir::mark_used(&f);
    }
    ours.then_some(f)
}

/// `debug`'s bytes with every compressed section inflated and a
/// [`KEY_SECTION`] holding `key_text`; None if it is not an ELF file with
/// `build_id` and compressed DWARF.
fn inflate(debug: &File, build_id: &[u8], key_text: &[u8]) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    debug.take(MAX_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_BYTES {
        return None;
    }
    // The compressed sections, inflated, by name: the builder below
    // reads the same sections again and takes these in their place.
    let mut inflated: Vec<(String, Vec<u8>)> = Vec::new();
    {
        let elf = object::File::parse(&*bytes).ok()?;
        if elf.build_id().ok()?? != build_id {
            return None;
        }
        for s in elf.sections() {
            let compressed = matches!(
                s.flags(),
                object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_COMPRESSED) != 0
            );
            if compressed {
                inflated.push((s.name().ok()?.to_string(), inflate_section(&s)?));
            }
        }
    }
    if inflated.is_empty() {
        return None;
    }
    let mut builder = object::build::elf::Builder::read(&*bytes).ok()?;
    for section in builder.sections.iter_mut() {
        let name = String::from_utf8_lossy(section.name.as_slice()).into_owned();
        if let Some(i) = inflated.iter().position(|(n, _)| *n == name) {
            let (_, data) = inflated.swap_remove(i);
            section.sh_flags &= !u64::from(object::elf::SHF_COMPRESSED);
            section.data = object::build::elf::SectionData::Data(data.into());
        }
    }
    if !inflated.is_empty() {
        return None;
    }
    let key = builder.sections.add();
    key.name = KEY_SECTION.as_bytes().to_vec().into();
    key.sh_type = object::elf::SHT_PROGBITS;
    key.sh_addralign = 1;
    key.data = object::build::elf::SectionData::Data(key_text.to_vec().into());
    let mut out = Vec::new();
    builder.write(&mut out).ok()?;
    Some(out)
}

/// A compressed section's bytes, inflated: zlib, as `SHF_COMPRESSED`
/// sections of GNU toolchains are (object's own inflating needs a feature
/// that would bring a second inflater; flate2 is already here).
fn inflate_section(s: &object::Section<'_, '_>) -> Option<Vec<u8>> {
    let c = s.compressed_data().ok()?;
    if c.format != object::CompressionFormat::Zlib || c.uncompressed_size > MAX_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(c.uncompressed_size as usize);
    flate2::read::ZlibDecoder::new(c.data)
        .take(c.uncompressed_size + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 == c.uncompressed_size).then_some(out)
}

/// The per-boot copies' directory, for tests.
#[cfg(test)]
fn kept_path(kept_dir: &Path, debug: &File) -> PathBuf {
    let kept = kept_kind(kept_dir);
    kept.path(&kept.key(debug).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn libc() -> TargetFile {
        TargetFile::from_open(File::open("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap()
    }

    /// libc6-dbg's libc: its copy carries the same DWARF, uncompressed,
    /// is made once and then reused, and a copy that does not say it is
    /// this file's is made again.
    #[test]
    fn libc_is_named_from_an_inflated_copy_made_once() {
        let d = tempfile::tempdir().unwrap();
        let kept_dir = d.path().join("run");
        let lib = libc();
        let debug = for_library_in(&lib, Path::new(DEBUG_ROOT), &kept_dir)
            .expect("libc6-dbg is installed and its DWARF compressed");
        let map = Mapped::of(debug.file.file()).unwrap();
        let copy = object::File::parse(map.bytes()).unwrap();
        let info = copy.section_by_name(".debug_info").unwrap();
        assert!(
            matches!(info.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_COMPRESSED) == 0)
        );
        // The same DWARF as the original's, inflated.
        let (original, _) = run_dir::open_root_file(&debug_path_of(&lib), MAX_BYTES).unwrap();
        let orig_map = Mapped::of(&original).unwrap();
        let orig = object::File::parse(orig_map.bytes()).unwrap();
        for name in [".debug_info", ".debug_line", ".debug_str", ".debug_abbrev"] {
            assert_eq!(
                copy.section_by_name(name).unwrap().data().unwrap(),
                {
                    let o = orig.section_by_name(name).unwrap();
                    match inflate_section(&o) {
                        Some(d) => d,
                        None => o.data().unwrap().to_vec(),
                    }
                },
                "{name}"
            );
        }
        // The symbol table is written anew (its string table laid out
        // again): the same symbols, in the same order.
        let symbols = |f: &object::File| -> Vec<(String, u64, u64)> {
            use object::ObjectSymbol;
            f.symbols()
                .map(|s| (s.name().unwrap_or("").to_string(), s.address(), s.size()))
                .collect()
        };
        let (a, b) = (symbols(&copy), symbols(&orig));
        assert!(a.len() > 1000);
        assert!(a == b, "the symbols differ ({} vs {})", a.len(), b.len());
        assert_eq!(copy.build_id().unwrap(), orig.build_id().unwrap());
        let at = kept_path(&kept_dir, &original);
        let made = std::fs::metadata(&at).unwrap();
        assert_eq!(made.mode() & 0o777, 0o600);
        // Reused, not made again.
        for_library_in(&lib, Path::new(DEBUG_ROOT), &kept_dir).unwrap();
        assert_eq!(
            std::fs::metadata(&at).unwrap().modified().unwrap(),
            made.modified().unwrap()
        );
        // A copy saying anything else (here: the debug file's own bytes,
        // no key) is not used: made again.
        std::fs::copy(debug_path_of(&lib), &at).unwrap();
        assert!(open_copy(&kept_dir, &at, b"{}").is_none());
        let again = for_library_in(&lib, Path::new(DEBUG_ROOT), &kept_dir).unwrap();
        let m = Mapped::of(again.file.file()).unwrap();
        assert!(object::File::parse(m.bytes())
            .unwrap()
            .section_by_name(KEY_SECTION)
            .is_some());
    }

    /// libc named from the inflated copy (by address, the walk then
    /// blazesym) names every frame as blazesym following libc's own
    /// debuglink to the compressed file does: function, inlined calls,
    /// source lines.
    #[test]
    fn the_inflated_copy_names_libc_as_its_compressed_debug_file_does() {
        use crate::symbolize::{Frame, StackSymbolizer};
        let d = tempfile::tempdir().unwrap();
        let lib = Arc::new(libc());
        let debug = for_library_in(&lib, Path::new(DEBUG_ROOT), &d.path().join("run")).unwrap();
        // Offsets inside libc's exported functions, a few bytes in: calls
        // into functions with inlined helpers, and assembly ones.
        let map = Mapped::of(lib.file()).unwrap();
        let elf = object::File::parse(map.bytes()).unwrap();
        let text = elf.section_by_name(".text").unwrap();
        let (text_addr, text_off) = (text.address(), text.file_range().unwrap().0);
        let mut offsets: Vec<u64> = {
            use object::ObjectSymbol;
            elf.dynamic_symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 16)
                .filter(|s| s.address() >= text_addr && s.address() < text_addr + text.size())
                .map(|s| s.address() - text_addr + text_off + s.size() / 2)
                .collect()
        };
        offsets.sort_unstable();
        offsets.dedup();
        offsets.truncate(400);
        assert!(offsets.len() >= 300, "{} offsets", offsets.len());
        let module = "libc.so.6";
        let mut s = StackSymbolizer::new(crate::symbolize::ProcessMaps::default());
        let theirs = s.name_file_offsets(&lib, None, module, &offsets);
        let ours = s.name_file_offsets(&lib, Some(&debug), module, &offsets);
        let inlined = |named: &[Vec<Frame>]| named.iter().filter(|f| f.len() > 1).count();
        assert!(
            inlined(&theirs) > 20,
            "{} with inlined frames",
            inlined(&theirs)
        );
        for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
            assert_eq!(a, b, "offset {:#x}", offsets[i]);
        }
    }

    /// Nothing is made for a file without a debug file under the root.
    #[test]
    fn no_debug_file_no_copy() {
        let d = tempfile::tempdir().unwrap();
        let kept_dir = d.path().join("run");
        assert!(for_library_in(&libc(), d.path(), &kept_dir).is_none());
        assert!(!kept_dir.exists() || std::fs::read_dir(&kept_dir).unwrap().next().is_none());
    }

    fn debug_path_of(lib: &TargetFile) -> PathBuf {
        let map = Mapped::of(lib.file()).unwrap();
        let elf = object::File::parse(map.bytes()).unwrap();
        build_id_path(
            Path::new(DEBUG_ROOT),
            &hex(elf.build_id().unwrap().unwrap()),
        )
        .unwrap()
    }
}
