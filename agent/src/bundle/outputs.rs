//! Every file of a bundle, in one list: [`OUTPUTS`]. `bundle::write`
//! renders the files in this order, `metadata.json` describes each file
//! it lists from here, `report.html` links them from here, and
//! `bundle_replace` knows innoprof's own names from here.
//!
//! Adding an output format: one [`Output`] entry with its renderer (a
//! function of the [`Context`]), placed before `metadata.json` so that it
//! is listed there and the page can read it.

use std::collections::BTreeMap;

use crate::bundle::BundleError;
use crate::model::summary::Recording;

/// The files rendered so far, by name, in list order.
pub type Files = BTreeMap<String, Vec<u8>>;

/// What a renderer sees: the recording, innoprof's argv, and the files
/// the entries before it rendered.
pub struct Context<'a> {
    pub recording: &'a Recording,
    pub command_line: &'a [String],
    pub files: &'a Files,
}

/// Renders an entry's files: none, one, or (for a pattern) several.
pub type Render = fn(&Output, &Context) -> Result<Vec<(String, Vec<u8>)>, BundleError>;

/// One file of a bundle, or a family of them (`*` in the name).
#[derive(Debug)]
pub struct Output {
    /// The file name; a `*` stands for any run of characters.
    pub name: &'static str,
    /// What it holds, for metadata.json and report.html.
    pub description: &'static str,
    /// Its media type.
    pub media_type: &'static str,
    /// Which command writes it.
    pub written_by: &'static str,
    /// How `record` renders it; `None` for files another command writes
    /// (`diff`) or that only name innoprof's own scratch files.
    pub render: Option<Render>,
    /// Its JSON Schema, from the repository root (one of
    /// [`crate::bundle::contract::SCHEMAS`]); `None` for a file without one.
    pub schema: Option<&'static str>,
}

impl Output {
    /// Whether `file` is this entry's file (or one of its family). A `*`
    /// takes only what `report::file_stem` keeps ([A-Za-z0-9._-]): a
    /// bundle directory being replaced must not lose a user's `a b.folded`.
    pub fn matches(&self, file: &str) -> bool {
        match self.name.split_once('*') {
            None => self.name == file,
            Some((pre, post)) => file
                .strip_prefix(pre)
                .and_then(|f| f.strip_suffix(post))
                .is_some_and(|stem| {
                    !stem.is_empty()
                        && stem
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
                }),
        }
    }

    pub fn is_pattern(&self) -> bool {
        self.name.contains('*')
    }

    /// What it holds and, when it has one, its schema: as metadata.json
    /// and report.html say it.
    pub fn what(&self) -> String {
        match self.schema {
            Some(schema) => format!("{} (schema: {schema})", self.description),
            None => self.description.to_string(),
        }
    }
}

/// The entry that describes `file`; the first match wins, so a fixed
/// name comes before any pattern that would also take it.
pub fn describe(file: &str) -> Option<&'static Output> {
    OUTPUTS.iter().find(|o| o.matches(file))
}

/// The file of the family `pattern` (an [`OUTPUTS`] entry's name with a
/// `*`) for `stem`: `instance("*.folded", "oncpu")` is `oncpu.folded`.
/// Every file of a family is named here, so the names cannot drift from
/// the list.
pub fn instance(pattern: &'static str, stem: &str) -> String {
    debug_assert!(
        OUTPUTS.iter().any(|o| o.is_pattern() && o.name == pattern),
        "{pattern} is not a pattern of OUTPUTS"
    );
    pattern.replacen('*', stem, 1)
}

/// A file's entry as `metadata.json` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FileInfo {
    pub name: String,
    pub description: String,
    pub media_type: String,
}

impl FileInfo {
    pub fn of(file: &str) -> Self {
        let o = describe(file);
        Self {
            name: file.to_string(),
            description: o.map_or_else(String::new, Output::what),
            media_type: o
                .map_or("application/octet-stream", |o| o.media_type)
                .to_string(),
        }
    }
}

use crate::bundle::render as r;

/// Every file innoprof writes into a bundle directory, in the order
/// `record` renders them: the recorder's own files first, then what is
/// rendered from the summary, then metadata.json (which lists every file)
/// and report.html (which reads them). An entry after metadata.json must
/// always write its one file, since metadata.json lists it beforehand.
pub const OUTPUTS: &[Output] = &[
    Output {
        name: crate::record::cpu_profile::ONCPU_SVG,
        description: "on-CPU flame graph (where the server runs)",
        media_type: "image/svg+xml",
        written_by: "record",
        render: Some(r::recorded),
        schema: None,
    },
    Output {
        name: crate::record::cpu_profile::OFFCPU_SVG,
        description: "off-CPU flame graph (where the server's threads block)",
        media_type: "image/svg+xml",
        written_by: "record",
        render: Some(r::recorded),
        schema: None,
    },
    Output {
        name: crate::server_state::INNODB_STATUS_FILES,
        description: "SHOW ENGINE INNODB STATUS at the start and at the end",
        media_type: "text/plain",
        written_by: "record",
        render: Some(r::recorded),
        schema: None,
    },
    Output {
        name: crate::bundle::diff::JSON_FILE,
        description: "what changed between two recordings (`innoprof diff`)",
        media_type: "application/json",
        written_by: "diff",
        render: None,
        schema: None,
    },
    Output {
        name: crate::bundle::diff::TEXT_FILE,
        description: "what changed between two recordings, as text",
        media_type: "text/plain",
        written_by: "diff",
        render: None,
        schema: None,
    },
    Output {
        name: crate::bundle::diff::SVG_FILES,
        description: "differential flame graph (red grew, blue shrank)",
        media_type: "image/svg+xml",
        written_by: "diff",
        render: None,
        schema: None,
    },
    Output {
        name: crate::report::folded::FILES,
        description: "folded stacks (one `frame;frame;... weight` line per stack) of a probe or of the CPU profile",
        media_type: "text/plain",
        written_by: "record",
        render: Some(r::recorded),
        schema: None,
    },
    Output {
        name: crate::live::timeseries::JSON_FILE,
        description: "calls and wait time per interval, per probe and call site (`record --interval`)",
        media_type: "application/json",
        written_by: "record",
        render: Some(r::timeseries_json),
        schema: Some(crate::bundle::contract::TIMESERIES_SCHEMA),
    },
    Output {
        name: crate::live::timeseries::CSV_FILE,
        description: "timeseries.json as CSV",
        media_type: "text/csv",
        written_by: "record",
        render: Some(r::timeseries_csv),
        schema: None,
    },
    Output {
        name: crate::bundle::SUMMARY_JSON,
        description: "the recording: every probe's counts, latencies, call sites, stacks, CPU profile, overhead and findings",
        media_type: "application/json",
        written_by: "record",
        render: Some(r::summary_json),
        schema: Some(crate::bundle::contract::SUMMARY_SCHEMA),
    },
    Output {
        name: crate::bundle::SUMMARY_TXT,
        description: "the summary as text tables",
        media_type: "text/plain",
        written_by: "record, report",
        render: Some(r::summary_txt),
        schema: None,
    },
    Output {
        name: crate::report::histograms::JSON,
        description: "latency histograms per probe (log2 buckets)",
        media_type: "application/json",
        written_by: "record",
        render: Some(r::histograms_json),
        schema: Some(crate::bundle::contract::HISTOGRAMS_SCHEMA),
    },
    Output {
        name: crate::report::histograms::CSV,
        description: "latency histograms per probe, as CSV",
        media_type: "text/csv",
        written_by: "record",
        render: Some(r::histograms_csv),
        schema: None,
    },
    Output {
        name: crate::bundle::CPU_PPROF,
        description: "on-CPU profile for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        render: Some(r::cpu_pprof),
        schema: None,
    },
    Output {
        name: crate::bundle::OFFCPU_PPROF,
        description: "off-CPU profile for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        render: Some(r::offcpu_pprof),
        schema: None,
    },
    Output {
        name: crate::bundle::WAITS_PPROF,
        description: "wait probes' stacks for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        render: Some(r::waits_pprof),
        schema: None,
    },
    Output {
        name: crate::bundle::METADATA_JSON,
        description: "where, when and how it was recorded, what attached, what was lost, what it cost, and these files",
        media_type: "application/json",
        written_by: "record",
        render: Some(r::metadata_json),
        schema: Some(crate::bundle::contract::METADATA_SCHEMA),
    },
    Output {
        name: crate::report::html::FILE,
        description: "the report: tables, charts and flame graphs in one page",
        media_type: "text/html",
        written_by: "record, report",
        render: Some(r::report_html),
        schema: None,
    },
    Output {
        name: crate::report::WRITE_CHECK,
        description: "innoprof's check that the directory is writable (removed at once)",
        media_type: "application/octet-stream",
        written_by: "record, report, diff",
        render: None,
        schema: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_fixed_names() {
        assert_eq!(describe("oncpu.svg").unwrap().name, "oncpu.svg");
        assert_eq!(describe("oncpu.folded").unwrap().name, "*.folded");
        assert_eq!(describe("diff.oncpu.svg").unwrap().name, "diff.*.svg");
        assert_eq!(describe("diff.oncpu.folded").unwrap().name, "*.folded");
        assert_eq!(
            describe("innodb_status.start.txt").unwrap().name,
            "innodb_status.*.txt"
        );
        assert!(describe(".folded").is_none());
        assert!(describe("notes.txt").is_none());
    }

    /// Names made outside the list (a family's files, fixed names the
    /// recorder knows) are the list's.
    #[test]
    fn instances_and_named_files_are_described() {
        use crate::report::folded::FILES as FOLDED;
        assert_eq!(instance(FOLDED, "oncpu.count"), "oncpu.count.folded");
        assert_eq!(
            crate::server_state::innodb_status_file("end"),
            "innodb_status.end.txt"
        );
        for (file, entry) in [
            (instance(FOLDED, "diff.offcpu"), FOLDED),
            (
                instance(crate::bundle::diff::SVG_FILES, "oncpu"),
                crate::bundle::diff::SVG_FILES,
            ),
            (
                crate::server_state::innodb_status_file("start"),
                crate::server_state::INNODB_STATUS_FILES,
            ),
            (crate::record::cpu_profile::ONCPU_FOLDED.into(), FOLDED),
            (crate::record::cpu_profile::OFFCPU_FOLDED.into(), FOLDED),
        ] {
            assert_eq!(describe(&file).map(|o| o.name), Some(entry), "{file}");
        }
    }

    #[test]
    fn every_name_is_listed_once() {
        for (i, o) in OUTPUTS.iter().enumerate() {
            assert!(
                OUTPUTS[..i].iter().all(|p| p.name != o.name),
                "{} twice",
                o.name
            );
        }
        // After metadata.json: fixed names only (it lists them beforehand).
        let m = OUTPUTS
            .iter()
            .position(|o| o.name == crate::bundle::METADATA_JSON)
            .unwrap();
        assert!(OUTPUTS[m..].iter().all(|o| !o.is_pattern()));
    }
}
