//! The top-level functions of a file's DWARF units
//! ([`crate::symbolize::dwarf_frames::UnitFunctions`]), kept across boots.
//!
//! Naming a recording's stacks walks the ~150 units its addresses fall in,
//! and finding a unit's functions steps over every top-level entry of it:
//! ~40 % of the walk (~30 ms of a 30 s recording on MariaDB 10.2.11). What
//! it finds depends only on the file's bytes and innoprof's code, and the
//! next recording of the same server lands in mostly the same units (the
//! addresses differ: half of one recording's were not in the one before),
//! so the units' functions are kept in the kept directory
//! ([`crate::persist`]) for the very same file version (device, inode,
//! size, modification and change time) read by the same innoprof binary,
//! and each recording adds the units it walked.

use std::fs::File;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::persist::{self, FileKey, KeptKind};
use crate::symbolize::dwarf_frames::{FunctionRange, UnitFunctions};

/// An index with more ranges than this is not kept (~48 MiB of tmpfs;
/// MariaDB 10.2.11's ~150 units of one recording have ~15,000).
const MAX_KEPT_RANGES: usize = 2 << 20;
/// Kept files are named `functions-*.idx`; past this many, nothing new is
/// kept (see [`persist::count_kept`]).
const MAX_KEPT_FILES: usize = 256;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    key: FileKey,
    units: usize,
    ranges: usize,
}

pub struct KeptFunctions {
    kept: KeptKind,
}

impl Default for KeptFunctions {
    fn default() -> Self {
        Self::in_dir(persist::kept_dir())
    }
}

impl KeptFunctions {
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            kept: KeptKind::in_dir(dir, "functions", "idx", MAX_KEPT_FILES),
        }
    }

    /// The units kept for `file` by this binary.
    pub fn load(&self, file: &File) -> Option<UnitFunctions> {
        let key = self.kept.key(file)?;
        let max = (MAX_KEPT_RANGES * 24 + (1 << 20)) as u64;
        let (header, units) = decode(&self.kept.read(&key, max)?)?;
        (header.key == key).then_some(UnitFunctions {
            units,
            changed: false,
        })
    }

    /// Keeps `index` as `file`'s; a failure only means walking those
    /// units again next time.
    pub fn store(&self, file: &File, index: &UnitFunctions) -> std::io::Result<()> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let ranges: usize = index.units.values().map(Vec::len).sum();
        if ranges > MAX_KEPT_RANGES {
            return Err(bad("too many functions to keep"));
        }
        let key = self
            .kept
            .key(file)
            .ok_or_else(|| bad("no innoprof binary or file identity"))?;
        let header = Header {
            key: key.clone(),
            units: index.units.len(),
            ranges,
        };
        self.kept.write(&key, &encode(&header, index)?)
    }
}

/// A JSON header line, then per unit its offset, its number of ranges and
/// the ranges (begin, end, entry), all little-endian u64.
fn encode(header: &Header, index: &UnitFunctions) -> std::io::Result<Vec<u8>> {
    let mut out = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    out.push(b'\n');
    for (&unit, ranges) in &index.units {
        out.extend_from_slice(&(unit as u64).to_le_bytes());
        out.extend_from_slice(&(ranges.len() as u64).to_le_bytes());
        for r in ranges {
            for v in [r.begin, r.end, r.entry] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    Ok(out)
}

fn decode(bytes: &[u8]) -> Option<(Header, std::collections::HashMap<usize, Vec<FunctionRange>>)> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..newline]).ok()?;
    let mut words = bytes[newline + 1..].chunks(8).map(|c| {
        let c: [u8; 8] = c.try_into().ok()?;
        Some(u64::from_le_bytes(c))
    });
    let mut next = || words.next().flatten();
    let mut units = std::collections::HashMap::with_capacity(header.units);
    let mut ranges = 0;
    for _ in 0..header.units {
        let unit = usize::try_from(next()?).ok()?;
        let n = usize::try_from(next()?).ok()?;
        ranges += n;
        if ranges > header.ranges {
            return None;
        }
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            let (begin, end, entry) = (next()?, next()?, next()?);
            // The walk keeps non-empty ranges only.
            if begin >= end {
                return None;
            }
            list.push(FunctionRange { begin, end, entry });
        }
        units.insert(unit, list);
    }
    // All of it, and nothing more.
    (ranges == header.ranges && next().is_none()).then_some((header, units))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> UnitFunctions {
        let ranges = |unit: u64| {
            (0..50u64)
                .map(|i| FunctionRange {
                    begin: unit * 0x10000 + i * 0x40,
                    end: unit * 0x10000 + i * 0x40 + 0x30,
                    entry: 0x20 + i * 0x100,
                })
                .collect()
        };
        UnitFunctions {
            units: [(0, ranges(0)), (0x5000, ranges(1))].into_iter().collect(),
            changed: false,
        }
    }

    #[test]
    fn kept_functions_come_back_for_the_same_file_only() {
        let d = tempfile::tempdir().unwrap();
        let kept = KeptFunctions::in_dir(d.path().join("run"));
        let path = d.path().join("mysqld");
        std::fs::write(&path, b"some file").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(kept.load(&file), None);
        kept.store(&file, &index()).unwrap();
        assert_eq!(kept.load(&file), Some(index()));
        assert_eq!(kept.load(&File::open(&path).unwrap()), Some(index()));
        // Changed in place: walked again.
        std::fs::write(&path, b"some other file").unwrap();
        assert_eq!(kept.load(&File::open(&path).unwrap()), None);
        // Cut short, grown, or with an empty range: not used.
        let file = File::open(&path).unwrap();
        kept.store(&file, &index()).unwrap();
        let at = kept.kept.path(&kept.kept.key(&file).unwrap());
        let bytes = std::fs::read(&at).unwrap();
        std::fs::write(&at, &bytes[..bytes.len() - 8]).unwrap();
        assert_eq!(kept.load(&file), None);
        std::fs::write(&at, [&bytes[..], &[0; 8]].concat()).unwrap();
        assert_eq!(kept.load(&file), None);
        let mut empty = index();
        empty.units.get_mut(&0).unwrap()[3].end = 0;
        kept.store(&file, &empty).unwrap();
        assert_eq!(kept.load(&file), None);
    }
}
