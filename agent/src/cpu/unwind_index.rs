//! The index the walker searches the unwind rows through (bpf/cpu.h,
//! `unwind_region`): a binary search over all of mysqld's ~175,000 rows is
//! 18 halvings, each a likely cache miss at a 100 Hz sampler's pace, and
//! was most of a sample's BPF time (~17 of ~35 µs). Rows close in address
//! form a region; a region is cut into buckets of `1 << shift` bytes, and
//! a bucket holds the rows that may cover an address in it, so a frame's
//! search reads one region, one bucket and the few rows of one bucket.

use super::abi::{UnwindBucket, UnwindRegion, UnwindRow, UNWIND_MAX_REGIONS};

/// Rows further apart than this start a new region (the gap would be
/// buckets holding nothing).
const REGION_GAP: u64 = 2 << 20;
/// The smallest bucket: 1 KiB of code holds a few rows.
const MIN_SHIFT: u32 = 10;
/// At most this many buckets (8 MiB of map): wider buckets past it.
const MAX_BUCKETS: u64 = 1 << 20;

/// The regions and buckets over a sorted row table, and the halvings each
/// search takes (see bpf/cpu.bpf.c `bucket_rows`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindIndex {
    /// Sorted by start; at most [`UNWIND_MAX_REGIONS`] (the rows of the
    /// smallest regions past that are searched whole).
    pub regions: Vec<UnwindRegion>,
    pub buckets: Vec<UnwindBucket>,
    /// log2 of a bucket's bytes.
    pub shift: u32,
    /// Halvings that narrow the regions to one.
    pub region_steps: u32,
    /// Halvings that narrow the fullest bucket's rows to one.
    pub bucket_steps: u32,
}

impl UnwindIndex {
    /// The index over `rows`, which must be sorted by address.
    pub fn build(rows: &[UnwindRow]) -> Self {
        let mut clusters = clusters(rows);
        if clusters.len() > UNWIND_MAX_REGIONS {
            // The regions holding most rows get the index; the others keep
            // the whole search.
            clusters.sort_by_key(|&(first, end)| std::cmp::Reverse(end - first));
            clusters.truncate(UNWIND_MAX_REGIONS);
            clusters.sort_unstable();
        }
        let span = |shift: u32, &(first, end): &(usize, usize)| {
            let start = rows[first].addr >> shift;
            (rows[end - 1].addr >> shift) - start + 1
        };
        let mut shift = MIN_SHIFT;
        while shift < 40 && clusters.iter().map(|c| span(shift, c)).sum::<u64>() > MAX_BUCKETS {
            shift += 1;
        }
        let mut index = Self {
            shift,
            region_steps: search_steps(clusters.len() as u32),
            ..Self::default()
        };
        let mut widest = 0u32;
        for c in &clusters {
            let start = (rows[c.0].addr >> shift) << shift;
            let count = span(shift, c);
            index.regions.push(UnwindRegion {
                start,
                end: start + (count << shift),
                first: index.buckets.len() as u32,
                pad: 0,
            });
            // rows[..after] start at or below the bucket's first byte;
            // rows[..below] start before its end.
            let (mut after, mut below) = (c.0, c.0);
            for b in 0..count {
                let from = start + (b << shift);
                let to = from + (1 << shift);
                while after < rows.len() && rows[after].addr <= from {
                    after += 1;
                }
                while below < rows.len() && rows[below].addr < to {
                    below += 1;
                }
                let bucket = UnwindBucket {
                    lo: after.saturating_sub(1) as u32,
                    hi: below as u32,
                };
                widest = widest.max(bucket.hi - bucket.lo);
                index.buckets.push(bucket);
            }
        }
        index.bucket_steps = search_steps(widest);
        index
    }

    /// The row covering `addr` as the walker finds it: through its bucket
    /// where a region holds it, else over all rows; `None` before the
    /// first row. For tests and for userspace checks of the BPF side.
    pub fn find(&self, rows: &[UnwindRow], addr: u64) -> Option<usize> {
        let (lo, hi, steps) = match self.bucket(addr) {
            Some(b) => (b.lo, b.hi, self.bucket_steps),
            None => (0, rows.len() as u32, search_steps(rows.len() as u32)),
        };
        let (lo, _) = narrow(
            lo,
            hi,
            steps,
            |i| rows.get(i as usize).map(|r| r.addr),
            addr,
        )?;
        (rows.get(lo as usize)?.addr <= addr).then_some(lo as usize)
    }

    fn bucket(&self, addr: u64) -> Option<UnwindBucket> {
        let starts = |i: u32| self.regions.get(i as usize).map(|r| r.start);
        let (at, _) = narrow(
            0,
            self.regions.len() as u32,
            self.region_steps,
            starts,
            addr,
        )?;
        let r = self.regions.get(at as usize)?;
        if addr < r.start || addr >= r.end {
            return None;
        }
        let b = self
            .buckets
            .get((r.first + ((addr - r.start) >> self.shift) as u32) as usize)?;
        (b.hi > b.lo).then_some(*b)
    }
}

/// The BPF side's branch-free halving, step for step: `steps` times, keep
/// the half of [lo, hi) whose first element starts at or below `addr`.
fn narrow(
    mut lo: u32,
    mut hi: u32,
    steps: u32,
    start: impl Fn(u32) -> Option<u64>,
    addr: u64,
) -> Option<(u32, u32)> {
    for _ in 0..steps.min(24) {
        let mid = lo + (hi - lo) / 2;
        if start(mid)? > addr {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some((lo, hi))
}

/// Runs of rows no further apart than [`REGION_GAP`], as [first, end).
fn clusters(rows: &[UnwindRow]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut first = 0;
    for i in 1..=rows.len() {
        if i == rows.len() || rows[i].addr - rows[i - 1].addr > REGION_GAP {
            if i > first {
                out.push((first, i));
            }
            first = i;
        }
    }
    out
}

/// Halvings of a binary search that narrow `rows` rows to one:
/// ceil(log2(rows)).
pub fn search_steps(rows: u32) -> u32 {
    if rows <= 1 {
        0
    } else {
        32 - (rows - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(addr: u64) -> UnwindRow {
        UnwindRow {
            addr,
            cfa_off: 8,
            rbp_off: 0,
            cfa_reg: 0,
            kind: 0,
        }
    }

    /// The last row starting at or below addr, by a plain scan.
    fn covering(rows: &[UnwindRow], addr: u64) -> Option<usize> {
        rows.iter().rposition(|r| r.addr <= addr)
    }

    /// A process's layout: a big executable low, libraries far above it,
    /// functions of uneven sizes, a dense run (a PLT) and gaps.
    fn process_rows(seed: u64) -> Vec<UnwindRow> {
        let mut state = seed;
        let mut next = move |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut rows = Vec::new();
        for (base, len) in [
            (0x40_0000u64, 30 << 20),
            (0x7f00_0000_0000, 2 << 20),
            (0x7f00_1000_0000, 1 << 20),
        ] {
            let mut a = base;
            while a < base + len {
                rows.push(row(a));
                let long = next(10) == 0;
                a += 1 + next(if long { 4000 } else { 60 });
            }
            // a dense run: one row every byte
            let dense = base + len / 2;
            rows.extend((0..300).map(|i| row(dense + i)));
        }
        rows.sort_by_key(|r| r.addr);
        rows.dedup_by_key(|r| r.addr);
        rows
    }

    #[test]
    fn the_index_finds_the_row_a_whole_search_finds() {
        for seed in 1..4 {
            let rows = process_rows(seed);
            let index = UnwindIndex::build(&rows);
            assert_eq!(index.regions.len(), 3, "{:?}", index.regions);
            assert!(index.bucket_steps <= 9, "{}", index.bucket_steps);
            let mut probe = seed;
            for i in 0..200_000u64 {
                probe = probe
                    .wrapping_mul(2862933555777941757)
                    .wrapping_add(3037000493);
                let addr = match i % 4 {
                    // anywhere, including before, between and after regions
                    0 => probe >> 16,
                    // inside a region, and on row starts and their last bytes
                    1 => 0x40_0000 + probe % (31 << 20),
                    2 => rows[(probe % rows.len() as u64) as usize].addr,
                    _ => rows[(probe % rows.len() as u64) as usize]
                        .addr
                        .wrapping_sub(1),
                };
                assert_eq!(
                    index.find(&rows, addr),
                    covering(&rows, addr),
                    "addr {addr:#x}"
                );
            }
        }
    }

    /// This process's own rows (Rust, libc, the loader): every row start
    /// and a spread of addresses between them found through the index.
    #[test]
    fn the_index_over_this_process_finds_what_the_whole_search_finds() {
        let maps = crate::symbolize::ProcessMaps::read(std::process::id()).unwrap();
        let rows = crate::cpu::unwind::UnwindTable::for_process(&maps).rows;
        let index = UnwindIndex::build(&rows);
        assert!(
            !index.regions.is_empty() && index.bucket_steps <= 10,
            "{index:?}"
        );
        for (i, r) in rows.iter().enumerate().step_by(7) {
            for addr in [r.addr, r.addr + 1, r.addr.wrapping_sub(1), r.addr + 613] {
                let whole = rows.partition_point(|x| x.addr <= addr).checked_sub(1);
                assert_eq!(index.find(&rows, addr), whole, "row {i} addr {addr:#x}");
            }
        }
    }

    #[test]
    fn a_bucket_holds_few_rows_and_regions_beyond_the_limit_are_searched_whole() {
        // Two rows 4 MiB apart per region, 70 regions: 64 get the index.
        let rows: Vec<UnwindRow> = (0..140u64)
            .map(|i| row((i / 2) * (64 << 20) + (i % 2) * 100))
            .collect();
        let index = UnwindIndex::build(&rows);
        assert_eq!(index.regions.len(), UNWIND_MAX_REGIONS);
        assert!(index.regions.windows(2).all(|w| w[0].end <= w[1].start));
        for r in &rows {
            for addr in [r.addr, r.addr + 1, r.addr + 99, r.addr + 5000] {
                assert_eq!(index.find(&rows, addr), covering(&rows, addr));
            }
        }
        assert_eq!(index.find(&rows, 0), Some(0));
        assert_eq!(UnwindIndex::build(&[]).find(&[], 5), None);
    }

    #[test]
    fn search_steps_narrow_to_one_row() {
        for rows in [0u32, 1, 2, 3, 4, 5, 1000, 174_699, 1 << 24] {
            let steps = search_steps(rows);
            let mut left = rows.max(1);
            for _ in 0..steps {
                left -= left / 2;
            }
            assert_eq!(left, 1, "{rows} rows");
            assert!(steps == 0 || (1u64 << (steps - 1)) < rows as u64);
        }
    }
}
