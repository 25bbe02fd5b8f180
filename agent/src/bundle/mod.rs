//! The incident bundle: one output directory holding everything a
//! recording produced, plus `OUT.tar.gz` beside it to attach to a ticket.
//!
//! Atomic as a whole: the files are written into a hidden temporary
//! directory next to OUT (same filesystem) and the directory is renamed
//! into place, then the tarball is written to a temporary file and renamed.
//! An interrupted write leaves the old state or the new one, never half a
//! bundle. Directories are 0750, files 0640: profiles reveal code paths.
//!
//! `report.html`, `summary.txt` and the derived files are functions of
//! `summary.json`, `metadata.json` and the folded/SVG files, so
//! [`rerender`] rebuilds the page and the table from a saved bundle.

pub mod contract;
pub mod diff;
pub mod error;
pub mod name_raw;
pub mod outputs;
pub mod read;
pub mod replace;

use crate::model::files::{METADATA_JSON, SUMMARY_JSON, SUMMARY_TXT};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use crate::bundle::error::BundleError;
use crate::bundle::outputs::render_page;
use crate::bundle::read::BundleDir;
use crate::bundle::replace::{remove_bundle_dir, remove_temp_dir, why_not_replaceable};
use crate::model::summary::Summary;
use crate::record::recording::Recording;
use crate::report::metadata::Metadata;
use crate::report::{self, table, OutputError};

const DIR_MODE: u32 = 0o750;

/// Where a bundle went.
#[derive(Debug, Clone)]
pub struct Written {
    pub dir: PathBuf,
    pub tarball: PathBuf,
    pub report: PathBuf,
    /// What innoprof's caps on reading a bundle cut of its files (`report
    /// DIR`), one line each; none for a bundle innoprof wrote.
    pub notes: Vec<String>,
}

/// What [`prepare`] found: whether OUT was there already. OUT is not
/// created before the bundle is written whole (a hidden directory beside
/// it is renamed into place), so a recording killed (`kill -9`) or failed
/// (disk full) never leaves an empty OUT behind.
#[derive(Debug, Clone)]
#[must_use = "the bundle is written through it"]
pub struct Prepared {
    out: PathBuf,
    existed: bool,
}

/// Checks, before any probe is attached, that the bundle can be written:
/// OUT's parent can be created and written, and OUT is absent, empty, or an
/// earlier innoprof bundle (which the new one replaces; see
/// [`crate::bundle::replace`]). Also clears
/// temporary directories left by an innoprof that was killed.
pub fn prepare(out: &Path) -> Result<Prepared, OutputError> {
    report::refuse_symlink(out)?;
    let (parent, name) = split(out)?;
    let err = |source| OutputError::NotWritable {
        path: out.into(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(&parent)
        .map_err(err)?;
    remove_stale_temp_dirs(&parent, &name);
    let existed = std::fs::symlink_metadata(out).is_ok();
    if existed {
        if let Some(why) = why_not_replaceable(out) {
            return Err(OutputError::NotABundle {
                path: out.into(),
                why,
            });
        }
    }
    // Proves the parent writable with what the bundle is written into
    // first: the hidden directory beside OUT.
    let tmp = temp_dir(&parent, &name);
    make_dir(&tmp).map_err(err)?;
    report::write_file(&tmp.join(crate::model::files::WRITE_CHECK), b"").map_err(|e| {
        remove_temp_dir(&tmp);
        match e {
            OutputError::Write { source, .. } => err(source),
            other => other,
        }
    })?;
    remove_temp_dir(&tmp);
    if existed {
        // An existing OUT must be a directory innoprof can write into.
        report::prepare_dir(out)?;
    }
    Ok(Prepared {
        out: out.into(),
        existed,
    })
}

/// Writes the whole bundle of `recording` to the prepared OUT and
/// `OUT.tar.gz`: every file of [`crate::model::files::FILES`], rendered in
/// that order. `command_line` is innoprof's argv, kept in metadata.json.
/// An OUT that was there and was removed during the recording is not
/// recreated behind the user's back.
pub fn write(
    recording: &Recording,
    prepared: &Prepared,
    command_line: &[String],
) -> Result<Written, BundleError> {
    let out = prepared.out.as_path();
    if prepared.existed {
        report::check_dir_still_there(out)?;
    } else {
        report::refuse_symlink(out)?;
    }
    let mut files = BTreeMap::new();
    for output in crate::model::files::FILES {
        let Some(render) = crate::bundle::outputs::renderer(output.name) else {
            continue;
        };
        let rendered = render(
            output,
            &crate::bundle::outputs::Context {
                recording,
                command_line,
                files: &files,
            },
        )?;
        files.extend(rendered);
    }
    // A file the recorder made that no entry claims would be lost: the
    // registry must name it (outputs::tests and this test's bundles).
    debug_assert!(
        recording.folded.iter().all(|(n, _)| files.contains_key(n)),
        "a recorded file is in no entry of model::files::FILES"
    );
    let summary = &recording.summary;
    let started_ms = u64::try_from(summary.started_unix_ms).unwrap_or(u64::MAX);
    let ended_s = started_ms.saturating_add((summary.duration_s * 1000.0).round() as u64) / 1000;
    install(out, &files, ended_s)
}

/// A saved bundle's `summary.json` (`innoprof top DIR`, `report DIR`).
pub fn read_summary(dir: &Path) -> Result<Summary, BundleError> {
    let bytes = BundleDir::new(dir)
        .read(SUMMARY_JSON)?
        .ok_or_else(|| BundleError::NotABundle(dir.into()))?;
    parse_summary(&dir.join(SUMMARY_JSON), &bytes)
}

/// `summary.json`'s bytes as a [`Summary`] (`path` names it in errors):
/// one written by a newer innoprof is refused.
pub fn parse_summary(path: &Path, bytes: &[u8]) -> Result<Summary, BundleError> {
    crate::bundle::contract::check_version(path, bytes)?;
    serde_json::from_slice(bytes).map_err(|source| BundleError::Parse {
        path: path.into(),
        source,
    })
}

/// What `innoprof report DIR` writes, rendered from a saved bundle's files
/// (read by name through `get`), nothing written yet.
#[derive(Debug)]
pub struct Rerendered {
    /// summary.json as read, with today's findings.
    pub summary: Summary,
    pub summary_txt: String,
    pub report_html: String,
    /// What was cut reading the bundle's stacks (one line each).
    pub notes: Vec<String>,
}

/// Renders summary.txt and report.html from a bundle's `summary.json`,
/// `metadata.json` and the files they name, each read through `get`
/// (`dir` names them in errors). Every value in them is the bundle's say,
/// not innoprof's: out-of-range ones are shown as unusable, never trusted.
pub fn render_saved(
    dir: &Path,
    get: impl Fn(&str) -> Result<Option<Vec<u8>>, BundleError>,
) -> Result<Rerendered, BundleError> {
    let parse_err = |name: &str| {
        let path = dir.join(name);
        move |source| BundleError::Parse { path, source }
    };
    let bytes = get(SUMMARY_JSON)?.ok_or_else(|| BundleError::NotABundle(dir.into()))?;
    let mut summary = parse_summary(&dir.join(SUMMARY_JSON), &bytes)?;
    // Findings from today's rules, also for a bundle recorded before them.
    summary.findings = crate::findings::evaluate(&summary);
    let metadata: Option<Metadata> = match get(METADATA_JSON)? {
        Some(b) => {
            crate::bundle::contract::check_version(&dir.join(METADATA_JSON), &b)?;
            Some(serde_json::from_slice(&b).map_err(parse_err(METADATA_JSON))?)
        }
        None => None,
    };
    let (report_html, notes) = render_page(&summary, metadata.as_ref(), get)?;
    Ok(Rerendered {
        summary_txt: table::render(&summary),
        summary,
        report_html,
        notes,
    })
}

/// `innoprof report DIR`: rebuilds `report.html` and `summary.txt` in a
/// saved bundle from its `summary.json` and other files.
pub fn rerender(dir: &Path) -> Result<(Summary, Written), BundleError> {
    // summary.json names the other files: every read, by whatever name,
    // goes through BundleDir (no links, no paths, bounded size).
    let bundle = BundleDir::new(dir);
    let rendered = render_saved(dir, |name| Ok(bundle.read(name)?))?;
    report::write_file(&dir.join(SUMMARY_TXT), rendered.summary_txt.as_bytes())?;
    report::write_file(
        &dir.join(crate::model::files::REPORT_HTML),
        rendered.report_html.as_bytes(),
    )?;
    let tarball = tarball_path(dir).map_err(BundleError::Output)?;
    Ok((
        rendered.summary,
        Written {
            dir: dir.into(),
            tarball,
            report: dir.join(crate::model::files::REPORT_HTML),
            notes: rendered.notes,
        },
    ))
}

/// Writes `files` into a temporary directory, renames it to `out`, then
/// writes `out.tar.gz` the same way.
fn install(
    out: &Path,
    files: &BTreeMap<String, Vec<u8>>,
    mtime: u64,
) -> Result<Written, BundleError> {
    let (parent, name) = split(out)?;
    let werr = |path: &Path| {
        let path = path.to_path_buf();
        move |source| report::write_error(&path, source)
    };
    let tmp = temp_dir(&parent, &name);
    remove_temp_dir(&tmp);
    make_dir(&tmp).map_err(werr(&tmp))?;
    // A failed write (disk full) must not leave the hidden directory behind.
    let filled = || -> Result<(), BundleError> {
        for (file, bytes) in files {
            report::write_file(&tmp.join(file), bytes)?;
        }
        sync_dir(&tmp).map_err(werr(&tmp))?;
        Ok(())
    };
    if let Err(e) = filled() {
        remove_temp_dir(&tmp);
        return Err(e);
    }
    // An older tarball must not sit beside the new directory.
    let tarball = tarball_path(out)?;
    let replaced = match std::fs::remove_file(&tarball) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(werr(&tarball)(e)),
        _ => replace_dir(&tmp, out, files).map_err(werr(out)),
    };
    if let Err(e) = replaced {
        remove_temp_dir(&tmp);
        return Err(e.into());
    }

    let gz = tar_gz(&name, files, mtime).map_err(werr(&tarball))?;
    report::write_file(&tarball, &gz)?;
    sync_dir(&parent).map_err(werr(&parent))?;
    Ok(Written {
        dir: out.into(),
        tarball,
        report: out.join(crate::model::files::REPORT_HTML),
        notes: Vec::new(),
    })
}

/// Moves the finished `tmp` to `out`: a plain rename when `out` is absent
/// or empty; an atomic exchange when it is an earlier innoprof bundle, or
/// holds only files the new bundle has too (written into the directory
/// innoprof prepared empty, while recording). The old directory is then
/// removed file by file, never following a link.
fn replace_dir(tmp: &Path, out: &Path, files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    let empty = std::fs::read_dir(out).map(|mut d| d.next().is_none());
    let superseded = || {
        std::fs::read_dir(out).is_ok_and(|entries| {
            entries.flatten().all(|e| {
                e.file_type().is_ok_and(|t| t.is_file())
                    && e.file_name()
                        .to_str()
                        .is_some_and(|n| files.contains_key(n))
            })
        })
    };
    match empty {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::rename(tmp, out),
        Ok(true) => std::fs::rename(tmp, out),
        Ok(false) if why_not_replaceable(out).is_none() || superseded() => {
            exchange(tmp, out)?;
            // Only a file put there between the check and the exchange
            // stops this; it is kept, and the error says where.
            remove_bundle_dir(tmp).map_err(std::io::Error::other)
        }
        Ok(false) => Err(std::io::Error::other(
            "the output directory gained files that are not an innoprof recording during the recording",
        )),
        Err(e) => Err(e),
    }
}

/// renameat2(RENAME_EXCHANGE): both paths exist before and after.
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that live across the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The tarball: `NAME/FILE` entries, directory 0750, files 0640.
fn tar_gz(name: &str, files: &BTreeMap<String, Vec<u8>>, mtime: u64) -> std::io::Result<Vec<u8>> {
    // Fast: level 6 took ~60 ms of CPU at the end of a 30 s recording for
    // ~5 MB (the agent's CPU budget counts it); level 1 is ~3x cheaper and
    // the tarball ~15 % larger.
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(DIR_MODE);
    dir.set_mtime(mtime);
    dir.set_size(0);
    tar.append_data(&mut dir, format!("{name}/"), std::io::empty())?;
    for (file, bytes) in files {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o640);
        h.set_mtime(mtime);
        h.set_size(bytes.len() as u64);
        tar.append_data(&mut h, format!("{name}/{file}"), bytes.as_slice())?;
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}

fn split(out: &Path) -> Result<(PathBuf, String), OutputError> {
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty() && *n != "..")
        .ok_or_else(|| OutputError::NotWritable {
            path: out.into(),
            source: std::io::Error::other("needs a directory name (e.g. /tmp/incident)"),
        })?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name.to_string()))
}

fn tarball_path(out: &Path) -> Result<PathBuf, OutputError> {
    let (parent, name) = split(out)?;
    Ok(parent.join(format!("{name}.tar.gz")))
}

fn temp_dir(parent: &Path, name: &str) -> PathBuf {
    parent.join(format!(".{name}.innoprof-tmp-{}", std::process::id()))
}

/// Temporary directories of runs that were killed (their pid is gone).
fn remove_stale_temp_dirs(parent: &Path, name: &str) {
    let prefix = format!(".{name}.innoprof-tmp-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let file_name = e.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_temp_dir(&e.path());
        }
    }
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(DIR_MODE).create(path)?;
    // The umask may have taken bits; never more than 0750 either way.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::files::WAITS_PPROF;

    fn recording() -> Recording {
        let mut summary = crate::report::html::tests::summary();
        summary.format_version = crate::model::files::FORMAT_VERSION;
        summary.probes[0].stacks.folded_by_count = Some("innodb.mutex.enter.count.folded".into());
        let summary_probe = summary.probes[0].name.clone();
        Recording {
            summary,
            folded: vec![(
                "innodb.mutex.enter.count.folded".into(),
                "main;PolicyMutex<T>::enter 3\n".into(),
            )],
            timeseries: None,
            host: None,
            raw: None,
            stacks: crate::model::named_stack::RecordedStacks {
                probes: vec![crate::model::named_stack::ProbeStackSet {
                    probe: summary_probe.clone(),
                    stacks: vec![(Default::default(), 3, 0)],
                    labels: vec![vec![]],
                }],
                ..Default::default()
            },
        }
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_dir_and_tarball_then_replaces_an_earlier_bundle() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("incident");
        let prepared = prepare(&out).unwrap();
        assert!(
            listing(root.path()).is_empty(),
            "nothing before the end: a killed recording leaves no empty OUT"
        );
        let w = write(&recording(), &prepared, &["innoprof".into()]).unwrap();
        assert_eq!(w.tarball, root.path().join("incident.tar.gz"));
        let files = listing(&out);
        for f in [
            SUMMARY_JSON,
            SUMMARY_TXT,
            METADATA_JSON,
            WAITS_PPROF,
            "report.html",
            "histograms.csv",
        ] {
            assert!(files.contains(&f.to_string()), "{f}: {files:?}");
        }
        // metadata.json lists exactly the files written, each described by
        // the output registry, and carries the contract's version.
        let m: Metadata =
            serde_json::from_slice(&std::fs::read(out.join(METADATA_JSON)).unwrap()).unwrap();
        assert_eq!(m.files, files);
        assert_eq!(m.format_version, crate::model::files::FORMAT_VERSION);
        assert!(m.file_info.iter().map(|f| &f.name).eq(m.files.iter()));
        assert!(
            m.file_info.iter().all(|f| !f.description.is_empty()),
            "{:?}",
            m.file_info
        );
        let s = read_summary(&out).unwrap();
        assert_eq!(s.format_version, crate::model::files::FORMAT_VERSION);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&out), 0o750);
        assert_eq!(mode(&w.tarball), 0o640);
        assert_eq!(
            listing(root.path()),
            ["incident", "incident.tar.gz"],
            "no temp left"
        );

        // An earlier bundle, even with a file the new one lacks, is replaced whole.
        std::fs::write(out.join("diff.txt"), "old").unwrap();
        let prepared = prepare(&out).unwrap();
        write(&recording(), &prepared, &[]).unwrap();
        assert_eq!(listing(&out), files);

        // Anything else is refused, and left alone.
        let other = root.path().join("home");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        let err = prepare(&other)
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(err.contains("not an earlier innoprof recording"), "{err}");
        assert_eq!(listing(&other), ["notes.txt"]);
    }

    #[test]
    fn files_written_into_out_while_recording_are_superseded() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("live");
        // An OUT made empty before the recording (by the user, or an
        // older innoprof) into which something wrote meanwhile.
        std::fs::create_dir(&out).unwrap();
        let prepared = prepare(&out).unwrap();
        std::fs::write(out.join(SUMMARY_TXT), "partial").unwrap();
        write(&recording(), &prepared, &[]).unwrap();
        assert_ne!(
            std::fs::read_to_string(out.join(SUMMARY_TXT)).unwrap(),
            "partial"
        );
    }

    #[test]
    fn a_bundle_from_a_newer_innoprof_is_refused_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SUMMARY_JSON), r#"{"format_version": 999}"#).unwrap();
        let err = rerender(dir.path())
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(
            err.contains("format_version 999, newer than this innoprof reads"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn timeseries_written_by_the_recorder_is_read_by_the_page() {
        let mut rec = recording();
        let mut series = crate::live::timeseries::IntervalSeries::new(
            Vec::new(),
            std::time::Duration::from_secs(1),
            rec.summary.started_unix_ms,
        );
        series.with_counters(vec![(0, "innodb.c".into(), 0)]);
        let counts = series.counter_counts(&[Ok(5)], 1000);
        series.push(1000, counts);
        let series = series.into_series();
        rec.summary.timeseries = Some(series.note());
        rec.timeseries = Some(series);
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("ts");
        write(&rec, &prepare(&out).unwrap(), &[]).unwrap();
        let files = listing(&out);
        assert!(files.contains(&crate::model::files::TIMESERIES_JSON.to_string()));
        assert!(files.contains(&crate::model::files::TIMESERIES_CSV.to_string()));
        let page = std::fs::read_to_string(out.join(crate::model::files::REPORT_HTML)).unwrap();
        assert!(page.contains("id=\"timeseries\""));
        assert!(
            page.contains("href=\"timeseries.csv\""),
            "the files section links it"
        );
    }

    #[test]
    fn report_of_a_directory_without_a_recording() {
        let dir = tempfile::tempdir().unwrap();
        let err = rerender(dir.path())
            .map_err(|e| crate::error_chain(&e))
            .unwrap_err();
        assert!(err.contains("no summary.json"), "{err}");
    }
}
