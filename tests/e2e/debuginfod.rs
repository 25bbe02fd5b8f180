//! Debug files fetched by build id from Debian's real `debuginfod` daemon
//! (elfutils), run by the test on localhost over the split debug file of a
//! stripped MariaDB 11.4.5: the first recording fetches, checks and keeps
//! it and names the server's frames; the second, the daemon gone, names
//! them from the kept copy; a server that accepts and never answers costs
//! the recording its timeout and no more; a binary without a build id is
//! said to have none and nothing is asked.

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use innoprof::resolve::debuginfo::FoundBy;
use innoprof_e2e::*;

/// `debuginfod -F DIR` serving the debug files in `dir` on a free port,
/// with its database in `work`; killed (this test's child, by its pid)
/// when dropped.
struct Daemon {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Daemon {
    /// Started, and waited for until its scan of `dir` indexed `files`
    /// ELF files (its own /metrics say so).
    fn start(dir: &Path, work: &Path, files: u64) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = work.join("debuginfod.log");
        let child = Command::new("debuginfod")
            .args(["-p", &port.to_string(), "-d"])
            .arg(work.join("debuginfod.sqlite"))
            .arg("-F")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("debuginfod is installed (scripts/setup.sh --tests)");
        let mut daemon = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut metrics = String::new();
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!("debuginfod exited ({status}): {}", daemon.log_text());
            }
            if let Ok(mut r) = ureq::get(format!("{}/metrics", daemon.url)).call() {
                metrics = r.body_mut().read_to_string().unwrap_or_default();
                let scanned = metrics
                    .lines()
                    .find_map(|l| l.strip_prefix("scanned_files_total{source=\"file\"} "))
                    .and_then(|n| n.trim().parse::<u64>().ok());
                if scanned.is_some_and(|n| n >= files) {
                    return daemon;
                }
            }
            assert!(
                Instant::now() < deadline,
                "debuginfod never scanned {files} files: {metrics}\n{}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `original` split as a distribution splits it: the debug file (objcopy
/// --only-keep-debug) in `dir/debug/`, the binary stripped of everything
/// (no debuglink, so only its build id leads to the debug file) in `dir`.
fn split(original: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let name = original.file_name().unwrap().to_str().unwrap();
    std::fs::create_dir_all(dir.join("debug")).unwrap();
    let debug = dir.join("debug").join(format!("{name}.debug"));
    let stripped = dir.join(name);
    for (cmd, args) in [
        (
            "objcopy",
            vec![
                "--only-keep-debug".as_ref(),
                original.as_os_str(),
                debug.as_os_str(),
            ],
        ),
        (
            "strip",
            vec![
                "--strip-all".as_ref(),
                "-o".as_ref(),
                stripped.as_os_str(),
                original.as_os_str(),
            ],
        ),
    ] {
        assert!(
            Command::new(cmd).args(&args).status().unwrap().success(),
            "{cmd}"
        );
    }
    (stripped, debug)
}

fn fetched(name: &str) -> PathBuf {
    let out = Command::new(repo_root().join("scripts/servers.sh"))
        .args(["fetch", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "fetching {name}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Frames of `module` in the bundle's on-CPU stacks: (named, `module+0x…`).
fn module_frames(bundle: &Path, module: &str) -> (u64, u64) {
    let unknown = format!("{module}+0x");
    let text = std::fs::read_to_string(bundle.join("oncpu.folded")).unwrap();
    let (mut named, mut unnamed) = (0, 0);
    for line in text.lines() {
        let stack = line.rsplit_once(' ').map_or(line, |(s, _)| s);
        for frame in stack.split(';') {
            if frame.starts_with(&unknown) {
                unnamed += 1;
            } else if !frame.contains("+0x") && !frame.starts_with('[') {
                named += 1;
            }
        }
    }
    (named, unnamed)
}

/// metadata.json's account of the binary's debug file.
fn metadata_debug(rec: &Recording) -> serde_json::Value {
    let m: serde_json::Value = serde_json::from_str(&rec.file("metadata.json")).unwrap();
    m["binary"]["debug"].clone()
}

#[test]
fn a_stripped_servers_debug_file_comes_from_debuginfod_then_from_the_kept_copy() {
    let _k = kernel_lock();
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (stripped, debug) = split(&fetched("mariadb-11.4.5"), dir.path());
    let daemon = Daemon::start(&dir.path().join("debug"), dir.path(), 1);
    println!("split and scanned in {:.1}s", t.elapsed().as_secs_f64());
    let server = Server::start_binary("mariadb-11.4.5", &stripped);
    assert_eq!(server.binary(), stripped);
    let build_id = innoprof::resolve::ElfImage::open(&stripped)
        .unwrap()
        .build_id
        .expect("MariaDB 11.4.5 has a build id");
    let load = server.sysbench_open_ended("oltp_read_write", 2, &[]);
    let pid = server.pid.to_string();
    // A kept directory of the test's own: the daemon's file lands there,
    // and other tests' recordings never see it.
    let kept = dir.path().join("kept");
    let no_elfutils = dir.path().join("no-elfutils-cache");
    let record = |env: &[(&str, &str)]| {
        let mut env = env.to_vec();
        env.push(("DEBUGINFOD_CACHE_PATH", no_elfutils.to_str().unwrap()));
        let t = Instant::now();
        // CPU stacks only: the debug file names them all the same, and a
        // cold plan of 11.4.5's probes (its kept directory is the test's
        // own, empty) would read its 206 MiB of DWARF (~45 s here).
        let mut rec = Recording::start_env(
            &["--pid", &pid, "--duration", "3s", "--probes", "none"],
            &env,
        );
        rec.wait_attached();
        let attached = t.elapsed();
        let (code, _, rec) = rec.finish();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        println!("{env:?}: attached after {:.1}s", attached.as_secs_f64());
        (rec, attached)
    };
    let url = daemon.url.clone();
    let kept_env = [
        ("INNOPROF_CACHE_DIR", kept.to_str().unwrap()),
        ("DEBUGINFOD_URLS", url.as_str()),
    ];

    // 1. Fetched from the daemon, checked, kept by build id.
    let (first, _) = record(&kept_env);
    let kept_file = kept.join(format!("debuginfod-{build_id}.debug"));
    let origin = first.summary().target.debug_origin;
    assert_eq!(
        origin.found_by,
        Some(FoundBy::Debuginfod),
        "{}",
        first.stderr()
    );
    assert_eq!(origin.url.as_deref(), Some(url.as_str()));
    assert_eq!(origin.path.as_deref(), kept_file.to_str());
    assert_eq!(metadata_debug(&first)["found_by"], "debuginfod");
    assert!(
        first.stderr().contains(&format!(
            "debug file of build id {build_id} fetched from {url}, kept as {}",
            kept_file.display()
        )),
        "{}",
        first.stderr()
    );
    let meta = std::fs::metadata(&kept_file).unwrap();
    assert_eq!(meta.len(), std::fs::metadata(&debug).unwrap().len());
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    assert!(
        daemon
            .log_text()
            .contains(&format!("GET /buildid/{build_id}/debuginfo 200")),
        "{}",
        daemon.log_text()
    );

    // 2. The daemon gone: the kept copy, no network.
    drop(daemon);
    let (second, warm_attach) = record(&kept_env);
    let origin = second.summary().target.debug_origin;
    assert_eq!(origin.found_by, Some(FoundBy::Kept), "{}", second.stderr());
    assert_eq!((origin.url, origin.note), (None, None));
    assert_eq!(metadata_debug(&second)["found_by"], "kept");

    for (what, rec) in [("fetched", &first), ("kept", &second)] {
        let (named, unnamed) = module_frames(&rec.out, "mariadbd");
        println!("{what}: mariadbd frames {named} named, {unnamed} unnamed");
        assert!(
            named > 300 && unnamed * 50 <= named,
            "{what}: {named} named, {unnamed} unnamed"
        );
        assert!(
            rec.file("oncpu.folded").contains(";dispatch_command("),
            "{what}: no dispatch_command frame"
        );
    }

    // 3. A server that accepts and never answers, and nothing kept: the
    // recording waits DEBUGINFOD_TIMEOUT once, then goes on unnamed.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let empty = dir.path().join("kept-empty");
    let (third, silent_attach) = record(&[
        ("INNOPROF_CACHE_DIR", empty.to_str().unwrap()),
        ("DEBUGINFOD_URLS", silent_url.as_str()),
        ("DEBUGINFOD_TIMEOUT", "2"),
    ]);
    load.stop();
    let origin = third.summary().target.debug_origin;
    assert_eq!(origin.found_by, None);
    let note = origin.note.unwrap_or_default();
    assert!(
        note.contains(&format!(
            "no debug file of build id {build_id} from debuginfod: {silent_url}: "
        )) && note.contains("timed out")
            && !note.contains('\n'),
        "{note}"
    );
    assert!(third.stderr().contains(&note), "{}", third.stderr());
    assert_eq!(metadata_debug(&third)["note"], note.as_str());
    let (named, unnamed) = module_frames(&third.out, "mariadbd");
    assert!(
        unnamed > 100,
        "without the debug file: {named} named, {unnamed} unnamed"
    );
    // The second recording read the whole DWARF (warm) and waited on no
    // network; this one reads none and waits the timeout: attached within
    // the timeout of it (and slack for a busy 2-core machine).
    assert!(
        silent_attach >= Duration::from_secs(2)
            && silent_attach < warm_attach + Duration::from_secs(2 + 8),
        "attached after {silent_attach:?} (warm, with the debug file: {warm_attach:?})"
    );
    assert!(!empty.join(format!("debuginfod-{build_id}.debug")).exists());
    drop(silent);
}

/// MariaDB 10.2.11 was linked without a build id: a stripped copy has
/// nothing debuginfod could be asked by. `probes` says so in one line and
/// asks nothing (the URL given never sees a connection).
#[test]
fn a_binary_without_a_build_id_is_said_to_have_none_and_nothing_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (stripped, _) = split(&fetched("mariadb-10.2.11"), dir.path());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let out = Command::new(innoprof())
        .args(["probes", "--binary"])
        .arg(&stripped)
        .env("DEBUGINFOD_URLS", &url)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains(&format!(
            "{} has no build id (NT_GNU_BUILD_ID): debuginfod not asked; give --debuginfo PATH",
            stripped.display()
        )),
        "{text}"
    );
    let mut nothing = [0u8; 1];
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((mut c, _)) => panic!("innoprof connected: {:?}", c.read(&mut nothing)),
        Err(e) => panic!("{e}"),
    }
}
