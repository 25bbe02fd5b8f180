//! What can go wrong sampling CPU stacks and blocked time.

#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("opening the CPU profiler's BPF object failed")]
    Open(#[source] libbpf_rs::Error),
    #[error(
        "loading the CPU profiler's BPF object failed (verifier, permissions, or the kernel's BTF for off-CPU)"
    )]
    Load(#[source] libbpf_rs::Error),
    #[error("attaching BPF program {name} failed (permissions or kernel support)")]
    Program {
        name: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("BPF program `{0}` missing from the object")]
    MissingProgram(&'static str),
    #[error("listing online CPUs ({what})")]
    Cpus {
        what: String,
        source: std::io::Error,
    },
    #[error(
        "opening the cpu-clock perf event on CPU {cpu} failed (perf_event_paranoid, CAP_PERFMON?)"
    )]
    PerfEvent { cpu: u32, source: std::io::Error },
    #[error("BPF map `{0}` is missing or of the wrong type")]
    Map(&'static str),
    #[error("BPF object global `{0}` is missing")]
    Global(&'static str),
    #[error(transparent)]
    Collect(#[from] crate::collect::CollectError),
    #[error("reading /proc/{pid}/maps")]
    Maps { pid: u32, source: std::io::Error },
    #[error("loading unwind rows into BPF")]
    Unwind(#[source] libbpf_rs::Error),
    #[error("sampling frequency {0} Hz is out of range (1..=10000)")]
    Frequency(u64),
}
