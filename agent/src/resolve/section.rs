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

/// What a file's compressed sections may inflate to, whoever owns the
/// file: a section's header claims its inflated size, and blazesym
/// allocates that claim and then inflates the stream to its end, whatever
/// the claim said. Real DWARF passes with margin: MariaDB 11.4.5's largest
/// section (`.debug_info`) is 206 MiB, all its DWARF ~280–400 MB
/// depending on the build, and zlib or zstd shrink DWARF 3–12x (zlib's
/// ceiling is ~1032:1, which a section of zeros reaches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflateCaps {
    /// One section's inflated size.
    pub section: u64,
    /// All compressed sections' inflated sizes together.
    pub total: u64,
    /// Inflated over compressed size, for a section claiming more than
    /// `ratio_from`.
    pub ratio: u64,
    /// Below this claim the ratio is not asked: a small section's header
    /// and framing outweigh its data (the total still counts it).
    pub ratio_from: u64,
}

/// The caps innoprof applies (docs/RECORDING.md states them).
pub const INFLATE_CAPS: InflateCaps = InflateCaps {
    section: 1 << 30,
    total: 2 << 30,
    ratio: 64,
    ratio_from: 1 << 20,
};

/// What a file's compressed sections claim, checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inflation {
    /// Compressed sections (`SHF_COMPRESSED` or GNU `.zdebug_*`).
    pub sections: usize,
    /// Their claimed inflated sizes, summed.
    pub claimed: u64,
}

/// Why a file's compressed sections are not handed to a reader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    #[error("not an ELF file that parses")]
    Unparsed,
    #[error("section {name}'s compression header cannot be read")]
    Header { name: String },
    #[error("section {name}'s compressed data runs past the end of the file")]
    PastEnd { name: String },
    #[error("section {name} claims {claimed} bytes inflated, more than the {cap} a section may")]
    SectionTooLarge {
        name: String,
        claimed: u64,
        cap: u64,
    },
    #[error(
        "section {name} claims {claimed} bytes inflated from {compressed}, more than {ratio}:1"
    )]
    Ratio {
        name: String,
        claimed: u64,
        compressed: u64,
        ratio: u64,
    },
    #[error(
        "{sections} compressed sections claim {claimed} bytes inflated together, more than {cap}"
    )]
    TotalTooLarge {
        sections: usize,
        claimed: u64,
        cap: u64,
    },
    #[error("section {name} inflates past the {claimed} bytes it claims")]
    InflatesPast { name: String, claimed: u64 },
}

/// Checks every compressed section of the ELF file `data` against
/// `caps` (each claim, its ratio, their total), then inflates each zlib
/// section innoprof's own way (64 KiB at a time, discarded) to check its
/// stream stops at its claim: what then reads the file (blazesym inflates
/// to the stream's end) allocates no more than the claims. zstd sections
/// are checked by their claims only: blazesym here has no zstd and
/// refuses them unread; gimli's readers (`dwarf::sections`) read no
/// compressed section at all. A pure function of the bytes.
pub fn check_inflation(data: &[u8], caps: &InflateCaps) -> Result<Inflation, InflateError> {
    let file = object::File::parse(data).map_err(|_| InflateError::Unparsed)?;
    let mut claims = Vec::new();
    let mut found = Inflation::default();
    for section in file.sections() {
        let name = || section.name().unwrap_or("(unnamed)").to_string();
        let range = section
            .compressed_file_range()
            .map_err(|_| InflateError::Header { name: name() })?;
        if range.format == object::CompressionFormat::None {
            continue;
        }
        let (claimed, compressed) = (range.uncompressed_size, range.compressed_size);
        if claimed > caps.section {
            return Err(InflateError::SectionTooLarge {
                name: name(),
                claimed,
                cap: caps.section,
            });
        }
        if claimed > caps.ratio_from && claimed > compressed.saturating_mul(caps.ratio) {
            return Err(InflateError::Ratio {
                name: name(),
                claimed,
                compressed,
                ratio: caps.ratio,
            });
        }
        found.sections += 1;
        found.claimed = found.claimed.saturating_add(claimed);
        if found.claimed > caps.total {
            return Err(InflateError::TotalTooLarge {
                sections: found.sections,
                claimed: found.claimed,
                cap: caps.total,
            });
        }
        let bytes = checked_range("", range.offset, compressed, data.len() as u64, u64::MAX)
            .map_err(|_| InflateError::PastEnd { name: name() })?;
        // Only the SHF_COMPRESSED zlib sections blazesym inflates; a GNU
        // `.zdebug_*` section is read by nothing innoprof uses.
        let shf_compressed = matches!(section.flags(),
            object::SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_COMPRESSED) != 0);
        if range.format == object::CompressionFormat::Zlib && shf_compressed {
            claims.push((name(), bytes, claimed));
        }
    }
    // Streams inflated only once every claim passed: the cheap checks
    // first, and no CPU spent on a file refused anyway.
    for (name, bytes, claimed) in claims {
        if zlib_inflates_past(&data[bytes], claimed) {
            return Err(InflateError::InflatesPast { name, claimed });
        }
    }
    Ok(found)
}

/// [`check_inflation`] of an open file with [`INFLATE_CAPS`], mapped
/// (its pages released after). Remembered for this process by the bytes
/// checked, not by the file's name or identity: a CRC32 of every
/// compressed section (its compression header included) with its name,
/// the file's length, device and inode. Inflating a server's compressed
/// DWARF to check it costs about as much as reading it (~5 ms per MB
/// inflated in a debug build), and a recording asks for the same file at
/// the fetch, the symbolizer's start and each symbolizer after; the CRC
/// reads only the compressed bytes, and an inode reused for another
/// file's bytes (a file removed, another written) is not taken for it.
pub fn file_inflation(file: &std::fs::File) -> Result<Inflation, InflateError> {
    use std::os::unix::fs::MetadataExt;
    type Fingerprint = (u64, u64, u64, u32);
    static CHECKED: std::sync::Mutex<Vec<(Fingerprint, Result<Inflation, InflateError>)>> =
        std::sync::Mutex::new(Vec::new());
    let Ok(map) = super::mapped::Mapped::of(file) else {
        return Err(InflateError::Unparsed);
    };
    let data = map.bytes();
    let fingerprint = file.metadata().ok().and_then(|m| {
        let elf = object::File::parse(data).ok()?;
        let mut crc = crc32fast::Hasher::new();
        for section in elf.sections() {
            let compressed = section
                .compressed_file_range()
                .map_or(true, |r| r.format != object::CompressionFormat::None);
            if compressed {
                crc.update(section.name_bytes().unwrap_or_default());
                let (offset, size) = section.file_range().unwrap_or_default();
                let range = checked_range("", offset, size, data.len() as u64, u64::MAX).ok();
                crc.update(range.map_or(&[][..], |r| &data[r]));
            }
        }
        Some((m.dev(), m.ino(), m.len(), crc.finalize()))
    });
    let known = fingerprint.and_then(|key| {
        let checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
        checked
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    });
    let verdict = known.unwrap_or_else(|| check_inflation(data, &INFLATE_CAPS));
    map.release();
    if let Some(key) = fingerprint {
        let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
        if !checked.iter().any(|(k, _)| *k == key) {
            // A handful of files per run (a server, its libraries, a
            // debug file): bounded anyway, oldest first out.
            if checked.len() >= 64 {
                let _oldest = checked.remove(0);
            }
            checked.push((key, verdict.clone()));
        }
    }
    verdict
}

/// Whether the zlib stream `input` inflates to more than `claimed` bytes,
/// found without holding more than 64 KiB of its output. A stream that
/// is cut short or corrupt is not "past": its reader fails on it.
fn zlib_inflates_past(input: &[u8], claimed: u64) -> bool {
    let mut inflate = flate2::Decompress::new(true);
    let mut out = vec![0u8; 64 << 10];
    loop {
        let consumed = inflate.total_in() as usize;
        let before = inflate.total_out();
        let status = inflate.decompress(
            &input[consumed.min(input.len())..],
            &mut out,
            flate2::FlushDecompress::None,
        );
        if inflate.total_out() > claimed {
            return true;
        }
        match status {
            Ok(flate2::Status::StreamEnd) | Err(_) => return false,
            Ok(_) if inflate.total_out() == before && inflate.total_in() as usize == consumed => {
                return false
            }
            Ok(_) => {}
        }
    }
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

#[cfg(test)]
pub(crate) mod bombs {
    //! ELF files whose compressed sections claim or inflate to more than
    //! they should, built with `object`'s writer: the shapes a hostile
    //! debuginfod server (or a crafted binary) sends.
    use object::write::Object as Writer;
    use object::{Architecture, BinaryFormat, Endianness, SectionKind};
    use std::io::Write;

    /// A zlib stream of `n` zero bytes (~1000:1).
    pub fn zlib_zeros(n: usize) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        let chunk = vec![0u8; 1 << 20];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            z.write_all(&chunk[..k]).unwrap();
            left -= k;
        }
        z.finish().unwrap()
    }

    /// An ELF with build id `id` (a note), a plain `.debug_info` and the
    /// `SHF_COMPRESSED` sections `compressed`: (name, the Elf64_Chdr's
    /// ch_size, the zlib bytes after it).
    pub fn elf_with(id: &[u8], compressed: &[(String, u64, Vec<u8>)]) -> Vec<u8> {
        let mut obj = Writer::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&(id.len() as u32).to_le_bytes());
        note.extend_from_slice(&object::elf::NT_GNU_BUILD_ID.to_le_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let s = obj.add_section(
            Vec::new(),
            b".note.gnu.build-id".to_vec(),
            SectionKind::Note,
        );
        obj.append_section_data(s, &note, 4);
        let s = obj.add_section(Vec::new(), b".debug_info".to_vec(), SectionKind::Debug);
        obj.append_section_data(s, &[1, 2, 3, 4], 1);
        for (name, claim, zlib) in compressed {
            let s = obj.add_section(Vec::new(), name.as_bytes().to_vec(), SectionKind::Debug);
            let mut data = Vec::new();
            data.extend_from_slice(&object::elf::ELFCOMPRESS_ZLIB.to_le_bytes());
            data.extend_from_slice(&0u32.to_le_bytes());
            data.extend_from_slice(&claim.to_le_bytes());
            data.extend_from_slice(&1u64.to_le_bytes());
            data.extend_from_slice(zlib);
            obj.append_section_data(s, &data, 1);
            obj.section_mut(s).flags = object::SectionFlags::Elf {
                sh_flags: u64::from(object::elf::SHF_COMPRESSED),
            };
        }
        obj.write().unwrap()
    }

    /// Each shape, by name: a ratio bomb (16 MiB of zeros, claimed as
    /// such: ~1000:1), a stream inflating past a small honest-looking
    /// claim (16 MiB behind a 1 MiB claim, what blazesym would inflate to
    /// the end), a 1 TiB claim in a tiny file, and 3,000 small sections
    /// claiming 1 MiB each (3,000 MiB together).
    pub fn shapes(id: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
        let zeros = zlib_zeros(16 << 20);
        let tiny = zlib_zeros(64);
        vec![
            (
                "ratio",
                elf_with(id, &[(".debug_line".into(), 16 << 20, zeros.clone())]),
            ),
            (
                "past its claim",
                elf_with(id, &[(".debug_line".into(), 1 << 20, zeros)]),
            ),
            (
                "1 TiB claim",
                elf_with(id, &[(".debug_str".into(), 1 << 40, tiny.clone())]),
            ),
            (
                "many sections",
                elf_with(
                    id,
                    &(0..3000)
                        .map(|i| (format!(".debug_x{i}"), 1 << 20, tiny.clone()))
                        .collect::<Vec<_>>(),
                ),
            ),
        ]
    }
}

#[cfg(test)]
mod inflation_tests {
    use super::*;

    /// Each bomb shape is refused, by the check that catches it, without
    /// inflating more than 64 KiB at a time; the same shapes within the
    /// caps pass; and a real compressed debug file (libc6-dbg's libc,
    /// zlib) passes, every stream inflated to its claim.
    #[test]
    fn every_bomb_shape_is_refused_and_real_compressed_dwarf_passes() {
        let shapes = bombs::shapes(&[1, 2, 3, 4]);
        let verdicts: Vec<(&str, InflateError)> = shapes
            .iter()
            .map(|(what, elf)| (*what, check_inflation(elf, &INFLATE_CAPS).unwrap_err()))
            .collect();
        assert!(
            matches!(&verdicts[0].1, InflateError::Ratio { claimed, ratio: 64, .. } if *claimed == 16 << 20),
            "{verdicts:?}"
        );
        assert_eq!(
            verdicts[1].1,
            InflateError::InflatesPast {
                name: ".debug_line".into(),
                claimed: 1 << 20
            }
        );
        assert!(
            matches!(&verdicts[2].1, InflateError::SectionTooLarge { claimed, cap, .. } if *claimed == 1 << 40 && *cap == 1 << 30),
            "{verdicts:?}"
        );
        assert!(
            matches!(&verdicts[3].1, InflateError::TotalTooLarge { sections: 2049, cap, .. } if *cap == 2 << 30),
            "{verdicts:?}"
        );
        for (what, e) in &verdicts {
            assert!(!e.to_string().contains('\n'), "{what}: {e}");
        }
        // Honest sections pass: 16 MiB of zeros claimed as such under a
        // ratio the caps allow, and a claim that matches its stream.
        let lenient = InflateCaps {
            ratio: 2000,
            ..INFLATE_CAPS
        };
        assert_eq!(
            check_inflation(&shapes[0].1, &lenient),
            Ok(Inflation {
                sections: 1,
                claimed: 16 << 20
            })
        );
        let exact = bombs::elf_with(
            &[1],
            &[(".debug_str".into(), 4096, bombs::zlib_zeros(4096))],
        );
        assert!(check_inflation(&exact, &INFLATE_CAPS).is_ok());
        assert_eq!(
            check_inflation(b"not elf", &INFLATE_CAPS),
            Err(InflateError::Unparsed)
        );

        let libc =
            std::fs::read("/usr/lib/debug/.build-id/".to_string() + &libc_debug_id() + ".debug")
                .expect("libc6-dbg is installed");
        let t = std::time::Instant::now();
        let found = check_inflation(&libc, &INFLATE_CAPS).unwrap();
        println!("libc6-dbg: {found:?} checked in {:?}", t.elapsed());
        assert!(
            found.sections >= 5 && found.claimed > libc.len() as u64,
            "{found:?}"
        );
    }

    /// libc's build id, as its debug file is named under .build-id/.
    fn libc_debug_id() -> String {
        let bytes = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let id = super::super::elf::hex(elf.build_id().unwrap().unwrap());
        format!("{}/{}", &id[..2], &id[2..])
    }
}
