//! Where a counter InnoDB keeps in memory lives, from DWARF: the global
//! (`dict_sys`, `trx_sys`, `log_sys`), then its members as the catalog
//! path names them, following a pointer wherever the type is one
//! (`dict_sys->row_id` in MySQL 5.6, `log_sys.lsn` in MariaDB 11.4), down
//! to an integer or a wrapper of exactly one (`std::atomic<unsigned long>`,
//! `Atomic_counter<…>`: a base class or member holding `_M_i`), or to an
//! array of unsigned integers read as their sum: InnoDB's sharded counters
//! (`ib_counter_t::m_counter`, one slot per cache line so that threads do
//! not share one), such as `srv_stats.n_rows_read`.
//!
//! The result is a short recipe of offsets and pointer reads from the
//! global's link-time address; [`crate::plan::memcounters`] runs it against the
//! target's memory.

use gimli::{AttributeValue, UnitOffset};
use object::{Object, ObjectSymbol};
use serde::{Deserialize, Serialize};

use super::latch::members;
use crate::plan::catalog::CounterPath;
use crate::resolve::dwarf::Reader;

type Unit<'a> = gimli::Unit<Reader<'a>>;

/// Bound on typedef/cv/atomic layers, wrapper structs and base classes.
const MAX_HOPS: u8 = 12;
/// Bound on namespace nesting searched for the global's definition.
const MAX_NAMESPACE_DEPTH: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    #[error(
        "the binary has no DWARF debug info, and a counter's layout (member offsets) needs it; \
         install the server's debug symbols"
    )]
    NoDebugInfo,
    #[error("no variable `{0}` defined in this build's DWARF")]
    NoSuchGlobal(String),
    #[error("`{ty}` has no member `{member}` in this build")]
    NoSuchMember { ty: String, member: String },
    #[error("`{path}` is {what}, not an integer or a wrapper of one")]
    NotAnInteger { path: String, what: String },
    #[error("`{path}`: {what}; not supported")]
    Unsupported { path: String, what: String },
    #[error("reading DWARF")]
    Dwarf(#[from] gimli::Error),
    #[error("parsing the ELF file")]
    Object(#[from] object::Error),
}

/// One move from the global's address towards the integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Add a member's byte offset.
    Offset(u64),
    /// Read the 8-byte pointer stored here and continue where it points.
    Deref,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterLayout {
    /// The global's link-time address (the load bias is added at run time
    /// for a position-independent binary).
    pub global_address: u64,
    pub steps: Vec<Step>,
    /// Bytes of the integer: 1, 2, 4 or 8.
    pub size: u8,
    pub signed: bool,
    /// The counter's type as DWARF names it (`row_id_t`, `std::atomic<…>`).
    pub type_name: String,
    /// Integers summed, `size` bytes apart: 1 for a plain counter, the
    /// array's length for a sharded one.
    #[serde(default = "one")]
    pub elements: u32,
}

fn one() -> u32 {
    1
}

impl CounterLayout {
    /// `dict_sys -> +0x48 (8 bytes)`, for `innoprof probes`.
    pub fn describe(&self, global: &str) -> String {
        let mut out = global.to_string();
        for s in &self.steps {
            match s {
                Step::Deref => out.push_str(" ->"),
                Step::Offset(o) => out.push_str(&format!(" +{o:#x}")),
            }
        }
        let size = match self.elements {
            1 => format!("{} bytes", self.size),
            n => format!("sum of {n} x {} bytes", self.size),
        };
        format!(
            "{out} ({size}, {}{})",
            if self.signed { "signed " } else { "" },
            self.type_name
        )
    }
}

/// A global the DWARF walk looks for.
struct Wanted<'a> {
    global: &'a str,
    /// From the symbol table, when the global is in it.
    symbol_address: Option<u64>,
}

/// Resolves one counter (see [`resolve_counters`]).
pub fn resolve_counter(
    elf_data: &[u8],
    counter: &CounterPath,
) -> Result<CounterLayout, CounterError> {
    resolve_counters(elf_data, &[counter])?
        .pop()
        .expect("one result per counter")
}

/// Resolves `counters` in the ELF file `elf_data` (the binary, or its
/// separate debug file: same symbols and addresses), in one pass over the
/// DWARF units (MariaDB 11.4.5 has 216 MB of `.debug_info`; only each
/// unit's top-level entries are read). The outer error is for the file as
/// a whole (no DWARF); each counter gets its own result.
pub fn resolve_counters(
    elf_data: &[u8],
    counters: &[&CounterPath],
) -> Result<Vec<Result<CounterLayout, CounterError>>, CounterError> {
    resolve_counters_walking(elf_data, counters, |_| {})
}

/// As [`resolve_counters`] on an image's DWARF, releasing the pages the
/// walk has read as it goes (without it the walk kept ~40 MiB of MariaDB
/// 10.2.11's `.debug_info` resident: innoprof's peak RSS 95 MiB, not 55).
pub fn resolve_counters_in(
    image: &crate::resolve::ElfImage,
    counters: &[&CounterPath],
) -> Result<Vec<Result<CounterLayout, CounterError>>, CounterError> {
    let mut trim = crate::resolve::dwarf::Trim::new(image);
    resolve_counters_walking(image.dwarf_data(), counters, |h| trim.at(h))
}

fn resolve_counters_walking(
    elf_data: &[u8],
    counters: &[&CounterPath],
    mut at_unit: impl FnMut(&gimli::UnitHeader<crate::resolve::dwarf::Reader<'_>>),
) -> Result<Vec<Result<CounterLayout, CounterError>>, CounterError> {
    let file = object::File::parse(elf_data)?;
    let symbol_address = |global: &str| {
        file.symbols()
            .chain(file.dynamic_symbols())
            .find(|s| {
                s.kind() == object::SymbolKind::Data && !s.is_undefined() && s.name() == Ok(global)
            })
            .map(|s| s.address())
    };
    let wanted: Vec<Wanted> = counters
        .iter()
        .map(|c| Wanted {
            global: &c.global,
            symbol_address: symbol_address(&c.global),
        })
        .collect();
    let dwarf = crate::resolve::dwarf::load(elf_data)?.ok_or(CounterError::NoDebugInfo)?;
    let mut results: Vec<Option<Result<CounterLayout, CounterError>>> =
        counters.iter().map(|_| None).collect();
    // Units that define the wanted globals, from `.debug_pubnames` when the
    // binary has one (MySQL 5.6 and MariaDB 10.2 do): walked first, so the
    // walk usually ends there instead of after most of `.debug_info`
    // (~55 ms of CPU on MariaDB 10.2.11). The index is only a hint: every
    // unit is still walked in order until all are found.
    let hinted = pubname_units(&file, elf_data, &wanted);
    let mut visited = std::collections::HashSet::new();
    let mut in_order = dwarf.units();
    let mut hints = hinted.into_iter();
    loop {
        if results.iter().all(Option::is_some) {
            break;
        }
        let header = match hints.next() {
            Some(offset) => match dwarf.debug_info.header_from_offset(offset) {
                Ok(h) => h,
                Err(_) => continue,
            },
            None => match in_order.next()? {
                Some(h) => h,
                None => break,
            },
        };
        if !visited.insert(header.offset().0) {
            continue;
        }
        at_unit(&header);
        let unit = dwarf.unit(header)?;
        let mut tree = unit.entries_tree(None)?;
        let root = tree.root()?;
        let mut found = Vec::new();
        find_definitions(&dwarf, &unit, root, &wanted, &mut found, 0)?;
        for (i, definition) in found {
            if results[i].is_some() {
                continue;
            }
            results[i] = Some(definition.and_then(|(address, ty)| {
                let counter = counters[i];
                let mut first_error = None;
                for members in counter.alternatives() {
                    match walk(&dwarf, &unit, address, ty, &counter.global, &members) {
                        Ok(layout) => return Ok(layout),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                Err(first_error.expect("a path has at least one alternative"))
            }));
        }
    }
    Ok(results
        .into_iter()
        .zip(counters)
        .map(|(r, c)| r.unwrap_or_else(|| Err(CounterError::NoSuchGlobal(c.global.clone()))))
        .collect())
}

/// The units `.debug_pubnames` says define the wanted globals, in the
/// order of `wanted`; none without the section, when its header cannot be
/// believed ([`crate::resolve::section::section_bytes`]) or it does not parse.
fn pubname_units(
    file: &object::File<'_>,
    elf_data: &[u8],
    wanted: &[Wanted],
) -> Vec<gimli::DebugInfoOffset> {
    let cap = crate::resolve::section::MAX_SECTION;
    let Ok(data) = crate::resolve::section::section_bytes(file, elf_data, ".debug_pubnames", cap)
    else {
        return Vec::new();
    };
    let pubnames = gimli::DebugPubNames::new(data, crate::resolve::dwarf::endian(file));
    let mut units = vec![None; wanted.len()];
    let mut items = pubnames.items();
    while let Ok(Some(item)) = items.next() {
        let name = item.name().slice();
        for (i, w) in wanted.iter().enumerate() {
            if units[i].is_none() && name == w.global.as_bytes() {
                units[i] = Some(item.unit_header_offset());
            }
        }
        if units.iter().all(Option::is_some) {
            break;
        }
    }
    units.into_iter().flatten().collect()
}

/// A global's link-time address and type DIE, or why not.
type Definition = Result<(u64, UnitOffset), CounterError>;

/// The wanted globals' definitions among a unit's (or namespace's)
/// children: a `DW_TAG_variable` whose location is `DW_OP_addr` of the
/// symbol's address (or, without a symbol, whose name is the global's).
/// Its type, from the declaration it completes when it has none of its own.
fn find_definitions(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    node: gimli::EntriesTreeNode<'_, '_, Reader<'_>>,
    wanted: &[Wanted],
    found: &mut Vec<(usize, Definition)>,
    depth: u8,
) -> Result<(), CounterError> {
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        match e.tag() {
            gimli::DW_TAG_namespace if depth < MAX_NAMESPACE_DEPTH => {
                find_definitions(dwarf, unit, child, wanted, found, depth + 1)?;
            }
            gimli::DW_TAG_variable => {
                let Some(address) = location_address(unit, e.attr_value(gimli::DW_AT_location))
                else {
                    continue;
                };
                let spec = match e.attr_value(gimli::DW_AT_specification) {
                    Some(AttributeValue::UnitRef(o)) => Some(unit.entry(o)?),
                    _ => None,
                };
                let name_of = |d: &gimli::DebuggingInformationEntry<Reader<'_>>| {
                    d.attr_value(gimli::DW_AT_name)
                        .and_then(|v| dwarf.attr_string(unit, v).ok())
                        .map(|n| n.slice().to_vec())
                };
                let name = name_of(e).or_else(|| spec.as_ref().and_then(name_of));
                for (i, w) in wanted.iter().enumerate() {
                    let matches = match w.symbol_address {
                        Some(a) => a == address,
                        None => name.as_deref() == Some(w.global.as_bytes()),
                    };
                    if !matches {
                        continue;
                    }
                    let ty = match e.attr_value(gimli::DW_AT_type) {
                        Some(AttributeValue::UnitRef(t)) => Some(t),
                        _ => spec
                            .as_ref()
                            .and_then(|s| match s.attr_value(gimli::DW_AT_type) {
                                Some(AttributeValue::UnitRef(t)) => Some(t),
                                _ => None,
                            }),
                    };
                    found.push((
                        i,
                        ty.map(|t| (address, t)).ok_or(CounterError::Unsupported {
                            path: w.global.to_string(),
                            what: "its DWARF type is in another unit".into(),
                        }),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `DW_AT_location` that is exactly `DW_OP_addr A`: a static variable.
fn location_address(unit: &Unit<'_>, value: Option<AttributeValue<Reader<'_>>>) -> Option<u64> {
    let AttributeValue::Exprloc(expr) = value? else {
        return None;
    };
    let mut ops = expr.operations(unit.encoding());
    match (ops.next().ok()?, ops.next().ok()?) {
        // Address 0: a definition the linker discarded (--gc-sections).
        (Some(gimli::Operation::Address { address }), None) if address != 0 => Some(address),
        _ => None,
    }
}

/// What a type is once typedefs, cv-qualifiers and `_Atomic` are peeled.
pub(super) enum Shape {
    Pointer(Option<UnitOffset>),
    Aggregate(UnitOffset),
    Integer {
        size: u64,
        signed: bool,
    },
    /// An array's element type and length (from its one dimension).
    Array {
        element: UnitOffset,
        len: u64,
    },
    Other(String),
}

/// Arrays longer than this are not read as a counter (InnoDB's sharded
/// counters have 64-520 slots): a bound on the bytes read per reading.
const MAX_ARRAY_ELEMENTS: u64 = 4096;

/// The length of a one-dimensional array type, from its subrange's count
/// or upper bound; None for several dimensions or an unknown length.
fn array_len(unit: &Unit<'_>, array: UnitOffset) -> Result<Option<u64>, gimli::Error> {
    let mut tree = unit.entries_tree(Some(array))?;
    let root = tree.root()?;
    let mut children = root.children();
    let mut len = None;
    while let Some(child) = children.next()? {
        let e = child.entry();
        if e.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        if len.is_some() {
            return Ok(None);
        }
        let udata = |a| e.attr_value(a).and_then(|v| v.udata_value());
        len = match (udata(gimli::DW_AT_count), udata(gimli::DW_AT_upper_bound)) {
            (Some(n), _) => Some(n),
            (None, Some(upper)) => upper.checked_add(1),
            (None, None) => return Ok(None),
        };
    }
    Ok(len)
}

pub(super) fn shape(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    ty: UnitOffset,
) -> Result<Shape, CounterError> {
    let mut cur = ty;
    for _ in 0..MAX_HOPS {
        let e = unit.entry(cur)?;
        let next = match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(t)) => Some(t),
            _ => None,
        };
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type => match next {
                Some(t) => cur = t,
                None => return Ok(Shape::Other("an incomplete type".into())),
            },
            gimli::DW_TAG_pointer_type => return Ok(Shape::Pointer(next)),
            gimli::DW_TAG_array_type => {
                return Ok(match (next, array_len(unit, cur)?) {
                    (Some(element), Some(len)) => Shape::Array { element, len },
                    _ => Shape::Other("an array of unknown length".into()),
                })
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                return Ok(Shape::Aggregate(cur))
            }
            gimli::DW_TAG_base_type => {
                let size = e
                    .attr_value(gimli::DW_AT_byte_size)
                    .and_then(|v| v.udata_value())
                    .unwrap_or(0);
                let encoding = match e.attr_value(gimli::DW_AT_encoding) {
                    Some(AttributeValue::Encoding(enc)) => enc,
                    _ => gimli::DwAte(0),
                };
                return Ok(match encoding {
                    gimli::DW_ATE_unsigned | gimli::DW_ATE_unsigned_char => Shape::Integer {
                        size,
                        signed: false,
                    },
                    gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => {
                        Shape::Integer { size, signed: true }
                    }
                    _ => Shape::Other(format!("`{}`", type_name(dwarf, unit, cur))),
                });
            }
            _ => return Ok(Shape::Other(format!("`{}`", type_name(dwarf, unit, cur)))),
        }
    }
    Ok(Shape::Other("a type nested too deep".into()))
}

/// A type's name as written (the outermost typedef's), for messages.
fn type_name(dwarf: &gimli::Dwarf<Reader<'_>>, unit: &Unit<'_>, ty: UnitOffset) -> String {
    let mut cur = ty;
    for _ in 0..MAX_HOPS {
        let Ok(e) = unit.entry(cur) else { break };
        if let Some(name) = e
            .attr_value(gimli::DW_AT_name)
            .and_then(|v| dwarf.attr_string(unit, v).ok())
        {
            let name = String::from_utf8_lossy(name.slice()).into_owned();
            return if e.tag() == gimli::DW_TAG_pointer_type {
                format!("{name}*")
            } else {
                name
            };
        }
        let star = e.tag() == gimli::DW_TAG_pointer_type;
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(t)) if !star => cur = t,
            Some(AttributeValue::UnitRef(t)) => return format!("{}*", type_name(dwarf, unit, t)),
            _ => break,
        }
    }
    "?".into()
}

/// From the global to the integer the path names.
fn walk(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    global_address: u64,
    global_type: UnitOffset,
    global: &str,
    path: &[&str],
) -> Result<CounterLayout, CounterError> {
    let mut steps = Vec::new();
    let mut ty = global_type;
    let mut so_far = global.to_string();
    for &member in path {
        let mut aggregate = None;
        for _ in 0..MAX_HOPS {
            match shape(dwarf, unit, ty)? {
                Shape::Pointer(Some(pointee)) => {
                    steps.push(Step::Deref);
                    ty = pointee;
                }
                Shape::Aggregate(a) => {
                    aggregate = Some(a);
                    break;
                }
                Shape::Pointer(None) => {
                    return Err(CounterError::NoSuchMember {
                        ty: "void*".into(),
                        member: member.into(),
                    })
                }
                Shape::Integer { .. } | Shape::Array { .. } | Shape::Other(_) => {
                    return Err(CounterError::NoSuchMember {
                        ty: type_name(dwarf, unit, ty),
                        member: member.into(),
                    })
                }
            }
        }
        let aggregate = aggregate.ok_or_else(|| CounterError::Unsupported {
            path: so_far.clone(),
            what: "too many pointer levels".into(),
        })?;
        let Some((offset, member_ty)) = find_member(dwarf, unit, aggregate, member, 0)? else {
            return Err(CounterError::NoSuchMember {
                ty: type_name(dwarf, unit, aggregate),
                member: member.into(),
            });
        };
        steps.push(Step::Offset(u64::from(offset)));
        ty = member_ty;
        so_far = format!("{so_far}.{member}");
    }
    // The integer, through wrappers of exactly one member or base.
    let type_name_shown = type_name(dwarf, unit, ty);
    for _ in 0..MAX_HOPS {
        match shape(dwarf, unit, ty)? {
            Shape::Integer { size, signed } if matches!(size, 1 | 2 | 4 | 8) => {
                return Ok(CounterLayout {
                    global_address,
                    steps: merge_offsets(steps),
                    size: size as u8,
                    signed,
                    type_name: type_name_shown,
                    elements: 1,
                });
            }
            // A sharded counter: its slots summed. Unsigned only: a slot
            // may go below zero where a thread subtracts what another added.
            Shape::Array { element, len } => {
                return match shape(dwarf, unit, element)? {
                    Shape::Integer {
                        size,
                        signed: false,
                    } if matches!(size, 1 | 2 | 4 | 8)
                        && (1..=MAX_ARRAY_ELEMENTS).contains(&len) =>
                    {
                        Ok(CounterLayout {
                            global_address,
                            steps: merge_offsets(steps),
                            size: size as u8,
                            signed: false,
                            type_name: type_name_shown,
                            elements: len as u32,
                        })
                    }
                    _ => Err(CounterError::NotAnInteger {
                        path: so_far,
                        what: format!(
                            "an array of {len} `{}` (only arrays of at most \
                             {MAX_ARRAY_ELEMENTS} unsigned integers are summed)",
                            type_name(dwarf, unit, element)
                        ),
                    }),
                };
            }
            Shape::Aggregate(a) => {
                let fields = members(dwarf, unit, a, 0)?;
                match fields.as_slice() {
                    [only] if only.place.bit_size.is_none() => {
                        steps.push(Step::Offset(u64::from(only.place.offset)));
                        ty = only.ty;
                    }
                    _ => {
                        return Err(CounterError::NotAnInteger {
                            path: so_far,
                            what: format!(
                                "`{}` ({} members)",
                                type_name(dwarf, unit, a),
                                fields.len()
                            ),
                        })
                    }
                }
            }
            Shape::Integer { size, .. } => {
                return Err(CounterError::NotAnInteger {
                    path: so_far,
                    what: format!("a {size}-byte integer"),
                })
            }
            Shape::Pointer(_) => {
                return Err(CounterError::NotAnInteger {
                    path: so_far,
                    what: "a pointer".into(),
                })
            }
            Shape::Other(what) => return Err(CounterError::NotAnInteger { path: so_far, what }),
        }
    }
    Err(CounterError::Unsupported {
        path: so_far,
        what: "wrappers nested too deep".into(),
    })
}

/// A named member of a struct: its own first, then in its base classes and
/// anonymous structs/unions (whose members C++ names as the outer's).
/// Offset from the struct's start, and the member's type.
pub(super) fn find_member(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    aggregate: UnitOffset,
    name: &str,
    depth: u8,
) -> Result<Option<(u32, UnitOffset)>, CounterError> {
    if depth > MAX_HOPS {
        return Ok(None);
    }
    let fields = members(dwarf, unit, aggregate, 0)?;
    if let Some(m) = fields.iter().find(|m| m.name.as_deref() == Some(name)) {
        if m.place.bit_size.is_some() {
            return Err(CounterError::Unsupported {
                path: name.into(),
                what: "a bitfield".into(),
            });
        }
        return Ok(Some((m.place.offset, m.ty)));
    }
    for m in fields.iter().filter(|m| m.is_base || m.name.is_none()) {
        if let Shape::Aggregate(inner) = shape(dwarf, unit, m.ty)? {
            if let Some((o, t)) = find_member(dwarf, unit, inner, name, depth + 1)? {
                return Ok(Some((m.place.offset + o, t)));
            }
        }
    }
    Ok(None)
}

/// Adjacent offsets added together: `+0x18 +0 +0` is `+0x18`.
fn merge_offsets(steps: Vec<Step>) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::with_capacity(steps.len());
    for s in steps {
        match (out.last_mut(), s) {
            (Some(Step::Offset(a)), Step::Offset(b)) => *a += b,
            _ => out.push(s),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_merge_across_wrappers_but_not_across_pointer_reads() {
        use Step::*;
        assert_eq!(
            merge_offsets(vec![
                Deref,
                Offset(0x48),
                Offset(0),
                Offset(8),
                Deref,
                Offset(0)
            ]),
            vec![Deref, Offset(0x50), Deref, Offset(0)]
        );
        let layout = CounterLayout {
            global_address: 0x1000,
            steps: vec![Deref, Offset(0x48)],
            size: 8,
            signed: false,
            type_name: "row_id_t".into(),
            elements: 1,
        };
        assert_eq!(
            layout.describe("dict_sys"),
            "dict_sys -> +0x48 (8 bytes, row_id_t)"
        );
        let sharded = CounterLayout {
            steps: vec![Offset(0xdac0)],
            elements: 520,
            type_name: "unsigned long[520]".into(),
            ..layout
        };
        assert_eq!(
            sharded.describe("srv_stats"),
            "srv_stats +0xdac0 (sum of 520 x 8 bytes, unsigned long[520])"
        );
    }
}
