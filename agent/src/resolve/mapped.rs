//! A binary (or its debug file) mapped read-only instead of read into
//! memory, and the means to hand its pages back.
//!
//! Reading a 313 MB `mariadbd` with `std::fs::read` made it all anonymous
//! memory for the whole recording (a 414–449 MiB peak, 335 MiB steady in
//! `serve`). Mapped, only the pages resolution touches come in: the symbol
//! tables, a few DWARF units, a few code bytes. Those still count in the
//! resident set while they are mapped in, so each phase that is done with
//! them releases them with `MADV_DONTNEED`: on a read-only mapping of a
//! file (never written, so no page of it is dirty or copied) that only
//! drops them from this process's page tables (the page cache keeps them,
//! nothing is lost, a later read faults them back in without I/O).
//!
//! memmap2 (already in the tree through blazesym) owns the `mmap`/`munmap`
//! pair and its corner cases (empty files, page alignment); what is left
//! here is the one unsafe call whose soundness depends on how the map was
//! made.

use std::fs::File;
use std::path::Path;

/// Pages of file data read through a walk (DWARF units, in file order)
/// before they are released: the walk's resident share stays near this
/// instead of the whole section (206 MiB of `.debug_info` in 11.4.5).
pub const TRIM_EVERY: usize = 16 << 20;

pub struct Mapped {
    map: memmap2::Mmap,
}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapped({} bytes)", self.map.len())
    }
}

impl Mapped {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Self::of(&File::open(path)?)
    }

    /// Maps a file already opened (and checked) by the caller.
    pub fn of(file: &File) -> std::io::Result<Self> {
        // SAFETY: the map is read-only. It goes wrong only if
        // the file is truncated while mapped (SIGBUS on a later read). A
        // running server's binary is replaced by rename on upgrade, which
        // leaves this mapping on the old inode; an in-place truncate of a
        // server binary or debug file mid-recording is not supported.
        //
        // Private (`r--p` in /proc/self/maps), never shared: the symbolizer's
        // page trimmer releases only shared read-only maps of a file, which
        // in this process are blazesym's alone, so it never advises a map of
        // ours that another thread may unmap under it.
        let map = unsafe { memmap2::MmapOptions::new().map_copy_read_only(file)? };
        Ok(Self { map })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Drops every page of the map from the resident set.
    pub fn release(&self) {
        self.release_range(0, self.map.len());
    }

    /// Drops the whole pages inside `part` from the resident set, if
    /// `part` lies in this map (anything else is left alone).
    pub fn release_part(&self, part: &[u8]) {
        let base = self.map.as_ptr() as usize;
        let start = part.as_ptr() as usize;
        if start < base || start + part.len() > base + self.map.len() {
            return;
        }
        self.release_range(start - base, part.len());
    }

    fn release_range(&self, offset: usize, len: usize) {
        let page = page_size();
        // The map starts on a page; only pages wholly inside the range go.
        let first = offset.div_ceil(page) * page;
        let end = (offset + len) / page * page;
        if end <= first {
            return;
        }
        // SAFETY: MADV_DONTNEED on a read-only, never-written file mapping
        // only unmaps the pages; the next access reads the same
        // bytes back from the file (the page cache). No reference into the
        // map sees different contents before and after.
        let _ = unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
        };
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Resident pages of this process's mapping starting at `addr`.
    pub(crate) fn resident_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_map = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((start, _)) = range.split_once('-') {
                    if let Ok(start) = usize::from_str_radix(start, 16) {
                        in_map = start == addr;
                        continue;
                    }
                }
            }
            if in_map {
                if let Some(v) = line.strip_prefix("Rss:") {
                    return v.trim().trim_end_matches(" kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    #[test]
    fn released_pages_leave_the_resident_set_and_read_back_the_same() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
        std::io::Write::write_all(&mut file, &data).unwrap();
        let map = Mapped::open(file.path()).unwrap();
        let addr = map.bytes().as_ptr() as usize;
        let sum: u64 = map.bytes().iter().map(|b| u64::from(*b)).sum();
        assert!(resident_kb(addr) >= 8 << 10, "all 8 MiB read in");

        // Half of it, given as a slice of the map.
        map.release_part(&map.bytes()[..4 << 20]);
        let half = resident_kb(addr);
        assert!(half <= 4 << 10, "{half} kB resident after releasing half");

        map.release();
        assert_eq!(resident_kb(addr), 0);
        // Nothing was lost: the bytes fault back in from the file.
        assert_eq!(map.bytes(), &data[..]);
        assert_eq!(map.bytes().iter().map(|b| u64::from(*b)).sum::<u64>(), sum);

        // A slice that is not part of the map is ignored, not released.
        let heap = vec![1u8; 1 << 20];
        map.release_part(&heap);
        assert!(heap.iter().all(|b| *b == 1));
    }
}
