//! Running innoprof: the binary, `record` in the foreground and in the
//! background, refusals.

use crate::bundle::{check_files, read_summary};
use crate::fixture::{fixture_binary, fixture_catalog, Fixture};
use crate::ready::{Ready, ReadyPipe, READY_FD};
use crate::repo_root;
use innoprof::model::summary::{ProbeResult, Summary};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Path of the `innoprof` binary, built (once per test process) in the same
/// profile as the tests.
pub fn innoprof() -> PathBuf {
    static BUILD: Once = Once::new();
    let target_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let profile_release = target_dir.ends_with("release");
    BUILD.call_once(|| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-q", "-p", "innoprof-cli"])
            .current_dir(repo_root());
        if profile_release {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building innoprof failed");
    });
    target_dir.join("innoprof")
}

/// Blocks (up to 60 s) until innoprof's stderr, captured to a file, says
/// `needle`; panics with that stderr if it exits first.
pub(crate) fn wait_for_stderr(child: &mut Child, stderr_path: &Path, needle: &str) {
    let stderr = || std::fs::read_to_string(stderr_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stderr().contains(needle) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("innoprof exited early ({status}): {}", stderr());
        }
        assert!(
            Instant::now() < deadline,
            "innoprof never said `{needle}`: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run_innoprof(args: &[&str]) -> Output {
    let out = Command::new(innoprof())
        .args(args)
        .env_remove("DEBUGINFOD_URLS")
        .output()
        .unwrap();
    // `record --out DIR` and `report DIR`: the bundle they leave is checked
    // against the output contract, whatever the test then looks at.
    match args.first() {
        Some(&"record") => {
            let out_dir = args.iter().position(|a| *a == "--out");
            if let Some(dir) = out_dir.and_then(|i| args.get(i + 1)) {
                // A refused recording leaves whatever the test put there.
                check_files(Path::new(dir), out.status.success());
            }
        }
        // A test may hand `report` a bundle it wrote itself, as an older
        // innoprof did: checked only when it is of this build's version.
        Some(&"report") => {
            if let Some(dir) = args.get(1) {
                check_files(Path::new(dir), false);
            }
        }
        _ => {}
    }
    out
}

/// Runs innoprof in the background; stderr is captured to a file.
pub struct Recording {
    pub child: Child,
    pub out: PathBuf,
    stderr_path: PathBuf,
    ready: ReadyPipe,
    _dir: tempfile::TempDir,
}

impl Recording {
    /// `innoprof record ARGS --out TMP`. Unless ARGS set `--max-overhead`,
    /// the governor is off: most tests check exact counts, which a
    /// duty-cycled probe only estimates (tests/e2e/governor.rs covers it).
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(args, &[])
    }

    /// Like `start`, with these variables added to innoprof's environment.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        Self::start_in(args, &out, dir, env)
    }

    /// Like `start`, writing the recording to `out` (kept after the test).
    pub fn start_to(args: &[&str], out: &Path) -> Self {
        Self::start_in(args, out, tempfile::tempdir().unwrap(), &[])
    }

    fn start_in(args: &[&str], out: &Path, dir: tempfile::TempDir, env: &[(&str, &str)]) -> Self {
        let out = out.to_path_buf();
        let stderr_path = dir.path().join("stderr.txt");
        let governor: &[&str] = if args.contains(&"--max-overhead") {
            &[]
        } else {
            &["--max-overhead", "off"]
        };
        let mut cmd = Command::new(innoprof());
        let ready = ReadyPipe::attach_to(&mut cmd);
        let child = cmd
            // No debuginfod server from the machine's environment: a test
            // that wants one names it (tests/e2e/debuginfod.rs).
            .env_remove("DEBUGINFOD_URLS")
            .envs(env.iter().copied())
            .arg("record")
            .args(args)
            .args(governor)
            .args(["--ready-fd", &READY_FD.to_string()])
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        Self {
            child,
            out,
            stderr_path,
            ready,
            _dir: dir,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Blocks until innoprof reports its probes attached (its `--ready-fd`
    /// line, which says what is attached).
    pub fn wait_attached(&mut self) -> Ready {
        self.ready.wait(&mut self.child, &self.stderr_path)
    }

    /// Blocks until innoprof's stderr says `needle`.
    pub fn wait_stderr(&mut self, needle: &str) {
        wait_for_stderr(&mut self.child, &self.stderr_path, needle);
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for exit; returns (exit code, stdout).
    pub fn finish(mut self) -> (Option<i32>, String, Self) {
        let mut stdout = String::new();
        std::io::Read::read_to_string(self.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let status = self.child.wait().unwrap();
        // A refused recording leaves whatever the test put there.
        check_files(&self.out, status.success());
        (status.code(), stdout, self)
    }

    /// summary.json as its serde type (what a reader of the bundle gets).
    pub fn summary(&self) -> Summary {
        read_summary(&self.out).unwrap_or_else(|e| panic!("{e}; stderr: {}", self.stderr()))
    }

    /// summary.json as raw JSON, for a test of the file's contract itself
    /// (a field's presence or spelling).
    pub fn summary_json(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out.join("summary.json"))
            .unwrap_or_else(|e| panic!("no summary.json ({e}); stderr: {}", self.stderr()));
        serde_json::from_str(&text).unwrap()
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

/// The probe named `name` in a summary.
pub fn probe<'a>(summary: &'a Summary, name: &str) -> &'a ProbeResult {
    summary
        .probes
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("probe {name} not in summary"))
}

/// Records one probe defined in a throw-away catalog (see [`fixture_catalog`])
/// while the fixture makes its calls; `extra` goes to `innoprof record`.
pub fn record_catalog_probe(
    extra: &[&str],
    probe_toml: &str,
    pie: bool,
    counts: [u64; 5],
) -> (String, Recording) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = fixture_catalog(dir.path(), &[probe_toml]);
    let name = probe_toml.split('\'').nth(1).unwrap();
    let mut fx = Fixture::spawn(&fixture_binary(pie), counts);
    let pid = fx.pid.to_string();
    let mut args = vec![
        "--pid",
        &pid,
        "--force",
        "--duration",
        "3s",
        "--catalog",
        catalog.to_str().unwrap(),
        "--probes",
        name,
    ];
    args.extend_from_slice(extra);
    let mut rec = Recording::start(&args);
    rec.wait_attached();
    fx.run_calls();
    let (code, stdout, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    (stdout, rec)
}

/// Runs innoprof and expects a refusal: exit status 1, exactly one
/// `innoprof: error` line, containing every needle; returns its stderr.
pub fn fails_with(args: &[&str], needles: &[&str]) -> String {
    let out = run_innoprof(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: expected `{n}` in: {stderr}");
    }
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("innoprof: error"))
            .count(),
        1,
        "{stderr}"
    );
    stderr.into_owned()
}
