//! Hidden options that shrink the BPF maps, to make capacity exhaustion
//! happen on purpose (tests, or checking how a full map is reported).

use clap::Args;
use innoprof::attach::MapLimits;

#[derive(Args, Clone)]
pub struct LimitArgs {
    /// Capacity of the stack maps (distinct stacks; default 32768 / 65536 counters).
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_stacks: Option<u32>,
    /// Capacity of the per-call-site counter map (default 16384).
    #[arg(long, hide = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_callsites: Option<u32>,
}

impl LimitArgs {
    pub fn limits(&self) -> MapLimits {
        MapLimits {
            stacks: self.max_stacks,
            callsites: self.max_callsites,
        }
    }
}
