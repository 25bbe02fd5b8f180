//! A section's bytes from a target's file, only where its header is
//! believable.
//!
//! innoprof runs as root and reads files an unprivileged user can write
//! (a copy of the server binary they run, its debug file): every offset and
//! size in them is the attacker's. An `.eh_frame` header edited to point
//! at a 2 GiB sparse hole appended to the file (`truncate -s +2G`, no disk
//! used) made the unwinder copy 2 GiB into memory and hold it until exit.
//! So a section is read here only when it lies inside the file
//! (offset + size <= the file's length), is not larger than a cap the
//! caller picks for what that section really holds, and is not compressed
//! (its declared uncompressed size is the attacker's too). The bytes come
//! from the caller's mapping of the file ([`super::mapped::Mapped`]), so
//! nothing is copied and nothing is allocated by the declared size.

use object::{Object, ObjectSection, ObjectSegment};

/// The largest section read where the caller knows no tighter bound
/// (`.debug_info` is 206 MiB in MariaDB 11.4.5). Sections are mapped and
/// walked in place, so this only stops a header claiming more than any
/// real build carries.
pub const MAX_SECTION: u64 = 1 << 30;

/// Why a section's bytes are not read.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    #[error("no {name} section")]
    Missing { name: String },
    #[error(
        "section {name} runs past the end of the file ({size} bytes at offset {offset:#x}, \
         the file has {file_len})"
    )]
    PastEnd {
        name: String,
        offset: u64,
        size: u64,
        file_len: u64,
    },
    #[error("section {name} is {size} bytes, more than the {cap} such a section is read up to")]
    TooLarge { name: String, size: u64, cap: u64 },
    #[error("section {name} lies outside every loaded segment")]
    OutsideSegments { name: String },
    #[error("section {name} is compressed")]
    Compressed { name: String },
    #[error("cannot read section {name}'s header")]
    Header {
        name: String,
        #[source]
        source: object::Error,
    },
}

/// The bytes of the section called `name` in `file`, parsed from `data`
/// (the whole file, mapped): refused past the end of the file, above
/// `cap` bytes, or compressed. A section with no file data (`SHT_NOBITS`)
/// reads as empty, as `object` gives it.
pub fn section_bytes<'d>(
    file: &object::File<'d>,
    data: &'d [u8],
    name: &str,
    cap: u64,
) -> Result<&'d [u8], SectionError> {
    let section = file
        .section_by_name(name)
        .ok_or_else(|| SectionError::Missing { name: name.into() })?;
    bytes_of(&section, data, cap)
}

/// [`section_bytes`] for a section already found.
pub fn bytes_of<'d>(
    section: &object::Section<'d, '_>,
    data: &'d [u8],
    cap: u64,
) -> Result<&'d [u8], SectionError> {
    let name = section.name().unwrap_or("(unnamed)");
    let compressed = section
        .compressed_file_range()
        .map_err(|source| SectionError::Header {
            name: name.into(),
            source,
        })?;
    if compressed.format != object::CompressionFormat::None || name.starts_with(".zdebug") {
        return Err(SectionError::Compressed { name: name.into() });
    }
    let Some((offset, size)) = section.file_range() else {
        return Ok(&[]);
    };
    let range = checked_range(name, offset, size, data.len() as u64, cap)?;
    Ok(&data[range])
}

/// `offset..offset + size` as an index into a file of `file_len` bytes,
/// if it lies inside it and `size <= cap`.
pub fn checked_range(
    name: &str,
    offset: u64,
    size: u64,
    file_len: u64,
    cap: u64,
) -> Result<std::ops::Range<usize>, SectionError> {
    let past_end = || SectionError::PastEnd {
        name: name.into(),
        offset,
        size,
        file_len,
    };
    let end = offset.checked_add(size).ok_or_else(past_end)?;
    if end > file_len {
        return Err(past_end());
    }
    if size > cap {
        return Err(SectionError::TooLarge {
            name: name.into(),
            size,
            cap,
        });
    }
    // Both fit in the file's length, which is a usize (it is mapped).
    Ok(offset as usize..end as usize)
}

/// Whether the section called `name` lies wholly inside the file range of
/// one loadable segment: what the process maps, and so what the runtime
/// itself would read (an unwind table outside every `PT_LOAD` is no
/// table the program uses).
pub fn inside_loaded_segment(file: &object::File<'_>, name: &str) -> Result<(), SectionError> {
    let section = file
        .section_by_name(name)
        .ok_or_else(|| SectionError::Missing { name: name.into() })?;
    let outside = || SectionError::OutsideSegments { name: name.into() };
    let (offset, size) = section.file_range().ok_or_else(outside)?;
    let end = offset.checked_add(size).ok_or_else(outside)?;
    // object lists only PT_LOAD entries as an ELF file's segments.
    file.segments()
        .map(|s| s.file_range())
        .any(|(start, len)| offset >= start && start.checked_add(len).is_some_and(|e| end <= e))
        .then_some(())
        .ok_or_else(outside)
}

/// The names of the sections flagged `SHF_COMPRESSED`: what a reader that
/// inflates sections whole (blazesym) would inflate, to whatever size
/// their data inflates to (zlib's ratio reaches ~1000:1, so a few MiB of
/// a file become GiBs), whatever size their header declares.
pub fn compressed_sections(file: &object::File<'_>) -> Vec<String> {
    let flag = u64::from(object::elf::SHF_COMPRESSED);
    file.sections()
        .filter(
            |s| matches!(s.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & flag != 0),
        )
        .map(|s| s.name().unwrap_or("(unnamed)").to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::write::{Object as Writer, StandardSection};
    use object::{Architecture, BinaryFormat, Endianness};

    /// A relocatable ELF with a 64-byte `.eh_frame` and a 32-byte
    /// `.debug_frame` (room for a compression header).
    fn synthetic() -> Vec<u8> {
        let mut w = Writer::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
        let eh = w.add_section(
            Vec::new(),
            b".eh_frame".to_vec(),
            object::SectionKind::ReadOnlyData,
        );
        w.append_section_data(eh, &[7; 64], 8);
        let df = w.add_section(
            Vec::new(),
            b".debug_frame".to_vec(),
            object::SectionKind::Debug,
        );
        w.append_section_data(df, &[9; 32], 8);
        let text = w.section_id(StandardSection::Text);
        w.append_section_data(text, &[0xc3], 1);
        w.write().unwrap()
    }

    /// The 64-bit section header of `name`: its index in the table and
    /// the byte offset of that header in the file.
    fn header_at(data: &[u8], name: &str) -> usize {
        let file = object::File::parse(data).unwrap();
        let index = file.section_by_name(name).unwrap().index().0;
        let shoff = u64::from_le_bytes(data[0x28..0x30].try_into().unwrap()) as usize;
        shoff + index * 64
    }

    /// Rewrites `name`'s sh_offset and sh_size, as the attack does.
    fn point(data: &mut [u8], name: &str, offset: u64, size: u64) {
        let at = header_at(data, name);
        data[at + 0x18..at + 0x20].copy_from_slice(&offset.to_le_bytes());
        data[at + 0x20..at + 0x28].copy_from_slice(&size.to_le_bytes());
    }

    #[test]
    fn a_section_inside_the_file_is_read_in_place() {
        let data = synthetic();
        let file = object::File::parse(&*data).unwrap();
        let bytes = section_bytes(&file, &data, ".eh_frame", 1 << 20).unwrap();
        assert_eq!(bytes, &[7; 64]);
        // In place: a slice of the caller's data, not a copy.
        let base = data.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        assert!(at >= base && at + 64 <= base + data.len());
        assert_eq!(
            section_bytes(&file, &data, ".debug_frame", 32).unwrap(),
            &[9; 32]
        );
    }

    #[test]
    fn a_section_past_the_end_of_the_file_is_refused() {
        let mut data = synthetic();
        let len = data.len() as u64;
        // Runs 2 GiB past the end, and wraps around u64.
        for (offset, size) in [(len - 8, 2 << 30), (16, u64::MAX - 8), (len + 1, 0)] {
            point(&mut data, ".eh_frame", offset, size);
            let file = object::File::parse(&*data).unwrap();
            let err = section_bytes(&file, &data, ".eh_frame", u64::MAX).unwrap_err();
            assert!(matches!(err, SectionError::PastEnd { .. }), "{err:?}");
            assert!(
                err.to_string().contains("runs past the end of the file"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_section_larger_than_the_cap_is_refused() {
        let data = synthetic();
        let file = object::File::parse(&*data).unwrap();
        let err = section_bytes(&file, &data, ".eh_frame", 63).unwrap_err();
        assert!(
            matches!(
                err,
                SectionError::TooLarge {
                    size: 64,
                    cap: 63,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(section_bytes(&file, &data, ".eh_frame", 64).is_ok());
    }

    #[test]
    fn a_missing_section_says_so() {
        let data = synthetic();
        let file = object::File::parse(&*data).unwrap();
        let err = section_bytes(&file, &data, ".gnu_debugdata", 1).unwrap_err();
        assert_eq!(err.to_string(), "no .gnu_debugdata section");
    }

    /// A compressed section's declared uncompressed size is the file's
    /// word: nothing is inflated, whatever it says.
    #[test]
    fn a_compressed_section_is_refused() {
        let mut data = synthetic();
        let at = header_at(&data, ".debug_frame");
        let flags = u64::from(object::elf::SHF_COMPRESSED);
        data[at + 0x08..at + 0x10].copy_from_slice(&flags.to_le_bytes());
        // Elf64_Chdr: ELFCOMPRESS_ZLIB, reserved, ch_size 8 GiB.
        let offset = u64::from_le_bytes(data[at + 0x18..at + 0x20].try_into().unwrap()) as usize;
        data[offset..offset + 4].copy_from_slice(&1u32.to_le_bytes());
        data[offset + 8..offset + 16].copy_from_slice(&(8u64 << 30).to_le_bytes());
        let file = object::File::parse(&*data).unwrap();
        let err = section_bytes(&file, &data, ".debug_frame", u64::MAX).unwrap_err();
        assert!(matches!(err, SectionError::Compressed { .. }), "{err:?}");
        assert_eq!(compressed_sections(&file), [".debug_frame"]);
    }

    #[test]
    fn checked_range_is_exact_at_the_edges() {
        assert_eq!(checked_range("s", 0, 10, 10, 10).unwrap(), 0..10);
        assert_eq!(checked_range("s", 10, 0, 10, 0).unwrap(), 10..10);
        assert!(checked_range("s", 1, 10, 10, 10).is_err());
        assert!(checked_range("s", 0, 10, 10, 9).is_err());
        assert!(checked_range("s", u64::MAX, 1, u64::MAX, u64::MAX).is_err());
    }

    /// An executable whose `.eh_frame` is in its one `PT_LOAD`, and the
    /// same table pointed past it (still inside the file).
    #[test]
    fn unwind_tables_must_lie_in_a_loaded_segment() {
        let map = super::super::mapped::Mapped::open("/proc/self/exe".as_ref()).unwrap();
        let data = map.bytes();
        let file = object::File::parse(data).unwrap();
        inside_loaded_segment(&file, ".eh_frame").unwrap();

        // This test binary's DWARF is in the file but never loaded.
        let err = inside_loaded_segment(&file, ".debug_info").unwrap_err();
        assert!(
            matches!(err, SectionError::OutsideSegments { .. }),
            "{err:?}"
        );

        let mut moved = data.to_vec();
        let (offset, _) = file
            .section_by_name(".eh_frame")
            .unwrap()
            .file_range()
            .unwrap();
        let end = moved.len() as u64;
        point(&mut moved, ".eh_frame", end - 16, 16);
        let file = object::File::parse(&*moved).unwrap();
        assert!(offset < end - 16);
        assert!(section_bytes(&file, &moved, ".eh_frame", 1 << 30).is_ok());
        assert_eq!(
            inside_loaded_segment(&file, ".eh_frame")
                .unwrap_err()
                .to_string(),
            "section .eh_frame lies outside every loaded segment"
        );
    }
}
