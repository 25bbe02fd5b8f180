//! The overhead governor and the per-hit cost calibration, against a
//! fixture whose true call count is known at every moment, and a real
//! server under sysbench.

use innoprof::resolve::EntryInsn;
use innoprof_e2e::*;

#[test]
fn calibration_measures_emulated_and_single_stepped_hits() {
    let _k = kernel_lock();
    let out = run_innoprof(&["calibrate", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let get = |k: &str| c[k].as_f64().unwrap();
    for k in [
        "latency_emulated_ns",
        "latency_stepped_ns",
        "count_emulated_ns",
        "count_stepped_ns",
    ] {
        // A hit costs something, and less than a millisecond.
        assert!(get(k) > 50.0 && get(k) < 1e6, "{k}: {c}");
    }
    // Single-stepping out of line is the dear case (~20x here).
    assert!(
        get("latency_stepped_ns") > 2.0 * get("latency_emulated_ns"),
        "{c}"
    );
    assert_eq!(c["with_stacks"], true);
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// `calibrate` keeps its measurement for the boot; a recording then reuses
/// it and says so, and `--recalibrate` measures anew. The cache is
/// innoprof's own directory, root's alone.
#[test]
fn a_recording_reuses_this_boots_calibration_unless_told_not_to() {
    let _k = kernel_lock();
    let out = run_innoprof(&["calibrate"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = std::fs::symlink_metadata("/run/innoprof").expect("/run/innoprof kept");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert!(dir.is_dir() && dir.uid() == 0);
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);

    let record = |extra: &[&str]| {
        let fx = Fixture::spawn(&fixture_binary(false), [1, 1, 0, 0, 0]);
        let pid = fx.pid.to_string();
        let mut args = vec![
            "--pid",
            &pid,
            "--force",
            "--duration",
            "1s",
            "--probe",
            "fixture_counted",
        ];
        args.extend_from_slice(extra);
        let mut rec = Recording::start(&args);
        rec.wait_attached();
        // Calibration probes a child innoprof, never innoprof's own
        // process: once a process has held a uprobe, the kernel walks its
        // mappings of every probed binary at each unregister and faults
        // the probed pages in (serve's resident set grew with each
        // restart). A process that has hit a uprobe has an xol area.
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", rec.child.id())).unwrap();
        assert!(!maps.contains("[uprobes]"), "{maps}");
        let (code, stdout, rec) = rec.finish();
        fx.exit();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        (stdout, rec.summary())
    };
    let (stdout, s) = record(&[]);
    let o = &s.overhead;
    let reused = o
        .calibration_reused
        .as_deref()
        .unwrap_or_else(|| panic!("{o:?}"));
    assert!(reused.contains("in this boot, reused"), "{reused}");
    assert!(stdout.contains(reused), "{stdout}");
    assert!(o.calibration_note.is_none(), "{o:?}");

    let (stdout, s) = record(&["--recalibrate"]);
    let o = &s.overhead;
    assert!(o.calibration_reused.is_none(), "{o:?}");
    assert!(!stdout.contains("reused from /run/innoprof"), "{stdout}");
    assert!(o.hit_cost.latency_emulated_ns > 50.0);
}

/// The estimate of a cut probe against the fixture's log: the calls in
/// the time the estimate covers (0 to the end of the last on-window).
fn check_estimate(s: &Summary, p: &ProbeResult, log: &PacedLog, rate: f64) -> (f64, f64, f64) {
    let smp = p.sampling.as_ref().expect("sampled");
    let e = &smp.estimate;
    let start_ms = s.started_unix_ms as f64;
    let covered = e.covered_s;
    // Before the fixture's first line (it starts after attaching) it had
    // made no call; after its last, none more.
    let at = |t: f64| {
        let (first, last) = (log.0[0], log.0[log.0.len() - 1]);
        if t <= first.0 as f64 {
            first.1 as f64
        } else if t >= last.0 as f64 {
            last.1 as f64
        } else {
            log.calls_at(t)
        }
    };
    let truth = at(start_ms + covered * 1000.0) - at(start_ms);
    let (est, bound) = (e.calls, e.calls_bound);
    // Exact parts: what the windows saw is what the probe counted.
    let windows: u64 = smp.windows.iter().map(|w| w.calls).sum();
    assert_eq!(p.calls, windows + smp.calls_before_start, "{p:?}");
    assert_eq!(smp.observed_calls, p.calls);
    assert_eq!(e.observed_calls, windows);
    // The fixture logs every 10 ms: its truth is known to ±1 step at each end.
    let slack = 2.0 * rate * 0.01;
    eprintln!(
        "{}: truth {truth:.0} over 0-{covered:.2} s, estimate {est:.0} ± {bound:.0} (95 %), {windows} seen in {} windows, error {:.1} %",
        p.name,
        smp.windows.iter().map(|w| format!("[{:.2}-{:.2} {}]", w.start_s, w.end_s, w.calls)).collect::<Vec<_>>().join(" "),
        (est - truth) / truth * 100.0
    );
    assert!(
        (est - truth).abs() <= bound + slack,
        "estimate {est} ± {bound} vs truth {truth}: {p:?}"
    );
    (truth, est, bound)
}

const RATE_DEAR: u32 = 15_000;

#[test]
fn governor_samples_stacks_then_cuts_a_dear_probe_and_bounds_its_estimate() {
    let _k = kernel_lock();
    // 15k calls/s: at 2-4 µs a hit, 3-6 % of a core fully on, clearly over
    // the budget however fast the host (at 5k/s a quick host put it at
    // 1.2 %, and spent vs fully-on was noise).
    let paced = Paced::start(RATE_DEAR, 30);
    let pid = paced.pid.to_string();

    // Over the default 1 %: the window's savings run out in a few seconds.
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "14s",
        "--probe",
        "paced_hit",
        "--no-cpu",
        // The default budget (the test helper turns the governor off otherwise).
        "--max-overhead",
        "1",
    ]);
    rec.wait_attached();
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let log = paced.stop();

    let s = rec.summary();
    let p = probe(&s, "paced_hit");
    let sampling = p.sampling.as_ref().expect("sampled");
    let fraction = sampling.attached_fraction;
    assert!(
        fraction > 0.05 && fraction < 0.95,
        "attached {fraction}: {p:?}"
    );
    let projected = sampling.projected_full_pct_of_core;
    assert!(
        projected > 1.0,
        "fully on it would cost {projected}% of a core"
    );
    // The stack lever came first: sampled before (and while) cut.
    assert!(p.stacks.sampled_every_max > 1, "{p:?}");
    // Cut probes are watched in a window every period (1 s) to the end
    // (issue 50; before, 1 s windows up to 19 s apart), never detached
    // for good: a window opens at most a period (and a look's lag) after
    // the last one did.
    // (How many depends on when the savings run out: the lighter the hit,
    // the later the first cut; 6.2 s of 14 here once.)
    let windows = &sampling.windows;
    assert!(windows.len() >= 4, "{p:?}");
    for pair in windows[1..].windows(2) {
        assert!(pair[1].start_s - pair[0].start_s <= 1.3, "{p:?}");
    }
    let last = windows.last().expect("windows");
    assert!(s.duration_s - last.start_s <= 1.3, "{p:?}");
    assert!(sampling.estimate.covered_s >= s.duration_s - 0.01, "{p:?}");
    check_estimate(&s, p, &log, f64::from(RATE_DEAR));

    // The spend stays near the budget; fully on it would be far above it.
    // 1 % over any 10 s window, the window starting idle: a 14 s recording
    // may spend (10 + 14) x 1 % / 14 = 1.7 %, plus an on-window started
    // late in the recording.
    let o = &s.overhead;
    assert_eq!(o.budget_pct_of_core, Some(1.0));
    let spent = o.probes_pct_of_core;
    eprintln!("paced_hit: spent {spent:.2}% of a core; fully on {projected:.1}%");
    assert!(
        spent < 2.0,
        "spent {spent}% of a core on a 1% budget\n{}",
        rec.stderr()
    );
    assert!(spent < projected, "spent {spent}% vs {projected}% fully on");
    assert!(stdout.contains("sampled: paced_hit on"), "{stdout}");
    assert!(stdout.contains(&format!("{} seen", p.calls)), "{stdout}");
    assert!(
        stdout.contains("stacks sampled by the governor: paced_hit (1 in up to "),
        "{stdout}"
    );
    // The wait stacks say they are the calls seen, unscaled (issue 16):
    // pprof shows the profile's comments.
    let home = tempfile::tempdir().unwrap();
    let comments = go_tool_pprof(home.path())
        .args(["-symbolize=none", "-comments"])
        .arg(rec.out.join("waits.pb.gz"))
        .output()
        .unwrap();
    let comments = String::from_utf8_lossy(&comments.stdout);
    let seen = format!(
        "paced_hit: stacks of the {} calls seen while attached ({:.0} % of the recording), \
         unscaled; summary.json estimates {:.0} ",
        p.calls,
        fraction * 100.0,
        sampling.estimate.calls
    );
    assert!(comments.contains(&seen), "{seen:?} not in {comments:?}");
    // And so does its flame graph in report.html.
    let html = std::fs::read_to_string(rec.out.join("report.html")).unwrap();
    let title = format!(
        "paced_hit: wait time by stack, of the calls seen while attached ({:.0} % of the \
         recording), unscaled",
        fraction * 100.0
    );
    assert!(html.contains(&title), "{title:?} not in report.html");
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// The benchmark's switching instrument (`INNOPROF_BENCH_TOGGLE_MS`,
/// bench.py's `toggle`): with no governor, every probe goes off and on
/// again on the period, as the governor cuts probes; the calls are those
/// seen while on, and nothing stays attached after.
#[test]
fn the_bench_toggle_switches_every_probe_on_its_period() {
    let _k = kernel_lock();
    const RATE: u32 = 2_000;
    let paced = Paced::start(RATE, 20);
    let pid = paced.pid.to_string();
    let mut rec = Recording::start_env(
        &[
            "--pid",
            &pid,
            "--force",
            "--duration",
            "3s",
            "--probe",
            "paced_hit",
            "--no-cpu",
        ],
        &[("INNOPROF_BENCH_TOGGLE_MS", "200")],
    );
    rec.wait_attached();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    paced.stop();
    let s = rec.summary();
    let attach = s.overhead.attach.as_ref().expect("attach info");
    // 3 s at 200 ms: ~14 switches, off and on (a late tick may skip one).
    assert!((8..=16).contains(&attach.governor_switches), "{attach:?}");
    // On about half the time.
    let made = f64::from(RATE) * s.duration_s;
    let p = probe(&s, "paced_hit");
    assert!(
        (p.calls as f64) > 0.2 * made && (p.calls as f64) < 0.8 * made,
        "{} calls seen of ~{made:.0} made: {p:?}",
        p.calls
    );
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// A burst of calls (10,000/s for 1 s: ~7,500 made while probed), then
/// idle, under the default governor: the burst costs a fraction of what the
/// 10 s window allows, so the probe is never cut, and the count is exact
/// (no projection over the idle rest).
#[test]
fn a_burst_then_idle_is_counted_exactly_under_the_default_governor() {
    let _k = kernel_lock();
    let mut paced = Paced::ready(&[10_000, 1, 30]);
    let pid = paced.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "5s",
        "--probe",
        "paced_hit",
        "--no-cpu",
        // The default budget (the test helper turns the governor off otherwise).
        "--max-overhead",
        "1",
    ]);
    rec.wait_attached();
    paced.go();
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let log = paced.stop();
    // The fixture does not catch up when probe hits slow it down.
    let n = log.last();
    assert!(n > 5_000, "the fixture made {n} calls");
    let s = rec.summary();
    let p = probe(&s, "paced_hit");
    eprintln!(
        "burst: truth {n}, reported {} (sampling {:?})",
        p.calls, p.sampling
    );
    assert_eq!(p.calls, n, "{p:?}");
    assert!(p.sampling.is_none(), "{p:?}");
    assert_eq!(p.stacks.sampled_every_max, 1, "{p:?}");
    let folded = rec.file("paced_hit.count.folded");
    let stacked: u64 = folded
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(stacked, n, "every call's stack");
    assert!(stdout.contains(&format!(" {n} |")), "{stdout}");
    assert!(stdout.contains("budget 1% of one core"), "{stdout}");
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// ~900 calls/s of 2 ms each (3 threads), a single-stepped entry (a dear
/// hit: ~1-2 % of a core at this rate), for 10 s under the default
/// governor: exact while it fits the window, and when cut, the estimate
/// over the time it covers is within its stated bound.
#[test]
fn two_ms_calls_at_900_per_s_are_exact_or_within_the_bound() {
    let _k = kernel_lock();
    const RATE: u32 = 900;
    let mut paced = Paced::ready(&[RATE, 10, 30, 2000, 3]);
    let pid = paced.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "12s",
        "--probe",
        "paced_slow",
        "--no-cpu",
        "--max-overhead",
        "1",
    ]);
    rec.wait_attached();
    paced.go();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let log = paced.stop();
    let s = rec.summary();
    let p = probe(&s, "paced_slow");
    assert_eq!(
        p.symbols[0].entry,
        EntryInsn::Other,
        "single-stepped: {p:?}"
    );
    let truth = log.last();
    assert!(truth > 7_000, "the fixture made {truth} calls");
    assert_eq!(s.overhead.budget_pct_of_core, Some(1.0));
    if p.sampling.is_none() {
        eprintln!(
            "paced_slow: truth {truth}, reported {} (never cut)",
            p.calls
        );
        assert_eq!(p.calls, truth, "{p:?}");
    } else {
        check_estimate(&s, p, &log, f64::from(RATE));
    }
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// Issue 50: a program with a known count (2 threads; 4,000 calls of a
/// 2 ms function, `paced_slow_impl`, entered by a push: ~1.6 µs a hit)
/// beside a hot neighbour (`paced_hit` at 60,000 calls/s)
/// that the default governor must cut. The cheap probe fits the budget at
/// the price its hits are charged, so it is never switched off and counts
/// exactly (it lost 2.3 s to the neighbour's cuts before, and its estimate
/// read 2,323 ± 6,862); the hot one is watched in windows spread over the
/// whole recording, one every period, and its estimate's bound is tight
/// (with each switch-off priced at 0.1-0.15 s of the hot probe's rate, not
/// at the ~120 hits it took, its windows came every 3-4 periods and the
/// bound was 46 %: 538,404 ± 247,222; priced at what it took, 12 windows,
/// 628,063 ± 87,491).
#[test]
fn a_cheap_probe_beside_a_cut_hot_one_counts_exactly() {
    let _k = kernel_lock();
    let mut paced = Paced::ready(&[400, 10, 2, 2000, 2, 60_000]);
    let pid = paced.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "11s",
        "--probe",
        "paced_slow_impl",
        "--probe",
        "paced_hit",
        "--no-cpu",
        "--max-overhead",
        "1",
    ]);
    rec.wait_attached();
    paced.go();
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let log = paced.stop();
    let s = rec.summary();
    let truth = log.last();
    assert!(truth > 3_000, "the fixture made {truth} calls");
    let slow = probe(&s, "paced_slow_impl");
    let hot = probe(&s, "paced_hit");
    let smp = hot
        .sampling
        .as_ref()
        .unwrap_or_else(|| panic!("the hot neighbour was not cut: {hot:?}"));
    let w = &smp.windows;
    eprintln!("paced_hit windows: {w:?}");
    eprintln!(
        "paced_slow_impl: truth {truth}, counted {} ({:?}); paced_hit: {} seen in {} windows, estimate {:.0} ± {:.0}, fully on {:.1} % of a core; {stdout}",
        slow.calls,
        slow.sampling.as_ref().map(|x| &x.estimate),
        hot.calls,
        w.len(),
        smp.estimate.calls,
        smp.estimate.calls_bound,
        smp.projected_full_pct_of_core,
    );
    assert!(
        slow.sampling.is_none(),
        "the cheap probe was cut: {slow:?}\n{}",
        rec.stderr()
    );
    assert_eq!(slow.calls, truth, "{slow:?}");
    // Spread windows to the end: one every period (1 s), or every few
    // where a window and the detach after it would overspend the probe's
    // share (at ~60,000 calls/s the ~100 ms detach lag costs more than
    // the window: 7 windows 1-2 periods apart here, 2026-11-29).
    let stride = f64::from(innoprof::cost::governor::MAX_STRIDE);
    assert!(w.len() >= 5, "{w:?}");
    for pair in w[1..].windows(2) {
        assert!(pair[1].start_s - pair[0].start_s <= stride + 0.3, "{w:?}");
    }
    assert!(smp.estimate.covered_s >= s.duration_s - 0.01, "{smp:?}");
    // ~600,000 made in 10 s if the hot thread kept its pace; a bound
    // within a quarter of the estimate.
    let e = &smp.estimate;
    assert!(e.calls_bound <= 0.25 * e.calls, "{e:?}");
    assert!(e.calls > 300_000.0 && e.calls < 700_000.0, "{e:?}");
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

#[test]
fn mariadb_all_probes_under_the_default_budget() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    server.prepare("oltp_read_write");
    let pid = server.pid.to_string();
    // The governor's per-period trace goes to innoprof's stderr, for the
    // failure message (only governor tests run in this binary).
    std::env::set_var("INNOPROF_DEBUG_GOVERNOR", "1");
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--duration",
        "8s",
        "--probes",
        "all",
        "--max-overhead",
        "1",
    ]);
    rec.wait_attached();
    let load = server.sysbench_load("oltp_read_write", 4, 10);
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let report = load.join().unwrap();
    assert!(
        sysbench_number(&report, "transactions:") > 100.0,
        "{report}"
    );
    let s = rec.summary();
    // The governor's looks (what it had spent and allowed), detaches,
    // attaches and alarms, without the plans: for the messages below.
    let trace: String = rec
        .stderr()
        .lines()
        .filter(|l| {
            l.starts_with("governor: t=") || l.contains(" took ") || l == &"governor: alarm"
        })
        .map(|l| l.split(" plans=").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    // The hot paths cannot all be afforded at 1% of a core under load:
    // sparse stacks first, then cut, never for good.
    for name in ["innodb.mutex.enter", "innodb.buf.page_get"] {
        let p = probe(&s, name);
        let smp = p
            .sampling
            .as_ref()
            .unwrap_or_else(|| panic!("{name} not cut: {p:?}\n{trace}"));
        eprintln!(
            "{name}: on {:.0} % of the time, windows {:?}",
            smp.attached_fraction * 100.0,
            smp.windows
                .iter()
                .map(|w| (w.start_s, w.end_s, w.calls))
                .collect::<Vec<_>>()
        );
        assert!(
            smp.attached_fraction < 0.5,
            "{name}: {:?} {:?}\n{trace}",
            smp.windows,
            s.overhead
        );
        assert!(p.stacks.sampled_every_max > 1, "{p:?}");
        // Reported as seen, exactly; the estimate only where windows are.
        assert!(p.calls > 0, "{p:?}");
        assert_eq!(smp.observed_calls, p.calls);
        let e = &smp.estimate;
        assert!(e.calls >= e.observed_calls as f64, "{p:?}");
        assert!(e.calls_bound.is_finite(), "{p:?}");
    }
    let o = &s.overhead;
    let spent = o.probes_pct_of_core;
    let spent_all = spent;
    let full: f64 = s
        .probes
        .iter()
        .filter_map(|p| p.sampling.as_ref())
        .map(|smp| smp.projected_full_pct_of_core)
        .sum();
    // Hits between a switch-off and the kernel's detach are paid and
    // counted, but the governor cannot shorten them: removing an uprobe
    // takes the target's mmap lock, and under this load it took up to ~1 s
    // for the hottest probe in one run of four (4.7 % and 6.6 % of a core
    // in all, where the rest spent ~1.5 %, 2026-11-27). The budget bounds
    // what the governor decides: the rest.
    let lag = o.switched_off_pct_of_core;
    assert!(lag >= 0.0 && lag <= spent, "{o:?}");
    assert!(o.switched_off_hits > 0 || lag == 0.0, "{o:?}");
    eprintln!(
        "all probes: spent {spent:.2}% of a core ({lag:.2}% in the detach lag); fully on ~{full:.1}%"
    );
    let spent = spent - lag;
    // 1% of a core over every 10 s window, the window starting idle: an
    // 8 s recording may spend up to 10 × 1% / 8 = 1.25% (the floor at the
    // budget, gone since 2026-11-27, allowed 2.25%), plus the hits while
    // the probes were being attached, a tick's lag, and the on-windows of
    // probes at their minimum duty (none within 19 s). Fully on, these
    // probes cost 40–55% of a core in quiet runs here; 1.62% measured
    // (2026-11-27).
    assert!(
        spent < 2.25,
        "spent {spent}% of a core on a 1% budget:\n{}",
        rec.stderr()
    );
    assert!(o.agent_cpu_pct_of_core > 0.0);
    assert!(o.agent_max_rss_kb > 1000);
    let text = rec.file("summary.txt");
    assert!(
        text.contains("overhead: probe hits cost the server"),
        "{text}"
    );
    // The host's idle share over the recording (/proc/stat), and the
    // estimate called a lower bound exactly when it says saturated.
    let idle = o
        .host_cpu_idle_pct
        .expect("host_cpu_idle_pct in summary.json");
    assert!((0.0..=100.0).contains(&idle), "{idle}");
    assert_eq!(
        text.contains("so the per-hit estimate is a lower bound"),
        idle < innoprof::target::host_idle::SATURATED_BELOW_PCT,
        "{idle} % idle:\n{text}"
    );
    // Measured in the server: its CPU per InnoDB row read (read from its
    // memory at each look) against the model's price of the hits between
    // looks, which the governor's cuts make vary. Either a fit with a
    // sane factor, or the reason the looks could not tell.
    let rows = s
        .counters
        .iter()
        .find(|c| c.name == "innodb.rows_read")
        .expect("the work counter");
    assert!(rows.count.unwrap_or(0) > 100_000, "{rows:?}");
    // At 1 % the hot probes are on for a few looks only: a fit or the
    // reason the looks could not tell (the 10 % recording below must fit).
    match (&o.in_target, &o.in_target_note) {
        (Some(t), None) => check_in_target(t, spent_all, &text),
        (None, Some(why)) => {
            eprintln!("not measured in the server: {why}");
            assert!(
                why.contains("too uncertain") || why.contains("did not vary"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");

    // At 10 % on a saturated host (two sysbench threads on two cores) the
    // governor watches the hot probes in spread windows: the server's CPU
    // per row read against the model's price between looks gives the
    // factor where the windows move the cost enough against the server's
    // own swings. 20 ms windows once a second leave one look in ~14 with
    // the hot probes on, so it often cannot tell (2 of 6 15 s recordings
    // fitted here, 2026-11-29; docs/OVERHEAD.md): a fit is checked, a
    // refusal must say it was too uncertain, with its interval.
    let mut tries = Vec::new();
    for _ in 0..2 {
        let mut rec = Recording::start(&[
            "--pid",
            &pid,
            "--duration",
            "15s",
            "--probes",
            "all",
            "--max-overhead",
            "10",
            "--no-cpu",
            "--interval",
            "1s",
        ]);
        rec.wait_attached();
        let load = server.sysbench_load("oltp_read_write", 2, 17);
        let (code, _, rec) = rec.finish();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        load.join().unwrap();
        let s = rec.summary();
        let o = s.overhead.clone();
        // The hits while switched off (trapped, paid, not calls) are in the
        // series per interval, and add up to the summary's exactly: what
        // the probes cost within an interval can be priced from it.
        let series: serde_json::Value = serde_json::from_str(&rec.file("timeseries.json")).unwrap();
        let off: u64 = series["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["callsite"].is_null())
            .map(|p| p["off_hits"].as_u64().unwrap())
            .sum();
        assert_eq!(off, o.switched_off_hits, "{o:?}");
        assert!(off > 0, "the governor switched probes off: {o:?}");
        // And their modelled cost, each interval's hits at that interval's
        // measured price, adds up to the summary's, priced over the whole
        // recording: the same kernel figures split in time (measured equal
        // to 0.001 %), while the governor moved the price by switching.
        let series_ns: f64 = series["points"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["callsite"].is_null())
            .map(|p| p["cost_ns"].as_u64().unwrap() as f64)
            .sum();
        let summary_ns = o.probes_pct_of_core / 100.0 * s.duration_s * 1e9;
        assert!(
            (series_ns - summary_ns).abs() <= 0.01 * summary_ns,
            "series {series_ns:.0} ns, summary {summary_ns:.0} ns: {o:?}"
        );
        match (&o.in_target, &o.in_target_note) {
            (Some(t), None) => {
                check_in_target(t, o.probes_pct_of_core, &rec.file("summary.txt"));
                // The governor charges the measured factor once it is
                // measured (after 20 looks; the model before): 15 s
                // against a 10 s window that starts idle may spend 2
                // windows' worth (13.3 % of a core), plus the detach lag,
                // the model's share of it at most the factor times over.
                let lag = o.switched_off_pct_of_core * t.fit.factor;
                assert!(
                    t.pct_of_core < t.fit.factor * 10.0 * 20.0 / 15.0 + lag + 1.0,
                    "{t:?} {o:?}"
                );
                tries.clear();
                break;
            }
            (None, Some(why)) if why.contains("too uncertain") && why.contains(" looks") => {
                tries.push(why.clone())
            }
            other => panic!("{other:?}"),
        }
    }
    if !tries.is_empty() {
        eprintln!("not measured in the server, twice: {tries:?}");
    }
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// A fit of what the probes cost measured in the server: the looks it
/// took, its interval around it, a factor the model can be off by in
/// this VM, its share of a core and the summary's line.
fn check_in_target(t: &innoprof::model::summary::InTargetSummary, model_pct: f64, text: &str) {
    eprintln!("in the server: {t:?}");
    assert!(t.fit.looks >= innoprof::cost::in_target::MIN_LOOKS, "{t:?}");
    assert!(
        t.fit.factor_low <= t.fit.factor && t.fit.factor <= t.fit.factor_high,
        "{t:?}"
    );
    assert_eq!(t.fit.work, "innodb.rows_read");
    // The model prices the hits themselves; what the server pays around
    // them adds to that, not a multiple of it (1.13-1.58x measured).
    assert!((0.8..3.0).contains(&t.fit.factor), "{t:?}");
    assert!(
        (t.pct_of_core - t.fit.factor * model_pct).abs() < 1e-6,
        "{t:?} {model_pct}"
    );
    assert!(
        text.contains("measured in the server: ~") && text.contains("governor looks"),
        "{text}"
    );
}

/// Issue 50, S1 under the default governor, in one recording: the seed's
/// load (sysbench updating a 1-row table, a reader selecting it ten times
/// a second) with the reader's REPEATABLE READ snapshot opened 3 s into a
/// 12 s recording. The undo walk (`innodb.undo.prev_version`) is watched
/// in windows spread over the whole recording, so the walk's climb shows
/// in its windows and in the per-interval series, >= 10x after the
/// snapshot; and the finding quotes the rate since it opened. Before, the
/// probe was watched 0-0.7 s and then "off (last 11.3 s not projected)".
fn undo_walk_through_a_snapshot_opened_mid_recording(server_name: &str) {
    use std::process::Stdio;
    let _k = kernel_lock();
    // The governor's trace on innoprof's stderr, for the failure messages.
    std::env::set_var("INNOPROF_DEBUG_GOVERNOR", "1");
    let server = Server::with_hot_row(server_name);
    let mut sysbench = server.sysbench(&[
        "run",
        "oltp_update_non_index",
        "--tables=1",
        "--table-size=1",
        "--threads=2",
        "--time=300",
    ]);
    sysbench.stdout(Stdio::null()).stderr(Stdio::null());
    let load = Background::spawn(sysbench);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = server.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--duration",
        "12s",
        "--probes",
        "default",
        "--no-cpu",
        "--max-overhead",
        "1",
        "--interval",
        "1s",
    ]);
    rec.wait_attached();
    // Autocommit reads for 3 s, then the same reads in one snapshot, back
    // to back: each walks the row's versions for tens of ms, and a 20 ms
    // window once every few seconds misses reads 0.1 s apart a time in
    // five (all three windows after the snapshot saw none in one CI run
    // in four, 2026-11-29): the walk must be there to be watched.
    let mut reader = String::from("USE sbtest;\n");
    for _ in 0..30 {
        reader.push_str("SELECT c FROM sbtest1 LIMIT 1; SELECT SLEEP(0.1);\n");
    }
    reader.push_str("START TRANSACTION WITH CONSISTENT SNAPSHOT;\n");
    for _ in 0..20_000 {
        reader.push_str("SELECT c FROM sbtest1 LIMIT 1; SELECT SLEEP(0.002);\n");
    }
    let reader = server.sql_background(&reader);
    let (code, stdout, rec) = rec.finish();
    drop(reader);
    drop(load);
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let s = rec.summary();
    let undo = "innodb.undo.prev_version";
    let p = probe(&s, undo);
    // The per-interval series: calls per second watched, before the
    // snapshot (first 3 s) and after it had been open a second.
    let series: serde_json::Value = serde_json::from_str(&rec.file("timeseries.json")).unwrap();
    let (mut before, mut after) = ((0.0, 0.0), (0.0, 0.0));
    for pt in series["points"].as_array().unwrap() {
        if pt["probe"] != undo || !pt["callsite"].is_null() {
            continue;
        }
        let (t, calls, on) = (
            pt["t_ms"].as_u64().unwrap(),
            pt["calls"].as_u64().unwrap() as f64,
            pt["attached_ms"].as_u64().unwrap() as f64 / 1e3,
        );
        if t <= 3_000 {
            before = (before.0 + calls, before.1 + on);
        } else if t >= 5_000 {
            after = (after.0 + calls, after.1 + on);
        }
    }
    let rate = |(c, s): (f64, f64)| c / f64::max(s, 1e-3);
    let series_ratio = rate(after) / rate(before).max(1.0);
    eprintln!(
        "S1 {server_name}: undo walk {:.0}/s watched before the snapshot ({:.2} s on), {:.0}/s after ({:.2} s on): x{series_ratio:.0}; sampling {:?}\n{stdout}",
        rate(before),
        before.1,
        rate(after),
        after.1,
        p.sampling.as_ref().map(|x| (&x.estimate, x.windows.len(), x.projected_full_pct_of_core)),
    );
    // The governor's looks, attaches and detaches, for the messages.
    let trace: String = rec
        .stderr()
        .lines()
        .filter(|l| l.contains(" took ") || l.starts_with("governor: t="))
        .map(|l| l.split(" plans=").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    // Watched after the snapshot, every second (a window each period).
    assert!(
        after.1 > 0.0,
        "never watched after the snapshot: {p:?}\n{trace}"
    );
    assert!(series_ratio >= 10.0, "x{series_ratio:.1}: {p:?}\n{trace}");
    if let Some(smp) = &p.sampling {
        let w = &smp.windows;
        // A window every period, or every few where one window and the
        // detach after it overspend the probe's share: the walk runs at
        // 100,000-570,000 calls/s once the snapshot is open, so the
        // shortest window (20 ms) alone costs 0.4-2.3 % of a core, and the
        // governor opens one every 2-5 periods (`MAX_STRIDE`): at least one
        // in the 7 s after the snapshot has been open a second.
        let watched_after: Vec<_> = w.iter().filter(|w| w.start_s >= 5.0).collect();
        assert!(!watched_after.is_empty(), "{w:?}\n{trace}");
        for pair in w[1..].windows(2) {
            assert!(pair[1].start_s - pair[0].start_s <= 5.3, "{w:?}\n{trace}");
        }
        let switches = s
            .overhead
            .attach
            .as_ref()
            .map_or(0, |a| a.governor_switches);
        eprintln!(
            "S1 {server_name}: {} windows, {switches} governor switches ({:.1}/s), spent {:.2} % of a core",
            w.len(),
            switches as f64 / s.duration_s,
            s.overhead.probes_pct_of_core
        );
        let r = |ws: &[&innoprof::cost::estimate::OnWindow]| {
            ws.iter().map(|w| w.calls).sum::<u64>() as f64
                / ws.iter()
                    .map(|w| w.end_s - w.start_s)
                    .sum::<f64>()
                    .max(1e-3)
        };
        let early: Vec<_> = w.iter().filter(|w| w.end_s <= 3.0).collect();
        let ratio = r(&watched_after) / r(&early).max(1.0);
        eprintln!("S1 {server_name}: windows' rate x{ratio:.0} after the snapshot");
        assert!(ratio >= 10.0, "x{ratio:.1}: {w:?}");
        assert!(smp.estimate.covered_s >= s.duration_s - 0.01, "{smp:?}");
        // The estimate over the recording, against the walk at the
        // baseline's rate throughout: >= 10x.
        let baseline_total = r(&early).max(1.0) * s.duration_s;
        assert!(
            smp.estimate.calls >= 10.0 * baseline_total,
            "{:?} vs {baseline_total}",
            smp.estimate
        );
    }
    // The finding quotes the walk since the snapshot opened.
    let f = s
        .findings
        .iter()
        .find(|f| f.rule == "many_row_versions")
        .unwrap_or_else(|| panic!("no many_row_versions finding: {:?}", s.findings));
    if p.sampling.is_some() {
        assert!(
            f.evidence[0].text.contains("since the snapshot opened"),
            "{:?}",
            f.evidence
        );
    }
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

#[test]
fn s1_undo_walk_through_a_snapshot_opened_mid_recording_mariadb_11_4_5() {
    undo_walk_through_a_snapshot_opened_mid_recording("mariadb-11.4.5");
}

#[test]
fn s1_undo_walk_through_a_snapshot_opened_mid_recording_mariadb_10_2_11() {
    undo_walk_through_a_snapshot_opened_mid_recording("mariadb-10.2.11");
}

/// One recording of `sql.commit` on a running load, with the server's own
/// `Com_commit` advance over the same seconds.
struct CommitRecording {
    rec: Recording,
    stdout: String,
    /// Com_commit's advance while recording.
    truth: f64,
}

fn record_commits(server: &Server, seconds: u64, max_overhead: &str) -> CommitRecording {
    use std::time::{Duration, Instant};
    let pid = server.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--duration",
        &format!("{seconds}s"),
        "--probes",
        "default",
        "--no-cpu",
        "--max-overhead",
        max_overhead,
    ]);
    rec.wait_attached();
    let before = server.status("Com_commit");
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds).saturating_sub(started.elapsed()));
    let truth = (server.status("Com_commit") - before) as f64;
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    CommitRecording { rec, stdout, truth }
}

/// sql.commit's rate (calls per second) and the bound it holds to against
/// the server's: exact where the probe stayed on (the external reads of
/// Com_commit and innoprof's clock are a few ms apart at each end, ~1 % of
/// 10 s), else its estimate's bound over the seconds it covers.
fn commit_rate_bound(c: &CommitRecording, seconds: u64) -> (f64, f64) {
    let s = c.rec.summary();
    let p = probe(&s, "sql.commit");
    let skew = 0.01 * c.truth + 10.0;
    match &p.sampling {
        None => {
            assert!(
                (p.calls as f64 - c.truth).abs() <= skew,
                "sql.commit counted {} where Com_commit advanced {}",
                p.calls,
                c.truth
            );
            (c.truth / seconds as f64, skew / seconds as f64)
        }
        Some(smp) => {
            let e = &smp.estimate;
            assert!(
                (e.calls - c.truth).abs() <= e.calls_bound + skew,
                "sql.commit estimated {:.0} ± {:.0} where Com_commit advanced {}; windows {:?}",
                e.calls,
                e.calls_bound,
                c.truth,
                smp.windows
            );
            assert!(e.calls_bound <= 0.10 * e.calls, "{e:?}");
            (
                c.truth / seconds as f64,
                (e.calls_bound + skew) / e.covered_s,
            )
        }
    }
}

/// Issue 50: on a steady sysbench load, under the default governor with
/// the default probe set (dear probes beside it, so the governor has
/// something to cut), `sql.commit`'s count is the server's own
/// `Com_commit` advance over the same seconds: exact where the probe stayed
/// on, else inside its estimate's bound, and that bound no wider than 10 %
/// of the estimate (the ratio to InnoDB's transaction-id counter, read
/// from memory, carries it). Issue 53: the same load recorded again with
/// the governor off, and `diff` of the two (governed differently: probes
/// cut in one, every probe on throughout the other) reads each
/// side's sql.commit at the server's rate within that side's bound, and
/// says how much of each recording each probe was watched.
#[test]
fn sql_commit_matches_com_commit_on_a_steady_load() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    let load = server.sysbench_open_ended("oltp_read_write", 2, &[]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let seconds = 10;
    let governed = record_commits(&server, seconds, "1");
    let ungoverned = record_commits(&server, seconds, "off");
    let report = load.stop();
    assert!(report.exited_early.is_none(), "{}", report.log);
    for c in [&governed, &ungoverned] {
        eprintln!(
            "Com_commit advanced {} in {seconds} s; sql.commit {:?}\n{}",
            c.truth,
            probe(&c.rec.summary(), "sql.commit"),
            c.stdout
        );
        assert!(c.truth > 1_000.0, "too little load: {} commits", c.truth);
    }
    let (g_truth, g_bound) = commit_rate_bound(&governed, seconds);
    let (u_truth, u_bound) = commit_rate_bound(&ungoverned, seconds);
    // `diff` compares each at its own rate (a recording diffed with itself
    // once read sql.commit at a third of what the server committed: what a
    // cut probe saw, divided by the whole recording).
    let out = tempfile::tempdir().unwrap();
    let d = run_innoprof(&[
        "diff",
        ungoverned.rec.out.to_str().unwrap(),
        governed.rec.out.to_str().unwrap(),
        "--out",
        out.path().join("d").to_str().unwrap(),
    ]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("d/diff.json")).unwrap())
            .unwrap();
    let rows = json["probes"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|p| p["name"] == "sql.commit")
        .unwrap_or_else(|| panic!("{json}"));
    let (base, now) = (
        row["baseline_calls_per_sec"].as_f64().unwrap(),
        row["incident_calls_per_sec"].as_f64().unwrap(),
    );
    assert!(
        (now - g_truth).abs() <= g_bound + 0.01 * g_truth,
        "diff reads the governed sql.commit at {now:.1}/s; the server committed {g_truth:.1}/s: {row}"
    );
    assert!(
        (base - u_truth).abs() <= u_bound + 0.01 * u_truth,
        "diff reads the ungoverned sql.commit at {base:.1}/s; the server committed {u_truth:.1}/s: {row}"
    );
    let governed_summary = governed.rec.summary();
    assert_eq!(
        row["incident_estimated"],
        probe(&governed_summary, "sql.commit").sampling.is_some(),
        "{row}"
    );
    assert_eq!(row["baseline_estimated"], false, "{row}");
    // Each probe's watched share, as each recording's summary has it.
    for r in rows {
        let name = r["name"].as_str().unwrap();
        assert_eq!(r["baseline_watched_share"], 1.0, "{r}");
        let share = probe(&governed_summary, name).attached_fraction();
        assert!(
            (r["incident_watched_share"].as_f64().unwrap() - share).abs() < 1e-9,
            "{name}: {r} against {share}"
        );
    }
    let text = std::fs::read_to_string(out.path().join("d/diff.txt")).unwrap();
    let cut_much: Vec<&str> = governed_summary
        .probes
        .iter()
        .filter(|p| p.attached_fraction() <= 1.0 / 3.0 && p.calls > 0)
        .map(|p| p.name.as_str())
        .collect();
    for name in &cut_much {
        assert!(
            text.contains(&format!("{name} was watched 100 % of the baseline")),
            "{name} cut to a third or less, not said:\n{text}"
        );
    }
}
