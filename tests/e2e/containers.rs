//! Servers in containers (issue 54): two real MariaDB servers, each in its
//! own mount and PID namespaces (`unshare`) and cgroup v2 directory, each
//! calling its datadir by the same path, which is a different host
//! directory in each. `serve --all` must watch them as two instances
//! labelled by their cgroups, follow one through a restart into fresh
//! namespaces, and `record -p HOST_PID` must name the frames of one, read
//! its state over its own socket and say where it ran.
//!
//! `serve --all` also sees servers other tests on this host run: every
//! assertion here is about these two only (their cgroup labels).

use std::time::{Duration, Instant};

use innoprof_e2e::*;

const SERVER: &str = "mariadb-10.2.11";

/// The samples of `name` labelled with `cgroup`.
fn of_cgroup<'a>(samples: &'a [MetricSample], name: &str, cgroup: &str) -> Vec<&'a MetricSample> {
    samples
        .iter()
        .filter(|s| s.name == name && s.label("cgroup") == Some(cgroup))
        .collect()
}

/// Waits (up to `within`) until serve's log says `needle`.
fn wait_log(serve: &Serve, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !serve.stderr().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no `{needle}` in serve's log:\n{}",
            serve.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn servers_in_containers_are_instances_of_their_own() {
    let _k = kernel_lock();
    // One datadir initialised by servers.sh, copied for each container.
    let init = Server::start(SERVER, &[]);
    init.stop();
    let top = tempfile::tempdir().unwrap();
    let inside = top.path().join("var-lib-mysql");
    std::fs::create_dir(&inside).unwrap();
    let host_dirs: Vec<_> = ["one", "two"]
        .iter()
        .map(|n| {
            let d = top.path().join(n);
            std::fs::create_dir(&d).unwrap();
            let ok = std::process::Command::new("cp")
                .arg("-a")
                .arg(init.dir.path().join("data"))
                .arg(&d)
                .status()
                .unwrap()
                .success();
            assert!(ok);
            d
        })
        .collect();
    drop(init);
    let cgroups = [Cgroup::new("one"), Cgroup::new("two")];
    let mut servers: Vec<ContainedServer> = host_dirs
        .iter()
        .zip(&cgroups)
        .map(|(d, cg)| ContainedServer::start(SERVER, d, &inside, cg))
        .collect();
    let datadir = inside.join("data").display().to_string();
    for s in &servers {
        // Its own namespaces, as the host sees them.
        let ns = |p: u32, kind: &str| std::fs::read_link(format!("/proc/{p}/ns/{kind}")).unwrap();
        let me = std::process::id();
        assert_ne!(ns(s.pid, "mnt"), ns(me, "mnt"));
        assert_ne!(ns(s.pid, "pid"), ns(me, "pid"));
    }

    let mut serve = Serve::start(&["--all"]);
    for cg in &cgroups {
        wait_log(
            &serve,
            &format!("watching the server in {datadir}, in cgroup {}", cg.path),
            Duration::from_secs(20),
        );
    }
    let up = metric_samples(&serve.scrape());
    for (s, cg) in servers.iter().zip(&cgroups) {
        let info = of_cgroup(&up, "innoprof_target_info", &cg.path);
        let [info] = info.as_slice() else {
            panic!("one target_info for {}: {info:?}", cg.path)
        };
        assert_eq!(info.label("server"), Some(datadir.as_str()));
        assert_eq!(info.label("pid"), Some(s.pid.to_string().as_str()));
        let [target_up] = of_cgroup(&up, "innoprof_target_up", &cg.path)[..] else {
            panic!("one target_up for {}", cg.path)
        };
        assert_eq!(target_up.value, 1.0);
    }

    // The first killed and started again in fresh namespaces: the same
    // instance (its datadir's inode), followed, not a third one.
    let old = servers[0].pid;
    servers[0].kill();
    wait_log(
        &serve,
        &format!("pid {old} exited; probes detached; waiting for the server in {datadir}"),
        Duration::from_secs(10),
    );
    servers[0].start_again();
    let new = servers[0].pid;
    assert_ne!(new, old);
    wait_log(
        &serve,
        &format!("is back as pid {new} after"),
        Duration::from_secs(20),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = loop {
        let s = metric_samples(&serve.scrape());
        let pid = of_cgroup(&s, "innoprof_target_info", &cgroups[0].path)
            .first()
            .and_then(|i| i.label("pid").map(String::from));
        if pid == Some(new.to_string()) {
            break s;
        }
        assert!(Instant::now() < deadline, "no target_info of pid {new}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for (cg, restarts) in [(&cgroups[0].path, 1.0), (&cgroups[1].path, 0.0)] {
        assert_eq!(of_cgroup(&back, "innoprof_target_info", cg).len(), 1);
        let [r] = of_cgroup(&back, "innoprof_target_restarts_total", cg)[..] else {
            panic!("one restarts_total for {cg}")
        };
        assert_eq!(r.value, restarts, "{cg}");
    }
    // Nothing of ours watched twice (the restarted one as a new instance).
    let ours = back
        .iter()
        .filter(|s| s.name == "innoprof_target_info" && s.label("server") == Some(datadir.as_str()))
        .count();
    assert_eq!(ours, 2, "{}", serve.stderr());
    serve.signal(libc::SIGTERM);
    assert_eq!(serve.wait_exit(), Some(0), "{}", serve.stderr());

    // `record -p HOST_PID` of the second: frames named, its state read
    // over its own socket (inside its root), where it ran recorded.
    let s = &servers[1];
    let _load = s.sql_background(&"SELECT BENCHMARK(5000000, MD5('innoprof'));\n".repeat(200));
    let pid = s.pid.to_string();
    let mut rec = Recording::start(&["--pid", &pid, "--duration", "4s"]);
    rec.wait_attached();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let summary = rec.summary();
    let place = &summary.target.placement;
    assert_eq!(place.cgroup.as_deref(), Some(cgroups[1].path.as_str()));
    assert!(place.own_mount_namespace);
    assert_eq!(place.namespace_pid, Some(1));
    let state = summary.server_state.as_ref().expect("server state");
    assert_eq!(state.error, None, "{state:?}");
    assert!(state.start.is_some() && state.end.is_some());
    let folded = rec.file("oncpu.folded");
    assert!(
        folded.contains("do_command") && folded.contains("Item_func_benchmark::val_int"),
        "frames not named:\n{}",
        &folded[..folded.len().min(3000)]
    );
    let meta: serde_json::Value = serde_json::from_str(&rec.file("metadata.json")).unwrap();
    assert_eq!(meta["placement"]["cgroup"], cgroups[1].path.as_str());
    let header = format!(
        "in cgroup {}, its own mount namespace, its own PID namespace (pid 1 there)",
        cgroups[1].path
    );
    assert!(
        rec.file("summary.txt").contains(&header),
        "{}",
        rec.file("summary.txt")
    );
    assert!(rec.file("report.html").contains(&cgroups[1].path));
}
