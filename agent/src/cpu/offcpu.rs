//! Off-CPU time: the sched_switch tracepoint (tp_btf, typed task pointers)
//! notes when and with which stack a target thread blocks, and charges the
//! blocked time to that stack when the thread runs again. Threads still
//! blocked when the recording stops are charged up to the stop, read from
//! the per-thread start map.

use crate::bpf::layout::cpu as bpf;
use libbpf_rs::{Link, Object};

use super::abi::{CpuStack, OffCpuStart, PROG_SWITCH};
use super::error::CpuError;

pub(super) struct Switches {
    link: Option<Link>,
}

impl Switches {
    /// Attaches the loaded switch program (libbpf loaded it against the
    /// kernel's BTF, which `tp_btf` needs).
    pub fn attach(obj: &mut Object) -> Result<Self, CpuError> {
        let prog = obj
            .progs_mut()
            .find(|p| p.name() == PROG_SWITCH)
            .ok_or(CpuError::MissingProgram(PROG_SWITCH))?;
        let link = prog.attach().map_err(|source| CpuError::Program {
            name: PROG_SWITCH,
            source,
        })?;
        Ok(Self { link: Some(link) })
    }

    pub fn detach(&mut self) {
        self.link = None;
    }
}

/// Threads blocked at `now_ns` (CLOCK_MONOTONIC, the clock of
/// bpf_ktime_get_ns) for at least `min_ns`: their stack and time so far.
pub(super) fn still_blocked(
    obj: &Object,
    now_ns: u64,
    min_ns: u64,
) -> Result<Vec<(CpuStack, u64)>, CpuError> {
    let mut out = Vec::new();
    for (_tid, start) in
        crate::collect::read_hash::<u32, OffCpuStart>(obj, bpf::maps::OFFCPU_START)?
    {
        if start.ts == 0 || start.ts > now_ns {
            continue;
        }
        let blocked = now_ns - start.ts;
        if blocked >= min_ns {
            out.push((start.stack, blocked));
        }
    }
    Ok(out)
}

pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
