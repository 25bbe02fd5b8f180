//! Function symbols of one ELF file: `.symtab` and `.dynsym`, demangled,
//! with the file offset the kernel needs to place a uprobe.
//!
//! The file is mapped, not read (see [`Mapped`]): what stays in memory is
//! the symbol list and the segment table. Each reader releases the pages
//! it touched when done ([`ElfImage::release_pages`]), so a recording
//! does not carry the binary's symbol tables or DWARF in its resident set.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use super::mapped::Mapped;
use super::units::UnitIndex;
use crate::persist::stamp::{file_stamp, FileStamp};
use crate::target::rootfs::{FileId, Home};

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file this tool understands")]
    Parse {
        path: PathBuf,
        source: object::Error,
    },
    #[error(
        "debug file {path} does not belong to this binary: build-id {found}, expected {expected}"
    )]
    BuildIdMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
}

/// Which symbol table a symbol came from. `.dynsym` survives `strip`,
/// `.symtab` does not, so the distinction explains missing probes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SymbolTable {
    Symtab,
    Dynsym,
    /// Not a symbol: an inlined instance found in DWARF.
    DwarfInline,
}

#[derive(Debug, Clone)]
pub struct FunctionSymbol {
    /// The symbol as stored, e.g. `_ZN11PolicyMutexI14TTASEventMutexI13GenericPolicyEE5enterEjjPKcj`.
    pub raw: String,
    /// GCC clone suffix such as `constprop.0`, `isra.0`, `part.0`, `cold`.
    pub clone_suffix: Option<String>,
    pub address: u64,
    pub size: u64,
    pub table: SymbolTable,
}

impl FunctionSymbol {
    /// The symbol without its clone suffix (what demangling applies to).
    pub fn base(&self) -> &str {
        match &self.clone_suffix {
            Some(s) => &self.raw[..self.raw.len() - s.len() - 1],
            None => &self.raw,
        }
    }
}

/// A loadable segment, kept to turn virtual addresses into file offsets.
#[derive(Debug, Clone, Copy)]
struct LoadSegment {
    vaddr: u64,
    memsz: u64,
    file_offset: u64,
    filesz: u64,
    /// PF_W: holds data the program changes (never read for names).
    writable: bool,
    /// PF_X: code; the only place a probe may go.
    executable: bool,
}

/// A binary's loaded segments as (file offset, size in the file,
/// address): file offsets to addresses, the inverse of
/// [`ElfImage::file_offset`].
#[derive(Debug, Clone, Default)]
pub struct OffsetMap(Vec<(u64, u64, u64)>);

impl OffsetMap {
    /// The loadable segments of a file: how its file offsets and virtual
    /// addresses correspond (what [`ElfImage::offset_map`] keeps).
    pub fn of(file: &object::File<'_>) -> Self {
        Self(
            file.segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (offset, size, s.address())
                })
                .collect(),
        )
    }

    /// From (file offset, size, address) triples, as [`Self::segments`]
    /// gives them (a raw bundle keeps a mapped file's).
    pub fn from_segments(segments: Vec<(u64, u64, u64)>) -> Self {
        Self(segments)
    }

    /// (file offset, size, address) of each segment.
    pub fn segments(&self) -> &[(u64, u64, u64)] {
        &self.0
    }

    pub fn address_of(&self, file_offset: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|&&(start, size, _)| file_offset >= start && file_offset - start < size)
            .map(|&(start, _, vaddr)| file_offset - start + vaddr)
    }
}

#[derive(Debug)]
pub struct ElfImage {
    /// The binary's path as shown to the user (a target's: as it sees it).
    pub path: PathBuf,
    /// Where it lives, to find its debug file beside it.
    pub home: Home,
    /// Device and inode of the binary (so it is never taken for its own
    /// debug file).
    pub file_id: Option<FileId>,
    /// Size and modification time of the binary when it was read: with
    /// `file_id`, what [`Self::is_file`] compares.
    stamp: Option<FileStamp>,
    /// What was ignored while reading it (an unsafe `.gnu_debuglink`), one
    /// line each, for the user.
    pub notes: Vec<String>,
    pub build_id: Option<String>,
    /// ET_DYN: addresses are relative to the load base.
    pub position_independent: bool,
    pub has_symtab: bool,
    pub has_debug_info: bool,
    /// Function symbols, read on first use ([`Self::symbols`]): a plan kept
    /// from an earlier recording ([`crate::plan::kept_plan`]) needs none of them.
    symbols: std::sync::OnceLock<Vec<FunctionSymbol>>,
    /// Separate debug info in use, if any (symbols and DWARF come from it).
    pub debug_file: Option<PathBuf>,
    /// The debug file, kept open: the stack symbolizer names frames from
    /// this very file, not from a path looked up again.
    debug_open: Option<std::sync::Arc<crate::target::rootfs::TargetFile>>,
    segments: Vec<LoadSegment>,
    data: Mapped,
    debug_data: Option<Mapped>,
    /// DWARF units by source file, built on first use (see [`UnitIndex`]).
    unit_index: std::sync::OnceLock<Option<UnitIndex>>,
}

impl ElfImage {
    /// A binary the user named on innoprof's own file system.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        Self::open_as(path, path, Home::host(path))
    }

    /// A target's executable, already opened and checked (see
    /// [`crate::target::rootfs`]): read through its fd path, shown by its own.
    pub fn open_target(target: &crate::target::Target) -> Result<Self, ElfError> {
        Self::open_as(&target.binary, &target.exe, target.home())
    }

    fn open_as(open: &Path, path: &Path, home: Home) -> Result<Self, ElfError> {
        let data = Mapped::open(open).map_err(|source| ElfError::Read {
            path: path.into(),
            source,
        })?;
        let opened = std::fs::File::open(open).ok();
        let file_id = opened.as_ref().and_then(|f| FileId::of(f).ok());
        let stamp = opened.as_ref().and_then(file_stamp);
        let file = parse(path, data.bytes())?;
        let build_id = build_id(path, &file)?;
        let position_independent = file.kind() == object::ObjectKind::Dynamic;
        let has_symtab = file.section_by_name(".symtab").is_some();
        let has_debug_info = file.section_by_name(".debug_info").is_some();

        let segments = file
            .segments()
            .map(|s| {
                let (file_offset, filesz) = s.file_range();
                let flags = match s.flags() {
                    object::SegmentFlags::Elf { p_flags } => p_flags,
                    _ => 0,
                };
                LoadSegment {
                    vaddr: s.address(),
                    memsz: s.size(),
                    file_offset,
                    filesz,
                    writable: flags & object::elf::PF_W != 0,
                    executable: flags & object::elf::PF_X != 0,
                }
            })
            .collect();

        drop(file);
        data.release();
        Ok(Self {
            path: path.into(),
            home,
            file_id,
            stamp,
            notes: Vec::new(),
            build_id,
            position_independent,
            has_symtab,
            has_debug_info,
            symbols: std::sync::OnceLock::new(),
            debug_file: None,
            segments,
            data,
            debug_data: None,
            debug_open: None,
            unit_index: std::sync::OnceLock::new(),
        })
    }

    /// Whether `path` is the file this image was read from, unchanged: the
    /// same device and inode, size, modification and change time (see
    /// [`FileStamp`]). A binary replaced by a package upgrade is a new
    /// inode; one copied over in place changes its times; a chmod or a new
    /// hard link moves the change time too, and costs a resolution.
    pub fn is_file(&self, path: &Path) -> bool {
        let Ok(file) = std::fs::File::open(path) else {
            return false;
        };
        self.file_id.is_some()
            && self.file_id == FileId::of(&file).ok()
            && self.stamp.is_some()
            && self.stamp == file_stamp(&file)
    }

    /// The cell [`super::lines::unit_index`] keeps this image's DWARF
    /// units in, built on first use.
    pub(crate) fn unit_index_cell(&self) -> &std::sync::OnceLock<Option<UnitIndex>> {
        &self.unit_index
    }

    /// What a result derived from this image's DWARF is kept for (see
    /// [`crate::persist`]): this innoprof binary, and the debug
    /// file's identity if one is in use, else the binary's as it was opened.
    pub(crate) fn dwarf_file_key(&self) -> Option<crate::persist::FileKey> {
        match (&self.debug_open, &self.debug_data) {
            (Some(debug), _) => {
                crate::persist::FileKey::of(&crate::persist::Build::current()?, debug.file())
            }
            // DWARF from a file no longer open: not kept.
            (None, Some(_)) => None,
            (None, None) => self.file_key(),
        }
    }

    /// What a result derived from this binary's own bytes is kept for:
    /// this innoprof binary, and the binary as it was opened.
    pub(crate) fn file_key(&self) -> Option<crate::persist::FileKey> {
        Some(crate::persist::FileKey {
            build: crate::persist::Build::current()?,
            file: self.file_id?,
            stamp: self.stamp?,
        })
    }

    /// `.gnu_debuglink`: the debug file's name and CRC32.
    pub fn debuglink(&self) -> Option<(String, u32)> {
        let file = object::File::parse(self.data.bytes()).ok()?;
        let (name, crc) = file.gnu_debuglink().ok()??;
        Some((String::from_utf8_lossy(name).into_owned(), crc))
    }

    /// Takes `.symtab` and DWARF from a separate debug file (from
    /// `objcopy --only-keep-debug`), whose addresses are the binary's own.
    /// Code bytes and file offsets still come from the binary.
    pub fn use_debug_file(&mut self, path: &Path) -> Result<(), ElfError> {
        let file = std::fs::File::open(path).map_err(|source| ElfError::Read {
            path: path.into(),
            source,
        })?;
        self.use_debug_open(&file, path)
    }

    /// The debug file taken by [`Self::use_debug_file`] or
    /// [`Self::use_debug_open`], open.
    pub fn debug_open(&self) -> Option<&std::sync::Arc<crate::target::rootfs::TargetFile>> {
        self.debug_open.as_ref()
    }

    /// [`Self::use_debug_file`] for a file already opened (and checked) by
    /// the caller; `path` is how it is shown.
    pub fn use_debug_open(&mut self, file: &std::fs::File, path: &Path) -> Result<(), ElfError> {
        let read = |source| ElfError::Read {
            path: path.into(),
            source,
        };
        let data = Mapped::of(file).map_err(read)?;
        self.use_debug_data(data, path)?;
        let kept = file
            .try_clone()
            .and_then(crate::target::rootfs::TargetFile::from_open)
            .map_err(read)?;
        self.debug_open = Some(std::sync::Arc::new(kept));
        Ok(())
    }

    fn use_debug_data(&mut self, data: Mapped, path: &Path) -> Result<(), ElfError> {
        let file = parse(path, data.bytes())?;
        let debug_id = build_id(path, &file)?;
        if let (Some(mine), Some(theirs)) = (&self.build_id, &debug_id) {
            if mine != theirs {
                return Err(ElfError::BuildIdMismatch {
                    path: path.into(),
                    expected: mine.clone(),
                    found: theirs.clone(),
                });
            }
        }
        self.has_symtab |= file.section_by_name(".symtab").is_some();
        self.has_debug_info |= file.section_by_name(".debug_info").is_some();
        drop(file);
        data.release();
        self.symbols = std::sync::OnceLock::new();
        self.debug_file = Some(path.into());
        self.debug_data = Some(data);
        // Units come from the debug file from now on.
        self.unit_index = std::sync::OnceLock::new();
        Ok(())
    }

    /// File offset of a virtual address, as uprobes are placed by offset.
    pub fn file_offset(&self, address: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| {
                address >= s.vaddr && address < s.vaddr + s.memsz && address - s.vaddr < s.filesz
            })
            .map(|s| address - s.vaddr + s.file_offset)
    }

    /// How file offsets of this binary map to its addresses, kept apart
    /// from the image (the stack symbolizer outlives the resolution).
    pub fn offset_map(&self) -> OffsetMap {
        OffsetMap(
            self.segments
                .iter()
                .map(|s| (s.file_offset, s.filesz, s.vaddr))
                .collect(),
        )
    }

    /// The function symbols of `.symtab` and `.dynsym`, read on the first
    /// call: the debug file's when one is in use, then those of the
    /// binary's it lacks (exported names, rarely).
    pub fn symbols(&self) -> &[FunctionSymbol] {
        self.symbols.get_or_init(|| self.read_symbols(&|_| true))
    }

    /// Lists, from now on, only the function symbols named exactly
    /// `names` (raw, as the symbol tables have them): for an image whose
    /// few wanted functions are known by name (the hit-cost calibration's
    /// three), listing all of a large binary's symbols is not needed
    /// (~35,000 in innoprof's own: ~8 of the calibration's ~10 ms of
    /// resolving its functions).
    pub fn list_only_symbols(&mut self, names: &[&str]) {
        let only = self.read_symbols(&|raw| names.contains(&raw));
        self.symbols = std::sync::OnceLock::from(only);
    }

    fn read_symbols(&self, keep: &dyn Fn(&str) -> bool) -> Vec<FunctionSymbol> {
        let read = |data: &Mapped| {
            let symbols = object::File::parse(data.bytes())
                .map(|file| function_symbols(&file, keep))
                .unwrap_or_default();
            // The symbol tables are copied out; their pages are not needed.
            data.release();
            symbols
        };
        let own = read(&self.data);
        let Some(debug) = &self.debug_data else {
            return own;
        };
        let mut symbols = read(debug);
        let listed: HashSet<(&str, u64)> = symbols
            .iter()
            .map(|d| (d.raw.as_str(), d.address))
            .collect();
        let missing: Vec<FunctionSymbol> = own
            .into_iter()
            .filter(|s| !listed.contains(&(s.raw.as_str(), s.address)))
            .collect();
        drop(listed);
        symbols.extend(missing);
        symbols
    }

    /// The binary itself (its program headers: a debug file's may not be whole).
    pub fn binary_data(&self) -> &[u8] {
        self.data.bytes()
    }

    /// The file holding DWARF: the debug file if one is in use.
    pub fn dwarf_data(&self) -> &[u8] {
        self.debug_data.as_ref().unwrap_or(&self.data).bytes()
    }

    /// Drops the pages read so far (symbol tables, DWARF, code bytes) from
    /// the resident set; they are read back from the page cache if needed.
    /// Call when a phase is done with the file.
    pub fn release_pages(&self) {
        self.data.release();
        if let Some(d) = &self.debug_data {
            d.release();
        }
    }

    /// Bytes of the file at a virtual address: code (to judge probe cost)
    /// or read-only data (call-site file names).
    pub fn bytes_at(&self, address: u64, len: usize) -> Option<&[u8]> {
        let data = self.data.bytes();
        let off = self.file_offset(address)? as usize;
        let end = off.checked_add(len)?.min(data.len());
        data.get(off..end)
    }

    /// Up to `len` bytes at a virtual address inside a loadable segment
    /// that is not writable (code or read-only data), cut at the segment's
    /// end: call-site names are string literals, and nothing the program
    /// writes (query text, rows) is ever read.
    pub fn read_only_bytes_at(&self, address: u64, len: usize) -> Option<&[u8]> {
        let seg = self.segments.iter().find(|s| {
            !s.writable && address >= s.vaddr && address - s.vaddr < s.filesz.min(s.memsz)
        })?;
        // The segment's numbers are the file's: no sum of them may wrap.
        let into = address - seg.vaddr;
        let in_segment = usize::try_from(seg.filesz.min(seg.memsz) - into).ok()?;
        let off = usize::try_from(seg.file_offset.checked_add(into)?).ok()?;
        self.data
            .bytes()
            .get(off..off.checked_add(len.min(in_segment))?)
    }

    /// Names of the defined data objects (variables): only to explain why
    /// a pattern that names one finds no function. Parsed on demand, as it
    /// is needed only on that error path.
    pub fn data_object_names(&self) -> Vec<String> {
        let Ok(file) = object::File::parse(self.data.bytes()) else {
            return Vec::new();
        };
        let names = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Data && !s.is_undefined())
            .filter_map(|s| s.name().ok().map(str::to_string))
            .collect();
        self.data.release();
        names
    }

    /// Whether a virtual address lies in an executable loadable segment.
    pub fn is_code(&self, address: u64) -> bool {
        self.segments.iter().any(|s| {
            s.executable && address >= s.vaddr && address - s.vaddr < s.filesz.min(s.memsz)
        })
    }

    /// Calls `each` with the bytes of each read-only data section where
    /// a binary keeps its string literals (`.rodata`, `.rodata.str1.1`,
    /// `.data`), in file order. Nothing is copied.
    pub fn for_each_rodata_section(&self, mut each: impl FnMut(&[u8])) {
        let Ok(file) = object::File::parse(self.data.bytes()) else {
            return;
        };
        for section in file.sections() {
            if !matches!(
                section.name(),
                Ok(".rodata") | Ok(".rodata.str1.1") | Ok(".data")
            ) {
                continue;
            }
            // Read in place, only where the header lies inside the file.
            let cap = super::section::MAX_SECTION;
            if let Ok(bytes) = super::section::bytes_of(&section, self.data.bytes(), cap) {
                each(bytes);
            }
        }
        self.data.release();
    }
}

fn parse<'d>(path: &Path, data: &'d [u8]) -> Result<object::File<'d>, ElfError> {
    object::File::parse(data).map_err(|source| ElfError::Parse {
        path: path.into(),
        source,
    })
}

fn build_id(path: &Path, file: &object::File) -> Result<Option<String>, ElfError> {
    let id = file.build_id().map_err(|source| ElfError::Parse {
        path: path.into(),
        source,
    })?;
    Ok(id.map(hex))
}

/// Function symbols from `.symtab` then `.dynsym` whose raw names `keep`
/// takes, one per (name, address): `.dynsym` repeats the exported
/// `.symtab` entries.
fn function_symbols(file: &object::File, keep: &dyn Fn(&str) -> bool) -> Vec<FunctionSymbol> {
    // Names borrowed from the map: no second copy of every name.
    let mut found: Vec<(SymbolTable, &str, u64, u64)> = Vec::new();
    let tables = [
        (SymbolTable::Symtab, file.symbols()),
        (SymbolTable::Dynsym, file.dynamic_symbols()),
    ];
    for (table, iter) in tables {
        for sym in iter {
            if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            if !raw.is_empty() && keep(raw) {
                found.push((table, raw, sym.address(), sym.size()));
            }
        }
    }
    // The same name at the same address once (`.dynsym` repeats `.symtab`),
    // the first listed kept. By sorting, not hashing: hashing ~10^5 mangled
    // names was ~10 ms of every recording's plan.
    // Sorted by address alone (names compared only among the few symbols
    // at one address): comparing names in the sort was ~10 ms more.
    let mut order: Vec<(u64, u32)> = (0..found.len()).map(|i| (found[i].2, i as u32)).collect();
    order.sort_unstable();
    let mut repeated = vec![false; found.len()];
    for run in order
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|run| run.len() > 1)
    {
        for (k, &(_, i)) in run.iter().enumerate() {
            let name = found[i as usize].1;
            repeated[i as usize] = run[..k].iter().any(|&(_, j)| found[j as usize].1 == name);
        }
    }
    found
        .iter()
        .zip(repeated)
        .filter(|(_, repeated)| !repeated)
        .map(|(&(table, raw, address, size), _)| FunctionSymbol {
            raw: raw.to_string(),
            clone_suffix: clone_suffix(raw).map(str::to_string),
            address,
            size,
            table,
        })
        .collect()
}

/// GCC appends `.constprop.N`, `.isra.N`, `.part.N`, `.cold`, … to clones.
/// Mangled C++ and C identifiers never contain '.', so the first dot starts it.
fn clone_suffix(raw: &str) -> Option<&str> {
    raw.find('.').filter(|&i| i > 0).map(|i| &raw[i + 1..])
}

/// Bytes as lowercase hex, as build-ids are written.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every defined text symbol of both tables is listed once per name
    /// and address, in the order the tables list them, the first kept.
    #[test]
    fn function_symbols_are_each_listed_once_in_table_order() {
        let bytes = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let listed = function_symbols(&file, &|_| true);
        let mut expected: Vec<(SymbolTable, String, u64)> = Vec::new();
        let (mut seen, mut candidates) = (HashSet::new(), 0);
        for (table, iter) in [
            (SymbolTable::Symtab, file.symbols()),
            (SymbolTable::Dynsym, file.dynamic_symbols()),
        ] {
            for sym in iter {
                let name = sym.name().unwrap_or("");
                if sym.kind() != SymbolKind::Text
                    || sym.is_undefined()
                    || sym.address() == 0
                    || name.is_empty()
                {
                    continue;
                }
                candidates += 1;
                if seen.insert((name.to_string(), sym.address())) {
                    expected.push((table, name.to_string(), sym.address()));
                }
            }
        }
        let got: Vec<(SymbolTable, String, u64)> = listed
            .iter()
            .map(|s| (s.table, s.raw.clone(), s.address))
            .collect();
        assert!(got.len() > 1000, "{} symbols", got.len());
        // libc lists versioned aliases (`memcpy@GLIBC_2.2.5` beside
        // `memcpy@@GLIBC_2.14`) under one name at one address: repeats.
        assert!(candidates > got.len() + 100, "{candidates} listed");
        assert_eq!(got, expected);
    }

    #[test]
    fn clone_suffixes() {
        assert_eq!(clone_suffix("_Z3foov.constprop.0"), Some("constprop.0"));
        assert_eq!(clone_suffix("fil_flush.part.0"), Some("part.0"));
        assert_eq!(clone_suffix("fil_flush"), None);
        assert_eq!(clone_suffix(".hidden"), None);
    }

    /// What a restarted server's plan is reused on: the very file, unchanged.
    #[test]
    fn is_file_knows_the_same_file_from_a_copy_or_a_changed_one() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        std::fs::copy(std::env::current_exe().unwrap(), &binary).unwrap();
        // Another path to the same inode is the same file.
        let link = dir.path().join("link");
        std::fs::hard_link(&binary, &link).unwrap();
        let image = ElfImage::open(&binary).unwrap();
        assert!(image.is_file(&binary));
        assert!(image.is_file(&link));
        // A copy is another inode.
        let copy = dir.path().join("copy");
        std::fs::copy(&binary, &copy).unwrap();
        assert!(!image.is_file(&copy));
        // Rewritten in place: same inode, another modification time.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&binary)
            .unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        assert!(!image.is_file(&binary));
        // Its modification time set back as it was: the change time moved.
        f.set_modified(image.stamp.unwrap().modified).unwrap();
        assert!(!image.is_file(&binary));
        assert!(!image.is_file(&dir.path().join("missing")));
    }
}
