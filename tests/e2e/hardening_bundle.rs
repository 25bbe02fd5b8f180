//! A bundle is untrusted input (it may come from a ticket, and tar keeps
//! links and FIFOs), and `--out` may point at a user's directory. Through
//! the real binary on a real recording of the spin fixture: `report` and
//! `diff` refuse links, FIFOs, paths and oversized files inside a bundle
//! and copy nothing of a link's target anywhere; `record --out` replaces
//! innoprof's own earlier bundle but refuses, and leaves intact, a
//! directory of the user's that merely holds a summary.json.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use innoprof_e2e::*;

/// Stands for /etc/shadow: a file that must never reach any output.
const SECRET: &str = "SECRET-root-only-7f3a9c";

/// A recording with every kind of file: on- and off-CPU folded files and
/// SVGs, a probe's folded stacks, the time series, pprof files. Returns
/// whether it succeeded, and its stderr.
fn record_spin(out: &Path) -> (bool, String) {
    let _k = kernel_lock();
    let args: Vec<String> = ["hot", "1", "1200", "5", "20"].map(String::from).to_vec();
    let mut fx = Fixture::spawn_with(&spin_binary(), &args);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start_to(
        &[
            "--pid",
            &pid,
            "--force",
            "--probe",
            "fx_block_wait",
            "--offcpu",
            "--interval",
            "1s",
            "--duration",
            "2s",
        ],
        out,
    );
    rec.wait_attached();
    fx.run_calls();
    let (code, _, rec) = rec.finish();
    fx.exit();
    (code == Some(0), rec.stderr())
}

/// One recording per test binary; each test works on its own copy.
fn base_bundle() -> &'static Path {
    static BASE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BASE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("base");
            let (ok, stderr) = record_spin(&out);
            assert!(ok, "{stderr}");
            for f in ["oncpu.svg", "oncpu.folded", "fx_block_wait.folded"] {
                assert!(
                    out.join(f).is_file(),
                    "{f} missing from the recording: {stderr}"
                );
            }
            (dir, out)
        })
        .1
}

/// A copy of the base bundle in a new directory, and the secret beside it.
fn copy_bundle(root: &Path, name: &str) -> PathBuf {
    let to = root.join(name);
    std::fs::create_dir(&to).unwrap();
    for e in std::fs::read_dir(base_bundle()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    std::fs::write(root.join("secret"), SECRET).unwrap();
    to
}

fn replace_with_link(bundle: &Path, file: &str) {
    let path = bundle.join(file);
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(bundle.parent().unwrap().join("secret"), &path).unwrap();
}

/// innoprof ARGS, failed if it runs past 30 s (a FIFO would block it forever).
fn run_bounded(args: &[&Path]) -> Output {
    let mut child = Command::new(innoprof())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("innoprof {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Exit status 1 with one `innoprof: error` line containing `expect`.
fn assert_refused(o: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with("innoprof: error: ") && lines[0].contains(expect),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains(SECRET));
}

/// No regular file under `dir` holds the secret's text (links not followed).
fn assert_no_secret_in(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != "secret" {
            let text = String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned();
            assert!(!text.contains(SECRET), "{:?} holds the secret", e.path());
        }
    }
}

fn report(bundle: &Path) -> Output {
    run_bounded(&[Path::new("report"), bundle])
}

fn diff(base: &Path, incident: &Path, out: &Path) -> Output {
    run_bounded(&[Path::new("diff"), base, incident, Path::new("--out"), out])
}

#[test]
fn report_refuses_links_inside_a_bundle() {
    let root = tempfile::tempdir().unwrap();
    // The intact copy renders: the refusals below are the links'.
    let good = copy_bundle(root.path(), "good");
    let o = report(&good);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for file in [
        "oncpu.svg",
        "fx_block_wait.folded",
        "summary.json",
        "metadata.json",
    ] {
        let b = copy_bundle(root.path(), &format!("link-{file}"));
        let html_before = std::fs::read(b.join("report.html")).unwrap();
        replace_with_link(&b, file);
        let o = report(&b);
        assert_refused(&o, &format!("{file} is a symbolic link; refused"));
        assert_eq!(std::fs::read(b.join("report.html")).unwrap(), html_before);
        assert_no_secret_in(&b);
    }
}

/// summary.json names the files the page shows: a path there (absolute or
/// with `..`) is refused, not opened.
#[test]
fn report_refuses_paths_named_by_summary_json() {
    let root = tempfile::tempdir().unwrap();
    for name in [
        root.path().join("secret").display().to_string(),
        "../secret".into(),
    ] {
        let b = copy_bundle(root.path(), "named");
        let path = b.join("summary.json");
        let mut s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        s["cpu"]["oncpu"]["flamegraph"] = name.clone().into();
        std::fs::write(&path, serde_json::to_vec(&s).unwrap()).unwrap();
        let o = report(&b);
        assert_refused(&o, "which is not a plain file name inside it; refused");
        assert_no_secret_in(&b);
        std::fs::remove_dir_all(&b).unwrap();
    }
}

#[test]
fn diff_refuses_links_inside_either_bundle() {
    let root = tempfile::tempdir().unwrap();
    let base = copy_bundle(root.path(), "base");
    for file in ["oncpu.folded", "offcpu.folded", "summary.json"] {
        let b = copy_bundle(root.path(), &format!("link-{file}"));
        replace_with_link(&b, file);
        let out = root.path().join(format!("diff-{file}"));
        for (x, y) in [(&base, &b), (&b, &base)] {
            let o = diff(x, y, &out);
            assert_refused(&o, &format!("{file} is a symbolic link; refused"));
        }
        assert!(!out.exists(), "nothing written");
        assert_no_secret_in(&b);
    }
    // Sanity: the same two bundles without the link diff fine.
    let out = root.path().join("diff-ok");
    let o = diff(&base, &copy_bundle(root.path(), "inc"), &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.join("diff.oncpu.folded").is_file());
}

/// A FIFO would block a plain read forever; it is refused at once.
#[test]
fn a_fifo_in_a_bundle_is_refused_without_hanging() {
    let root = tempfile::tempdir().unwrap();
    let b = copy_bundle(root.path(), "fifo");
    let base = copy_bundle(root.path(), "base");
    for file in ["oncpu.svg", "oncpu.folded"] {
        let path = b.join(file);
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
    let started = Instant::now();
    assert_refused(&report(&b), "oncpu.svg is a FIFO, not a regular file");
    assert_refused(
        &diff(&base, &b, &root.path().join("d")),
        "oncpu.folded is a FIFO, not a regular file",
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_oversized_file_in_a_bundle_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let b = copy_bundle(root.path(), "big");
    // Sparse: 257 MiB long, no disk used.
    for file in ["oncpu.svg", "oncpu.folded"] {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(b.join(file))
            .unwrap();
        f.set_len(257 << 20).unwrap();
    }
    assert_refused(
        &report(&b),
        "larger than innoprof's limit of 256 MiB per bundle file",
    );
    assert_refused(
        &diff(&b, &b, &root.path().join("d")),
        "larger than innoprof's limit of 256 MiB per bundle file",
    );
}

/// `record --out OUT` on this test process, which must be refused before
/// it attaches anything (else it would sample this process's CPU for 1 s).
fn record_refused(out: &Path) -> Output {
    let _k = kernel_lock();
    let pid = std::process::id().to_string();
    Command::new(innoprof())
        .args(["record", "--pid", &pid, "--force", "--probes", "none"])
        .args(["--duration", "1s", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

/// A summary.json is no proof of an earlier recording: a directory holding
/// the user's own files beside it is refused, and left exactly as it was.
#[test]
fn out_on_a_users_directory_is_refused_and_left_intact() {
    let root = tempfile::tempdir().unwrap();
    let thesis = "chapter,words\n1,5200\n";
    let cases: [(&str, &[&str], &str); 3] = [
        (
            "summary-and-thesis",
            &["summary.json", "thesis.csv"],
            "it holds thesis.csv, which innoprof does not write",
        ),
        (
            "innoprof-names-only",
            &["summary.json", "summary.txt"],
            "it has no metadata.json of an innoprof bundle",
        ),
        (
            "bundle-and-thesis",
            &["thesis.csv"],
            "it holds thesis.csv, which innoprof does not write",
        ),
    ];
    for (name, files, why) in cases {
        let d = if name == "bundle-and-thesis" {
            copy_bundle(root.path(), name)
        } else {
            let d = root.path().join(name);
            std::fs::create_dir(&d).unwrap();
            d
        };
        for f in files {
            std::fs::write(d.join(f), thesis).unwrap();
        }
        let before: Vec<(String, Vec<u8>)> = listing(&d)
            .into_iter()
            .map(|f| (f.clone(), std::fs::read(d.join(&f)).unwrap()))
            .collect();
        let o = record_refused(&d);
        assert_refused(&o, "exists and is not an earlier innoprof recording");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(why), "{name}: {err}");
        assert!(
            err.contains("choose another --out, or move or remove it yourself"),
            "{err}"
        );
        let after: Vec<(String, Vec<u8>)> = listing(&d)
            .into_iter()
            .map(|f| (f.clone(), std::fs::read(d.join(&f)).unwrap()))
            .collect();
        assert!(before == after, "{name}: the directory changed");
        if files.contains(&"thesis.csv") {
            let kept = std::fs::read_to_string(d.join("thesis.csv")).unwrap();
            assert_eq!(kept, thesis, "{name}");
        }
    }
    let leftovers: Vec<String> = listing(root.path())
        .into_iter()
        .filter(|n| n.contains("innoprof-tmp") || n.ends_with(".tar.gz"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// innoprof's own bundle, after an older innoprof's `diff` and `report`
/// wrote into it and a killed run left its temporary directory beside it,
/// is replaced whole. (`diff` now refuses to write into a recording.)
#[test]
fn out_on_innoprofs_own_earlier_bundle_is_replaced() {
    let root = tempfile::tempdir().unwrap();
    let base = copy_bundle(root.path(), "base");
    let x = copy_bundle(root.path(), "incident");
    let before = listing(&x);
    let o = diff(&base, &x, &x);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a recording"));
    assert_eq!(listing(&x), before, "a refused diff wrote into the bundle");
    let elsewhere = root.path().join("diff-out");
    let o = diff(&base, &x, &elsewhere);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in listing(&elsewhere) {
        std::fs::copy(elsewhere.join(&f), x.join(&f)).unwrap();
    }
    assert!(x.join("diff.txt").is_file());
    let o = report(&x);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A temporary directory of a run that was SIGKILLed (its pid is gone).
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let stale = root
        .path()
        .join(format!(".incident.innoprof-tmp-{}", gone.id()));
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("summary.json"), "{}").unwrap();
    let old_meta = std::fs::read(x.join("metadata.json")).unwrap();

    let (ok, stderr) = record_spin(&x);
    assert!(ok, "{stderr}");
    assert_ne!(std::fs::read(x.join("metadata.json")).unwrap(), old_meta);
    let files = listing(&x);
    assert!(files.iter().all(|f| !f.starts_with("diff.")), "{files:?}");
    assert_eq!(
        files,
        listing(base_bundle()),
        "the same files as a fresh recording"
    );
    let hidden: Vec<String> = listing(root.path())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "temporary directories left: {hidden:?}");
    assert!(root.path().join("incident.tar.gz").is_file());
}

/// A probe name, comm and binary path in a bundle that would retitle and
/// clear root's terminal (`ESC ]2;… BEL`, `ESC [2J`) reach it escaped
/// through `report` (stdout and summary.txt), `top DIR` and `diff`: no raw
/// control byte, the escaped text shown instead.
#[test]
fn terminal_sequences_in_a_bundle_are_shown_escaped() {
    let evil = "evil\u{1b}]2;PWNED-TITLE\u{7}\u{1b}[2J\u{9b}";
    let root = tempfile::tempdir().unwrap();
    let b = copy_bundle(root.path(), "hostile");
    let path = b.join("summary.json");
    let mut summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    summary["probes"][0]["name"] = evil.into();
    summary["target"]["comm"] = evil.into();
    summary["target"]["binary"] = format!("/tmp/{evil}/mysqld").into();
    std::fs::write(&path, serde_json::to_vec_pretty(&summary).unwrap()).unwrap();
    let raw_control = |what: &str, bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what} holds a raw control character: {text:?}"
        );
        assert!(
            text.contains("evil\\x1b]2;PWNED-TITLE\\x07\\x1b[2J\\u{9b}"),
            "{what}: {text}"
        );
    };
    let o = report(&b);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    raw_control("report's stdout", &o.stdout);
    raw_control(
        "summary.txt",
        &std::fs::read(b.join("summary.txt")).unwrap(),
    );
    let o = run_bounded(&[Path::new("top"), &b]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    raw_control("top DIR", &o.stdout);
    let out = root.path().join("diff-out");
    let o = diff(&copy_bundle(root.path(), "base"), &b, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for stream in [&o.stdout, &o.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "diff: {text:?}"
        );
    }
}

/// How a run of innoprof went: its output, wall time and peak RSS.
struct Measured {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
    max_rss_mib: u64,
}

/// innoprof ARGS, with its own peak RSS (the child's rusage, by wait4 on
/// its pid), failed if it runs past 60 s. Its output goes to files: a full
/// pipe would stall it while the test waits for its exit.
fn run_measured(args: &[&Path]) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let started = Instant::now();
    let mut child = Command::new(innoprof())
        .args(args)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let deadline = started + Duration::from_secs(60);
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    loop {
        // SAFETY: our own child's pid, valid pointers for the call.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(rc >= 0, "wait4: {}", std::io::Error::last_os_error());
        if rc == pid {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("innoprof {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    use std::os::unix::process::ExitStatusExt;
    Measured {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
        took: started.elapsed(),
        // ru_maxrss is in KiB on Linux.
        max_rss_mib: usage.ru_maxrss as u64 / 1024,
    }
}

/// The shapes of a crafted folded file: one line of 4,000,000
/// frames (32 MB), and 2,000,000 short distinct lines (43 MB).
const SHAPES: [&str; 2] = ["deep", "wide"];

/// Writes the crafted `shape` to `path`; the text is not kept (the
/// child's peak RSS would count the test's pages it was forked with).
fn write_crafted(shape: &str, path: &Path) {
    let text = if shape == "deep" {
        let mut deep = "frame_x;".repeat(4_000_000);
        deep.pop();
        deep.push_str(" 1000\n");
        deep
    } else {
        let mut wide = String::with_capacity(44 << 20);
        for i in 0..2_000_000u32 {
            wide.push_str(&format!("main;fn_{i:x};leaf 1\n"));
        }
        wide
    };
    std::fs::write(path, text).unwrap();
}

/// An SVG parsed as XML: inferno's has a DOCTYPE (no entities).
fn parse_svg(svg: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(svg, opts).expect("well-formed SVG")
}

/// Bounds that hold with room on this VM (a debug build; the shapes take
/// a few seconds and ~100-250 MiB) and fail on unbounded reading (52 s
/// and 3.9 GB, 26 s and 1.0 GB).
const MAX_SECONDS: u64 = 20;
const MAX_RSS_MIB: u64 = 600;

fn assert_bounded(what: &str, m: &Measured) {
    assert!(m.status.success(), "{what}: {}", m.stderr);
    eprintln!(
        "{what}: {:.1} s, max RSS {} MiB",
        m.took.as_secs_f64(),
        m.max_rss_mib
    );
    assert!(
        m.took < Duration::from_secs(MAX_SECONDS),
        "{what}: {:?}",
        m.took
    );
    assert!(m.max_rss_mib < MAX_RSS_MIB, "{what}: {} MiB", m.max_rss_mib);
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// `diff` of a bundle whose oncpu.folded is crafted: bounded in time and
/// memory, the outputs small, the cut said in one line (stdout and
/// diff.txt, diff.json) and on the graph, totals kept.
#[test]
fn diff_of_a_crafted_folded_file_is_bounded() {
    let root = tempfile::tempdir().unwrap();
    let base = copy_bundle(root.path(), "base");
    for shape in SHAPES {
        let inc = copy_bundle(root.path(), &format!("inc-{shape}"));
        write_crafted(shape, &inc.join("oncpu.folded"));
        let out = root.path().join(format!("diff-{shape}"));
        let m = run_measured(&[Path::new("diff"), &base, &inc, Path::new("--out"), &out]);
        assert_bounded(&format!("diff, {shape}"), &m);
        let svg = out.join("diff.oncpu.svg");
        let folded = std::fs::read_to_string(out.join("diff.oncpu.folded")).unwrap();
        eprintln!(
            "  diff.oncpu.svg {} bytes, diff.oncpu.folded {} bytes",
            file_len(&svg),
            folded.len()
        );
        assert!(file_len(&svg) <= 32 << 20, "{}", file_len(&svg));
        // Totals exact: the incident's column sums to what it weighed.
        let after: u64 = folded
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let want = if shape == "deep" { 1000 } else { 2_000_000 };
        assert_eq!(after, want, "{shape}");
        let notes: Vec<&str> = m
            .stdout
            .lines()
            .filter(|l| l.starts_with("note: "))
            .collect();
        assert!(!notes.is_empty(), "{shape}: {}", m.stdout);
        let diff_txt = std::fs::read_to_string(out.join("diff.txt")).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("diff.json")).unwrap()).unwrap();
        assert!(!json["notes"].as_array().unwrap().is_empty());
        match shape {
            "deep" => {
                let lines = folded.lines().filter(|l| l.contains("frame_x")).count();
                assert_eq!(lines, 1, "{shape}");
                assert!(file_len(&svg) < 2 << 20, "{}", file_len(&svg));
                let line = folded.lines().find(|l| l.contains("frame_x")).unwrap();
                assert_eq!(line.matches(';').count() + 1, 1024, "1,024 frames");
                assert!(line.starts_with("frame_x;") && line.contains(";[truncated] "));
                assert!(notes.iter().any(|n| n.contains("deeper than 1024 frames")));
            }
            _ => {
                assert!(
                    folded.lines().any(|l| l.starts_with("[truncated] ")),
                    "{shape}"
                );
                assert!(folded.lines().count() <= (1 << 18) + 1000, "{shape}");
                assert!(notes
                    .iter()
                    .any(|n| n.contains("folded into one [truncated] stack")));
            }
        }
        assert!(notes.iter().all(|n| diff_txt.contains(n)), "{diff_txt}");
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            svg_text.contains("id=\"subtitle\""),
            "the cut is on the graph"
        );
        parse_svg(&svg_text);
        std::fs::remove_dir_all(&inc).unwrap();
    }
}

/// `report DIR` re-renders a probe's flame graph from its folded file:
/// crafted, it is drawn within the caps, and stderr says so in one line.
#[test]
fn report_of_a_crafted_folded_file_is_bounded() {
    let root = tempfile::tempdir().unwrap();
    for shape in SHAPES {
        let b = copy_bundle(root.path(), &format!("report-{shape}"));
        write_crafted(shape, &b.join("fx_block_wait.folded"));
        let m = run_measured(&[Path::new("report"), &b]);
        assert_bounded(&format!("report, {shape}"), &m);
        let html = file_len(&b.join("report.html"));
        eprintln!("  report.html {html} bytes");
        assert!(html < 64 << 20, "{html}");
        let notes: Vec<&str> = m
            .stderr
            .lines()
            .filter(|l| {
                l.starts_with("innoprof: note: fx_block_wait.folded: cut to innoprof's caps")
            })
            .collect();
        assert_eq!(notes.len(), 1, "{}", m.stderr);
        let want = if shape == "deep" {
            "deeper than 1024 frames"
        } else {
            "[truncated] stack"
        };
        assert!(notes[0].contains(want), "{}", notes[0]);
        std::fs::remove_dir_all(&b).unwrap();
    }
}

/// Control characters in a frame name (a terminal's colour escape, NUL,
/// BEL, the C1 NEL) reach neither the SVG nor the folded file raw: the
/// SVG is well-formed XML, and the folded line reads back to the same
/// frames, escaped as the text outputs escape them.
#[test]
fn control_characters_in_frame_names_are_escaped_in_folded_and_svg() {
    let frames = [
        "main",
        "evil\u{1b}[31m",
        "nul\u{0}",
        "bel\u{7}",
        "nel\u{85}x",
    ];
    let escaped = [
        "main",
        "evil\\x1b[31m",
        "nul\\x00",
        "bel\\x07",
        "nel\\u{85}x",
    ];
    let root = tempfile::tempdir().unwrap();
    let base = copy_bundle(root.path(), "base");
    let inc = copy_bundle(root.path(), "evil");
    let path = inc.join("oncpu.folded");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!("{} 50\n", frames.join(";")));
    std::fs::write(&path, text).unwrap();
    let out = root.path().join("diff-evil");
    let o = diff(&base, &inc, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let raw = |c: char| c.is_control() && c != '\n';
    let folded = std::fs::read_to_string(out.join("diff.oncpu.folded")).unwrap();
    assert!(
        !folded.chars().any(raw),
        "raw control character in diff.oncpu.folded"
    );
    let line = folded.lines().find(|l| l.contains("evil")).unwrap();
    let stack = line.rsplitn(3, ' ').nth(2).unwrap();
    assert_eq!(stack.split(';').collect::<Vec<_>>(), escaped, "{line}");
    let svg = std::fs::read_to_string(out.join("diff.oncpu.svg")).unwrap();
    assert!(
        !svg.chars().any(|c| raw(c) && c != '\t'),
        "raw control character in the SVG"
    );
    let doc = parse_svg(&svg);
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|n| n.text())
        .collect();
    for name in &escaped[1..] {
        assert!(
            titles.iter().any(|t| t.starts_with(&format!("{name} ("))),
            "{name} in no title: {titles:?}"
        );
    }
}
