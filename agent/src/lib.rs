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

#[macro_use]
pub mod bpf_layout;
pub mod attach;
pub mod attach_errno;
pub mod attach_plan;
pub mod bench_toggle;
pub mod bpf_abi;
pub mod bundle;
pub mod bundle_read;
pub mod bundle_replace;
pub mod calibrate;
pub mod callsite;
pub mod catalog;
pub mod collect;
pub mod contract;
pub mod cost;
pub mod cpu;
pub mod diff;
pub mod discover;
pub mod dwarf_frames;
pub mod estimate;
pub mod export;
pub mod findings;
pub mod governor;
pub mod histogram;
pub mod hit_price;
pub mod hitcost_cache;
pub mod host_idle;
pub mod in_target;
pub mod inspect;
pub mod kept_functions;
pub mod kept_plan;
pub mod kernel;
pub mod kernel_names;
pub mod kernel_symbols;
pub mod library_debug;
pub mod live;
pub mod memcounters;
pub mod outputs;
pub mod own_usage;
pub mod privileges;
pub mod probeset;
pub mod ready;
pub mod record;
pub mod report;
pub mod resolve;
pub mod results;
pub mod rootfs;
pub mod run_dir;
pub mod run_stats;
pub mod segments;
pub mod server;
pub mod server_state;
pub mod symbolize;
pub mod target;
pub mod text;
pub mod thread_role;
pub mod timeseries;
pub mod trust;

/// An error and its causes joined by `: `, as anyhow's `{:#}` prints them.
/// The library's error types never repeat their source in their own text
/// (anyhow would print the cause twice), so a message built from an error
/// for a report, a log line or an HTTP body goes through this.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    join_causes(std::iter::successors(Some(e), |c| c.source()))
}

/// Messages of an error chain joined by `: `, each said once: a cause
/// whose text its parent already ends with is left out. Errors of other
/// crates do repeat their source (libbpf's `Permission denied (os error
/// 13)` over the io::Error saying `Permission denied`), which printed
/// "…(os error 13): Permission denied". Control characters are escaped
/// (see [`text`]).
pub fn join_causes<'a>(chain: impl Iterator<Item = &'a dyn std::error::Error>) -> String {
    let mut text = String::new();
    let mut parent = String::new();
    for cause in chain {
        let said = cause.to_string();
        // `Permission denied (os error 13)` already says `Permission denied`.
        let bare = said.split(" (os error").next().unwrap_or(&said);
        if !parent.is_empty()
            && !bare.is_empty()
            && (parent.ends_with(&said) || parent.contains(bare))
        {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
        parent = said;
    }
    // Errors quote what a target or a bundle said (a probe's name, a
    // path): never raw to a terminal or a log.
    text::printable_lines(&text).into_owned()
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("loading BPF: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("attaching probe x")]
    struct Wraps(#[source] Repeats);

    #[test]
    fn a_cause_its_parent_already_said_is_said_once() {
        let io = std::io::Error::from_raw_os_error(libc::EACCES);
        let e = Wraps(Repeats(io));
        assert_eq!(
            super::error_chain(&e),
            "attaching probe x: loading BPF: Permission denied (os error 13)"
        );
        let plain = std::io::Error::other("disk full");
        assert_eq!(super::error_chain(&plain), "disk full");
    }
}
