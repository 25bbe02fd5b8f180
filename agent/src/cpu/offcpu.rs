//! Off-CPU time: the sched_switch tracepoint (tp_btf, typed task pointers)
//! notes when and with which stack a target thread blocks, and charges the
//! blocked time to that stack when the thread runs again. Threads still
//! blocked when the recording stops are charged up to the stop, read from
//! the per-thread start map.

use crate::bpf_layout::cpu as bpf;
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::tp_btf::BtfTracePointLinkId;
use aya::programs::BtfTracePoint;
use aya::{Btf, Ebpf};

use super::abi::{CpuStack, OffCpuStart, PROG_SWITCH};
use super::CpuError;

pub(super) struct Switches {
    link: Option<BtfTracePointLinkId>,
}

impl Switches {
    pub fn attach(ebpf: &mut Ebpf) -> Result<Self, CpuError> {
        let btf = Btf::from_sys_fs().map_err(CpuError::Btf)?;
        let prog = program(ebpf)?;
        prog.load("sched_switch", &btf)
            .map_err(|source| CpuError::Program {
                name: PROG_SWITCH,
                source,
            })?;
        let link = prog.attach().map_err(|source| CpuError::Program {
            name: PROG_SWITCH,
            source,
        })?;
        Ok(Self { link: Some(link) })
    }

    pub fn detach(&mut self, ebpf: &mut Ebpf) {
        if let (Some(link), Ok(prog)) = (self.link.take(), program(ebpf)) {
            let _ = prog.detach(link);
        }
    }
}

/// Threads blocked at `now_ns` (CLOCK_MONOTONIC, the clock of
/// bpf_ktime_get_ns) for at least `min_ns`: their stack and time so far.
pub(super) fn still_blocked(
    ebpf: &Ebpf,
    now_ns: u64,
    min_ns: u64,
) -> Result<Vec<(CpuStack, u64)>, CpuError> {
    let map: BpfHashMap<&MapData, u32, OffCpuStart> = BpfHashMap::try_from(
        ebpf.map(bpf::maps::OFFCPU_START)
            .ok_or(CpuError::Map(bpf::maps::OFFCPU_START))?,
    )
    .map_err(|_| CpuError::Map(bpf::maps::OFFCPU_START))?;
    let mut out = Vec::new();
    for item in map.iter() {
        let (_tid, start) = item.map_err(|source| CpuError::Read {
            map: bpf::maps::OFFCPU_START,
            source,
        })?;
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

fn program(ebpf: &mut Ebpf) -> Result<&mut BtfTracePoint, CpuError> {
    ebpf.program_mut(PROG_SWITCH)
        .ok_or(CpuError::MissingProgram(PROG_SWITCH))?
        .try_into()
        .map_err(|source| CpuError::Program {
            name: PROG_SWITCH,
            source,
        })
}
