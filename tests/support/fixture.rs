//! The C++ fixtures of tests/fixture: compiled once per test process,
//! run with known behaviour, and catalogs that probe them.

use crate::repo_root;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

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
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let Fixture {
            child,
            pid,
            stdin,
            stdout,
        } = Fixture::spawn_with(&paced_binary(), &args);
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
        assert!(
            i > 0 && i < log.len(),
            "{t_ms} outside the fixture's log ({:?} to {:?})",
            log.first(),
            log.last()
        );
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

/// Compiles tests/fixture/SOURCE once per version of its source and flags,
/// into the build's own directory (target/debug/fixtures), not /tmp: a
/// directory per test process there was never removed (hundreds piled up),
/// and a predictable name in a world-writable directory is not ours to
/// trust. Tests run in parallel, in several processes: the lock, the
/// per-process temporary name and the rename keep any of them from seeing a
/// half-written binary.
fn compile_fixture(source: &str, name: &str, flags: &[&str]) -> PathBuf {
    use std::hash::{Hash, Hasher};
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = repo_root().join("tests/fixture").join(source);
    let mut key = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(&src).unwrap().hash(&mut key);
    flags.hash(&mut key);
    // target/debug/deps/TEST-HASH -> target/debug/fixtures
    let exe = std::env::current_exe().unwrap();
    // The binary keeps its own name: tests assert it as the module's.
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("fixtures")
        .join(format!("{name}-{:016x}", key.finish()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join(name);
    if !bin.exists() {
        let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
        let status = Command::new("g++")
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
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
    pub fn spawn_with<S: AsRef<std::ffi::OsStr>>(binary: &Path, args: &[S]) -> Self {
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
