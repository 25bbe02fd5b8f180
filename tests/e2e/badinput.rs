//! Bad or hostile input is refused with one actionable line, before any
//! probe is attached: output paths, catalogs, patterns, flags, missing
//! capabilities. And what innoprof does write is private (0640/0750).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use innoprof_e2e::*;

/// Runs `innoprof record` against a parked fixture with `args`, expecting
/// a refusal naming `needles`; nothing may be attached meanwhile.
fn fixture_refuses(args: &[&str], needles: &[&str]) {
    let _k = kernel_lock();
    let fx = Fixture::spawn(&fixture_binary(false), [0, 0, 0, 0, 0]);
    let pid = fx.pid.to_string();
    let mut all = vec!["record", "--pid", &pid, "--force", "--no-cpu"];
    all.extend_from_slice(args);
    fails_with(&all, needles);
    fx.exit();
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// A `--ready-fd` that is not open is refused before anything is attached
/// (a reader would otherwise wait for a line that never comes).
#[test]
fn a_closed_ready_fd_is_refused() {
    fixture_refuses(
        &["--probe", "fixture_counted", "--ready-fd", "987"],
        &["--ready-fd 987", "not an open descriptor"],
    );
    fails_with(
        &[
            "serve",
            "--pid",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--ready-fd",
            "987",
        ],
        &["--ready-fd 987", "not an open descriptor"],
    );
}

#[test]
fn symlinked_output_dir_is_refused_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = dir.path().join("out");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    fixture_refuses(
        &[
            "--probe",
            "fixture_counted",
            "--out",
            link.to_str().unwrap(),
        ],
        &["is a symbolic link", "--out"],
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// Root ignores permission bits, so unwritable means a read-only mount.
#[test]
fn read_only_output_dir_is_refused_before_attaching() {
    let dir = tempfile::tempdir().unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=16k", "tmpfs"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let out = dir.path().join("out");
    let result = std::panic::catch_unwind(|| {
        fixture_refuses(
            &["--probe", "fixture_counted", "--out", out.to_str().unwrap()],
            &[
                "not usable",
                "Read-only file system",
                "choose another --out",
            ],
        )
    });
    let _ = Command::new("umount").arg(dir.path()).status();
    result.unwrap();
}

#[test]
fn data_object_pattern_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    fixture_refuses(
        &["--probe", "g_mutex", "--out", out.to_str().unwrap()],
        &["`g_mutex` is a data object", "probes attach only to code"],
    );
    assert!(!out.exists());
}

/// `fixture_not_code` is a function symbol in .rodata (see fixture.cc).
#[test]
fn function_symbol_outside_executable_segments_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fixture_refuses(
        &[
            "--probe",
            "fixture_not_code",
            "--out",
            dir.path().join("o").to_str().unwrap(),
        ],
        &["fixture_not_code", "not in an executable segment"],
    );
    let out = run_innoprof(&[
        "probes",
        "--binary",
        fixture_binary(false).to_str().unwrap(),
        "--probe",
        "fixture_not_code",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("not in an executable segment"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn patterns_that_match_everything_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    for pattern in ["*", "?*", "*a*"] {
        fixture_refuses(
            &["--probe", pattern, "--out", out.to_str().unwrap()],
            &["too broad", "--probe"],
        );
    }
    // Specific enough to pass the pattern check, yet matching hundreds of
    // functions of this (Rust) test binary: refused before attaching.
    fails_with(
        &[
            "record",
            "--pid",
            &std::process::id().to_string(),
            "--force",
            "--no-cpu",
            "--probe",
            "*core::*",
            "--max-probe-points",
            "100",
            "--out",
            out.to_str().unwrap(),
        ],
        &[
            "too broad",
            "probe points, more than 100 ",
            "attaching would take",
            "--max-probe-points",
        ],
    );
    assert!(!out.exists());
}

#[test]
fn unknown_probe_name_suggests_the_close_one() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = fixture_catalog(
        dir.path(),
        &["name = 'fixture.counted'\nsymbols = ['fixture_counted']\nmeasure = 'count'\ncost = 'rare'\n"],
    );
    fixture_refuses(
        &[
            "--catalog",
            catalog.to_str().unwrap(),
            "--probes",
            "fixture.countd",
            "--out",
            dir.path().join("o").to_str().unwrap(),
        ],
        &[
            "unknown probe `fixture.countd`",
            "did you mean `fixture.counted`?",
        ],
    );
}

#[test]
fn hostile_catalog_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let hostile = [
        (
            "unknown-key.toml",
            "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\nextra=1\nprobe=[]\n",
            "unknown field `extra`",
        ),
        (
            "wrong-type.toml",
            "[server]\nfamily='mysql'\nmin_version=5.6\nmax_version='5.6'\nprobe=[]\n",
            "malformed",
        ),
        (
            "callsite.toml",
            "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n[[probe]]\nname='a'\n\
             symbols=['fixture_counted']\nmeasure='count'\ncost='rare'\ncallsite={file_arg=9,line_arg=1}\n",
            "positions 1..=6",
        ),
        (
            "nested.toml",
            &format!("a = {}{}\n", "[".repeat(10_000), "]".repeat(10_000)),
            "malformed",
        ),
    ];
    for (name, text, needle) in hostile {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        fixture_refuses(
            &[
                "--catalog",
                path.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &[name, needle],
        );
    }
    fixture_refuses(
        &["--catalog", "/dev/zero", "--out", out.to_str().unwrap()],
        &["/dev/zero", "too large for a catalog file"],
    );
    assert!(!out.exists());
}

#[test]
fn conflicting_and_out_of_range_flags_are_refused_by_the_parser() {
    for (args, needle) in [
        (&["--no-cpu", "--freq", "49"][..], "cannot be used with"),
        (
            &["--no-stacks", "--max-stacks", "8"][..],
            "cannot be used with",
        ),
        (&["--duration", "0s"][..], "more than zero"),
        (&["--duration", "400days"][..], "30 days"),
        (&["--duration", "1ns"][..], "100ms or more"),
        (&["--max-callsites", "0"][..], "--max-callsites"),
    ] {
        let mut all = vec!["record", "--pid", "1", "--out", "/tmp/innoprof-never"];
        all.extend_from_slice(args);
        let out = run_innoprof(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

/// Root without CAP_BPF and CAP_SYS_ADMIN (dropped from the bounding set):
/// the missing capability is named, nothing else.
#[test]
fn missing_cap_bpf_is_named() {
    let out = Command::new("setpriv")
        .args([
            "--bounding-set=-bpf,-sys_admin",
            "--inh-caps=-bpf,-sys_admin",
        ])
        .arg(innoprof())
        .args([
            "record",
            "--pid",
            &std::process::id().to_string(),
            "--force",
            "--probe",
            "main",
            "--out",
            "/tmp/innoprof-never",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("missing capabilities CAP_BPF:")
            && !stderr.contains("CAP_PERFMON,")
            && !stderr.contains("CAP_SYS_PTRACE"),
        "{stderr}"
    );
}

/// Every output file is 0640 and the directory innoprof creates 0750: a
/// profile names the server's code paths and call sites.
#[test]
fn outputs_are_private() {
    let _k = kernel_lock();
    let (_, rec) = record_catalog_probe(
        &[],
        "name = 'fixture.counted'\nsymbols = ['fixture_counted']\nmeasure = 'latency'\ncost = 'rare'\n",
        true,
        [10, 10, 0, 0, 0],
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&rec.out), 0o750);
    let files: Vec<_> = std::fs::read_dir(&rec.out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        assert_eq!(mode(&f), 0o640, "{}", f.display());
    }
}

/// `--probes ''` is refused (not an empty recording), saying how to list
/// the probe names.
#[test]
fn empty_probe_list_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    for empty in ["", " , "] {
        fixture_refuses(
            &["--probes", empty, "--out", out.to_str().unwrap()],
            &["--probes names no probe", "innoprof probes --pid PID"],
        );
    }
    assert!(!out.exists());
}

/// As an unprivileged user, `probes --pid` of another user's process says
/// which capability is missing, and the cause is printed once, not twice.
#[test]
fn unprivileged_probes_pid_names_cap_sys_ptrace() {
    let me = std::process::id().to_string();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(innoprof())
        .args(["probes", "--pid", &me, "--force"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("innoprof: error: cannot inspect PID")
            && stderr.contains("permission denied")
            && stderr.contains("needs CAP_SYS_PTRACE"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("Permission denied (os error 13)").count(),
        1,
        "the cause once: {stderr}"
    );
}
