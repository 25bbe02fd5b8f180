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
        svg: String::from_utf8(svg.svg).unwrap(),
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

/// One waiter -> holder edge as summary.json's `who.blocking` holds it
/// (a statement's id is its fingerprint's, as the recorder makes it).
fn edge(
    probe: &str,
    waiter: Option<&str>,
    holder: Option<&str>,
    holder_connection: Option<u64>,
    holder_thread: Option<u32>,
    calls: u64,
    wait_ns_total: u64,
) -> crate::model::who::Blocking {
    let id = |f: &str| crate::record::statements::statement_id(f);
    crate::model::who::Blocking {
        probe: probe.into(),
        waiter_statement: waiter.map(id),
        waiter_fingerprint: waiter.map(str::to_string),
        holder_statement: holder.map(id),
        holder_fingerprint: holder.map(str::to_string),
        holder_connection,
        holder_thread,
        calls,
        wait_ns_total,
        ..Default::default()
    }
}

const UPDATE: &str = "UPDATE sbtest1 SET k=k+? WHERE id=?";
const SELECT: &str = "SELECT c FROM sbtest1 WHERE id=?";
const X_LOCK: &str = "innodb.rwlock.x_lock";
const S_LOCK: &str = "innodb.rwlock.s_lock";

/// The summary with statements attributed and these edges.
fn with_blocking(blocking: Vec<crate::model::who::Blocking>) -> Summary {
    let mut s = summary();
    s.probes[0].name = X_LOCK.into();
    s.probes[0].wait_ns_total = 20_000_000;
    s.who = Some(crate::model::who::Who {
        how: "THD from TLS".into(),
        attributed: true,
        statements: vec![crate::model::who::StatementResult {
            id: crate::record::statements::statement_id(SELECT),
            fingerprint: SELECT.into(),
            sample: None,
            executions: 10,
            connections: 1,
            users: vec!["app_ro".into()],
            calls: 10,
            wait_ns_total: 9_000_000,
            probes: vec![],
            cpu_samples: 0,
            connection_calls: vec![],
        }],
        blocking,
        ..Default::default()
    });
    s
}

fn page(s: &Summary) -> String {
    render(&Page {
        summary: s,
        metadata: None,
        timeseries: None,
        cpu_flamegraphs: &[],
        probe_flamegraphs: &[],
    })
}

/// The part of the page from `from` to the next `to` (or the end).
fn part<'a>(html: &'a str, from: &str, to: &str) -> &'a str {
    let at = html.find(from).unwrap_or_else(|| panic!("no {from}"));
    let rest = &html[at..];
    let end = rest[from.len()..]
        .find(to)
        .map_or(rest.len(), |e| e + from.len());
    &rest[..end]
}

/// The holder -> waiter graph: one holder box per holder statement (its
/// connections merged), a thread running none by its tid, background
/// waiters as one box; one line per (holder, waiter) with its wait and
/// calls, and the same edges in a sortable table.
#[test]
fn blocking_graph_merges_a_holder_statements_connections() {
    let s = with_blocking(vec![
        edge(
            X_LOCK,
            Some(SELECT),
            Some(UPDATE),
            Some(11),
            None,
            10,
            5_000_000,
        ),
        edge(
            X_LOCK,
            Some(SELECT),
            Some(UPDATE),
            Some(12),
            None,
            5,
            3_000_000,
        ),
        edge(X_LOCK, None, Some(UPDATE), Some(11), None, 2, 1_000_000),
        edge(X_LOCK, Some(SELECT), None, None, Some(4242), 1, 1_000_000),
    ]);
    let html = page(&s);
    let statements = html.find("id=\"statements\"").unwrap();
    let blocking = html
        .find("<h3 id=\"blocking\">Who blocks whom</h3>")
        .unwrap();
    assert!(statements < blocking, "inside Statements and connections");
    assert!(
        html.contains("href=\"#blocking\""),
        "linked from the statements' note"
    );
    assert!(html.contains("rw_lock_t::writer_thread in MySQL 5.6–8.0 and MariaDB 10.2–10.5, sux_lock::writer in MariaDB 10.6+"));
    assert!(html.contains("Hold time is not measured"));
    let g = part(&html, "id=\"blocking-innodb.rwlock.x_lock\"", "<h");
    assert!(
        g.contains("18 waits on a recorded holder, 10.00 ms (50% of the probe's wait)"),
        "{g}"
    );
    let svg = part(g, "<svg class=\"chart blocking\"", "</svg>");
    // Holders left, waiters right: UPDATE once (connections 11 and 12
    // merged), thread 4242; SELECT and the background waiter.
    assert_eq!(svg.matches("<g class=\"node\">").count(), 4, "{svg}");
    assert_eq!(
        svg.matches(&format!(">{UPDATE}</text>")).count(),
        1,
        "{svg}"
    );
    assert_eq!(
        svg.matches(&format!(">{SELECT}</text>")).count(),
        1,
        "{svg}"
    );
    assert!(svg.contains(">thread 4242 (no statement)</text>"), "{svg}");
    assert!(
        svg.contains(">background / unknown statement</text>"),
        "{svg}"
    );
    assert!(svg.contains("holder connection(s): 11, 12"), "{svg}");
    assert!(
        svg.contains("held up 9.00 ms in 17 waits · connections 11, 12"),
        "{svg}"
    );
    // UPDATE -> SELECT, UPDATE -> background, thread -> SELECT.
    assert_eq!(svg.matches("<path class=\"edge\"").count(), 3, "{svg}");
    assert!(svg.contains(">8.00 ms in 15 waits</text>"), "{svg}");
    assert!(svg.contains(">1.00 ms in 1 wait</text>"), "{svg}");
    // The heaviest line is the widest.
    assert!(svg.contains("stroke-width=\"16.0\""), "{svg}");
    assert!(svg.contains("stroke-width=\"2.0\""), "{svg}");
    assert!(!g.contains("others"), "nothing cut: {g}");
    let table = part(g, "<table class=\"data sortable blocking\">", "</table>");
    assert_eq!(
        table.matches("<tr>").count(),
        4,
        "head and 3 edges: {table}"
    );
    let first = part(table, "<tbody><tr>", "</tr>");
    assert!(first.contains(&format!("<code>{UPDATE}</code>")), "{first}");
    assert!(first.contains("<td>11, 12</td>"), "{first}");
    assert!(
        first.contains("<td class=\"n\" data-v=\"8000000\">80%</td>"),
        "{first}"
    );
    assert!(
        table.contains("<td>thread 4242 (no statement)</td><td>-</td>"),
        "{table}"
    );
    assert!(html.contains("<script>document.querySelectorAll('table.sortable')"));
}

/// Past 8 boxes a side the rest is one "others" box, said under the
/// graph; the table keeps every edge. Past 3 probes, the rest are named.
#[test]
fn blocking_graph_sums_past_the_cut_and_probes_past_three() {
    let fp = |i: u64| format!("UPDATE t{i} SET c=? WHERE id=?");
    let mut edges: Vec<_> = (0..12)
        .map(|i| {
            edge(
                X_LOCK,
                Some(SELECT),
                Some(&fp(i)),
                Some(100 + i),
                None,
                1,
                1_000_000 * (20 - i),
            )
        })
        .collect();
    edges.push(edge(
        S_LOCK,
        Some(SELECT),
        Some(UPDATE),
        Some(7),
        None,
        3,
        3_000,
    ));
    edges.push(edge(
        "innodb.a",
        Some(SELECT),
        Some(UPDATE),
        Some(7),
        None,
        2,
        2_000,
    ));
    edges.push(edge(
        "innodb.b",
        Some(SELECT),
        Some(UPDATE),
        Some(7),
        None,
        1,
        1_000,
    ));
    let html = page(&with_blocking(edges));
    let x = html.find("id=\"blocking-innodb.rwlock.x_lock\"").unwrap();
    let s = html.find("id=\"blocking-innodb.rwlock.s_lock\"").unwrap();
    let a = html.find("id=\"blocking-innodb.a\"").unwrap();
    assert!(x < s && s < a, "most blocking wait first");
    assert!(
        !html.contains("id=\"blocking-innodb.b\""),
        "3 graphs at most"
    );
    assert!(
        html.contains(
            "1 more probe has edges, with less blocking wait: <code>innodb.b</code> 1.00 us"
        ),
        "{html}"
    );
    let g = part(&html, "id=\"blocking-innodb.rwlock.x_lock\"", "<h4");
    let svg = part(g, "<svg class=\"chart blocking\"", "</svg>");
    // 7 holders by name, the 5 with least wait (t7..t11: 13+12+11+10+9 ms) in one box.
    assert_eq!(svg.matches("<g class=\"node\">").count(), 8 + 1, "{svg}");
    assert!(svg.contains(&format!(">{}</text>", fp(6))), "{svg}");
    assert!(!svg.contains(&format!(">{}</text>", fp(7))), "{svg}");
    assert!(svg.contains(">others: 5 more holders</text>"), "{svg}");
    assert!(svg.contains(">held up 55.00 ms in 5 waits</text>"), "{svg}");
    assert!(
        svg.contains(&format!("\n{} (9.00 ms)", fp(11))),
        "others' tooltip: {svg}"
    );
    assert_eq!(svg.matches("<path class=\"edge\"").count(), 8, "{svg}");
    assert!(
        g.contains(
            "Past 8 boxes a side, 5 holders (55.00 ms) with less wait are summed in the grey"
        ),
        "{g}"
    );
    let table = part(g, "<table class=\"data sortable blocking\">", "</table>");
    assert_eq!(table.matches("<tr>").count(), 1 + 12, "{table}");
}

/// Fingerprints come from the server's memory: escaped everywhere (box,
/// tooltip, table); a long one is cut in its box and whole in its tooltip.
#[test]
fn blocking_graph_escapes_and_cuts_fingerprints() {
    let hostile = "</title><script>alert(1)</script>";
    let long = format!("SELECT {} FROM t WHERE id=?", "a, ".repeat(40));
    let html = page(&with_blocking(vec![
        edge(X_LOCK, Some(&long), Some(hostile), Some(5), None, 4, 4_000),
        edge(X_LOCK, Some(hostile), Some(&long), Some(6), None, 1, 1_000),
    ]));
    assert!(!html.contains("<script>alert"), "unescaped");
    assert!(!html.contains("</title><script>"), "unescaped");
    let escaped = "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;";
    let g = part(&html, "id=\"blocking\"", "</table>");
    // Two boxes, two tooltips, two lines' tooltips, two table cells.
    assert_eq!(g.matches(escaped).count(), 8, "{g}");
    let cut: String = long.chars().take(59).collect::<String>() + "…";
    assert!(g.contains(&format!(">{cut}</text>")), "{g}");
    assert!(
        g.contains(&format!("<title>{long}\n")),
        "whole in the tooltip: {g}"
    );
    assert!(
        g.contains(&format!("<code>{long}</code>")),
        "whole in the table"
    );
}

#[test]
fn no_blocking_section_without_edges() {
    let html = page(&with_blocking(vec![]));
    assert!(html.contains("id=\"statements\"") && html.contains(SELECT));
    assert!(!html.contains("id=\"blocking\"") && !html.contains("chart blocking"));
    assert!(!html.contains("href=\"#blocking\""));
    // The statements table still sorts.
    assert_eq!(html.matches("<script>").count(), 1);
}

/// Statements per latch: a sortable table inside "Statements and
/// connections", one row per (latch, probe, statement); none without rows.
#[test]
fn statements_per_latch_are_a_sortable_table() {
    let mut s = with_blocking(vec![]);
    assert!(!page(&s).contains("id=\"latch-statements\""));
    s.who.as_mut().unwrap().latch_statements = vec![crate::model::who::LatchStatement {
        probe: S_LOCK.into(),
        latch: "created in buf_block_init (buf0buf.cc:1021)".into(),
        statement: crate::record::statements::statement_id(SELECT),
        fingerprint: SELECT.into(),
        calls: 7,
        wait_ns_total: 3_000_000,
        raw_latch: None,
    }];
    let html = page(&s);
    let table = part(&html, "id=\"latch-statements\"", "</table>");
    assert!(
        table.contains("created in buf_block_init (buf0buf.cc:1021)"),
        "{table}"
    );
    assert!(table.contains(S_LOCK) && table.contains(SELECT), "{table}");
    assert!(table.contains("data-v=\"3000000\""), "{table}");
    assert!(table.contains("table class=\"data sortable\""), "{table}");
    assert!(
        html.find("id=\"statements\"").unwrap() < html.find("id=\"latch-statements\"").unwrap()
    );
}

/// A recording time past what RFC 3339 can write (the year 10000, or past
/// u64 milliseconds) reads as "-": it used to panic `report`.
#[test]
fn a_start_time_out_of_range_reads_as_a_dash() {
    assert_eq!(rfc3339_or_dash(1_763_800_000_000), "2025-11-22T08:26:40Z");
    for ms in [253_402_300_800_000, u64::MAX] {
        assert_eq!(rfc3339_or_dash(ms), "-", "{ms}");
    }
    let mut s = summary();
    s.started_unix_ms = u128::MAX;
    let html = page(&s);
    assert!(html.contains("<td>- for 10.0 s"), "{html}");
}
