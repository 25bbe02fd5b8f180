//! Rust mirrors of `bpf/cpu.h`, each checked against the layout clang gave
//! the C struct (`mirrors_NAME!`, see `bpf_layout`); the constants come
//! from the header's `#define`s and enumerators.

use crate::bpf::layout::defines;

pub const USER_DEPTH: usize = defines::CPU_USER_DEPTH as usize;
/// Slots of the unwinder's per-CPU frame cache (bpf/cpu.bpf.c).
pub const FRAME_CACHE_SLOTS: u32 = defines::FRAME_CACHE_SLOTS as u32;
pub const KERN_DEPTH: usize = defines::CPU_KERN_DEPTH as usize;

pub const STACK_UNWIND_STOP: u32 = defines::CPU_STACK_UNWIND_STOP as u32;
pub const STACK_KERN_LOST: u32 = defines::CPU_STACK_KERN_LOST as u32;
pub const STACK_TRUNCATED: u32 = defines::CPU_STACK_TRUNCATED as u32;

/// A whole stack, the key of the count maps: addresses innermost first,
/// zero-terminated.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuStack {
    pub flags: u32,
    pub pad: u32,
    /// On-CPU samples of a connection: its statement's id (as the wait
    /// probes' `query_id`); 0: none, or statements off.
    pub query_id: u64,
    /// The thread's name, zero-padded.
    pub comm: [u8; 16],
    pub user: [u64; USER_DEPTH],
    pub kern: [u64; KERN_DEPTH],
}
mirrors_cpu_stack!(CpuStack);

impl CpuStack {
    pub fn user_ips(&self) -> Vec<u64> {
        self.user
            .iter()
            .copied()
            .take_while(|&ip| ip != 0)
            .collect()
    }

    /// The thread's name; `None` when empty.
    pub fn thread(&self) -> Option<String> {
        crate::bpf::abi::comm_name(&self.comm)
    }

    pub fn kernel_ips(&self) -> Vec<u64> {
        self.kern
            .iter()
            .copied()
            .take_while(|&ip| ip != 0)
            .collect()
    }
}

impl std::fmt::Debug for CpuStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuStack")
            .field("flags", &self.flags)
            .field("query_id", &self.query_id)
            .field("thread", &self.thread())
            .field("user", &self.user_ips())
            .field("kern", &self.kernel_ips())
            .finish()
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OffCpuVal {
    pub count: u64,
    pub total_ns: u64,
}
mirrors_offcpu_val!(OffCpuVal);

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OffCpuStart {
    pub ts: u64,
    pub stack: CpuStack,
}
mirrors_offcpu_start!(OffCpuStart);

// SAFETY: plain-old-data with no padding (u32 pairs, then u64s; the row's
// i32, i16 and two u8 fill its 16 bytes), mirrored from C and checked
// against clang's layout; all-zero bytes are a valid value of each.
unsafe impl bytemuck::Zeroable for CpuStack {}
unsafe impl bytemuck::Pod for CpuStack {}
unsafe impl bytemuck::Zeroable for OffCpuVal {}
unsafe impl bytemuck::Pod for OffCpuVal {}
unsafe impl bytemuck::Zeroable for OffCpuStart {}
unsafe impl bytemuck::Pod for OffCpuStart {}
unsafe impl bytemuck::Zeroable for UnwindRow {}
unsafe impl bytemuck::Pod for UnwindRow {}

pub const UNWIND_CFA: u8 = defines::UNWIND_CFA as u8;
pub const UNWIND_FP: u8 = defines::UNWIND_FP as u8;
pub const UNWIND_END: u8 = defines::UNWIND_END as u8;
pub const UNWIND_STOP: u8 = defines::UNWIND_STOP as u8;
pub const UNWIND_PLT: u8 = defines::UNWIND_PLT as u8;
pub const UNWIND_REG_RSP: u8 = defines::UNWIND_REG_RSP as u8;
pub const UNWIND_REG_RBP: u8 = defines::UNWIND_REG_RBP as u8;
pub const UNWIND_RBP_SAME: i16 = defines::UNWIND_RBP_SAME as i16;
pub const UNWIND_RBP_UNDEF: i16 = defines::UNWIND_RBP_UNDEF as i16;

/// One CFI row: how to find the caller from an address up to the next row.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindRow {
    pub addr: u64,
    pub cfa_off: i32,
    pub rbp_off: i16,
    pub cfa_reg: u8,
    pub kind: u8,
}
mirrors_unwind_row!(UnwindRow);

pub const UNWIND_MAX_REGIONS: usize = defines::UNWIND_MAX_REGIONS as usize;

/// A run of rows close in address, cut into buckets (bpf/cpu.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Zeroable, bytemuck::Pod)]
pub struct UnwindRegion {
    pub start: u64,
    pub end: u64,
    pub first: u32,
    pub pad: u32,
}
mirrors_unwind_region!(UnwindRegion);

/// The rows that may cover an address in one bucket: [lo, hi).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Zeroable, bytemuck::Pod)]
pub struct UnwindBucket {
    pub lo: u32,
    pub hi: u32,
}
mirrors_unwind_bucket!(UnwindBucket);

/// Indexes of the per-CPU `cpu_counters` array (`enum cpu_counter`).
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    Ticks = defines::CNT_TICKS as isize,
    Samples = defines::CNT_SAMPLES as isize,
    UnwindStop = defines::CNT_UNWIND_STOP as isize,
    KernLost = defines::CNT_KERN_LOST as isize,
    Truncated = defines::CNT_TRUNCATED as isize,
    OnCpuFull = defines::CNT_ONCPU_FULL as isize,
    OffBlocks = defines::CNT_OFF_BLOCKS as isize,
    OffShort = defines::CNT_OFF_SHORT as isize,
    OffShortNs = defines::CNT_OFF_SHORT_NS as isize,
    OffUnwindStop = defines::CNT_OFF_UNWIND_STOP as isize,
    OffFull = defines::CNT_OFF_FULL as isize,
    OffStartFull = defines::CNT_OFF_START_FULL as isize,
    OffPreempted = defines::CNT_OFF_PREEMPTED as isize,
    StmtSamples = defines::CNT_STMT_SAMPLES as isize,
    ConnNoStmt = defines::CNT_CONN_NO_STMT as isize,
    StmtCpuFull = defines::CNT_STMT_CPU_FULL as isize,
}

pub const COUNTERS: usize = defines::CNT_MAX as usize;

/// The compiled BPF object (built by agent/build.rs from bpf/cpu.bpf.c).
pub static CPU_OBJ: &[u8] =
    crate::bpf::abi::include_bpf_object!(concat!(env!("OUT_DIR"), "/cpu.bpf.o"));

pub use crate::bpf::layout::cpu::programs::{
    CPU_SAMPLE as PROG_SAMPLE, OFFCPU_SWITCH as PROG_SWITCH,
};
