//! "Who blocks whom": the holder -> waiter graph of the latches that record
//! their exclusive holder (the summary's `who.blocking`), drawn here as
//! inline SVG (no script, no library) with a sortable table of the same
//! edges under it. Fingerprints come from the server's memory: every text
//! goes through maud, never through a `format!` into markup.

use crate::text::cut;
use std::collections::{BTreeMap, BTreeSet};

use maud::{html, Markup};

use crate::model::summary::Summary;
use crate::model::who::{Blocking, Who, MAX_BLOCKING};
use crate::text::units;

/// Probes given a graph of their own, most blocking wait first.
pub const MAX_PROBES: usize = 3;
/// Boxes a side; past them the rest is summed in one "others" box (which
/// counts among them).
pub const MAX_BOXES: usize = 8;
/// A box's fingerprint is cut to this many characters (the whole text in
/// its tooltip and in the table).
pub const LABEL_CHARS: usize = 60;
/// Connections named in a holder box (all of them in its tooltip).
const BOX_CONNECTIONS: usize = 4;

/// The holders' colours, as charts.rs colours its lines (Tableau 10,
/// without its grey, which is the "others" box's).
const PALETTE: [&str; 9] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f",
];
const OTHERS_COLOUR: &str = "#bab0ac";

/// Geometry of the graph, in px.
const WIDTH: f64 = 1100.0;
const BOX_W: f64 = 380.0;
const BOX_H: f64 = 38.0;
const GAP: f64 = 10.0;
const TOP: f64 = 24.0;
const MAX_STROKE: f64 = 16.0;

/// Who held the latch: a statement (by id, else fingerprint), or what is
/// known of a holder running none.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum HolderKey {
    Statement(String),
    Connection(u64),
    Thread(u32),
    Unknown,
}

/// One box's worth: a holder (one per statement, its connections merged)
/// or a waiting statement.
#[derive(Debug, Clone, Default)]
struct Node {
    /// The whole text shown (a fingerprint, or what stands for one).
    label: String,
    /// The label is a statement's fingerprint (set in monospace).
    statement: bool,
    id: Option<String>,
    connections: BTreeSet<u64>,
    calls: u64,
    wait: u64,
}

/// One holder -> waiter edge, merged over the holder's connections.
#[derive(Debug, Clone)]
struct Edge {
    holder: usize,
    waiter: usize,
    connections: BTreeSet<u64>,
    calls: u64,
    wait: u64,
}

/// A probe's edges: holders, waiters and edges, most wait first.
#[derive(Debug)]
struct ProbeGraph {
    probe: String,
    holders: Vec<Node>,
    waiters: Vec<Node>,
    edges: Vec<Edge>,
    calls: u64,
    wait: u64,
}

/// The section under "Statements and connections", when any latch wait
/// was tied to its holder.
pub fn section(s: &Summary, who: &Who) -> Markup {
    if who.blocking.is_empty() {
        return html! {};
    }
    let graphs = graphs(&who.blocking);
    let shown = &graphs[..graphs.len().min(MAX_PROBES)];
    let rest = &graphs[shown.len()..];
    html! {
        h3 #blocking { "Who blocks whom" }
        p.note {
            "An edge ties a wait to the latch's exclusive holder (or the writer queued ahead of the readers) read at the wait's start, where the latch records one (rw_lock_t::writer_thread in MySQL 5.6–8.0 and MariaDB 10.2–10.5, sux_lock::writer in MariaDB 10.6+), or to the thread whose release woke the waiters (the release's slow path, taken only when someone waits; summary.txt and summary.json's who.blocking[].released say which); a latch kind with neither has no edge (innoprof probes says which). "
            "Hold time is not measured: a latch is taken on an inline compare-and-swap that no probe sees; what is shown is the wait each holder caused. "
            "Holders on the left, waiting statements on the right, line width by wait time; hover a box or a line for the whole statement and the holder's connections."
        }
        @if who.blocking.len() >= MAX_BLOCKING {
            p.note { "summary.json keeps the " (MAX_BLOCKING) " edges with the most wait (all probes together): edges with less are in no graph, table or share below." }
        }
        @for g in shown { (probe_view(s, g)) }
        @if !rest.is_empty() {
            p.note {
                (rest.len()) " more " (if rest.len() == 1 { "probe has" } else { "probes have" }) " edges, with less blocking wait: "
                @for (i, g) in rest.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (g.probe) } " " (units::ns(g.wait))
                }
                " (summary.json's who.blocking, summary.txt's who blocks)."
            }
        }
    }
}

/// Per probe, most blocking wait first.
fn graphs(blocking: &[Blocking]) -> Vec<ProbeGraph> {
    let mut per_probe: BTreeMap<&str, Vec<&Blocking>> = BTreeMap::new();
    for b in blocking {
        per_probe.entry(b.probe.as_str()).or_default().push(b);
    }
    let mut graphs: Vec<ProbeGraph> = per_probe
        .into_iter()
        .map(|(probe, edges)| graph(probe, &edges))
        .collect();
    graphs.sort_by(|a, b| {
        (b.wait, b.calls)
            .cmp(&(a.wait, a.calls))
            .then_with(|| a.probe.cmp(&b.probe))
    });
    graphs
}

fn holder_of(b: &Blocking) -> (HolderKey, Node) {
    let key = match (
        &b.holder_statement,
        &b.holder_fingerprint,
        b.holder_connection,
        b.holder_thread,
    ) {
        (Some(id), _, _, _) => HolderKey::Statement(id.clone()),
        (None, Some(f), _, _) => HolderKey::Statement(format!("fingerprint {f}")),
        (None, None, Some(c), _) => HolderKey::Connection(c),
        (None, None, None, Some(t)) => HolderKey::Thread(t),
        (None, None, None, None) => HolderKey::Unknown,
    };
    let label = match (&key, &b.holder_fingerprint, &b.holder_statement) {
        (HolderKey::Statement(_), Some(f), _) => f.clone(),
        (HolderKey::Statement(_), None, Some(id)) => format!("statement {id}"),
        (HolderKey::Connection(c), _, _) => format!("connection {c}"),
        (HolderKey::Thread(_), _, _) => b.holder_label(usize::MAX),
        _ => "unknown holder".to_string(),
    };
    let node = Node {
        label,
        statement: matches!(key, HolderKey::Statement(_)),
        id: b.holder_statement.clone(),
        ..Node::default()
    };
    (key, node)
}

fn waiter_of(b: &Blocking) -> (Option<String>, Node) {
    let key = b.waiter_statement.clone().or_else(|| {
        b.waiter_fingerprint
            .as_ref()
            .map(|f| format!("fingerprint {f}"))
    });
    let label = match (&b.waiter_fingerprint, &b.waiter_statement) {
        (Some(f), _) => f.clone(),
        (None, Some(id)) => format!("statement {id}"),
        (None, None) => "background / unknown statement".to_string(),
    };
    let node = Node {
        label,
        statement: key.is_some(),
        id: b.waiter_statement.clone(),
        ..Node::default()
    };
    (key, node)
}

/// Nodes most wait first (then calls, then by name): `(sorted, old index -> new)`.
fn ranked(nodes: Vec<Node>) -> (Vec<Node>, Vec<usize>) {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&nodes[a], &nodes[b]);
        (y.wait, y.calls)
            .cmp(&(x.wait, x.calls))
            .then_with(|| x.label.cmp(&y.label))
            .then_with(|| a.cmp(&b))
    });
    let mut new_of = vec![0; nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new;
    }
    let sorted = order.iter().map(|&i| nodes[i].clone()).collect();
    (sorted, new_of)
}

/// One probe's edges merged by (holder statement or thread, waiter): the
/// holder's connections are gathered into one box.
fn graph(probe: &str, edges: &[&Blocking]) -> ProbeGraph {
    let mut holder_ix: BTreeMap<HolderKey, usize> = BTreeMap::new();
    let mut waiter_ix: BTreeMap<Option<String>, usize> = BTreeMap::new();
    let mut holders: Vec<Node> = Vec::new();
    let mut waiters: Vec<Node> = Vec::new();
    let mut merged: BTreeMap<(usize, usize), Edge> = BTreeMap::new();
    for b in edges {
        let (hk, hn) = holder_of(b);
        let h = *holder_ix.entry(hk).or_insert_with(|| {
            holders.push(hn);
            holders.len() - 1
        });
        let (wk, wn) = waiter_of(b);
        let w = *waiter_ix.entry(wk).or_insert_with(|| {
            waiters.push(wn);
            waiters.len() - 1
        });
        for n in [&mut holders[h], &mut waiters[w]] {
            n.calls = n.calls.saturating_add(b.calls);
            n.wait = n.wait.saturating_add(b.wait_ns_total);
        }
        let e = merged.entry((h, w)).or_insert_with(|| Edge {
            holder: h,
            waiter: w,
            connections: BTreeSet::new(),
            calls: 0,
            wait: 0,
        });
        e.calls = e.calls.saturating_add(b.calls);
        e.wait = e.wait.saturating_add(b.wait_ns_total);
        if let Some(c) = b.holder_connection {
            e.connections.insert(c);
            holders[h].connections.insert(c);
        }
    }
    let (holders, h_new) = ranked(holders);
    let (waiters, w_new) = ranked(waiters);
    let mut edges: Vec<Edge> = merged
        .into_values()
        .map(|mut e| {
            e.holder = h_new[e.holder];
            e.waiter = w_new[e.waiter];
            e
        })
        .collect();
    edges.sort_by(|a, b| {
        (b.wait, b.calls, a.holder, a.waiter).cmp(&(a.wait, a.calls, b.holder, b.waiter))
    });
    ProbeGraph {
        probe: probe.to_string(),
        calls: crate::model::saturating_sum(edges.iter().map(|e| e.calls)),
        wait: crate::model::saturating_sum(edges.iter().map(|e| e.wait)),
        holders,
        waiters,
        edges,
    }
}

/// A probe's heading, graph, what the graph left out, and its table.
fn probe_view(s: &Summary, g: &ProbeGraph) -> Markup {
    let probe_wait = s
        .probes
        .iter()
        .find(|p| p.name == g.probe)
        .map(|p| p.wait_ns_total)
        .filter(|&w| w > 0);
    let (svg, cut_note) = draw(g);
    html! {
        h4 id={"blocking-" (g.probe)} {
            code { (g.probe) } ": " (g.calls) " " (waits(g.calls)) " on a recorded holder, " (units::ns(g.wait))
            @if let Some(w) = probe_wait { " (" (pct(g.wait, w)) " of the probe's wait)" }
        }
        (svg)
        @if let Some(note) = cut_note { p.note { (note) } }
        table.data.sortable.blocking {
            thead { tr {
                th { "holder" } th { "holder connection(s)" } th { "waiter" }
                th.n { "calls" } th.n { "total wait" } th.n title="of the probe's blocking wait listed here" { "share" }
            } }
            tbody {
                @for e in &g.edges {
                    @let (h, w) = (&g.holders[e.holder], &g.waiters[e.waiter]);
                    tr {
                        td { (node_text(h)) }
                        td { @if e.connections.is_empty() { "-" } @else { (join(&e.connections)) } }
                        td { (node_text(w)) }
                        td.n data-v=(e.calls) { (e.calls) }
                        td.n data-v=(e.wait) { (units::ns(e.wait)) }
                        td.n data-v=(e.wait) { (pct(e.wait, g.wait)) }
                    }
                }
            }
        }
    }
}

fn node_text(n: &Node) -> Markup {
    html! { @if n.statement { code { (n.label) } } @else { (n.label) } }
}

/// A box of the graph: a node, or the sum of those past the cut.
struct Slot {
    label: String,
    sub: String,
    title: String,
    statement: bool,
    others: bool,
}

/// The boxes of one side: the first nodes, then the rest summed in one
/// "others" box; and which box each node went to.
fn slots(nodes: &[Node], holders: bool) -> (Vec<Slot>, Vec<usize>) {
    let named = if nodes.len() > MAX_BOXES {
        MAX_BOXES - 1
    } else {
        nodes.len()
    };
    let verb = if holders { "held up" } else { "waited" };
    let mut out: Vec<Slot> = nodes[..named]
        .iter()
        .map(|n| {
            let mut sub = format!(
                "{verb} {} in {} {}",
                units::ns(n.wait),
                n.calls,
                waits(n.calls)
            );
            let mut title = n.label.clone();
            if let Some(id) = &n.id {
                title.push_str(&format!("\nstatement id {id}"));
            }
            if !n.connections.is_empty() {
                let first: BTreeSet<u64> = n
                    .connections
                    .iter()
                    .take(BOX_CONNECTIONS)
                    .copied()
                    .collect();
                let more = n.connections.len() - first.len();
                sub.push_str(&format!(
                    " · {} {}{}",
                    if n.connections.len() == 1 {
                        "connection"
                    } else {
                        "connections"
                    },
                    join(&first),
                    if more > 0 {
                        format!(" +{more}")
                    } else {
                        String::new()
                    }
                ));
                title.push_str(&format!("\nholder connection(s): {}", join(&n.connections)));
            }
            title.push_str(&format!("\n{sub}"));
            Slot {
                label: n.label.clone(),
                sub,
                title,
                statement: n.statement,
                others: false,
            }
        })
        .collect();
    let mut slot_of: Vec<usize> = (0..named).collect();
    if named < nodes.len() {
        let rest = &nodes[named..];
        let (calls, wait) = rest
            .iter()
            .fold((0, 0), |(c, w), n| (c + n.calls, w + n.wait));
        let what = if holders {
            "holders"
        } else {
            "waiting statements"
        };
        let sub = format!("{verb} {} in {} {}", units::ns(wait), calls, waits(calls));
        let mut title = format!("{} other {what}, summed:", rest.len());
        for n in rest {
            title.push_str(&format!("\n{} ({})", n.label, units::ns(n.wait)));
        }
        out.push(Slot {
            label: format!("others: {} more {what}", rest.len()),
            sub,
            title,
            statement: false,
            others: true,
        });
        slot_of.extend(std::iter::repeat_n(named, rest.len()));
    }
    (out, slot_of)
}

/// A line between two boxes, the nodes past the cut merged.
struct Line {
    holder: usize,
    waiter: usize,
    calls: u64,
    wait: u64,
}

/// The graph, and a note of what it summed past the cut.
fn draw(g: &ProbeGraph) -> (Markup, Option<String>) {
    let (left, left_of) = slots(&g.holders, true);
    let (right, right_of) = slots(&g.waiters, false);
    let mut merged: BTreeMap<(usize, usize), (u64, u64)> = BTreeMap::new();
    for e in &g.edges {
        let m = merged
            .entry((left_of[e.holder], right_of[e.waiter]))
            .or_default();
        m.0 = m.0.saturating_add(e.calls);
        m.1 = m.1.saturating_add(e.wait);
    }
    let mut lines: Vec<Line> = merged
        .into_iter()
        .map(|((holder, waiter), (calls, wait))| Line {
            holder,
            waiter,
            calls,
            wait,
        })
        .collect();
    // Thickest first, so that thin lines are drawn over them.
    lines.sort_by(|a, b| {
        (b.wait, b.calls, a.holder, a.waiter).cmp(&(a.wait, a.calls, b.holder, b.waiter))
    });
    let column = |n: usize| n as f64 * BOX_H + n.saturating_sub(1) as f64 * GAP;
    let tallest = column(left.len().max(right.len()));
    let height = TOP + tallest + 6.0;
    let box_y = |n: usize, i: usize| TOP + (tallest - column(n)) / 2.0 + i as f64 * (BOX_H + GAP);
    let (lx, rx) = (0.5, WIDTH - BOX_W - 0.5);
    // Where each line leaves its holder and reaches its waiter: spread
    // over the box's side in the order of the other end.
    let anchor = |ends: &mut [(usize, usize)], n: usize, i: usize| -> Vec<(usize, f64)> {
        ends.sort();
        let k = ends.len() as f64;
        ends.iter()
            .enumerate()
            .map(|(j, &(_, line))| (line, box_y(n, i) + BOX_H * (j as f64 + 1.0) / (k + 1.0)))
            .collect()
    };
    let mut y1 = vec![0.0; lines.len()];
    let mut y2 = vec![0.0; lines.len()];
    for i in 0..left.len() {
        let mut ends: Vec<(usize, usize)> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.holder == i)
            .map(|(j, l)| (l.waiter, j))
            .collect();
        for (line, y) in anchor(&mut ends, left.len(), i) {
            y1[line] = y;
        }
    }
    for i in 0..right.len() {
        let mut ends: Vec<(usize, usize)> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.waiter == i)
            .map(|(j, l)| (l.holder, j))
            .collect();
        for (line, y) in anchor(&mut ends, right.len(), i) {
            y2[line] = y;
        }
    }
    let max_wait = lines.iter().map(|l| l.wait).max().unwrap_or(1).max(1) as f64;
    let colour = |i: usize| {
        if left[i].others {
            OTHERS_COLOUR
        } else {
            PALETTE[i % PALETTE.len()]
        }
    };
    let (x1, x2) = (lx + BOX_W, rx);
    let xm = (x1 + x2) / 2.0;
    let labels = place_labels(&lines, &y1, &y2, x1, x2);
    let svg = html! {
        svg.chart.blocking width=(WIDTH) height=(f1(height)) viewBox={"0 0 " (WIDTH) " " (f1(height))} role="img" aria-label={"Who blocks whom on " (g.probe)} {
            text.head x=(f1(lx)) y="14" { "holder (of the latch, at the wait's start)" }
            text.head x=(f1(rx)) y="14" { "waiting statement" }
            @for (j, l) in lines.iter().enumerate() {
                path.edge
                    d=(format!("M{:.1},{:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}", x1, y1[j], xm, y1[j], xm, y2[j], x2, y2[j]))
                    stroke=(colour(l.holder))
                    stroke-width=(f1((MAX_STROKE * l.wait as f64 / max_wait).max(1.0))) {
                    title { (left[l.holder].label) " → " (right[l.waiter].label) ": " (units::ns(l.wait)) " in " (l.calls) " " (waits(l.calls)) " (" (pct(l.wait, g.wait)) " of the probe's blocking wait)" }
                }
            }
            @for (i, b) in left.iter().enumerate() {
                (slot_box(b, lx, box_y(left.len(), i), Some(colour(i))))
            }
            @for (i, b) in right.iter().enumerate() {
                (slot_box(b, rx, box_y(right.len(), i), None))
            }
            @for (j, l) in lines.iter().enumerate() {
                text.edge x=(f1(labels[j].0)) y=(f1(labels[j].1)) text-anchor="middle" { (edge_label(l.wait, l.calls)) }
            }
        }
    };
    let summed = |slots: &[Slot], nodes: &[Node], what: &str| -> Option<String> {
        slots.last().filter(|s| s.others).map(|_| {
            let rest = &nodes[slots.len() - 1..];
            format!(
                "{} {what} ({})",
                rest.len(),
                units::ns(crate::model::saturating_sum(rest.iter().map(|n| n.wait)))
            )
        })
    };
    let parts: Vec<String> = [
        summed(&left, &g.holders, "holders"),
        summed(&right, &g.waiters, "waiting statements"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let note = (!parts.is_empty()).then(|| {
        format!(
            "Past {MAX_BOXES} boxes a side, {} with less wait are summed in the grey \"others\" {}; the table below lists each edge.",
            parts.join(" and "),
            if parts.len() == 1 { "box" } else { "boxes" }
        )
    });
    (svg, note)
}

/// Each line's label: on its curve, away from the labels already placed
/// (the heaviest lines' first); in the middle if no spot is free.
fn place_labels(lines: &[Line], y1: &[f64], y2: &[f64], x1: f64, x2: f64) -> Vec<(f64, f64)> {
    const TRIES: [f64; 7] = [0.5, 0.38, 0.62, 0.28, 0.72, 0.2, 0.8];
    let mut placed: Vec<(f64, f64, f64, f64)> = Vec::new();
    let xm = (x1 + x2) / 2.0;
    lines
        .iter()
        .enumerate()
        .map(|(j, l)| {
            let half_w = edge_label(l.wait, l.calls).chars().count() as f64 * 2.9;
            let at = |t: f64| {
                let u = 1.0 - t;
                let x =
                    u * u * u * x1 + 3.0 * u * u * t * xm + 3.0 * u * t * t * xm + t * t * t * x2;
                let y =
                    (u * u * u + 3.0 * u * u * t) * y1[j] + (3.0 * u * t * t + t * t * t) * y2[j];
                (x, y + 3.5)
            };
            let rect = |(x, y): (f64, f64)| (x - half_w, y - 10.0, x + half_w, y + 2.0);
            let free = |r: &(f64, f64, f64, f64)| {
                placed
                    .iter()
                    .all(|p| r.2 <= p.0 || p.2 <= r.0 || r.3 <= p.1 || p.3 <= r.1)
            };
            let spot = TRIES
                .iter()
                .map(|&t| at(t))
                .find(|&p| free(&rect(p)))
                .unwrap_or_else(|| at(0.5));
            placed.push(rect(spot));
            spot
        })
        .collect()
}

fn slot_box(b: &Slot, x: f64, y: f64, colour: Option<&str>) -> Markup {
    let (fill, stroke, opacity) = match (b.others, colour) {
        (true, _) => ("#fff", "#999", "1"),
        (false, Some(c)) => (c, c, "0.15"),
        (false, None) => ("#f3f5f8", "#999", "1"),
    };
    html! {
        g.node {
            title { (b.title) }
            rect x=(f1(x)) y=(f1(y)) width=(BOX_W) height=(BOX_H) rx="3" fill=(fill) fill-opacity=(opacity) stroke=(stroke) stroke-dasharray=(if b.others { "4 3" } else { "none" }) {}
            text.label.fp[b.statement] x=(f1(x + 6.0)) y=(f1(y + 15.0)) { (cut(&b.label, LABEL_CHARS)) }
            text.sub x=(f1(x + 6.0)) y=(f1(y + 30.0)) { (b.sub) }
        }
    }
}

fn edge_label(wait: u64, calls: u64) -> String {
    format!("{} in {calls} {}", units::ns(wait), waits(calls))
}

fn waits(n: u64) -> &'static str {
    if n == 1 {
        "wait"
    } else {
        "waits"
    }
}

fn join(ids: &BTreeSet<u64>) -> String {
    ids.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `42%`, `3.5%`, `<0.1%`.
fn pct(part: u64, whole: u64) -> String {
    let p = 100.0 * part as f64 / whole.max(1) as f64;
    if part > 0 && p < 0.1 {
        "<0.1%".to_string()
    } else if p < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn f1(v: f64) -> String {
    format!("{v:.1}")
}
