//! innoprof's output: bundles checked against the published schemas, and
//! the tools that read them.

use crate::repo_root;
use innoprof::model::summary::Summary;
use std::path::Path;
use std::process::Command;

/// Names of the entries of `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The summary.json in `dir`, as its serde type.
pub fn read_summary(dir: &Path) -> Result<Summary, String> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("no summary.json in {} ({e})", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Checks a bundle's JSON files with a schema (summary.json,
/// metadata.json, timeseries.json, histograms.json: those whose
/// `innoprof::model::files::FILES` entry names one), where present, against
/// the committed JSON Schemas (docs/schema/, generated from the serde
/// types by innoprof::bundle::contract): every bundle a test writes through this
/// library ([`run_innoprof`], [`Recording::finish`]) is checked, so an
/// output that drifts from its published schema fails the test that wrote
/// it.
pub fn check_bundle(dir: &Path) {
    check_files(dir, true)
}

/// The validator of a committed schema (one of
/// `innoprof::bundle::contract::SCHEMAS`), all compiled once per test process.
pub fn schema_validator(schema: &str) -> &'static jsonschema::Validator {
    use std::collections::HashMap;
    static COMPILED: std::sync::OnceLock<HashMap<&str, jsonschema::Validator>> =
        std::sync::OnceLock::new();
    let compiled = COMPILED.get_or_init(|| {
        innoprof::bundle::contract::SCHEMAS
            .iter()
            .map(|(schema, _)| {
                let text = std::fs::read(repo_root().join(schema)).unwrap();
                let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
                let v = jsonschema::validator_for(&json)
                    .unwrap_or_else(|e| panic!("{schema} is not a valid JSON Schema: {e}"));
                (*schema, v)
            })
            .collect()
    });
    compiled
        .get(schema)
        .unwrap_or_else(|| panic!("{schema} is not in innoprof::bundle::contract::SCHEMAS"))
}

/// `value`'s first errors against `schema`, one line each.
pub fn schema_errors(schema: &str, value: &serde_json::Value) -> Vec<String> {
    schema_validator(schema)
        .iter_errors(value)
        .take(10)
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect()
}

/// `innoprof_wrote`: the files are innoprof's own output, so must carry
/// this build's `format_version`; otherwise a file of another version
/// (a test's hand-written legacy bundle) is skipped.
pub(crate) fn check_files(dir: &Path, innoprof_wrote: bool) {
    let with_schema = innoprof::model::files::FILES
        .iter()
        .filter_map(|o| Some((o.name, o.schema?)));
    for (file, schema) in with_schema {
        // A symlink or a FIFO a hardening test planted is not innoprof's file.
        let path = dir.join(file);
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
            continue; // not JSON: a test's own broken file; the test says what it expects
        };
        let current =
            value["format_version"].as_u64() == Some(innoprof::model::files::FORMAT_VERSION.into());
        if !current && !innoprof_wrote {
            continue;
        }
        let errors = schema_errors(schema, &value);
        assert!(
            errors.is_empty(),
            "{} does not match {schema}:\n{}",
            path.display(),
            errors.join("\n")
        );
    }
    // Its views against its exact tables (crate::consistency), for the
    // bundles this build's innoprof wrote whole.
    if innoprof_wrote {
        if let Ok(summary) = read_summary(dir) {
            let found = crate::consistency::disagreements(dir, &summary);
            assert!(
                found.is_empty(),
                "{}: the bundle's views disagree with its tables:\n  {}",
                dir.display(),
                found.join("\n  ")
            );
        }
    }
}

/// `go tool pprof` with `args`, run in `home` (HOME and PPROF_TMPDIR, so
/// nothing is written elsewhere) but with Go's own build cache: Go 1.26
/// builds its pprof tool on first use (~20 s here), which a HOME of its
/// own would repeat at every call.
pub fn go_tool_pprof(home: &Path) -> Command {
    static CACHE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let (go, cache) = CACHE.get_or_init(|| {
        for go in ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"] {
            if let Ok(o) = Command::new(go).args(["env", "GOCACHE"]).output() {
                if o.status.success() {
                    return (
                        go.to_string(),
                        String::from_utf8_lossy(&o.stdout).trim().to_string(),
                    );
                }
            }
        }
        panic!("no Go toolchain: scripts/setup.sh installs golang-go");
    });
    let mut cmd = Command::new(go);
    cmd.args(["tool", "pprof"])
        .current_dir(home)
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", cache)
        .env("HOME", home)
        .env("PPROF_TMPDIR", home);
    cmd
}
