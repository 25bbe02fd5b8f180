//! `report.html`: the whole recording in one file a person opens in a
//! browser, offline — no script or font or style from the network. Tables,
//! latency histograms and time series as inline SVG drawn here, the flame
//! graphs as inferno drew them. Built with maud: templates checked at
//! compile time, and every interpolated value HTML-escaped (symbol names
//! are full of `<` and `>`) unless wrapped in `PreEscaped` on purpose.

pub mod blocking;
pub mod charts;
pub mod flame;
pub mod timeseries;

use std::time::{Duration, UNIX_EPOCH};

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::metadata::Metadata;
use super::table;
use crate::model::summary::{ProbeStatus, Summary};
use crate::model::top_symbols::TopSymbols;
use crate::plan::catalog::Measure;
use crate::text::units;
use timeseries::TimeSeries;

/// Rows of the tables (summary.json has more).
const TOP_SYMBOL_ROWS: usize = 30;
const CALLSITE_ROWS: usize = 20;

/// A flame graph to show: inferno's SVG.
pub struct FlameGraph {
    pub title: String,
    pub svg: String,
}

pub struct Page<'a> {
    pub summary: &'a Summary,
    pub metadata: Option<&'a Metadata>,
    pub timeseries: Option<&'a TimeSeries>,
    /// On-CPU, then off-CPU: shown with the CPU tables.
    pub cpu_flamegraphs: &'a [FlameGraph],
    /// The wait probes' stacks: shown last.
    pub probe_flamegraphs: &'a [FlameGraph],
}

pub fn render(page: &Page) -> String {
    let s = page.summary;
    let title = format!("innoprof: {} pid {}", s.target.server, s.target.pid);
    let page_html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                h1 { (title) " " span.badge.(if s.complete { "ok" } else { "partial" }) { (table::end_text(s.end_reason)) } }
                (about(page))
                (findings(s))
                h2 #summary { "Wait probes" }
                (probe_table(s))
                (counters(s))
                (histograms(s))
                (cpu(s, page.cpu_flamegraphs))
                // Every recording has a series now: below the CPU flame
                // graph, which the first screen shows.
                @if let Some(ts) = page.timeseries { (time_series(ts, &s.counters)) }
                (latches(s, page.timeseries, !page.probe_flamegraphs.is_empty()))
                (callsites(s))
                (who(s))
                (statements(s))
                // Long (settings, transactions, status): below the graphs.
                @if let Some(st) = &s.server_state { (server_state(st)) }
                @if let Some(m) = page.metadata { (host(&m.host)) }
                h2 #overhead { "Overhead" }
                (cost(page))
                pre { (super::overhead::render(s)) }
                @if !page.probe_flamegraphs.is_empty() {
                    h2 #waitstacks { "Wait stacks" }
                    p.note { "Per probe: width is wait time (calls for count-only probes). Click a frame to zoom, Ctrl-F to search." }
                    @if let Some(note) = super::overhead::stack_sampling_note(s) { p.note { "Stacks: " (note) "." } }
                    (flamegraphs(page.probe_flamegraphs))
                }
                @if let Some(m) = page.metadata { (files(m)) }
            }
        }
    }
    .into_string();
    with_contents(&page_html)
}

/// The page with a table of contents under its title: one link per
/// section (`h2` with an id) in the order they come, so that it lists
/// exactly the sections this recording has.
fn with_contents(page: &str) -> String {
    let mut links = String::new();
    let mut rest = page;
    while let Some(at) = rest.find("<h2 id=\"") {
        let after = &rest[at + 8..];
        let Some(id_end) = after.find('"') else { break };
        let id = &after[..id_end];
        let Some(open_end) = after.find('>') else {
            break;
        };
        let Some(close) = after.find("</h2>") else {
            break;
        };
        let title = &after[open_end + 1..close];
        links.push_str(&format!("<a href=\"#{id}\">{title}</a> "));
        rest = &after[close..];
    }
    match page.find("</h1>") {
        Some(h1) if !links.is_empty() => format!(
            "{}</h1><nav class=\"toc\">{}</nav>{}",
            &page[..h1],
            links.trim_end(),
            &page[h1 + 5..]
        ),
        _ => page.to_string(),
    }
}

/// A bundle's Unix time in ms as RFC 3339, or `-` where it is none
/// (humantime writes years up to 9999 and fails past them).
fn rfc3339_or_dash(ms: u64) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    match UNIX_EPOCH.checked_add(Duration::from_millis(ms)) {
        Some(t) if write!(text, "{}", humantime::format_rfc3339_seconds(t)).is_ok() => text,
        _ => "-".into(),
    }
}

fn about(page: &Page) -> Markup {
    let s = page.summary;
    let t = &s.target;
    let time = rfc3339_or_dash;
    let m = page.metadata;
    html! {
        table.about {
            @if let Some(m) = m {
                tr { th { "host" } td { (m.host.hostname) " (kernel " (m.host.kernel) ")" } }
            }
            tr { th { "server" } td { (t.server) " — " (t.comm) " pid " (t.pid) } }
            @if let Some(place) = t.placement.describe() {
                tr { th { "runs in" } td { (place) } }
            }
            tr { th { "binary" } td { code { (t.binary) } @if let Some(id) = &t.build_id { " build-id " code { (id) } } } }
            tr { th { "recorded" } td {
                (time(u64::try_from(s.started_unix_ms).unwrap_or(u64::MAX))) " for " (format!("{:.1}", s.duration_s)) " s"
                @if let Some(m) = m { " (until " (time(m.ended_unix_ms)) ")" }
            } }
            @if let Some(line) = table::segments_line(s) {
                tr { th { "restarts" } td { (line) } }
            }
            @if let Some(m) = m {
                tr { th { "command" } td { code { (m.command_line.join(" ")) } } }
            }
        }
    }
}

/// The machine, as a ticket needs it (metadata.json's `host`).
fn host(h: &crate::target::host::HostInfo) -> Markup {
    html! {
        h2 #host { "Host" }
        table.about {
            @for (label, value) in super::host_text::rows(h) {
                tr { th { (label) } td { (value) } }
            }
        }
    }
}

/// What innoprof cost the server and what it could not hold: under
/// Overhead, after everything about the server.
fn cost(page: &Page) -> Markup {
    let s = page.summary;
    let Some(m) = page.metadata else {
        return html! {};
    };
    html! {
        table.about {
                tr { th { "overhead (estimate)" } td {
                    (units::ns(m.overhead.total_ns)) " of server CPU in probe hits, "
                    (format!("{:.2}", m.overhead.probes_pct_of_core)) " % of one CPU"
                    @if !m.overhead.calibrated { span.note { " — " (m.overhead.method) } }
                    @if let Some(line) = crate::report::overhead::saturation_line(&s.overhead) {
                        br; span.note { (line) }
                    }
                } }
                @if let Some(line) = crate::report::overhead::in_target_line(&s.overhead) {
                    tr { th { "overhead (in the server)" } td { (line) } }
                }
                @if let Some(seen) = &s.overhead.probes_seen_in_samples {
                    tr { th { "overhead (CPU samples)" } td {
                        (format!("{:.2} % of one CPU [{:.2}, {:.2}]", seen.pct_of_core, seen.pct_of_core_lo, seen.pct_of_core_hi))
                        span.note { " — " (seen.samples) " samples in the kernel's uprobe handling" }
                    } }
                }
                @if let Some(line) = s.cpu.as_ref().and_then(crate::report::overhead::cpu_profiler_line) {
                    tr { th { "overhead (CPU profiler)" } td { (line) } }
                }
                tr { th { "lost" } td {
                    (m.dropped.stack_lost_calls) " probe hits without a stack; "
                    (m.dropped.cpu_samples_lost) " CPU samples and " (m.dropped.offcpu_blocks_lost) " off-CPU blocks not counted (maps full)"
                } }
        }
    }
}

/// The bundle's files, linked, each said what it is by the output
/// registry (`crate::bundle::outputs`), also for a bundle older than metadata.json's
/// `file_info`.
fn files(m: &Metadata) -> Markup {
    html! {
        h2 #files { "Files of this recording" }
        table.data {
            thead { tr { th { "file" } th { "what it is" } } }
            tbody {
                @for f in &m.files {
                    tr {
                        td { a href=(f) { code { (f) } } }
                        td { (crate::model::files::describe(f).map_or_else(String::new, crate::model::files::BundleFile::what)) }
                    }
                }
            }
        }
    }
}

/// What is wrong, first: each finding with its evidence linked to the
/// section below that shows it.
fn findings(s: &Summary) -> Markup {
    html! {
        h2 #findings { "Findings" }
        @if s.findings.is_empty() {
            p.note { "No rule fired: nothing stood out. The tables below have every number." }
        }
        @for f in &s.findings {
            div.finding.(f.severity.to_string()) {
                h3 { span.sev { (f.severity) } " " (f.title) }
                ul {
                    @for e in &f.evidence {
                        li { (e.text) " " a href=(format!("#{}", e.anchor)) { "(see " (e.anchor) ")" } }
                    }
                }
                p { b { "Likely cause: " } (f.cause) }
                @if !f.next.is_empty() {
                    p { b { "Next:" } }
                    ol { @for n in &f.next { li { (n) } } }
                }
            }
        }
    }
}

/// What the server said of itself over SQL at the start and end.
fn server_state(st: &crate::model::server_state::ServerState) -> Markup {
    use crate::findings::thousands;
    use crate::model::files::innodb_status_file;
    let latest = st.latest();
    let (hll_start, hll_end) = st.history_list_lengths();
    let hll = |n: Option<u64>| n.map(|n| thousands(n as f64)).unwrap_or_else(|| "-".into());
    // Global status that moved, most first.
    let mut moved: Vec<(&String, u64)> = st
        .end
        .iter()
        .flat_map(|e| e.status.keys())
        .filter_map(|k| st.status_delta(k).filter(|d| *d > 0).map(|d| (k, d)))
        .collect();
    moved.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    html! {
        h2 #server-state { "Server state" }
        @if let Some(e) = &st.error {
            p.note { "Not read: " (e) }
        }
        @if latest.is_some() {
            p.note {
                "Read over SQL as " code { (st.user) } " on " code { (st.socket) }
                " at the start and end (SHOW ENGINE INNODB STATUS in "
                @let (start, end) = (innodb_status_file("start"), innodb_status_file("end"));
                a href=(start) { (start) } " and " a href=(end) { (end) } ")."
            }
            table {
                tr { th { "history list length" } td { (hll(hll_start)) " → " (hll(hll_end)) } }
                @if let Some(l) = latest {
                    @for (k, v) in &l.variables { tr { th { (k) } td { (v) } } }
                    @if let Some(p) = &l.performance_schema {
                        tr { th { "performance_schema" } td {
                            (p.enabled) " of " (p.instruments) " instruments enabled, " (p.timed) " timed ("
                            (p.synch_timed) " wait/synch); consumers: " (p.consumers.join(", "))
                        } }
                    }
                }
            }
            @if let Some(l) = latest {
                h3 { "Oldest transactions (at the end)" }
                @if l.transactions.is_empty() { p.note { "None open." } } @else {
                    table {
                        tr { th { "trx" } th { "connection" } th { "user@host" } th { "open s" } th { "state" } th { "isolation" } th { "rows locked / modified" } th { "read view" } th { "statement" } }
                        @for t in &l.transactions {
                            tr {
                                td { (t.trx_id) }
                                td { (t.connection.map(|c| c.to_string()).unwrap_or_default()) }
                                td { (t.user.as_deref().unwrap_or("")) "@" (t.host.as_deref().unwrap_or("")) }
                                td.num { (t.age_s) }
                                td { (t.state) }
                                td { (t.isolation.as_deref().unwrap_or("")) }
                                td.num { (t.rows_locked.unwrap_or(0)) " / " (t.rows_modified.unwrap_or(0)) }
                                td { (if t.read_view { "yes" } else { "" }) }
                                td { code { (t.query.as_deref().unwrap_or("")) } }
                            }
                        }
                    }
                }
                @let written = st.no_pk_tables_written();
                @if !written.is_empty() {
                    h3 { "Tables without a primary key written while recording" }
                    ul { @for (t, n) in &written { li { code { (t) } " — ~" (thousands(*n as f64)) " rows changed (InnoDB's counter and estimate)" } } }
                }
                @if !l.errors.is_empty() {
                    h3 { "Not read" }
                    ul { @for e in &l.errors { li { (e.what) ": " (e.error) } } }
                }
            }
            @if !st.samples.is_empty() {
                (state_samples(st))
            }
            @if !moved.is_empty() {
                h3 { "Global status: what moved while recording" }
                table {
                    tr { th { "variable" } th { "delta" } th { "per second" } }
                    @for (k, d) in moved.iter().take(40) {
                        tr { td { (k) } td.num { (thousands(*d as f64)) } td.num {
                            (st.status_rate(k).map_or_else(|| "-".into(), |r| format!("{r:.1}")))
                        } }
                    }
                }
            }
        }
    }
}

/// Rows of the interval table shown at most (summary.json has them all).
const MAX_SAMPLE_ROWS: usize = 300;

/// The cheap state read at each `--interval`: one row per sample, rates
/// over the time since the previous one.
fn state_samples(st: &crate::model::server_state::ServerState) -> Markup {
    use crate::findings::thousands;
    let t0 = st
        .start
        .as_ref()
        .map(|s| s.taken_unix_ms)
        .or_else(|| st.samples.first().map(|p| p.taken_unix_ms))
        .unwrap_or(0);
    let opt = |n: Option<u64>| n.map(|n| thousands(n as f64)).unwrap_or_else(|| "-".into());
    let rate = |prev: Option<&crate::model::server_state::StatePoint>,
                p: &crate::model::server_state::StatePoint,
                k: &str| { p.rate_since(prev?, k).map(thousands) };
    html! {
        h3 { "At each interval" }
        p.note {
            (st.samples.len()) " samples of the cheap state (history list length from InnoDB's "
            code { "trx_rseg_history_len" } " metric, the oldest transaction, global status); rates are per second since the previous sample."
            @if st.samples.len() > MAX_SAMPLE_ROWS { " The first " (MAX_SAMPLE_ROWS) " are shown; " (crate::model::files::SUMMARY_JSON) " has all." }
        }
        table {
            tr { th { "s" } th { "history list length" } th { "threads running" } th { "oldest transaction (connection, open s)" } th { "commits/s" } th { "rows read/s" } th { "rows inserted/s" } th { "rows updated/s" } th { "row lock waits" } }
            @for (i, p) in st.samples.iter().enumerate().take(MAX_SAMPLE_ROWS) {
                @let prev = if i > 0 { st.samples.get(i - 1) } else { None };
                tr {
                    td.num { (format!("{:.1}", p.taken_unix_ms.saturating_sub(t0) as f64 / 1e3)) }
                    td.num { (opt(p.history_list_length)) }
                    td.num { (opt(p.status.get("Threads_running").copied())) }
                    td { (match (p.oldest_trx_connection, p.oldest_trx_age_s) {
                        (Some(c), Some(a)) => format!("{c}, {a} s"),
                        _ => "-".into(),
                    }) }
                    td.num { (rate(prev, p, "Com_commit").unwrap_or_else(|| "-".into())) }
                    td.num { (rate(prev, p, "Innodb_rows_read").unwrap_or_else(|| "-".into())) }
                    td.num { (rate(prev, p, "Innodb_rows_inserted").unwrap_or_else(|| "-".into())) }
                    td.num { (rate(prev, p, "Innodb_rows_updated").unwrap_or_else(|| "-".into())) }
                    td.num { (opt(p.status.get("Innodb_row_lock_current_waits").copied())) }
                }
            }
        }
        @let failed: Vec<_> = st.samples.iter().flat_map(|p| p.errors.iter()).collect();
        @if let Some(e) = failed.first() {
            p.note { (failed.len()) " sample queries failed; the first: " (e.what) ": " (e.error) }
        }
    }
}

/// The in-memory counters: exact counts read from the server, no probe.
fn counters(s: &Summary) -> Markup {
    use crate::model::summary::CounterStatus;
    let read: Vec<_> = s
        .counters
        .iter()
        .filter(|c| c.status == CounterStatus::Read)
        .collect();
    let n = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    html! {
        @if !s.counters.is_empty() {
            h2 #counters { "Counters" }
            p.note { "InnoDB's own counters, read from the server's memory at start and end: exact, no cost per event." }
            @if !read.is_empty() {
                table.data {
                    thead { tr { th { "counter" } th.n { "count" } th.n { "per s" } th.n { "at start" } th.n { "at end" } th { "read at" } } }
                    tbody {
                        @for c in &read {
                            tr title=(c.description) {
                                td { (c.name) }
                                td.n { (n(c.count)) }
                                td.n { (c.per_sec.map_or_else(|| "-".to_string(), units::count)) }
                                td.n { (n(c.start)) }
                                td.n { (n(c.end)) }
                                td { code { (c.location.as_deref().unwrap_or("")) } }
                            }
                        }
                    }
                }
            }
            @let missing: Vec<_> = s.counters.iter().filter(|c| c.status != CounterStatus::Read).collect();
            @if !missing.is_empty() {
                details {
                    summary { (missing.len()) " counters not read" }
                    ul { @for c in &missing { li { b { (c.name) } " — " (c.reason.as_deref().unwrap_or("")) } } }
                }
            }
        }
    }
}

fn probe_table(s: &Summary) -> Markup {
    let attached: Vec<_> = s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .collect();
    let t = |v: Option<u64>| v.map(units::ns).unwrap_or_else(|| "-".into());
    html! {
        @if attached.is_empty() {
            p { "No wait probe attached." }
        } @else {
            table.data {
                thead { tr { th { "probe" } th { "symbol" } th.n { "calls" } th.n { "calls/s" } th.n { "total wait" } th.n { "avg" } th.n { "p50 <=" } th.n { "p99 <=" } th.n { "max" } th.n { "sampled" } } }
                tbody {
                    @for p in &attached {
                        @let timed = p.wait_ns_avg.is_some();
                        tr {
                            td { (p.name) }
                            td title=(p.symbols.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join("\n")) {
                                @match p.symbols.as_slice() {
                                    [one] => { code { (table::short(&one.name)) } }
                                    [first, rest @ ..] => { code { (table::short(&first.name)) } " (+" (rest.len()) ")" }
                                    [] => { "-" }
                                }
                            }
                            @let (calls, rate) = table::calls_cells(p);
                            td.n { (calls) }
                            td.n { (rate) }
                            td.n { @if timed { (units::ns(p.wait_ns_total)) } @else { "-" } }
                            td.n { (t(p.wait_ns_avg)) }
                            td.n { (t(p.wait_ns_p50)) }
                            td.n { (t(p.wait_ns_p99)) }
                            td.n { @if timed { (units::ns(p.wait_ns_max)) } @else { "-" } }
                            td.n title=(p.sampling.as_ref().map(|s| format!("{}\n{}", super::overhead::estimate_text(s), s.estimate.assumption)).unwrap_or_default()) {
                                (format!("{:.0} %", p.attached_fraction() * 100.0))
                                @if p.stacks.sampled_every_max > 1 { br; small { "stacks 1-in-≤" (p.stacks.sampled_every_max) } }
                            }
                        }
                    }
                }
            }
            @for p in attached.iter().filter(|p| p.sampling.is_some()) {
                @let smp = p.sampling.as_ref().expect("filtered");
                p.note {
                    b { (p.name) } " — on " (format!("{:.1}", smp.attached_fraction * 100.0)) " % of the time in "
                    (smp.windows.len()) " windows: " (super::overhead::estimate_text(smp)) "."
                }
            }
            // Each kind of bound said once, not under every probe.
            @let bounds: std::collections::BTreeSet<&str> = attached.iter().filter_map(|p| p.sampling.as_ref()).map(|s| s.estimate.assumption.as_str()).collect();
            @for b in &bounds {
                p.note { "Bound: " (b) "." }
            }
        }
        @let missing: Vec<_> = s.probes.iter().filter(|p| p.status != ProbeStatus::Attached).collect();
        @if !missing.is_empty() {
            details {
                summary { (missing.len()) " probes not attached" }
                ul { @for p in &missing { li { b { (p.name) } " — " (p.reason.as_deref().unwrap_or("")) } } }
            }
        }
    }
}

fn histograms(s: &Summary) -> Markup {
    let timed: Vec<_> = s
        .probes
        .iter()
        .filter(|p| {
            p.status == ProbeStatus::Attached && p.measure == Measure::Latency && p.calls > 0
        })
        .collect();
    html! {
        @if !timed.is_empty() {
            h2 #histograms { "Latency histograms" }
            div.grid {
                @for p in &timed {
                    figure {
                        figcaption { b { (p.name) } " — " (p.calls) " calls, p99 <= " (p.wait_ns_p99.map(units::ns).unwrap_or_default()) }
                        (charts::histogram(&p.histogram))
                    }
                }
            }
        }
    }
}

fn time_series(ts: &TimeSeries, counters: &[crate::model::summary::CounterResult]) -> Markup {
    // Counters' rows (bytes of redo, ids) get a chart of their own: their
    // scale says nothing about the probes' calls.
    let is_counter = |name: &str| counters.iter().any(|c| c.name == name);
    let (counter_rate, rate): (Vec<_>, Vec<_>) = ts
        .probe_lines(|p| ts.per_watched_s(p, p.calls))
        .into_iter()
        .partition(|l| is_counter(&l.name));
    let wait: Vec<_> = ts
        .probe_lines(|p| ts.per_watched_s(p, p.wait_ns))
        .into_iter()
        .filter(|l| !is_counter(&l.name))
        .collect();
    let any = |l: &timeseries::Line| l.points.iter().any(|p| p.1 > 0.0);
    let with_sites: Vec<&str> = ts
        .probes()
        .into_iter()
        .filter(|p| {
            ts.points
                .iter()
                .any(|x| x.probe == *p && x.callsite.is_some())
        })
        .collect();
    html! {
        h2 #timeseries { "Over time (" (ts.interval_ms) " ms intervals)" }
        p.note { "Per second each probe was watched in the interval: a probe the overhead governor switched off part of the time reads at its rate while on, and an interval it was never on is a gap, not a zero." }
        @if wait.iter().any(any) {
            h3 { "Wait time per second watched, by probe" }
            (charts::lines(&wait, "wait per second watched", |v| units::ns(v as u64)))
        }
        @if !rate.is_empty() {
            h3 { "Calls per second watched, by probe" }
            (charts::lines(&rate, "calls per second watched", units::count))
        }
        @for line in counter_rate.iter().filter(|l| any(l)) {
            h3 { "Per second: " (line.name) " (counter, exact)" }
            (charts::lines(std::slice::from_ref(line), "per s", units::count))
        }
        @for probe in with_sites {
            h3 { "Wait time per second watched by call site: " (probe) }
            (charts::lines(&ts.callsite_lines(probe), "wait per second watched", |v| units::ns(v as u64)))
        }
    }
}

fn callsites(s: &Summary) -> Markup {
    let rows = table::top_callsites(s, CALLSITE_ROWS);
    let t = |timed: bool, v: u64| if timed { units::ns(v) } else { "-".to_string() };
    html! {
        @if !rows.is_empty() {
            h2 #callsites { "Top call sites" }
            table.data {
                thead { tr { th { "probe" } th { "latch" } th { "call site" } th.n { "calls" } th.n { "total wait" } th.n { "of it background" } th.n { "avg" } th.n { "max" } } }
                tbody {
                    @for (probe, c, timed) in &rows {
                        tr {
                            td { (probe) }
                            td { (c.latch.as_deref().unwrap_or("")) }
                            td title=(c.file.as_deref().unwrap_or("")) { code { (c.site) } }
                            td.n { (c.calls) }
                            td.n { (t(*timed, c.wait_ns_total)) }
                            td.n { (t(*timed, c.background_wait_ns)) }
                            td.n { (t(*timed, c.wait_ns_total / c.calls.max(1))) }
                            td.n { (t(*timed, c.wait_ns_max)) }
                        }
                    }
                }
            }
        }
    }
}

/// Who made each probe's calls, per thread role: background threads'
/// waits (purge, page cleaner, ...) are the server's own work, shown apart
/// from the workload's contention.
fn who(s: &Summary) -> Markup {
    let probes: Vec<_> = s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached && !p.roles.is_empty())
        .collect();
    let share =
        |part: u64, whole: u64| format!("{:.0}%", 100.0 * part as f64 / whole.max(1) as f64);
    html! {
        @if !probes.is_empty() {
            h2 #who { "Who waits" }
            p.note { "Per thread role, from the functions on each thread's stack (a connection runs do_command; a purge worker starts in srv_worker_thread). Background threads are the server's own work: their waits are not the workload's contention, and no finding counts them." }
            table.data {
                thead { tr { th { "probe" } th { "thread role" } th { "kind" } th.n { "threads" } th.n { "calls" } th.n { "total wait" } th.n { "share" } } }
                tbody {
                    @for p in &probes {
                        @for r in &p.roles {
                            tr {
                                td { (p.name) }
                                td { (r.role) }
                                td { (match r.kind { crate::model::summary::RoleKind::Connection => "connection", crate::model::summary::RoleKind::Background => "background", crate::model::summary::RoleKind::Unknown => "unknown" }) }
                                td.n { (r.threads) }
                                td.n { (r.calls) }
                                td.n { @if p.wait_ns_avg.is_some() { (units::ns(r.wait_ns_total)) } @else { "-" } }
                                td.n { @if p.wait_ns_avg.is_some() { (share(r.wait_ns_total, p.wait_ns_total)) } @else { (share(r.calls, p.calls)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The statements and connections behind the client connections' hits
/// (the summary's `who`): a table sorted by any column (click its head).
fn statements(s: &Summary) -> Markup {
    let Some(who) = &s.who else {
        return html! {};
    };
    let dash = || "-".to_string();
    let tables = who.attributed && !who.statements.is_empty();
    // A CPU samples column only where the CPU profile's samples were tied
    // to statements (a column of zeros would say they ran on no CPU).
    let cpu = who.cpu.as_ref().filter(|c| c.attributed);
    let cpu_note = who.cpu.as_ref().and_then(|c| c.note.clone());
    html! {
        h2 #statements { "Statements and connections" }
        @if !who.attributed {
            p.note { "Statements are not attributed in this recording: " (who.how) }
        } @else if who.statements.is_empty() {
            p.note { "No client connection hit a probe." }
        } @else {
            p.note { "Each client connection's probe hit, tied to the statement its thread was running (the server's own THD, read at the hit), grouped by fingerprint (literals as ?). Executions are those that hit a probe. Click a column to sort. Read as: " (who.how) "."
                @if !who.blocking.is_empty() { " Who holds the latches they wait for: " a href="#blocking" { "Who blocks whom" } "." }
                @if let Some(c) = cpu { " CPU samples: the CPU profile's on-CPU samples of the connection while it ran the statement (" (c.samples) " in all; " (c.no_statement) " of connections running none)." }
                @if let Some(note) = &cpu_note { " " (note) "." }
            }
            table.data.sortable {
                thead { tr { th { "statement" } th { "users" } th.n { "executions" } th.n { "connections" } th.n { "calls" } th.n { "total wait" } @if cpu.is_some() { th.n { "CPU samples" } } th { "per probe" } } }
                tbody {
                    @for st in &who.statements {
                        tr {
                            td { code { (st.fingerprint) } @if let Some(sample) = &st.sample { br; span.note { "e.g. " (sample) } } }
                            td { (st.users.join(", ")) }
                            td.n data-v=(st.executions) { (st.executions) }
                            td.n data-v=(st.connections) { (st.connections) }
                            td.n data-v=(st.calls) { (st.calls) }
                            td.n data-v=(st.wait_ns_total) { (units::ns(st.wait_ns_total)) }
                            @if cpu.is_some() { td.n data-v=(st.cpu_samples) { (st.cpu_samples) } }
                            td { @for (i, p) in st.probes.iter().take(4).enumerate() { @if i > 0 { ", " } (p.probe) " " (p.calls) } }
                        }
                    }
                }
            }
            @if who.statements_more > 0 { p.note { (who.statements_more) " more statements with fewer hits are not listed." } }
            table.data.sortable {
                thead { tr { th.n { "connection" } th { "user" } th { "host" } th { "db" } th.n { "calls" } th.n { "total wait" } @if cpu.is_some() { th.n { "CPU samples" } } th { "top statement" } } }
                tbody {
                    @for c in &who.connections {
                        tr {
                            td.n data-v=(c.id) { (c.id) }
                            td { (c.user_shown().unwrap_or_else(dash)) }
                            td { (c.host.clone().unwrap_or_else(dash)) }
                            td { (c.db.clone().unwrap_or_else(dash)) }
                            td.n data-v=(c.calls) { (c.calls) }
                            td.n data-v=(c.wait_ns_total) { (units::ns(c.wait_ns_total)) }
                            @if cpu.is_some() { td.n data-v=(c.cpu_samples) { (c.cpu_samples) } }
                            td { code { (c.top_statement.as_ref().and_then(|id| who.statements.iter().find(|st| &st.id == id)).map_or_else(dash, |st| st.fingerprint.clone())) } }
                        }
                    }
                }
            }
            @if !who.latch_statements.is_empty() {
                h3 #latch-statements { "Statements per latch" }
                p.note { "Each statement's hits on one latch (named as in the latch tables), the " (who.latch_statements.len()) " with the most wait. Click a column to sort." }
                table.data.sortable {
                    thead { tr { th { "latch" } th { "probe" } th { "statement" } th.n { "calls" } th.n { "total wait" } } }
                    tbody {
                        @for r in &who.latch_statements {
                            tr {
                                td { (r.latch) }
                                td { (r.probe) }
                                td { code { (r.fingerprint) } }
                                td.n data-v=(r.calls) { (r.calls) }
                                td.n data-v=(r.wait_ns_total) { (units::ns(r.wait_ns_total)) }
                            }
                        }
                    }
                }
            }
        }
        (blocking::section(s, who))
        @if tables || !who.blocking.is_empty() { script { (PreEscaped(SORT_JS)) } }
    }
}

/// Sorts a `table.sortable` by the clicked column: numbers by their
/// `data-v`, text as text; a second click reverses.
const SORT_JS: &str = r#"document.querySelectorAll('table.sortable').forEach(function(t){t.querySelectorAll('th').forEach(function(th,i){th.style.cursor='pointer';th.addEventListener('click',function(){var b=t.tBodies[0],rows=Array.from(b.rows),d=th.dataset.dir==='d'?'a':'d';th.dataset.dir=d;rows.sort(function(x,y){var a=x.cells[i],c=y.cells[i],u=a.dataset.v,v=c.dataset.v,r=(u!==undefined&&v!==undefined)?(Number(u)-Number(v)):a.textContent.localeCompare(c.textContent);return d==='d'?-r:r;});rows.forEach(function(r){b.appendChild(r);});});});});"#;

/// Latches given a view of their own: the busiest by wait time.
const LATCH_VIEWS: usize = 5;

/// One latch of the busiest: its waits over time (its call sites' rows of
/// the series), its call sites, and where its stacks are.
fn latch_view(
    probe: &crate::model::summary::ProbeResult,
    latch: &crate::model::summary::LatchResult,
    ts: Option<&TimeSeries>,
    stacks_shown: bool,
) -> Markup {
    let timed = probe.wait_ns_avg.is_some();
    let t = |v: u64| if timed { units::ns(v) } else { "-".to_string() };
    let sites: Vec<_> = probe
        .callsites
        .iter()
        .filter(|c| c.latch.as_deref() == Some(latch.latch.as_str()))
        .collect();
    let names: Vec<&str> = sites.iter().map(|c| c.site.as_str()).collect();
    let line = ts.and_then(|ts| ts.sites_line(&probe.name, &names, &latch.latch));
    let in_series = |c: &str| {
        ts.is_some_and(|ts| {
            ts.points
                .iter()
                .any(|p| p.probe == probe.name && p.callsite.as_deref() == Some(c))
        })
    };
    let left_out = names.iter().filter(|c| !in_series(c)).count();
    html! {
        h3 id={"latch-" (latch.latch)} { "Latch " code { (latch.latch) } " (" (probe.name) "): " (latch.calls) " waits, " (t(latch.wait_ns_total)) }
        @if let Some(line) = &line {
            @if timed { (charts::lines(std::slice::from_ref(line), "wait time", |v| units::ns(v as u64))) }
            @if left_out > 0 {
                p.note { (left_out) " of its " (names.len()) " call sites are not among the probe's busiest, whose rows the series keeps: they are in its " code { "other" } " row, not in this line." }
            }
        }
        @if !sites.is_empty() {
            table.data {
                thead { tr { th { "call site" } th.n { "calls" } th.n { "total wait" } th.n { "of it background" } th.n { "avg" } th.n { "max" } } }
                tbody {
                    @for c in sites.iter().take(CALLSITE_ROWS) {
                        tr {
                            td title=(c.file.as_deref().unwrap_or("")) { code { (c.site) } }
                            td.n { (c.calls) }
                            td.n { (t(c.wait_ns_total)) }
                            td.n { (t(c.background_wait_ns)) }
                            td.n { (t(c.wait_ns_total / c.calls.max(1))) }
                            td.n { (t(c.wait_ns_max)) }
                        }
                    }
                }
            }
        }
        @if stacks_shown && (probe.stacks.folded_by_wait.is_some() || probe.stacks.folded_by_count.is_some()) {
            p.note { "Stacks: " (probe.name) "'s flame graph under " a href="#waitstacks" { "Wait stacks" } " (every latch of the probe)." }
        }
    }
}

/// Per named latch (`dict_sys_mutex`), for probes that name the latch,
/// then a view of each of the busiest.
fn latches(s: &Summary, ts: Option<&TimeSeries>, stacks_shown: bool) -> Markup {
    let mut busiest: Vec<_> = s
        .probes
        .iter()
        .flat_map(|p| p.latches.iter().map(move |l| (p, l)))
        .filter(|(_, l)| l.calls > 0)
        .collect();
    busiest.sort_by(|a, b| {
        (b.1.wait_ns_total, b.1.calls)
            .cmp(&(a.1.wait_ns_total, a.1.calls))
            .then_with(|| a.1.latch.cmp(&b.1.latch))
    });
    busiest.truncate(LATCH_VIEWS);
    let t = |timed: bool, v: u64| if timed { units::ns(v) } else { "-".to_string() };
    html! {
        @if s.probes.iter().any(|p| !p.latches.is_empty()) {
            h2 #latches { "Latches" }
            table.data {
                thead { tr { th { "probe" } th { "latch" } th.n { "calls" } th.n { "total wait" } th.n { "of it background" } th.n { "avg" } th.n { "max" } } }
                tbody {
                    @for p in &s.probes {
                        @for l in p.latches.iter().take(CALLSITE_ROWS) {
                            tr {
                                td { (p.name) }
                                td { code { (l.latch) } }
                                td.n { (l.calls) }
                                td.n { (t(p.wait_ns_avg.is_some(), l.wait_ns_total)) }
                                td.n { (t(p.wait_ns_avg.is_some(), l.background_wait_ns)) }
                                td.n { (t(p.wait_ns_avg.is_some(), l.wait_ns_total / l.calls.max(1))) }
                                td.n { (t(p.wait_ns_avg.is_some(), l.wait_ns_max)) }
                            }
                        }
                    }
                }
            }
            @for (p, l) in &busiest { (latch_view(p, l, ts, stacks_shown)) }
        }
    }
}

fn flamegraphs(list: &[FlameGraph]) -> Markup {
    html! {
        @for f in list {
            @let (doc, height) = flame::srcdoc(&f.svg);
            h3 { (f.title) }
            iframe.flamegraph title=(f.title) sandbox="allow-scripts allow-modals" style={"height:" (height + 4) "px"} srcdoc=(doc) {}
        }
    }
}

fn cpu(s: &Summary, flames: &[FlameGraph]) -> Markup {
    let Some(cpu) = &s.cpu else {
        return html! {};
    };
    let on = &cpu.oncpu;
    html! {
        h2 #cpu { "Where the server burns CPU" }
        p {
            (on.samples) " samples (" (on.event) " at " (on.frequency_hz) " Hz on " (on.cpus) " CPUs); the server ran "
            (format!("{:.1}", on.target_cpu_pct)) " % of the sampled CPU time. Incomplete stacks: "
            (on.lost.unwind_stopped) " user walks stopped, " (on.lost.kernel_stack) " kernel, " (on.lost.truncated) " truncated."
        }
        @if !flames.is_empty() {
            p.note { "Flame graphs: width is the share of samples (on-CPU) or of time blocked (off-CPU). Click a frame to zoom, Ctrl-F to search." }
            (flamegraphs(flames))
        }
        @if on.top.total > 0 {
            h3 { "Top symbols (on-CPU, like opreport -l)" }
            (top_table(&on.top))
        }
        @if let Some(off) = &cpu.offcpu {
            h3 { "Where its threads block (off-CPU)" }
            p { (off.blocks) " blocks >= " (units::ns(off.min_block_ns)) ", " (units::ns(off.blocked_ns_total)) " blocked in all." }
            (top_table(&off.top))
        }
    }
}

fn top_table(top: &TopSymbols) -> Markup {
    html! {
        @if top.total > 0 {
            table.data.top {
                thead { tr { th.n { (top.unit) } th.n { "self %" } th.n { "total %" } th { "module" } th { "symbol" } } }
                tbody {
                    @for r in top.rows.iter().take(TOP_SYMBOL_ROWS) {
                        tr {
                            td.n { (r.samples) }
                            td.n { (format!("{:.2}", r.self_pct)) }
                            td.n { (format!("{:.2}", r.total_pct)) }
                            td { (r.module) }
                            td.sym { code { (r.symbol) } }
                        }
                    }
                }
            }
        }
    }
}

const CSS: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 20px 28px; color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; } h3 { font-size: 15px; }
code { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 12px; }
table { border-collapse: collapse; font-size: 13px; }
table.data th, table.data td { border: 1px solid #ddd; padding: 3px 7px; }
table.data thead th { background: #f3f5f8; }
table.about th { text-align: left; padding: 2px 14px 2px 0; color: #555; font-weight: 600; vertical-align: top; }
nav.toc { margin: 8px 0 16px; font-size: 13px; } nav.toc a { margin-right: 12px; white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
td.sym { max-width: 760px; overflow-wrap: anywhere; }
.badge { font-size: 13px; padding: 2px 8px; border-radius: 10px; vertical-align: middle; }
.badge.ok { background: #dff3e3; color: #1d6b32; } .badge.partial { background: #fde2e1; color: #9b1c17; }
.note { color: #666; font-size: 12px; }
.grid { display: flex; flex-wrap: wrap; gap: 8px 18px; }
figure { margin: 0; } figcaption { font-size: 12px; }
svg.chart text { font-size: 10px; fill: #444; } svg.chart text.axis { fill: #777; }
div.finding { border-left: 6px solid #999; padding: 0.2em 1em; margin: 0.8em 0; background: #fafafa; }
div.finding.critical { border-color: #c0392b; }
div.finding.warning { border-color: #e67e22; }
div.finding.info { border-color: #2980b9; }
span.sev { text-transform: uppercase; font-size: 0.8em; letter-spacing: 0.05em; }
svg.blocking { max-width: 100%; height: auto; display: block; margin: 4px 0 6px; }
svg.blocking text.head { font-size: 11px; font-weight: 600; fill: #555; }
svg.blocking text.label { font-size: 11px; fill: #222; } svg.blocking text.fp { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 10px; }
svg.blocking text.sub { fill: #666; }
svg.blocking path.edge { fill: none; stroke-opacity: 0.55; } svg.blocking path.edge:hover { stroke-opacity: 0.9; }
svg.blocking text.edge { fill: #222; paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
iframe.flamegraph { width: 1220px; max-width: 100%; border: 1px solid #ddd; display: block; }
";

#[cfg(test)]
pub(crate) mod tests;
