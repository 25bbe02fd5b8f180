//! Inlined instances of a function, from DWARF: for functions that exist
//! only inlined (e.g. `dict_sys_get_new_row_id` in MySQL 5.6 and MariaDB
//! 10.2), the entry address of each inline instance is where a count
//! probe goes. Inline code has no return instruction of its own, so these
//! sites count calls; they cannot time them.

use std::collections::HashMap;

use gimli::{AttributeValue, UnitOffset};

use super::dwarf::{Reader, Trim};
use super::elf::ElfImage;
use super::pattern::{DemangledName, SymbolPattern};

#[derive(Debug, thiserror::Error)]
pub enum InlineError {
    #[error("the binary has no DWARF debug info (.debug_info); inline sites need it (install the server's debug symbols)")]
    NoDebugInfo,
    #[error("reading DWARF")]
    Dwarf(#[from] gimli::Error),
    #[error("parsing the ELF file")]
    Object(#[from] object::Error),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineSite {
    /// The inlined function's name, as DWARF names it.
    pub function: String,
    /// The function it was inlined into.
    pub caller: Option<String>,
    /// Entry address of the instance: DW_AT_entry_pc, else DW_AT_low_pc,
    /// else the lowest address of its ranges.
    pub address: u64,
}

/// All inline instances, in the image's DWARF, of functions matching a
/// pattern. Reads every unit, releasing them as it goes.
pub fn find_inline_sites(
    image: &ElfImage,
    patterns: &[SymbolPattern],
) -> Result<Vec<InlineSite>, InlineError> {
    let dwarf = super::dwarf::load(image.dwarf_data())?.ok_or(InlineError::NoDebugInfo)?;

    let mut trim = Trim::new(image);
    let mut sites = Vec::new();
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        trim.at(&header);
        let unit = dwarf.unit(header)?;
        // Names of abstract-origin DIEs, resolved once per unit.
        let mut names: HashMap<UnitOffset, Option<String>> = HashMap::new();
        // Enclosing out-of-line function per tree depth.
        let mut callers: Vec<(isize, Option<String>)> = Vec::new();
        let mut cursor = unit.entries();
        while let Some(entry) = cursor.next_dfs()? {
            let depth = entry.depth();
            while callers.last().is_some_and(|(d, _)| *d >= depth) {
                callers.pop();
            }
            match entry.tag() {
                gimli::DW_TAG_subprogram => {
                    let name = die_name(&dwarf, &unit, entry.offset(), 0);
                    callers.push((depth, name));
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let Some(AttributeValue::UnitRef(origin)) =
                        entry.attr_value(gimli::DW_AT_abstract_origin)
                    else {
                        continue;
                    };
                    let name = names
                        .entry(origin)
                        .or_insert_with(|| die_name(&dwarf, &unit, origin, 0))
                        .clone();
                    let Some(name) = name else { continue };
                    let demangled = DemangledName::of(&name);
                    if !patterns.iter().any(|p| p.matches(&name, &demangled)) {
                        continue;
                    }
                    if let Some(address) = entry_address(&dwarf, &unit, entry)? {
                        let caller = callers.iter().rev().find_map(|(_, n)| n.clone());
                        sites.push(InlineSite {
                            function: name,
                            caller,
                            address,
                        });
                    }
                }
                _ => {}
            }
        }
    }
    sites.sort_by_key(|s| s.address);
    sites.dedup_by_key(|s| s.address);
    Ok(sites)
}

/// DW_AT_linkage_name (mangled, preferred: it is what patterns match) or
/// DW_AT_name, following abstract origins and specifications.
fn die_name<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &gimli::Unit<Reader<'a>>,
    offset: UnitOffset,
    hops: u8,
) -> Option<String> {
    let entry = unit.entry(offset).ok()?;
    for attr in [
        gimli::DW_AT_linkage_name,
        gimli::DW_AT_MIPS_linkage_name,
        gimli::DW_AT_name,
    ] {
        if let Some(value) = entry.attr_value(attr) {
            if let Ok(s) = dwarf.attr_string(unit, value) {
                return Some(String::from_utf8_lossy(s.slice()).into_owned());
            }
        }
    }
    if hops >= 4 {
        return None;
    }
    for attr in [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification] {
        if let Some(AttributeValue::UnitRef(next)) = entry.attr_value(attr) {
            return die_name(dwarf, unit, next, hops + 1);
        }
    }
    None
}

fn entry_address<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &gimli::Unit<Reader<'a>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'a>>,
) -> Result<Option<u64>, gimli::Error> {
    let low_pc = match entry.attr_value(gimli::DW_AT_low_pc) {
        Some(AttributeValue::Addr(a)) => Some(a),
        Some(AttributeValue::DebugAddrIndex(i)) => Some(dwarf.address(unit, i)?),
        _ => None,
    };
    match entry.attr_value(gimli::DW_AT_entry_pc) {
        Some(AttributeValue::Addr(a)) => return Ok(Some(a)),
        Some(AttributeValue::DebugAddrIndex(i)) => return Ok(Some(dwarf.address(unit, i)?)),
        // DWARF 5: a constant entry_pc is an offset from low_pc.
        Some(AttributeValue::Udata(off)) if low_pc.is_some() => return Ok(low_pc.map(|l| l + off)),
        _ => {}
    }
    if low_pc.is_some() {
        return Ok(low_pc);
    }
    let mut ranges = dwarf.die_ranges(unit, entry)?;
    let mut lowest = None;
    while let Some(r) = ranges.next()? {
        if r.begin < r.end {
            lowest = Some(lowest.map_or(r.begin, |l: u64| l.min(r.begin)));
        }
    }
    Ok(lowest)
}
