//! CPU profiling flags shared by `record` and `top`.

use std::time::Duration;

use clap::Args;
use innoprof::cpu::CpuOptions;

#[derive(Args, Debug, Clone)]
pub struct CpuArgs {
    /// CPU sampling rate: cpu-clock samples per second on each CPU.
    #[arg(short = 'F', long, value_name = "HZ", default_value_t = 99)]
    pub freq: u64,
    /// Also profile off-CPU time: where the server's threads block (futex, I/O), by stack.
    /// Costs a stack walk at each context switch of the server.
    #[arg(long)]
    pub offcpu: bool,
    /// Shortest block counted by stack in the off-CPU profile (implies --offcpu).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub offcpu_min: Option<Duration>,
}

impl CpuArgs {
    pub fn options(&self) -> CpuOptions {
        let defaults = CpuOptions::default();
        CpuOptions {
            frequency_hz: self.freq,
            offcpu: self.offcpu || self.offcpu_min.is_some(),
            offcpu_min_ns: self
                .offcpu_min
                .map_or(defaults.offcpu_min_ns, |d| d.as_nanos() as u64),
        }
    }
}
