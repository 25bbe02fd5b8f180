//! Helpers for the end-to-end tests: the innoprof binary, the C++ fixture,
//! real servers (via scripts/servers.sh), sysbench, and kernel-side checks.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Held by a test that loads BPF programs or inspects the kernel's list of
/// them, so its checks never see another test's programs: a mutex within
/// this test process and an flock across processes (other test binaries,
/// a second checkout's test run).
pub struct KernelLock {
    _file: std::fs::File,
    _guard: MutexGuard<'static, ()>,
}

pub fn kernel_lock() -> KernelLock {
    use std::os::fd::AsRawFd;
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("innoprof-kernel-tests.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when the file closes.
    assert_eq!(
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) },
        0,
        "flock"
    );
    KernelLock {
        _file: file,
        _guard: guard,
    }
}

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
fn wait_for_stderr(child: &mut Child, stderr_path: &Path, needle: &str) {
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

/// A throw-away catalog for the C++ fixture: `probes` are the bodies of its
/// `[[probe]]` tables.
pub fn fixture_catalog(dir: &Path, probes: &[&str]) -> PathBuf {
    let mut text =
        String::from("[server]\nfamily = 'unknown'\nmin_version = '0.0'\nmax_version = '0.0'\n");
    for p in probes {
        text.push_str("[[probe]]\n");
        text.push_str(p);
    }
    let path = dir.join("fixture.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The fixture's `PolicyMutex<…>::enter(this, spins, delay, file, line)`,
/// with its call sites.
pub const FIXTURE_MUTEX_PROBE: &str = "name = 'fixture.mutex.enter'\n\
    symbols = ['PolicyMutex<*>::enter']\nmeasure = 'latency'\ncost = 'rare'\n\
    callsite = { file_arg = 4, line_arg = 5 }\n";

/// The fixture's `fixture_sleep(ms)`.
pub const FIXTURE_SLEEP_PROBE: &str =
    "name = 'fixture.sleep'\nsymbols = ['fixture_sleep']\nmeasure = 'latency'\ncost = 'rare'\n";

/// Names of the entries of `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub fn run_innoprof(args: &[&str]) -> Output {
    let out = Command::new(innoprof()).args(args).output().unwrap();
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

/// Checks a bundle's summary.json and metadata.json, where present,
/// against the committed JSON Schemas (docs/schema/, generated from the
/// serde types by innoprof::contract): every bundle a test writes through
/// this library ([`run_innoprof`], [`Recording::finish`]) is checked, so
/// an output that drifts from its published schema fails the test that
/// wrote it.
pub fn check_bundle(dir: &Path) {
    check_files(dir, true)
}

/// `innoprof_wrote`: the files are innoprof's own output, so must carry
/// this build's `format_version`; otherwise a file of another version
/// (a test's hand-written legacy bundle) is skipped.
fn check_files(dir: &Path, innoprof_wrote: bool) {
    use innoprof::contract::{METADATA_SCHEMA, SUMMARY_SCHEMA};
    static VALIDATORS: std::sync::OnceLock<Vec<(&str, &str, jsonschema::Validator)>> =
        std::sync::OnceLock::new();
    let validators = VALIDATORS.get_or_init(|| {
        [
            ("summary.json", SUMMARY_SCHEMA),
            ("metadata.json", METADATA_SCHEMA),
        ]
        .into_iter()
        .map(|(file, schema)| {
            let text = std::fs::read(repo_root().join(schema)).unwrap();
            let schema_json: serde_json::Value = serde_json::from_slice(&text).unwrap();
            let v = jsonschema::validator_for(&schema_json)
                .unwrap_or_else(|e| panic!("{schema} is not a valid JSON Schema: {e}"));
            (file, schema, v)
        })
        .collect()
    });
    for (file, schema, validator) in validators {
        // A symlink or a FIFO a hardening test planted is not innoprof's file.
        let path = dir.join(file);
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(text) = std::fs::read(&path) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
            continue; // not JSON: a test's own broken file; the test says what it expects
        };
        let current =
            value["format_version"].as_u64() == Some(innoprof::contract::FORMAT_VERSION.into());
        if !current && !innoprof_wrote {
            continue;
        }
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .take(10)
            .map(|e| format!("  at {}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{} does not match {schema}:\n{}",
            path.display(),
            errors.join("\n")
        );
    }
}

/// Runs innoprof in the background; stderr is captured to a file.
pub struct Recording {
    pub child: Child,
    pub out: PathBuf,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Recording {
    /// `innoprof record ARGS --out TMP`. Unless ARGS set `--max-overhead`,
    /// the governor is off: most tests check exact counts, which a
    /// duty-cycled probe only estimates (tests/e2e/governor.rs covers it).
    pub fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        Self::start_in(args, &out, dir)
    }

    /// Like `start`, writing the recording to `out` (kept after the test).
    pub fn start_to(args: &[&str], out: &Path) -> Self {
        Self::start_in(args, out, tempfile::tempdir().unwrap())
    }

    fn start_in(args: &[&str], out: &Path, dir: tempfile::TempDir) -> Self {
        let out = out.to_path_buf();
        let stderr_path = dir.path().join("stderr.txt");
        let governor: &[&str] = if args.contains(&"--max-overhead") {
            &[]
        } else {
            &["--max-overhead", "off"]
        };
        let child = Command::new(innoprof())
            .arg("record")
            .args(args)
            .args(governor)
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
            _dir: dir,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Blocks until innoprof reports its probes attached.
    pub fn wait_attached(&mut self) {
        wait_for_stderr(&mut self.child, &self.stderr_path, "recording for");
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

    pub fn summary(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out.join("summary.json"))
            .unwrap_or_else(|e| panic!("no summary.json ({e}); stderr: {}", self.stderr()));
        serde_json::from_str(&text).unwrap()
    }

    pub fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

pub fn probe<'a>(summary: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    summary["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("probe {name} not in summary"))
}

/// The C++ fixture with known behaviour, compiled for this test run.
pub fn fixture_binary(pie: bool) -> PathBuf {
    let pie_flag = if pie { "-pie" } else { "-no-pie" };
    compile_fixture(
        "fixture.cc",
        if pie { "fixture-pie" } else { "fixture-nopie" },
        &["-O0", "-g", "-fno-omit-frame-pointer", pie_flag, "-fPIE"],
    )
}

/// The fixture linked statically: runs in an empty chroot.
pub fn static_fixture_binary() -> PathBuf {
    compile_fixture(
        "fixture.cc",
        "fixture-static",
        &["-O0", "-g", "-fno-omit-frame-pointer", "-static"],
    )
}

/// The CPU fixture (tests/fixture/spin.cc): spins in a known function,
/// blocks in another, compiled for this test run.
pub fn spin_binary() -> PathBuf {
    compile_fixture("spin.cc", "spin", &["-O1", "-g", "-pthread"])
}

/// tests/fixture/paced.cc: calls `paced_hit` at a steady rate and logs
/// its running count, the truth for sampled estimates.
pub fn paced_binary() -> PathBuf {
    compile_fixture(
        "paced.cc",
        "paced",
        &["-O0", "-g", "-fno-omit-frame-pointer"],
    )
}

/// tests/fixture/unprobeable.cc: functions whose first instruction the
/// kernel refuses a uprobe on, compiled for this test run.
pub fn unprobeable_binary() -> PathBuf {
    compile_fixture("unprobeable.cc", "unprobeable", &["-O1", "-g"])
}

/// The paced fixture calling `paced_hit` at a steady rate, logging its
/// running count (unix ms, calls) so the truth is known at every moment.
pub struct Paced {
    pub pid: u32,
    child: Child,
    /// Held open: the fixture runs until it is killed.
    _stdin: std::process::ChildStdin,
    log: Option<std::thread::JoinHandle<Vec<(u64, u64)>>>,
}

impl Paced {
    /// `calls_per_s` for `seconds`, from now on.
    pub fn start(calls_per_s: u32, seconds: u32) -> Self {
        let mut p = Self::ready(&[calls_per_s, seconds]);
        p.go();
        p
    }

    /// Started with `paced ARGS…` (see tests/fixture/paced.cc), waiting
    /// for `go` before the first call.
    pub fn ready(args: &[u32]) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(paced_binary())
            .args(args.iter().map(|a| a.to_string()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line.trim().strip_prefix("ready ").unwrap().parse().unwrap();
        let log = std::thread::spawn(move || {
            stdout
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| {
                    let (t, c) = l.split_once(' ')?;
                    Some((t.parse::<u64>().ok()?, c.parse::<u64>().ok()?))
                })
                .collect::<Vec<_>>()
        });
        Self {
            pid,
            child,
            _stdin: stdin,
            log: Some(log),
        }
    }

    /// Starts the calls.
    pub fn go(&mut self) {
        use std::io::Write;
        writeln!(self._stdin, "go").unwrap();
    }

    /// Kills the fixture; its log of (unix ms, running count).
    pub fn stop(mut self) -> PacedLog {
        let _ = self.child.kill();
        let _ = self.child.wait();
        PacedLog(self.log.take().unwrap().join().unwrap())
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct PacedLog(pub Vec<(u64, u64)>);

impl PacedLog {
    /// The running count at the last log line.
    pub fn last(&self) -> u64 {
        self.0.last().map_or(0, |(_, c)| *c)
    }

    /// The fixture's running count at `t_ms` (unix), interpolated.
    pub fn calls_at(&self, t_ms: f64) -> f64 {
        let log = &self.0;
        let i = log.partition_point(|(t, _)| (*t as f64) < t_ms);
        assert!(i > 0 && i < log.len(), "{t_ms} outside the fixture's log");
        let ((t0, c0), (t1, c1)) = (log[i - 1], log[i]);
        c0 as f64 + (c1 - c0) as f64 * (t_ms - t0 as f64) / (t1 - t0).max(1) as f64
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// Compiles tests/fixture/SOURCE once per test process. Tests run in
/// parallel: the lock and the rename keep any of them from seeing a
/// half-written binary.
fn compile_fixture(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("innoprof-fixture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join(name);
    if !bin.exists() {
        let tmp = dir.join(format!("{name}.tmp"));
        let status = Command::new("g++")
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(repo_root().join("tests/fixture").join(source))
            .status()
            .unwrap();
        assert!(status.success(), "compiling {source} failed");
        std::fs::rename(&tmp, &bin).unwrap();
    }
    bin
}

pub struct Fixture {
    pub child: Child,
    pub pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Fixture {
    /// `fixture COUNT_A COUNT_B SLEEPS SLEEP_MS ENTERS`, stopped at "ready".
    pub fn spawn(binary: &Path, args: [u64; 5]) -> Self {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Self::spawn_with(binary, &args)
    }

    /// Any fixture that prints "ready PID", then waits for "go".
    pub fn spawn_with(binary: &Path, args: &[String]) -> Self {
        let mut child = Command::new(binary)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .expect("fixture prints ready")
            .parse()
            .unwrap();
        Self {
            child,
            pid,
            stdin,
            stdout,
        }
    }

    /// Lets it make its calls; returns once they are all done, with what
    /// the fixture printed after "done".
    pub fn run_calls(&mut self) -> String {
        writeln!(self.stdin, "go").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.strip_prefix("done")
            .unwrap_or_else(|| panic!("fixture said {line:?}"))
            .trim()
            .to_string()
    }

    /// Closes its stdin (EOF ends every wait in the fixture) and reaps it.
    pub fn exit(self) {
        let Fixture {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

fn bpftool_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("bpftool (apt-get install bpftool)");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// The values (as u64, little-endian) of the BPF array map named `name`
/// that process `pid` holds, by bpftool: e.g. `stack_every`, which says per
/// probe slot whether hits take stacks.
pub fn bpf_array_values_held_by(pid: u32, name: &str) -> Vec<u64> {
    let mut ids = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        ids.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("map_id:"))
                .filter_map(|v| v.trim().parse::<u64>().ok()),
        );
    }
    let mut out = Vec::new();
    for id in ids {
        let id = id.to_string();
        let show = Command::new("bpftool")
            .args(["-j", "map", "show", "id", &id])
            .output()
            .unwrap();
        let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap_or_default();
        if show["name"] != name {
            continue;
        }
        for e in bpftool_json(&["map", "dump", "id", &id]) {
            let v = &e["formatted"]["value"];
            out.push(
                v.as_u64()
                    .unwrap_or_else(|| panic!("bpftool map value {e}")),
            );
        }
    }
    out
}

const UPROBE_PROGRAMS: [&str; 3] = ["lat_enter", "lat_return", "count_hit"];
/// The CPU profiler's programs (bpf/cpu.bpf.c).
const CPU_PROGRAMS: [&str; 2] = ["cpu_sample", "offcpu_switch"];
const PROGRAM_NAMES: [&str; 5] = [
    UPROBE_PROGRAMS[0],
    UPROBE_PROGRAMS[1],
    UPROBE_PROGRAMS[2],
    CPU_PROGRAMS[0],
    CPU_PROGRAMS[1],
];

/// innoprof's BPF programs currently loaded in the kernel, as "name#id".
pub fn loaded_innoprof_programs() -> Vec<String> {
    bpftool_json(&["prog", "show"])
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| PROGRAM_NAMES.contains(&n))
        })
        .map(|p| format!("{}#{}", p["name"].as_str().unwrap(), p["id"]))
        .collect()
}

/// BPF links (one per attached uprobe) that run an innoprof uprobe program.
pub fn innoprof_links() -> Vec<String> {
    links_of(&UPROBE_PROGRAMS)
}

/// BPF links running an innoprof uprobe program that process `pid` holds
/// (other innoprof runs on this machine hold their own).
pub fn innoprof_links_held_by(pid: u32) -> Vec<String> {
    let (_, held) = bpf_ids_held_by(std::iter::once(std::path::PathBuf::from(format!(
        "/proc/{pid}"
    ))));
    links_of(&UPROBE_PROGRAMS)
        .into_iter()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["id"].as_u64())
                .is_some_and(|id| held.contains(&id))
        })
        .collect()
}

/// BPF links of the CPU profiler: one perf event per CPU, one tracepoint.
pub fn cpu_profiler_links() -> Vec<String> {
    links_of(&CPU_PROGRAMS)
}

fn links_of(names: &[&str]) -> Vec<String> {
    let ids: Vec<u64> = bpftool_json(&["prog", "show"])
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| names.contains(&n)))
        .filter_map(|p| p["id"].as_u64())
        .collect();
    bpftool_json(&["link", "list"])
        .iter()
        .filter(|l| l["prog_id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .map(|l| l.to_string())
        .collect()
}

/// Waits (up to 5 s: program release is deferred in the kernel) until no
/// innoprof program or link remains that no live process holds; returns
/// what is left. Called once the innoprof under test has exited, so what a
/// live process still holds belongs to another innoprof (another
/// checkout's test or a manual run on this shared machine), not to a leak:
/// a leaked program or link is one nothing holds any more.
pub fn leftovers_after_exit() -> (Vec<String>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (held_progs, held_links) = bpf_ids_held_by_live_processes();
        let id_of = |item: &str| -> Option<u64> {
            match item.split_once('#') {
                Some((_, id)) => id.parse().ok(),
                None => serde_json::from_str::<serde_json::Value>(item).ok()?["id"].as_u64(),
            }
        };
        let unheld = |items: Vec<String>, held: &HashSet<u64>| -> Vec<String> {
            items
                .into_iter()
                .filter(|i| id_of(i).is_none_or(|id| !held.contains(&id)))
                .collect()
        };
        let (p, l) = (
            unheld(loaded_innoprof_programs(), &held_progs),
            unheld(links_of(&PROGRAM_NAMES), &held_links),
        );
        if (p.is_empty() && l.is_empty()) || Instant::now() > deadline {
            return (p, l);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (program ids, link ids) of the BPF descriptors live processes hold,
/// from /proc/*/fdinfo.
fn bpf_ids_held_by_live_processes() -> (HashSet<u64>, HashSet<u64>) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return (HashSet::new(), HashSet::new());
    };
    bpf_ids_held_by(procs.flatten().map(|d| d.path()))
}

/// (program ids, link ids) held by the processes at these /proc/PID paths.
fn bpf_ids_held_by(
    proc_dirs: impl Iterator<Item = std::path::PathBuf>,
) -> (HashSet<u64>, HashSet<u64>) {
    let (mut progs, mut links) = (HashSet::new(), HashSet::new());
    for proc_dir in proc_dirs {
        let Ok(fds) = std::fs::read_dir(proc_dir.join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            for line in info.lines() {
                let (set, value) = if let Some(v) = line.strip_prefix("prog_id:") {
                    (&mut progs, v)
                } else if let Some(v) = line.strip_prefix("link_id:") {
                    (&mut links, v)
                } else {
                    continue;
                };
                if let Ok(id) = value.trim().parse() {
                    set.insert(id);
                }
            }
        }
    }
    (progs, links)
}

/// A real server started by scripts/servers.sh in a private temp dir.
pub struct Server {
    pub name: String,
    pub dir: tempfile::TempDir,
    pub pid: u32,
    prepared: std::cell::Cell<bool>,
    /// The first start's extra mysqld options, for `start_again`.
    extra: Vec<String>,
}

impl Server {
    pub fn start(name: &str, extra: &[&str]) -> Self {
        Self::start_under(name, &std::env::temp_dir(), extra)
    }

    /// Like `start`, with the server's directory (datadir, socket) under
    /// `parent`, e.g. on a filesystem of the test's own.
    pub fn start_under(name: &str, parent: &Path, extra: &[&str]) -> Self {
        Self::start_as(name, parent, None, extra)
    }

    /// Like `start`, running `binary` (e.g. a stripped copy of the server)
    /// with the fetched server's basedir and libraries.
    pub fn start_binary(name: &str, binary: &Path) -> Self {
        Self::start_as(name, &std::env::temp_dir(), Some(binary), &[])
    }

    fn start_as(name: &str, parent: &Path, binary: Option<&Path>, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("innoprof-srv-")
            .tempdir_in(parent)
            .unwrap();
        let mut cmd = Command::new(repo_root().join("scripts/servers.sh"));
        if let Some(b) = binary {
            cmd.env("INNOPROF_SERVER_BINARY", b);
        }
        let out = cmd
            .args(["start", name])
            .arg(dir.path())
            .args(extra)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "starting {name} failed");
        let pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("servers.sh prints the pid");
        Self {
            name: name.into(),
            dir,
            pid,
            prepared: false.into(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        }
    }

    pub fn binary(&self) -> PathBuf {
        std::fs::read_link(format!("/proc/{}/exe", self.pid)).unwrap()
    }

    /// Stops the server as an administrator would (SIGTERM, waits for it).
    pub fn stop(&self) {
        let status = Command::new(repo_root().join("scripts/servers.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Starts the stopped server again on the same datadir (a new pid).
    pub fn start_again(&mut self) {
        let out = Command::new(repo_root().join("scripts/servers.sh"))
            .args(["start", &self.name])
            .arg(self.dir.path())
            .args(&self.extra)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "starting {} again failed", self.name);
        self.pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("servers.sh prints the pid");
    }

    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new(repo_root().join("scripts/servers.sh"))
            .args(["client"])
            .arg(self.dir.path())
            .args(["-N", "-e", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "SQL failed: {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A global status counter, e.g. `Innodb_rows_updated`.
    pub fn status(&self, name: &str) -> u64 {
        let out = self.sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"));
        out.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no status {name}: {out:?}"))
    }

    /// The SQL client reading `script` on its stdin, in the background, in
    /// its own process group: `Background` kills client and all on drop.
    pub fn sql_background(&self, script: &str) -> Background {
        let mut cmd = Command::new(repo_root().join("scripts/servers.sh"));
        cmd.args(["client"])
            .arg(self.dir.path())
            .args(["-N", "--silent"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        let mut bg = Background::spawn(cmd);
        let mut stdin = bg.child.stdin.take().unwrap();
        let script = script.to_string();
        // A writer thread: the client may stop reading (killed) at any time.
        std::thread::spawn(move || {
            let _ = stdin.write_all(script.as_bytes());
        });
        bg
    }

    pub fn sysbench(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(repo_root().join("scripts/sysbench.sh"));
        cmd.arg(self.dir.path()).args(args);
        cmd
    }

    /// Runs sysbench to the end; panics with its output if it fails.
    pub fn sysbench_ok(&self, args: &[&str]) -> String {
        let out = self.sysbench(args).output().unwrap();
        assert!(
            out.status.success(),
            "sysbench {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates and fills the sysbench tables, once per server.
    pub fn prepare(&self, test: &str) {
        if !self.prepared.replace(true) {
            let prep = self.sysbench(&["prepare", test]).output().unwrap();
            assert!(
                prep.status.success(),
                "sysbench prepare: {}{}",
                String::from_utf8_lossy(&prep.stdout),
                String::from_utf8_lossy(&prep.stderr)
            );
        }
    }

    /// sysbench in the background for `secs` (tables prepared on first
    /// use); join to get its report.
    pub fn sysbench_load(
        &self,
        test: &str,
        threads: u32,
        secs: u32,
    ) -> std::thread::JoinHandle<String> {
        self.prepare(test);
        let mut cmd = self.sysbench(&[
            "run",
            test,
            &format!("--threads={threads}"),
            &format!("--time={secs}"),
        ]);
        std::thread::spawn(move || {
            let out = cmd.output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr)
        })
    }
}

impl Server {
    /// sysbench with no time limit, reporting every second, until
    /// [`OpenLoad::stop`]: for a load that must cover a scenario of unknown
    /// length.
    pub fn sysbench_open_ended(&self, test: &str, threads: u32, extra: &[&str]) -> OpenLoad {
        self.prepare(test);
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = self
            .sysbench(&[
                "run",
                test,
                &format!("--threads={threads}"),
                "--time=0",
                "--report-interval=1",
            ])
            .args(extra)
            .stdout(log.reopen().unwrap())
            .stderr(Stdio::from(log.reopen().unwrap()))
            .spawn()
            .unwrap();
        OpenLoad { child, log }
    }
}

/// A sysbench run without a time limit (see [`Server::sysbench_open_ended`]).
pub struct OpenLoad {
    child: Child,
    log: tempfile::NamedTempFile,
}

/// What sysbench's per-second reports added up to.
#[derive(Debug)]
pub struct LoadReport {
    /// sysbench exited on its own (a fatal SQL error ends the run).
    pub exited_early: Option<std::process::ExitStatus>,
    pub seconds: u64,
    pub transactions: f64,
    /// `err/s` summed: errors sysbench ignored and retried (by default
    /// deadlocks, lock wait timeouts and 1020; `--mysql-ignore-errors`
    /// sets the list); any other error is fatal and ends the run.
    pub ignored_errors: f64,
    pub reconnects: f64,
    /// `FATAL` lines: a query failed with an error sysbench does not ignore.
    pub error_lines: Vec<String>,
    pub log: String,
}

impl OpenLoad {
    pub fn stop(mut self) -> LoadReport {
        let exited_early = self.child.try_wait().unwrap();
        if exited_early.is_none() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
        }
        let log = std::fs::read_to_string(self.log.path()).unwrap();
        let field = |line: &str, name: &str| -> Option<f64> {
            let rest = line.split(name).nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        };
        let mut report = LoadReport {
            exited_early,
            seconds: 0,
            transactions: 0.0,
            ignored_errors: 0.0,
            reconnects: 0.0,
            error_lines: log
                .lines()
                .filter(|l| l.contains("FATAL"))
                .map(String::from)
                .collect(),
            log: String::new(),
        };
        for line in log
            .lines()
            .filter(|l| l.starts_with('[') && l.contains("tps:"))
        {
            report.seconds += 1;
            report.transactions += field(line, "tps:").unwrap_or(0.0);
            report.ignored_errors += field(line, "err/s:").expect("err/s in sysbench report");
            report.reconnects += field(line, "reconn/s:").expect("reconn/s in sysbench report");
        }
        report.log = log;
        report
    }
}

/// Lines of the tracefs `uprobe_events` file (uprobes created through
/// tracefs). innoprof's uprobes are perf events and never appear there;
/// this proves none leaked into that interface either.
pub fn tracefs_uprobe_events() -> Vec<String> {
    [
        "/sys/kernel/tracing/uprobe_events",
        "/sys/kernel/debug/tracing/uprobe_events",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .expect("tracefs uprobe_events (mount tracefs on /sys/kernel/tracing)")
    .lines()
    .map(String::from)
    .collect()
}

/// A load generator (sysbench, a SQL session) running in its own process
/// group, killed with everything it started when dropped.
pub struct Background {
    pub child: Child,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Self {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn().unwrap();
        Self { child }
    }

    /// Waits for it to exit by itself; returns its stdout.
    pub fn wait_output(mut self) -> String {
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        let _ = self.child.wait();
        out
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the process group we created.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/servers.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// Number after `label` in sysbench's report, e.g. "transactions:".
pub fn sysbench_number(report: &str, label: &str) -> f64 {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split_whitespace().nth(label.split_whitespace().count()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in sysbench output:\n{report}"))
}

/// A loopback TCP port free right now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on a loopback HTTP server: (status, body). HTTP/1.0, so the
/// server closes the connection after the body.
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// Percent-encodes a query-string value (PromQL has spaces, braces, quotes).
pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `innoprof serve` in the background; stderr captured to a file.
pub struct Serve {
    pub child: Child,
    pub port: u16,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `innoprof serve ARGS --listen 127.0.0.1:PORT` on a free port
    /// and waits until it serves. Like `Recording::start`, the governor is
    /// off unless the test passes `--max-overhead`: counts stay exact.
    pub fn start(args: &[&str]) -> Self {
        Self::start_under(&[], args)
    }

    /// As `start`, run through `wrapper` (e.g. `prlimit --nofile=64`).
    pub fn start_under(wrapper: &[&str], args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stderr_path = dir.path().join("stderr.txt");
        let port = free_port();
        let governor: &[&str] = if args.contains(&"--max-overhead") {
            &[]
        } else {
            &["--max-overhead", "off"]
        };
        let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        argv.push(innoprof().to_string_lossy().into_owned());
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .arg("serve")
            .args(args)
            .args(governor)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let mut serve = Self {
            child,
            port,
            stderr_path,
            _dir: dir,
        };
        wait_for_stderr(&mut serve.child, &serve.stderr_path, "serving http://");
        serve
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The /metrics text.
    pub fn scrape(&self) -> String {
        let (status, body) = http_get(self.port, "/metrics").unwrap();
        assert_eq!(status, 200, "{body}");
        body
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits (up to 20 s) for it to exit; its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sample line of a Prometheus exposition.
#[derive(Debug, Clone)]
pub struct MetricSample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl MetricSample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The sample lines of an exposition (comments skipped).
pub fn metric_samples(text: &str) -> Vec<MetricSample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").unwrap();
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap(),
            };
            MetricSample {
                name: name.to_string(),
                labels,
                value,
            }
        })
        .collect()
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

/// `go tool pprof` with `args`, run in `home` (HOME and PPROF_TMPDIR, so
/// nothing is written elsewhere) but with Go's own build cache: Go 1.26
/// builds its pprof tool on first use (~20 s here), which a HOME of its
/// own would repeat at every call.
pub fn go_tool_pprof(home: &Path) -> Command {
    static CACHE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let (go, cache) = CACHE.get_or_init(|| {
        for go in ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"] {
            if let Ok(o) = Command::new(go).args(["env", "GOCACHE"]).output() {
                if o.status.success() {
                    return (
                        go.to_string(),
                        String::from_utf8_lossy(&o.stdout).trim().to_string(),
                    );
                }
            }
        }
        panic!("no Go toolchain: scripts/setup.sh installs golang-go");
    });
    let mut cmd = Command::new(go);
    cmd.args(["tool", "pprof"])
        .current_dir(home)
        .env("GOTOOLCHAIN", "local")
        .env("GOCACHE", cache)
        .env("HOME", home)
        .env("PPROF_TMPDIR", home);
    cmd
}
