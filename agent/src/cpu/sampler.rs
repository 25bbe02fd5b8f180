//! On-CPU sampling: the software cpu-clock event, opened once per online
//! CPU for every process. A perf event opened on a PID follows one thread
//! only, so the target's threads (including ones it creates later) are
//! picked out by tgid inside the BPF program instead.

use aya::programs::perf_event::{
    PerfEvent, PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
};
use aya::Ebpf;

use super::abi::PROG_SAMPLE;
use super::CpuError;

pub(super) struct Sampler {
    links: Vec<PerfEventLinkId>,
    pub cpus: Vec<u32>,
}

impl Sampler {
    /// Loads the sampling program and opens one cpu-clock event per CPU.
    pub fn attach(ebpf: &mut Ebpf, frequency_hz: u64) -> Result<Self, CpuError> {
        let cpus = aya::util::online_cpus().map_err(|(what, source)| CpuError::Cpus {
            what: what.to_string(),
            source,
        })?;
        let prog = program(ebpf)?;
        prog.load().map_err(|source| CpuError::Program {
            name: PROG_SAMPLE,
            source,
        })?;
        let mut sampler = Self {
            links: Vec::new(),
            cpus: Vec::new(),
        };
        for cpu in cpus {
            let link = prog
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(frequency_hz),
                    false,
                )
                .map_err(|source| CpuError::PerfEvent { cpu, source })?;
            sampler.links.push(link);
            sampler.cpus.push(cpu);
        }
        Ok(sampler)
    }

    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Closes every event. Idempotent; dropping the `Ebpf` does the same.
    pub fn detach(&mut self, ebpf: &mut Ebpf) {
        let links = std::mem::take(&mut self.links);
        if let Ok(prog) = program(ebpf) {
            for link in links {
                let _ = prog.detach(link);
            }
        }
    }
}

fn program(ebpf: &mut Ebpf) -> Result<&mut PerfEvent, CpuError> {
    ebpf.program_mut(PROG_SAMPLE)
        .ok_or(CpuError::MissingProgram(PROG_SAMPLE))?
        .try_into()
        .map_err(|source| CpuError::Program {
            name: PROG_SAMPLE,
            source,
        })
}
