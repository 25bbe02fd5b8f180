//! `innoprof report DIR --symbolize` (or `--debuginfo`, `--debug-dir`):
//! names a bundle's raw stacks (`stacks.raw.json`) here, later, the way
//! `perf report` names what `perf record` wrote. The files are found on
//! this machine by build id (never by path alone): the binary at the path
//! the target mapped when its build id matches, a `--debuginfo` file, or
//! a debug directory's `.build-id/ab/cdef….debug` (or `.build-id/ab/cdef`,
//! or a file of the mapped name in it). The naming is the host's own
//! (`symbolize/`, `record::results::fold_raw`, `record::cpu_profile::NamedCpu`),
//! so a recording named here and on the host has the same frames. The
//! kernel's frames keep the host's names (its addresses mean nothing on
//! another boot). A file that cannot be found or verified leaves its
//! frames `module+0x…`, with one line saying which file and build id.
//!
//! The raw file is untrusted: read bounded ([`MAX_RAW_BYTES`]), checked
//! whole ([`RawStacks::check`]), and its paths only opened as regular
//! files (no FIFO, no device), never written.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bundle::error::BundleError;
use crate::bundle::outputs::{render_page, renderer, Context, Files};
use crate::bundle::read::BundleDir;
use crate::bundle::Written;
use crate::model::files::{
    CPU_PPROF, FILES, FOLDED_FILES, METADATA_JSON, OFFCPU_PPROF, OFFCPU_SVG, ONCPU_SVG,
    RAW_STACKS_JSON, REPORT_HTML, SUMMARY_JSON, SUMMARY_TXT, WAITS_PPROF,
};
use crate::model::named_stack::RecordedStacks;
use crate::model::raw_stacks::{RawMapping, RawStacks, RawStacksError};
use crate::plan::catalog::Measure;
use crate::record::cpu_profile::NamedCpu;
use crate::record::recording::Recording;
use crate::record::results::fold_raw;
use crate::report::metadata::Metadata;
use crate::resolve::debuginfo::DebugFile;
use crate::resolve::elf::OffsetMap;
use crate::symbolize::{ProcessMaps, StackSymbolizer};
use crate::target::rootfs::{FileId, TargetFile};

/// Largest raw file read: a JSON number of one digit becomes 8 bytes in
/// memory, so this bounds the parse to a few hundred MiB; a 10-minute
/// recording of a busy server writes a few MiB.
pub const MAX_RAW_BYTES: usize = 64 << 20;

/// Where the files to name the stacks from are looked for.
#[derive(Debug, Clone, Default)]
pub struct NameOptions {
    /// `--debuginfo FILE` (repeatable): binaries or debug files, each used
    /// for the mapping whose build id it carries.
    pub debuginfo: Vec<PathBuf>,
    /// `--debug-dir DIR` (repeatable): `.build-id/ab/cdef….debug`,
    /// `.build-id/ab/cdef` or the mapped file's name in it.
    pub debug_dirs: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum NameRawError {
    #[error("{0} has no stacks.raw.json (recorded by an older innoprof or with --follow): nothing to name; `innoprof report DIR` without --symbolize re-renders it")]
    NoRawStacks(PathBuf),
    #[error("{path} is larger than innoprof's limit of {} MiB for a raw stacks file; refused (not a file innoprof wrote?)", MAX_RAW_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("{path}: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: RawStacksError,
    },
    #[error(transparent)]
    Bundle(#[from] BundleError),
}

/// What naming a bundle did.
#[derive(Debug)]
pub struct NamedBundle {
    pub summary: crate::model::summary::Summary,
    pub written: Written,
    /// Per mapped file its stacks touch: where its names came from, or
    /// why there are none (one line each).
    pub files: Vec<FileOutcome>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOutcome {
    /// Named from this file (the binary itself, or a debug file).
    Named {
        mapped: String,
        from: PathBuf,
        /// How it was checked: its build id, or (none recorded) that it
        /// is the very same file.
        by: &'static str,
    },
    /// Not found or not verified: its frames stay `module+0x…`.
    Missing { mapped: String, why: String },
}

impl std::fmt::Display for FileOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Named { mapped, from, by } if Path::new(mapped) == from => {
                write!(f, "{mapped}: named ({by})")
            }
            Self::Named { mapped, from, by } => {
                write!(f, "{mapped}: named from {} ({by})", from.display())
            }
            Self::Missing { mapped, why } => {
                write!(f, "{mapped}: {why}; its frames stay module+0x…")
            }
        }
    }
}

/// Reads `dir`'s raw stacks, bounded and checked.
pub fn read_raw(dir: &Path) -> Result<RawStacks, NameRawError> {
    let path = dir.join(RAW_STACKS_JSON);
    let bytes = BundleDir::new(dir)
        .read(RAW_STACKS_JSON)
        .map_err(BundleError::from)?
        .ok_or_else(|| NameRawError::NoRawStacks(dir.into()))?;
    if bytes.len() > MAX_RAW_BYTES {
        return Err(NameRawError::TooLarge { path });
    }
    crate::bundle::contract::check_version(&path, &bytes).map_err(BundleError::from)?;
    let raw: RawStacks = serde_json::from_slice(&bytes).map_err(|source| BundleError::Parse {
        path: path.clone(),
        source,
    })?;
    raw.check()
        .map_err(|source| NameRawError::Invalid { path, source })?;
    Ok(raw)
}

/// Names `dir`'s raw stacks here and writes what depends on the names
/// in place: the folded files and flame graphs, the pprof files,
/// summary.json (its CPU top tables and findings), summary.txt and
/// report.html. Nothing else in `dir` changes; stacks.raw.json stays.
pub fn name_bundle(dir: &Path, opts: &NameOptions) -> Result<NamedBundle, NameRawError> {
    let raw = read_raw(dir)?;
    let mut summary = crate::bundle::read_summary(dir)?;
    let exe = summary.target.binary.clone();
    let (maps, files, outcomes) = find_files(&raw, opts, &exe);
    let mut symbolizer = StackSymbolizer::new(maps);
    for (id, build_id) in files {
        symbolizer.give_build_id(id, build_id.0);
        if let Some(debug) = build_id.1 {
            symbolizer.use_debug_file(debug.file.id(), debug);
        }
    }
    symbolizer.give_kernel_names(raw.kernel.iter().map(|k| (k.address, k.name.clone())));
    // Every user address up front, file by file, as the host names them.
    let cpu_user = raw.cpu.iter().flat_map(|c| {
        let off = c.offcpu.iter().flatten();
        c.oncpu.iter().chain(off).map(|s| (s.user.as_slice(), true))
    });
    symbolizer.name_user_stacks(
        raw.probes
            .iter()
            .flat_map(|p| {
                let exact = p.measure == Measure::Count;
                p.samples.iter().map(move |s| (s.ips.as_slice(), exact))
            })
            .chain(cpu_user),
    );

    let mut folded = Vec::new();
    let mut stacks = RecordedStacks::default();
    for probe in &raw.probes {
        let (_, files, set) = fold_raw(probe, &mut symbolizer);
        folded.extend(files);
        if !set.stacks.is_empty() {
            stacks.probes.push(set);
        }
    }
    if let (Some(cpu), Some(recorded)) = (&raw.cpu, summary.cpu.take()) {
        let mut profile = NamedCpu::of(cpu, &mut symbolizer).into_profile(recorded);
        folded.extend(profile.files().map_err(BundleError::from)?);
        stacks.oncpu = std::mem::take(&mut profile.oncpu_stacks);
        stacks.oncpu_statements = std::mem::take(&mut profile.oncpu_statements);
        stacks.offcpu = std::mem::take(&mut profile.offcpu_stacks);
        summary.cpu = Some(profile.summary);
    }
    drop(symbolizer);
    summary.findings = crate::findings::evaluate(&summary);
    let written = write_named(dir, summary.clone(), folded, stacks)?;
    Ok(NamedBundle {
        summary,
        written,
        files: outcomes,
    })
}

/// Renders the files that depend on the names with the recorder's own
/// renderers, and writes each in place (under a temporary name, renamed).
fn write_named(
    dir: &Path,
    summary: crate::model::summary::Summary,
    folded: Vec<(String, String)>,
    stacks: RecordedStacks,
) -> Result<Written, BundleError> {
    let recording = Recording {
        summary,
        folded,
        timeseries: None,
        stacks,
        raw: None,
        host: None,
    };
    let renamed = [
        ONCPU_SVG,
        OFFCPU_SVG,
        FOLDED_FILES,
        SUMMARY_JSON,
        SUMMARY_TXT,
        CPU_PPROF,
        OFFCPU_PPROF,
        WAITS_PPROF,
    ];
    let mut files = Files::new();
    for entry in FILES.iter().filter(|f| renamed.contains(&f.name)) {
        let render = renderer(entry.name).expect("every renamed file has a renderer");
        let ctx = Context {
            recording: &recording,
            command_line: &[],
            files: &files,
        };
        let out = render(entry, &ctx)?;
        files.extend(out);
    }
    for (name, bytes) in &files {
        crate::report::write_file(&dir.join(name), bytes)?;
    }
    let bundle = BundleDir::new(dir);
    let metadata: Option<Metadata> = match bundle.read(METADATA_JSON)? {
        Some(b) => {
            crate::bundle::contract::check_version(&dir.join(METADATA_JSON), &b)?;
            Some(
                serde_json::from_slice(&b).map_err(|source| BundleError::Parse {
                    path: dir.join(METADATA_JSON),
                    source,
                })?,
            )
        }
        None => None,
    };
    let (page, notes) = render_page(&recording.summary, metadata.as_ref(), |name| {
        match files.get(name) {
            Some(b) => Ok(Some(b.clone())),
            None => Ok(bundle.read(name)?),
        }
    })?;
    crate::report::write_file(&dir.join(REPORT_HTML), page.as_bytes())?;
    Ok(Written {
        dir: dir.into(),
        tarball: crate::bundle::tarball_path(dir).map_err(BundleError::Output)?,
        report: dir.join(REPORT_HTML),
        notes,
    })
}

/// Per recorded file: its build id and the debug file it is named from.
type Known = (Option<String>, Option<DebugFile>);

/// The mappings with the files found here for them: the maps to name
/// against, per mapping's host identity its build id and debug file, and
/// what was found for each file the stacks touch.
fn find_files(
    raw: &RawStacks,
    opts: &NameOptions,
    exe: &str,
) -> (ProcessMaps, Vec<(FileId, Known)>, Vec<FileOutcome>) {
    let touched = touched_paths(raw);
    // Each --debuginfo file opened once, with its build id.
    let explicit: Vec<(PathBuf, std::fs::File, Option<String>)> = opts
        .debuginfo
        .iter()
        .filter_map(|p| {
            let f = open_untrusted(p).ok()?;
            let (id, _) = crate::symbolize::build_id_and_segments(&f)?;
            Some((p.clone(), f, id))
        })
        .collect();
    let mut regions = Vec::new();
    let mut files: HashMap<String, Result<Arc<TargetFile>, String>> = HashMap::new();
    let mut known = Vec::new();
    let mut outcomes = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for m in &raw.mappings {
        let id = m.file.map(|f| FileId {
            major: f.major,
            minor: f.minor,
            inode: f.inode,
        });
        regions.push((m.start, m.end, m.file_offset, m.path.clone(), id));
        if !seen.insert(m.path.as_str()) {
            continue;
        }
        let is_exe = m.path.trim_end_matches(" (deleted)") == exe.trim_end_matches(" (deleted)");
        let found = find_one(m, is_exe, &explicit, &opts.debug_dirs);
        let (entry, debug, outcome) = match found {
            Ok(Found::Binary(f, from)) => (
                Ok(f),
                None,
                FileOutcome::Named {
                    mapped: m.path.clone(),
                    from,
                    by: checked_by(m),
                },
            ),
            Ok(Found::Debug(f, from)) => {
                let segments = m
                    .segments
                    .iter()
                    .map(|s| (s.offset, s.size, s.address))
                    .collect();
                let debug = DebugFile {
                    file: Arc::clone(&f),
                    offsets: OffsetMap::from_segments(segments),
                    dwarf: true,
                };
                (
                    Ok(f),
                    Some(debug),
                    FileOutcome::Named {
                        mapped: m.path.clone(),
                        from,
                        by: checked_by(m),
                    },
                )
            }
            Err(why) => (
                Err(why.clone()),
                None,
                FileOutcome::Missing {
                    mapped: m.path.clone(),
                    why,
                },
            ),
        };
        files.insert(m.path.clone(), entry);
        if let Some(id) = id {
            known.push((id, (m.build_id.clone(), debug)));
        } else if let Some(debug) = debug {
            // No host identity: the debug file is still found by its own.
            known.push((debug.file.id(), (m.build_id.clone(), Some(debug))));
        }
        if touched.contains(m.path.as_str()) {
            outcomes.push(outcome);
        }
    }
    (ProcessMaps::recorded(regions, files), known, outcomes)
}

/// How a file found for `m` was checked.
fn checked_by(m: &RawMapping) -> &'static str {
    if m.build_id.is_some() {
        "build id checked"
    } else {
        "the very same file: device, inode, size and times checked"
    }
}

enum Found {
    /// The mapped file itself (named by file offset, as on the host).
    Binary(Arc<TargetFile>, PathBuf),
    /// A debug file, or the binary found elsewhere (named by address).
    Debug(Arc<TargetFile>, PathBuf),
}

/// The file to name mapping `m`'s frames from, or why there is none, in
/// the host's order: a `--debuginfo` file with its build id; the file at
/// the mapped path with its build id (or, without one, the very same
/// file: device, inode, size and times), which for a library is all the
/// host takes too (the symbolizer then looks for its debug file itself,
/// as on the host), and for the server's executable (`is_exe`) only when
/// it has both a symbol table and DWARF, as `record` takes a debug file
/// otherwise; then a debug directory's file with its build id.
fn find_one(
    m: &RawMapping,
    is_exe: bool,
    explicit: &[(PathBuf, std::fs::File, Option<String>)],
    dirs: &[PathBuf],
) -> Result<Found, String> {
    let wanted = m.build_id.as_deref();
    let target = |f: &std::fs::File| -> Result<Arc<TargetFile>, String> {
        let dup = f.try_clone().map_err(|e| e.to_string())?;
        TargetFile::from_open(dup)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    };
    if let Some(w) = wanted {
        if let Some((p, f, _)) = explicit.iter().find(|(_, _, id)| id.as_deref() == Some(w)) {
            return Ok(Found::Debug(target(f)?, p.clone()));
        }
    }
    let mut stripped = None;
    let mut why = format!(
        "not found here (needs build id {})",
        wanted.unwrap_or("none")
    );
    if !m.path.ends_with(" (deleted)") {
        let path = PathBuf::from(&m.path);
        match open_untrusted(&path) {
            Ok(f) => match verify_at_path(m, &f) {
                Ok(()) if !is_exe || has_symbols_and_dwarf(&f) => {
                    return Ok(Found::Binary(target(&f)?, path))
                }
                Ok(()) => stripped = Some((f, path)),
                Err(e) => why = e,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => why = e.to_string(),
        }
    }
    if let Some(w) = wanted {
        let name = Path::new(&m.path).file_name().map(|n| {
            n.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string()
        });
        for dir in dirs {
            let by_id = crate::resolve::debuginfo::build_id_path(dir, w);
            let plain = by_id.as_ref().map(|p| p.with_extension(""));
            let by_name = name
                .as_deref()
                .filter(|n| crate::resolve::debuginfo::is_bare_file_name(n))
                .map(|n| dir.join(n));
            for candidate in [by_id, plain, by_name].into_iter().flatten() {
                let Ok(f) = open_untrusted(&candidate) else {
                    continue;
                };
                let id = crate::symbolize::build_id_and_segments(&f).and_then(|(id, _)| id);
                if id.as_deref() == Some(w) {
                    return Ok(Found::Debug(target(&f)?, candidate));
                }
            }
        }
    }
    match stripped {
        Some((f, path)) => Ok(Found::Binary(target(&f)?, path)),
        None => Err(why),
    }
}

/// Whether the file at the mapped path is the one mapped: the same build
/// id, or without one the very same file as on the host.
fn verify_at_path(m: &RawMapping, f: &std::fs::File) -> Result<(), String> {
    let found = crate::symbolize::build_id_and_segments(f).and_then(|(id, _)| id);
    match (&m.build_id, found) {
        (Some(w), Some(h)) if *w == h => Ok(()),
        (Some(w), Some(h)) => Err(format!(
            "the file here has build id {h}, not the recorded {w} (another version?)"
        )),
        (Some(w), None) => Err(format!(
            "the file here has no build id (needs build id {w})"
        )),
        (None, _) => {
            let same = m
                .file
                .zip(FileId::of(f).ok())
                .zip(crate::persist::stamp::file_stamp(f));
            match same {
                Some(((rec, id), st))
                    if rec.major == id.major
                        && rec.minor == id.minor
                        && rec.inode == id.inode
                        && rec.size == st.len
                        && rec.mtime_ns == crate::record::results::system_time_ns(st.modified)
                        && rec.ctime_ns == st.changed_ns =>
                {
                    Ok(())
                }
                _ => Err("no build id was recorded and the file here is not the very same (device, inode, size, times)".into()),
            }
        }
    }
}

/// Whether a file has an ELF symbol table and DWARF (else `record` looks
/// for the server's debug file, and so does this).
fn has_symbols_and_dwarf(f: &std::fs::File) -> bool {
    use object::Object;
    let Ok(map) = crate::resolve::mapped::Mapped::of(f) else {
        return false;
    };
    let has = object::File::parse(map.bytes()).is_ok_and(|elf| {
        elf.section_by_name(".symtab").is_some() && elf.section_by_name(".debug_info").is_some()
    });
    map.release();
    has
}

/// Opens a path a bundle names, or one derived from it: only a regular
/// file (checked before the open, since opening a device can act on it,
/// and after), without blocking (a FIFO swapped in), read only.
fn open_untrusted(path: &Path) -> std::io::Result<std::fs::File> {
    let not_regular = || std::io::Error::other("not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(f)
}

/// The mapped paths some user address of the stacks falls in.
fn touched_paths(raw: &RawStacks) -> HashSet<&str> {
    let mut ranges: Vec<(u64, u64, &str)> = raw
        .mappings
        .iter()
        .map(|m| (m.start, m.end, m.path.as_str()))
        .collect();
    ranges.sort_unstable();
    let mut touched = HashSet::new();
    let probe_ips = raw
        .probes
        .iter()
        .flat_map(|p| p.samples.iter().flat_map(|s| &s.ips));
    let cpu_ips = raw.cpu.iter().flat_map(|c| {
        let off = c.offcpu.iter().flatten();
        c.oncpu.iter().chain(off).flat_map(|s| &s.user)
    });
    let mut distinct: Vec<u64> = probe_ips.chain(cpu_ips).copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    for ip in distinct {
        let i = ranges.partition_point(|r| r.0 <= ip);
        if let Some(&(_, end, path)) = i.checked_sub(1).and_then(|i| ranges.get(i)) {
            if ip < end {
                touched.insert(path);
            }
        }
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file is taken only with the build id recorded: at its path, as a
    /// `--debuginfo` file wherever it is; never by path alone, never a FIFO.
    #[test]
    fn a_file_is_taken_only_with_its_build_id() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = std::fs::File::open(&exe).unwrap();
        let (id, _) = crate::symbolize::build_id_and_segments(&f).unwrap();
        assert!(id.is_some(), "the test binary has a build id");
        let m = RawMapping {
            start: 0x1000,
            end: 0x2000,
            file_offset: 0,
            path: exe.display().to_string(),
            build_id: id.clone(),
            segments: Vec::new(),
            file: None,
        };
        assert!(matches!(
            find_one(&m, false, &[], &[]),
            Ok(Found::Binary(..))
        ));
        let wrong = RawMapping {
            build_id: Some("00".repeat(20)),
            ..m.clone()
        };
        let why = find_one(&wrong, false, &[], &[]).err().unwrap();
        assert!(
            why.contains(&format!("not the recorded {}", "00".repeat(20))),
            "{why}"
        );
        // No build id and no stamp recorded: not by its path alone.
        let unstamped = RawMapping {
            build_id: None,
            ..m.clone()
        };
        assert!(find_one(&unstamped, false, &[], &[]).is_err());
        // Gone from its path: a --debuginfo file with its build id.
        let moved = RawMapping {
            path: "/nonexistent/innoprof-test".into(),
            ..m.clone()
        };
        let explicit = vec![(exe.clone(), f.try_clone().unwrap(), id.clone())];
        assert!(matches!(
            find_one(&moved, false, &explicit, &[]),
            Ok(Found::Debug(..))
        ));
        let why = find_one(&moved, false, &[], &[]).err().unwrap();
        assert!(why.contains("not found here (needs build id"), "{why}");
        // A FIFO at the path is neither opened (it would block) nor read.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("mysqld");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a path in a fresh temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let at_fifo = RawMapping {
            path: fifo.display().to_string(),
            ..m.clone()
        };
        let why = find_one(&at_fifo, false, &[], &[]).err().unwrap();
        assert!(why.contains("not a regular file"), "{why}");
    }
}
