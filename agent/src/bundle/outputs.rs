//! The renderers of a bundle's files, by name, in the order of
//! [`crate::model::files::FILES`] (which names and describes every file).
//! `bundle::write` renders each listed file that has one here.

use std::collections::BTreeMap;

use crate::bundle::render as r;
use crate::bundle::BundleError;
use crate::model::files::{
    BundleFile, CPU_PPROF, FOLDED_FILES, HISTOGRAMS_CSV, HISTOGRAMS_JSON, INNODB_STATUS_FILES,
    METADATA_JSON, OFFCPU_PPROF, OFFCPU_SVG, ONCPU_SVG, REPORT_HTML, SUMMARY_JSON, SUMMARY_TXT,
    TIMESERIES_CSV, TIMESERIES_JSON, WAITS_PPROF,
};
use crate::record::recording::Recording;

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
pub type Render = fn(&BundleFile, &Context) -> Result<Vec<(String, Vec<u8>)>, BundleError>;

/// How `record` renders each file it writes (files another command
/// writes, `diff`, or that only name innoprof's own scratch files have none).
pub const RENDERERS: &[(&str, Render)] = &[
    (ONCPU_SVG, r::recorded),
    (OFFCPU_SVG, r::recorded),
    (INNODB_STATUS_FILES, r::recorded),
    (FOLDED_FILES, r::recorded),
    (TIMESERIES_JSON, r::timeseries_json),
    (TIMESERIES_CSV, r::timeseries_csv),
    (SUMMARY_JSON, r::summary_json),
    (SUMMARY_TXT, r::summary_txt),
    (HISTOGRAMS_JSON, r::histograms_json),
    (HISTOGRAMS_CSV, r::histograms_csv),
    (CPU_PPROF, r::cpu_pprof),
    (OFFCPU_PPROF, r::offcpu_pprof),
    (WAITS_PPROF, r::waits_pprof),
    (METADATA_JSON, r::metadata_json),
    (REPORT_HTML, r::report_html),
];

/// The renderer of the file entry named `name`.
pub fn renderer(name: &str) -> Option<Render> {
    RENDERERS.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::files::FILES;

    /// Every renderer is for a listed file that `record` writes, and every
    /// file `record` writes has one.
    #[test]
    fn every_recorded_file_has_one_renderer() {
        for (name, _) in RENDERERS {
            let listed = FILES.iter().find(|f| f.name == *name);
            assert!(
                listed.is_some_and(|f| f.written_by.contains("record")),
                "{name}"
            );
            assert_eq!(
                RENDERERS.iter().filter(|(n, _)| n == name).count(),
                1,
                "{name}"
            );
        }
        for f in FILES.iter().filter(|f| {
            f.written_by.starts_with("record") && f.name != crate::model::files::WRITE_CHECK
        }) {
            assert!(renderer(f.name).is_some(), "{} has no renderer", f.name);
        }
    }
}
