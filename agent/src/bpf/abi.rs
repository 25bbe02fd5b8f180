//! Rust mirrors of `bpf/innoprof.h`. Each `mirrors_NAME!` checks one
//! against the layout clang gave the C struct (see `bpf_layout`); the
//! constants come from the header's `#define`s.

use crate::bpf::layout::defines;

pub const HIST_SLOTS: usize = defines::HIST_SLOTS as usize;

/// Slot ids the maps have room for.
pub const MAX_SLOTS: usize = defines::MAX_SLOTS as usize;

/// An attached symbol's id: its index in `Session::slots`, and in the
/// kernel the low 32 bits of its links' cookie and the key of its entries
/// in the per-slot maps. Typed so that it is not taken for a probe index
/// or a count on its way; it is a number only at those edges ([`cookie`],
/// [`SlotId::key`], [`SlotId::from_kernel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(u32);

impl SlotId {
    /// The slot at `index` in `Session::slots` (ids are dense from 0, and
    /// fewer than [`MAX_SLOTS`]).
    pub fn of_index(index: usize) -> Self {
        Self(u32::try_from(index).expect("slot ids fit the cookie's 32 bits"))
    }

    /// Its index in `Session::slots` (and in the per-slot arrays).
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The key of its entries in the per-slot maps (`u32` keys).
    pub fn key(self) -> [u8; 4] {
        self.0.to_ne_bytes()
    }

    /// The slot a kernel struct names (`stack_key.slot`, `site_key.slot`:
    /// the cookie's low 32 bits, widened to 64, so the cast loses nothing).
    pub fn from_kernel(slot: u64) -> Self {
        Self(slot as u32)
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SlotStats {
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    pub hist: [u64; HIST_SLOTS],
    /// Stacks taken (a sample of the calls; see `stack_interval_ns`).
    pub stacks: u64,
    /// Hits while the slot was switched off (before the kernel detached
    /// it): not counted as calls, but the server paid their trap.
    pub off_hits: u64,
}
mirrors_slot_stats!(SlotStats);

impl SlotStats {
    /// Every hit the server paid a trap for: the calls, and the hits while
    /// switched off. What the cost estimate charges.
    pub fn hits(&self) -> u64 {
        self.calls + self.off_hits
    }
}

/// Adds another CPU's values, or another slot's of the same probe.
impl std::ops::AddAssign<&SlotStats> for SlotStats {
    fn add_assign(&mut self, other: &Self) {
        self.calls += other.calls;
        self.wait_ns_total += other.wait_ns_total;
        self.wait_ns_max = self.wait_ns_max.max(other.wait_ns_max);
        self.stacks += other.stacks;
        self.off_hits += other.off_hits;
        for (a, b) in self.hist.iter_mut().zip(other.hist.iter()) {
            *a += b;
        }
    }
}

impl Default for SlotStats {
    fn default() -> Self {
        Self {
            calls: 0,
            wait_ns_total: 0,
            wait_ns_max: 0,
            hist: [0; HIST_SLOTS],
            stacks: 0,
            off_hits: 0,
        }
    }
}

/// The caller's `__FILE__` pointer (in the target's memory) and
/// `__LINE__`, the latch id + 1 (0: not read), and the latch object's
/// creation site (`__FILE__` pointer and `__LINE__`; 0: not read).
#[repr(C)]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    bytemuck::Pod,
    bytemuck::Zeroable,
)]
pub struct Callsite {
    pub file: u64,
    pub line: u32,
    pub latch: u32,
    pub created_file: u64,
    pub created_line: u32,
    pub pad: u32,
}
mirrors_callsite!(Callsite);

impl Callsite {
    /// The latch id read by the probe, if any.
    pub fn latch_id(&self) -> Option<u64> {
        self.latch.checked_sub(1).map(u64::from)
    }

    /// The latch's creation site, if the probe read one.
    pub fn created(&self) -> Option<(u64, u32)> {
        (self.created_file != 0).then_some((self.created_file, self.created_line))
    }
}

/// Where a slot's latch object keeps its creation site (`created_at` map).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct CreatedField {
    pub file_off: u32,
    pub line_off: u32,
    pub arg: u8,
    pub line_size: u8,
    pub line_shift: u8,
    pub line_bits: u8,
    pub pad: u32,
}
mirrors_created_field!(CreatedField);

/// Where a probe reads the latch id: `*(argument + offset)`, `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatchArg {
    pub arg: u8,
    pub offset: u32,
    pub size: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StackKey {
    pub slot: u64,
    /// Key of the stack in the `stacks` map; 0: not captured or stored.
    pub stack_hash: u64,
    pub site: Callsite,
    /// The role of the thread that took it (`thread_role`'s id; 0: unknown).
    pub role: u32,
    pub pad: u32,
}
mirrors_stack_key!(StackKey);

/// User stack frames kept per stack (`STACK_DEPTH`).
pub const STACK_DEPTH: usize = defines::STACK_DEPTH as usize;

/// Per slot and CPU: the stack sampler's pending hits (`struct stack_hold`).
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StackHold {
    /// Every hit that reached the sampler, exactly (calls, wait ns): what
    /// a slot's weighted stacks are scaled to.
    pub seen_count: u64,
    pub seen_wait: u64,
    /// The weight of stacks whose counter found the map full (calls, wait
    /// ns): in no stack, so not scaled onto the stacks kept.
    pub lost_count: u64,
    pub lost_wait: u64,
    /// The sampler's state on this CPU (bpf/innoprof.h).
    pub free_start: u64,
    pub free_taken: u64,
    pub rate_start: u64,
    pub rate_hits: u64,
    pub rate_prev: u64,
    pub stratum_k: u64,
    pub stratum_left: u64,
    pub stratum_pick: u64,
}
mirrors_stack_hold!(StackHold);

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SiteKey {
    pub slot: u64,
    pub site: Callsite,
    /// The calling thread's role id (0: unknown).
    pub role: u32,
    pub pad: u32,
}
mirrors_site_key!(SiteKey);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SiteVal {
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
}
mirrors_site_val!(SiteVal);

/// Adds another call site's counts (two pointers naming one line).
impl std::ops::AddAssign<&SiteVal> for SiteVal {
    fn add_assign(&mut self, other: &Self) {
        self.calls += other.calls;
        self.wait_ns_total += other.wait_ns_total;
        self.wait_ns_max = self.wait_ns_max.max(other.wait_ns_max);
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StackVal {
    pub count: u64,
    pub wait_ns: u64,
}
mirrors_stack_val!(StackVal);

/// A (slot, thread) pair counted apart in `thread_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ThreadKey {
    pub slot: u32,
    /// The kernel's thread id.
    pub tid: u32,
}
mirrors_thread_key!(ThreadKey);

/// A (slot, thread) pair's calls and wait.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ThreadVal {
    pub calls: u64,
    pub wait_ns: u64,
    /// Of them, the hits made before the thread's role was known: labelled
    /// unknown in the call-site cells and the stacks.
    pub unlabelled_calls: u64,
    pub unlabelled_wait_ns: u64,
}
mirrors_thread_val!(ThreadVal);

/// Adds another thread's (or role's) calls and wait.
impl std::ops::AddAssign<&ThreadVal> for ThreadVal {
    fn add_assign(&mut self, other: &Self) {
        self.calls += other.calls;
        self.wait_ns += other.wait_ns;
        self.unlabelled_calls += other.unlabelled_calls;
        self.unlabelled_wait_ns += other.unlabelled_wait_ns;
    }
}

/// Marker functions' ranges a `role_ranges` entry holds (`MAX_ROLE_RANGES`).
pub const MAX_ROLE_RANGES: usize = defines::MAX_ROLE_RANGES as usize;

/// The role id a `thread_role` value holds: its low bits. The high bits
/// count the walks that found no marker yet (innoprof.h, `ROLE_ID_MASK`).
pub fn role_id(value: u32) -> u32 {
    value & defines::ROLE_ID_MASK as u32
}

/// A marker function's addresses in the target and the role it marks
/// (1-based; the lowest of a stack's markers wins; end 0 ends the list).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct RoleRange {
    pub start: u64,
    pub end: u64,
    pub role: u32,
    pub pad: u32,
}
mirrors_role_range!(RoleRange);

/// Where a connection's THD is and what is read in it (`thd` in the
/// latency object's rodata; see `plan::thd`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ThdLayout {
    /// 0: statements off, 1: static TLS, 2: pthread key.
    pub how: u32,
    pub conn_size: u32,
    pub tls_off: i64,
    pub key_block_off: u64,
    pub key_data_off: u64,
    pub conn_off: u64,
    pub query_id_off: u64,
    pub query_off: u64,
    pub query_len_off: u64,
    /// glibc's `struct pthread` + this: the thread's kernel tid.
    pub pthread_tid_off: u64,
}
mirrors_thd_layout!(ThdLayout);

/// `ThdLayout::query_id_off` when the query id is not known (the C side's
/// `THD_NO_QUERY_ID`): statements are numbered by their text's changes.
pub const THD_NO_QUERY_ID: u64 = u64::MAX;

/// Where a slot's latch records its exclusive holder (`holder_at`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct HolderField {
    pub thread_off: u32,
    pub valid_off: u32,
    /// With `woken == WOKEN_BY_MEMBER`: the member holding what the
    /// release slow path is called on.
    pub woken_off: u32,
    pub arg: u8,
    pub valid_size: u8,
    /// 1: valid while signed and <= 0 (not while non-zero).
    pub nonpositive: u8,
    /// How a waiter here finds the release that ended its wait
    /// (`WOKEN_*`; 0: it does not look).
    pub woken: u8,
    /// Non-zero at a wake slot: the argument holding what waiters wait on.
    pub waker_arg: u8,
    pub pad: [u8; 3],
}

/// `HolderField::woken`: the release is called on the waiter's object.
pub const WOKEN_BY_OBJECT: u8 = 1;
/// `HolderField::woken`: on the pointer in the member at `woken_off`.
pub const WOKEN_BY_MEMBER: u8 = 2;
mirrors_holder_field!(HolderField);

/// A waiter's statement and the latch holder it waited for.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct HolderKey {
    pub waiter_query_id: u64,
    pub holder_query_id: u64,
    pub slot: u32,
    pub holder_tid: u32,
    /// Where the holder took the latch (`__FILE__` pointer, line), where
    /// the latch records it; 0: not known.
    pub holder_file: u64,
    pub holder_line: u32,
    /// [`HOLDER_RECORDED`] or [`HOLDER_RELEASED`].
    pub how: u32,
}

/// `HolderKey::how`: read from the latch at the wait's start.
pub const HOLDER_RECORDED: u32 = 0;
/// `HolderKey::how`: the thread whose release (a wake probe) fell in the wait.
pub const HOLDER_RELEASED: u32 = 1;
mirrors_holder_key!(HolderKey);

/// A (statement, slot) pair counted apart in `stmt_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StmtKey {
    /// The server's `query_id` of the statement.
    pub query_id: u64,
    pub slot: u32,
    pub pad: u32,
}
mirrors_stmt_key!(StmtKey);

/// A (statement, slot, latch) triple counted apart in `stmt_latch`: the
/// latch as a call site carries it (id + 1, or creation site).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StmtLatchKey {
    pub query_id: u64,
    pub created_file: u64,
    pub slot: u32,
    pub latch: u32,
    pub created_line: u32,
    pub pad: u32,
}
mirrors_stmt_latch_key!(StmtLatchKey);

impl StmtLatchKey {
    /// The latch as a [`Callsite`] with no caller, for the names call
    /// sites' latches get.
    pub fn latch_site(&self) -> Callsite {
        Callsite {
            latch: self.latch,
            created_file: self.created_file,
            created_line: self.created_line,
            ..Callsite::default()
        }
    }
}

/// A stack counter, the statement of the hit that took its stack, and
/// the hits that stack carried (a `stack_stmt` ring record).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StackStmtRec {
    pub stack: StackKey,
    pub query_id: u64,
    pub count: u64,
    pub wait_ns: u64,
}
mirrors_stack_stmt_rec!(StackStmtRec);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StmtVal {
    pub calls: u64,
    pub wait_ns: u64,
}
mirrors_stmt_val!(StmtVal);

/// Entries of the statement maps (`stmt_stats`, `stmt_text`).
pub const MAX_STMT_KEYS: usize = defines::MAX_STMT_KEYS as usize;
pub const MAX_STMT_TEXTS: usize = defines::MAX_STMT_TEXTS as usize;

/// Bytes of a statement's text the probe reads (`STMT_TEXT_MAX`).
pub const STMT_TEXT_MAX: usize = defines::STMT_TEXT_MAX as usize;

/// A statement as read at its first hit: thread, connection, text.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct StmtText {
    pub tid: u32,
    pub len: u32,
    pub conn: u64,
    pub full_len: u64,
    pub text: [u8; STMT_TEXT_MAX],
}
mirrors_stmt_text!(StmtText);

/// A map value or key read back from the kernel's bytes (None when the
/// size is not the struct's).
/// A `comm` as BPF's `bpf_get_current_comm` fills it (NUL-padded) as a
/// name; `None` when empty. Not UTF-8 is shown lossily: a thread names
/// itself.
pub fn comm_name(comm: &[u8; 16]) -> Option<String> {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    (end > 0).then(|| String::from_utf8_lossy(&comm[..end]).into_owned())
}

pub fn from_bytes<T: bytemuck::Pod>(bytes: &[u8]) -> Option<T> {
    bytemuck::try_pod_read_unaligned(bytes).ok()
}

/// The attach cookie: slot id, where the call-site arguments are, and
/// where the latch id is (`COOKIE_*` in innoprof.h). A latch offset that
/// does not fit the cookie's 12 bits is not read. `created`: the slot has
/// a `created_at` entry.
pub fn cookie(
    slot: SlotId,
    callsite_args: Option<(u8, u8)>,
    latch: Option<LatchArg>,
    created: bool,
) -> u64 {
    let (file, line) = callsite_args.unwrap_or((0, 0));
    let latch = latch.filter(|l| l.offset < 4096 && matches!(l.size, 1 | 2 | 4 | 8));
    let (l_arg, l_off, l_size) = latch.map_or((0, 0, 0), |l| (l.arg, l.offset, l.size));
    u64::from(slot.0)
        | (u64::from(file & 0xf) << 32)
        | (u64::from(line & 0xf) << 36)
        | (u64::from(l_arg & 0xf) << 40)
        | (u64::from(l_off) << 44)
        | (u64::from(l_size & 0xf) << 56)
        | (u64::from(created) << 60)
}

/// Indexes of the `drops` per-CPU array (`enum drop_reason`).
#[derive(Debug, Clone, Copy)]
pub enum DropReason {
    StackMapFull = defines::DROP_STACK_MAP_FULL as isize,
    StackError = defines::DROP_STACK_ERROR as isize,
    StackKeyFull = defines::DROP_STACK_KEY_FULL as isize,
    StartFull = defines::DROP_START_FULL as isize,
    MissedEntry = defines::DROP_MISSED_ENTRY as isize,
    StatsFull = defines::DROP_STATS_FULL as isize,
    SiteFull = defines::DROP_SITE_FULL as isize,
    StackBusy = defines::DROP_STACK_BUSY as isize,
    ThreadFull = defines::DROP_THREAD_FULL as isize,
}

pub const DROP_REASONS: [DropReason; defines::DROP_MAX as usize] = [
    DropReason::StackMapFull,
    DropReason::StackError,
    DropReason::StackKeyFull,
    DropReason::StartFull,
    DropReason::MissedEntry,
    DropReason::StatsFull,
    DropReason::SiteFull,
    DropReason::StackBusy,
    DropReason::ThreadFull,
];

/// A compiled BPF object built into innoprof, 8-byte aligned: libbpf and
/// `object` read its ELF headers in place.
macro_rules! include_bpf_object {
    ($path:expr) => {{
        #[repr(C, align(8))]
        struct Aligned<Bytes: ?Sized> {
            bytes: Bytes,
        }
        static ALIGNED: &Aligned<[u8]> = &Aligned {
            bytes: *include_bytes!($path),
        };
        &ALIGNED.bytes
    }};
}
pub(crate) use include_bpf_object;

/// The compiled BPF object (built by agent/build.rs from bpf/latency.bpf.c).
pub static LATENCY_OBJ: &[u8] = include_bpf_object!(concat!(env!("OUT_DIR"), "/latency.bpf.o"));

/// Where a `const volatile` global of the latency object lives in its
/// .rodata section (the loader writes it before load).
pub fn rodata_offset(name: &str) -> Option<usize> {
    rodata_offset_in(LATENCY_OBJ, name)
}

/// Where a `const volatile` global of the BPF object `obj` lives in its
/// .rodata section.
pub fn rodata_offset_in(obj: &[u8], name: &str) -> Option<usize> {
    use object::{Object, ObjectSection, ObjectSymbol};
    let file = object::File::parse(obj).ok()?;
    let rodata = file.section_by_name(".rodata")?.index();
    file.symbols()
        .find(|s| s.name() == Ok(name) && s.section_index() == Some(rodata))
        .map(|s| s.address() as usize)
}

/// Writes a `const volatile` global of the BPF object `obj` into `data`,
/// the image of its .rodata the loader holds before load; None when the
/// object has no such global of that size.
pub fn write_rodata(obj: &[u8], data: &mut [u8], name: &str, value: &[u8]) -> Option<()> {
    let offset = rodata_offset_in(obj, name)?;
    data.get_mut(offset..offset + value.len())?
        .copy_from_slice(value);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::layout::latency as bpf;

    #[test]
    fn the_loader_finds_the_configuration_globals() {
        assert!(rodata_offset(bpf::globals::TARGET_TGID).is_some());
        assert!(rodata_offset(bpf::globals::CAPTURE_STACKS).is_some());
        assert!(rodata_offset(bpf::globals::STACK_INTERVAL_NS).is_some());
        assert!(rodata_offset(bpf::globals::STACK_SEED).is_some());
        assert_eq!(rodata_offset("no_such_global"), None);
    }

    #[test]
    fn cookie_fields_do_not_overlap() {
        let latch = LatchArg {
            arg: 1,
            offset: 4095,
            size: 4,
        };
        let c = cookie(SlotId(0xffff_ffff), Some((4, 5)), Some(latch), true);
        assert_eq!(c & 0xffff_ffff, 0xffff_ffff);
        assert_eq!((c >> 32) & 0xf, 4);
        assert_eq!((c >> 36) & 0xf, 5);
        assert_eq!((c >> 40) & 0xf, 1);
        assert_eq!((c >> 44) & 0xfff, 4095);
        assert_eq!((c >> 56) & 0xf, 4);
        assert_eq!(c >> 60, 1);
        // An offset the cookie cannot carry disables the latch read.
        let far = LatchArg {
            offset: 4096,
            ..latch
        };
        assert_eq!(cookie(SlotId(7), None, Some(far), false), 7);
    }
}
