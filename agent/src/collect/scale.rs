//! Weighted stack samples to exact totals. The sampler's weights make
//! unbiased estimates; scaled to what the exact tables counted (a ratio
//! estimate, calibrated per cell where the tables split the hits), the
//! stacks add up to the probe's calls and wait and split as its tables do.

use std::collections::HashMap;

use super::sample::StackSample;
use crate::bpf::abi::{Callsite, SiteVal, SlotId};

/// Per (slot, call site, thread role): the exact calls and wait of the
/// call-site table (BPF `site_stats`), over the span some stacks cover.
pub type Cells = HashMap<(SlotId, Callsite, u32), (u64, u64)>;

/// The cells of a read of the call-site table.
pub fn cells_of(site_roles: &[(SlotId, Callsite, u32, SiteVal)]) -> Cells {
    let mut out = Cells::new();
    for (slot, site, role, v) in site_roles {
        let e = out.entry((*slot, *site, *role)).or_default();
        e.0 = e.0.saturating_add(v.calls);
        e.1 = e.1.saturating_add(v.wait_ns_total);
    }
    out
}

/// What each cell counted since `earlier` (a stack window's span).
pub fn cells_since(now: &Cells, earlier: &Cells) -> Cells {
    now.iter()
        .map(|(k, &(c, w))| {
            let (c0, w0) = earlier.get(k).copied().unwrap_or((0, 0));
            (*k, (c.saturating_sub(c0), w.saturating_sub(w0)))
        })
        .collect()
}

/// Scales each slot's stacks to what its sampler saw (as
/// [`scale_to_seen`]), and first shares that out over its cells as the
/// call-site table does: every (call site, role) cell's stacks carry that
/// cell's exact share of the calls and of the wait, so the folded files,
/// flame graphs and pprof labels split by call site, latch and role as
/// the exact tables do, however few stacks the sampler (or the
/// governor's thinning) kept. Within a cell the stacks keep their sampled
/// proportions. A cell none of whose hits took a stack gets one sample
/// without frames marked [`StackSample::unsampled`], carrying its share.
///
/// A slot whose stacks name a cell the table does not hold (its map was
/// full), or whose table counted fewer calls than the sampler saw, is
/// scaled as a whole instead: the table cannot be trusted to split it.
pub fn scale_to_cells(
    samples: &mut Vec<StackSample>,
    seen: &HashMap<SlotId, (u64, u64)>,
    cells: &Cells,
) {
    let mut by_cell: HashMap<SlotId, Vec<((Callsite, u32), (u64, u64))>> = HashMap::new();
    for (&(slot, site, role), &v) in cells {
        if v.0 > 0 || v.1 > 0 {
            by_cell.entry(slot).or_default().push(((site, role), v));
        }
    }
    let mut by_slot: HashMap<SlotId, HashMap<(Callsite, u32), Vec<usize>>> = HashMap::new();
    for (i, s) in samples.iter().enumerate() {
        by_slot
            .entry(s.slot)
            .or_default()
            .entry((s.site, s.role))
            .or_default()
            .push(i);
    }
    let mut whole = HashMap::new();
    let mut added = Vec::new();
    for (&slot, &(calls, wait)) in seen {
        let mut slot_cells = by_cell.remove(&slot).unwrap_or_default();
        let groups = by_slot.remove(&slot).unwrap_or_default();
        let table_calls: u64 = slot_cells.iter().map(|(_, v)| v.0).sum();
        let covers = !slot_cells.is_empty()
            && table_calls >= calls
            && groups
                .keys()
                .all(|k| slot_cells.iter().any(|(c, _)| c == k));
        if !covers {
            whole.insert(slot, (calls, wait));
            continue;
        }
        // A fixed order, so equal remainders go the same way every run.
        slot_cells.sort_by_key(|((site, role), _)| {
            (
                site.file,
                site.line,
                site.latch,
                site.created_file,
                site.created_line,
                *role,
            )
        });
        let cell_calls: Vec<u64> = slot_cells.iter().map(|(_, v)| v.0).collect();
        let cell_waits: Vec<u64> = slot_cells.iter().map(|(_, v)| v.1).collect();
        let (calls_to, waits_to) = shares(&cell_calls, &cell_waits, calls, wait);
        for ((((site, role), _), c), w) in slot_cells.iter().zip(calls_to).zip(waits_to) {
            match groups.get(&(*site, *role)) {
                Some(idx) => share_out(samples, idx, c, w),
                None if c > 0 || w > 0 => added.push(StackSample {
                    slot,
                    ips: Vec::new(),
                    site: *site,
                    role: *role,
                    count: c,
                    wait_ns: w,
                    key: bytemuck::Zeroable::zeroed(),
                    statement: None,
                    unsampled: true,
                }),
                None => {}
            }
        }
    }
    // The slots the table cannot split are scaled whole, apart.
    let (mut rest, split): (Vec<StackSample>, Vec<StackSample>) = std::mem::take(samples)
        .into_iter()
        .partition(|s| whole.contains_key(&s.slot));
    *samples = split;
    scale_to_seen(&mut rest, &whole);
    samples.extend(rest);
    samples.extend(added);
    samples.retain(|s| s.count > 0 || s.wait_ns > 0);
}

/// `calls` and `wait` over the samples at `idx`, as [`shares`] splits them.
fn share_out(samples: &mut [StackSample], idx: &[usize], calls: u64, wait: u64) {
    let counts: Vec<u64> = idx.iter().map(|&i| samples[i].count).collect();
    let waits: Vec<u64> = idx.iter().map(|&i| samples[i].wait_ns).collect();
    let (new_counts, new_waits) = shares(&counts, &waits, calls, wait);
    for ((&i, c), w) in idx.iter().zip(new_counts).zip(new_waits) {
        samples[i].count = c;
        samples[i].wait_ns = w;
    }
}

/// `calls` and `wait` split over parts weighing `counts` calls and
/// `waits` ns: calls by counts (by waits where no part has a count), wait
/// by waits (by counts where none has a wait: untimed weights).
fn shares(counts: &[u64], waits: &[u64], calls: u64, wait: u64) -> (Vec<u64>, Vec<u64>) {
    let any_count = counts.iter().any(|&c| c > 0);
    let any_wait = waits.iter().any(|&w| w > 0);
    let by_calls = if any_count || !any_wait {
        counts
    } else {
        waits
    };
    let by_wait = if any_wait { waits } else { counts };
    (apportion(by_calls, calls), apportion(by_wait, wait))
}

/// Scales each slot's stacks so that they add up to what the slot's
/// sampler saw, exactly: the stacks of a timed slot are a threshold sample
/// of its hits (BPF `wait_sampled`), whose weights estimate each stack's
/// calls and wait without bias; scaled to the exact totals (a ratio
/// estimate), the folded files still add up to the probe's calls and wait.
/// Largest remainders keep the integers' sums exact. A slot that saw hits
/// but kept no stack (a window opened after its CPUs' first stacks and too
/// short to sample one) gets one stack without frames, carrying them all.
fn scale_to_seen(samples: &mut Vec<StackSample>, seen: &HashMap<SlotId, (u64, u64)>) {
    let mut by_slot: HashMap<SlotId, Vec<usize>> = HashMap::new();
    for (i, s) in samples.iter().enumerate() {
        by_slot.entry(s.slot).or_default().push(i);
    }
    for (&slot, &(calls, wait)) in seen {
        let Some(idx) = by_slot.get(&slot) else {
            if calls > 0 {
                samples.push(StackSample {
                    slot,
                    ips: Vec::new(),
                    site: Callsite::default(),
                    role: 0,
                    count: calls,
                    wait_ns: wait,
                    key: bytemuck::Zeroable::zeroed(),
                    statement: None,
                    unsampled: false,
                });
            }
            continue;
        };
        share_out(samples, idx, calls, wait);
    }
    samples.retain(|s| s.count > 0 || s.wait_ns > 0);
}

/// `total` split in proportion to `weights`, in integers that add up to
/// it exactly (largest remainders; ties to the earlier). All weights 0:
/// all of it to the first.
fn apportion(weights: &[u64], total: u64) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| w as u128).sum();
    if weights.is_empty() {
        return Vec::new();
    }
    if sum == 0 {
        let mut out = vec![0; weights.len()];
        out[0] = total;
        return out;
    }
    let mut out = Vec::with_capacity(weights.len());
    let mut rest: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    let mut given: u128 = 0;
    for (i, &w) in weights.iter().enumerate() {
        let exact = w as u128 * total as u128;
        let q = exact / sum;
        given += q;
        out.push(q as u64);
        rest.push((exact % sum, i));
    }
    let mut left = total as u128 - given;
    rest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rest {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(slot: usize, ip: u64, count: u64, wait_ns: u64) -> StackSample {
        StackSample {
            slot: SlotId::of_index(slot),
            ips: vec![ip],
            site: Callsite::default(),
            role: 0,
            count,
            wait_ns,
            key: bytemuck::Zeroable::zeroed(),
            statement: None,
            unsampled: false,
        }
    }

    /// Largest remainders: the parts add up to the total exactly and keep
    /// the weights' proportions.
    #[test]
    fn apportion_keeps_the_total_and_the_proportions() {
        assert_eq!(apportion(&[1, 1, 1], 10), vec![4, 3, 3]);
        assert_eq!(apportion(&[3, 1], 8), vec![6, 2]);
        assert_eq!(apportion(&[0, 0], 5), vec![5, 0]);
        assert_eq!(apportion(&[2, 0, 2], 3), vec![2, 0, 1]);
        assert_eq!(
            apportion(&[u64::MAX, u64::MAX], u64::MAX)
                .iter()
                .sum::<u64>(),
            u64::MAX
        );
        assert!(apportion(&[], 5).is_empty());
    }

    /// A slot's weighted stacks end at its exact totals, in the weights'
    /// proportions; a slot whose stacks already add up is left as it is;
    /// a slot that saw hits but kept no stack gets one without frames.
    #[test]
    fn stacks_are_scaled_to_what_their_slot_saw() {
        let mut samples = vec![
            sample(0, 1, 17, 1_000_000), // a short wait's sample: tau of wait
            sample(0, 2, 1, 9_000_000),  // a long wait, taken whole
            sample(1, 3, 5, 0),          // a count-only slot, exact already
        ];
        let seen: HashMap<SlotId, (u64, u64)> = [
            (SlotId::of_index(0), (20, 10_500_000)),
            (SlotId::of_index(1), (5, 0)),
            (SlotId::of_index(2), (4, 40)),
        ]
        .into();
        scale_to_seen(&mut samples, &seen);
        let got: Vec<(usize, Vec<u64>, u64, u64)> = samples
            .iter()
            .map(|s| (s.slot.index(), s.ips.clone(), s.count, s.wait_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, vec![1], 19, 1_050_000),
                (0, vec![2], 1, 9_450_000),
                (1, vec![3], 5, 0),
                (2, vec![], 4, 40),
            ]
        );
    }

    fn at(slot: usize, line: u32, role: u32, ip: u64, count: u64, wait_ns: u64) -> StackSample {
        let mut s = sample(slot, ip, count, wait_ns);
        s.site.line = line;
        s.role = role;
        s
    }

    fn cells(rows: &[(usize, u32, u32, u64, u64)]) -> Cells {
        rows.iter()
            .map(|&(slot, line, role, c, w)| {
                let site = Callsite {
                    line,
                    ..Callsite::default()
                };
                ((SlotId::of_index(slot), site, role), (c, w))
            })
            .collect()
    }

    fn got(samples: &[StackSample]) -> Vec<(u32, u32, Vec<u64>, bool, u64, u64)> {
        let mut v: Vec<_> = samples
            .iter()
            .map(|s| {
                (
                    s.site.line,
                    s.role,
                    s.ips.clone(),
                    s.unsampled,
                    s.count,
                    s.wait_ns,
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The case that made this: one background thread's stack weighted
    /// for every hit of the slot, while the table gives 101 of its 112
    /// calls to connections. Calibrated, the background stack carries
    /// its 11, the connections' cell its 101 without a stack.
    #[test]
    fn a_cell_without_a_stack_keeps_its_exact_share() {
        let mut samples = vec![at(0, 7, 2, 0xa, 112, 5_000)];
        let seen = [(SlotId::of_index(0), (112, 5_000))].into();
        let table = cells(&[(0, 7, 1, 101, 4_000), (0, 7, 2, 11, 1_000)]);
        scale_to_cells(&mut samples, &seen, &table);
        assert_eq!(
            got(&samples),
            vec![
                (7, 1, vec![], true, 101, 4_000),
                (7, 2, vec![0xa], false, 11, 1_000),
            ]
        );
    }

    /// Within a cell the stacks keep their sampled proportions; across
    /// cells the table's; the slot's totals are the sampler's (the
    /// table counted more: the sampler's map lost some).
    #[test]
    fn stacks_split_as_the_table_and_within_a_cell_as_sampled() {
        let mut samples = vec![
            at(0, 1, 1, 0xa, 30, 3_000),
            at(0, 1, 1, 0xb, 10, 1_000),
            at(0, 2, 1, 0xc, 900, 60),
            at(1, 1, 1, 0xd, 5, 0),
        ];
        let seen = [
            (SlotId::of_index(0), (100, 1_000)),
            (SlotId::of_index(1), (5, 0)),
        ]
        .into();
        let table = cells(&[(0, 1, 1, 50, 500), (0, 2, 1, 50, 500), (1, 1, 1, 5, 0)]);
        scale_to_cells(&mut samples, &seen, &table);
        assert_eq!(
            got(&samples),
            vec![
                (1, 1, vec![0xa], false, 38, 375),
                (1, 1, vec![0xb], false, 12, 125),
                (1, 1, vec![0xd], false, 5, 0),
                (2, 1, vec![0xc], false, 50, 500),
            ]
        );
    }

    /// A stack in a cell the table does not hold: the table cannot be
    /// trusted for that slot, which is scaled whole as before.
    #[test]
    fn a_slot_the_table_misses_is_scaled_whole() {
        let mut samples = vec![at(0, 1, 1, 0xa, 3, 30), at(0, 9, 1, 0xb, 1, 10)];
        let seen = [(SlotId::of_index(0), (8, 80))].into();
        let table = cells(&[(0, 1, 1, 8, 80)]);
        scale_to_cells(&mut samples, &seen, &table);
        assert_eq!(
            got(&samples),
            vec![
                (1, 1, vec![0xa], false, 6, 60),
                (9, 1, vec![0xb], false, 2, 20),
            ]
        );
    }
}
