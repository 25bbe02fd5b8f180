//! Rust mirrors of `bpf/cpu.h`. Field order and sizes must match.

pub const USER_DEPTH: usize = 127;
pub const KERN_DEPTH: usize = 64;

pub const STACK_UNWIND_STOP: u32 = 1;
pub const STACK_KERN_LOST: u32 = 2;
pub const STACK_TRUNCATED: u32 = 4;

/// A whole stack, the key of the count maps: addresses innermost first,
/// zero-terminated.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuStack {
    pub flags: u32,
    pub pad: u32,
    /// The thread's name, zero-padded.
    pub comm: [u8; 16],
    pub user: [u64; USER_DEPTH],
    pub kern: [u64; KERN_DEPTH],
}

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
        crate::bpf_abi::comm_name(&self.comm)
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

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OffCpuStart {
    pub ts: u64,
    pub stack: CpuStack,
}

// SAFETY: plain-old-data with no padding (u32 pairs, then u64s), mirrored from C.
unsafe impl aya::Pod for CpuStack {}
unsafe impl aya::Pod for OffCpuVal {}
unsafe impl aya::Pod for OffCpuStart {}
unsafe impl aya::Pod for UnwindRow {}

pub const UNWIND_CFA: u8 = 0;
pub const UNWIND_FP: u8 = 1;
pub const UNWIND_END: u8 = 2;
pub const UNWIND_STOP: u8 = 3;
pub const UNWIND_REG_RSP: u8 = 0;
pub const UNWIND_REG_RBP: u8 = 1;
pub const UNWIND_RBP_SAME: i16 = 0x7fff;
pub const UNWIND_RBP_UNDEF: i16 = 0x7ffe;

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

/// Indexes of the per-CPU `cpu_counters` array (`enum cpu_counter`).
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    Ticks = 0,
    Samples = 1,
    UnwindStop = 2,
    KernLost = 3,
    Truncated = 4,
    OnCpuFull = 5,
    OffBlocks = 6,
    OffShort = 7,
    OffShortNs = 8,
    OffUnwindStop = 9,
    OffFull = 10,
    OffStartFull = 11,
    OffPreempted = 12,
}

pub const COUNTERS: usize = 13;

/// The compiled BPF object (built by agent/build.rs from bpf/cpu.bpf.c).
pub static CPU_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cpu.bpf.o"));

pub const PROG_SAMPLE: &str = "cpu_sample";
pub const PROG_SWITCH: &str = "offcpu_switch";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_c() {
        assert_eq!(std::mem::size_of::<CpuStack>(), 8 + 16 + 8 * (127 + 64));
        assert_eq!(
            std::mem::size_of::<OffCpuStart>(),
            8 + std::mem::size_of::<CpuStack>()
        );
        assert_eq!(std::mem::size_of::<OffCpuVal>(), 16);
        assert_eq!(std::mem::size_of::<UnwindRow>(), 16);
    }
}
