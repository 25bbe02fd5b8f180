//! Hits made before their thread's role was known, given the role the
//! thread settled on.
//!
//! The BPF side labels each hit with its thread's role as it stands at
//! that hit; a thread's first hits can come before a walk of its stack has
//! found its marker (a stack that ended early in code without frame
//! pointers, or deeper than the walk). Those hits are `unknown` in the
//! call-site cells and in the stacks, while the per-thread counts, told by
//! the role the thread settled on, put them under it: a connection's first,
//! cold, page reads were 25 points of `innodb.buf.page_get`'s wait on
//! MariaDB 10.2.11 that the role table gave to connections and the flame
//! graph to `unknown`. Where every such hit of a slot came from threads
//! that settled on one role, and they are all of the slot's unknown hits,
//! they are that role's, exactly: the cells and the stacks say so too.
//! Otherwise (threads of several roles, or some still unknown) they stay
//! unknown everywhere, as each hit was labelled.

use std::collections::HashMap;

use super::sample::StackSample;
use crate::bpf::abi::{Callsite, SiteVal, SlotId, ThreadVal};

/// What [`settle_unlabelled`] reads and relabels of a read of the maps
/// (`MapsSnapshot`'s fields of those names).
pub struct Labelled<'a> {
    pub site_roles: &'a mut Vec<(SlotId, Callsite, u32, SiteVal)>,
    pub stacks: &'a mut [StackSample],
    pub threads: &'a mut [(SlotId, u32, ThreadVal)],
    pub thread_roles: &'a HashMap<u32, u32>,
}

/// Relabels, in place, the unknown cells and stacks of every slot whose
/// unknown hits all came from threads that settled on one role. Returns
/// the slots relabelled, with that role.
pub fn settle_unlabelled(snapshot: Labelled<'_>) -> HashMap<SlotId, u32> {
    // Per slot: the unlabelled hits' (calls, wait) per settled role.
    let mut by_slot: HashMap<SlotId, HashMap<u32, (u64, u64)>> = HashMap::new();
    for (slot, tid, v) in snapshot.threads.iter() {
        if v.unlabelled_calls == 0 && v.unlabelled_wait_ns == 0 {
            continue;
        }
        let role = snapshot.thread_roles.get(tid).copied().unwrap_or(0);
        let e = by_slot.entry(*slot).or_default().entry(role).or_default();
        e.0 += v.unlabelled_calls;
        e.1 += v.unlabelled_wait_ns;
    }
    let mut unknown_cells: HashMap<SlotId, (u64, u64)> = HashMap::new();
    for (slot, _, role, v) in snapshot.site_roles.iter() {
        if *role == 0 {
            let e = unknown_cells.entry(*slot).or_default();
            e.0 += v.calls;
            e.1 += v.wait_ns_total;
        }
    }
    let with_cells: std::collections::HashSet<SlotId> =
        snapshot.site_roles.iter().map(|(slot, ..)| *slot).collect();
    let settled: HashMap<SlotId, u32> = by_slot
        .into_iter()
        .filter_map(|(slot, roles)| {
            let mut it = roles.into_iter();
            let (role, sums) = it.next()?;
            // One role, known, and every unknown hit of the slot its own
            // (a slot without call-site cells: its stacks' unknown ones).
            let all = !with_cells.contains(&slot) || unknown_cells.get(&slot) == Some(&sums);
            (it.next().is_none() && role != 0 && all).then_some((slot, role))
        })
        .collect();
    if settled.is_empty() {
        return settled;
    }
    // Merged into the role's own cell where it has one; the map read can
    // hold thousands of cells, so by index, not by search.
    let mut merged: Vec<(SlotId, Callsite, u32, SiteVal)> =
        Vec::with_capacity(snapshot.site_roles.len());
    let mut at: HashMap<(SlotId, Callsite, u32), usize> = HashMap::new();
    for (slot, site, role, v) in std::mem::take(snapshot.site_roles) {
        let role = match settled.get(&slot) {
            Some(&to) if role == 0 => to,
            _ => role,
        };
        match at.get(&(slot, site, role)) {
            Some(&i) => merged[i].3 += &v,
            None => {
                at.insert((slot, site, role), merged.len());
                merged.push((slot, site, role, v));
            }
        }
    }
    *snapshot.site_roles = merged;
    // Told now: none of their hits is unlabelled any more.
    for (slot, _, v) in snapshot.threads.iter_mut() {
        if settled.contains_key(slot) {
            v.unlabelled_calls = 0;
            v.unlabelled_wait_ns = 0;
        }
    }
    for s in snapshot.stacks.iter_mut() {
        if s.role == 0 {
            if let Some(&to) = settled.get(&s.slot) {
                s.role = to;
            }
        }
    }
    settled
}

/// Cells for the slots the call-site table has none of (probes that read
/// no call site or latch: the BPF side keeps no cell for them), from the
/// per-thread counts: each thread's hits under the role it settled on,
/// but those made before it was known under `unknown`, as each hit's
/// stack was labelled. With them [`super::scale::scale_to_cells`] splits those
/// probes' stacks by role as the role table does (before, a cut probe's
/// few stacks, one in 1,024 hits, split by role as they fell: 16 points
/// from the table on `innodb.sync.wait_event`).
pub fn role_cells(
    threads: &[(SlotId, u32, ThreadVal)],
    thread_roles: &HashMap<u32, u32>,
    cells: &mut super::scale::Cells,
) {
    let with_cells: std::collections::HashSet<SlotId> = cells.keys().map(|k| k.0).collect();
    for (slot, tid, v) in threads {
        if with_cells.contains(slot) {
            continue;
        }
        let role = thread_roles.get(tid).copied().unwrap_or(0);
        let mut add = |role: u32, calls: u64, wait: u64| {
            if calls > 0 || wait > 0 {
                let e = cells.entry((*slot, Callsite::default(), role)).or_default();
                e.0 += calls;
                e.1 += wait;
            }
        };
        let (early_calls, early_wait) = if role == 0 {
            (v.calls, v.wait_ns)
        } else {
            (v.unlabelled_calls, v.unlabelled_wait_ns)
        };
        add(
            role,
            v.calls.saturating_sub(early_calls),
            v.wait_ns.saturating_sub(early_wait),
        );
        add(0, early_calls, early_wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts of a read of the maps the tests give.
    #[derive(Default)]
    struct Snap {
        site_roles: Vec<(SlotId, Callsite, u32, SiteVal)>,
        stacks: Vec<StackSample>,
        threads: Vec<(SlotId, u32, ThreadVal)>,
        thread_roles: HashMap<u32, u32>,
    }

    impl Snap {
        fn settle(&mut self) -> HashMap<SlotId, u32> {
            settle_unlabelled(Labelled {
                site_roles: &mut self.site_roles,
                stacks: &mut self.stacks,
                threads: &mut self.threads,
                thread_roles: &self.thread_roles,
            })
        }
    }

    fn cell(slot: SlotId, role: u32, calls: u64, wait: u64) -> (SlotId, Callsite, u32, SiteVal) {
        let v = SiteVal {
            calls,
            wait_ns_total: wait,
            wait_ns_max: wait,
        };
        (slot, Callsite::default(), role, v)
    }

    fn thread(
        slot: SlotId,
        tid: u32,
        calls: u64,
        wait: u64,
        early: (u64, u64),
    ) -> (SlotId, u32, ThreadVal) {
        let v = ThreadVal {
            calls,
            wait_ns: wait,
            unlabelled_calls: early.0,
            unlabelled_wait_ns: early.1,
        };
        (slot, tid, v)
    }

    /// Two connections whose first hits came before their role was known:
    /// their slot's unknown cell is theirs, merged into the connection
    /// cell; a slot whose unknown hits came from threads of two roles
    /// keeps them unknown.
    #[test]
    fn early_hits_take_the_one_role_their_threads_settled_on() {
        let (a, b) = (SlotId::of_index(0), SlotId::of_index(1));
        let (conn, purge) = (3, 5);
        let mut snap = Snap {
            site_roles: vec![
                cell(a, 0, 2, 900),
                cell(a, conn, 8, 100),
                cell(b, 0, 2, 20),
                cell(b, conn, 5, 50),
            ],
            threads: vec![
                thread(a, 7, 6, 950, (1, 800)),
                thread(a, 8, 4, 50, (1, 100)),
                thread(b, 7, 3, 30, (1, 10)),
                thread(b, 9, 4, 40, (1, 10)),
            ],
            ..Default::default()
        };
        snap.thread_roles.extend([(7, conn), (8, conn), (9, purge)]);
        let settled = snap.settle();
        assert_eq!(settled, HashMap::from([(a, conn)]));
        let of = |slot, role| {
            snap.site_roles
                .iter()
                .filter(|(s, _, r, _)| *s == slot && *r == role)
                .map(|(.., v)| (v.calls, v.wait_ns_total, v.wait_ns_max))
                .collect::<Vec<_>>()
        };
        assert_eq!(of(a, conn), [(10, 1000, 900)]);
        assert!(of(a, 0).is_empty());
        assert_eq!(of(b, 0), [(2, 20, 20)]);
    }

    /// Unknown hits that no thread row accounts for (a thread that settled
    /// unknown, or the thread map full) keep the slot unknown.
    #[test]
    fn unknown_hits_no_thread_accounts_for_stay_unknown() {
        let a = SlotId::of_index(0);
        let mut snap = Snap {
            site_roles: vec![cell(a, 0, 3, 30), cell(a, 3, 1, 10)],
            threads: vec![thread(a, 7, 3, 30, (2, 20))],
            ..Default::default()
        };
        snap.thread_roles.insert(7, 3);
        assert!(snap.settle().is_empty());
        assert_eq!(snap.site_roles.len(), 2);
    }

    /// A probe without call-site cells gets its cells from the threads:
    /// hits before a thread's role was known under unknown; a slot with
    /// cells is left alone.
    #[test]
    fn cells_from_threads_where_the_table_has_none() {
        let (a, b) = (SlotId::of_index(0), SlotId::of_index(1));
        let threads = vec![
            thread(a, 7, 10, 1000, (2, 300)),
            thread(a, 8, 5, 50, (5, 50)),
            thread(b, 7, 4, 40, (0, 0)),
        ];
        let roles = HashMap::from([(7, 3)]);
        let mut cells = crate::collect::scale::Cells::new();
        cells.insert((b, Callsite::default(), 3), (4, 40));
        role_cells(&threads, &roles, &mut cells);
        assert_eq!(cells.get(&(a, Callsite::default(), 3)), Some(&(8, 700)));
        assert_eq!(cells.get(&(a, Callsite::default(), 0)), Some(&(7, 350)));
        assert_eq!(cells.get(&(b, Callsite::default(), 3)), Some(&(4, 40)));
        assert_eq!(cells.len(), 3);
    }
}
