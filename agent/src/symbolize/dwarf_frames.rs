//! The frames at code addresses, read from DWARF by a walk that touches
//! only what each address needs.
//!
//! blazesym (like addr2line) reads every function of each unit an address
//! falls in before it answers: on MariaDB 10.2.11 that was most of a
//! recording's CPU after its 30 s (0.26 s for the ~2,700 server addresses
//! of one recording) and the end's peak RSS. Here the unit comes from
//! `.debug_aranges`; its top-level entries are stepped over by their
//! `DW_AT_sibling` links (types and declarations are never read); only the
//! function whose ranges hold an address is read, with its inlined calls;
//! and only the line sequences holding an address are kept.
//!
//! The answer is blazesym's, rule for rule (see `blazesym::dwarf`): the
//! same name attributes in the same order, the same inlined-call search,
//! the same source paths and the same demangler, so frames named here and
//! frames named by blazesym are the same (checked frame by frame on the
//! catalog's servers that carry DWARF, `tests/e2e/resolve.rs`). An address
//! no function holds is [`Walked::NoFunction`] or [`Walked::NoUnit`]: the
//! caller names it from the ELF symbols, as blazesym falls back to. What
//! the walk does not cover is [`Walked::Unsure`] and goes to blazesym:
//! units whose ranges differ around the address, two functions holding
//! it, a name in another unit, no line row, a compressed section, a
//! supplementary file, no `.debug_aranges`. Where several units describe
//! the same code (old GCCs keep every copy's DWARF of an inline function),
//! the first unit's frames are taken, not blazesym's arbitrary pick.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::PathBuf;

use gimli::{AttributeValue, DebugInfoOffset, UnitOffset};
use object::{Object, ObjectSection};

use crate::resolve::dwarf::{sections, Reader};

/// A source position as blazesym gives it: the directory joined with the
/// file (`CodeInfo::to_path`), and the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeLine {
    pub path: PathBuf,
    pub line: Option<u32>,
}

/// What is at one address: the function (its name demangled, its bounds)
/// and the functions inlined into it there, outermost first, each with the
/// source position blazesym gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundFrames {
    /// The address looked up.
    pub probe: u64,
    pub name: String,
    /// Start of the function's `low_pc`/`high_pc` bounds (0 without them).
    pub fn_addr: u64,
    /// Their size; None for a function given by `DW_AT_ranges` alone.
    pub size: Option<u64>,
    pub code_line: Option<CodeLine>,
    pub inlined: Vec<(String, Option<CodeLine>)>,
    /// Other units describe this address too (a copy of an inline
    /// function; see `DwarfFrames::unit_of`): the first unit's frames.
    pub shared: bool,
}

impl FoundFrames {
    /// Whether the function's bounds hold the address: the check the
    /// symbolizer makes of blazesym's symbols (`within`), the same way
    /// (an offset past a known, non-zero size is a neighbour's).
    pub fn function_holds_probe(&self) -> bool {
        self.size
            .is_none_or(|size| size == 0 || self.probe.wrapping_sub(self.fn_addr) < size)
    }
}

/// What the walk found at one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walked {
    /// A function, and what is inlined into it there.
    Frames(FoundFrames),
    /// A unit holds the address but no function of it does: blazesym
    /// names it from the ELF symbols, with this line (its
    /// `DwarfResolver` falls back so).
    NoFunction(Option<CodeLine>),
    /// No unit's `.debug_aranges` hold it: ELF symbols, no line.
    NoUnit,
    /// Not covered (see the module's notes): blazesym names it.
    Unsure,
}

/// Why the walk does not answer for an address: blazesym does.
#[derive(Debug)]
struct NotCovered;

impl From<gimli::Error> for NotCovered {
    fn from(_: gimli::Error) -> Self {
        NotCovered
    }
}

/// The walk's pages are dropped from the resident set after every this
/// many bytes of units read.
const RELEASE_EVERY: usize = 4 << 20;

/// One ELF file's DWARF, ready for [`Self::find`].
pub struct DwarfFrames<'a> {
    dwarf: gimli::Dwarf<Reader<'a>>,
    /// `.debug_aranges`: (begin, end, unit), by begin.
    aranges: Vec<(u64, u64, DebugInfoOffset)>,
}

impl<'a> DwarfFrames<'a> {
    /// The file's DWARF, if the walk can read it: `.debug_info` and
    /// `.debug_aranges` present, no section compressed, no supplementary
    /// file (`.gnu_debugaltlink`, `.debug_sup`).
    pub fn new(elf: &'a [u8]) -> Option<Self> {
        let file = object::File::parse(elf).ok()?;
        file.section_by_name(".debug_info")?;
        file.section_by_name(".debug_aranges")?;
        if [".gnu_debugaltlink", ".debug_sup"]
            .iter()
            .any(|s| file.section_by_name(s).is_some())
        {
            return None;
        }
        let compressed = file.sections().any(|s| {
            s.name()
                .is_ok_and(|n| n.starts_with(".debug") || n.starts_with(".zdebug"))
                && (s.name().is_ok_and(|n| n.starts_with(".zdebug"))
                    || s.compressed_file_range()
                        .map_or(true, |r| r.format != object::CompressionFormat::None))
        });
        if compressed {
            return None;
        }
        let dwarf = sections(&file, elf);
        let mut aranges = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Ok(Some(header)) = headers.next() {
            let unit = header.debug_info_offset();
            let mut entries = header.entries();
            while let Ok(Some(e)) = entries.next() {
                if e.length() != 0 {
                    let r = e.range();
                    aranges.push((r.begin, r.end, unit));
                }
            }
        }
        aranges.sort_unstable_by_key(|&(begin, _, _)| begin);
        Some(Self { dwarf, aranges })
    }

    /// The unit whose `.debug_aranges` hold `addr` (Ok(None): none does),
    /// and whether others hold the same range too. Old GCCs keep the
    /// DWARF of every copy of an inline function emitted in many units
    /// while the linker keeps the code of the first copy only; the first
    /// unit in the file describes that one, so it is taken (blazesym takes
    /// whichever its sort puts last). Units holding different ranges
    /// around the address are not guessed between.
    fn unit_of(&self, addr: u64) -> Result<Option<(DebugInfoOffset, bool)>, NotCovered> {
        let upto = self.aranges.partition_point(|&(begin, _, _)| begin <= addr);
        // A short look back is enough: aranges are small and sorted.
        let holding: Vec<&(u64, u64, DebugInfoOffset)> = self.aranges[..upto]
            .iter()
            .rev()
            .take(256)
            .filter(|&&(_, end, _)| addr < end)
            .collect();
        let Some(&&(begin, end, _)) = holding.first() else {
            return Ok(None);
        };
        if holding.iter().any(|&&(b, e, _)| (b, e) != (begin, end)) {
            return Err(NotCovered);
        }
        let first = holding
            .iter()
            .map(|&&(_, _, u)| u)
            .min()
            .ok_or(NotCovered)?;
        Ok(Some((first, holding.iter().any(|&&(_, _, u)| u != first))))
    }

    /// What is at each of `addrs` (virtual addresses of the file).
    /// `release` is called after each unit with the bytes the walk read
    /// (to drop them from the resident set).
    pub fn find(&self, addrs: &[u64], release: impl FnMut()) -> Vec<Walked> {
        self.find_indexed(addrs, &mut UnitFunctions::default(), release)
    }

    /// [`Self::find`], with the top-level functions of units walked
    /// before taken from `index` (which must be this file's), and those of
    /// the units walked now added to it.
    pub fn find_indexed(
        &self,
        addrs: &[u64],
        index: &mut UnitFunctions,
        mut release: impl FnMut(),
    ) -> Vec<Walked> {
        let mut out = vec![Walked::Unsure; addrs.len()];
        let mut by_unit: std::collections::BTreeMap<DebugInfoOffset, Vec<(usize, u64)>> =
            Default::default();
        let mut shared = vec![false; addrs.len()];
        for (i, &a) in addrs.iter().enumerate() {
            match self.unit_of(a) {
                Ok(Some((unit, others))) => {
                    shared[i] = others;
                    by_unit.entry(unit).or_default().push((i, a))
                }
                Ok(None) => out[i] = Walked::NoUnit,
                Err(NotCovered) => {}
            }
        }
        // In file order, the pages dropped every few MiB of units read.
        let mut read_since = 0;
        let mut demangled = Demangled::default();
        for (unit, mut wanted) in by_unit {
            wanted.sort_unstable_by_key(|&(_, a)| a);
            if let Ok((found, size)) = self.find_in_unit(unit, &wanted, index, &mut demangled) {
                for ((i, _), mut f) in wanted.iter().zip(found) {
                    if let Walked::Frames(frames) = &mut f {
                        frames.shared = shared[*i];
                    }
                    out[*i] = f;
                }
                read_since += size;
            }
            if read_since >= RELEASE_EVERY {
                release();
                read_since = 0;
            }
        }
        out
    }

    /// `wanted`: (index, address) sorted by address, all in this unit.
    fn find_in_unit(
        &self,
        offset: DebugInfoOffset,
        wanted: &[(usize, u64)],
        index: &mut UnitFunctions,
        demangled: &mut Demangled,
    ) -> Result<(Vec<Walked>, usize), NotCovered> {
        let header = self.dwarf.debug_info.header_from_offset(offset)?;
        let size = header.length_including_self();
        let unit = self.dwarf.unit(header)?;
        let unit = gimli::UnitRef::new(&self.dwarf, &unit);
        let lang = language(unit)?;
        let addrs: Vec<u64> = wanted.iter().map(|&(_, a)| a).collect();
        let mut functions: Vec<(UnitOffset, Vec<u64>)> = Vec::new();
        let top_level = match index.units.get(&offset.0) {
            Some(kept) => kept,
            None => {
                let walked = top_level_functions(unit)?;
                index.changed = true;
                index.units.entry(offset.0).or_insert(walked)
            }
        };
        holding_functions(top_level, &addrs, &mut functions);
        // Functions elsewhere (a lambda inside its enclosing function, a
        // Rust method inside its type's entry): then every entry of this
        // unit is read, as blazesym reads them, to find them or to know
        // that no function holds the address.
        let found = functions
            .iter()
            .map(|(_, holds)| holds.len())
            .sum::<usize>();
        if found < addrs.len() {
            functions.clear();
            every_function(unit, &addrs, &mut functions)?;
        }
        // An address two functions claim is left to blazesym (whose pick
        // between them depends on its sort).
        let mut claims: HashMap<u64, usize> = HashMap::new();
        for a in functions.iter().flat_map(|(_, holds)| holds) {
            *claims.entry(*a).or_default() += 1;
        }
        let lines = Lines::parse(unit, &addrs)?;
        let mut at: HashMap<u64, Walked> = HashMap::new();
        for (die, holds) in functions {
            let Ok(function) = Function::parse(unit, die) else {
                continue;
            };
            let Ok(inlined) = InlinedFunctions::parse(unit, die) else {
                continue;
            };
            for a in holds {
                if claims[&a] > 1 || inlined.nested_code_holds(a) {
                    continue;
                }
                if let Ok(f) = frames_at(unit, &function, &inlined, &lines, (lang, demangled), a) {
                    at.insert(a, Walked::Frames(f));
                }
            }
        }
        let walked = addrs
            .iter()
            .map(|a| match (at.remove(a), claims.contains_key(a)) {
                (Some(w), _) => w,
                (None, true) => Walked::Unsure,
                (None, false) => Walked::NoFunction(lines.at(*a)),
            })
            .collect();
        Ok((walked, size))
    }
}

/// The unit's source language, as blazesym reads it (the first
/// `DW_AT_language` of the unit's entry), for demangling.
fn language<'a>(unit: gimli::UnitRef<'_, Reader<'a>>) -> Result<Lang, NotCovered> {
    let mut entries = unit.entries_raw(None)?;
    let Some(abbrev) = entries.read_abbreviation()? else {
        return Ok(Lang::Unknown);
    };
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        if attr.name() == gimli::DW_AT_language {
            return Ok(match attr.value() {
                AttributeValue::Language(l) => Lang::of(l),
                _ => Lang::Unknown,
            });
        }
    }
    Ok(Lang::Unknown)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Cpp,
    Unknown,
}

impl Lang {
    fn of(l: gimli::DwLang) -> Self {
        match l {
            gimli::DW_LANG_Rust => Self::Rust,
            gimli::DW_LANG_C_plus_plus
            | gimli::DW_LANG_C_plus_plus_03
            | gimli::DW_LANG_C_plus_plus_11
            | gimli::DW_LANG_C_plus_plus_14
            | gimli::DW_LANG_C_plus_plus_17
            | gimli::DW_LANG_C_plus_plus_20 => Self::Cpp,
            _ => Self::Unknown,
        }
    }

    /// blazesym's `maybe_demangle`: the same demanglers, the same order.
    fn demangle(self, name: &str) -> String {
        let rust = || {
            rustc_demangle::try_demangle(name)
                .ok()
                .map(|d| format!("{d:#}"))
        };
        let cpp = || {
            cpp_demangle::Symbol::new(name)
                .ok()
                .and_then(|s| s.demangle().ok())
        };
        match self {
            Self::Rust => rust(),
            Self::Cpp => cpp(),
            Self::Unknown => rust().or_else(cpp),
        }
        .unwrap_or_else(|| name.to_string())
    }
}

/// Names demangled once per walk: the same few hundred functions and
/// inlined calls come back at address after address, and demangling them
/// each time was a tenth of the walk.
/// One map per [`Lang`] (the same name may demangle differently), looked
/// up by the borrowed name.
#[derive(Default)]
struct Demangled([HashMap<String, String>; 3]);

impl Demangled {
    fn of(&mut self, lang: Lang, name: &str) -> String {
        let known = &mut self.0[lang as usize];
        if let Some(d) = known.get(name) {
            return d.clone();
        }
        let d = lang.demangle(name);
        known.insert(name.to_string(), d.clone());
        d
    }
}

/// The ranges of the subprograms among the unit's top-level entries (and
/// inside namespaces), in the order the unit has them. Any other entry is
/// read only up to its `DW_AT_sibling` link (GCC writes it first) and
/// stepped over whole (a class and its members, a type and its fields are
/// never read).
fn top_level_functions<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
) -> Result<Vec<FunctionRange>, NotCovered> {
    let mut out = Vec::new();
    let mut shapes: HashMap<u64, AbbrevShape> = HashMap::new();
    let mut entries = unit.entries_raw(None)?;
    let root = entries.read_abbreviation()?.ok_or(NotCovered)?;
    entries.skip_attributes(root.attributes())?;
    // Depths from the unit's entry; a cursor opened at a sibling counts
    // from 0 there, so `base` is the sibling's depth.
    let mut base = 0;
    while !entries.is_empty() {
        let depth = base + entries.next_depth();
        if depth <= 0 {
            break;
        }
        let offset = entries.next_offset();
        let Some(abbrev) = entries.read_abbreviation()? else {
            continue;
        };
        let tag = abbrev.tag();
        if tag == gimli::DW_TAG_namespace {
            // Its entries come next, and are read as the unit's are.
            entries.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let specs = abbrev.attributes();
        let shape = *shapes
            .entry(abbrev.code())
            .or_insert_with(|| AbbrevShape::of(specs));
        // A subprogram without code attributes (a declaration) has no
        // range: read like any other entry.
        let function = tag == gimli::DW_TAG_subprogram && shape.has_code;
        let mut ranges = RangeAttributes::default();
        let mut sibling = None;
        if function {
            for spec in specs {
                let attr = entries.read_attribute(*spec)?;
                match (attr.name(), attr.value()) {
                    (gimli::DW_AT_sibling, AttributeValue::UnitRef(o)) => sibling = Some(o),
                    _ => ranges.read(&attr, unit)?,
                }
            }
        } else {
            // Only the sibling link is wanted, and only past children:
            // every other attribute is stepped over by its form's size.
            match shape.sibling.filter(|_| abbrev.has_children()) {
                Some(i) => {
                    entries.skip_attributes(&specs[..i])?;
                    if let AttributeValue::UnitRef(o) = entries.read_attribute(specs[i])?.value() {
                        sibling = Some(o);
                    }
                    entries.skip_attributes(&specs[i + 1..])?;
                }
                None => entries.skip_attributes(specs)?,
            }
        }
        if function {
            ranges.for_each_range(unit, |r| {
                out.push(FunctionRange {
                    begin: r.begin,
                    end: r.end,
                    entry: offset.0 as u64,
                })
            })?;
        }
        if !abbrev.has_children() {
            continue;
        }
        match sibling {
            Some(next) => {
                entries = unit.entries_raw(Some(next))?;
                base = depth;
            }
            None => {
                while base + entries.next_depth() > depth && !entries.is_empty() {
                    if let Some(a) = entries.read_abbreviation()? {
                        entries.skip_attributes(a.attributes())?;
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What [`top_level_functions`] needs of an abbreviation, worked out once
/// per abbreviation code: parsing every attribute of the unit's ~10^4
/// top-level entries (types, declarations) to find a sibling link was
/// most of the walk, when their forms' sizes step over them.
#[derive(Clone, Copy)]
struct AbbrevShape {
    /// Has `DW_AT_low_pc` or `DW_AT_ranges`: code of its own.
    has_code: bool,
    /// Where `DW_AT_sibling` is among the attributes.
    sibling: Option<usize>,
}

impl AbbrevShape {
    fn of(specs: &[gimli::AttributeSpecification]) -> Self {
        Self {
            has_code: specs
                .iter()
                .any(|s| matches!(s.name(), gimli::DW_AT_low_pc | gimli::DW_AT_ranges)),
            sibling: specs.iter().position(|s| s.name() == gimli::DW_AT_sibling),
        }
    }
}

/// The functions of `ranges` (one unit's, as [`top_level_functions`]
/// gives them) that hold any of `addrs` (sorted), with the addresses each
/// holds, as [`holding`] finds them.
fn holding_functions(
    ranges: &[FunctionRange],
    addrs: &[u64],
    out: &mut Vec<(UnitOffset, Vec<u64>)>,
) {
    for function in ranges.chunk_by(|a, b| a.entry == b.entry) {
        let each = function.iter().map(|r| gimli::Range {
            begin: r.begin,
            end: r.end,
        });
        let holds = addresses_in(each, addrs);
        if !holds.is_empty() {
            out.push((UnitOffset(function[0].entry as usize), holds));
        }
    }
}

/// One code range of a unit's top-level function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionRange {
    pub begin: u64,
    pub end: u64,
    /// The function's entry, as an offset in its unit.
    pub entry: u64,
}

/// The top-level functions of the units a walk read, by the unit's offset
/// in `.debug_info`: finding them steps over every top-level entry of the
/// unit (types, declarations), which was ~40 % of a walk, while what it
/// finds depends only on the file. So a recording keeps them
/// ([`crate::symbolize`], in the kept directory) for the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitFunctions {
    pub units: HashMap<usize, Vec<FunctionRange>>,
    /// Units were added since it was made or loaded.
    pub changed: bool,
}

/// Every subprogram of the unit, at any depth (blazesym's
/// `Functions::parse`), whose ranges hold any of `addrs` (sorted).
fn every_function<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
    addrs: &[u64],
    out: &mut Vec<(UnitOffset, Vec<u64>)>,
) -> Result<(), NotCovered> {
    let mut entries = unit.entries_raw(None)?;
    while !entries.is_empty() {
        let offset = entries.next_offset();
        let Some(abbrev) = entries.read_abbreviation()? else {
            continue;
        };
        if abbrev.tag() != gimli::DW_TAG_subprogram {
            entries.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let mut ranges = RangeAttributes::default();
        for spec in abbrev.attributes() {
            ranges.read(&entries.read_attribute(*spec)?, unit)?;
        }
        let holds = holding(unit, &ranges, addrs)?;
        if !holds.is_empty() {
            out.push((offset, holds));
        }
    }
    Ok(())
}

/// Which of `addrs` (sorted) the ranges hold, sorted.
fn holding<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
    ranges: &RangeAttributes,
    addrs: &[u64],
) -> Result<Vec<u64>, NotCovered> {
    let mut all = Vec::new();
    ranges.for_each_range(unit, |r| all.push(r))?;
    Ok(addresses_in(all, addrs))
}

/// Which of `addrs` (sorted) any of `ranges` holds, sorted.
fn addresses_in(ranges: impl IntoIterator<Item = gimli::Range>, addrs: &[u64]) -> Vec<u64> {
    let mut holds = Vec::new();
    for r in ranges {
        let from = addrs.partition_point(|&a| a < r.begin);
        holds.extend(addrs[from..].iter().take_while(|&&a| a < r.end));
    }
    holds.sort_unstable();
    holds.dedup();
    holds
}

/// A function's ranges as blazesym reads them (`RangeAttributes`).
#[derive(Default)]
struct RangeAttributes {
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    size: Option<u64>,
    ranges: Option<gimli::RangeListsOffset>,
}

impl RangeAttributes {
    fn read<'a>(
        &mut self,
        attr: &gimli::Attribute<Reader<'a>>,
        unit: gimli::UnitRef<'_, Reader<'a>>,
    ) -> Result<(), NotCovered> {
        match (attr.name(), attr.value()) {
            (gimli::DW_AT_low_pc, AttributeValue::Addr(v)) => self.low_pc = Some(v),
            (gimli::DW_AT_low_pc, AttributeValue::DebugAddrIndex(i)) => {
                self.low_pc = Some(unit.address(i)?)
            }
            (gimli::DW_AT_high_pc, AttributeValue::Addr(v)) => self.high_pc = Some(v),
            (gimli::DW_AT_high_pc, AttributeValue::DebugAddrIndex(i)) => {
                self.high_pc = Some(unit.address(i)?)
            }
            (gimli::DW_AT_high_pc, AttributeValue::Udata(v)) => self.size = Some(v),
            (gimli::DW_AT_ranges, v) => self.ranges = unit.attr_ranges_offset(v)?,
            _ => {}
        }
        Ok(())
    }

    /// Each non-empty range; whether there was one.
    fn for_each_range<'a>(
        &self,
        unit: gimli::UnitRef<'_, Reader<'a>>,
        mut f: impl FnMut(gimli::Range),
    ) -> Result<bool, NotCovered> {
        let mut any = false;
        let mut add = |r: gimli::Range| {
            if r.begin < r.end {
                f(r);
                any = true;
            }
        };
        if let Some(offset) = self.ranges {
            let mut list = unit.ranges(offset)?;
            while let Some(r) = list.next()? {
                add(r);
            }
        } else if let (Some(begin), Some(end)) = (self.low_pc, self.high_pc) {
            add(gimli::Range { begin, end });
        } else if let (Some(begin), Some(size)) = (self.low_pc, self.size) {
            add(gimli::Range {
                begin,
                end: begin + size,
            });
        }
        Ok(any)
    }

    fn bounds(&self) -> Option<gimli::Range> {
        match (self.low_pc, self.high_pc, self.size) {
            (Some(begin), Some(end), _) => Some(gimli::Range { begin, end }),
            (Some(begin), None, Some(size)) => Some(gimli::Range {
                begin,
                end: begin + size,
            }),
            _ => None,
        }
    }
}

/// A function entry as blazesym's `Functions::parse` reads it.
struct Function {
    name: Option<String>,
    bounds: Option<gimli::Range>,
}

impl Function {
    fn parse<'a>(
        unit: gimli::UnitRef<'_, Reader<'a>>,
        die: UnitOffset,
    ) -> Result<Self, NotCovered> {
        let mut entries = unit.entries_raw(Some(die))?;
        let abbrev = entries.read_abbreviation()?.ok_or(NotCovered)?;
        let mut name = None;
        let mut ranges = RangeAttributes::default();
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            if !read_name(&mut name, &attr, unit)? {
                ranges.read(&attr, unit)?;
            }
        }
        Ok(Self {
            name: name.map(utf8).transpose()?,
            bounds: ranges.bounds(),
        })
    }
}

/// blazesym's rule for a function's or an inlined call's name, one
/// attribute at a time: a linkage name wins, then the name, then where
/// the origin or specification leads. Whether `attr` was one of those.
fn read_name<'a>(
    name: &mut Option<Reader<'a>>,
    attr: &gimli::Attribute<Reader<'a>>,
    unit: gimli::UnitRef<'_, Reader<'a>>,
) -> Result<bool, NotCovered> {
    match attr.name() {
        gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
            if let Ok(v) = unit.attr_string(attr.value()) {
                *name = Some(v);
            }
        }
        gimli::DW_AT_name => {
            if name.is_none() {
                *name = unit.attr_string(attr.value()).ok();
            }
        }
        gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
            if name.is_none() {
                *name = name_attr(attr.value(), unit, 16)?;
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn utf8(r: Reader<'_>) -> Result<String, NotCovered> {
    Ok(r.to_string().map_err(|_| NotCovered)?.to_owned())
}

/// blazesym's `name_attr`: follows a reference within the unit; one into
/// another unit is not covered (blazesym finds that unit by a walk over
/// every unit header).
fn name_attr<'a>(
    value: AttributeValue<Reader<'a>>,
    unit: gimli::UnitRef<'_, Reader<'a>>,
    limit: usize,
) -> Result<Option<Reader<'a>>, NotCovered> {
    if limit == 0 {
        return Ok(None);
    }
    match value {
        AttributeValue::UnitRef(offset) => name_entry(unit, offset, limit),
        AttributeValue::DebugInfoRef(_) | AttributeValue::DebugInfoRefSup(_) => Err(NotCovered),
        _ => Ok(None),
    }
}

/// blazesym's `name_entry`: a linkage name at once, else the name, else
/// where the entry's origin or specification leads.
fn name_entry<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
    offset: UnitOffset,
    limit: usize,
) -> Result<Option<Reader<'a>>, NotCovered> {
    let mut entries = unit.entries_raw(Some(offset))?;
    let abbrev = entries.read_abbreviation()?.ok_or(NotCovered)?;
    let mut name = None;
    let mut next = None;
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    return Ok(Some(v));
                }
            }
            gimli::DW_AT_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    name = Some(v);
                }
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                next = Some(attr.value());
            }
            _ => {}
        }
    }
    match (name, next) {
        (Some(n), _) => Ok(Some(n)),
        (None, Some(next)) => name_attr(next, unit, limit - 1),
        (None, None) => Ok(None),
    }
}

/// One inlined call, as blazesym's `InlinedFunction` keeps it, but for
/// its name: the attributes that give it, in their order, resolved only
/// for a call an address is in (most calls of a function are not, and
/// following `DW_AT_abstract_origin` to each name was a third of the
/// walk's time).
struct InlinedCall<'a> {
    name_attrs: Vec<gimli::Attribute<Reader<'a>>>,
    call_file: Option<u64>,
    call_line: u32,
}

impl<'a> InlinedCall<'a> {
    /// The name blazesym reads for the call, by [`read_name`]'s rule.
    fn name(&self, unit: gimli::UnitRef<'_, Reader<'a>>) -> Result<Option<String>, NotCovered> {
        let mut name = None;
        for attr in &self.name_attrs {
            read_name(&mut name, attr, unit)?;
        }
        name.map(utf8).transpose()
    }
}

/// One range of an inlined call, at its depth of inlining.
struct InlinedRange {
    range: gimli::Range,
    depth: usize,
    call: usize,
}

/// The inlined calls of one function, searched as blazesym searches them.
struct InlinedFunctions<'a> {
    calls: Vec<InlinedCall<'a>>,
    /// By (depth, begin).
    ranges: Vec<InlinedRange>,
    /// Ranges of functions nested in this one (blazesym lists them among
    /// the unit's functions, which this walk does not read).
    nested: Vec<gimli::Range>,
}

impl<'a> InlinedFunctions<'a> {
    fn parse(unit: gimli::UnitRef<'_, Reader<'a>>, die: UnitOffset) -> Result<Self, NotCovered> {
        let mut entries = unit.entries_raw(Some(die))?;
        let depth = entries.next_depth();
        let abbrev = entries.read_abbreviation()?.ok_or(NotCovered)?;
        entries.skip_attributes(abbrev.attributes())?;
        let mut s = Self {
            calls: Vec::new(),
            ranges: Vec::new(),
            nested: Vec::new(),
        };
        s.children(unit, &mut entries, depth, 0)?;
        s.ranges.sort_unstable_by_key(|r| (r.depth, r.range.begin));
        Ok(s)
    }

    /// blazesym's `Function::parse_children`: nested functions skipped,
    /// inlined calls read (their children one level deeper), every other
    /// entry's children read at the same level.
    fn children(
        &mut self,
        unit: gimli::UnitRef<'_, Reader<'a>>,
        entries: &mut gimli::EntriesRaw<'_, Reader<'a>>,
        depth: isize,
        inlined_depth: usize,
    ) -> Result<(), NotCovered> {
        loop {
            let next_depth = entries.next_depth();
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            match abbrev.tag() {
                gimli::DW_TAG_subprogram => {
                    let mut ranges = RangeAttributes::default();
                    for spec in abbrev.attributes() {
                        ranges.read(&entries.read_attribute(*spec)?, unit)?;
                    }
                    ranges.for_each_range(unit, |r| self.nested.push(r))?;
                    while entries.next_depth() > next_depth {
                        if let Some(a) = entries.read_abbreviation()? {
                            entries.skip_attributes(a.attributes())?;
                        }
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let mut ranges = RangeAttributes::default();
                    let mut call = InlinedCall {
                        name_attrs: Vec::new(),
                        call_file: None,
                        call_line: 0,
                    };
                    for spec in abbrev.attributes() {
                        let attr = entries.read_attribute(*spec)?;
                        match attr.name() {
                            gimli::DW_AT_linkage_name
                            | gimli::DW_AT_MIPS_linkage_name
                            | gimli::DW_AT_name
                            | gimli::DW_AT_abstract_origin
                            | gimli::DW_AT_specification => call.name_attrs.push(attr),
                            gimli::DW_AT_call_file => {
                                // DWARF 5 numbers files from 0 (see blazesym).
                                if let AttributeValue::FileIndex(fi) = attr.value() {
                                    if fi > 0 || unit.header.version() >= 5 {
                                        call.call_file = Some(fi);
                                    }
                                }
                            }
                            gimli::DW_AT_call_line => {
                                call.call_line = attr.udata_value().unwrap_or(0) as u32;
                            }
                            _ => ranges.read(&attr, unit)?,
                        }
                    }
                    let index = self.calls.len();
                    self.calls.push(call);
                    ranges.for_each_range(unit, |range| {
                        self.ranges.push(InlinedRange {
                            range,
                            depth: inlined_depth,
                            call: index,
                        })
                    })?;
                    self.children(unit, entries, next_depth, inlined_depth + 1)?;
                }
                _ => entries.skip_attributes(abbrev.attributes())?,
            }
        }
    }

    /// Whether a function nested in this one holds `probe`.
    fn nested_code_holds(&self, probe: u64) -> bool {
        self.nested
            .iter()
            .any(|r| r.begin <= probe && probe < r.end)
    }

    /// The calls holding `probe`, outermost first (blazesym's search: at
    /// each depth, a range holding it among those after the last found).
    fn at(&self, probe: u64) -> Vec<&InlinedCall<'a>> {
        let mut found = Vec::new();
        let mut ranges = &self.ranges[..];
        loop {
            let depth = found.len();
            let search = ranges.binary_search_by(|r| {
                if r.depth > depth {
                    Ordering::Greater
                } else if r.depth < depth {
                    Ordering::Less
                } else if r.range.begin > probe {
                    Ordering::Greater
                } else if r.range.end <= probe {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            });
            let Ok(i) = search else {
                return found;
            };
            found.push(&self.calls[ranges[i].call]);
            ranges = &ranges[i + 1..];
        }
    }
}

/// The line rows at the addresses asked for, read in one pass over the
/// unit's line program, stopped once each address has its row (blazesym
/// keeps every sequence and searches it; the row found is the same: in
/// the sequence holding the address, the last row at or before it, the
/// last of several rows at one address). The file names are rendered
/// only for the rows and inlined calls that use them: a C++ unit's file
/// table names hundreds of headers, and rendering them all was a third
/// of the end's line-table time.
struct Lines<'u, 'a> {
    unit: gimli::UnitRef<'u, Reader<'a>>,
    header: Option<gimli::LineProgramHeader<Reader<'a>>>,
    /// Address asked for → (file index, line; 0 for none).
    found: HashMap<u64, (u64, u32)>,
    /// File index → its rendered path (None: not renderable).
    files: std::cell::RefCell<HashMap<u64, Option<PathBuf>>>,
}

impl<'u, 'a> Lines<'u, 'a> {
    /// `addrs` sorted.
    fn parse(unit: gimli::UnitRef<'u, Reader<'a>>, addrs: &[u64]) -> Result<Self, NotCovered> {
        let mut found = HashMap::new();
        let Some(program) = unit.line_program.clone() else {
            return Ok(Self {
                unit,
                header: None,
                found,
                files: Default::default(),
            });
        };
        let mut rows = program.rows();
        // The current sequence: its row before the one being read, and the
        // first address asked for not yet given a row.
        let mut prev: Option<(u64, u64, u32)> = None;
        let mut next = 0;
        // Addresses in [from, to) get `row`'s file and line. Whether every
        // address has its row now: one given keeps it (the first read
        // wins), so the rest of the program could change nothing.
        let mut give = |from: u64, to: u64, next: &mut usize, (file, line): (u64, u32)| {
            while let Some(&a) = addrs.get(*next) {
                if a >= to {
                    break;
                }
                if a >= from {
                    // Overlapping sequences (not in well-formed DWARF):
                    // the first read keeps the address.
                    found.entry(a).or_insert((file, line));
                }
                *next += 1;
            }
            found.len() == addrs.len()
        };
        while let Some((_, row)) = rows.next_row()? {
            let address = row.address();
            if row.end_sequence() {
                if let Some((at, file, line)) = prev.take() {
                    if give(at, address, &mut next, (file, line)) {
                        break;
                    }
                }
                continue;
            }
            let line = row.line().map_or(0, |l| l.get() as u32);
            let file = row.file_index();
            match prev {
                // A new sequence: its first address asked for.
                None => next = addrs.partition_point(|&a| a < address),
                Some((at, pfile, pline)) if address > at => {
                    if give(at, address, &mut next, (pfile, pline)) {
                        break;
                    }
                }
                // The same address again (the last row there counts), or
                // one going back (malformed: not given anything).
                Some(_) => {}
            }
            prev = Some((address, file, line));
        }
        Ok(Self {
            unit,
            header: Some(rows.header().clone()),
            found,
            files: Default::default(),
        })
    }

    /// The row at `probe`, which must be one of the addresses parsed for.
    fn at(&self, probe: u64) -> Option<CodeLine> {
        let &(file, line) = self.found.get(&probe)?;
        Some(CodeLine {
            path: self.file(file)?,
            line: (line != 0).then_some(line),
        })
    }

    fn file(&self, index: u64) -> Option<PathBuf> {
        let header = self.header.as_ref()?;
        self.files
            .borrow_mut()
            .entry(index)
            .or_insert_with(|| match header.file(index) {
                Some(f) => render_file(self.unit, f, header).ok(),
                // DWARF 4 and earlier may have no file 0.
                None if index == 0 => Some(PathBuf::new()),
                None => None,
            })
            .clone()
    }
}

/// blazesym's `render_file` then `CodeInfo::to_path`: the unit's
/// directory, the file's directory pushed onto it (replacing it when
/// absolute), then the file joined.
fn render_file<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
    file: &gimli::FileEntry<Reader<'a>>,
    header: &gimli::LineProgramHeader<Reader<'a>>,
) -> Result<PathBuf, NotCovered> {
    use std::os::unix::ffi::OsStrExt;
    let as_path = |r: Reader<'_>| PathBuf::from(std::ffi::OsStr::from_bytes(r.slice()));
    let mut dir = unit.comp_dir.map(as_path).unwrap_or_default();
    if file.directory_index() != 0 {
        if let Some(d) = file.directory(header) {
            dir.push(as_path(unit.attr_string(d)?));
        }
    }
    Ok(dir.join(as_path(unit.attr_string(file.path_name())?)))
}

/// blazesym's `fill_code_info` for a function found at `probe`: the
/// address's own line moves to the innermost inlined call, and each call's
/// line to the frame it was made from. No line row, no frames: blazesym
/// gives none then either, and this walk leaves it to blazesym.
fn frames_at<'a>(
    unit: gimli::UnitRef<'_, Reader<'a>>,
    function: &Function,
    inlined: &InlinedFunctions<'a>,
    lines: &Lines,
    (lang, demangled): (Lang, &mut Demangled),
    probe: u64,
) -> Result<FoundFrames, NotCovered> {
    let mut direct = Some(lines.at(probe).ok_or(NotCovered)?);
    let mut frames: Vec<(String, Option<CodeLine>)> = Vec::new();
    for call in inlined.at(probe) {
        let mut code = match call.call_file {
            Some(f) => Some(CodeLine {
                // An invalid index: blazesym warns and gives no line.
                path: lines.file(f).ok_or(NotCovered)?,
                line: Some(call.call_line),
            }),
            None => None,
        };
        if let Some(last) = frames.last_mut() {
            std::mem::swap(&mut code, &mut last.1);
        } else if code.is_some() {
            std::mem::swap(&mut code, &mut direct);
        }
        let name = call.name(unit)?;
        frames.push((demangled.of(lang, name.as_deref().unwrap_or("")), code));
    }
    Ok(FoundFrames {
        probe,
        name: demangled.of(lang, function.name.as_deref().unwrap_or("")),
        fn_addr: function.bounds.map_or(0, |b| b.begin),
        size: function.bounds.map(|b| b.end - b.begin),
        code_line: direct,
        inlined: frames,
        shared: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSymbol;

    /// Functions found through a unit index, whether built by this walk or
    /// by one of other addresses, are the functions the walk finds.
    #[test]
    fn an_indexed_walk_finds_what_a_plain_walk_finds() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let elf = object::File::parse(&*exe).unwrap();
        let mut starts: Vec<(u64, u64)> = elf
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
            .map(|s| (s.address(), s.size()))
            .collect();
        starts.sort_unstable();
        let at = |skip: usize| -> Vec<u64> {
            starts
                .iter()
                .skip(skip)
                .step_by(30)
                .flat_map(|&(a, size)| [a, a + size / 2])
                .collect()
        };
        let (first, second) = (at(0), at(15));
        let walk = DwarfFrames::new(&exe).unwrap();
        let plain = walk.find(&second, || {});
        assert!(
            plain
                .iter()
                .filter(|w| matches!(w, Walked::Frames(_)))
                .count()
                * 4
                > second.len(),
            "the walk names too little of this binary to compare"
        );
        let mut index = UnitFunctions::default();
        assert_eq!(walk.find_indexed(&second, &mut index, || {}), plain);
        assert!(index.changed && !index.units.is_empty());
        // Again from its own index: no unit walked anew.
        index.changed = false;
        assert_eq!(walk.find_indexed(&second, &mut index, || {}), plain);
        assert!(!index.changed);
        // From an index of other addresses (some units shared, some not).
        let mut other = UnitFunctions::default();
        walk.find_indexed(&first, &mut other, || {});
        let before = other.units.len();
        other.changed = false;
        assert_eq!(walk.find_indexed(&second, &mut other, || {}), plain);
        assert!(other.changed && other.units.len() > before);
    }
}
