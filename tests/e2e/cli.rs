//! The command line as perf/bcc users expect it: short flags, bare-second
//! durations, the PID found when one server runs (and a list when several
//! do), `--version` saying which commit, exit codes and privileges in
//! `--help`, shell completions and man pages that parse, and `diff`
//! writing its own directory, never into a recording.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use innoprof_e2e::*;

fn innoprof_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(innoprof())
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn version_help_completions_and_man_pages_are_generated_and_parse() {
    let o = run_innoprof(&["--version"]);
    let version = String::from_utf8_lossy(&o.stdout);
    // `innoprof 0.1.0 (commit 0123456789ab, built 2026-11-23)`; a checkout
    // always has a commit, so "unknown" here is a broken build script.
    let commit = version
        .split("commit ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("");
    assert!(
        commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{version}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim());
    assert!(version.contains(", built 20"), "{version}");

    for cmd in [&["--help"][..], &["record", "--help"], &["serve", "--help"]] {
        let help = String::from_utf8_lossy(&run_innoprof(cmd).stdout).into_owned();
        for needle in [
            "Exit status:",
            "3  the server exited",
            "CAP_BPF",
            "CAP_SYS_PTRACE",
        ] {
            assert!(
                help.contains(needle),
                "{cmd:?} --help lacks {needle}:\n{help}"
            );
        }
    }
    let record_help =
        String::from_utf8_lossy(&run_innoprof(&["record", "--help"]).stdout).into_owned();
    for flag in ["-p, --pid", "-d, --duration", "-o, --out", "-F, --freq"] {
        assert!(record_help.contains(flag), "no {flag}:\n{record_help}");
    }

    let dir = tempfile::tempdir().unwrap();
    for (shell, checker) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        let o = run_innoprof(&["completions", shell]);
        assert!(o.status.success(), "{}", text(&o));
        let script = dir.path().join(format!("innoprof.{shell}"));
        std::fs::write(&script, &o.stdout).unwrap();
        let body = String::from_utf8_lossy(&o.stdout);
        assert!(
            body.contains("duration") && body.contains("record"),
            "{shell}: {body}"
        );
        // Each script must parse in its shell (scripts/setup.sh installs all three).
        let check = Command::new(checker)
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(check.status.success(), "{shell} -n: {}", text(&check));
    }

    let man = dir.path().join("man1");
    std::fs::create_dir(&man).unwrap();
    let o = run_innoprof(&["manpages", man.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let pages = listing(&man);
    for page in [
        "innoprof.1",
        "innoprof-record.1",
        "innoprof-diff.1",
        "innoprof-serve.1",
        "innoprof-top.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{pages:?}");
    }
    // groff's own warnings (-ww) on stderr mean a malformed page.
    let rendered = Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-ww", "-P-cbou"])
        .arg(man.join("innoprof-record.1"))
        .output()
        .unwrap();
    assert!(
        rendered.status.success() && rendered.stderr.is_empty(),
        "{}",
        text(&rendered)
    );
    let page = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        [
            "EXIT STATUS",
            "EXAMPLES",
            "SEE ALSO",
            "--stack-interval",
            "innoprof record -p 4242"
        ]
        .iter()
        .all(|want| page.contains(want)),
        "{page}"
    );

    // A symlink planted at a page's name is refused, not followed.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    std::fs::remove_file(man.join("innoprof-diff.1")).unwrap();
    std::os::unix::fs::symlink(&victim, man.join("innoprof-diff.1")).unwrap();
    let o = run_innoprof(&["manpages", man.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

/// The only recording directory `record` named itself in `cwd`.
fn default_bundle(cwd: &Path, pid: u32) -> PathBuf {
    let prefix = format!("innoprof-{pid}-");
    let found: Vec<String> = listing(cwd)
        .into_iter()
        .filter(|n| n.starts_with(&prefix) && !n.ends_with(".tar.gz"))
        .collect();
    assert_eq!(found.len(), 1, "{:?}", listing(cwd));
    // innoprof-PID-YYYYMMDD-HHMMSS
    let stamp = &found[0][prefix.len()..];
    assert!(stamp.len() == 15 && stamp.as_bytes()[8] == b'-', "{stamp}");
    cwd.join(&found[0])
}

/// One real server: found without `-p`, recorded with short flags and
/// bare seconds; then a second `mysqld` process makes the choice
/// ambiguous, and innoprof lists both instead of guessing. The two
/// recordings then feed `diff`, which must leave them untouched.
#[test]
fn the_only_server_is_found_short_flags_work_and_diff_leaves_bundles_alone() {
    let _k = kernel_lock();
    let others = innoprof::target::discover::servers().unwrap();
    assert!(
        others.is_empty(),
        "this test needs a host with no other mysqld/mariadbd running: {others:?}"
    );
    let server = Server::start("mariadb-10.2.11", &[]);
    let cwd = tempfile::tempdir().unwrap();

    // No -p, no -o: the server is found, the bundle named for it.
    let o = innoprof_in(
        cwd.path(),
        &["record", "-d", "1.5", "-F", "49", "--max-overhead", "off"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("using pid {} mysqld", server.pid))
            && stderr.contains("the only server on this host"),
        "{stderr}"
    );
    let first = default_bundle(cwd.path(), server.pid);
    let summary = read_summary(&first).unwrap();
    let duration = summary.duration_s;
    assert!((1.4..3.0).contains(&duration), "{duration}");
    let cpu = summary.cpu.as_ref().unwrap();
    assert_eq!(cpu.oncpu.frequency_hz, 49, "{cpu:?}");

    // -p and -o, short.
    let second = cwd.path().join("second");
    let pid = server.pid.to_string();
    let o = innoprof_in(
        cwd.path(),
        &[
            "record",
            "-p",
            &pid,
            "-d",
            "1",
            "-o",
            second.to_str().unwrap(),
            "--max-overhead",
            "off",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("using pid"));

    // Two servers: a copy of sleep(1) named mysqld is a second process of
    // that name, which is all discovery goes by.
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("mysqld");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut decoy = Command::new(&fake).arg("60").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    for args in [
        &["record", "-d", "1"][..],
        &["probes"],
        &["top", "--iterations", "1"],
    ] {
        let o = innoprof_in(cwd.path(), args);
        let all = text(&o);
        assert_eq!(o.status.code(), Some(1), "{all}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("2 servers run on this host; choose one with -p PID")
                && stderr.contains(&format!("  {} mysqld", server.pid))
                && stderr.contains(&format!("  {} mysqld", decoy.id())),
            "{all}"
        );
    }
    decoy.kill().unwrap();
    decoy.wait().unwrap();
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");

    // diff: its own directory by default; a recording as --out is refused.
    let before = listing(&second);
    let meta = std::fs::read(second.join("metadata.json")).unwrap();
    let o = innoprof_in(cwd.path(), &["diff", first.to_str().unwrap(), "second"]);
    assert!(o.status.success(), "{}", text(&o));
    let first_name = first.file_name().unwrap().to_string_lossy();
    let diff_dir = cwd
        .path()
        .join(format!("innoprof-diff-{first_name}-vs-second"));
    assert!(
        diff_dir.join("diff.json").is_file(),
        "{:?}",
        listing(cwd.path())
    );
    let o = innoprof_in(
        cwd.path(),
        &["diff", first.to_str().unwrap(), "second", "-o", "second"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is a recording"),
        "{}",
        text(&o)
    );
    assert_eq!(listing(&second), before);
    assert_eq!(std::fs::read(second.join("metadata.json")).unwrap(), meta);

    // A recording diffed with itself: written, with a warning.
    let o = innoprof_in(cwd.path(), &["diff", "second", "second", "-o", "self-diff"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("are the same recording"),
        "{}",
        text(&o)
    );
    // A bundle that is not there is said to be missing, for each reader.
    for args in [
        &["report", "no-such-dir"][..],
        &["top", "no-such-dir"],
        &["diff", "no-such-dir", "second"],
    ] {
        let o = innoprof_in(cwd.path(), args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("no-such-dir does not exist") && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
}
