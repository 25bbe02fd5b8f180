//! The DWARF sections of an ELF file, as gimli reads them.

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection};

pub type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The file's DWARF, or None when it has no `.debug_info`. Missing
/// sections read as empty, as gimli expects.
pub fn load(elf_data: &[u8]) -> Result<Option<gimli::Dwarf<Reader<'_>>>, object::Error> {
    let file = object::File::parse(elf_data)?;
    if file.section_by_name(".debug_info").is_none() {
        return Ok(None);
    }
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'_>, std::convert::Infallible> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(EndianSlice::new(data, endian))
    });
    Ok(Some(dwarf.unwrap_or_else(|never| match never {})))
}
