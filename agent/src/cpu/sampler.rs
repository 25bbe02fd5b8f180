//! On-CPU sampling: the software cpu-clock event, opened once per online
//! CPU for every process. A perf event opened on a PID follows one thread
//! only, so the target's threads (including ones it creates later) are
//! picked out by tgid inside the BPF program instead.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use libbpf_rs::{Link, Object};

use super::abi::PROG_SAMPLE;
use super::error::CpuError;

pub(super) struct Sampler {
    /// Each CPU's link; it owns its perf event (libbpf disables and
    /// closes the event when the link is destroyed).
    links: Vec<Link>,
    pub cpus: Vec<u32>,
}

impl Sampler {
    /// Opens one cpu-clock event per online CPU, the loaded sampling
    /// program attached to each.
    pub fn attach(obj: &mut Object, frequency_hz: u64) -> Result<Self, CpuError> {
        let cpus = online_cpus()?;
        let prog = obj
            .progs_mut()
            .find(|p| p.name() == PROG_SAMPLE)
            .ok_or(CpuError::MissingProgram(PROG_SAMPLE))?;
        let mut sampler = Self {
            links: Vec::new(),
            cpus: Vec::new(),
        };
        for cpu in cpus {
            let event = open_cpu_clock(cpu, frequency_hz)
                .map_err(|source| CpuError::PerfEvent { cpu, source })?;
            let link = prog
                .attach_perf_event(event.as_raw_fd())
                .map_err(|source| CpuError::Program {
                    name: PROG_SAMPLE,
                    source,
                })?;
            // Attached: the event is the link's now (on failure it stayed
            // ours, closed when `event` dropped).
            let _ = event.into_raw_fd();
            sampler.links.push(link);
            sampler.cpus.push(cpu);
        }
        Ok(sampler)
    }

    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Closes every event. Idempotent; dropping the sampler does the same.
    pub fn detach(&mut self) {
        self.links.clear();
    }
}

/// A cpu-clock event on `cpu` for every process, sampling at `hz`.
fn open_cpu_clock(cpu: u32, hz: u64) -> std::io::Result<OwnedFd> {
    use libbpf_rs::libbpf_sys as sys;
    let mut attr = sys::perf_event_attr {
        type_: sys::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<sys::perf_event_attr>() as u32,
        config: u64::from(sys::PERF_COUNT_SW_CPU_CLOCK),
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_freq = hz;
    attr.set_freq(1);
    // SAFETY: attr is a valid perf_event_attr of the size it says; pid -1
    // with a CPU is every process on that CPU; a non-negative result is a
    // descriptor this process owns.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const sys::perf_event_attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            libc::c_ulong::from(sys::PERF_FLAG_FD_CLOEXEC),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The online CPUs (`/sys/devices/system/cpu/online`: `0-3,5`).
fn online_cpus() -> Result<Vec<u32>, CpuError> {
    const ONLINE: &str = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(ONLINE).map_err(|source| CpuError::Cpus {
        what: ONLINE.to_string(),
        source,
    })?;
    parse_cpu_list(&text).ok_or_else(|| CpuError::Cpus {
        what: format!("{ONLINE}: {:?}", text.trim()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
    })
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_sysfs_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,4,6-7"), Some(vec![0, 1, 2, 4, 6, 7]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
