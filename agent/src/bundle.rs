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

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::bundle_read::{BundleDir, BundleReadError};
use crate::bundle_replace::{remove_bundle_dir, remove_temp_dir, why_not_replaceable};
use crate::record::Recording;
use crate::report::flamegraph::{self, FlameGraphError};
use crate::report::html::{self, timeseries::TimeSeries, FlameGraph, Page};
use crate::report::metadata::{HostInfo, Metadata};
use crate::report::model::{ProbeStatus, Summary};
use crate::report::named_stack::RecordedStacks;
use crate::report::{self, histograms, pprof, table, OutputError};

pub const SUMMARY_JSON: &str = "summary.json";
pub const SUMMARY_TXT: &str = "summary.txt";
pub const METADATA_JSON: &str = "metadata.json";
pub const CPU_PPROF: &str = "cpu.pb.gz";
pub const OFFCPU_PPROF: &str = "offcpu.pb.gz";
pub const WAITS_PPROF: &str = "waits.pb.gz";

const DIR_MODE: u32 = 0o750;

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    Read(#[from] BundleReadError),
    #[error("{path} is not valid")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{0} holds no innoprof recording (no summary.json); give the directory `innoprof record --out` wrote")]
    NotABundle(PathBuf),
    #[error(transparent)]
    FlameGraph(#[from] FlameGraphError),
}

/// Where a bundle went.
#[derive(Debug, Clone)]
pub struct Written {
    pub dir: PathBuf,
    pub tarball: PathBuf,
    pub report: PathBuf,
}

/// Checks, before any probe is attached, that the bundle can be written:
/// OUT's parent can be created and written, and OUT is absent, empty, or an
/// earlier innoprof bundle (which the new one replaces; see
/// [`crate::bundle_replace`]). Also clears
/// temporary directories left by an innoprof that was killed.
pub fn prepare(out: &Path) -> Result<(), OutputError> {
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
    if std::fs::symlink_metadata(out).is_ok() {
        if let Some(why) = why_not_replaceable(out) {
            return Err(OutputError::NotABundle {
                path: out.into(),
                why,
            });
        }
    }
    let tmp = temp_dir(&parent, &name);
    make_dir(&tmp).map_err(err)?;
    std::fs::remove_dir(&tmp).map_err(err)?;
    // OUT itself exists (empty) from now on: refused if it is a link,
    // proven writable, and a directory removed during the recording is
    // noticed instead of silently recreated.
    report::prepare_dir(out)
}

/// Writes the whole bundle of `recording` to `out` and `out.tar.gz`.
pub fn write(
    recording: &Recording,
    out: &Path,
    command_line: &[String],
) -> Result<Written, BundleError> {
    let summary = &recording.summary;
    let mut files: BTreeMap<String, Vec<u8>> = recording
        .folded
        .iter()
        .map(|(n, t)| (n.clone(), t.clone().into_bytes()))
        .collect();
    files.insert(
        SUMMARY_JSON.into(),
        serde_json::to_vec_pretty(summary).expect("summary serialises"),
    );
    files.insert(SUMMARY_TXT.into(), table::render(summary).into_bytes());
    let h = histograms::of(summary);
    files.insert(histograms::JSON.into(), histograms::json(&h));
    files.insert(histograms::CSV.into(), histograms::csv(&h));
    for (name, bytes) in pprof_files(summary, &recording.stacks) {
        files.insert(name, bytes);
    }
    let mut metadata = Metadata::new(summary, command_line, HostInfo::current());
    metadata.files = files
        .keys()
        .cloned()
        .chain([METADATA_JSON.to_string(), html::FILE.to_string()])
        .collect();
    metadata.files.sort();
    files.insert(
        METADATA_JSON.into(),
        serde_json::to_vec_pretty(&metadata).expect("metadata serialises"),
    );
    let page = render_page(summary, Some(&metadata), |n| Ok(files.get(n).cloned()))?;
    files.insert(html::FILE.into(), page.into_bytes());
    install(out, &files, metadata.ended_unix_ms / 1000)
}

/// A saved bundle's `summary.json` (`innoprof top DIR`, `report DIR`).
pub fn read_summary(dir: &Path) -> Result<Summary, BundleError> {
    let bytes = BundleDir::new(dir)
        .read(SUMMARY_JSON)?
        .ok_or_else(|| BundleError::NotABundle(dir.into()))?;
    serde_json::from_slice(&bytes).map_err(|source| BundleError::Parse {
        path: dir.join(SUMMARY_JSON),
        source,
    })
}

/// `innoprof report DIR`: rebuilds `report.html` and `summary.txt` in a
/// saved bundle from its `summary.json` and other files.
pub fn rerender(dir: &Path) -> Result<(Summary, Written), BundleError> {
    // summary.json names the other files: every read, by whatever name,
    // goes through BundleDir (no links, no paths, bounded size).
    let bundle = BundleDir::new(dir);
    let read = |name: &str| -> Result<Option<Vec<u8>>, BundleError> { Ok(bundle.read(name)?) };
    let parse_err = |name: &str| {
        let path = dir.join(name);
        move |source| BundleError::Parse { path, source }
    };
    let mut summary = read_summary(dir)?;
    // Findings from today's rules, also for a bundle recorded before them.
    summary.findings = crate::findings::evaluate(&summary);
    let metadata: Option<Metadata> = read(METADATA_JSON)?
        .map(|b| serde_json::from_slice(&b))
        .transpose()
        .map_err(parse_err(METADATA_JSON))?;
    let page = render_page(&summary, metadata.as_ref(), read)?;
    report::write_file(&dir.join(SUMMARY_TXT), table::render(&summary).as_bytes())?;
    report::write_file(&dir.join(html::FILE), page.as_bytes())?;
    let tarball = tarball_path(dir).map_err(BundleError::Output)?;
    Ok((
        summary,
        Written {
            dir: dir.into(),
            tarball,
            report: dir.join(html::FILE),
        },
    ))
}

/// The page from the summary and the bundle's other files (`get` by name).
fn render_page(
    summary: &Summary,
    metadata: Option<&Metadata>,
    get: impl Fn(&str) -> Result<Option<Vec<u8>>, BundleError>,
) -> Result<String, BundleError> {
    let text = |name: &str| -> Result<Option<String>, BundleError> {
        Ok(get(name)?.map(|b| String::from_utf8_lossy(&b).into_owned()))
    };
    let timeseries = get(html::timeseries::FILE)?
        .map(|b| TimeSeries::parse(&b))
        .transpose()
        .map_err(|source| BundleError::Parse {
            path: html::timeseries::FILE.into(),
            source,
        })?;
    let mut cpu_flames = Vec::new();
    if let Some(cpu) = &summary.cpu {
        let profiles = [
            (
                cpu.oncpu.flamegraph.as_deref(),
                "on-CPU: where the server runs",
            ),
            (
                cpu.offcpu.as_ref().and_then(|o| o.flamegraph.as_deref()),
                "off-CPU: where its threads block",
            ),
        ];
        for (file, title) in profiles {
            if let Some(svg) = file.map(text).transpose()?.flatten() {
                cpu_flames.push(FlameGraph {
                    title: title.to_string(),
                    svg,
                });
            }
        }
    }
    let mut probe_flames = Vec::new();
    for p in summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        let (file, unit, what) = match (&p.stacks.folded_by_wait, &p.stacks.folded_by_count) {
            (Some(w), _) => (w, "ns", "wait time"),
            (None, Some(c)) => (c, "calls", "calls"),
            (None, None) => continue,
        };
        let Some(folded) = text(file)? else { continue };
        // A duty-cycled probe's stacks are those of the calls it saw: said
        // on its graph as in waits.pb.gz's comment.
        let title = match &p.sampling {
            Some(sm) => format!(
                "{}: {what} by stack, of the calls seen while attached ({:.0} % of the \
                 recording), unscaled",
                p.name,
                sm.attached_fraction * 100.0
            ),
            None => format!("{}: {what} by stack", p.name),
        };
        if let Some(svg) = flamegraph::render(&folded, &title, unit)? {
            probe_flames.push(FlameGraph {
                title,
                svg: String::from_utf8_lossy(&svg).into_owned(),
            });
        }
    }
    Ok(html::render(&Page {
        summary,
        metadata,
        timeseries: timeseries.as_ref(),
        cpu_flamegraphs: &cpu_flames,
        probe_flamegraphs: &probe_flames,
    }))
}

/// What a duty-cycled probe's stacks stand for: the calls seen while it
/// was attached, not scaled to summary.json's estimate (a stack seen in
/// one window says nothing of the stacks in a gap).
fn unscaled_note(p: &crate::report::model::ProbeResult) -> Option<String> {
    let s = p.sampling.as_ref()?;
    Some(format!(
        "{}: stacks of the {} calls seen while attached ({:.0} % of the recording), unscaled; \
         summary.json estimates {:.0} ± {:.0} calls in all",
        p.name,
        p.calls,
        s.attached_fraction * 100.0,
        s.estimate.calls,
        s.estimate.calls_bound
    ))
}

/// `cpu.pb.gz`, `offcpu.pb.gz` and `waits.pb.gz` from the named stacks.
fn pprof_files(summary: &Summary, stacks: &RecordedStacks) -> Vec<(String, Vec<u8>)> {
    let start_ms = u64::try_from(summary.started_unix_ms).unwrap_or(0);
    let duration_ns = (summary.duration_s * 1e9) as i64;
    let mut out = Vec::new();
    if let Some(cpu) = &summary.cpu {
        if !stacks.oncpu.is_empty() {
            let p =
                pprof::cpu_profile(&stacks.oncpu, cpu.oncpu.frequency_hz, start_ms, duration_ns);
            out.push((CPU_PPROF.to_string(), pprof::encode_gz(&p)));
        }
        if cpu.offcpu.is_some() && !stacks.offcpu.is_empty() {
            let p = pprof::offcpu_profile(&stacks.offcpu, start_ms, duration_ns);
            out.push((OFFCPU_PPROF.to_string(), pprof::encode_gz(&p)));
        }
    }
    let probes: Vec<pprof::ProbeStacks> = stacks
        .probes
        .iter()
        .map(|set| pprof::ProbeStacks {
            set,
            note: summary
                .probes
                .iter()
                .find(|p| p.name == set.probe)
                .and_then(unscaled_note),
        })
        .collect();
    if !probes.is_empty() {
        let p = pprof::waits_profile(&probes, start_ms, duration_ns);
        out.push((WAITS_PPROF.to_string(), pprof::encode_gz(&p)));
    }
    out
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
        report: out.join(html::FILE),
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

    fn recording() -> Recording {
        let mut summary = crate::report::html::tests::summary();
        summary.probes[0].stacks.folded_by_count = Some("innodb.mutex.enter.count.folded".into());
        let summary_probe = summary.probes[0].name.clone();
        Recording {
            summary,
            folded: vec![(
                "innodb.mutex.enter.count.folded".into(),
                "main;PolicyMutex<T>::enter 3\n".into(),
            )],
            stacks: RecordedStacks {
                probes: vec![pprof::ProbeStackSet {
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
        prepare(&out).unwrap();
        assert!(
            listing(&out).is_empty(),
            "only the empty directory before the end"
        );
        let w = write(&recording(), &out, &["innoprof".into()]).unwrap();
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
        prepare(&out).unwrap();
        write(&recording(), &out, &[]).unwrap();
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
        prepare(&out).unwrap();
        std::fs::write(out.join(SUMMARY_TXT), "partial").unwrap();
        write(&recording(), &out, &[]).unwrap();
        assert_ne!(
            std::fs::read_to_string(out.join(SUMMARY_TXT)).unwrap(),
            "partial"
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
