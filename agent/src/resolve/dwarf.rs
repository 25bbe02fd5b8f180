//! The DWARF sections of an ELF file, as gimli reads them.

use gimli::{EndianSlice, RunTimeEndian};
use object::Object;

use super::elf::ElfImage;
use super::mapped::TRIM_EVERY;
use super::section::{section_bytes, MAX_SECTION};

pub type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The byte order gimli reads the file's DWARF sections in.
pub fn endian(file: &object::File<'_>) -> RunTimeEndian {
    if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    }
}

/// The file's DWARF, or None when it has no `.debug_info`. Missing
/// sections read as empty, as gimli expects.
pub fn load(elf_data: &[u8]) -> Result<Option<gimli::Dwarf<Reader<'_>>>, object::Error> {
    let file = object::File::parse(elf_data)?;
    if file.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    Ok(Some(sections(&file, elf_data)))
}

/// The DWARF sections of a file parsed from `data` (the whole file), read
/// in place; missing ones, and ones whose header cannot be believed
/// ([`section_bytes`]: past the file's end, too large, compressed), read
/// as empty, as gimli expects of a missing section.
pub fn sections<'a>(file: &object::File<'a>, data: &'a [u8]) -> gimli::Dwarf<Reader<'a>> {
    let endian = endian(file);
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'a>, std::convert::Infallible> {
        let bytes = section_bytes(file, data, id.name(), MAX_SECTION).unwrap_or(&[]);
        Ok(EndianSlice::new(bytes, endian))
    });
    dwarf.unwrap_or_else(|never| match never {})
}

/// Releases an image's pages as a walk over all units advances, so the
/// walk's resident share is about [`TRIM_EVERY`] bytes of DWARF, not the
/// whole of it (`.debug_info` alone is 58 MiB in MariaDB 10.2.11, 206 MiB
/// in 11.4.5). Pages of other sections read on the way (abbreviations,
/// strings, ranges) are dropped too and read back as needed.
pub struct Trim<'a> {
    image: &'a ElfImage,
    since: usize,
    every: usize,
}

/// For a walk that reads only each unit's header and first entry: it
/// touches a page or two per unit, so releasing often costs little and
/// keeps its resident share near 1 MiB (a 16 MiB step showed as a +4 MiB
/// blip in a long-running `serve`).
pub const TRIM_HEADERS_EVERY: usize = 1 << 20;

impl<'a> Trim<'a> {
    pub fn new(image: &'a ElfImage) -> Self {
        Self::every(image, TRIM_EVERY)
    }

    /// Releasing every `bytes` of `.debug_info` walked.
    pub fn every(image: &'a ElfImage, bytes: usize) -> Self {
        Self {
            image,
            since: 0,
            every: bytes,
        }
    }

    /// The walk has reached this unit (its header's offset in `.debug_info`).
    pub fn at(&mut self, header: &gimli::UnitHeader<Reader<'_>>) {
        let Some(offset) = header.offset().to_debug_info_offset(header) else {
            return;
        };
        if offset.0 >= self.since + self.every {
            self.image.release_pages();
            self.since = offset.0;
        }
    }
}

impl Drop for Trim<'_> {
    /// The walk is over: none of what it read stays resident.
    fn drop(&mut self) {
        self.image.release_pages();
    }
}

/// The `DW_AT_name` of a unit's root entry, read without parsing the
/// unit's abbreviation table or its line program header as
/// `gimli::Dwarf::unit` does: only the root entry's own abbreviation is
/// looked for (usually the table's first) and parsed. Indexing MariaDB
/// 10.2.11's 770 units by name took 22 ms the full way, most of it on
/// tables and file lists the index never reads, and 4-7 ms so (first
/// recordings under sysbench).
///
/// Ok(None): the root entry has no name, or names it in a form that
/// needs the unit's string offsets base (`DW_FORM_strx*`): the caller
/// then reads the unit the full way.
pub fn unit_name<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    header: &gimli::UnitHeader<Reader<'a>>,
) -> gimli::Result<Option<Reader<'a>>> {
    use gimli::{Reader as _, Section as _};
    let mut entries = header.range_from(gimli::UnitOffset(header.header_size())..)?;
    let code = entries.read_uleb128()?;
    if code == 0 {
        return Ok(None);
    }
    let table = *dwarf.debug_abbrev.reader();
    let mut rest = table;
    rest.skip(header.debug_abbrev_offset().0)?;
    // One abbreviation: its bytes, and a terminating 0, parsed by gimli.
    let own = loop {
        let start = rest;
        let this = rest.read_uleb128()?;
        if this == 0 {
            return Err(gimli::Error::InvalidAbbreviationCode(code));
        }
        rest.read_uleb128()?; // tag
        rest.read_u8()?; // children
        loop {
            let (name, form) = (rest.read_uleb128()?, rest.read_uleb128()?);
            if form == u64::from(gimli::DW_FORM_implicit_const.0) {
                rest.read_sleb128()?;
            }
            if (name, form) == (0, 0) {
                break;
            }
        }
        if this == code {
            break &start.slice()[..start.len() - rest.len()];
        }
    };
    let mut bytes = own.to_vec();
    bytes.push(0);
    let abbrevs = gimli::DebugAbbrev::new(&bytes, table.endian())
        .abbreviations(gimli::DebugAbbrevOffset(0))?;
    let mut root = header.entries_raw(&abbrevs, None)?;
    let Some(abbrev) = root.read_abbreviation()? else {
        return Ok(None);
    };
    for spec in abbrev.attributes() {
        let attr = root.read_attribute(*spec)?;
        if attr.name() != gimli::DW_AT_name {
            continue;
        }
        return Ok(match attr.value() {
            gimli::AttributeValue::String(s) => Some(s),
            gimli::AttributeValue::DebugStrRef(o) => Some(dwarf.debug_str.get_str(o)?),
            gimli::AttributeValue::DebugLineStrRef(o) => Some(dwarf.debug_line_str.get_str(o)?),
            _ => None,
        });
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every unit's name read from its root entry alone is the name gimli
    /// reads with the whole unit, in the test binary (Rust and C units)
    /// and in any file named by `INNOPROF_TEST_DWARF_FILES` (`:`-separated:
    /// a server's binary or debug file, checked by hand).
    #[test]
    fn unit_names_read_from_the_root_entry_alone_are_gimlis() {
        let mut files = vec![std::env::current_exe().unwrap()];
        if let Ok(more) = std::env::var("INNOPROF_TEST_DWARF_FILES") {
            files.extend(more.split(':').map(std::path::PathBuf::from));
        }
        for path in files {
            let data = std::fs::read(&path).unwrap();
            let dwarf = load(&data).unwrap().expect("DWARF");
            let (mut units, mut fallback) = (0, 0);
            let mut headers = dwarf.units();
            while let Some(header) = headers.next().unwrap() {
                let quick = unit_name(&dwarf, &header).unwrap();
                let full = dwarf.unit(header).unwrap().name;
                match quick {
                    Some(name) => assert_eq!(Some(name), full, "{path:?}"),
                    None => fallback += 1,
                }
                units += 1;
            }
            assert!(units > 10, "{path:?}: {units} units");
            assert_eq!(
                fallback, 0,
                "{path:?}: every unit named from its root entry"
            );
            eprintln!("{path:?}: {units} units");
        }
    }
}
