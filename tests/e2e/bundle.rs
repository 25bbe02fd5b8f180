//! The incident bundle written by `record`: the directory and its tarball,
//! metadata, histogram files, `innoprof report DIR`, pprof files read by
//! the real `go tool pprof`, and report.html rendered by a real headless
//! Chromium.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use innoprof::model::summary::Summary;
use innoprof::plan::catalog::Measure;
use innoprof::resolve::EntryInsn;
use innoprof_e2e::*;

const A: u64 = 1000;
const B: u64 = 500;
const SLEEPS: u64 = 3;
const SLEEP_MS: u64 = 20;
const ENTERS: u64 = 7;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn tarball_of(out: &Path) -> PathBuf {
    out.with_file_name(format!(
        "{}.tar.gz",
        out.file_name().unwrap().to_str().unwrap()
    ))
}

/// The bundle directory and its tarball agree byte for byte, nothing is
/// world-readable, no temporary directory is left beside them.
fn assert_bundle_complete(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let name = out.file_name().unwrap().to_str().unwrap();
    assert_eq!(mode(out), 0o750, "bundle directory mode");
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(out).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file(), "{:?}", e.path());
        assert_eq!(mode(&e.path()), 0o640, "{:?}", e.path());
        files.insert(
            e.file_name().into_string().unwrap(),
            std::fs::read(e.path()).unwrap(),
        );
    }
    let tarball = tarball_of(out);
    assert_eq!(mode(&tarball), 0o640, "tarball mode");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&tarball).unwrap(),
    ));
    let mut in_tar = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_str().unwrap().to_string();
        if path == format!("{name}/") {
            assert_eq!(entry.header().mode().unwrap(), 0o750);
            continue;
        }
        let file = path
            .strip_prefix(&format!("{name}/"))
            .unwrap_or_else(|| panic!("{path} outside {name}/"))
            .to_string();
        assert_eq!(entry.header().mode().unwrap(), 0o640, "{path}");
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        in_tar.insert(file, bytes);
    }
    assert_eq!(
        in_tar.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>()
    );
    assert!(
        in_tar == files,
        "tarball contents differ from the directory"
    );
    let leftovers: Vec<String> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("innoprof-tmp") || n.ends_with("tmp~"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    for f in [
        "summary.json",
        "summary.txt",
        "metadata.json",
        "histograms.json",
        "histograms.csv",
        "report.html",
    ] {
        assert!(files.contains_key(f), "{f} missing: {:?}", files.keys());
    }
    files
}

/// `innoprof report DIR` rebuilds the same summary.txt and report.html from
/// summary.json and the other files; summary.json round-trips through the
/// Summary model unchanged.
fn assert_report_rerenders(out: &Path) {
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let parsed: Summary = serde_json::from_str(&json).unwrap();
    assert_eq!(
        serde_json::to_value(&parsed).unwrap(),
        serde_json::from_str::<serde_json::Value>(&json).unwrap(),
        "summary.json round-trips"
    );
    let txt = std::fs::read(out.join("summary.txt")).unwrap();
    let html = std::fs::read(out.join("report.html")).unwrap();
    std::fs::remove_file(out.join("summary.txt")).unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    let r = run_innoprof(&["report", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(out.join("summary.txt")).unwrap()),
        String::from_utf8_lossy(&txt)
    );
    assert!(
        std::fs::read(out.join("report.html")).unwrap() == html,
        "report.html differs after `innoprof report`"
    );
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&txt)
    );
    assert_eq!(mode(&out.join("report.html")), 0o640);
}

/// `go tool pprof -top` of a profile: (function, flat) rows, largest
/// first. pprof marks a function inlined at a location `(inline)`; rows of
/// one name (functions of several source files) are summed.
fn pprof_top(file: &Path, sample_index: &str) -> Vec<(String, i64)> {
    let text = pprof_text(file, &["-top", &format!("-sample_index={sample_index}")]);
    let mut rows: HashMap<String, i64> = HashMap::new();
    for l in text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
    {
        let cols: Vec<&str> = l.split_whitespace().collect();
        let flat: i64 = cols[0]
            .parse()
            .unwrap_or_else(|_| panic!("flat value in {l:?}"));
        let name = cols[5..].join(" ");
        let name = name.strip_suffix(" (inline)").unwrap_or(&name).to_string();
        *rows.entry(name).or_default() += flat;
    }
    assert!(!rows.is_empty(), "{text}");
    let mut rows: Vec<(String, i64)> = rows.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// What `go tool pprof ARGS FILE` prints, all nodes kept, no symbolizing.
fn pprof_text(file: &Path, args: &[&str]) -> String {
    let cwd = tempfile::tempdir().unwrap();
    let out = go_tool_pprof(cwd.path())
        .args([
            "-symbolize=none",
            "-nodecount=1000000",
            "-nodefraction=0",
            "-edgefraction=0",
        ])
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "pprof failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Leaf frame totals of folded stacks (what pprof calls flat), by function
/// name as pprof shows it (no folded `[inlined]` or `_[k]` marks).
fn folded_leaves(texts: &[&str]) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    for text in texts {
        for l in text.lines() {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            let leaf = stack.rsplit(';').next().unwrap();
            let leaf = leaf.strip_suffix(" [inlined]").unwrap_or(leaf);
            let leaf = leaf.strip_suffix("_[k]").unwrap_or(leaf);
            *out.entry(leaf.to_string()).or_default() += n.parse::<i64>().unwrap();
        }
    }
    out
}

/// A profile of an unstripped server as pprof expects one: the server's
/// mapping names its file (and build id, where it has one; libc's has)
/// and says it carries functions,
/// files, lines and inline frames; `-lines` shows file:line for its
/// frames; every sample has its thread's name.
fn assert_pprof_located(file: &Path, summary: &Summary) {
    let raw = pprof_text(file, &["-raw"]);
    let mappings: Vec<&str> = raw
        .lines()
        .skip_while(|l| !l.starts_with("Mappings"))
        .collect();
    let binary = &summary.target.binary;
    let mapping = mappings
        .iter()
        .find(|l| l.contains(&format!(" {binary} ")))
        .unwrap_or_else(|| panic!("no mapping of {binary}:\n{raw}"));
    // MariaDB 10.2.11's tarball has no build id; Debian's libc has one.
    if let Some(id) = summary.target.build_id.as_deref() {
        assert!(mapping.contains(id), "{id} in {mapping}");
    }
    let libc = mappings
        .iter()
        .find(|l| l.contains("libc.so"))
        .unwrap_or_else(|| panic!("no libc mapping:\n{raw}"));
    let build_id = libc.split_whitespace().nth(3).unwrap_or_default();
    assert!(
        build_id.len() >= 32 && build_id.chars().all(|c| c.is_ascii_hexdigit()),
        "libc's build id: {libc}"
    );
    for flag in ["[FN]", "[FL]", "[LN]", "[IN]"] {
        assert!(mapping.contains(flag), "{flag} in {mapping}");
    }
    let lines = pprof_text(file, &["-top", "-lines"]);
    // The server's own frames (C++: libc's are C) with their source lines.
    let located = lines
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .filter(|l| {
            l.split_whitespace().last().is_some_and(|w| {
                w.rsplit_once(':').is_some_and(|(path, line)| {
                    path.ends_with(".cc") && line.parse::<u32>().is_ok_and(|n| n > 0)
                })
            })
        })
        .count();
    assert!(
        located >= 5,
        "server rows with file.cc:line: {located}\n{lines}"
    );
    let tags = pprof_text(file, &["-tags"]);
    assert!(
        tags.lines().any(|l| l.trim_start().starts_with("thread:")),
        "no thread label: {tags}"
    );
}

fn assert_pprof_matches_folded(file: &Path, sample_index: &str, folded: &[&str]) {
    let top = pprof_top(file, sample_index);
    let leaves = folded_leaves(folded);
    let mut expected: Vec<i64> = leaves.values().copied().collect();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    let n = expected.len().min(10);
    let got: Vec<i64> = top.iter().take(n).map(|r| r.1).collect();
    assert_eq!(got, expected[..n], "{file:?}: top flats\n{top:#?}");
    for (name, flat) in top.iter().take(n) {
        assert_eq!(leaves.get(name), Some(flat), "{file:?}: {name}");
    }
}

#[test]
fn fixture_bundle_metadata_histograms_pprof_and_replace() {
    let _k = kernel_lock();
    let bin = fixture_binary(true);
    let mut fx = Fixture::spawn(&bin, [A, B, SLEEPS, SLEEP_MS, ENTERS]);
    let pid = fx.pid.to_string();
    let args = [
        "--pid",
        &pid,
        "--force",
        "--duration",
        "3s",
        "--probe",
        "fixture_counted",
        "--probe",
        "fixture_sleep",
        "--probe",
        "PolicyMutex<*>::enter",
    ];
    let mut rec = Recording::start(&args);
    rec.wait_attached();
    fx.run_calls();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());
    assert!(
        rec.stderr().contains("report.html"),
        "names the page: {}",
        rec.stderr()
    );
    let files = assert_bundle_complete(&rec.out);
    let s = rec.summary();

    // metadata.json
    let m: serde_json::Value = serde_json::from_slice(&files["metadata.json"]).unwrap();
    let proc = |p: &str| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert_eq!(m["host"]["hostname"], proc("/proc/sys/kernel/hostname"));
    assert_eq!(m["host"]["kernel"], proc("/proc/sys/kernel/osrelease"));
    assert_eq!(m["pid"].as_u64(), Some(fx.pid as u64));
    assert_eq!(m["binary"]["path"], s.target.binary.as_str());
    assert_eq!(
        m["binary"]["build_id"].as_str(),
        s.target.build_id.as_deref()
    );
    assert!(m["binary"]["build_id"].as_str().unwrap().len() >= 16);
    assert_eq!(m["server"]["family"], "unknown");
    let cmd: Vec<&str> = m["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(cmd[1], "record");
    assert_eq!(&cmd[2..2 + args.len()], &args[..]);
    let (start, end) = (
        m["started_unix_ms"].as_u64().unwrap(),
        m["ended_unix_ms"].as_u64().unwrap(),
    );
    assert!((2_900..4_000).contains(&(end - start)), "{start}..{end}");
    assert_eq!(
        (m["complete"].as_bool(), &m["end_reason"]),
        (Some(true), &"duration".into())
    );
    assert_eq!(
        m["probes"]["attached"],
        serde_json::json!(["fixture_counted", "fixture_sleep", "PolicyMutex<*>::enter"])
    );
    assert_eq!(m["probes"]["unresolved"], serde_json::json!([]));
    assert!(m["probes"]["sampled"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["attached_fraction"] == 1.0));
    // Overhead: hits x (the trap calibrated at start, by each symbol's
    // entry instruction and the probe's measure + the BPF programs' run
    // time the kernel measured in the target), so at least hits x trap.
    let cost = &s.overhead.hit_cost;
    let mut trap_ns = 0.0;
    for p in &s.probes {
        let timed = p.measure == Measure::Latency;
        for sym in &p.symbols {
            let emulated = matches!(sym.entry, EntryInsn::Push | EntryInsn::Nop);
            let (hit, bpf) = match (timed, emulated) {
                (true, true) => (cost.latency_emulated_ns, cost.bpf_latency_ns),
                (true, false) => (cost.latency_stepped_ns, cost.bpf_latency_ns),
                (false, true) => (cost.count_emulated_ns, cost.bpf_count_ns),
                (false, false) => (cost.count_stepped_ns, cost.bpf_count_ns),
            };
            trap_ns += sym.calls as f64 * (hit - bpf).max(0.0);
        }
    }
    assert!(trap_ns > 0.0);
    assert_eq!(m["overhead"]["calibrated"], true);
    let total = m["overhead"]["total_ns"].as_f64().unwrap();
    let per_probe: f64 = m["overhead"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["estimated_ns"].as_f64().unwrap())
        .sum();
    assert_eq!(total, per_probe);
    assert!(total >= trap_ns * 0.999, "{total} vs trap alone {trap_ns}");
    // The BPF part is what the kernel measured, and it is in the summary.
    assert!(s.overhead.bpf_pct_of_core.unwrap() > 0.0);
    assert_eq!(m["dropped"]["stack_lost_calls"].as_u64(), Some(0));
    let listed: Vec<&str> = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(listed, files.keys().map(String::as_str).collect::<Vec<_>>());

    // histograms.csv: every 20 ms sleep in [2^24, 2^25) ns; all calls counted.
    let csv = String::from_utf8(files["histograms.csv"].clone()).unwrap();
    assert_eq!(csv.lines().next(), Some("probe,low_ns,high_ns,count"));
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let sleep_rows: Vec<_> = rows.iter().filter(|r| r[0] == "fixture_sleep").collect();
    assert_eq!(
        sleep_rows,
        [&vec!["fixture_sleep", "16777216", "33554432", "3"]]
    );
    let total = |probe: &str| -> u64 {
        rows.iter()
            .filter(|r| r[0] == probe)
            .map(|r| r[3].parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(total("fixture_counted"), A + B);
    assert_eq!(total("PolicyMutex<*>::enter"), ENTERS);
    let hj: serde_json::Value = serde_json::from_slice(&files["histograms.json"]).unwrap();
    for h in hj["probes"].as_array().unwrap() {
        let p = probe(&s, h["probe"].as_str().unwrap());
        assert_eq!(h["buckets"], serde_json::to_value(&p.histogram).unwrap());
        assert_eq!(h["calls"].as_u64(), Some(p.calls));
    }

    // waits.pb.gz through the real pprof: exact call counts per leaf.
    let folded: Vec<String> = ["fixture_counted", "fixture_sleep", "PolicyMutex_____enter"]
        .iter()
        .map(|p| rec.file(&format!("{p}.count.folded")))
        .collect();
    let folded: Vec<&str> = folded.iter().map(String::as_str).collect();
    assert_pprof_matches_folded(&rec.out.join("waits.pb.gz"), "calls", &folded);
    let top = pprof_top(&rec.out.join("waits.pb.gz"), "calls");
    assert_eq!(top[0], ("fixture_counted".to_string(), (A + B) as i64));

    assert_report_rerenders(&rec.out);

    // A second recording into the same directory replaces the first
    // (its files gone, not mixed in).
    let out = rec.out.clone();
    let second = Command::new(innoprof())
        .args(["record", "--pid", &pid, "--force", "--duration", "1s"])
        .args(["--probe", "fixture_sleep", "--no-stacks", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let files = assert_bundle_complete(&out);
    assert!(
        !files.contains_key("fixture_counted.count.folded"),
        "{:?}",
        files.keys()
    );
    let m: serde_json::Value = serde_json::from_slice(&files["metadata.json"]).unwrap();
    assert_eq!(
        m["probes"]["attached"],
        serde_json::json!(["fixture_sleep"])
    );

    // A directory holding anything else is refused before attaching.
    let foreign = tempfile::tempdir().unwrap();
    std::fs::write(foreign.path().join("notes.txt"), "mine").unwrap();
    let refused = run_innoprof(&[
        "record",
        "--pid",
        &pid,
        "--force",
        "--duration",
        "1s",
        "--probe",
        "fixture_sleep",
        "--out",
        foreign.path().to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not an earlier innoprof recording") && !err.contains("attached"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(foreign.path().join("notes.txt")).unwrap(),
        "mine"
    );
    fx.exit();
}

/// Every `http://`/`https://` in the page is an SVG, XLink or XHTML
/// namespace name in an `xmlns` attribute (a name, never fetched); quotes
/// may be escaped inside an iframe's srcdoc. Nothing else may name a URL.
fn assert_no_external_urls(html: &str) {
    const NAMESPACES: [&str; 3] = [
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
        "http://www.w3.org/1999/xhtml",
    ];
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(i) = lower[at..].find("http").map(|i| i + at) {
        at = i + 4;
        let rest = &lower[i..];
        if !(rest.starts_with("http://") || rest.starts_with("https://")) {
            continue;
        }
        let before = &html[..i];
        let quoted = ["=\"", "=&quot;"]
            .iter()
            .find(|q| before.ends_with(*q))
            .map(|q| &before[..before.len() - q.len()]);
        let attr_ok = quoted.is_some_and(|b| {
            let attr = b.rsplit(|c: char| c.is_whitespace()).next().unwrap_or("");
            attr == "xmlns" || attr.starts_with("xmlns:")
        });
        let ns = NAMESPACES.iter().find(|n| html[i..].starts_with(*n));
        let closed = ns.is_some_and(|n| {
            let after = &html[i + n.len()..];
            after.starts_with('"') || after.starts_with("&quot;")
        });
        assert!(
            attr_ok && closed,
            "URL in report.html: …{}…",
            &html[i.saturating_sub(60)..(i + 80).min(html.len())]
        );
    }
    for fetcher in ["<link", "@import", " src=", "url(http", "url(//"] {
        assert!(!lower.contains(fetcher), "report.html contains {fetcher}");
    }
}

fn chromium(args: &[&str], url: &str) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,3000",
            // Let every flame graph's frame load and run its script first.
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium (scripts/setup.sh installs Debian's chromium)")
}

/// RGB pixels of a PNG (8-bit RGB or RGBA, as Chromium writes).
fn pixels(png_path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let px = buf[..info.buffer_size()]
        .chunks(step)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (info.width, info.height, px)
}

/// metadata.json's `host` says what /proc and /sys say of this machine and
/// of the server's datadir (its working directory), read here independently.
fn assert_host_described(h: &serde_json::Value, pid: u32) {
    use std::os::unix::fs::MetadataExt;
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert_eq!(
        h["memory"]["total_bytes"].as_u64(),
        Some(total_kib * 1024),
        "{h}"
    );
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count() as u64;
    assert_eq!(h["cpu"]["logical"].as_u64(), Some(cpus), "{h}");
    let clock =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap();
    assert_eq!(h["clock_source"].as_str(), Some(clock.trim()), "{h}");
    for when in ["load_at_start", "load_at_end"] {
        assert!(h[when]["threads"].as_u64().unwrap() > 0, "{when}: {h}");
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    let dev = std::fs::metadata(&cwd).unwrap().dev();
    let d = &h["datadir"];
    assert_eq!(d["path"].as_str(), Some(cwd.to_str().unwrap()), "{h}");
    assert_eq!(
        d["device"].as_str(),
        Some(format!("{}:{}", libc::major(dev), libc::minor(dev)).as_str()),
        "{h}"
    );
    let mount_point = d["mount_point"].as_str().expect("the datadir's mount");
    assert!(cwd.starts_with(mount_point), "{h}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let fs_type = d["fs_type"].as_str().unwrap();
    assert!(
        mounts.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.get(1) == Some(&mount_point) && f.get(2) == Some(&fs_type)
        }),
        "{mount_point} {fs_type} not in /proc/self/mounts"
    );
}

#[test]
fn mariadb_bundle_pprof_report_and_browser() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    // Open-ended: the load must outlast the attach, which a cold plan
    // (the first run of a new build) made longer than a timed run.
    let load = server.sysbench_open_ended("oltp_read_write", 4, &[]);
    let pid = server.pid.to_string();
    let mut rec = Recording::start(&["--pid", &pid, "--duration", "6s", "--probes", "default"]);
    rec.wait_attached();
    let (code, _, rec) = rec.finish();
    let report = load.stop();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    assert!(report.transactions > 100.0, "{}", report.log);
    let files = assert_bundle_complete(&rec.out);
    let s = rec.summary();
    assert_eq!(s.target.server_version.as_deref(), Some("10.2.11"));
    let m: serde_json::Value = serde_json::from_slice(&files["metadata.json"]).unwrap();
    assert_eq!(m["server"]["family"], "mariadb");
    assert_eq!(m["server_version"], "10.2.11");
    assert!(m["overhead"]["total_ns"].as_u64().unwrap() > 0);
    assert_host_described(&m["host"], server.pid);

    // The Summary model round-trips a real recording.
    assert_report_rerenders(&rec.out);

    // cpu.pb.gz and waits.pb.gz through the real pprof.
    let oncpu = rec.file("oncpu.folded");
    assert_pprof_matches_folded(&rec.out.join("cpu.pb.gz"), "samples", &[&oncpu]);
    assert_pprof_located(&rec.out.join("cpu.pb.gz"), &s);
    let waits: Vec<String> = s
        .probes
        .iter()
        .filter_map(|p| p.stacks.folded_by_count.as_deref())
        .map(|f| rec.file(f))
        .collect();
    assert!(
        !waits.is_empty(),
        "default probes caught no wait under sysbench"
    );
    let waits: Vec<&str> = waits.iter().map(String::as_str).collect();
    assert_pprof_matches_folded(&rec.out.join("waits.pb.gz"), "calls", &waits);

    // report.html: self-contained, charts and flame graphs, rendered.
    let html = String::from_utf8(files["report.html"].clone()).unwrap();
    assert_no_external_urls(&html);
    assert!(
        html.contains("<h2 id=\"host\">Host</h2>"),
        "no Host section"
    );
    let timed = s
        .probes
        .iter()
        .filter(|p| {
            p.status == ProbeStatus::Attached && p.measure == Measure::Latency && p.calls > 0
        })
        .count();
    assert!(timed > 0);
    let url = format!("file://{}", rec.out.join("report.html").display());
    let dom = chromium(&["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert_eq!(
        dom.matches("<svg class=\"chart histogram\"").count(),
        timed,
        "one histogram per timed probe"
    );
    assert!(dom.contains("<rect"), "histogram bars");
    let iframes: Vec<&str> = dom.split("<iframe class=\"flamegraph\"").skip(1).collect();
    assert!(
        iframes[0].contains("on-CPU") && iframes[0].contains("srcdoc=\"&lt;!DOCTYPE html&gt;"),
        "on-CPU flame graph first"
    );
    assert!(dom.contains("Top symbols") && dom.contains("Top call sites"));

    let artefacts = repo_root().join("target/test-artefacts");
    std::fs::create_dir_all(&artefacts).unwrap();
    let shot = artefacts.join("report-mariadb-10.2.11.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&[&format!("--screenshot={}", shot.display())], &url);
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (w, h, px) = pixels(&shot);
    assert_eq!((w, h), (1400, 3000));
    let non_white = px.iter().filter(|p| p.iter().any(|&c| c < 240)).count();
    // Histogram bars (charts::BAR_COLOUR #4e79a7) and flame-graph frames
    // (inferno's hot palette: red to yellow, little blue).
    let bars = px
        .iter()
        .filter(|p| {
            p.iter()
                .zip([0x4e, 0x79, 0xa7])
                .all(|(a, b)| a.abs_diff(b) <= 8)
        })
        .count();
    let flames = px
        .iter()
        .filter(|p| p[0] >= 200 && p[1] <= 235 && p[2] <= 60)
        .count();
    eprintln!(
        "screenshot {shot:?}: {non_white} non-white, {bars} bar, {flames} flame pixels of {}",
        px.len()
    );
    assert!(
        non_white > px.len() / 20,
        "page looks blank: {non_white} non-white pixels"
    );
    assert!(bars > 1_000, "histogram bars not drawn: {bars}");
    assert!(flames > 10_000, "flame graph not drawn: {flames}");
}

#[test]
fn report_of_a_directory_without_a_recording_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_innoprof(&["report", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("holds no innoprof recording (no summary.json)") && err.lines().count() == 1,
        "{err}"
    );
}

/// `record --follow` across a restart of MariaDB 10.2.11: one bundle of two
/// segments (the old pid, then the new one), the gap between them marked
/// in summary.json and the table, sql.commit counting both loads'
/// transactions, its rate over the seconds watched (nothing projected over
/// the gap), and the bundle complete (CPU profile and pprof included).
#[test]
fn record_follow_spans_a_restart_in_one_bundle() {
    let _k = kernel_lock();
    let mut server = Server::start("mariadb-10.2.11", &[]);
    let first_pid = server.pid;
    let pid = first_pid.to_string();
    let mut rec = Recording::start(&["--pid", &pid, "--duration", "20s", "--follow"]);
    rec.wait_attached();
    let txns = |report: String| sysbench_number(&report, "transactions:") as u64;
    let first = txns(
        server
            .sysbench_load("oltp_read_write", 2, 3)
            .join()
            .unwrap(),
    );
    server.stop();
    rec.wait_stderr("--follow: waiting for the server in");
    server.start_again();
    assert_ne!(server.pid, first_pid);
    rec.wait_stderr(&format!("is back as pid {}", server.pid));
    // The new segment's probes are on once it says so (its ready line went
    // with the first segment): a load started before that is not all seen.
    rec.wait_stderr(&format!("(pid {}, ", server.pid));
    let second = txns(
        server
            .sysbench_load("oltp_read_write", 2, 3)
            .join()
            .unwrap(),
    );
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    println!("{stdout}\n{}", rec.stderr());
    let s = rec.summary();
    let segments = &s.segments;
    assert_eq!(segments.len(), 2, "{segments:?}");
    assert_eq!(segments[0].pid, first_pid);
    assert_eq!(segments[1].pid, server.pid);
    assert_eq!(segments[0].end_reason, EndReason::TargetExited);
    assert_eq!(segments[1].end_reason, EndReason::Duration);
    let gap_start = segments[0].start_s + segments[0].duration_s;
    let gap_end = segments[1].start_s;
    assert!(gap_end > gap_start, "{segments:?}");
    let watched = segments[0].duration_s + segments[1].duration_s;
    assert!(watched < s.duration_s, "the gap is not watched");
    assert!(s.complete);
    assert_eq!(s.target.pid, server.pid);
    let commit = probe(&s, "sql.commit");
    let calls = commit.calls;
    assert!(calls >= first + second, "{calls} < {first} + {second}");
    let rate = commit.calls_per_sec;
    assert!(
        (rate - calls as f64 / watched).abs() < 0.01 * rate,
        "{rate} vs {calls}/{watched}"
    );
    assert!(
        commit.sampling.is_none(),
        "governor off: counted, not estimated"
    );
    assert!(
        stdout.contains(&format!("followed across 1 restart(s): pid {first_pid} ")),
        "{stdout}"
    );
    assert!(stdout.contains("not watched (restarting)"), "{stdout}");
    let files = assert_bundle_complete(&rec.out);
    assert!(s.cpu.as_ref().unwrap().oncpu.samples > 0);
    assert!(files.contains_key("cpu.pb.gz") && files.contains_key("waits.pb.gz"));
    let html = String::from_utf8(files["report.html"].clone()).unwrap();
    assert!(html.contains("followed across 1 restart(s)"));
}

/// The contract check every bundle of these tests goes through
/// (`check_bundle`) bites: a summary.json of this version without a
/// required field, or with a renamed one, fails against docs/schema/.
#[test]
fn the_schema_check_refuses_a_drifted_summary() {
    let dir = tempfile::tempdir().unwrap();
    let version = innoprof::model::files::FORMAT_VERSION;
    std::fs::write(
        dir.path().join("summary.json"),
        format!(r#"{{"format_version": {version}, "tool": "innoprof"}}"#),
    )
    .unwrap();
    let caught = std::panic::catch_unwind(|| check_bundle(dir.path()));
    let msg = caught.unwrap_err();
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("does not match docs/schema/summary.schema.json") && msg.contains("probes"),
        "{msg}"
    );
}

/// The same for timeseries.json, histograms.json and the `--ready-fd`
/// line: a drifted file of this version, or a ready line without its
/// version, fails against docs/schema/.
#[test]
fn the_schema_check_refuses_drifted_series_histograms_and_ready_lines() {
    let version = innoprof::model::files::FORMAT_VERSION;
    let refused = |f: Box<dyn FnOnce() + std::panic::UnwindSafe>| -> String {
        let msg = std::panic::catch_unwind(f).unwrap_err();
        msg.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    for (file, body, missing) in [
        (
            "timeseries.json",
            r#""interval_ms": 1000, "started_unix_ms": 1, "points": [{"t_ms": 1000, "probe": "p"}]"#,
            "calls",
        ),
        ("histograms.json", r#""probes": []"#, "buckets"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(file),
            format!(r#"{{"format_version": {version}, {body}}}"#),
        )
        .unwrap();
        let path = dir.path().to_path_buf();
        let msg = refused(Box::new(move || check_bundle(&path)));
        let schema = file.replace(".json", ".schema.json");
        assert!(
            msg.contains(&format!("does not match docs/schema/{schema}")) && msg.contains(missing),
            "{msg}"
        );
    }
    let line = r#"{"event": "attached", "command": "record", "innoprof_pid": 1, "targets": []}"#;
    let msg = refused(Box::new(move || {
        parse_line(line);
    }));
    assert!(msg.contains("format_version"), "{msg}");
    let line = format!(
        r#"{{"format_version": {version}, "event": "attached", "command": "record", "innoprof_pid": 1, "targets": [{{"pid": 2}}]}}"#
    );
    let msg = refused(Box::new(move || {
        parse_line(&line);
    }));
    assert!(
        msg.contains("does not match docs/schema/ready.schema.json") && msg.contains("exe"),
        "{msg}"
    );
}
