//! innoprof: where a live MySQL/MariaDB server waits, from BPF uprobes
//! aggregated in the kernel.
//!
//! The modules follow a probe from definition to output:
//! [`catalog`] (what to probe) → [`target`] and [`server`] (what runs) →
//! [`resolve`] (symbols to file offsets) → [`attach`] (BPF programs on the
//! offsets) → [`collect`] (maps to totals) → [`symbolize`] (stacks to
//! names) → [`report`] (tables, JSON, folded stacks, pprof, report.html) →
//! [`bundle`] (the output directory and its tarball). [`record`] wires them.
//! Alongside, [`cpu`] samples on-CPU stacks and off-CPU time, and [`diff`]
//! compares two recordings. [`timeseries`] turns live reads of the counters
//! into per-interval deltas, [`export`] serves them to Prometheus, and
//! [`live`] turns them into the tables of `innoprof top`.

pub mod attach;
pub mod attach_errno;
pub mod bpf_abi;
pub mod bundle;
pub mod bundle_read;
pub mod bundle_replace;
pub mod calibrate;
pub mod callsite;
pub mod catalog;
pub mod collect;
pub mod cost;
pub mod cpu;
pub mod diff;
pub mod estimate;
pub mod export;
pub mod governor;
pub mod histogram;
pub mod hitcost_cache;
pub mod inspect;
pub mod kernel;
pub mod live;
pub mod memcounters;
pub mod privileges;
pub mod probeset;
pub mod record;
pub mod report;
pub mod resolve;
pub mod rootfs;
pub mod server;
pub mod symbolize;
pub mod target;
pub mod timeseries;

/// An error and its causes joined by `: `, as anyhow's `{:#}` prints them.
/// The library's error types never repeat their source in their own text
/// (anyhow would print the cause twice), so a message built from an error
/// for a report, a log line or an HTTP body goes through this.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
