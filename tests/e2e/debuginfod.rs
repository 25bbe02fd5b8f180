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

/// A debug file with `build_id`, a plain `.debug_info`, and the
/// `SHF_COMPRESSED` sections `compressed`: (name, the Elf64_Chdr's
/// ch_size, the zlib bytes after it). Built with `object`'s writer.
fn bomb(build_id: &[u8], compressed: &[(String, u64, Vec<u8>)]) -> Vec<u8> {
    use object::write::Object;
    use object::{Architecture, BinaryFormat, Endianness, SectionKind};
    let mut obj = Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let mut note = Vec::new();
    for word in [4, build_id.len() as u32, object::elf::NT_GNU_BUILD_ID] {
        note.extend_from_slice(&word.to_le_bytes());
    }
    note.extend_from_slice(b"GNU\0");
    note.extend_from_slice(build_id);
    note.resize(note.len().div_ceil(4) * 4, 0);
    let s = obj.add_section(
        Vec::new(),
        b".note.gnu.build-id".to_vec(),
        SectionKind::Note,
    );
    obj.append_section_data(s, &note, 4);
    let s = obj.add_section(Vec::new(), b".debug_info".to_vec(), SectionKind::Debug);
    obj.append_section_data(s, &[1, 2, 3, 4], 1);
    for (name, claim, zlib) in compressed {
        let s = obj.add_section(Vec::new(), name.as_bytes().to_vec(), SectionKind::Debug);
        let mut data = Vec::new();
        data.extend_from_slice(&object::elf::ELFCOMPRESS_ZLIB.to_le_bytes());
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&claim.to_le_bytes());
        data.extend_from_slice(&1u64.to_le_bytes());
        data.extend_from_slice(zlib);
        obj.append_section_data(s, &data, 1);
        obj.section_mut(s).flags = object::SectionFlags::Elf {
            sh_flags: u64::from(object::elf::SHF_COMPRESSED),
        };
    }
    obj.write().unwrap()
}

/// A zlib stream of `n` zero bytes (~1000:1).
fn zlib_zeros(n: usize) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..n / chunk.len() {
        z.write_all(&chunk).unwrap();
    }
    z.write_all(&chunk[..n % chunk.len()]).unwrap();
    z.finish().unwrap()
}

/// Serves `body` as every answer, on a free port, until the test ends;
/// the URL.
fn serve_file(body: Vec<u8>) -> String {
    use std::io::{BufRead, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = std::sync::Arc::new(body);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let body = body.clone();
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
            });
        }
    });
    url
}

/// Records the spin fixture run from `binary` (CPU stacks, named from
/// its debug file), with `env`: the recording, and innoprof's peak RSS in
/// KiB from the kernel's accounting of that one child (`wait4`).
fn record_spin(binary: &Path, env: &[(&str, &str)]) -> (Recording, u64) {
    let args: Vec<String> = ["hot", "1", "1000", "10", "20"].map(String::from).to_vec();
    let mut fx = Fixture::spawn_with(binary, &args);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start_env(
        &[
            "--pid",
            &pid,
            "--force",
            "--probes",
            "none",
            "--duration",
            "1s",
        ],
        env,
    );
    rec.wait_attached();
    fx.run_calls();
    let mut stdout = String::new();
    std::io::Read::read_to_string(rec.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(rec.child.id() as i32, &mut status, 0, &mut usage) };
    fx.exit();
    assert_eq!(waited, rec.child.id() as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "innoprof: {status:#x} {}",
        rec.stderr()
    );
    check_bundle(&rec.out);
    (rec, usage.ru_maxrss as u64)
}

/// innoprof's peak RSS recording the spin fixture with its debug file:
/// ~17 MiB (debug build). The bombs' claims are 256 MiB to 1 TiB: a
/// bound far under any of them, with room for noise.
const BOMB_PEAK_KIB: u64 = 64 << 10;

/// A debuginfod server answers with each shape of decompression bomb
/// for the spin fixture's build id: a ratio bomb (256 MiB of zeros,
/// claimed), a stream inflating far past a 1 MiB claim, a 1 TiB claim in
/// a tiny file, and 3,000 sections claiming 1 MiB each. Each recording
/// stays under a small peak RSS, says why in one line, writes a complete
/// bundle and keeps nothing; a bomb an earlier build kept is refused,
/// said and removed, and the run after it is clean. The real debug file,
/// zlib-compressed as distributions ship them, passes and names frames.
#[test]
fn decompression_bombs_from_a_server_or_the_kept_directory_cost_nothing() {
    let _k = kernel_lock();
    let work = tempfile::tempdir().unwrap();
    let original = spin_binary();
    let stripped = work.path().join("spin");
    let debug = work.path().join("spin.debug");
    for args in [
        vec!["--only-keep-debug", "--compress-debug-sections=zlib"],
        vec!["--strip-all"],
    ] {
        let out = if args[0] == "--strip-all" {
            &stripped
        } else {
            &debug
        };
        let status = Command::new("objcopy")
            .args(&args)
            .arg(&original)
            .arg(out)
            .status()
            .unwrap();
        assert!(status.success(), "objcopy {args:?}");
    }
    let image = innoprof::resolve::ElfImage::open(&stripped).unwrap();
    let build_id = image
        .build_id
        .clone()
        .expect("the spin fixture has a build id");
    let id_bytes: Vec<u8> = (0..build_id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&build_id[i..i + 2], 16).unwrap())
        .collect();
    let kept = work.path().join("kept");
    let kept_file = kept.join(format!("debuginfod-{build_id}.debug"));
    let no_elfutils = work.path().join("no-elfutils-cache");
    let env = |url: &str| {
        vec![
            ("INNOPROF_CACHE_DIR", kept.to_str().unwrap().to_string()),
            (
                "INNOPROF_RUN_DIR",
                work.path().join("run").to_str().unwrap().to_string(),
            ),
            (
                "DEBUGINFOD_CACHE_PATH",
                no_elfutils.to_str().unwrap().to_string(),
            ),
            ("DEBUGINFOD_URLS", url.to_string()),
        ]
    };
    let record = |url: &str| {
        let env = env(url);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        record_spin(&stripped, &env)
    };

    // The real, compressed debug file passes and names the hot function.
    let real = serve_file(std::fs::read(&debug).unwrap());
    let (rec, real_peak) = record(&real);
    let origin = rec.summary().target.debug_origin;
    assert_eq!(
        origin.found_by,
        Some(FoundBy::Debuginfod),
        "{}",
        rec.stderr()
    );
    assert!(rec.file("oncpu.folded").contains("spin_hot"));
    std::fs::remove_file(&kept_file).unwrap();
    println!("the real debug file: peak {real_peak} KiB");

    let zeros = zlib_zeros(256 << 20);
    let tiny = zlib_zeros(64);
    let shapes = [
        (
            "ratio",
            vec![(".debug_str".to_string(), 256 << 20, zeros.clone())],
        ),
        (
            "past its claim",
            vec![(".debug_str".to_string(), 1 << 20, zeros)],
        ),
        (
            "1 TiB claim",
            vec![(".debug_str".to_string(), 1 << 40, tiny.clone())],
        ),
        (
            "many sections",
            (0..3000)
                .map(|i| (format!(".debug_x{i}"), 1 << 20, tiny.clone()))
                .collect(),
        ),
    ];
    let mut one_tib = Vec::new();
    for (what, sections) in shapes {
        let file = bomb(&id_bytes, &sections);
        if what == "1 TiB claim" {
            one_tib = file.clone();
        }
        let len = file.len();
        let url = serve_file(file);
        let (rec, peak) = record(&url);
        println!("{what} ({len} bytes): peak {peak} KiB");
        let note = rec.summary().target.debug_origin.note.unwrap_or_default();
        assert!(
            note.starts_with(&format!(
                "no debug file of build id {build_id} from debuginfod: {url}: "
            )) && note.contains("claim")
                && note.ends_with("; not used")
                && !note.contains('\n'),
            "{what}: {note}"
        );
        assert!(rec.stderr().contains(&note), "{what}: {}", rec.stderr());
        assert!(peak < BOMB_PEAK_KIB, "{what}: peak RSS {peak} KiB");
        assert!(!kept_file.exists(), "{what}: kept");
    }

    // A bomb kept by an earlier build (root's file in root's directory),
    // no server asked: refused, said, removed; the next run is clean.
    std::fs::write(&kept_file, &one_tib).unwrap();
    std::fs::set_permissions(
        &kept_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let (rec, peak) = record("");
    let note = rec.summary().target.debug_origin.note.unwrap_or_default();
    assert_eq!(
        note,
        format!(
            "no debug file of build id {build_id} from debuginfod: kept {}: section .debug_str \
             claims 1099511627776 bytes inflated, more than the 1073741824 a section may; removed",
            kept_file.display()
        )
    );
    assert!(peak < BOMB_PEAK_KIB, "kept bomb: peak RSS {peak} KiB");
    assert!(!kept_file.exists());
    let (rec, _) = record("");
    let origin = rec.summary().target.debug_origin;
    assert_eq!(
        (origin.found_by, origin.note),
        (None, None),
        "{}",
        rec.stderr()
    );
}
