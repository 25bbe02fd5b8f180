//! Raw capture, named later: every recording writes its stacks as
//! addresses (stacks.raw.json), and `innoprof report DIR --symbolize`
//! names them again, checking each file by build id. One recording of
//! MariaDB 10.2.11 under sysbench, named on the host and again later from
//! its raw addresses, must give the same frames everywhere (every folded
//! file, every pprof message); a `record --no-symbolize` recording is
//! named by `report`; a raw file that lies gets a one-line error or
//! `+0x` frames.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use innoprof_e2e::*;

/// A copy of a bundle's regular files into a new directory.
fn copy_bundle(from: &Path, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), into.join(e.file_name())).unwrap();
        }
    }
    into.to_path_buf()
}

fn folded_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".folded"))
        .collect();
    names.sort();
    names
}

#[track_caller]
fn read(dir: &Path, name: &str) -> String {
    let files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.file_name())).collect())
        .unwrap_or_default();
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_else(|e| panic!("{}/{name}: {e}; it holds {files:?}", dir.display()))
}

fn pprof(dir: &Path, name: &str) -> innoprof::report::pprof::Profile {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    innoprof::report::pprof::decode_gz(&bytes).unwrap_or_else(|| panic!("{name} is no pprof"))
}

fn report(args: &[&str]) -> (bool, String) {
    let out = run_innoprof(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Frames of folded text, each once.
fn frames(folded: &str) -> std::collections::BTreeSet<&str> {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .flat_map(|(stack, _)| stack.split(';'))
        .collect()
}

/// Blocks until the server is answering sysbench's queries.
fn wait_for_load(server: &Server) {
    let before = server.status("Questions");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.status("Questions") < before + 1000 {
        assert!(
            Instant::now() < deadline,
            "sysbench sent no queries in 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn raw_stacks_named_later_equal_the_hosts_and_lies_are_refused() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    // Open-ended: the load must outlast two attaches, and a cold plan (the
    // first run of a new build) can take most of a timed run's seconds.
    let load = server.sysbench_open_ended("oltp_read_write", 4, &[]);
    wait_for_load(&server);
    let pid = server.pid.to_string();
    let record = |extra: &[&str]| {
        let mut args = vec![
            "--pid",
            &pid,
            "--duration",
            "4s",
            "--probes",
            "default",
            "--offcpu",
        ];
        args.extend_from_slice(extra);
        let mut rec = Recording::start(&args);
        rec.wait_attached();
        let (code, _, rec) = rec.finish();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        rec
    };
    let scratch = tempfile::tempdir().unwrap();

    // 1. Named on the host, and again later from its raw addresses.
    let host = record(&[]);
    let later = copy_bundle(&host.out, &scratch.path().join("later"));
    let (ok, err) = report(&["report", later.to_str().unwrap(), "--symbolize"]);
    assert!(ok, "{err}");
    assert!(err.contains("mysqld: named (the very same file"), "{err}");
    assert!(err.contains("libc.so.6: named (build id checked)"), "{err}");
    let names = folded_files(&host.out);
    assert!(
        names.contains(&"oncpu.folded".to_string()),
        "{names:?}; cpu: {}; stderr: {}",
        serde_json::to_string(&host.summary_json()["cpu"]["oncpu"]).unwrap(),
        host.stderr()
    );
    assert!(names.contains(&"offcpu.folded".to_string()), "{names:?}");
    assert!(
        names
            .iter()
            .any(|n| !n.starts_with("oncpu") && !n.starts_with("offcpu")),
        "no probe caught a wait stack: {names:?}"
    );
    assert_eq!(folded_files(&later), names);
    for name in &names {
        let (h, l) = (read(&host.out, name), read(&later, name));
        assert!(!h.is_empty(), "{name} is empty");
        if h != l {
            let only_h: Vec<_> = h.lines().filter(|x| !l.contains(x)).take(3).collect();
            let only_l: Vec<_> = l.lines().filter(|x| !h.contains(x)).take(3).collect();
            panic!("{name} differs:\nhost:  {only_h:#?}\nlater: {only_l:#?}");
        }
    }
    for name in ["cpu.pb.gz", "offcpu.pb.gz", "waits.pb.gz"] {
        let (h, l) = (pprof(&host.out, name), pprof(&later, name));
        assert!(!h.sample.is_empty() && !h.function.is_empty(), "{name}");
        assert_eq!(h.sample, l.sample, "{name}: samples");
        assert_eq!(h.location, l.location, "{name}: locations");
        assert_eq!(h.function, l.function, "{name}: functions");
        assert_eq!(h.mapping, l.mapping, "{name}: mappings");
        assert_eq!(h.string_table, l.string_table, "{name}: strings");
    }
    let (hs, ls) = (host.summary(), read_summary(&later).unwrap());
    let tops = |s: &innoprof::model::summary::Summary| {
        let cpu = s.cpu.as_ref().unwrap();
        serde_json::to_string(&(&cpu.oncpu.top, &cpu.offcpu.as_ref().unwrap().top)).unwrap()
    };
    assert_eq!(tops(&hs), tops(&ls));
    let host_oncpu = read(&host.out, "oncpu.folded");
    let unnamed_on_host = frames(&host_oncpu)
        .iter()
        .filter(|f| f.starts_with("mysqld+0x"))
        .count();

    // 2. Recorded with --no-symbolize: `+0x` frames until `report` names them.
    let raw = record(&["--no-symbolize"]);
    let oncpu = read(&raw.out, "oncpu.folded");
    assert!(oncpu.contains("mysqld+0x"), "{oncpu}");
    assert!(!oncpu.contains("do_command"), "{oncpu}");
    let named = copy_bundle(&raw.out, &scratch.path().join("named"));
    // No flag needed: the bundle says its stacks are unnamed.
    let (ok, err) = report(&["report", named.to_str().unwrap()]);
    assert!(ok, "{err}");
    let oncpu = read(&named, "oncpu.folded");
    let f = frames(&oncpu);
    assert!(f.iter().any(|f| f.starts_with("do_command(")), "{oncpu}");
    // Two recordings sample different addresses, and a few land where the
    // symbol table has no function (padding, PLT): compare the share, not the count.
    let unnamed: Vec<_> = f.iter().filter(|f| f.starts_with("mysqld+0x")).collect();
    assert!(
        unnamed.len() <= unnamed_on_host.max(f.len() / 50),
        "{} of {} frames unnamed ({unnamed:?}), {unnamed_on_host} on the host",
        unnamed.len(),
        f.len()
    );
    let raw_summary = read_summary(&named).unwrap();
    let top = &raw_summary.cpu.as_ref().unwrap().oncpu.top;
    assert!(
        serde_json::to_string(top).unwrap().contains("mysqld"),
        "top table not renamed"
    );

    // 3. Lies. The raw file of (2), edited.
    let raw_json: serde_json::Value =
        serde_json::from_str(&read(&raw.out, "stacks.raw.json")).unwrap();
    let lie = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| -> (bool, String, PathBuf) {
        let dir = copy_bundle(&raw.out, &scratch.path().join(name));
        let mut v = raw_json.clone();
        edit(&mut v);
        std::fs::write(dir.join("stacks.raw.json"), serde_json::to_vec(&v).unwrap()).unwrap();
        let (ok, err) = report(&["report", dir.to_str().unwrap(), "--symbolize"]);
        (ok, err, dir)
    };
    let mysqld = |v: &mut serde_json::Value| -> Vec<usize> {
        let maps = v["mappings"].as_array().unwrap();
        (0..maps.len())
            .filter(|&i| maps[i]["path"].as_str().unwrap().ends_with("/mysqld"))
            .collect()
    };
    // Huge counts: refused in one line, before any naming.
    let (ok, err, _) = lie("deep", &|v| {
        v["cpu"]["oncpu"][0]["user"] = serde_json::json!(vec![1u64; 100_000]);
    });
    assert!(!ok, "{err}");
    assert!(err.contains("stack depth: 100000 is more than"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // A path outside anything mapped: refused in one line.
    let (ok, err, _) = lie("relative", &|v| {
        for i in mysqld(v) {
            v["mappings"][i]["path"] = "../../../etc/shadow".into();
        }
    });
    assert!(!ok && err.contains("not an absolute path"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Files that are not the ones recorded, in one report: mysqld with
    // another build id, libc at /etc/shadow, libaio at a device. None is
    // read as the library; their frames stay `+0x`, each with the reason.
    let (ok, err, dir) = lie("files", &|v| {
        for i in mysqld(v) {
            v["mappings"][i]["build_id"] = "00112233445566778899aabbccddeeff00112233".into();
        }
        for m in v["mappings"].as_array_mut().unwrap() {
            let path = m["path"].as_str().unwrap().to_string();
            if path.contains("/libc.so") {
                m["path"] = "/etc/shadow".into();
                m["build_id"] = "aa".repeat(20).into();
            } else if path.contains("/libaio.so") {
                m["path"] = "/dev/zero".into();
            }
        }
    });
    assert!(ok, "{err}");
    // (MariaDB 10.2.11's tarball mysqld has no build id: without the lie
    // it is taken as the very same file, device, inode, size and times.)
    let needs = "needs build id 00112233445566778899aabbccddeeff00112233";
    assert!(
        err.contains(&format!("mysqld: the file here has no build id ({needs})")),
        "{err}"
    );
    let needs = format!("needs build id {}", "aa".repeat(20));
    assert!(
        err.contains(&format!(
            "warning: /etc/shadow: the file here has no build id ({needs})"
        )),
        "{err}"
    );
    assert!(
        err.contains("warning: /dev/zero: not a regular file"),
        "{err}"
    );
    let folded = read(&dir, "oncpu.folded") + &read(&dir, "offcpu.folded");
    for module in ["mysqld+0x", "shadow+0x", "zero+0x"] {
        assert!(folded.contains(module), "no {module} frame");
    }
    assert!(!folded.contains("do_command"));
    load.stop();
}
