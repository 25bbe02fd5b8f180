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

#[test]
fn interval_too_short() {
    let out = run_innoprof(&[
        "record",
        "--pid",
        "1",
        "--out",
        "/tmp/x",
        "--interval",
        "10ms",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("10ms is too short; use 100ms or more"),
        "{stderr}"
    );
}

/// `serve --listen ADDR` on the fixture fails with an error naming `needles`.
fn serve_fails(listen: &str, needles: &[&str]) {
    let fx = Fixture::spawn(&fixture_binary(false), [0, 0, 0, 0, 0]);
    let pid = fx.pid.to_string();
    let args = [
        "serve",
        "--pid",
        &pid,
        "--force",
        "--probe",
        "fixture_counted",
        "--listen",
        listen,
    ];
    let stderr = fails_with(&args, needles);
    assert!(
        !stderr.contains("attached"),
        "fails before attaching: {stderr}"
    );
    fx.exit();
}

/// A busy --listen port fails before any probe is attached.
#[test]
fn serve_on_a_busy_port() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    serve_fails(
        &addr,
        &[
            &format!("cannot listen on {addr}"),
            "choose another --listen",
        ],
    );
}

/// A non-loopback --listen is refused unless --listen-any allows it.
#[test]
fn serve_refuses_non_loopback_listen() {
    let port = free_port();
    for addr in [format!("0.0.0.0:{port}"), format!("[::]:{port}")] {
        serve_fails(&addr, &["not a loopback address", "--listen-any"]);
        assert!(
            http_get(port, "/metrics").is_err(),
            "nothing listens on {addr}"
        );
    }
}
