//! Naming the latch a function is called on, from DWARF: InnoDB's mutex
//! wrappers (`PolicyMutex<…>::enter(this, …)`) keep a `latch_id_t` enum
//! inside the object, at an offset that differs per template
//! instantiation (32 in `PolicyMutex<TTASEventMutex<GenericPolicy>>`, 24
//! in the `BlockMutexPolicy` one, in MariaDB 10.2.11). The offset comes
//! from the type of the probed function's object parameter; the names
//! come from the enum's enumerators (`LATCH_ID_DICT_SYS` → `dict_sys`).

use std::collections::{BTreeMap, HashMap, HashSet};

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSection};

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;
type Unit<'a> = gimli::Unit<Reader<'a>>;

/// Nesting bound when searching members (the id sits two levels down).
const MAX_MEMBER_DEPTH: u8 = 6;
/// Bound on typedef/cv/pointer hops and origin/specification hops.
const MAX_HOPS: u8 = 8;

#[derive(Debug, thiserror::Error)]
pub enum LatchError {
    #[error("the binary has no DWARF debug info (.debug_info); latch names need it")]
    NoDebugInfo,
    #[error("reading DWARF: {0}")]
    Dwarf(#[from] gimli::Error),
    #[error("parsing the ELF file: {0}")]
    Object(#[from] object::Error),
}

/// Where the latch id sits in the object an argument points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatchField {
    pub offset: u32,
    /// Bytes: 1, 2, 4 or 8.
    pub size: u8,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LatchLayout {
    /// Per function entry address found in DWARF.
    pub fields: HashMap<u64, LatchField>,
    /// Enumerator value → name, as the enum spells it.
    pub names: BTreeMap<u64, String>,
}

impl LatchLayout {
    /// The display name of a latch id read from the target.
    pub fn name_of(&self, id: u64, spec: &crate::catalog::LatchSpec) -> String {
        match self.names.get(&id) {
            Some(e) => display_name(e, &spec.strip_prefix, &spec.suffix),
            None => format!("latch#{id}"),
        }
    }
}

/// For each function at `addresses`, the offset of the `id_type` member
/// inside the object its `arg`-th (1-based, `this` included) parameter
/// points to, and the enum's enumerator names. Functions without DWARF or
/// without such a member are simply absent from `fields`.
pub fn find_latch_layout(
    elf_data: &[u8],
    addresses: &[u64],
    arg: u8,
    id_type: &str,
) -> Result<LatchLayout, LatchError> {
    let file = object::File::parse(elf_data)?;
    if file.section_by_name(".debug_info").is_none() {
        return Err(LatchError::NoDebugInfo);
    }
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'_>, gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(EndianSlice::new(data, endian))
    })?;

    let wanted: HashSet<u64> = addresses.iter().copied().collect();
    let mut layout = LatchLayout::default();
    let units = units_covering(&dwarf, &wanted)?;
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        if let Some(units) = &units {
            let Some(off) = header.offset().to_debug_info_offset(&header) else {
                continue;
            };
            if !units.contains(&off.0) {
                continue;
            }
        }
        let unit = dwarf.unit(header)?;
        let mut cursor = unit.entries();
        while let Some(entry) = cursor.next_dfs()? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Some(AttributeValue::Addr(low_pc)) = entry.attr_value(gimli::DW_AT_low_pc) else {
                continue;
            };
            if !wanted.contains(&low_pc) || layout.fields.contains_key(&low_pc) {
                continue;
            }
            let Some(param_type) = nth_param_type(&unit, entry.offset(), arg, 0)? else {
                continue;
            };
            let Some(object) = pointee_struct(&unit, param_type)? else {
                continue;
            };
            if let Some((field, enum_die)) = find_member(&dwarf, &unit, object, id_type, 0, 0)? {
                layout.fields.insert(low_pc, field);
                if layout.names.is_empty() {
                    layout.names = enumerators(&dwarf, &unit, enum_die)?;
                }
            }
        }
    }
    Ok(layout)
}

/// Offsets of the units whose address ranges hold a wanted address, from
/// `.debug_aranges`; None when the binary has none (then every unit is read).
fn units_covering(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    wanted: &HashSet<u64>,
) -> Result<Option<HashSet<usize>>, gimli::Error> {
    let mut found = HashSet::new();
    let mut any = false;
    let mut headers = dwarf.debug_aranges.headers();
    while let Some(header) = headers.next()? {
        any = true;
        let mut entries = header.entries();
        while let Some(e) = entries.next()? {
            let r = e.range();
            if wanted.iter().any(|a| (r.begin..r.end).contains(a)) {
                found.insert(header.debug_info_offset().0);
            }
        }
    }
    Ok(any.then_some(found))
}

/// The type of a subprogram's `arg`-th formal parameter, following the
/// concrete → abstract origin → declaration chain until one has types.
fn nth_param_type(
    unit: &Unit<'_>,
    die: UnitOffset,
    arg: u8,
    hops: u8,
) -> Result<Option<UnitOffset>, gimli::Error> {
    if hops > MAX_HOPS {
        return Ok(None);
    }
    let mut tree = unit.entries_tree(Some(die))?;
    let root = tree.root()?;
    let origin = [gimli::DW_AT_abstract_origin, gimli::DW_AT_specification]
        .into_iter()
        .find_map(|a| match root.entry().attr_value(a) {
            Some(AttributeValue::UnitRef(o)) => Some(o),
            _ => None,
        });
    let mut children = root.children();
    let mut n = 0;
    while let Some(child) = children.next()? {
        let e = child.entry();
        if e.tag() != gimli::DW_TAG_formal_parameter {
            continue;
        }
        n += 1;
        if n != arg {
            continue;
        }
        if let Some(AttributeValue::UnitRef(t)) = e.attr_value(gimli::DW_AT_type) {
            return Ok(Some(t));
        }
        // A concrete parameter names its abstract twin, which has the type.
        if let Some(AttributeValue::UnitRef(o)) = e.attr_value(gimli::DW_AT_abstract_origin) {
            if let Some(AttributeValue::UnitRef(t)) = unit.entry(o)?.attr_value(gimli::DW_AT_type) {
                return Ok(Some(t));
            }
        }
        break;
    }
    match origin {
        Some(o) => nth_param_type(unit, o, arg, hops + 1),
        None => Ok(None),
    }
}

/// Strip one pointer (or reference) plus any const/volatile/typedef layers
/// around it, down to the struct or class it points to.
fn pointee_struct(unit: &Unit<'_>, ty: UnitOffset) -> Result<Option<UnitOffset>, gimli::Error> {
    let mut cur = ty;
    let mut through_pointer = false;
    for _ in 0..MAX_HOPS {
        let e = unit.entry(cur)?;
        match e.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => {
                return Ok(through_pointer.then_some(cur));
            }
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type if !through_pointer => {
                through_pointer = true;
            }
            gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_typedef => {}
            _ => return Ok(None),
        }
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(next)) => cur = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// Depth-first search of a struct's members (and base classes) for one
/// whose type is named `id_type`; its byte offset from the struct's start
/// and the enumeration DIE behind the name.
fn find_member(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    object: UnitOffset,
    id_type: &str,
    base: u32,
    depth: u8,
) -> Result<Option<(LatchField, UnitOffset)>, gimli::Error> {
    if depth > MAX_MEMBER_DEPTH {
        return Ok(None);
    }
    let mut tree = unit.entries_tree(Some(object))?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        if !matches!(e.tag(), gimli::DW_TAG_member | gimli::DW_TAG_inheritance) {
            continue;
        }
        let Some(AttributeValue::UnitRef(ty)) = e.attr_value(gimli::DW_AT_type) else {
            continue;
        };
        let Some(offset) = member_offset(unit, e.attr_value(gimli::DW_AT_data_member_location))
        else {
            continue;
        };
        let offset = base + offset;
        if let Some((enum_die, size)) = named_enum(dwarf, unit, ty, id_type)? {
            if matches!(size, 1 | 2 | 4 | 8) {
                return Ok(Some((
                    LatchField {
                        offset,
                        size: size as u8,
                    },
                    enum_die,
                )));
            }
        }
        if let Some(inner) = struct_type(unit, ty)? {
            if let Some(found) = find_member(dwarf, unit, inner, id_type, offset, depth + 1)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// DW_AT_data_member_location: a constant (DWARF 3+) or, from older
/// compilers such as the GCC 4.1 that built MariaDB 10.2.11, an expression
/// `DW_OP_plus_uconst N`.
fn member_offset(unit: &Unit<'_>, value: Option<AttributeValue<Reader<'_>>>) -> Option<u32> {
    let expr = match value? {
        AttributeValue::Exprloc(e) => e,
        AttributeValue::Block(b) => gimli::Expression(b),
        v => return v.udata_value().and_then(|v| u32::try_from(v).ok()),
    };
    let mut ops = expr.operations(unit.encoding());
    match ops.next().ok()? {
        Some(gimli::Operation::PlusConstant { value }) => u32::try_from(value).ok(),
        _ => None,
    }
}

/// If `ty`, through typedefs and cv-qualifiers, is named `id_type` and is
/// an enumeration: its DIE and byte size.
fn named_enum(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    ty: UnitOffset,
    id_type: &str,
) -> Result<Option<(UnitOffset, u64)>, gimli::Error> {
    let mut cur = ty;
    let mut named = false;
    for _ in 0..MAX_HOPS {
        let e = unit.entry(cur)?;
        if let Some(v) = e.attr_value(gimli::DW_AT_name) {
            if dwarf.attr_string(unit, v)?.slice() == id_type.as_bytes() {
                named = true;
            }
        }
        match e.tag() {
            gimli::DW_TAG_enumeration_type => {
                let size = e
                    .attr_value(gimli::DW_AT_byte_size)
                    .and_then(|v| v.udata_value())
                    .unwrap_or(0);
                return Ok(named.then_some((cur, size)));
            }
            gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {}
            _ => return Ok(None),
        }
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(next)) => cur = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// The struct or class `ty` names, through typedefs and cv-qualifiers.
fn struct_type(unit: &Unit<'_>, ty: UnitOffset) -> Result<Option<UnitOffset>, gimli::Error> {
    let mut cur = ty;
    for _ in 0..MAX_HOPS {
        let e = unit.entry(cur)?;
        match e.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => return Ok(Some(cur)),
            gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {}
            _ => return Ok(None),
        }
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(next)) => cur = next,
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn enumerators(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    enum_die: UnitOffset,
) -> Result<BTreeMap<u64, String>, gimli::Error> {
    let mut names = BTreeMap::new();
    let mut tree = unit.entries_tree(Some(enum_die))?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        if e.tag() != gimli::DW_TAG_enumerator {
            continue;
        }
        let (Some(name), Some(value)) = (
            e.attr_value(gimli::DW_AT_name),
            e.attr_value(gimli::DW_AT_const_value),
        ) else {
            continue;
        };
        let value = match value {
            AttributeValue::Sdata(v) => v as u64,
            v => match v.udata_value() {
                Some(v) => v,
                None => continue,
            },
        };
        let name = String::from_utf8_lossy(dwarf.attr_string(unit, name)?.slice()).into_owned();
        names.entry(value).or_insert(name);
    }
    Ok(names)
}

/// `LATCH_ID_DICT_SYS` with prefix `LATCH_ID_` and suffix `_mutex` →
/// `dict_sys_mutex`, the name performance_schema gives the same latch.
pub fn display_name(enumerator: &str, strip_prefix: &str, suffix: &str) -> String {
    let base = enumerator
        .strip_prefix(strip_prefix)
        .unwrap_or(enumerator)
        .to_ascii_lowercase();
    // LATCH_ID_BUF_BLOCK_MUTEX is `buf_block_mutex`, not `…_mutex_mutex`.
    if base.ends_with(suffix) {
        base
    } else {
        base + suffix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names() {
        assert_eq!(
            display_name("LATCH_ID_DICT_SYS", "LATCH_ID_", "_mutex"),
            "dict_sys_mutex"
        );
        assert_eq!(display_name("OTHER", "LATCH_ID_", ""), "other");
        assert_eq!(
            display_name("LATCH_ID_BUF_BLOCK_MUTEX", "LATCH_ID_", "_mutex"),
            "buf_block_mutex"
        );
    }
}
