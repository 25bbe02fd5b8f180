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

// The stages, in pipeline order: a stage imports only the ones above it
// here (and itself); the `layering` test holds every file to it.

// Shared text handling: escaping what a target or a bundle says.
pub mod text;
// The BPF side's vocabulary: header layouts, map mirrors, run statistics.
#[macro_use]
pub mod bpf;
// The process: found, trusted, its files opened as it maps them.
pub mod target;
// What innoprof keeps between runs, per boot and across boots.
pub mod persist;
// Reading a binary: ELF, DWARF, debug files, line tables, placements.
pub mod resolve;
// What to probe and where: server, catalog, probe set, latches, counters.
pub mod plan;
// The BPF object on the planned offsets.
pub mod attach;
// The maps read into totals.
pub mod collect;
// What hits cost, and the governor that spends the budget.
pub mod cost;
// Stacks to names.
pub mod symbolize;
// On-CPU samples and off-CPU time.
pub mod cpu;
// The recording as data (summary.json).
pub mod model;
// The server's own account over SQL.
pub mod server_state;
// What is wrong: one rule per file.
pub mod findings;
// Renderers: tables, HTML, folded stacks, pprof, histograms.
pub mod report;
// The recorder: check, plan, attach, govern, collect, detach; results.
pub mod record;
// Live readings: `top`'s rows and the interval series.
pub mod live;
// `serve`: Prometheus and pprof over HTTP.
pub mod export;
// The output directory: written, read back, replaced, compared.
pub mod bundle;

#[cfg(test)]
mod layering;

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
        if text.is_empty() {
            text.push_str(&said);
        } else {
            // A cause goes on its parent's line: a line break in it is
            // quoted input (a parser's message quoting a bundle's string),
            // never a list of innoprof's own.
            text.push_str(": ");
            text.push_str(&text::printable(&said));
        }
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

    /// A cause quoting input with a line break (serde_json quotes the
    /// bad string of a bundle) stays on the line; a message of
    /// innoprof's own that lists things keeps its lines.
    #[test]
    fn a_cause_is_said_on_its_parents_line() {
        let quoted = Wraps(Repeats(std::io::Error::other("unknown variant `a\nb`")));
        assert_eq!(
            super::error_chain(&quoted),
            "attaching probe x: loading BPF: unknown variant `a\\x0ab`"
        );
        let list = std::io::Error::other("two servers:\n  1\n  2");
        assert_eq!(super::error_chain(&list), "two servers:\n  1\n  2");
    }
}
