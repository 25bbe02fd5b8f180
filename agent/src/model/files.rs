//! Every file of a bundle, named and described in one list: [`FILES`].
//! `bundle::write` renders them in this order (`bundle::outputs` holds the
//! renderers), `metadata.json` describes each file from here, `report.html`
//! links them from here, and `bundle::replace` knows innoprof's own names
//! from here. Also the output contract's version and its schemas' paths.
//!
//! Adding an output format: its name and entry here, its renderer in
//! `bundle::outputs`, placed before `metadata.json` so that it is listed
//! there and the page can read it.

/// The version this build writes and the newest it reads (see
/// `bundle::contract` for what changed when).
pub const FORMAT_VERSION: u32 = 2;

/// Where the committed schemas live, from the repository root.
pub const SUMMARY_SCHEMA: &str = "docs/schema/summary.schema.json";
pub const METADATA_SCHEMA: &str = "docs/schema/metadata.schema.json";
pub const TIMESERIES_SCHEMA: &str = "docs/schema/timeseries.schema.json";
pub const HISTOGRAMS_SCHEMA: &str = "docs/schema/histograms.schema.json";
pub const READY_SCHEMA: &str = "docs/schema/ready.schema.json";
pub const RAW_STACKS_SCHEMA: &str = "docs/schema/stacks.raw.schema.json";

pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_TXT: &str = "summary.txt";
pub const METADATA_JSON: &str = "metadata.json";
pub const REPORT_HTML: &str = "report.html";
pub const CPU_PPROF: &str = "cpu.pb.gz";
pub const OFFCPU_PPROF: &str = "offcpu.pb.gz";
pub const WAITS_PPROF: &str = "waits.pb.gz";
pub const ONCPU_FOLDED: &str = "oncpu.folded";
pub const ONCPU_SVG: &str = "oncpu.svg";
pub const OFFCPU_FOLDED: &str = "offcpu.folded";
pub const OFFCPU_SVG: &str = "offcpu.svg";
/// Folded stacks of a probe or of the CPU profile, `NAME.folded`.
pub const FOLDED_FILES: &str = "*.folded";
pub const HISTOGRAMS_JSON: &str = "histograms.json";
pub const HISTOGRAMS_CSV: &str = "histograms.csv";
pub const TIMESERIES_JSON: &str = "timeseries.json";
pub const TIMESERIES_CSV: &str = "timeseries.csv";
/// The stacks as addresses, named later by `innoprof report`
/// (`model::raw_stacks`).
pub const RAW_STACKS_JSON: &str = "stacks.raw.json";
/// SHOW ENGINE INNODB STATUS's text beside the summary:
/// `innodb_status.start.txt` and `innodb_status.end.txt` (see
/// [`innodb_status_file`]).
pub const INNODB_STATUS_FILES: &str = "innodb_status.*.txt";
/// The files `innoprof diff` puts beside the differential folded files and graphs.
pub const DIFF_JSON: &str = "diff.json";
pub const DIFF_TXT: &str = "diff.txt";
/// The differential flame graphs, `diff.KIND.svg`.
pub const DIFF_SVG_FILES: &str = "diff.*.svg";
/// The empty file `report::prepare_dir` writes to prove the directory writable.
pub const WRITE_CHECK: &str = ".innoprof-write-check";

/// The file of SHOW ENGINE INNODB STATUS at `when` (`start` or `end`).
pub fn innodb_status_file(when: &str) -> String {
    instance(INNODB_STATUS_FILES, when)
}

/// One file of a bundle, or a family of them (`*` in the name).
#[derive(Debug)]
pub struct BundleFile {
    /// The file name; a `*` stands for any run of characters.
    pub name: &'static str,
    /// What it holds, for metadata.json and report.html.
    pub description: &'static str,
    /// Its media type.
    pub media_type: &'static str,
    /// Which command writes it.
    pub written_by: &'static str,
    /// Its JSON Schema, from the repository root (one of
    /// `bundle::contract::SCHEMAS`); `None` for a file without one.
    pub schema: Option<&'static str>,
}

impl BundleFile {
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
pub fn describe(file: &str) -> Option<&'static BundleFile> {
    FILES.iter().find(|o| o.matches(file))
}

/// The file of the family `pattern` (an [`FILES`] entry's name with a
/// `*`) for `stem`: `instance("*.folded", "oncpu")` is `oncpu.folded`.
/// Every file of a family is named here, so the names cannot drift from
/// the list.
pub fn instance(pattern: &'static str, stem: &str) -> String {
    debug_assert!(
        FILES.iter().any(|o| o.is_pattern() && o.name == pattern),
        "{pattern} is not a pattern of FILES"
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
            description: o.map_or_else(String::new, BundleFile::what),
            media_type: o
                .map_or("application/octet-stream", |o| o.media_type)
                .to_string(),
        }
    }
}

/// Every file innoprof writes into a bundle directory, in the order
/// `record` renders them: the recorder's own files first, then what is
/// rendered from the summary, then metadata.json (which lists every file)
/// and report.html (which reads them). An entry after metadata.json must
/// always write its one file, since metadata.json lists it beforehand.
pub const FILES: &[BundleFile] = &[
    BundleFile {
        name: ONCPU_SVG,
        description: "on-CPU flame graph (where the server runs)",
        media_type: "image/svg+xml",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: OFFCPU_SVG,
        description: "off-CPU flame graph (where the server's threads block)",
        media_type: "image/svg+xml",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: INNODB_STATUS_FILES,
        description: "SHOW ENGINE INNODB STATUS at the start and at the end",
        media_type: "text/plain",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: DIFF_JSON,
        description: "what changed between two recordings (`innoprof diff`)",
        media_type: "application/json",
        written_by: "diff",
        schema: None,
    },
    BundleFile {
        name: DIFF_TXT,
        description: "what changed between two recordings, as text",
        media_type: "text/plain",
        written_by: "diff",
        schema: None,
    },
    BundleFile {
        name: DIFF_SVG_FILES,
        description: "differential flame graph (red grew, blue shrank)",
        media_type: "image/svg+xml",
        written_by: "diff",
        schema: None,
    },
    BundleFile {
        name: FOLDED_FILES,
        description: "folded stacks (one `frame;frame;... weight` line per stack) of a probe or of the CPU profile",
        media_type: "text/plain",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: TIMESERIES_JSON,
        description: "calls and wait time per interval, per probe and call site (`record --interval`)",
        media_type: "application/json",
        written_by: "record",
        schema: Some(TIMESERIES_SCHEMA),
    },
    BundleFile {
        name: TIMESERIES_CSV,
        description: "timeseries.json as CSV",
        media_type: "text/csv",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: SUMMARY_JSON,
        description: "the recording: every probe's counts, latencies, call sites, stacks, CPU profile, overhead and findings",
        media_type: "application/json",
        written_by: "record",
        schema: Some(SUMMARY_SCHEMA),
    },
    BundleFile {
        name: SUMMARY_TXT,
        description: "the summary as text tables",
        media_type: "text/plain",
        written_by: "record, report",
        schema: None,
    },
    BundleFile {
        name: HISTOGRAMS_JSON,
        description: "latency histograms per probe (log2 buckets)",
        media_type: "application/json",
        written_by: "record",
        schema: Some(HISTOGRAMS_SCHEMA),
    },
    BundleFile {
        name: HISTOGRAMS_CSV,
        description: "latency histograms per probe, as CSV",
        media_type: "text/csv",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: CPU_PPROF,
        description: "on-CPU profile for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: OFFCPU_PPROF,
        description: "off-CPU profile for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: WAITS_PPROF,
        description: "wait probes' stacks for `go tool pprof`",
        media_type: "application/vnd.google.protobuf+gzip",
        written_by: "record",
        schema: None,
    },
    BundleFile {
        name: RAW_STACKS_JSON,
        description: "the stacks as addresses, with the mappings, build ids and file stamps that `innoprof report` names them from later (on any host with the binaries or their debug files)",
        media_type: "application/json",
        written_by: "record",
        schema: Some(RAW_STACKS_SCHEMA),
    },
    BundleFile {
        name: METADATA_JSON,
        description: "where, when and how it was recorded, what attached, what was lost, what it cost, and these files",
        media_type: "application/json",
        written_by: "record",
        schema: Some(METADATA_SCHEMA),
    },
    BundleFile {
        name: REPORT_HTML,
        description: "the report: tables, charts and flame graphs in one page",
        media_type: "text/html",
        written_by: "record, report",
        schema: None,
    },
    BundleFile {
        name: WRITE_CHECK,
        description: "innoprof's check that the directory is writable (removed at once)",
        media_type: "application/octet-stream",
        written_by: "record, report, diff",
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
        use FOLDED_FILES as FOLDED;
        assert_eq!(instance(FOLDED, "oncpu.count"), "oncpu.count.folded");
        assert_eq!(innodb_status_file("end"), "innodb_status.end.txt");
        for (file, entry) in [
            (instance(FOLDED, "diff.offcpu"), FOLDED),
            (instance(DIFF_SVG_FILES, "oncpu"), DIFF_SVG_FILES),
            (innodb_status_file("start"), INNODB_STATUS_FILES),
            (ONCPU_FOLDED.into(), FOLDED),
            (OFFCPU_FOLDED.into(), FOLDED),
        ] {
            assert_eq!(describe(&file).map(|o| o.name), Some(entry), "{file}");
        }
    }

    #[test]
    fn every_name_is_listed_once() {
        for (i, o) in FILES.iter().enumerate() {
            assert!(
                FILES[..i].iter().all(|p| p.name != o.name),
                "{} twice",
                o.name
            );
        }
        // After metadata.json: fixed names only (it lists them beforehand).
        let m = FILES.iter().position(|o| o.name == METADATA_JSON).unwrap();
        assert!(FILES[m..].iter().all(|o| !o.is_pattern()));
    }
}
