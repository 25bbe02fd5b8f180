//! Bad input gets a clear, actionable error and changes nothing.

use std::process::{Command, Stdio};

use innoprof_e2e::*;

fn sleeper() -> std::process::Child {
    Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn nonexistent_pid() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            "999999999",
            "--out",
            out.to_str().unwrap(),
        ],
        &["no process with PID 999999999", "pidof"],
    );
}

#[test]
fn pid_that_is_not_a_server() {
    let mut child = sleeper();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            &child.id().to_string(),
            "--out",
            out.to_str().unwrap(),
        ],
        &["is `sleep`", "not mysqld/mariadbd", "--force"],
    );
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn zombie_pid() {
    let mut child = Command::new("true").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300)); // exited, not reaped
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            &child.id().to_string(),
            "--force",
            "--out",
            out.to_str().unwrap(),
        ],
        &["zombie"],
    );
    let _ = child.wait();
}

#[test]
fn symbol_that_does_not_resolve() {
    let mut child = sleeper();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            &child.id().to_string(),
            "--force",
            "--probe",
            "no_such_function_xyz",
            "--out",
            out.to_str().unwrap(),
        ],
        &["none of the symbols", "no_such_function_xyz"],
    );
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn unwritable_output_dir() {
    let fx = Fixture::spawn(&fixture_binary(false), [0, 0, 0, 0, 0]);
    let file = tempfile::NamedTempFile::new().unwrap();
    let out = file.path().join("sub");
    fails_with(
        &[
            "record",
            "--pid",
            &fx.pid.to_string(),
            "--force",
            "--probe",
            "fixture_counted",
            "--out",
            out.to_str().unwrap(),
        ],
        &["output directory", "not usable", "--out"],
    );
    fx.exit();
}

#[test]
fn malformed_catalog_file() {
    let mut child = sleeper();
    let dir = tempfile::tempdir().unwrap();
    let cat = dir.path().join("bad.toml");
    std::fs::write(&cat, "[server]\nfamily = 'mysql'\n[[probe]]\nname = 1\n").unwrap();
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            &child.id().to_string(),
            "--force",
            "--catalog",
            cat.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &["bad.toml", "malformed"],
    );
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn bad_duration_is_refused_by_the_parser() {
    let out = run_innoprof(&[
        "record",
        "--pid",
        "1",
        "--duration",
        "soon",
        "--out",
        "/tmp/x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration"));
}

/// Without root, the missing capabilities are named before anything is touched.
#[test]
fn unprivileged_user_is_told_which_capabilities_are_missing() {
    let mut child = sleeper();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(innoprof())
        .args([
            "record",
            "--pid",
            &child.id().to_string(),
            "--force",
            "--probe",
            "main",
            "--out",
            "/tmp",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON") && stderr.contains("root"),
        "{stderr}"
    );
    child.kill().unwrap();
    let _ = child.wait();
}

/// A stripped binary whose probed function is not exported: the error names
/// the probe and says the binary is stripped.
#[test]
fn stripped_binary_names_the_missing_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("fixture-stripped");
    let ok = Command::new("strip")
        .args(["--strip-all", "-o"])
        .arg(&stripped)
        .arg(fixture_binary(false))
        .status()
        .unwrap();
    assert!(ok.success());
    let fx = Fixture::spawn(&stripped, [0, 0, 0, 0, 0]);
    let out = dir.path().join("o");
    fails_with(
        &[
            "record",
            "--pid",
            &fx.pid.to_string(),
            "--force",
            "--probe",
            "fixture_counted",
            "--out",
            out.to_str().unwrap(),
        ],
        &["fixture_counted", "stripped (no .symtab)", "debug symbols"],
    );
    assert!(!out.exists(), "nothing written for a refused run");
    fx.exit();
}
