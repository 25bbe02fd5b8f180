//! The DWARF sections of an ELF file, as gimli reads them.

use gimli::{EndianSlice, RunTimeEndian};
use object::{Object, ObjectSection};

use super::mapped::TRIM_EVERY;
use super::ElfImage;

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
    Ok(Some(sections(&file)))
}

/// The DWARF sections of a parsed file (missing ones empty, as gimli
/// expects), read in place.
pub fn sections<'a>(file: &object::File<'a>) -> gimli::Dwarf<Reader<'a>> {
    let endian = endian(file);
    let dwarf = gimli::Dwarf::load(|id| -> Result<Reader<'a>, std::convert::Infallible> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(EndianSlice::new(data, endian))
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
