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
