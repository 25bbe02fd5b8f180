//! Reading the BPF maps into plain totals. Userspace reads only aggregates.

use std::collections::HashMap;

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap, StackTraceMap};
use aya::Ebpf;
use serde::Serialize;

use crate::bpf_abi::{Callsite, SiteKey, SiteVal, SlotStats, StackKey, StackVal, DROP_REASONS};
use crate::catalog::Measure;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("BPF map `{0}` is missing or of the wrong type")]
    Map(&'static str),
    #[error("reading BPF map `{map}`: {source}")]
    Read {
        map: &'static str,
        source: aya::maps::MapError,
    },
}

/// What the BPF side could not record, by reason.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Drops {
    pub stack_collisions: u64,
    pub stack_errors: u64,
    pub stack_key_map_full: u64,
    pub inflight_map_full: u64,
    pub returns_without_entry: u64,
    pub stats_map_full: u64,
    pub callsite_map_full: u64,
}

#[derive(Debug, Clone)]
pub struct StackSample {
    pub slot: u64,
    /// Instruction pointers, innermost first; empty when the stack was lost.
    pub ips: Vec<u64>,
    pub site: Callsite,
    pub count: u64,
    pub wait_ns: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub slots: HashMap<u64, SlotStats>,
    pub stacks: Vec<StackSample>,
    /// Per (slot, call site): calls, total and max wait.
    pub sites: Vec<(u64, Callsite, SiteVal)>,
    pub drops: Drops,
}

/// Calls and wait so far per slot, summed over CPUs: the cheap live read
/// the overhead governor makes while probes fire.
pub fn read_slot_counts(
    ebpf: &Ebpf,
) -> Result<HashMap<usize, crate::governor::SlotCount>, CollectError> {
    let map = ebpf.map("stats").ok_or(CollectError::Map("stats"))?;
    let stats: PerCpuHashMap<&MapData, u64, SlotStats> =
        PerCpuHashMap::try_from(map).map_err(|_| CollectError::Map("stats"))?;
    let mut calls = HashMap::new();
    for item in stats.iter() {
        let (slot, per_cpu) = item.map_err(|source| CollectError::Read {
            map: "stats",
            source,
        })?;
        calls.insert(
            slot as usize,
            crate::governor::SlotCount {
                calls: per_cpu.iter().map(|s| s.calls).sum(),
                wait_ns: per_cpu.iter().map(|s| s.wait_ns_total).sum(),
            },
        );
    }
    Ok(calls)
}

/// The cumulative counters alone (no stacks): cheap enough to read while
/// the probes stay attached, for interval series and live export.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Per slot, summed over CPUs.
    pub slots: HashMap<u64, SlotStats>,
    /// Per (slot, call site): calls, total and max wait.
    pub sites: Vec<(u64, Callsite, SiteVal)>,
    pub drops: Drops,
}

impl Counters {
    /// One probe's totals: the sum of its slots (symbols).
    pub fn probe_total(&self, slots: &[u64]) -> SlotStats {
        let mut sum = SlotStats::default();
        for st in slots.iter().filter_map(|s| self.slots.get(s)) {
            sum.calls += st.calls;
            sum.wait_ns_total += st.wait_ns_total;
            sum.wait_ns_max = sum.wait_ns_max.max(st.wait_ns_max);
            for (a, b) in sum.hist.iter_mut().zip(st.hist.iter()) {
                *a += b;
            }
        }
        sum
    }

    /// One probe's call sites, with their cumulative counts.
    pub fn probe_sites<'a>(
        &'a self,
        slots: &'a [u64],
    ) -> impl Iterator<Item = (Callsite, SiteVal)> + 'a {
        self.sites
            .iter()
            .filter(move |(slot, _, _)| slots.contains(slot))
            .map(|(_, site, val)| (*site, *val))
    }
}

/// An attached probe as live readers see it: its name and which slots
/// (attached symbols) are its.
#[derive(Debug, Clone)]
pub struct LiveProbe {
    /// Its index in the plan (and in `Recorder::attached_seconds`).
    pub probe: usize,
    pub name: String,
    pub measure: Measure,
    /// The catalog says where its caller's `file`/`line` are.
    pub has_callsites: bool,
    pub slots: Vec<u64>,
}

/// Everything, stacks included: read once, after the probes are detached.
pub fn read(ebpf: &Ebpf) -> Result<Snapshot, CollectError> {
    let Counters {
        slots,
        sites,
        drops,
    } = read_counters(ebpf)?;
    Ok(Snapshot {
        slots,
        stacks: read_stacks(ebpf)?,
        sites,
        drops,
    })
}

fn map<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a aya::maps::Map, CollectError> {
    ebpf.map(name).ok_or(CollectError::Map(name))
}

fn read_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> CollectError {
    move |source| CollectError::Read { map, source }
}

/// Per-slot stats, call sites and drop counts; no stacks.
pub fn read_counters(ebpf: &Ebpf) -> Result<Counters, CollectError> {
    let map = |name| map(ebpf, name);
    let stats: PerCpuHashMap<&MapData, u64, SlotStats> =
        PerCpuHashMap::try_from(map("stats")?).map_err(|_| CollectError::Map("stats"))?;
    let mut slots = HashMap::new();
    for item in stats.iter() {
        let (slot, per_cpu) = item.map_err(read_err("stats"))?;
        let mut sum = SlotStats::default();
        for s in per_cpu.iter() {
            sum.calls += s.calls;
            sum.wait_ns_total += s.wait_ns_total;
            sum.wait_ns_max = sum.wait_ns_max.max(s.wait_ns_max);
            for (a, b) in sum.hist.iter_mut().zip(s.hist.iter()) {
                *a += b;
            }
        }
        slots.insert(slot, sum);
    }

    let site_map: BpfHashMap<&MapData, SiteKey, SiteVal> =
        BpfHashMap::try_from(map("site_stats")?).map_err(|_| CollectError::Map("site_stats"))?;
    let mut sites = Vec::new();
    for item in site_map.iter() {
        let (key, val) = item.map_err(read_err("site_stats"))?;
        sites.push((key.slot, key.site, val));
    }

    let drops_map: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(map("drops")?).map_err(|_| CollectError::Map("drops"))?;
    let mut totals = [0u64; DROP_REASONS.len()];
    for reason in DROP_REASONS {
        let idx = reason as u32;
        totals[idx as usize] = drops_map
            .get(&idx, 0)
            .map_err(read_err("drops"))?
            .iter()
            .sum();
    }
    let drops = Drops {
        stack_collisions: totals[0],
        stack_errors: totals[1],
        stack_key_map_full: totals[2],
        inflight_map_full: totals[3],
        returns_without_entry: totals[4],
        stats_map_full: totals[5],
        callsite_map_full: totals[6],
    };
    Ok(Counters {
        slots,
        sites,
        drops,
    })
}

fn read_stacks(ebpf: &Ebpf) -> Result<Vec<StackSample>, CollectError> {
    let map = |name| map(ebpf, name);
    let traces: StackTraceMap<&MapData> =
        StackTraceMap::try_from(map("stacks")?).map_err(|_| CollectError::Map("stacks"))?;
    let counts: BpfHashMap<&MapData, StackKey, StackVal> =
        BpfHashMap::try_from(map("stack_counts")?)
            .map_err(|_| CollectError::Map("stack_counts"))?;
    let mut stacks = Vec::new();
    for item in counts.iter() {
        let (key, val) = item.map_err(read_err("stack_counts"))?;
        let ips = if key.stack_id >= 0 {
            // A stack id can be gone if its bucket was reused; treat as lost.
            traces
                .get(&(key.stack_id as u32), 0)
                .map(|t| t.frames().iter().map(|f| f.ip).collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        stacks.push(StackSample {
            slot: key.slot,
            ips,
            site: key.site,
            count: val.count,
            wait_ns: val.wait_ns,
        });
    }
    Ok(stacks)
}
