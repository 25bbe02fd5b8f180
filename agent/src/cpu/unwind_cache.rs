//! A mapped file's unwind rows, kept across boots.
//!
//! Turning a server's `.eh_frame` into rows ([`super::unwind`]) is ~40 ms
//! of CPU for MariaDB 10.2.11's 175,000 rows, at the start of every
//! recording, for a result that depends only on the file's bytes and on
//! innoprof's own code. A DBA records several times during an incident
//! (a baseline, the incident, again after a change), so the rows of each
//! file are kept in the kept directory ([`crate::persist`]) and reused
//! when the very same file is mapped again: same device, inode, size,
//! modification and change time (`FileId` and `file_stamp`, as
//! `ElfImage::is_file` tells files apart), read by the same innoprof binary.
//!
//! The rows are kept at the file's link-time addresses, with its
//! executable segments, so a later process that maps the file elsewhere
//! (ASLR) gets them shifted by its own load bias. A file that does not
//! parse, is foreign (see `persist`), or says it is another file is
//! ignored and built again.

use std::fs::File;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::abi::UnwindRow;
use crate::persist::{self, FileKey, KeptKind};

/// A file with more rows than this is not kept (~64 MiB of tmpfs).
const MAX_KEPT_ROWS: usize = 1 << 22;
/// Bytes of one row on disk: addr, cfa_off, rbp_off, cfa_reg, kind.
const ROW_BYTES: usize = 16;
/// Kept files are named `unwind-*.rows`; past this many, nothing new is
/// kept (innoprof never removes a file it did not write, and does not
/// track which of the directory's files are its own from earlier runs).
const MAX_KEPT_FILES: usize = 256;

/// One file's rows at its link-time addresses, and the segments to place
/// them with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileUnwind {
    /// Executable segments: (virtual address, file offset, size in file).
    pub segments: Vec<(u64, u64, u64)>,
    /// Sorted by address, as [`super::unwind`] built them at bias 0.
    pub rows: Vec<UnwindRow>,
}

impl FileUnwind {
    /// The load bias of a mapping that starts at `map_start` with the file
    /// offset `map_offset`: the executable segment mapped there (its start
    /// rounded down to the page, as mmap needs) keeps vaddr - offset
    /// constant.
    pub fn bias(&self, map_start: u64, map_offset: u64) -> Option<u64> {
        let &(address, offset, _) = self
            .segments
            .iter()
            .find(|&&(_, off, size)| (off & !0xfff..off + size).contains(&map_offset))?;
        let vaddr = (address + map_offset).wrapping_sub(offset);
        Some(map_start.wrapping_sub(vaddr))
    }

    /// Appends the rows at the addresses of a mapping with `bias`.
    pub fn place_into(&self, bias: u64, out: &mut Vec<UnwindRow>) {
        out.extend(self.rows.iter().map(|r| UnwindRow {
            addr: r.addr.wrapping_add(bias),
            ..*r
        }));
    }
}

/// What a kept file says it holds rows for.
type Key = FileKey;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    key: Key,
    segments: Vec<(u64, u64, u64)>,
    rows: usize,
}

pub struct UnwindCache {
    kept: KeptKind,
}

impl Default for UnwindCache {
    fn default() -> Self {
        Self::in_dir(persist::kept_dir())
    }
}

impl UnwindCache {
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            kept: KeptKind::in_dir(dir, "unwind", "rows", MAX_KEPT_FILES),
        }
    }

    /// The kept rows of `file`, if the same file's were kept by this
    /// binary.
    pub fn load(&self, file: &File) -> Option<FileUnwind> {
        let key = self.kept.key(file)?;
        let max = (MAX_KEPT_ROWS * ROW_BYTES + (64 << 10)) as u64;
        let (header, rows) = decode(&self.kept.read(&key, max)?)?;
        (header.key == key).then_some(FileUnwind {
            segments: header.segments,
            rows,
        })
    }

    /// Keeps `unwind` as `file`'s; failures only mean the next recording
    /// builds the rows again.
    pub fn store(&self, file: &File, unwind: &FileUnwind) -> std::io::Result<()> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        if unwind.rows.len() > MAX_KEPT_ROWS {
            return Err(bad("too many rows to keep"));
        }
        let key = self
            .kept
            .key(file)
            .ok_or_else(|| bad("no innoprof binary or file identity"))?;
        let header = Header {
            key: key.clone(),
            segments: unwind.segments.clone(),
            rows: unwind.rows.len(),
        };
        self.kept.write(&key, &encode(&header, &unwind.rows)?)
    }
}

/// A JSON header line, then the rows, little-endian.
fn encode(header: &Header, rows: &[UnwindRow]) -> std::io::Result<Vec<u8>> {
    let mut out = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    out.push(b'\n');
    out.reserve(rows.len() * ROW_BYTES);
    for r in rows {
        out.extend_from_slice(&r.addr.to_le_bytes());
        out.extend_from_slice(&r.cfa_off.to_le_bytes());
        out.extend_from_slice(&r.rbp_off.to_le_bytes());
        out.push(r.cfa_reg);
        out.push(r.kind);
    }
    Ok(out)
}

fn decode(bytes: &[u8]) -> Option<(Header, Vec<UnwindRow>)> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    let body = &bytes[newline + 1..];
    if body.len() != header.rows.checked_mul(ROW_BYTES)? {
        return None;
    }
    let rows: Vec<UnwindRow> = body
        .chunks_exact(ROW_BYTES)
        .map(|c| UnwindRow {
            addr: u64::from_le_bytes(c[0..8].try_into().unwrap()),
            cfa_off: i32::from_le_bytes(c[8..12].try_into().unwrap()),
            rbp_off: i16::from_le_bytes(c[12..14].try_into().unwrap()),
            cfa_reg: c[14],
            kind: c[15],
        })
        .collect();
    // The walker binary-searches them: a file out of order is not ours.
    rows.windows(2)
        .all(|w| w[0].addr < w[1].addr)
        .then_some((header, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unwind() -> FileUnwind {
        FileUnwind {
            segments: vec![(0x1000, 0x1000, 0x5000)],
            rows: (0..100u64)
                .map(|i| UnwindRow {
                    addr: 0x1000 + i * 8,
                    cfa_off: 8 + i as i32,
                    rbp_off: -(i as i16),
                    cfa_reg: (i % 2) as u8,
                    kind: (i % 4) as u8,
                })
                .collect(),
        }
    }

    #[test]
    fn kept_rows_come_back_for_the_same_file_only() {
        let d = tempfile::tempdir().unwrap();
        let cache = UnwindCache::in_dir(d.path().join("run"));
        let path = d.path().join("lib.so");
        std::fs::write(&path, b"some file").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(cache.load(&file), None);
        cache.store(&file, &unwind()).unwrap();
        assert_eq!(cache.load(&file), Some(unwind()));
        // The same file through another descriptor (another recording).
        assert_eq!(cache.load(&File::open(&path).unwrap()), Some(unwind()));
        // Changed in place (size and mtime): built again.
        std::fs::write(&path, b"some other file").unwrap();
        assert_eq!(cache.load(&File::open(&path).unwrap()), None);
        // A kept file cut short or out of order is not used.
        let file = File::open(&path).unwrap();
        cache.store(&file, &unwind()).unwrap();
        let kept = cache.kept.path(&cache.kept.key(&file).unwrap());
        let bytes = std::fs::read(&kept).unwrap();
        std::fs::write(&kept, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(cache.load(&file), None);
        let mut shuffled = unwind();
        shuffled.rows.swap(3, 4);
        let header = Header {
            key: cache.kept.key(&file).unwrap(),
            segments: shuffled.segments.clone(),
            rows: shuffled.rows.len(),
        };
        std::fs::write(&kept, encode(&header, &shuffled.rows).unwrap()).unwrap();
        assert_eq!(cache.load(&file), None);
    }

    #[test]
    fn rows_are_placed_by_the_mappings_load_bias() {
        let u = unwind();
        // A PIE mapped at 0x5555_0000_0000: its text segment (file offset
        // 0x1000) mapped there.
        let bias = u.bias(0x5555_0000_1000, 0x1000).unwrap();
        assert_eq!(bias, 0x5555_0000_0000);
        let mut placed = Vec::new();
        u.place_into(bias, &mut placed);
        assert_eq!(placed[0].addr, 0x5555_0000_1000);
        // An offset no executable segment holds.
        assert_eq!(u.bias(0x7000, 0x9000), None);
    }
}
