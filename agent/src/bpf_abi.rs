//! Rust mirrors of `bpf/innoprof.h`. Field order and sizes must match.

pub const HIST_SLOTS: usize = 40;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SlotStats {
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    pub hist: [u64; HIST_SLOTS],
}

impl Default for SlotStats {
    fn default() -> Self {
        Self {
            calls: 0,
            wait_ns_total: 0,
            wait_ns_max: 0,
            hist: [0; HIST_SLOTS],
        }
    }
}

/// The caller's `__FILE__` pointer (in the target's memory) and `__LINE__`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Callsite {
    pub file: u64,
    pub line: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub slot: u64,
    pub stack_id: i64,
    pub site: Callsite,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteKey {
    pub slot: u64,
    pub site: Callsite,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SiteVal {
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct StackVal {
    pub count: u64,
    pub wait_ns: u64,
}

// SAFETY: plain-old-data with no padding, mirrored from C.
unsafe impl aya::Pod for SlotStats {}
unsafe impl aya::Pod for StackKey {}
unsafe impl aya::Pod for StackVal {}
unsafe impl aya::Pod for SiteKey {}
unsafe impl aya::Pod for SiteVal {}

/// The attach cookie: slot id, and where the call-site arguments are
/// (`COOKIE_*` in innoprof.h).
pub fn cookie(slot: u32, callsite_args: Option<(u8, u8)>) -> u64 {
    let (file, line) = callsite_args.unwrap_or((0, 0));
    u64::from(slot) | (u64::from(file & 0xf) << 32) | (u64::from(line & 0xf) << 36)
}

/// Indexes of the `drops` per-CPU array (`enum drop_reason`).
#[derive(Debug, Clone, Copy)]
pub enum DropReason {
    StackCollision = 0,
    StackError = 1,
    StackKeyFull = 2,
    StartFull = 3,
    MissedEntry = 4,
    StatsFull = 5,
    SiteFull = 6,
}

pub const DROP_REASONS: [DropReason; 7] = [
    DropReason::StackCollision,
    DropReason::StackError,
    DropReason::StackKeyFull,
    DropReason::StartFull,
    DropReason::MissedEntry,
    DropReason::StatsFull,
    DropReason::SiteFull,
];

/// The compiled BPF object (built by agent/build.rs from bpf/latency.bpf.c).
pub static LATENCY_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency.bpf.o"));
