//! Reading the BPF maps into plain totals. Userspace reads only aggregates.

use crate::bpf::layout::defines;
use crate::bpf::layout::latency as bpf;
use std::collections::HashMap;

use libbpf_rs::{Map, MapCore, MapFlags, Object};
use serde::Serialize;

mod sample;
mod scale;
mod settle;
pub use sample::StackSample;
pub use scale::{cells_of, cells_since, scale_to_cells, Cells};
pub use settle::{role_cells, settle_unlabelled, Labelled};

use crate::attach::Session;
use crate::bpf::abi::{
    from_bytes, Callsite, HolderKey, SiteKey, SiteVal, SlotId, SlotStats, StackHold, StackKey,
    StackStmtRec, StackVal, StmtKey, StmtLatchKey, StmtText, StmtVal, ThreadKey, ThreadVal,
    DROP_REASONS,
};
use crate::plan::catalog::Measure;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("BPF map `{0}` is missing or of the wrong type")]
    Map(&'static str),
    #[error("reading BPF map `{map}`")]
    Read {
        map: &'static str,
        #[source]
        source: libbpf_rs::Error,
    },
    #[error("BPF map `{0}` returned a value of the wrong size")]
    Layout(&'static str),
}

/// What the BPF side could not record, by reason.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Drops {
    /// New stacks not stored: the `stacks` map was full.
    pub stack_map_full: u64,
    pub stack_errors: u64,
    pub stack_key_map_full: u64,
    pub inflight_map_full: u64,
    pub returns_without_entry: u64,
    pub stats_map_full: u64,
    pub callsite_map_full: u64,
    /// Hits whose stack was not taken: a preempted hit on the same CPU
    /// held the stack buffer (still counted, under `[lost stack]`).
    #[serde(default)]
    pub stack_busy: u64,
    /// Hits not tied to their thread: the (probe, thread) map was full
    /// (counted in the probe's totals, under no role).
    #[serde(default)]
    pub thread_map_full: u64,
}

impl Drops {
    /// Adds another recording's drops (`record --follow`'s segments).
    pub fn add(&mut self, o: &Self) {
        self.stack_map_full += o.stack_map_full;
        self.stack_errors += o.stack_errors;
        self.stack_key_map_full += o.stack_key_map_full;
        self.inflight_map_full += o.inflight_map_full;
        self.returns_without_entry += o.returns_without_entry;
        self.stats_map_full += o.stats_map_full;
        self.callsite_map_full += o.callsite_map_full;
        self.stack_busy += o.stack_busy;
        self.thread_map_full += o.thread_map_full;
    }
}

#[derive(Debug, Clone, Default)]
pub struct MapsSnapshot {
    pub slots: HashMap<SlotId, SlotStats>,
    pub stacks: Vec<StackSample>,
    /// Per slot, every hit that reached the stack sampler (calls, wait
    /// ns), exactly: what [`scale_to_cells`] scales `stacks` to.
    pub stack_seen: HashMap<SlotId, (u64, u64)>,
    /// Per (slot, call site): calls, total and max wait.
    pub sites: Vec<(SlotId, Callsite, SiteVal)>,
    /// The same per calling thread's role too (role id; 0: unknown).
    pub site_roles: Vec<(SlotId, Callsite, u32, SiteVal)>,
    /// Per (slot, thread id): every hit's calls and wait.
    pub threads: Vec<(SlotId, u32, ThreadVal)>,
    /// Each thread's role id, as the BPF side found it at its first hit.
    pub thread_roles: HashMap<u32, u32>,
    pub drops: Drops,
}

/// Calls and wait so far per slot, summed over CPUs: the cheap live read
/// the overhead governor makes while probes fire.
fn read_slot_counts_in(
    obj: &Object,
    n_slots: usize,
) -> Result<HashMap<SlotId, SlotCount>, CollectError> {
    // The governor's read: the four counters it uses summed straight from
    // the batch's buffer (no histogram, no per-CPU copies).
    sum_slot_stats(
        obj,
        n_slots,
        |c: &mut SlotCount, s| {
            c.calls += s.calls;
            c.wait_ns += s.wait_ns_total;
            c.stacks += s.stacks;
            c.off_hits += s.off_hits;
        },
        |c| c.calls > 0 || c.off_hits > 0,
    )
}

/// Per-slot stats summed over CPUs, for slots `0..n_slots` (slot ids are
/// dense), in one batched read of the per-CPU array.
fn read_slot_stats(
    obj: &Object,
    n_slots: usize,
) -> Result<HashMap<SlotId, SlotStats>, CollectError> {
    sum_slot_stats(
        obj,
        n_slots,
        |t: &mut SlotStats, s| *t += s,
        |t| t.calls > 0,
    )
}

/// The `stats` map's values of slots `0..n_slots`, each CPU's added into
/// a `T` by `add`; the slots whose sum `keep` accepts.
fn sum_slot_stats<T: Default + Clone>(
    obj: &Object,
    n_slots: usize,
    add: impl Fn(&mut T, &SlotStats),
    keep: impl Fn(&T) -> bool,
) -> Result<HashMap<SlotId, T>, CollectError> {
    let stats = map(obj, bpf::maps::STATS)?;
    let mut sums = vec![T::default(); n_slots];
    let mut layout_ok = true;
    for_each_percpu_value(&stats, n_slots, |slot, v| {
        match from_bytes::<SlotStats>(v) {
            Some(s) => add(&mut sums[slot], &s),
            None => layout_ok = false,
        }
    })
    .map_err(read_err(bpf::maps::STATS))?;
    if !layout_ok {
        return Err(CollectError::Layout(bpf::maps::STATS));
    }
    Ok(sums
        .into_iter()
        .enumerate()
        .filter(|(_, t)| keep(t))
        .map(|(slot, t)| (SlotId::of_index(slot), t))
        .collect())
}

/// Calls `each(index, value)` for the first `n` entries of a per-CPU
/// array, once per possible CPU, read with BPF_MAP_LOOKUP_BATCH (one
/// syscall instead of `n`: the governor reads the slots twenty times a
/// second) into one buffer.
fn for_each_percpu_value(
    map: &Map,
    n: usize,
    mut each: impl FnMut(usize, &[u8]),
) -> Result<(), libbpf_rs::Error> {
    if n == 0 {
        return Ok(());
    }
    // The kernel writes keys and values laid out by the map it has: make
    // sure that is the map this buffer is sized for (a stale object with a
    // per-CPU hash and 8-byte keys overran the key buffer once), else take
    // the slower, checked way.
    if map.map_type() != libbpf_rs::MapType::PercpuArray || map.key_size() != 4 {
        for i in 0..n {
            let per_cpu = map
                .lookup_percpu(&SlotId::of_index(i).key(), MapFlags::ANY)?
                .unwrap_or_default();
            for v in &per_cpu {
                each(i, v);
            }
        }
        return Ok(());
    }
    let cpus = crate::bpf::percpu::possible_cpus()?;
    let value_size = map.value_size() as usize;
    // The kernel lays per-CPU values out 8-byte aligned.
    let stride = value_size.div_ceil(8) * 8;
    let mut keys = vec![0u8; n * 4];
    let mut values = vec![0u8; n * cpus * stride];
    let mut out_batch = [0u8; 8];
    let (count, errno) = lookup_batch(map, None, &mut out_batch, &mut keys, &mut values, n, false);
    // ENOENT: the batch reached the end of the array (all of it read).
    if errno != 0 && errno != libc::ENOENT {
        return Err(libbpf_rs::Error::from(std::io::Error::from_raw_os_error(
            errno,
        )));
    }
    for i in 0..count {
        for c in 0..cpus {
            let at = (i * cpus + c) * stride;
            each(i, &values[at..at + value_size]);
        }
    }
    Ok(())
}

/// Cumulative counters of one slot, as read from the maps.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlotCount {
    pub calls: u64,
    pub wait_ns: u64,
    /// Stacks taken (not used by the governor; the cost model reads it).
    pub stacks: u64,
    /// Hits while switched off, before the kernel detached the slot: each
    /// paid the trap, so each is charged to the budget.
    pub off_hits: u64,
}

impl From<&crate::bpf::abi::SlotStats> for SlotCount {
    fn from(s: &crate::bpf::abi::SlotStats) -> Self {
        Self {
            calls: s.calls,
            wait_ns: s.wait_ns_total,
            stacks: s.stacks,
            off_hits: s.off_hits,
        }
    }
}

/// The cumulative counters alone (no stacks): cheap enough to read while
/// the probes stay attached, for interval series and live export.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Per slot, summed over CPUs.
    pub slots: HashMap<SlotId, SlotStats>,
    /// Per (slot, call site): calls, total and max wait.
    pub sites: Vec<(SlotId, Callsite, SiteVal)>,
    /// The same per calling thread's role too (role id; 0: unknown).
    pub site_roles: Vec<(SlotId, Callsite, u32, SiteVal)>,
    /// Per (slot, role id): calls and wait of the threads of that role.
    pub roles: Vec<(SlotId, u32, ThreadVal)>,
    pub drops: Drops,
}

impl Counters {
    /// One probe's calls and wait per role id, summed over its slots.
    pub fn probe_roles(&self, slots: &[SlotId]) -> std::collections::BTreeMap<u32, ThreadVal> {
        let mut out = std::collections::BTreeMap::new();
        for (_, role, v) in self.roles.iter().filter(|(s, ..)| slots.contains(s)) {
            let e: &mut ThreadVal = out.entry(*role).or_default();
            *e += v;
        }
        out
    }

    /// One probe's totals: the sum of its slots (symbols).
    pub fn probe_total(&self, slots: &[SlotId]) -> SlotStats {
        let mut sum = SlotStats::default();
        for st in slots.iter().filter_map(|s| self.slots.get(s)) {
            sum += st;
        }
        sum
    }

    /// One probe's call sites, with their cumulative counts.
    pub fn probe_sites<'a>(
        &'a self,
        slots: &'a [SlotId],
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
    pub slots: Vec<SlotId>,
}

/// Everything, stacks included: read once, after the probes are detached.
fn read_in(obj: &Object, n_slots: usize) -> Result<MapsSnapshot, CollectError> {
    let Counters {
        slots,
        sites,
        site_roles,
        drops,
        ..
    } = read_counters_in(obj, n_slots)?;
    let (threads, thread_roles) = read_threads(obj)?;
    let StackRead { samples, seen } = read_stacks_in(obj, n_slots)?;
    Ok(MapsSnapshot {
        slots,
        stacks: samples,
        stack_seen: seen,
        sites,
        site_roles,
        threads,
        thread_roles,
        drops,
    })
}

/// The object's map `name` (the latency object's, or the CPU profiler's).
pub(crate) fn map<'a>(obj: &'a Object, name: &'static str) -> Result<Map<'a>, CollectError> {
    obj.maps()
        .find(|m| m.name() == name)
        .ok_or(CollectError::Map(name))
}

pub(crate) fn read_err(map: &'static str) -> impl Fn(libbpf_rs::Error) -> CollectError {
    move |source| CollectError::Read { map, source }
}

/// Every (key, value) of a hash map, decoded.
pub(crate) fn read_hash<K: bytemuck::Pod, V: bytemuck::Pod>(
    obj: &Object,
    name: &'static str,
) -> Result<Vec<(K, V)>, CollectError> {
    let m = map(obj, name)?;
    if let Some(out) = read_hash_batched(&m, name, false)? {
        return Ok(out);
    }
    let mut out = Vec::new();
    for key in m.keys() {
        // A key deleted between the walk and the lookup is simply gone.
        let Some(val) = m.lookup(&key, MapFlags::ANY).map_err(read_err(name))? else {
            continue;
        };
        let k = from_bytes(&key).ok_or(CollectError::Layout(name))?;
        let v = from_bytes(&val).ok_or(CollectError::Layout(name))?;
        out.push((k, v));
    }
    Ok(out)
}

/// Every entry of a hash map by BPF_MAP_LOOKUP_BATCH, a few hundred per
/// syscall: walking it key by key costs two syscalls and three hashes of
/// the key per entry, and the CPU profiler's keys are whole stacks
/// (1.5 KiB; ~20 ms for a 30 s recording's few thousand). None where the
/// map is no hash or the kernel has no batch operations for it.
fn read_hash_batched<K: bytemuck::Pod, V: bytemuck::Pod>(
    map: &impl MapCore,
    name: &'static str,
    delete: bool,
) -> Result<Option<Vec<(K, V)>>, CollectError> {
    use libbpf_rs::MapType;
    if !matches!(map.map_type(), MapType::Hash | MapType::LruHash) {
        return Ok(None);
    }
    let key_size = map.key_size() as usize;
    let value_size = map.value_size() as usize;
    // The batch position is a bucket index the kernel hands back (4
    // bytes for a hash map); a key-sized buffer holds it whatever it is.
    let token_size = key_size.max(8);
    let mut in_batch: Option<Vec<u8>> = None;
    let mut out_batch = vec![0u8; token_size];
    let mut chunk = 256usize;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let mut out = Vec::new();
    loop {
        keys.resize(chunk * key_size, 0);
        values.resize(chunk * value_size, 0);
        let (count, errno) = lookup_batch(
            map,
            in_batch.as_deref_mut(),
            &mut out_batch,
            &mut keys,
            &mut values,
            chunk,
            delete,
        );
        match errno {
            0 | libc::ENOENT => {}
            // One bucket holds more entries than the chunk: a bigger one.
            libc::ENOSPC if chunk < 1 << 16 => {
                chunk *= 4;
                continue;
            }
            // No batch operations on this kernel or map: key by key.
            libc::EINVAL | libc::EOPNOTSUPP | 524 if in_batch.is_none() => return Ok(None),
            e => {
                let source = std::io::Error::from_raw_os_error(e).into();
                return Err(CollectError::Read { map: name, source });
            }
        }
        for (k, v) in keys
            .chunks_exact(key_size)
            .zip(values.chunks_exact(value_size))
            .take(count)
        {
            let layout = || CollectError::Layout(name);
            out.push((
                from_bytes(k).ok_or_else(layout)?,
                from_bytes(v).ok_or_else(layout)?,
            ));
        }
        // ENOENT: the walk reached the last bucket.
        if errno == libc::ENOENT {
            return Ok(Some(out));
        }
        in_batch = Some(out_batch.clone());
    }
}

/// Entry `idx` of a per-CPU array of u64 counters, summed over the CPUs.
fn percpu_u64_sum(map: &Map<'_>, name: &'static str, idx: u32) -> Result<u64, CollectError> {
    Ok(map
        .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)
        .map_err(read_err(name))?
        .unwrap_or_default()
        .iter()
        .filter_map(|v| from_bytes::<u64>(v))
        .sum())
}

/// Every (key, value) of a hash map, each deleted as it is read (a
/// BPF_MAP_LOOKUP_AND_DELETE_BATCH; key by key where the kernel has none).
/// A hit that updates an entry as it is taken may be lost with it.
pub(crate) fn take_hash<K: bytemuck::Pod, V: bytemuck::Pod>(
    obj: &Object,
    name: &'static str,
) -> Result<Vec<(K, V)>, CollectError> {
    let m = map(obj, name)?;
    if let Some(out) = read_hash_batched(&m, name, true)? {
        return Ok(out);
    }
    let out: Vec<(K, V)> = read_hash(obj, name)?;
    for (k, _) in &out {
        let _ = m.delete(bytemuck::bytes_of(k));
    }
    Ok(out)
}

/// Every record in a ring buffer map now (what BPF wrote since the last
/// take), each a `T`.
fn take_ring<T: bytemuck::Pod>(obj: &Object, name: &'static str) -> Result<Vec<T>, CollectError> {
    let m = map(obj, name)?;
    let out = std::cell::RefCell::new(Vec::new());
    let mut builder = libbpf_rs::RingBufferBuilder::new();
    builder
        .add(&m, |data: &[u8]| {
            if let Some(r) = from_bytes::<T>(data) {
                out.borrow_mut().push(r);
            }
            0
        })
        .map_err(read_err(name))?;
    let ring = builder.build().map_err(read_err(name))?;
    ring.consume().map_err(read_err(name))?;
    drop(ring);
    Ok(out.into_inner())
}

/// The statements' rows taken out of their maps (`stmt_stats`,
/// `stmt_text`), and the hits lost per [`StmtLost`] reason so far.
pub fn take_statements(session: &Session) -> Result<StatementRows, CollectError> {
    let obj = session.object();
    let stats = take_hash::<StmtKey, StmtVal>(obj, bpf::maps::STMT_STATS)?
        .into_iter()
        .map(|(k, v)| (k.query_id, SlotId::from_kernel(u64::from(k.slot)), v))
        .collect();
    // Holders before texts: a holder's text is written before its edge.
    let holders = take_hash::<HolderKey, StmtVal>(obj, bpf::maps::HOLDER_STATS)?
        .into_iter()
        .map(|(k, v)| (SlotId::from_kernel(u64::from(k.slot)), k, v))
        .collect();
    let latches = take_hash::<StmtLatchKey, StmtVal>(obj, bpf::maps::STMT_LATCH)?
        .into_iter()
        .map(|(k, v)| {
            (
                k.query_id,
                SlotId::from_kernel(u64::from(k.slot)),
                k.latch_site(),
                v,
            )
        })
        .collect();
    // CPU samples before texts too: the sampler writes a text before it
    // counts the sample. And stacks: a hit reads its text before its stack.
    let cpu = take_hash::<u64, u64>(obj, bpf::maps::STMT_CPU)?;
    let stacks = take_ring::<StackStmtRec>(obj, bpf::maps::STACK_STMT)?;
    let texts = take_hash::<u64, StmtText>(obj, bpf::maps::STMT_TEXT)?;
    let lost_map = map(obj, bpf::maps::STMT_LOST)?;
    let lost = |reason: u64| percpu_u64_sum(&lost_map, bpf::maps::STMT_LOST, reason as u32);
    Ok(StatementRows {
        stats,
        texts,
        lost: StmtLost {
            keys_full: lost(defines::STMT_LOST_KEYS_FULL)?,
            text_full: lost(defines::STMT_LOST_TEXT_FULL)?,
            no_thd: lost(defines::STMT_LOST_NO_THD)?,
            holders_full: lost(defines::STMT_LOST_HOLDERS_FULL)?,
            latches_full: lost(defines::STMT_LOST_LATCHES_FULL)?,
            stacks_full: lost(defines::STMT_LOST_STACKS_FULL)?,
        },
        holders,
        latches,
        cpu,
        stacks,
    })
}

/// What [`take_statements`] took.
#[derive(Debug, Default)]
pub struct StatementRows {
    /// Per (query_id, slot): the hits of that statement on that probe.
    pub stats: Vec<(u64, SlotId, StmtVal)>,
    /// Per query_id: its text, connection and thread, as read at its first hit.
    pub texts: Vec<(u64, StmtText)>,
    pub lost: StmtLost,
    /// Per (slot, waiter statement, holder thread and statement): the
    /// waits for a latch's exclusive holder.
    pub holders: Vec<(SlotId, HolderKey, StmtVal)>,
    /// Per (query_id, slot, latch): a statement's hits on a latch, the
    /// latch as a call site with no caller ([`StmtLatchKey::latch_site`]).
    pub latches: Vec<(u64, SlotId, Callsite, StmtVal)>,
    /// Per query_id: the CPU sampler's on-CPU samples of it (`stmt_cpu`,
    /// filled only while the sampler shares these maps).
    pub cpu: Vec<(u64, u64)>,
    /// Per stack taken by a statement's hit: its counter, the query_id
    /// and the hits the stack carried (`stack_stmt`'s records).
    pub stacks: Vec<StackStmtRec>,
}

/// Connection hits not tied to a statement, since the start (totals).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StmtLost {
    /// `stmt_stats` was full.
    pub keys_full: u64,
    /// `stmt_text` was full (the statement is counted, its text unknown).
    pub text_full: u64,
    /// The THD or its query_id could not be read.
    pub no_thd: u64,
    /// `holder_stats` was full (a wait not tied to its holder).
    pub holders_full: u64,
    /// `stmt_latch` was full (a latch hit not tied to its statement; the
    /// statement's and the latch's own counts keep it).
    pub latches_full: u64,
    /// `stack_stmt` was full (a stack's hits not tied to its statement;
    /// its own counts keep them).
    pub stacks_full: u64,
}

/// One BPF_MAP_LOOKUP_BATCH of at most `max` entries into `keys` and
/// `values` (each at least `max` entries of the map's key and value
/// size), from the position `in_batch` (None: the start), the next one
/// written to `out_batch`: how many entries came back, and the errno (0
/// when none; ENOENT: the end was reached, the entries read still count).
fn lookup_batch(
    map: &impl MapCore,
    in_batch: Option<&mut [u8]>,
    out_batch: &mut [u8],
    keys: &mut [u8],
    values: &mut [u8],
    max: usize,
    delete: bool,
) -> (usize, i32) {
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    assert!(
        keys.len() >= max * map.key_size() as usize
            && values.len() >= max * map.value_size() as usize,
        "batch buffers too small for {max} entries"
    );
    let mut count = max as u32;
    // SAFETY: keys and values hold `max` entries of the map's key and
    // value sizes (checked above; per-CPU values are the caller's to
    // size), the batch buffers the kernel's position token; the kernel
    // writes no more than `count` entries.
    let batch = if delete {
        libbpf_rs::libbpf_sys::bpf_map_lookup_and_delete_batch
    } else {
        libbpf_rs::libbpf_sys::bpf_map_lookup_batch
    };
    let ret = unsafe {
        batch(
            std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(map)),
            in_batch.map_or(std::ptr::null_mut(), |b| b.as_mut_ptr().cast()),
            out_batch.as_mut_ptr().cast(),
            keys.as_mut_ptr().cast(),
            values.as_mut_ptr().cast(),
            &mut count,
            &opts,
        )
    };
    (count as usize, if ret < 0 { -ret } else { 0 })
}

/// The per (slot, thread) counts and each thread's role id.
#[allow(clippy::type_complexity)]
fn read_threads(
    obj: &Object,
) -> Result<(Vec<(SlotId, u32, ThreadVal)>, HashMap<u32, u32>), CollectError> {
    let threads = read_hash::<ThreadKey, ThreadVal>(obj, bpf::maps::THREAD_STATS)?
        .into_iter()
        .map(|(k, v)| (SlotId::from_kernel(u64::from(k.slot)), k.tid, v))
        .collect();
    let roles = read_hash::<u32, u32>(obj, bpf::maps::THREAD_ROLE)?
        .into_iter()
        .map(|(tid, v)| (tid, crate::bpf::abi::role_id(v)))
        .collect();
    Ok((threads, roles))
}

/// Takes the rows of threads that have exited out of the per-thread maps
/// (`thread_stats`, `thread_role`), each with the role it had, so that a
/// long live run (`serve`, `top`) keeps room for the threads to come: a
/// server whose connections come and go (no thread cache, or a pooler
/// reconnecting) makes a new thread for each, and `thread_stats` (65,536
/// (slot, thread) rows) would fill in minutes, after which no new
/// thread's hits would be told by role. `alive` says whether a thread id
/// is still one of the target's threads.
///
/// A thread that has exited adds nothing more, so reading a row and
/// deleting it loses no hit; only a new thread given the same id between
/// the check and the delete could lose the hits it made in that instant.
pub fn take_exited_threads(
    session: &Session,
    alive: impl Fn(u32) -> bool,
) -> Result<Vec<(SlotId, u32, ThreadVal)>, CollectError> {
    let obj = session.object();
    let rows = read_hash::<ThreadKey, ThreadVal>(obj, bpf::maps::THREAD_STATS)?;
    let roles: HashMap<u32, u32> = read_hash::<u32, u32>(obj, bpf::maps::THREAD_ROLE)?
        .into_iter()
        .map(|(tid, v)| (tid, crate::bpf::abi::role_id(v)))
        .collect();
    let mut exited: HashMap<u32, bool> = HashMap::new();
    let stats = map(obj, bpf::maps::THREAD_STATS)?;
    let mut taken = Vec::new();
    for (key, v) in rows {
        let tid = key.tid;
        if !*exited.entry(tid).or_insert_with(|| !alive(tid)) {
            continue;
        }
        // Gone already (a concurrent reader): nothing to take.
        if stats.delete(bytemuck::bytes_of(&key)).is_ok() {
            let slot = SlotId::from_kernel(u64::from(key.slot));
            taken.push((slot, roles.get(&tid).copied().unwrap_or(0), v));
        }
    }
    let role_map = map(obj, bpf::maps::THREAD_ROLE)?;
    for tid in exited.into_iter().filter(|(_, dead)| *dead).map(|(t, _)| t) {
        // A tid the kernel gives a new thread must be walked for its own role.
        let _ = role_map.delete(&tid.to_ne_bytes());
    }
    Ok(taken)
}

/// Per-slot stats, call sites and drop counts; no stacks.
fn read_counters_in(obj: &Object, n_slots: usize) -> Result<Counters, CollectError> {
    let slots = read_slot_stats(obj, n_slots)?;
    let site_roles: Vec<(SlotId, Callsite, u32, SiteVal)> =
        read_hash::<SiteKey, SiteVal>(obj, bpf::maps::SITE_STATS)?
            .into_iter()
            .map(|(k, v)| (SlotId::from_kernel(k.slot), k.site, k.role, v))
            .collect();
    // Per (slot, site) over every role, for readers that do not ask who.
    let mut merged: HashMap<(SlotId, Callsite), SiteVal> = HashMap::new();
    for (slot, site, _, v) in &site_roles {
        *merged.entry((*slot, *site)).or_default() += v;
    }
    let sites = merged
        .into_iter()
        .map(|((slot, site), v)| (slot, site, v))
        .collect();

    let drops_map = map(obj, bpf::maps::DROPS)?;
    let mut totals = [0u64; DROP_REASONS.len()];
    for reason in DROP_REASONS {
        let idx = reason as u32;
        totals[idx as usize] = percpu_u64_sum(&drops_map, bpf::maps::DROPS, idx)?;
    }
    let drops = Drops {
        stack_map_full: totals[0],
        stack_errors: totals[1],
        stack_key_map_full: totals[2],
        inflight_map_full: totals[3],
        returns_without_entry: totals[4],
        stats_map_full: totals[5],
        callsite_map_full: totals[6],
        stack_busy: totals[7],
        thread_map_full: totals[8],
    };
    let (threads, thread_roles) = read_threads(obj)?;
    let mut per_role: HashMap<(SlotId, u32), ThreadVal> = HashMap::new();
    for (slot, tid, v) in threads {
        let role = thread_roles.get(&tid).copied().unwrap_or(0);
        *per_role.entry((slot, role)).or_default() += &v;
    }
    let roles = per_role
        .into_iter()
        .map(|((slot, role), v)| (slot, role, v))
        .collect();
    Ok(Counters {
        slots,
        sites,
        site_roles,
        roles,
        drops,
    })
}

/// The stack counters as read, and what they are scaled to.
#[derive(Debug, Clone, Default)]
pub struct StackRead {
    /// Weighted samples: a timed slot's stacks carry threshold-sampled
    /// weights (estimates), a count-only slot's the hits themselves.
    pub samples: Vec<StackSample>,
    /// Per slot, every hit that reached the sampler, less the weight whose
    /// stack counter found the map full: (calls, wait ns).
    pub seen: HashMap<SlotId, (u64, u64)>,
}

impl StackRead {
    /// What was seen since `earlier` (a window's share), per slot.
    pub fn seen_since(&self, earlier: &HashMap<SlotId, (u64, u64)>) -> HashMap<SlotId, (u64, u64)> {
        self.seen
            .iter()
            .map(|(slot, &(c, w))| {
                let (c0, w0) = earlier.get(slot).copied().unwrap_or((0, 0));
                (*slot, (c.saturating_sub(c0), w.saturating_sub(w0)))
            })
            .collect()
    }
}

/// The folded counters, and each slot's exact totals of the hits its
/// sampler saw (what its weighted stacks are scaled to).
fn read_stacks_in(obj: &Object, n_slots: usize) -> Result<StackRead, CollectError> {
    let traces = map(obj, bpf::maps::STACKS)?;
    let folded: HashMap<StackKey, StackVal> =
        read_hash::<StackKey, StackVal>(obj, bpf::maps::STACK_COUNTS)?
            .into_iter()
            .collect();
    let hold = map(obj, bpf::maps::STACK_HOLD)?;
    let mut holds = Vec::new();
    for_each_percpu_value(&hold, n_slots, |slot, v| {
        holds.push((slot, from_bytes::<StackHold>(v)))
    })
    .map_err(read_err(bpf::maps::STACK_HOLD))?;
    // Per slot: (seen calls, seen wait, lost calls, lost wait).
    let mut sums: HashMap<SlotId, [u64; 4]> = HashMap::new();
    for (slot, h) in holds {
        let h = h.ok_or(CollectError::Layout(bpf::maps::STACK_HOLD))?;
        if h.seen_count > 0 {
            let e = sums.entry(SlotId::of_index(slot)).or_default();
            for (sum, v) in e
                .iter_mut()
                .zip([h.seen_count, h.seen_wait, h.lost_count, h.lost_wait])
            {
                *sum = sum.saturating_add(v);
            }
        }
    }
    let mut stacks = Vec::new();
    for (key, val) in folded {
        let ips = if key.stack_hash != 0 {
            traces
                .lookup(&key.stack_hash.to_ne_bytes(), MapFlags::ANY)
                .map_err(read_err(bpf::maps::STACKS))?
                .map(|bytes| {
                    bytes
                        .chunks_exact(8)
                        .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                        .take_while(|&ip| ip != 0)
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        stacks.push(StackSample {
            slot: SlotId::from_kernel(key.slot),
            ips,
            site: key.site,
            role: key.role,
            count: val.count,
            wait_ns: val.wait_ns,
            key,
            statement: None,
            unsampled: false,
        });
    }
    let seen = sums
        .into_iter()
        .map(|(slot, [c, w, lc, lw])| (slot, (c.saturating_sub(lc), w.saturating_sub(lw))))
        .collect();
    Ok(StackRead {
        samples: stacks,
        seen,
    })
}

/// Calls and wait so far per slot (the governor's cheap live read).
pub fn read_slot_counts(session: &Session) -> Result<HashMap<SlotId, SlotCount>, CollectError> {
    read_slot_counts_in(session.object(), session.slot_count())
}

/// Per-slot stats, call sites and drops, while the probes stay attached.
pub fn read_counters(session: &Session) -> Result<Counters, CollectError> {
    read_counters_in(session.object(), session.slot_count())
}

/// The stacks taken so far, with the hits each carries.
pub fn read_stacks(session: &Session) -> Result<StackRead, CollectError> {
    read_stacks_in(session.object(), session.slot_count())
}

/// Everything, stacks included.
pub fn read(session: &Session) -> Result<MapsSnapshot, CollectError> {
    read_in(session.object(), session.slot_count())
}

/// Calls and wait time: one probe's, call site's or latch's count at a
/// read, or the difference of two reads. The one reading type of the
/// interval series, `top` and the Prometheus exporter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: u64,
    pub wait_ns: u64,
    /// Of `wait_ns`, background threads' (kept for latches; 0 elsewhere).
    pub background_wait_ns: u64,
}

impl Counts {
    /// `calls` and `wait_ns`, none of it known to be background threads'.
    pub fn of(calls: u64, wait_ns: u64) -> Self {
        Self {
            calls,
            wait_ns,
            background_wait_ns: 0,
        }
    }

    /// Counters only grow; a smaller later value (a map entry evicted and
    /// recreated) counts as zero rather than wrapping.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            calls: self.calls.saturating_sub(earlier.calls),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
            background_wait_ns: self
                .background_wait_ns
                .saturating_sub(earlier.background_wait_ns),
        }
    }

    pub fn add(&mut self, other: Counts) {
        self.calls += other.calls;
        self.wait_ns += other.wait_ns;
        self.background_wait_ns += other.background_wait_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libbpf_rs::{MapHandle, MapType};

    /// A hash map read in batches gives every entry once, across batches
    /// and with keys as large as the CPU profiler's.
    #[test]
    fn a_hash_map_read_in_batches_gives_every_entry() {
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable, PartialEq, Debug)]
        #[repr(C)]
        struct Key {
            id: u64,
            pad: [u64; 190],
        }
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
            ..Default::default()
        };
        let key_size = std::mem::size_of::<Key>() as u32;
        let map = MapHandle::create(MapType::Hash, Some("batch_test"), key_size, 8, 4096, &opts)
            .expect("creating a BPF hash map (root, BPF syscall)");
        let n = 1000u64;
        for id in 0..n {
            let key = Key { id, pad: [id; 190] };
            map.update(
                bytemuck::bytes_of(&key),
                &(id * 3).to_ne_bytes(),
                MapFlags::ANY,
            )
            .unwrap();
        }
        let mut read: Vec<(Key, u64)> = read_hash_batched(&map, "batch_test", false)
            .unwrap()
            .unwrap();
        read.sort_unstable_by_key(|(k, _)| k.id);
        assert_eq!(read.len(), n as usize);
        for (i, (k, v)) in read.iter().enumerate() {
            assert_eq!((k.id, k.pad[189], *v), (i as u64, i as u64, i as u64 * 3));
        }
        // Taken: the same entries, and the map is empty after.
        let mut taken: Vec<(Key, u64)> = read_hash_batched(&map, "batch_test", true)
            .unwrap()
            .unwrap();
        taken.sort_unstable_by_key(|(k, _)| k.id);
        assert_eq!(taken.len(), read.len());
        assert!(taken
            .iter()
            .zip(&read)
            .all(|(a, b)| a.0.id == b.0.id && a.1 == b.1));
        assert!(read_hash_batched::<Key, u64>(&map, "batch_test", false)
            .unwrap()
            .unwrap()
            .is_empty());
        // An empty map: nothing, not an error.
        let empty = MapHandle::create(MapType::Hash, Some("batch_empty"), 8, 8, 16, &opts).unwrap();
        assert!(read_hash_batched::<u64, u64>(&empty, "batch_empty", false)
            .unwrap()
            .unwrap()
            .is_empty());
        // Not a hash map: left to the key-by-key walk.
        let plain = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            map_flags: 0,
            ..opts
        };
        let array = MapHandle::create(MapType::Array, Some("batch_array"), 4, 8, 16, &plain);
        assert!(
            read_hash_batched::<u32, u64>(&array.unwrap(), "batch_array", false)
                .unwrap()
                .is_none()
        );
    }
}
