//! Heavy load and full BPF maps: whatever innoprof cannot record is counted
//! and reported (summary.json `drops` and the text table), never silently
//! lost.

use innoprof_e2e::*;

/// Sum of the counts of a folded-stacks file.
fn folded_total(text: &str) -> u64 {
    text.lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

/// Every call is either in the stack counts or counted as dropped, and the
/// same for call sites: the totals reconcile exactly.
fn assert_every_call_accounted_for(s: &Summary, rec: &Recording) {
    let mut calls = 0;
    let mut in_stacks = 0;
    let mut site_calls = 0;
    let mut calls_with_sites = 0;
    for p in s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        calls += p.calls;
        if let Some(f) = &p.stacks.folded_by_count {
            in_stacks += folded_total(&rec.file(f));
        }
        // Clones may have moved the call-site arguments: none are read there.
        let clone_attached = p.symbols.iter().any(|s| s.clone.is_some());
        if !p.callsites.is_empty() && !clone_attached {
            calls_with_sites += p.calls;
            site_calls += p.callsites.iter().map(|c| c.calls).sum::<u64>();
        }
    }
    assert_eq!(
        in_stacks + s.drops.stack_key_map_full,
        calls,
        "stacks: {:?}",
        s.drops
    );
    assert_eq!(
        site_calls + s.drops.callsite_map_full,
        calls_with_sites,
        "call sites: {:?}",
        s.drops
    );
}

/// A one-entry stack map, every hit's stack taken: the second caller's
/// stack does not fit, nor does its counter. Exactly the B calls from
/// caller_b are reported lost, in summary.json and in the table.
#[test]
fn tiny_stack_maps_report_exact_drops() {
    let _k = kernel_lock();
    const A: u64 = 300;
    const B: u64 = 200;
    let (stdout, rec) = record_catalog_probe(
        &["--max-stacks", "1", "--stack-interval", "0"],
        "name = 'fixture.counted'\nsymbols = ['fixture_counted']\nmeasure = 'count'\ncost = 'rare'\n",
        false,
        [A, B, 0, 0, 0],
    );
    let s = rec.summary();
    assert_eq!(probe(&s, "fixture.counted").calls, A + B);
    assert_eq!(s.drops.stack_map_full, B, "{:?}", s.drops);
    assert_eq!(s.drops.stack_key_map_full, B, "{:?}", s.drops);
    let folded = rec.file("fixture.counted.count.folded");
    assert!(
        folded.contains(&format!(";main;caller_a;fixture_counted {A}")),
        "{folded}"
    );
    assert_every_call_accounted_for(&s, &rec);
    assert!(
        stdout.contains(&format!(
            "dropped: {B} stacks not taken ({B} stack map full, 0 errors, 0 busy; \
             their calls are under [lost stack]), {B} stack counts (stack-count map full)"
        )),
        "{stdout}"
    );
}

/// A one-entry call-site map. The probe reads fixture_counted's argument
/// (i = 0..n) as the "file" pointer, so every call but i = 0 (no file: not
/// a call site) is a new site: one fits, every other is a counted drop.
#[test]
fn tiny_callsite_map_reports_exact_drops() {
    let _k = kernel_lock();
    const A: u64 = 300;
    let (stdout, rec) = record_catalog_probe(
        &["--max-callsites", "1", "--no-stacks"],
        "name = 'fixture.counted'\nsymbols = ['fixture_counted']\nmeasure = 'count'\n\
         cost = 'rare'\ncallsite = { file_arg = 1, line_arg = 2 }\n",
        false,
        [A, 0, 0, 0, 0],
    );
    let s = rec.summary();
    let p = probe(&s, "fixture.counted");
    assert_eq!(p.calls, A);
    let sites = &p.callsites;
    assert_eq!(sites.len(), 1, "{sites:?}");
    let kept = sites[0].calls;
    let dropped = s.drops.callsite_map_full;
    assert!(dropped >= A - 2, "{:?}", s.drops);
    assert_eq!(kept + dropped, A - 1, "i = 0 has no site: {:?}", s.drops);
    assert!(
        stdout.contains(&format!("{dropped} call sites (call-site map full)")),
        "{stdout}"
    );
}

/// 64 and 256 sysbench threads against MariaDB 10.2.11 with the default
/// probe set: the recording completes, sysbench sees no error, and the
/// totals reconcile with what was dropped (if anything).
#[test]
fn mariadb_10_2_11_default_probes_under_64_and_256_threads() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &["--max-connections=400"]);
    let pid = server.pid.to_string();
    for threads in [64, 256] {
        let load = server.sysbench_open_ended("oltp_read_only", threads, &[]);
        std::thread::sleep(std::time::Duration::from_secs(2));
        let mut rec = Recording::start(&["--pid", &pid, "--duration", "4s"]);
        rec.wait_attached();
        let (code, stdout, rec) = rec.finish();
        let report = load.stop();
        assert_eq!(code, Some(0), "{threads} threads: {}", rec.stderr());
        let s = rec.summary();
        assert!(s.complete);
        let calls: u64 = s.probes.iter().map(|p| p.calls).sum();
        println!(
            "load {threads} threads: {:.0} transactions in {} s, {} ignored errors, \
             {calls} probe calls, drops {:?}",
            report.transactions, report.seconds, report.ignored_errors, s.drops
        );
        assert!(
            report.exited_early.is_none() && report.error_lines.is_empty(),
            "{threads} threads: {}",
            report.log
        );
        assert_eq!(report.ignored_errors, 0.0, "{}", report.log);
        assert!(report.transactions > 100.0, "{}", report.log);
        assert!(calls > 0, "{s:?}");
        // The agent's footprint (issue 12): the 118 MB mysqld is mapped,
        // not read, and what resolution and symbolization read of it is
        // released as they go. Measured: 49 MiB idle, 63 MiB under 64
        // threads, 59 MiB under 256 (299 MiB when the binary was read
        // whole). The target is 64 MiB; it is met with too little margin
        // to assert here without flakes, so this bounds regressions.
        let rss_kb = s.overhead.agent_max_rss_kb;
        println!("load {threads} threads: innoprof peak RSS {rss_kb} KiB");
        assert!(
            rss_kb <= 80 << 10,
            "innoprof's peak RSS {rss_kb} KiB > 80 MiB"
        );
        assert_every_call_accounted_for(&s, &rec);
        // Every kind of drop, those added later too.
        let any_drop = serde_json::to_value(&s.drops)
            .unwrap()
            .as_object()
            .unwrap()
            .values()
            .any(|v| v.as_u64() != Some(0));
        assert_eq!(stdout.contains("dropped:"), any_drop, "{stdout}");
    }
    assert_eq!(server.sql("select 1").trim(), "1");
}
