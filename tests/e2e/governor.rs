//! The overhead governor and the per-hit cost calibration, against a
//! fixture whose true call count is known at every moment, and a real
//! server under sysbench.

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

#[test]
fn governor_duty_cycles_a_dear_probe_and_scales_its_count_to_the_truth() {
    let _k = kernel_lock();
    let paced = Paced::start(20000, 20);
    let pid = paced.pid.to_string();

    // ~20k calls/s at a few µs each is several % of a core: far over 0.5%.
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "8s",
        "--probe",
        "paced_hit",
        "--no-cpu",
        "--max-overhead",
        "0.5",
    ]);
    rec.wait_attached();
    let (code, stdout, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let log = paced.stop();

    let s = rec.summary();
    let p = probe(&s, "paced_hit");
    let sampling = &p["sampling"];
    assert_eq!(sampling["state"], "duty_cycled", "{p}");
    let fraction = sampling["attached_fraction"].as_f64().unwrap();
    assert!(fraction > 0.02 && fraction < 0.5, "attached {fraction}");
    let projected = sampling["projected_full_pct_of_core"].as_f64().unwrap();
    assert!(
        projected > 1.5,
        "fully on it would cost {projected}% of a core"
    );

    // The scaled estimate of the calls in the window against the truth.
    let start_ms = s["started_unix_ms"].as_f64().unwrap();
    let end_ms = start_ms + s["duration_s"].as_f64().unwrap() * 1000.0;
    let truth = log.calls_at(end_ms) - log.calls_at(start_ms);
    let estimate = p["calls"].as_f64().unwrap() - sampling["calls_before_start"].as_f64().unwrap();
    let error = (estimate - truth).abs() / truth;
    eprintln!(
        "paced_hit: truth {truth:.0} calls, estimate {estimate:.0} from {} seen, attached {:.1}%, error {:.1}%",
        sampling["observed_calls"],
        fraction * 100.0,
        error * 100.0
    );
    assert!(error < 0.2, "estimate {estimate} vs truth {truth}");

    // The spend stays near the budget; fully on it would be far above it.
    let o = &s["overhead"];
    assert_eq!(o["budget_pct_of_core"].as_f64(), Some(0.5));
    let spent = o["probes_pct_of_core"].as_f64().unwrap();
    assert!(spent < 1.0, "spent {spent}% of a core on a 0.5% budget");
    assert!(
        spent < projected / 3.0,
        "spent {spent}% vs {projected}% fully on"
    );
    assert!(stdout.contains("sampled: paced_hit attached"), "{stdout}");
    assert!(stdout.contains(&format!("~{}", p["calls"])), "{stdout}");
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
    // The hot paths cannot all be afforded at 1% of a core under load.
    for name in ["innodb.mutex.enter", "innodb.buf.page_get"] {
        let p = probe(&s, name);
        let f = p["sampling"]["attached_fraction"].as_f64();
        assert!(f.is_some_and(|f| f < 0.5), "{name}: {p}");
        // Still reported, as a scaled estimate from what was seen.
        assert!(p["sampling"]["observed_calls"].as_u64().unwrap() > 0, "{p}");
        assert!(p["calls"].as_u64().unwrap() >= p["sampling"]["observed_calls"].as_u64().unwrap());
    }
    let o = &s["overhead"];
    let spent = o["probes_pct_of_core"].as_f64().unwrap();
    let full: f64 = s["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["sampling"]["projected_full_pct_of_core"].as_f64())
        .sum();
    eprintln!("all probes: spent {spent:.2}% of a core; fully on ~{full:.1}%");
    // 1% of a core over any 10 s window, the window starting idle: an 8 s
    // recording may spend up to (10 + 8) × 1% / 8 = 2.25%, plus the hits
    // while the probes were being attached. Fully on, these probes cost
    // 40–55% of a core in quiet runs here.
    assert!(
        spent < 3.5,
        "spent {spent}% of a core on a 1% budget:\n{}",
        rec.stderr()
    );
    assert!(o["agent_cpu_pct_of_core"].as_f64().unwrap() > 0.0);
    assert!(o["agent_max_rss_kb"].as_u64().unwrap() > 1000);
    let text = rec.file("summary.txt");
    assert!(
        text.contains("overhead: probe hits cost the server"),
        "{text}"
    );
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}
