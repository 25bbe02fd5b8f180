//! innoprof's output contract: which version of a bundle's JSON file
//! (`summary.json`, `metadata.json`, `timeseries.json`, `histograms.json`)
//! or of the `--ready-fd` line a text is, and whether this build can read
//! it.
//!
//! # `format_version` policy
//!
//! One number, [`FORMAT_VERSION`], at the top level of each of those
//! files and of the ready line. It is bumped when a field is renamed or
//! removed, or keeps its name but changes meaning or unit; adding a field
//! does not bump it (readers ignore fields they do not know, and the serde
//! types give new fields a default so older files still parse). A reader
//! accepts every version up to its own, keeping an old field name readable
//! with `#[serde(alias = ...)]`, and refuses a newer one with
//! [`ContractError::TooNew`] rather than misreading it.
//!
//! History:
//! - 0: `summary.json` before it carried a version (no `format_version`);
//!   `timeseries.json`, `histograms.json` and the ready line before they
//!   carried one (they carry 2 from then on, with unchanged fields).
//! - 1: `metadata.json` before the names were aligned with `summary.json`.
//! - 2: both files carry it; `metadata.json` renamed `dropped.probes` to
//!   `dropped.drops`, `overhead.pct_of_one_cpu` to
//!   `overhead.probes_pct_of_core`, `overhead.probes[].hits` to
//!   `overhead.probes[].calls` and `probes.sampled[].sampling_ratio` to
//!   `probes.sampled[].attached_fraction` (the names `summary.json` uses).
//!
//! The JSON Schemas in `docs/schema/` are generated from the serde types
//! ([`SCHEMAS`]); a unit test keeps the committed files equal to them. A
//! bundle file's schema is named by its [`crate::model::files::FILES`] entry.

use crate::model::files::{
    FORMAT_VERSION, HISTOGRAMS_SCHEMA, METADATA_SCHEMA, RAW_STACKS_SCHEMA, READY_SCHEMA,
    SUMMARY_SCHEMA, TIMESERIES_SCHEMA,
};
use std::path::{Path, PathBuf};

/// Generates a schema from its serde type.
pub type Generate = fn() -> serde_json::Value;

/// Every committed schema and the function that generates it.
pub const SCHEMAS: &[(&str, Generate)] = &[
    (SUMMARY_SCHEMA, summary_schema),
    (METADATA_SCHEMA, metadata_schema),
    (TIMESERIES_SCHEMA, timeseries_schema),
    (HISTOGRAMS_SCHEMA, histograms_schema),
    (READY_SCHEMA, ready_schema),
    (RAW_STACKS_SCHEMA, raw_stacks_schema),
];

#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("{path} has format_version {found}, newer than this innoprof reads ({known}); use a newer innoprof", known = FORMAT_VERSION)]
    TooNew { path: PathBuf, found: u64 },
}

/// Refuses a file written by a newer innoprof. A file without
/// `format_version` (written before it existed) is version 0; anything
/// that is not a JSON object, or whose version is not a number, is left to
/// the caller's own parse to report.
pub fn check_version(path: &Path, bytes: &[u8]) -> Result<(), ContractError> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        #[serde(default)]
        format_version: u64,
    }
    match serde_json::from_slice::<Versioned>(bytes) {
        Ok(v) if v.format_version > u64::from(FORMAT_VERSION) => Err(ContractError::TooNew {
            path: path.into(),
            found: v.format_version,
        }),
        _ => Ok(()),
    }
}

/// The JSON Schema of `summary.json` as innoprof writes it: a field the
/// writer always emits is required (also one with a serde default, which
/// only helps old files parse).
pub fn summary_schema() -> serde_json::Value {
    schema_of::<crate::model::summary::Summary>()
}

/// The JSON Schema of `metadata.json` as innoprof writes it.
pub fn metadata_schema() -> serde_json::Value {
    schema_of::<crate::report::metadata::Metadata>()
}

/// The JSON Schema of `timeseries.json` (`record --interval`).
pub fn timeseries_schema() -> serde_json::Value {
    schema_of::<crate::model::timeseries::TimeSeries>()
}

/// The JSON Schema of `histograms.json`.
pub fn histograms_schema() -> serde_json::Value {
    schema_of::<crate::report::histograms::Histograms>()
}

/// The JSON Schema of the `--ready-fd` line.
pub fn ready_schema() -> serde_json::Value {
    schema_of::<crate::record::ready::Ready>()
}

/// The JSON Schema of `stacks.raw.json`.
pub fn raw_stacks_schema() -> serde_json::Value {
    schema_of::<crate::model::raw_stacks::RawStacks>()
}

fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

/// A schema as committed: pretty JSON and a final newline.
pub fn schema_text(schema: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).expect("a schema serialises");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A schema is read by users of the bundle, not of this crate: its
    /// descriptions (the types' doc comments) name no module path, which
    /// moves with the code and means nothing outside it.
    #[test]
    fn schemas_name_no_module_path() {
        for (file, schema) in SCHEMAS {
            let text = schema_text(&schema());
            let leaked: Vec<&str> = text.lines().filter(|l| l.contains("crate::")).collect();
            assert!(leaked.is_empty(), "{file}: {leaked:#?}");
        }
    }

    /// The committed schemas are the serde types' own; `INNOPROF_BLESS=1`
    /// rewrites them after a change of the types.
    #[test]
    fn committed_schemas_match_the_serde_types() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bless = std::env::var_os("INNOPROF_BLESS").is_some_and(|v| v == "1");
        for (file, schema) in SCHEMAS {
            let path = root.join(file);
            let want = schema_text(&schema());
            if bless {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &want).unwrap();
                continue;
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            if have != want {
                let first = have
                    .lines()
                    .zip(want.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(have.lines().count().min(want.lines().count()));
                panic!(
                    "{file} differs from the serde types from line {}: {:?} committed, {:?} generated.\n\
                     If the change is meant, rerun with INNOPROF_BLESS=1 and commit the file \
                     (and bump model::files::FORMAT_VERSION if a field was renamed, removed or changed meaning)",
                    first + 1,
                    have.lines().nth(first).unwrap_or("<end>"),
                    want.lines().nth(first).unwrap_or("<end>"),
                );
            }
        }
    }

    #[test]
    fn required_fields_are_required() {
        let s = summary_schema();
        let required = |v: &serde_json::Value| -> Vec<String> {
            v["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect()
        };
        let top = required(&s);
        for f in [
            "format_version",
            "probes",
            "drops",
            "overhead",
            "duration_s",
        ] {
            assert!(top.contains(&f.to_string()), "{f}: {top:?}");
        }
        assert!(!top.contains(&"cpu".to_string()), "skipped when absent");
        let m = required(&metadata_schema());
        for f in ["format_version", "format", "dropped", "files", "overhead"] {
            assert!(m.contains(&f.to_string()), "{f}: {m:?}");
        }
        for (schema, fields) in [
            (
                timeseries_schema(),
                &["format_version", "interval_ms", "points"][..],
            ),
            (
                histograms_schema(),
                &["format_version", "buckets", "probes"],
            ),
            (ready_schema(), &["format_version", "event", "targets"]),
        ] {
            let have = required(&schema);
            for f in fields {
                assert!(have.contains(&f.to_string()), "{f}: {have:?}");
            }
        }
        assert!(!required(&ready_schema()).contains(&"listen".to_string()));
    }

    /// A bundle file's entry names only a schema this module generates.
    #[test]
    fn every_output_schema_is_generated() {
        let named: Vec<&str> = crate::model::files::FILES
            .iter()
            .filter_map(|o| o.schema)
            .collect();
        for s in &named {
            assert!(SCHEMAS.iter().any(|(p, _)| p == s), "{s}");
        }
        for file in [
            crate::model::files::SUMMARY_JSON,
            crate::model::files::METADATA_JSON,
            crate::model::files::TIMESERIES_JSON,
            crate::model::files::HISTOGRAMS_JSON,
        ] {
            assert!(
                crate::model::files::describe(file).is_some_and(|o| o.schema.is_some()),
                "{file} has a schema"
            );
        }
    }

    #[test]
    fn newer_versions_are_refused_older_ones_read() {
        let p = Path::new("b/summary.json");
        assert!(check_version(p, b"{}").is_ok());
        assert!(check_version(p, b"{\"format_version\": 1}").is_ok());
        assert!(check_version(
            p,
            format!("{{\"format_version\": {FORMAT_VERSION}}}").as_bytes()
        )
        .is_ok());
        let err = check_version(p, b"{\"format_version\": 99}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!("b/summary.json has format_version 99, newer than this innoprof reads ({FORMAT_VERSION}); use a newer innoprof")
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn old_metadata_names_are_read() {
        let old = r#"{"name": "p", "sampling_ratio": 0.5}"#;
        let s: crate::report::metadata::Sampled = serde_json::from_str(old).unwrap();
        assert_eq!(s.attached_fraction, 0.5);
        let old = r#"{"method": "m", "calibrated": true, "total_ns": 5, "pct_of_one_cpu": 1.5,
                      "probes": [{"name": "p", "hits": 3, "estimated_ns": 5}]}"#;
        let o: crate::report::overhead::OverheadEstimate = serde_json::from_str(old).unwrap();
        assert_eq!((o.probes_pct_of_core, o.probes[0].calls), (1.5, 3));
        let drops = serde_json::to_value(crate::collect::Drops::default()).unwrap();
        let old = serde_json::json!({"probes": drops, "stack_lost_calls": 1,
                                     "cpu_samples_lost": 0, "offcpu_blocks_lost": 0});
        let d: crate::report::metadata::Dropped = serde_json::from_value(old).unwrap();
        assert_eq!(d.stack_lost_calls, 1);
    }
}
