//! The page from a hand-made summary and a hand-written timeseries.json
//! (the renderer's input contract; real recordings are tested end to end).

use super::*;

/// A small summary as summary.json holds it (also used by the bundle tests).
pub(crate) fn summary() -> Summary {
    serde_json::from_str(
        r#"{
  "tool": "innoprof", "tool_version": "0.1.0",
  "target": {"pid": 42, "comm": "mysqld", "binary": "/opt/<evil>/mysqld", "build_id": "abcd",
             "server": {"family": "mariadb", "version": {"major": 10, "minor": 2, "patch": 11}},
             "server_version": "10.2.11", "position_independent": true, "has_symtab": true,
             "has_debug_info": true, "debug_file": null},
  "catalog": null, "started_unix_ms": 1763800000000, "duration_s": 10.0,
  "end_reason": "duration", "complete": true,
  "probes": [{
    "name": "innodb.mutex.enter", "description": "d", "measure": "latency", "cost": "hot",
    "status": "attached", "reason": null,
    "symbols": [{"name": "PolicyMutex<TTASEventMutex<GenericPolicy> >::enter(unsigned int)", "raw": "_Z", "address": "0x1",
                 "file_offset": "0x1", "table": "symtab", "clone": null, "entry": "push", "calls": 3}],
    "skipped": [], "calls": 3, "calls_per_sec": 0.3, "wait_ns_total": 3000, "wait_ns_max": 1500,
    "wait_ns_avg": 1000, "wait_ns_p50": 1024, "wait_ns_p99": 1500,
    "histogram": [{"low_ns": 512, "high_ns": 1024, "count": 2}, {"low_ns": 1024, "high_ns": 2048, "count": 1}],
    "callsites": [{"site": "btr0cur.cc:304", "file": null, "line": 304, "calls": 3, "wait_ns_total": 3000, "wait_ns_max": 1500}],
    "stacks": {"distinct": 1, "lost_calls": 0, "folded_by_wait": null, "folded_by_count": null}
  }],
  "drops": {"stack_map_full": 0, "stack_errors": 0, "stack_key_map_full": 0, "inflight_map_full": 0,
            "returns_without_entry": 0, "stats_map_full": 0, "callsite_map_full": 0}
}"#,
    )
    .unwrap()
}

const TIMESERIES: &str = r#"{
  "interval_ms": 1000, "started_unix_ms": 1763800000000,
  "points": [
    {"t_ms": 1000, "probe": "innodb.mutex.enter", "callsite": null, "calls": 2, "wait_ns": 2000},
    {"t_ms": 1000, "probe": "innodb.mutex.enter", "callsite": "btr0cur.cc:304", "calls": 2, "wait_ns": 2000},
    {"t_ms": 2000, "probe": "innodb.mutex.enter", "callsite": null, "calls": 1, "wait_ns": 1000},
    {"t_ms": 2000, "probe": "innodb.mutex.enter", "callsite": "btr0cur.cc:304", "calls": 1, "wait_ns": 1000},
    {"t_ms": 1000, "probe": "innodb.redo.row_id", "callsite": null, "calls": 7, "wait_ns": 0},
    {"t_ms": 2000, "probe": "innodb.redo.row_id", "callsite": null, "calls": 9, "wait_ns": 0}
  ]
}"#;

#[test]
fn page_has_tables_charts_and_escapes_binary_names() {
    let s = summary();
    let ts = TimeSeries::parse(TIMESERIES.as_bytes()).unwrap();
    let svg = crate::report::flamegraph::render("main;work<int> 3\n", "on-CPU", "samples")
        .unwrap()
        .unwrap();
    let flames = [FlameGraph {
        title: "on-CPU <all>".into(),
        svg: String::from_utf8(svg).unwrap(),
    }];
    let html = render(&Page {
        summary: &s,
        metadata: None,
        timeseries: Some(&ts),
        cpu_flamegraphs: &[],
        probe_flamegraphs: &flames,
    });
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("PolicyMutex&lt;TTASEventMutex&lt;GenericPolicy&gt; &gt;::enter"));
    assert!(html.contains("/opt/&lt;evil&gt;/mysqld") && !html.contains("<evil>"));
    assert!(html.contains("btr0cur.cc:304"));
    assert_eq!(html.matches("<svg class=\"chart histogram\"").count(), 1);
    // Wait by probe, calls/s by probe, wait by call site.
    assert_eq!(html.matches("<svg class=\"chart timeseries\"").count(), 3);
    // Two probes in the calls/s chart, one line each.
    assert!(html.contains(">innodb.redo.row_id<"));
    assert_eq!(html.matches("<iframe class=\"flamegraph\"").count(), 1);
    // Inside srcdoc the SVG is escaped once more: work&lt;int&gt; → work&amp;lt;int&amp;gt;.
    assert!(
        html.contains("work&amp;lt;int&amp;gt;"),
        "frame names escaped inside srcdoc"
    );
    assert!(html.contains("on-CPU &lt;all&gt;"));
}

#[test]
fn no_timeseries_section_without_the_file() {
    let s = summary();
    let html = render(&Page {
        summary: &s,
        metadata: None,
        timeseries: None,
        cpu_flamegraphs: &[],
        probe_flamegraphs: &[],
    });
    assert!(!html.contains("id=\"timeseries\""));
    assert!(!html.contains("<iframe"));
    assert!(!html.contains("http://") && !html.contains("https://"));
}

#[test]
fn counters_section_shows_exact_counts_and_why_not() {
    let mut s = summary();
    let html = |s: &Summary| {
        render(&Page {
            summary: s,
            metadata: None,
            timeseries: None,
            cpu_flamegraphs: &[],
            probe_flamegraphs: &[],
        })
    };
    assert!(
        !html(&s).contains("id=\"counters\""),
        "no section without counters"
    );
    s.counters = serde_json::from_str(
        r#"[{"name": "innodb.dict_sys.row_ids", "description": "row ids", "status": "read",
             "location": "dict_sys -> +0x30 (8 bytes, row_id_t)", "start": 512, "end": 60512,
             "count": 60000, "per_sec": 6000.0, "window_s": 10.0},
            {"name": "innodb.redo.lsn", "status": "unavailable", "reason": "no <DWARF>",
             "start": null, "end": null, "count": null, "per_sec": null, "window_s": 10.0}]"#,
    )
    .unwrap();
    let page = html(&s);
    assert!(page.contains("id=\"counters\""));
    assert!(page.contains("<td class=\"n\">60000</td>"), "{page}");
    assert!(page.contains("dict_sys -&gt; +0x30"));
    assert!(page.contains("1 counters not read") && page.contains("no &lt;DWARF&gt;"));
}

/// The busiest latch gets a view: its line over time (its call sites'
/// rows summed, the other latch's left out), its call sites and a pointer
/// to the stacks; a site outside the series is said to be missing from it.
#[test]
fn latch_view_has_its_line_sites_and_stacks() {
    let mut s = summary();
    let p = &mut s.probes[0];
    p.callsites = serde_json::from_str(
        r#"[{"site": "btr0cur.cc:304", "file": null, "line": 304, "latch": "index_lock", "calls": 3, "wait_ns_total": 3000, "wait_ns_max": 1500},
            {"site": "row0ins.cc:9", "file": null, "line": 9, "latch": "index_lock", "calls": 1, "wait_ns_total": 500, "wait_ns_max": 500},
            {"site": "dict0dict.cc:7", "file": null, "line": 7, "latch": "dict_sys_mutex", "calls": 5, "wait_ns_total": 100, "wait_ns_max": 50}]"#,
    )
    .unwrap();
    p.latches = serde_json::from_str(
        r#"[{"latch": "dict_sys_mutex", "calls": 5, "wait_ns_total": 100, "wait_ns_max": 50},
            {"latch": "index_lock", "calls": 4, "wait_ns_total": 3500, "wait_ns_max": 1500}]"#,
    )
    .unwrap();
    p.stacks.folded_by_wait = Some("innodb.mutex.enter.folded".into());
    let ts = TimeSeries::parse(TIMESERIES.as_bytes()).unwrap();
    let line = ts
        .sites_line(
            "innodb.mutex.enter",
            &["btr0cur.cc:304", "row0ins.cc:9"],
            "index_lock",
        )
        .unwrap();
    assert_eq!(line.points, [(1.0, 2000.0), (2.0, 1000.0)]);
    assert!(ts
        .sites_line("innodb.mutex.enter", &["dict0dict.cc:7"], "d")
        .is_none());
    let flames = [FlameGraph {
        title: "w".into(),
        svg: "<svg height=\"10\"></svg>".into(),
    }];
    let html = render(&Page {
        summary: &s,
        metadata: None,
        timeseries: Some(&ts),
        cpu_flamegraphs: &[],
        probe_flamegraphs: &flames,
    });
    let view = html
        .find("id=\"latch-index_lock\"")
        .expect("index_lock's view");
    let dict = html
        .find("id=\"latch-dict_sys_mutex\"")
        .expect("dict_sys_mutex's view");
    assert!(view < dict, "busiest (by wait) first");
    let index_view = &html[view..dict];
    assert!(index_view.contains("chart timeseries"), "{index_view}");
    assert!(index_view.contains("row0ins.cc:9") && !index_view.contains("dict0dict.cc:7"));
    assert!(
        index_view.contains("1 of its 2 call sites are not among"),
        "{index_view}"
    );
    assert!(index_view.contains("href=\"#waitstacks\""));
}
