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

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StackKey {
    pub slot: u64,
    pub stack_id: i64,
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

/// Indexes of the `drops` per-CPU array (`enum drop_reason`).
#[derive(Debug, Clone, Copy)]
pub enum DropReason {
    StackCollision = 0,
    StackError = 1,
    StackKeyFull = 2,
    StartFull = 3,
    MissedEntry = 4,
    StatsFull = 5,
}

pub const DROP_REASONS: [DropReason; 6] = [
    DropReason::StackCollision,
    DropReason::StackError,
    DropReason::StackKeyFull,
    DropReason::StartFull,
    DropReason::MissedEntry,
    DropReason::StatsFull,
];

/// The compiled BPF object (built by agent/build.rs from bpf/latency.bpf.c).
pub static LATENCY_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/latency.bpf.o"));
