//! `record --interval`: per-interval deltas read while the probes stay
//! attached, checked exactly against the C++ fixture and for shape against
//! a real server whose load changes midway.

use std::time::{SystemTime, UNIX_EPOCH};

use innoprof::model::finding::Severity;
use innoprof_e2e::*;
use serde_json::Value;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `timeseries.json` points, after checking `timeseries.csv` holds the
/// same rows.
fn points(rec: &Recording) -> (Value, Vec<Value>) {
    let json: Value = serde_json::from_str(&rec.file("timeseries.json")).unwrap();
    let points = json["points"].as_array().unwrap().clone();
    let csv = rec.file("timeseries.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("t_ms,probe,callsite,calls,wait_ns,attached_ms,off_hits,cost_ns,calls_per_s,wait_ns_per_s")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), points.len(), "same rows in CSV and JSON");
    for (row, p) in rows.iter().zip(&points) {
        // The two rates last: per second watched, empty where never on.
        let mut fields: Vec<&str> = row.rsplitn(3, ',').collect();
        let (wait_rate, calls_rate, row) = (fields.remove(0), fields.remove(0), fields.remove(0));
        let on_s = u(&p["attached_ms"]) as f64 / 1000.0;
        for (rate, n) in [(calls_rate, u(&p["calls"])), (wait_rate, u(&p["wait_ns"]))] {
            if on_s > 0.0 {
                let want = n as f64 / on_s;
                let got: f64 = rate
                    .parse()
                    .unwrap_or_else(|_| panic!("rate {rate:?} in {row}"));
                assert!(
                    (got - want).abs() <= 0.001 + want * 1e-9,
                    "{got} per s watched, {want} from {row}"
                );
            } else {
                assert_eq!(rate, "", "no rate for an interval never watched: {row}");
            }
        }
        let row = &row;
        let expected = format!(
            "{},{},{},{},{},{},{},{}",
            p["t_ms"],
            p["probe"].as_str().unwrap(),
            p["callsite"].as_str().unwrap_or(""),
            p["calls"],
            p["wait_ns"],
            p["attached_ms"],
            p["off_hits"],
            p["cost_ns"]
        );
        assert_eq!(*row, expected);
    }
    (json, points)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// Sum of `field` over the points of `probe` with this call site.
fn sum(points: &[Value], probe: &str, callsite: Option<&str>, field: &str) -> u64 {
    points
        .iter()
        .filter(|p| p["probe"] == probe && p["callsite"].as_str() == callsite)
        .map(|p| u(&p[field]))
        .sum()
}

/// Per interval end, the probe total's `calls` (or `wait_ns`).
fn curve(points: &[Value], probe: &str, field: &str) -> Vec<(u64, u64)> {
    points
        .iter()
        .filter(|p| p["probe"] == probe && p["callsite"].is_null())
        .map(|p| (u(&p["t_ms"]), u(&p[field])))
        .collect()
}

/// The fixture calls slowly (every ~50 ms) for 2 s, then fast (every ~1 ms)
/// for 2 s, from 13 call sites. The 500 ms intervals add up exactly to the
/// summary's totals, per probe and per call site, and the rate changes in
/// the interval where the fixture says it switched.
#[test]
fn interval_deltas_add_up_and_follow_the_fixture_phases() {
    let _k = kernel_lock();
    const SLOW_MS: u64 = 2000;
    const FAST_MS: u64 = 2000;
    const SITES: u64 = 13;
    let dir = tempfile::tempdir().unwrap();
    let counted = "name = 'fixture.counted'\nsymbols = ['fixture_counted']\n\
                   measure = 'latency'\ncost = 'rare'\n";
    let catalog = fixture_catalog(
        dir.path(),
        &[FIXTURE_MUTEX_PROBE, counted, FIXTURE_SLEEP_PROBE],
    );
    let args = [
        "phases",
        &SLOW_MS.to_string(),
        &FAST_MS.to_string(),
        &SITES.to_string(),
    ];
    let mut fx = Fixture::spawn_with(&fixture_binary(true), &args);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--no-cpu",
        "--duration",
        "5s",
        "--interval",
        "500ms",
        "--catalog",
        catalog.to_str().unwrap(),
        "--probes",
        "all",
    ]);
    rec.wait_attached();
    let done = fx.run_calls();
    let (code, stdout, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    let (p2_start, p2_end) = {
        let v: Vec<u64> = done.split(' ').map(|x| x.parse().unwrap()).collect();
        (v[0], v[1])
    };

    let s = rec.summary();
    let (json, points) = points(&rec);
    assert_eq!(json["interval_ms"], 500);
    assert_eq!(s.timeseries.as_ref().unwrap().interval_ms, 500);
    assert!(
        stdout.contains("time series:") && stdout.contains("timeseries.json, timeseries.csv"),
        "{stdout}"
    );

    // Exact: the intervals add up to summary.json, per probe and per site.
    for name in ["fixture.mutex.enter", "fixture.counted", "fixture.sleep"] {
        let p = probe(&s, name);
        assert_eq!(sum(&points, name, None, "calls"), p.calls, "{name} calls");
        assert_eq!(
            sum(&points, name, None, "wait_ns"),
            p.wait_ns_total,
            "{name} wait"
        );
    }
    // The intervals' modelled cost, each priced at its own interval's
    // measured programs' run time, adds up to the summary's, priced over
    // the whole recording (the same kernel figures, split in time).
    let series_ns: u64 = points
        .iter()
        .filter(|p| p["callsite"].is_null())
        .map(|p| u(&p["cost_ns"]))
        .sum();
    let summary_ns = s.overhead.probes_pct_of_core / 100.0 * s.duration_s * 1e9;
    assert!(
        summary_ns > 0.0 && (series_ns as f64 - summary_ns).abs() <= 0.01 * summary_ns,
        "series {series_ns} ns, summary {summary_ns:.0} ns"
    );
    // No governor here: every probe was on for the whole of each interval.
    let mut previous = 0;
    for (t, on) in curve(&points, "fixture.sleep", "attached_ms") {
        let length = t - previous;
        assert!(
            on.abs_diff(length) <= 50,
            "attached {on} ms of an interval of {length} ms"
        );
        previous = t;
    }
    let enter = probe(&s, "fixture.mutex.enter");
    assert_eq!(enter.callsites.len() as u64, SITES);
    let in_series: Vec<String> = points
        .iter()
        .filter(|p| p["probe"] == "fixture.mutex.enter" && p["t_ms"] == points[0]["t_ms"])
        .filter_map(|p| p["callsite"].as_str().map(String::from))
        .collect();
    assert_eq!(
        in_series.len(),
        11,
        "10 busiest sites and other: {in_series:?}"
    );
    assert_eq!(in_series[10], "other");
    let mut other_calls = 0;
    for c in &enter.callsites {
        let label = c.site.as_str();
        assert!(label.starts_with("fixture.cc:10"), "{label}");
        let calls = c.calls;
        if in_series.iter().any(|l| l == label) {
            assert_eq!(
                sum(&points, "fixture.mutex.enter", Some(label), "calls"),
                calls
            );
            assert_eq!(
                sum(&points, "fixture.mutex.enter", Some(label), "wait_ns"),
                c.wait_ns_total
            );
        } else {
            other_calls += calls;
        }
    }
    assert_eq!(
        sum(&points, "fixture.mutex.enter", Some("other"), "calls"),
        other_calls
    );

    // The rate follows the phases. Interval k covers (t_ms - 500, t_ms].
    let started = u(&json["started_unix_ms"]);
    let switch = p2_start - started;
    let stop = p2_end - started;
    let counted = curve(&points, "fixture.counted", "calls");
    assert!(counted.len() >= 9, "5 s in 500 ms intervals: {counted:?}");
    let mut slow = Vec::new();
    let mut fast = Vec::new();
    for &(end, calls) in &counted {
        let begin = end.saturating_sub(500);
        if end <= switch {
            slow.push(calls);
        } else if begin >= switch && end <= stop {
            fast.push(calls);
        } else if begin >= stop + 20 {
            assert_eq!(calls, 0, "idle after the fixture finished: {counted:?}");
        }
    }
    assert!(
        slow.len() >= 2 && fast.len() >= 2,
        "{counted:?} (switch at {switch} ms)"
    );
    // Every ~50 ms: at most ~10 per 500 ms. Every ~1 ms: hundreds.
    assert!(
        slow.iter().all(|&c| (5..=12).contains(&c)),
        "slow phase: {slow:?}"
    );
    assert!(fast.iter().all(|&c| c >= 100), "fast phase: {fast:?}");
    // The first interval above the slow rate is the one holding the switch.
    let first_fast = counted.iter().find(|(_, c)| *c > 12).unwrap().0;
    assert!(
        first_fast > switch && first_fast - 500 <= switch,
        "switch at {switch} ms, first fast interval ends at {first_fast}: {counted:?}"
    );
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// Acceptance scenario S3: InnoDB mutex waits over time, without
/// performance_schema. MariaDB 10.2.11 under sysbench with 2 threads for
/// 4 s, then 16 threads for 4 s; the 1 s series of the contended-wait probe
/// is clearly higher in the second half.
#[test]
fn s3_mutex_waits_follow_load_change() {
    let _k = kernel_lock();
    let server = Server::start("mariadb-10.2.11", &[]);
    // Tables prepared and the buffer pool warm before the recording.
    server
        .sysbench_load("oltp_read_write", 2, 2)
        .join()
        .unwrap();
    let pid = server.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--no-cpu",
        "--no-stacks",
        "--duration",
        "10s",
        "--interval",
        "1s",
        "--probes",
        "innodb.sync.wait_event,innodb.rwlock.s_wait,innodb.redo.write_up_to",
    ]);
    rec.wait_attached();
    let low_start = unix_ms();
    let low = server
        .sysbench_load("oltp_read_write", 2, 4)
        .join()
        .unwrap();
    let high_start = unix_ms();
    let high = server
        .sysbench_load("oltp_read_write", 16, 4)
        .join()
        .unwrap();
    let high_end = unix_ms();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "{}", rec.stderr());
    assert!(sysbench_number(&low, "transactions:") > 100.0, "{low}");
    assert!(sysbench_number(&high, "transactions:") > 100.0, "{high}");

    let s = rec.summary();
    // The finding says it first: threads queue on one latch, named by
    // where it was created, with the busiest call site.
    for f in &s.findings {
        eprintln!(
            "S3 finding: [{:?}] {} {:?}",
            f.severity, f.title, f.evidence
        );
    }
    let first = &s.findings[0];
    assert!(
        first.rule == "latch_hotspot"
            && first.severity != Severity::Info
            && first
                .title
                .starts_with("Threads queue on one InnoDB latch: created in ")
            && first.evidence[1].text.starts_with("busiest call site: "),
        "{first:?}"
    );
    let (json, points) = points(&rec);
    let started = u(&json["started_unix_ms"]);
    let name = "innodb.sync.wait_event";
    assert_eq!(sum(&points, name, None, "calls"), probe(&s, name).calls);
    assert_eq!(
        sum(&points, name, None, "wait_ns"),
        probe(&s, name).wait_ns_total
    );
    // Whole intervals inside each phase (sysbench connects in the first
    // fraction of a second of its run).
    let within = |from: u64, to: u64| -> Vec<u64> {
        curve(&points, name, "wait_ns")
            .into_iter()
            .filter(|(end, _)| {
                let (begin, end) = (started + end - 1000, started + end);
                begin >= from + 300 && end <= to
            })
            .map(|(_, w)| w)
            .collect()
    };
    let low_waits = within(low_start, high_start);
    let high_waits = within(high_start, high_end);
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    eprintln!(
        "S3 {name} wait ns per 1 s interval: 2 threads {low_waits:?}, 16 threads {high_waits:?}; curve {:?}",
        curve(&points, name, "wait_ns")
    );
    // What a DBA would read: the wait curve, second by second.
    for (end, w) in curve(&points, name, "wait_ns") {
        let t = started + end;
        let phase = if t <= high_start {
            "2 threads"
        } else {
            "16 threads"
        };
        eprintln!(
            "S3   t={:>5.1}s  {name} wait {:>8.1} ms  ({phase})",
            end as f64 / 1000.0,
            w as f64 / 1e6
        );
    }
    assert!(
        low_waits.len() >= 2 && high_waits.len() >= 2,
        "{low_waits:?} {high_waits:?}"
    );
    assert!(
        mean(&high_waits) > 3.0 * mean(&low_waits).max(1e6),
        "16 threads should wait clearly more: {low_waits:?} vs {high_waits:?}"
    );
    assert!(
        high_waits.iter().all(|&w| w as f64 > mean(&low_waits)),
        "every 16-thread interval above the 2-thread mean: {low_waits:?} vs {high_waits:?}"
    );
    // Contended shared rw-locks per call site: real `file.cc:LINE` rows
    // that add up to the summary's call sites.
    let s_wait = "innodb.rwlock.s_wait";
    let summary_sites: u64 = probe(&s, s_wait).callsites.iter().map(|c| c.calls).sum();
    assert!(summary_sites > 0, "no contended s-lock under 16 threads");
    let site_rows: Vec<&Value> = points
        .iter()
        .filter(|p| p["probe"] == s_wait && !p["callsite"].is_null())
        .collect();
    assert_eq!(
        site_rows.iter().map(|p| u(&p["calls"])).sum::<u64>(),
        summary_sites
    );
    assert!(site_rows.iter().all(|p| {
        let label = p["callsite"].as_str().unwrap();
        label == "other"
            || label
                .rsplit_once(':')
                .is_some_and(|(file, line)| file.contains('.') && line.parse::<u32>().is_ok())
    }));
    let (progs, links) = leftovers_after_exit();
    assert!(progs.is_empty() && links.is_empty(), "{progs:?} {links:?}");
}

/// Rates are over the watched window only (attach to the start of
/// detaching): with `--interval` the series detaches the probes before
/// the results are built, and that time once counted, making calls/s low.
/// On the paced fixture, calls/s with and without `--interval` match the
/// fixture's own rate over the recorded window (from its log: on a loaded
/// 2-core machine it falls short of the nominal rate) within 1.5 %, and
/// duration_s is within 0.5 s of --duration. (Counting an 82 ms detach
/// made it 2.6 % low here; each run is within 0.1 % with the fix.)
#[test]
fn interval_recording_rates_use_the_watched_window() {
    let _k = kernel_lock();
    innoprof(); // built before the fixture's 60 s start
    let paced = Paced::start(500, 60);
    let pid = paced.pid.to_string();
    let mut runs = Vec::new();
    for interval in [false, true] {
        let mut args = vec![
            "--pid",
            &pid,
            "--force",
            "--no-cpu",
            "--duration",
            "3s",
            "--probe",
            "paced_hit",
        ];
        if interval {
            args.extend(["--interval", "500ms"]);
        }
        let mut rec = Recording::start(&args);
        rec.wait_attached();
        let (code, _, rec) = rec.finish();
        assert_eq!(code, Some(0), "{}", rec.stderr());
        let s = rec.summary();
        let rate = probe(&s, "paced_hit").calls_per_sec;
        let duration = s.duration_s;
        let start_ms = s.started_unix_ms as f64;
        runs.push((interval, rate, duration, start_ms));
    }
    // Past both windows in the fixture's log.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let log = paced.stop();
    let mut ratios = Vec::new();
    for (interval, rate, duration, start_ms) in runs {
        let end_ms = start_ms + duration * 1000.0;
        let truth = (log.calls_at(end_ms) - log.calls_at(start_ms)) / duration;
        eprintln!(
            "interval {interval}: {rate:.1} calls/s over {duration:.3} s; fixture {truth:.1}"
        );
        assert!(
            (duration - 3.0).abs() <= 0.5,
            "duration_s {duration} for --duration 3s"
        );
        assert!(
            (rate / truth - 1.0).abs() <= 0.015,
            "interval {interval}: {rate} calls/s, the fixture made {truth}/s"
        );
        ratios.push(rate / truth);
    }
    assert!(
        (ratios[1] / ratios[0] - 1.0).abs() <= 0.05,
        "reported/true {} with --interval vs {} without",
        ratios[1],
        ratios[0]
    );
}
