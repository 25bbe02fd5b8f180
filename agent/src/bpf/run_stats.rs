//! The kernel's per-program run statistics (`BPF_ENABLE_STATS`): how many
//! times a loaded BPF program ran and for how long, measured by the kernel
//! around each run. innoprof reads them to report what its own programs
//! cost, measured, beside what it models.

use std::os::fd::{FromRawFd, OwnedFd};

/// Cumulative run count and run time of one BPF program, as the kernel
/// keeps them while run-time statistics are on.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProgramRuns {
    pub runs: u64,
    pub run_ns: u64,
}

impl ProgramRuns {
    /// What ran after `earlier`, a reading of the same program.
    pub fn since(self, earlier: ProgramRuns) -> ProgramRuns {
        ProgramRuns {
            runs: self.runs.saturating_sub(earlier.runs),
            run_ns: self.run_ns.saturating_sub(earlier.run_ns),
        }
    }
}

/// Switches on the kernel's run-time statistics for every BPF program for
/// as long as the returned fd is open (the kernel counts holders); None
/// where refused. Costs two clock reads per program run.
pub fn enable() -> Option<OwnedFd> {
    // SAFETY: a plain syscall wrapper; a non-negative result is an fd we own.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A loaded program's run count and time so far; None where the kernel
/// refuses the read.
pub fn of_program(fd: i32) -> Option<ProgramRuns> {
    let mut info: libbpf_rs::libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: the kernel fills at most `len` bytes of `info`.
    let ret = unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    (ret == 0).then_some(ProgramRuns {
        runs: info.run_cnt,
        run_ns: info.run_time_ns,
    })
}
