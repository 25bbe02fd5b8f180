//! From a source line back to the function holding it: a latch's creation
//! site (`dict0dict.cc:1107`, read from the latch object) is named by the
//! function that created it (`dict_init`). InnoDB creates latches through
//! inline wrappers (`rw_lock_create` → `pfs_rw_lock_create_func`), so the
//! line is usually the `DW_AT_call_line` of an inlined instance, whose
//! enclosing function is the creator; a line the line table has itself is
//! looked up there.
//!
//! The units compiled from a file of that name are searched first (InnoDB
//! creates most latches in `.cc` files), so a lookup usually reads a few
//! line programs; a header's line (`.ic`, `.h`) is looked for in every
//! unit whose file table names that header.

use std::collections::HashMap;
use std::path::Path;

use gimli::AttributeValue;

use super::dwarf::{Reader, Trim};
use super::elf::ElfImage;
use super::pattern::DemangledName;
use super::units::UnitIndex;
use crate::persist;

#[derive(Debug, thiserror::Error)]
pub enum LinesError {
    #[error("reading DWARF")]
    Dwarf(#[from] gimli::Error),
    #[error("parsing the ELF file")]
    Object(#[from] object::Error),
}

/// A kept index larger than this is not read (MariaDB 10.2.11's: ~40 KB).
const MAX_KEPT_BYTES: u64 = 8 << 20;
/// Past this many kept indexes, the least recently used makes room (see
/// [`persist::count_kept`]).
const MAX_KEPT_FILES: usize = 256;
/// The kept files' names: `units-MAJOR-MINOR-INODE.json`.
const KEPT_PREFIX: &str = "units";

/// `image`'s DWARF units by source file, built on the first call and kept
/// with the image (None: no DWARF). A failed build is not kept: the next
/// call tries again.
pub fn unit_index(image: &ElfImage) -> Result<Option<&UnitIndex>, LinesError> {
    let cell = image.unit_index_cell();
    if let Some(index) = cell.get() {
        return Ok(index.as_ref());
    }
    let built = UnitIndex::kept_or_build(image)?;
    Ok(cell.get_or_init(|| built).as_ref())
}

impl UnitIndex {
    /// The index kept for `image`'s DWARF file, or built (and
    /// then kept: a failure to keep it only means building it again).
    pub(crate) fn kept_or_build(image: &ElfImage) -> Result<Option<Self>, LinesError> {
        Self::kept_or_build_in(image, persist::kept_dir())
    }

    fn kept_or_build_in(image: &ElfImage, dir: &Path) -> Result<Option<Self>, LinesError> {
        let Some(key) = image.dwarf_file_key() else {
            return Self::build(image);
        };
        // Units by file name, as offsets into `.debug_info`.
        type Kept = HashMap<String, Vec<usize>>;
        if let Some(kept) = persist::load_json::<Kept>(dir, &key, KEPT_PREFIX, MAX_KEPT_BYTES) {
            let units = kept.into_iter().map(|(name, offsets)| {
                (
                    name,
                    offsets.into_iter().map(gimli::DebugInfoOffset).collect(),
                )
            });
            return Ok(Some(Self {
                units: units.collect(),
            }));
        }
        let built = Self::build(image)?;
        if let Some(index) = &built {
            let kept: Kept = index
                .units
                .iter()
                .map(|(name, offsets)| (name.clone(), offsets.iter().map(|o| o.0).collect()))
                .collect();
            persist::store_json(dir, &key, KEPT_PREFIX, MAX_KEPT_FILES, &kept);
        }
        Ok(built)
    }

    /// One pass over the unit headers of `image`'s DWARF (None: it has none).
    pub(crate) fn build(image: &ElfImage) -> Result<Option<Self>, LinesError> {
        let Some(dwarf) = super::dwarf::load(image.dwarf_data())? else {
            return Ok(None);
        };
        let mut units: HashMap<String, Vec<gimli::DebugInfoOffset>> = HashMap::new();
        // Touches every unit's first pages; released as it goes.
        let mut trim = Trim::every(image, super::dwarf::TRIM_HEADERS_EVERY);
        let mut headers = dwarf.units();
        while let Some(header) = headers.next()? {
            trim.at(&header);
            let Some(offset) = header.offset().to_debug_info_offset(&header) else {
                continue;
            };
            let name = match super::dwarf::unit_name(&dwarf, &header)? {
                Some(name) => name,
                None => match dwarf.unit(header)?.name {
                    Some(name) => name,
                    None => continue,
                },
            };
            units
                .entry(base_name(&String::from_utf8_lossy(name.slice())).to_string())
                .or_default()
                .push(offset);
        }
        Ok(Some(Self { units }))
    }
}

/// An image's line tables, searched by source file.
pub struct SourceLines<'a> {
    image: &'a ElfImage,
    dwarf: Option<gimli::Dwarf<Reader<'a>>>,
    index: Option<&'a UnitIndex>,
}

impl<'a> SourceLines<'a> {
    /// The image's line tables, with its unit index (built on first use).
    pub fn new(image: &'a ElfImage) -> Result<Self, LinesError> {
        Ok(Self {
            image,
            dwarf: super::dwarf::load(image.dwarf_data())?,
            index: unit_index(image)?,
        })
    }

    /// The function (demangled, without parameters) whose code holds
    /// `file:line`; None when no unit of that file has the line.
    pub fn function_at(&self, file: &str, line: u32) -> Result<Option<String>, LinesError> {
        let (Some(dwarf), Some(index)) = (&self.dwarf, self.index) else {
            return Ok(None);
        };
        let base = base_name(file);
        let own: Vec<gimli::DebugInfoOffset> = match index.units.get(base) {
            Some(units) => units.clone(),
            None => index.units.values().flatten().copied().collect(),
        };
        let mut lowest: Option<u64> = None;
        // A few units usually; all of them for a file no unit is named after.
        let mut trim = Trim::new(self.image);
        for offset in own {
            let header = dwarf.debug_info.header_from_offset(offset)?;
            trim.at(&header);
            let unit = dwarf.unit(header)?;
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            if let Some(name) = inlined_at(self, dwarf, &unit, base, line)? {
                return Ok(Some(name));
            }
            let names_file = program.header().file_names().iter().any(|f| {
                path_string(dwarf, &unit, f.path_name()).is_some_and(|n| base_name(&n) == base)
            });
            if !names_file {
                continue;
            }
            let mut rows = program.rows();
            while let Some((header, row)) = rows.next_row()? {
                if row.end_sequence() || row.line().map(|l| l.get()) != Some(u64::from(line)) {
                    continue;
                }
                let Some(entry) = row.file(header) else {
                    continue;
                };
                let Some(name) = path_string(dwarf, &unit, entry.path_name()) else {
                    continue;
                };
                if base_name(&name) == base {
                    let a = row.address();
                    lowest = Some(lowest.map_or(a, |l: u64| l.min(a)));
                }
            }
        }
        Ok(lowest.and_then(|a| self.symbol_at(a)))
    }

    /// The ELF function symbol covering `address`, demangled.
    fn symbol_at(&self, address: u64) -> Option<String> {
        self.image
            .symbols()
            .iter()
            .filter(|s| s.address <= address && address < s.address + s.size.max(1))
            .min_by_key(|s| (s.clone_suffix.is_some(), s.size))
            .map(|s| DemangledName::of(s.base()).short)
    }
}

/// How far above `__LINE__` an inlined call may start: GCC gives a macro
/// spanning lines the last line as `__LINE__`, DWARF the first as
/// `DW_AT_call_line` (btr0sea.cc:192 vs 193 in MariaDB 10.2.11).
const MACRO_LINES: u64 = 3;

/// A function DIE enclosing the walk's position.
struct Enclosing {
    depth: isize,
    /// Entry address of a concrete out-of-line function.
    pc: Option<u64>,
    /// The DIE naming it (itself, or an inlined instance's origin).
    die: gimli::UnitOffset,
}

/// The function holding the inlined call made at `base:line` (or a few
/// lines above, see `MACRO_LINES`) in `unit`: the function it was written
/// in, even when that one was itself inlined (`buf_block_init` inside
/// `buf_chunk_init`).
fn inlined_at(
    lines: &SourceLines<'_>,
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    base: &str,
    line: u32,
) -> Result<Option<String>, LinesError> {
    let Some(program) = &unit.line_program else {
        return Ok(None);
    };
    let header = program.header();
    let line = u64::from(line);
    let mut enclosing: Vec<Enclosing> = Vec::new();
    // (lines above __LINE__, the function around the call)
    let mut best: Option<(u64, Option<u64>, gimli::UnitOffset)> = None;
    let mut cursor = unit.entries();
    while let Some(entry) = cursor.next_dfs()? {
        let depth = entry.depth();
        while enclosing.last().is_some_and(|e| e.depth >= depth) {
            enclosing.pop();
        }
        let tag = entry.tag();
        if tag == gimli::DW_TAG_inlined_subroutine {
            let call_line = entry
                .attr_value(gimli::DW_AT_call_line)
                .and_then(|v| v.udata_value());
            let above = call_line.and_then(|l| line.checked_sub(l));
            if let (Some(above), Some(outer)) =
                (above.filter(|a| *a <= MACRO_LINES), enclosing.last())
            {
                let file = match entry.attr_value(gimli::DW_AT_call_file) {
                    Some(AttributeValue::FileIndex(i)) => header.file(i),
                    Some(v) => v.udata_value().and_then(|i| header.file(i)),
                    None => None,
                };
                let named = file
                    .and_then(|f| path_string(dwarf, unit, f.path_name()))
                    .is_some_and(|n| base_name(&n) == base);
                if named && best.as_ref().is_none_or(|b| above < b.0) {
                    best = Some((above, outer.pc, outer.die));
                }
            }
        }
        if matches!(
            tag,
            gimli::DW_TAG_subprogram | gimli::DW_TAG_inlined_subroutine
        ) {
            let pc = match (tag, entry.attr_value(gimli::DW_AT_low_pc)) {
                (gimli::DW_TAG_subprogram, Some(AttributeValue::Addr(a))) => Some(a),
                _ => None,
            };
            enclosing.push(Enclosing {
                depth,
                pc,
                die: entry.offset(),
            });
        }
    }
    let Some((_, pc, die)) = best else {
        return Ok(None);
    };
    // An out-of-line function: its ELF symbol, demangled with its class.
    if let Some(name) = pc.and_then(|pc| lines.symbol_at(pc)) {
        return Ok(Some(name));
    }
    die_name(dwarf, unit, die)
}

/// A function DIE's name, through its origin or declaration: the linkage
/// name demangled (`purge_sys_t::purge_sys_t`), else `DW_AT_name`.
fn die_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    die: gimli::UnitOffset,
) -> Result<Option<String>, LinesError> {
    let mut cur = die;
    for _ in 0..4 {
        let e = unit.entry(cur)?;
        for attr in [gimli::DW_AT_linkage_name, gimli::DW_AT_MIPS_linkage_name] {
            if let Some(raw) = e.attr_value(attr).and_then(|v| path_string(dwarf, unit, v)) {
                return Ok(Some(DemangledName::of(&raw).short));
            }
        }
        let next = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
            .into_iter()
            .find_map(|a| match e.attr_value(a) {
                Some(AttributeValue::UnitRef(o)) => Some(o),
                _ => None,
            });
        match next {
            Some(o) => cur = o,
            None => {
                return Ok(e
                    .attr_value(gimli::DW_AT_name)
                    .and_then(|v| path_string(dwarf, unit, v)))
            }
        }
    }
    Ok(None)
}

fn path_string(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    value: AttributeValue<Reader<'_>>,
) -> Option<String> {
    let s = dwarf.attr_string(unit, value).ok()?;
    Some(String::from_utf8_lossy(s.slice()).into_owned())
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own source line, looked up in the test binary's DWARF.
    /// The index kept for a file comes back equal to a fresh build, from
    /// the kept file (the same file again); a changed file is rebuilt.
    #[test]
    fn the_unit_index_is_kept_for_the_same_file_only() {
        let d = tempfile::tempdir().unwrap();
        let (dir, binary) = (d.path().join("run"), d.path().join("bin"));
        std::fs::copy(std::env::current_exe().unwrap(), &binary).unwrap();
        let image = ElfImage::open(&binary).unwrap();
        let fresh = UnitIndex::build(&image)
            .unwrap()
            .expect("test builds have DWARF");
        assert!(fresh.units.len() > 10, "{} units", fresh.units.len());
        let first = UnitIndex::kept_or_build_in(&image, &dir).unwrap().unwrap();
        assert_eq!(first, fresh);
        let kept: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(kept.len(), 1, "one kept index");
        let kept = kept[0].as_ref().unwrap().path();
        // What the next call returns is what the kept file says: mark it.
        let mut doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&kept).unwrap()).unwrap();
        doc["value"]["only-in-the-kept-file.cc"] = serde_json::json!([0]);
        std::fs::write(&kept, serde_json::to_vec(&doc).unwrap()).unwrap();
        let again = UnitIndex::kept_or_build_in(&image, &dir).unwrap().unwrap();
        assert!(again.units.contains_key("only-in-the-kept-file.cc"));
        // The file changed (its mtime): built again, and kept anew.
        let f = std::fs::File::options().write(true).open(&binary).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        let changed = ElfImage::open(&binary).unwrap();
        let rebuilt = UnitIndex::kept_or_build_in(&changed, &dir)
            .unwrap()
            .unwrap();
        assert_eq!(rebuilt, fresh);
    }

    #[test]
    fn finds_the_function_of_a_line_in_its_own_binary() {
        let line = line!() + 1;
        let here = std::hint::black_box(7u32).wrapping_mul(3);
        assert_eq!(here, 21);
        let image = ElfImage::open(&std::env::current_exe().unwrap()).unwrap();
        let lines = SourceLines::new(&image).unwrap();
        let name = lines.function_at(file!(), line).unwrap();
        let name = name.expect("a function for this line");
        assert!(
            name.contains("finds_the_function_of_a_line_in_its_own_binary"),
            "{name}"
        );
        assert_eq!(lines.function_at("no_such_file.cc", 1).unwrap(), None);
        // Made again, it finds the same function from the image's index.
        let again = SourceLines::new(&image).unwrap();
        assert_eq!(again.function_at(file!(), line).unwrap(), Some(name));
    }
}
