//! The BPF side's vocabulary: the C headers' layouts (generated from the
//! objects' BTF), the Rust mirrors of their maps' keys and values, the
//! kernel's run-time statistics, and the log2 latency histogram.

#[macro_use]
pub mod layout;
pub mod abi;
pub mod histogram;
pub mod percpu;
pub mod run_stats;
