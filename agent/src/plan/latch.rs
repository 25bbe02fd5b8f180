//! Naming the latch a function is called on, from DWARF: InnoDB's mutex
//! wrappers (`PolicyMutex<…>::enter(this, …)`) keep a `latch_id_t` enum
//! inside the object, at an offset that differs per template
//! instantiation (32 in `PolicyMutex<TTASEventMutex<GenericPolicy>>`, 24
//! in the `BlockMutexPolicy` one, in MariaDB 10.2.11). The offset comes
//! from the type of the probed function's object parameter; the names
//! come from the enum's enumerators (`LATCH_ID_DICT_SYS` → `dict_sys`).

use std::collections::{BTreeMap, HashMap, HashSet};

use gimli::{AttributeValue, UnitOffset};

use crate::resolve::dwarf::{Reader, Trim};
use crate::resolve::ElfImage;

type Unit<'a> = gimli::Unit<Reader<'a>>;

/// Nesting bound when searching members (the id sits two levels down).
const MAX_MEMBER_DEPTH: u8 = 6;
/// Bound on typedef/cv/pointer hops and origin/specification hops.
const MAX_HOPS: u8 = 8;

#[derive(Debug, thiserror::Error)]
pub enum LatchError {
    #[error("the binary has no DWARF debug info (.debug_info); latch names need it")]
    NoDebugInfo,
    #[error("reading DWARF")]
    Dwarf(#[from] gimli::Error),
    #[error("parsing the ELF file")]
    Object(#[from] object::Error),
}

/// Where the latch id sits in the object an argument points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LatchField {
    pub offset: u32,
    /// Bytes: 1, 2, 4 or 8.
    pub size: u8,
}

/// Where the object keeps its creation site: a `__FILE__` pointer at
/// `file_offset`, and a line of `line_size` bytes at `line_offset`,
/// shifted right by `line_shift` and cut to `line_bits` (0: all) when it
/// is a bitfield (`unsigned cline:13` in `rw_lock_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreatedField {
    pub file_offset: u32,
    pub line_offset: u32,
    pub line_size: u8,
    pub line_shift: u8,
    pub line_bits: u8,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LatchLayout {
    /// Per function entry address found in DWARF.
    pub fields: HashMap<u64, LatchField>,
    /// Enumerator value → name, as the enum spells it.
    pub names: BTreeMap<u64, String>,
    /// Per function entry address: where the creation site is.
    pub created: HashMap<u64, CreatedField>,
    /// Per function entry address: where the exclusive holder is.
    #[serde(default)]
    pub holders: HashMap<u64, HolderField>,
    /// Per function entry address: the offset of the 8-byte member whose
    /// value the release slow path is called on (the catalog's
    /// `woken_key`, e.g. a mutex's `m_event`).
    #[serde(default)]
    pub woken: HashMap<u64, u32>,
    /// Per function entry address: where the exclusive holder's lock site
    /// (`__FILE__` pointer, line) is, next to the holder.
    #[serde(default)]
    pub holder_sites: HashMap<u64, CreatedField>,
}

/// Where an object keeps its exclusive holder's thread pointer (8 bytes
/// at `thread_offset`), valid while the `valid_size`-byte member at
/// `valid_offset` is non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HolderField {
    pub thread_offset: u32,
    pub valid_offset: u32,
    pub valid_size: u8,
    /// Valid while the member is signed and at most 0, not while non-zero.
    #[serde(default)]
    pub valid_nonpositive: bool,
}

impl LatchLayout {
    /// The display name of a latch id read from the target.
    pub fn name_of(&self, id: u64, spec: &crate::plan::catalog::LatchSpec) -> String {
        match self.names.get(&id) {
            Some(e) => display_name(e, &spec.strip_prefix, &spec.suffix),
            None => format!("latch#{id}"),
        }
    }
}

/// For each function at `addresses`, inside the object its `arg`-th
/// (1-based, `this` included) parameter points to: the offset of the
/// `id_type` member and the enum's enumerator names (when `id_type` is not
/// empty), and where the `created` (file, line) members are (when given).
/// Functions without DWARF or without such members are simply absent.
pub fn find_latch_layout(
    image: &ElfImage,
    addresses: &[u64],
    arg: u8,
    id_type: &str,
    created: Option<(&str, &str)>,
    holder: Option<HolderSpec<'_>>,
    woken_key: Option<&str>,
) -> Result<LatchLayout, LatchError> {
    let mut layout = LatchLayout::default();
    // The holder recorded around the object, per the object's type name.
    let around = match &holder {
        Some(h) if !h.in_addresses.is_empty() => Some(holders_around(image, h)?),
        _ => None,
    };
    for_each_param_struct(image, addresses, arg, |dwarf, unit, low_pc, object| {
        if layout.fields.contains_key(&low_pc)
            || layout.created.contains_key(&low_pc)
            || layout.holders.contains_key(&low_pc)
            || layout.woken.contains_key(&low_pc)
        {
            return Ok(true);
        }
        if let Some(around) = &around {
            if let Some(rel) = type_name(dwarf, unit, object)?.and_then(|n| around.get(&n)) {
                layout.holders.insert(
                    low_pc,
                    HolderField {
                        thread_offset: *rel,
                        valid_offset: *rel,
                        valid_size: 8,
                        valid_nonpositive: false,
                    },
                );
            }
        }
        if !id_type.is_empty() {
            if let Some((field, enum_die)) = find_member(dwarf, unit, object, id_type, 0, 0)? {
                layout.fields.insert(low_pc, field);
                if layout.names.is_empty() {
                    layout.names = enumerators(dwarf, unit, enum_die)?;
                }
            }
        }
        let wants = ObjectWants::new(created, holder.as_ref(), woken_key);
        let found = wants.find(&mut |name| named_member(dwarf, unit, object, name, 0, 0))?;
        found.insert_at(&mut layout, low_pc);
        Ok(true)
    })?;
    Ok(layout)
}

/// What a latch spec asks of the object its probe is called on, besides
/// a latch id: its creation site, its exclusive holder (thread, validity
/// member, lock site) and the member its release is called on.
struct ObjectWants<'a> {
    created: Option<(&'a str, &'a str)>,
    holder: Option<HolderMembers<'a>>,
    woken_key: Option<&'a str>,
}

/// The holder's thread member, its validity rule and its lock site members.
type HolderMembers<'a> = (&'a str, &'a str, Option<(&'a str, &'a str)>);

/// Where those are in one object type.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ObjectFields {
    created: Option<CreatedField>,
    holder: Option<HolderField>,
    holder_site: Option<CreatedField>,
    woken: Option<u32>,
}

impl<'a> ObjectWants<'a> {
    /// A holder recorded around the object (`holder_in`) is not the
    /// object's own member: it is found apart.
    fn new(
        created: Option<(&'a str, &'a str)>,
        holder: Option<&HolderSpec<'a>>,
        woken_key: Option<&'a str>,
    ) -> Self {
        Self {
            created,
            holder: holder
                .filter(|h| h.in_addresses.is_empty())
                .map(|h| (h.thread, h.valid, h.site)),
            woken_key,
        }
    }

    /// Looks each wanted member up by name (in DWARF, or in a catalog
    /// layout) and keeps those of a size and kind the probe can read.
    fn find(
        &self,
        member: &mut dyn FnMut(&str) -> Result<Option<MemberPlace>, gimli::Error>,
    ) -> Result<ObjectFields, gimli::Error> {
        let mut found = ObjectFields::default();
        if let Some(key) = self.woken_key {
            if let Some(m) = member(key)? {
                if m.byte_size == 8 && m.bit_size.is_none() {
                    found.woken = Some(m.offset);
                }
            }
        }
        if let Some((thread_member, valid, site)) = self.holder {
            let (valid_member, nonpositive) =
                crate::plan::catalog::LatchSpec::holder_valid_rule(valid);
            let thread = member(thread_member)?;
            let valid = member(valid_member)?;
            if let (Some(t), Some(v)) = (thread, valid) {
                if t.byte_size == 8
                    && t.bit_size.is_none()
                    && v.bit_size.is_none()
                    && matches!(v.byte_size, 1 | 4 | 8)
                {
                    found.holder = Some(HolderField {
                        thread_offset: t.offset,
                        valid_offset: v.offset,
                        valid_size: v.byte_size as u8,
                        valid_nonpositive: nonpositive,
                    });
                    if let Some((file_member, line_member)) = site {
                        let file = member(file_member)?;
                        let line = member(line_member)?;
                        found.holder_site = file.zip(line).and_then(|(f, l)| created_field(f, l));
                    }
                }
            }
        }
        if let Some((file_member, line_member)) = self.created {
            let file = member(file_member)?;
            let line = member(line_member)?;
            found.created = file.zip(line).and_then(|(f, l)| created_field(f, l));
        }
        Ok(found)
    }
}

impl ObjectFields {
    fn insert_at(self, layout: &mut LatchLayout, low_pc: u64) {
        if let Some(w) = self.woken {
            layout.woken.insert(low_pc, w);
        }
        if let Some(h) = self.holder {
            layout.holders.insert(low_pc, h);
        }
        if let Some(s) = self.holder_site {
            layout.holder_sites.insert(low_pc, s);
        }
        if let Some(c) = self.created {
            layout.created.insert(low_pc, c);
        }
    }
}

/// The layout of a build without DWARF, from the catalog's `[[layout]]`
/// of the object the probed functions are called on (read from that
/// build's machine code): the same members at every address. A latch id
/// (an enum's names) and a holder around the object need DWARF.
pub fn fixed_latch_layout(
    addresses: &[u64],
    members: &BTreeMap<String, crate::plan::catalog::MemberOffset>,
    created: Option<(&str, &str)>,
    holder: Option<HolderSpec<'_>>,
    woken_key: Option<&str>,
) -> LatchLayout {
    let wants = ObjectWants::new(created, holder.as_ref(), woken_key);
    let mut lookup = |name: &str| {
        Ok(members.get(name).map(|m| MemberPlace {
            offset: m.offset,
            byte_size: u64::from(m.size),
            bit_size: m.bits.map(u64::from),
            bit_offset: None,
            data_bit_offset: m.bits.map(|_| u64::from(m.shift)),
        }))
    };
    let Ok(found) = wants.find(&mut lookup) else {
        return LatchLayout::default();
    };
    let mut layout = LatchLayout::default();
    for &a in addresses {
        found.insert_at(&mut layout, a);
    }
    layout
}

/// Where a latch records its exclusive holder (the catalog's `holder`,
/// `holder_valid`), and, when the object the probe sees is inside the one
/// that records it, the entry addresses of the outer class's methods
/// (`holder_in`).
#[derive(Debug, Clone, Copy)]
pub struct HolderSpec<'a> {
    pub thread: &'a str,
    pub valid: &'a str,
    pub in_addresses: &'a [u64],
    /// The members holding where the holder took the latch (`__FILE__`
    /// pointer, line), next to `thread`.
    pub site: Option<(&'a str, &'a str)>,
}

/// For each type nested in an outer class (the `this` of the methods at
/// `in_addresses`) before its 8-byte `thread` member: how far past the
/// nested object the member is. A type found at two different distances
/// (in two outer classes) is left out: which one a probe sees is unknown.
fn holders_around(
    image: &ElfImage,
    spec: &HolderSpec<'_>,
) -> Result<HashMap<String, u32>, LatchError> {
    let mut found: HashMap<String, Option<u32>> = HashMap::new();
    let mut seen_outer: HashSet<String> = HashSet::new();
    for_each_param_struct(image, spec.in_addresses, 1, |dwarf, unit, _, outer| {
        let Some(outer_name) = type_name(dwarf, unit, outer)? else {
            return Ok(true);
        };
        if !seen_outer.insert(outer_name) {
            return Ok(true);
        }
        let Some(thread) = named_member(dwarf, unit, outer, spec.thread, 0, 0)? else {
            return Ok(true);
        };
        if thread.byte_size != 8 || thread.bit_size.is_some() {
            return Ok(true);
        }
        let mut nested = Vec::new();
        nested_types(dwarf, unit, outer, 0, 0, &mut nested)?;
        for (name, offset) in nested {
            if offset >= thread.offset {
                continue;
            }
            let rel = thread.offset - offset;
            found
                .entry(name)
                .and_modify(|r| {
                    if *r != Some(rel) {
                        *r = None;
                    }
                })
                .or_insert(Some(rel));
        }
        Ok(true)
    })?;
    Ok(found
        .into_iter()
        .filter_map(|(name, rel)| Some((name, rel?)))
        .collect())
}

/// Every named struct member (at any depth) of `object`: its type's name
/// and offset.
fn nested_types(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    object: UnitOffset,
    base: u32,
    depth: u8,
    out: &mut Vec<(String, u32)>,
) -> Result<(), gimli::Error> {
    if depth > MAX_MEMBER_DEPTH {
        return Ok(());
    }
    for m in members(dwarf, unit, object, base)? {
        if let Some(inner) = struct_type(unit, m.ty)? {
            if let Some(name) = type_name(dwarf, unit, inner)? {
                out.push((name, m.place.offset));
            }
            nested_types(dwarf, unit, inner, m.place.offset, depth + 1, out)?;
        }
    }
    Ok(())
}

/// A DIE's name (`ssux_lock_impl<true>`), if it has one.
fn type_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    die: UnitOffset,
) -> Result<Option<String>, gimli::Error> {
    let e = unit.entry(die)?;
    Ok(match e.attr_value(gimli::DW_AT_name) {
        Some(v) => Some(String::from_utf8_lossy(dwarf.attr_string(unit, v)?.slice()).into_owned()),
        None => None,
    })
}

/// Calls `each` with the struct the `arg`-th (1-based, `this` included)
/// parameter of each function at `addresses` points to, in the unit that
/// defines the function (where the struct is complete). `each` returns
/// whether to go on.
pub(super) fn for_each_param_struct(
    image: &ElfImage,
    addresses: &[u64],
    arg: u8,
    mut each: impl FnMut(
        &gimli::Dwarf<Reader<'_>>,
        &Unit<'_>,
        u64,
        UnitOffset,
    ) -> Result<bool, gimli::Error>,
) -> Result<(), LatchError> {
    let dwarf = crate::resolve::dwarf::load(image.dwarf_data())?.ok_or(LatchError::NoDebugInfo)?;
    // Usually a few units (from `.debug_aranges`); every one without it.
    let mut trim = Trim::new(image);
    let wanted: HashSet<u64> = addresses.iter().copied().collect();
    let units = units_covering(&dwarf, &wanted)?;
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        trim.at(&header);
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
            if !wanted.contains(&low_pc) {
                continue;
            }
            let Some(param_type) = nth_param_type(&unit, entry.offset(), arg, 0)? else {
                continue;
            };
            let Some(object) = pointee_struct(&unit, param_type)? else {
                continue;
            };
            if !each(&dwarf, &unit, low_pc, object)? {
                return Ok(());
            }
        }
    }
    Ok(())
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
    for m in members(dwarf, unit, object, base)? {
        if let Some((enum_die, size)) = named_enum(dwarf, unit, m.ty, id_type)? {
            if matches!(size, 1 | 2 | 4 | 8) {
                return Ok(Some((
                    LatchField {
                        offset: m.place.offset,
                        size: size as u8,
                    },
                    enum_die,
                )));
            }
        }
        if let Some(inner) = struct_type(unit, m.ty)? {
            if let Some(found) =
                find_member(dwarf, unit, inner, id_type, m.place.offset, depth + 1)?
            {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// A member as DWARF places it: byte offset from the outer object's start
/// (`data_member_location`), the size of its storage, and for a bitfield
/// its width and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MemberPlace {
    pub(super) offset: u32,
    pub(super) byte_size: u64,
    pub(super) bit_size: Option<u64>,
    /// DWARF 2/3 `DW_AT_bit_offset`: from the storage unit's most
    /// significant bit.
    bit_offset: Option<u64>,
    /// DWARF 4+ `DW_AT_data_bit_offset`: from the containing object's start.
    data_bit_offset: Option<u64>,
}

/// The (file pointer, line) members turned into what the probe reads.
fn created_field(file: MemberPlace, line: MemberPlace) -> Option<CreatedField> {
    if file.byte_size != 8 || file.bit_size.is_some() {
        return None;
    }
    let (line_offset, line_size, line_shift, line_bits) =
        match (line.bit_size, line.data_bit_offset, line.bit_offset) {
            (None, _, _) => (line.offset, line.byte_size, 0, 0),
            // Little-endian x86-64: bit i of the object is bit i%32 of the
            // 32-bit word at (i/32)*4.
            (Some(bits), Some(data_bit), _) => {
                let abs = u64::from(line.offset) * 8 + data_bit;
                if abs % 32 + bits > 32 {
                    return None;
                }
                (u32::try_from(abs / 32 * 4).ok()?, 4, abs % 32, bits)
            }
            (Some(bits), None, Some(from_msb)) => {
                let storage_bits = line.byte_size * 8;
                let shift = storage_bits.checked_sub(from_msb + bits)?;
                (line.offset, line.byte_size, shift, bits)
            }
            (Some(_), None, None) => return None,
        };
    matches!(line_size, 2 | 4 | 8).then_some(CreatedField {
        file_offset: file.offset,
        line_offset,
        line_size: line_size as u8,
        line_shift: u8::try_from(line_shift).ok()?,
        line_bits: u8::try_from(line_bits).ok()?,
    })
}

/// Search of a struct's members, then its base classes' and nested
/// structs', for the one called `name` (own members first, so a nested
/// struct's namesake never shadows it); where it is, relative to the
/// outer object.
fn named_member(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    object: UnitOffset,
    name: &str,
    base: u32,
    depth: u8,
) -> Result<Option<MemberPlace>, gimli::Error> {
    if depth > MAX_MEMBER_DEPTH {
        return Ok(None);
    }
    let members = members(dwarf, unit, object, base)?;
    if let Some(m) = members.iter().find(|m| m.name.as_deref() == Some(name)) {
        return Ok(Some(m.place));
    }
    for m in &members {
        if let Some(inner) = struct_type(unit, m.ty)? {
            if let Some(found) = named_member(dwarf, unit, inner, name, m.place.offset, depth + 1)?
            {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// A direct member or base class of a struct.
pub(super) struct Member {
    pub(super) name: Option<String>,
    pub(super) ty: UnitOffset,
    pub(super) place: MemberPlace,
    /// DW_TAG_inheritance: a base class's subobject.
    pub(super) is_base: bool,
}

/// A struct's members and base classes, in order, placed relative to the
/// outer object (`base` is where this struct sits in it).
pub(super) fn members(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &Unit<'_>,
    object: UnitOffset,
    base: u32,
) -> Result<Vec<Member>, gimli::Error> {
    let mut out = Vec::new();
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
        let udata = |a| e.attr_value(a).and_then(|v| v.udata_value());
        let data_bit_offset = udata(gimli::DW_AT_data_bit_offset);
        let offset = match member_offset(unit, e.attr_value(gimli::DW_AT_data_member_location)) {
            Some(o) => base + o,
            None if data_bit_offset.is_some() => base,
            None => continue,
        };
        let name = match e.attr_value(gimli::DW_AT_name) {
            Some(v) => {
                Some(String::from_utf8_lossy(dwarf.attr_string(unit, v)?.slice()).into_owned())
            }
            None => None,
        };
        let byte_size = match udata(gimli::DW_AT_byte_size) {
            Some(n) => n,
            None => type_size(unit, ty)?.unwrap_or(0),
        };
        out.push(Member {
            is_base: e.tag() == gimli::DW_TAG_inheritance,
            name,
            ty,
            place: MemberPlace {
                offset,
                byte_size,
                bit_size: udata(gimli::DW_AT_bit_size),
                bit_offset: udata(gimli::DW_AT_bit_offset),
                data_bit_offset,
            },
        });
    }
    Ok(out)
}

/// The byte size of a type, through typedefs and cv-qualifiers (a pointer
/// has one of its own).
fn type_size(unit: &Unit<'_>, ty: UnitOffset) -> Result<Option<u64>, gimli::Error> {
    let mut cur = ty;
    for _ in 0..MAX_HOPS {
        let e = unit.entry(cur)?;
        if let Some(n) = e
            .attr_value(gimli::DW_AT_byte_size)
            .and_then(|v| v.udata_value())
        {
            return Ok(Some(n));
        }
        if e.tag() == gimli::DW_TAG_pointer_type {
            return Ok(Some(u64::from(unit.encoding().address_size)));
        }
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(next)) => cur = next,
            _ => return Ok(None),
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

    fn place(offset: u32, byte_size: u64) -> MemberPlace {
        MemberPlace {
            offset,
            byte_size,
            bit_size: None,
            bit_offset: None,
            data_bit_offset: None,
        }
    }

    /// The layouts of the real servers (llvm-dwarfdump of their mysqld).
    #[test]
    fn creation_site_fields() {
        // MariaDB 10.2.11 rw_lock_t: cfile_name at 0x38; `unsigned cline:13`
        // at 0x50 with DW_AT_bit_offset 19 (from the MSB): the low 13 bits.
        let cline = MemberPlace {
            bit_size: Some(13),
            bit_offset: Some(19),
            ..place(0x50, 4)
        };
        assert_eq!(
            created_field(place(0x38, 8), cline),
            Some(CreatedField {
                file_offset: 0x38,
                line_offset: 0x50,
                line_size: 4,
                line_shift: 0,
                line_bits: 13
            })
        );
        // MySQL 5.6.24 ib_mutex_t: cfile_name at 0x28, `ulint cline` at 0x30.
        assert_eq!(
            created_field(place(0x28, 8), place(0x30, 8)),
            Some(CreatedField {
                file_offset: 0x28,
                line_offset: 0x30,
                line_size: 8,
                line_shift: 0,
                line_bits: 0
            })
        );
        // DWARF 4 spelling of a bitfield 14 bits into the word at 0x70.
        let dwarf4 = MemberPlace {
            bit_size: Some(13),
            data_bit_offset: Some(0x70 * 8 + 14),
            ..place(0, 4)
        };
        let f = created_field(place(0x50, 8), dwarf4).unwrap();
        assert_eq!((f.line_offset, f.line_shift, f.line_bits), (0x70, 14, 13));
        // A "file" that is not a pointer, or a line straddling words: not read.
        assert_eq!(created_field(place(0x50, 4), place(0x30, 8)), None);
        let straddle = MemberPlace {
            bit_size: Some(13),
            data_bit_offset: Some(30),
            ..place(0, 4)
        };
        assert_eq!(created_field(place(0, 8), straddle), None);
    }

    #[test]
    fn a_catalog_layout_gives_every_address_the_same_fields() {
        use crate::plan::catalog::MemberOffset;
        // MySQL 8.0.15's rw_lock_t, read from its code (probes/mysql-8.0.toml).
        let m = |offset, size, bits| MemberOffset {
            offset,
            size,
            bits,
            shift: 0,
        };
        let members: BTreeMap<String, MemberOffset> = [
            ("lock_word", m(0, 8, None)),
            ("writer_thread", m(0x28, 8, None)),
            ("cfile_name", m(0x40, 8, None)),
            ("cline", m(0x58, 4, Some(13))),
            ("last_x_file_name", m(0x50, 8, None)),
            ("last_x_line", m(0x5c, 4, Some(14))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let holder = HolderSpec {
            thread: "writer_thread",
            valid: "lock_word<=0",
            in_addresses: &[],
            site: Some(("last_x_file_name", "last_x_line")),
        };
        let layout = fixed_latch_layout(
            &[0x1000, 0x2000],
            &members,
            Some(("cfile_name", "cline")),
            Some(holder),
            Some("m_event"),
        );
        for a in [0x1000, 0x2000] {
            assert_eq!(
                layout.holders[&a],
                HolderField {
                    thread_offset: 0x28,
                    valid_offset: 0,
                    valid_size: 8,
                    valid_nonpositive: true
                }
            );
            assert_eq!(
                layout.created[&a],
                CreatedField {
                    file_offset: 0x40,
                    line_offset: 0x58,
                    line_size: 4,
                    line_shift: 0,
                    line_bits: 13
                }
            );
            assert_eq!(
                (
                    layout.holder_sites[&a].file_offset,
                    layout.holder_sites[&a].line_offset
                ),
                (0x50, 0x5c)
            );
        }
        // No `m_event` member: no release key; a holder needs both members.
        assert!(layout.woken.is_empty());
        let no_valid = HolderSpec {
            valid: "recursive",
            ..holder
        };
        let layout = fixed_latch_layout(&[0x1000], &members, None, Some(no_valid), None);
        assert!(layout.holders.is_empty() && layout.created.is_empty());
    }

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
