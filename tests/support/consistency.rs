//! One story on every surface: a bundle's views must tell what its exact
//! tables tell. Run on every bundle a test has innoprof write
//! ([`crate::check_files`]), so a new output cannot drift from the
//! tables unseen. What is checked, per attached probe:
//!
//! - its folded files (stacks by count and by wait) and its samples in
//!   waits.pb.gz add up to its exact calls and wait, less the calls whose
//!   stack was lost;
//! - their split by thread role, latch and call site (and waits.pb.gz's
//!   by statement) against the exact role, latch, call-site and statement
//!   tables: within [`SPLIT_POINTS`] of total variation (the stacks are
//!   calibrated to the call-site table's cells, so only rounding is left;
//!   a role row's hits made before its threads' role was known are the
//!   stacks' `unknown`, as the row says);
//!   statements within a cell are a sample, looked at where every hit
//!   took a stack);
//! - timeseries.csv's intervals add up to its calls and wait (but for the
//!   calls seen while attaching, before the first interval), and each
//!   interval's rate is its calls per second watched;
//! - summary.txt's and report.html's probe tables show its calls (seen)
//!   and its one rate, and so do `innoprof top DIR` and the bundle's
//!   `diff` with itself.

use innoprof::model::summary::{ProbeResult, ProbeStatus, Summary};
use innoprof::model::who::Who;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// How far a probe's stacks may split by role, latch or call site from
/// its exact tables, in points of total variation (issue 64: 5).
pub const SPLIT_POINTS: f64 = 5.0;
/// Below this many calls a split is not looked at: a point is a call.
pub const SPLIT_MIN_CALLS: u64 = 20;
/// Every disagreement found in the bundle at `dir`, one line each.
pub fn disagreements(dir: &Path, s: &Summary) -> Vec<String> {
    let mut out = Vec::new();
    let series = timeseries_totals(dir, &mut out);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let (text, html) = (read("summary.txt"), read("report.html"));
    let waits = waits_profile(dir, &mut out);
    let top = top_rates(dir, &mut out);
    let diff = innoprof::bundle::diff::diff_dirs(dir, dir)
        .map_err(|e| out.push(format!("the bundle's diff with itself failed: {e}")))
        .ok();
    let watched = s.watched_s();
    for p in s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        let folded = folded_checks(dir, p, s.drops.stack_key_map_full, &mut out);
        if let Some(waits) = &waits {
            let mine = waits.get(p.name.as_str()).map_or(&[][..], Vec::as_slice);
            pprof_checks(p, mine, folded, s.who.as_ref(), &mut out);
        }
        if let Some(totals) = &series {
            let (calls, wait) = totals.get(p.name.as_str()).copied().unwrap_or((0, 0));
            let before = p.sampling.as_ref().map_or(0, |x| x.calls_before_start);
            if calls > p.calls || p.calls - calls > before {
                out.push(format!(
                    "{}: timeseries.csv's intervals hold {calls} calls, summary.json {} ({before} before the first interval)",
                    p.name, p.calls
                ));
            }
            if before == 0 && calls == p.calls && wait != p.wait_ns_total {
                out.push(format!(
                    "{}: timeseries.csv's intervals hold {wait} ns of wait, summary.json {}",
                    p.name, p.wait_ns_total
                ));
            }
        }
        let one = p.rate(watched).calls_per_s;
        if let Some(text) = &text {
            table_checks(text, p, one, &mut out);
        }
        if let Some(html) = &html {
            html_checks(html, p, one, &mut out);
        }
        if let Some(top) = &top {
            match top.get(p.name.as_str()) {
                Some(shown) if !close(*shown, one) => out.push(format!(
                    "{}: `top DIR` shows {shown:.1} calls/s, its one rate is {one:.1}/s",
                    p.name
                )),
                None if p.calls > 0 => {
                    out.push(format!("{}: `top DIR` shows no row of it", p.name))
                }
                _ => {}
            }
        }
        if let Some(diff) = &diff {
            let row = diff.probes.iter().find(|d| d.name == p.name);
            match row {
                Some(d) if d.baseline_calls_per_sec != d.incident_calls_per_sec => {
                    out.push(format!(
                        "{}: the bundle's diff with itself reads {} then {} calls/s",
                        p.name, d.baseline_calls_per_sec, d.incident_calls_per_sec
                    ))
                }
                Some(d) if !close(d.incident_calls_per_sec, one) => out.push(format!(
                    "{}: `diff` reads {:.1} calls/s, its one rate is {one:.1}/s",
                    p.name, d.incident_calls_per_sec
                )),
                Some(d) if d.calls_ratio.is_some_and(|r| (r - 1.0).abs() > 1e-9) => out.push(
                    format!("{}: the bundle's diff with itself moved it", p.name),
                ),
                None if p.calls > 0 => out.push(format!("{}: `diff` shows no row of it", p.name)),
                _ => {}
            }
        }
    }
    out
}

/// A rate as shown (3 significant digits or 0.1) against the one rate.
fn close(shown: f64, one: f64) -> bool {
    (shown - one).abs() <= 0.06 * one.abs() + 0.1
}

/// `key_full`: the recording's hits whose stack found the stack-count map
/// full (any probe's): in no stack, so folded totals undercount by them.
/// The folded files' totals, (calls, wait), where it has them.
fn folded_checks(
    dir: &Path,
    p: &ProbeResult,
    key_full: u64,
    out: &mut Vec<String>,
) -> Option<(u64, u64)> {
    let want_calls = p.calls.saturating_sub(p.stacks.lost_calls);
    let mut totals = (None, None);
    for (file, by_wait) in [
        (p.stacks.folded_by_count.as_deref(), false),
        (p.stacks.folded_by_wait.as_deref(), true),
    ] {
        let Some(file) = file else { continue };
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        let stacks = folded_lines(&text);
        let total: u64 = stacks.iter().map(|(_, w)| w).sum();
        if by_wait {
            totals.1 = Some(total);
        } else {
            totals.0 = Some(total);
        }
        if total == 0 {
            continue; // stacks off for this probe, or no hit reached the sampler
        }
        // A lost stack's wait is not known apart from its calls': only
        // the count is exact when some were lost.
        let (want, what) = if by_wait {
            (p.wait_ns_total, "ns of wait")
        } else {
            (want_calls, "calls")
        };
        let undercount = want.saturating_sub(total);
        let dropped = total < want && !by_wait && undercount <= key_full;
        if (!by_wait || (p.stacks.lost_calls == 0 && key_full == 0)) && total != want && !dropped {
            out.push(format!(
                "{}: {file} adds up to {total} {what}, summary.json {want}",
                p.name
            ));
        }
        let latches: HashSet<&str> = p.latches.iter().map(|l| l.latch.as_str()).collect();
        let sites: HashSet<&str> = p.callsites.iter().map(|c| c.site.as_str()).collect();
        let weighted: Vec<Labelled> = stacks
            .iter()
            .map(|(frames, w)| Labelled {
                role: Label::Role.of(frames, &sites),
                latch: Label::Latch.of(frames, &latches),
                site: Label::Site.of(frames, &sites),
                statement: None,
                calls: *w,
                wait: *w,
            })
            .collect();
        split_checks(p, by_wait, &weighted, file, out);
    }
    match totals {
        (Some(calls), wait) => Some((calls, wait.unwrap_or(0))),
        (None, _) => None,
    }
}

/// A stack's labels and weights, from a folded line or a pprof sample.
struct Labelled<'a> {
    role: &'a str,
    latch: &'a str,
    site: &'a str,
    statement: Option<&'a str>,
    calls: u64,
    wait: u64,
}

/// The split of `stacks` (from `source`) by role, latch and call site
/// against the probe's exact tables, by calls or by wait.
fn split_checks(
    p: &ProbeResult,
    by_wait: bool,
    stacks: &[Labelled],
    source: &str,
    out: &mut Vec<String>,
) {
    if p.calls < SPLIT_MIN_CALLS {
        return;
    }
    let pick = |r: (u64, u64)| (if by_wait { r.1 } else { r.0 }) as f64;
    // The stacks label each hit with its thread's role at that hit: a
    // row's hits made before its threads' role was known (its
    // `unlabelled_*`, said under the table) are `unknown`'s there.
    let mut roles: Vec<(&str, f64)> = Vec::new();
    let mut early = 0.0;
    for r in &p.roles {
        let unlabelled = pick((r.unlabelled_calls, r.unlabelled_wait_ns));
        early += unlabelled;
        roles.push((
            r.role.as_str(),
            pick((r.calls, r.wait_ns_total)) - unlabelled,
        ));
    }
    if early > 0.0 {
        let unknown = innoprof::plan::thread_role::UNKNOWN;
        match roles.iter_mut().find(|(name, _)| *name == unknown) {
            Some((_, v)) => *v += early,
            None => roles.push((unknown, early)),
        }
    }
    let latches: Vec<(&str, f64)> = p
        .latches
        .iter()
        .map(|l| (l.latch.as_str(), pick((l.calls, l.wait_ns_total))))
        .collect();
    let sites: Vec<(&str, f64)> = p
        .callsites
        .iter()
        .map(|c| (c.site.as_str(), pick((c.calls, c.wait_ns_total))))
        .collect();
    let whole = pick((p.calls, p.wait_ns_total));
    for (what, exact, label) in [
        ("role", roles, Label::Role),
        ("latch", latches, Label::Latch),
        ("call site", sites, Label::Site),
    ] {
        if exact.is_empty() {
            continue;
        }
        let mut by: HashMap<&str, f64> = HashMap::new();
        for x in stacks {
            let key = match label {
                Label::Role => x.role,
                Label::Latch => x.latch,
                Label::Site => x.site,
            };
            *by.entry(key).or_default() += pick((x.calls, x.wait));
        }
        let mut exact = exact;
        let rest = whole - exact.iter().map(|e| e.1).sum::<f64>();
        if label != Label::Role && rest > 0.0 {
            exact.push((NONE, rest));
        }
        let by: Vec<(&str, f64)> = by.into_iter().collect();
        let tv = total_variation(&by, &exact);
        print_split(p, source, what, by_wait, tv);
        if tv > SPLIT_POINTS && std::env::var_os("INNOPROF_TEST_SPLITS").is_some() {
            eprintln!("  stacks {by:?}\n  table  {exact:?}");
        }
        if tv > SPLIT_POINTS {
            out.push(format!(
                "{}: {source}'s split by {what} is {tv:.1} points from its table (cut: {}, stacks 1 in up to {}, {} calls without a sampled stack)",
                p.name,
                p.sampling.is_some(),
                p.stacks.sampled_every_max,
                p.stacks.unsampled_calls,
            ));
        }
    }
}

/// A pprof sample's labels, calls and wait.
type PprofSample = (HashMap<String, String>, u64, u64);

/// With INNOPROF_TEST_SPLITS set, every split looked at, agreeing or not:
/// the gaps a closing note quotes.
fn print_split(p: &ProbeResult, source: &str, what: &str, by_wait: bool, tv: f64) {
    if std::env::var_os("INNOPROF_TEST_SPLITS").is_some() {
        eprintln!(
            "split: {} {source} by {what} ({}): {tv:.2} points ({} calls, {} distinct stacks, 1 in up to {})",
            p.name,
            if by_wait { "wait" } else { "calls" },
            p.calls,
            p.stacks.distinct,
            p.stacks.sampled_every_max
        );
    }
}

/// waits.pb.gz's samples by their `probe` label; None without the file.
fn waits_profile(dir: &Path, out: &mut Vec<String>) -> Option<HashMap<String, Vec<PprofSample>>> {
    let gz = std::fs::read(dir.join("waits.pb.gz")).ok()?;
    let Some(profile) = innoprof::report::pprof::decode_gz(&gz) else {
        out.push("waits.pb.gz is no gzipped profile".into());
        return None;
    };
    let text = |i: i64| {
        profile
            .string_table
            .get(i as usize)
            .cloned()
            .unwrap_or_default()
    };
    let mut out: HashMap<String, Vec<_>> = HashMap::new();
    for sample in &profile.sample {
        let labels: HashMap<String, String> = sample
            .label
            .iter()
            .map(|l| (text(l.key), text(l.str)))
            .collect();
        let value = |i: usize| sample.value.get(i).copied().unwrap_or(0).max(0) as u64;
        let probe = labels.get("probe").cloned().unwrap_or_default();
        out.entry(probe)
            .or_default()
            .push((labels, value(0), value(1)));
    }
    Some(out)
}

/// The probe's samples in waits.pb.gz: the same calls and wait as its
/// folded files (`folded`), split as its tables, its `statement` labels
/// as the statements table where its stacks are many.
fn get<'a>(labels: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    labels.get(key).map(String::as_str)
}

fn pprof_checks(
    p: &ProbeResult,
    samples: &[PprofSample],
    folded: Option<(u64, u64)>,
    who: Option<&Who>,
    out: &mut Vec<String>,
) {
    let calls: u64 = samples.iter().map(|s| s.1).sum();
    let wait: u64 = samples.iter().map(|s| s.2).sum();
    let Some((folded_calls, folded_wait)) = folded else {
        if calls > 0 {
            out.push(format!(
                "{}: waits.pb.gz holds {calls} calls of it, and no folded file",
                p.name
            ));
        }
        return;
    };
    if (calls, wait) != (folded_calls, folded_wait) {
        out.push(format!(
            "{}: waits.pb.gz holds {calls} calls and {wait} ns, its folded files {folded_calls} and {folded_wait}",
            p.name
        ));
    }
    if calls == 0 {
        return;
    }
    let labelled: Vec<Labelled> = samples
        .iter()
        .map(|(l, c, w)| Labelled {
            role: get(l, "role").unwrap_or(innoprof::plan::thread_role::UNKNOWN),
            latch: get(l, "latch").unwrap_or(NONE),
            site: get(l, "callsite").unwrap_or(NONE),
            statement: get(l, "statement"),
            calls: *c,
            wait: *w,
        })
        .collect();
    split_checks(p, false, &labelled, "waits.pb.gz", out);
    if p.wait_ns_total > 0 {
        split_checks(p, true, &labelled, "waits.pb.gz", out);
    }
    if let Some(who) = who {
        statement_checks(p, &labelled, who, out);
    }
}

/// The probe's calls by statement in its stacks' labels against the
/// statements table's, both over the calls tied to a statement: where
/// the table lists every statement and every hit took a stack.
fn statement_checks(p: &ProbeResult, stacks: &[Labelled], who: &Who, out: &mut Vec<String>) {
    // Each stack taken carries its hit's statement: where every hit took
    // its own (no interval, no thinning), the labels are the statements
    // table's hits; else one stack stands for several hits of its cell, a
    // sample of their statements, not looked at (9.9 points on 132 calls
    // of a burst at 256 threads).
    let every_hit = p.stacks.interval_ns == 0
        && p.stacks.sampled_every_max <= 1
        && p.stacks.unsampled_calls == 0;
    if !who.attributed || who.statements_more > 0 || !every_hit {
        return;
    }
    let exact: Vec<(&str, f64)> = who
        .statements
        .iter()
        .filter_map(|st| {
            let on = st.probes.iter().find(|x| x.probe == p.name)?;
            Some((st.fingerprint.as_str(), on.calls as f64))
        })
        .collect();
    let mut by: HashMap<&str, f64> = HashMap::new();
    for x in stacks {
        if let Some(st) = x.statement {
            *by.entry(st).or_default() += x.calls as f64;
        }
    }
    let (tied, listed) = (
        by.values().sum::<f64>(),
        exact.iter().map(|e| e.1).sum::<f64>(),
    );
    if tied < SPLIT_MIN_CALLS as f64 || listed < SPLIT_MIN_CALLS as f64 {
        return;
    }
    // The label is the fingerprint cut to a length: compare on that.
    let exact: Vec<(String, f64)> = exact
        .into_iter()
        .map(|(f, c)| (innoprof::model::raw_stacks::statement_label(f), c))
        .collect();
    let exact: Vec<(&str, f64)> = exact.iter().map(|(f, c)| (f.as_str(), *c)).collect();
    let tv = total_variation(&by.into_iter().collect::<Vec<_>>(), &exact);
    print_split(p, "waits.pb.gz", "statement", false, tv);
    if tv > SPLIT_POINTS {
        out.push(format!(
            "{}: waits.pb.gz's split by statement is {tv:.1} points from the statements table ({} distinct stacks)",
            p.name, p.stacks.distinct
        ));
    }
}

/// A folded stack's label under no latch or call site.
const NONE: &str = "(none)";

#[derive(Clone, Copy, PartialEq)]
enum Label {
    Role,
    Latch,
    Site,
}

impl Label {
    /// A folded probe stack's label: the role is its first frame
    /// (`[role]`); the call site its last (`[file:line]`) and the latch
    /// the one before it or the last (`[latch]`), named as `names` (the
    /// table's) name them.
    fn of<'a>(self, frames: &'a str, names: &HashSet<&str>) -> &'a str {
        let bracketed = |f: &'a str| f.strip_prefix('[').and_then(|f| f.strip_suffix(']'));
        let named = |f: Option<&'a str>| f.and_then(bracketed).filter(|n| names.contains(n));
        match self {
            Label::Role => role_of(frames),
            Label::Site => named(frames.rsplit(';').next()).unwrap_or(NONE),
            Label::Latch => {
                let mut tail = frames.rsplit(';');
                let (last, before) = (tail.next(), tail.next());
                named(last).or(named(before)).unwrap_or(NONE)
            }
        }
    }
}

/// (frames, weight) of each line of a folded file.
fn folded_lines(text: &str) -> Vec<(&str, u64)> {
    text.lines()
        .filter_map(|l| {
            let (frames, w) = l.rsplit_once(' ')?;
            Some((frames, w.trim().parse().ok()?))
        })
        .collect()
}

/// A probe stack's role: its first frame, `[role]`; `unknown` without one.
fn role_of(frames: &str) -> &str {
    let first = frames.split(';').next().unwrap_or("");
    first
        .strip_prefix('[')
        .and_then(|f| f.strip_suffix(']'))
        .unwrap_or(innoprof::plan::thread_role::UNKNOWN)
}

/// Half the summed absolute difference of two splits' shares, in points.
fn total_variation(a: &[(&str, f64)], b: &[(&str, f64)]) -> f64 {
    let share = |xs: &[(&str, f64)]| {
        let t: f64 = xs.iter().map(|x| x.1).sum();
        let mut m: HashMap<String, f64> = HashMap::new();
        for (k, v) in xs {
            *m.entry(k.to_string()).or_default() += if t > 0.0 { v / t } else { 0.0 };
        }
        m
    };
    let (a, b) = (share(a), share(b));
    let keys: std::collections::HashSet<&String> = a.keys().chain(b.keys()).collect();
    50.0 * keys
        .into_iter()
        .map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs())
        .sum::<f64>()
}

/// Per probe: the calls and wait of timeseries.csv's per-probe rows (those
/// without a call site). None without the file. Each row's rate must be
/// its calls per second watched (`attached_ms`), blank where it was not
/// watched (a gap, not a zero).
fn timeseries_totals(dir: &Path, out: &mut Vec<String>) -> Option<HashMap<String, (u64, u64)>> {
    let text = std::fs::read_to_string(dir.join("timeseries.csv")).ok()?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (probe, site, calls, wait) = (
        col("probe")?,
        col("callsite")?,
        col("calls")?,
        col("wait_ns")?,
    );
    let (attached, rate) = (col("attached_ms"), col("calls_per_s"));
    let mut totals: HashMap<String, (u64, u64)> = HashMap::new();
    for line in lines {
        // Probe names and call sites hold no commas (file:line).
        let f: Vec<&str> = line.split(',').collect();
        if f.get(site).is_some_and(|s| !s.is_empty()) {
            continue;
        }
        let (Some(name), Some(c), Some(w)) = (f.get(probe), f.get(calls), f.get(wait)) else {
            continue;
        };
        let c = c.parse::<u64>().unwrap_or(0);
        let e = totals.entry(name.to_string()).or_default();
        e.0 += c;
        e.1 += w.parse::<u64>().unwrap_or(0);
        let (Some(ms), Some(shown)) = (
            attached.and_then(|i| f.get(i)?.parse::<u64>().ok()),
            rate.and_then(|i| f.get(i)),
        ) else {
            continue;
        };
        let want = (ms > 0).then(|| c as f64 * 1000.0 / ms as f64);
        let shown = shown.parse::<f64>().ok();
        let agree = match (shown, want) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-3 * b.abs() + 0.01,
            (a, b) => a.is_none() && b.is_none(),
        };
        if !agree {
            out.push(format!(
                "{name}: timeseries.csv's row {line:?} gives a rate that is not its calls per second watched"
            ));
        }
    }
    Some(totals)
}

/// The probe's row of summary.txt's first table: its calls as seen, and
/// its one rate (`one`, [`ProbeResult::rate`] over the seconds watched: a
/// `--follow` recording's gaps left out), to the table's rounding.
fn table_checks(text: &str, p: &ProbeResult, one: f64, out: &mut Vec<String>) {
    let prefix = format!("| {} ", p.name);
    let Some(row) = text
        .lines()
        .find(|l| l.starts_with(&prefix) && l[prefix.len()..].trim_start().starts_with('|'))
    else {
        return;
    };
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | probe | symbol | calls | calls/s | ...
    let (Some(calls), Some(rate)) = (cells.get(3), cells.get(4)) else {
        return;
    };
    calls_and_rate("summary.txt", p, calls, rate, one, out);
}

/// A probe table's calls cell (`1,234` or `1,234 seen`) and rate cell
/// against the probe's calls and its one rate.
fn calls_and_rate(
    surface: &str,
    p: &ProbeResult,
    calls: &str,
    rate: &str,
    one: f64,
    out: &mut Vec<String>,
) {
    let seen = calls
        .split_whitespace()
        .next()
        .unwrap_or("")
        .replace(',', "");
    if seen != p.calls.to_string() {
        out.push(format!(
            "{}: {surface} shows {calls:?} calls, summary.json {}",
            p.name, p.calls
        ));
    }
    let Some(shown) = parse_rate(rate) else {
        return;
    };
    if !close(shown, one) {
        out.push(format!(
            "{}: {surface}'s rate {rate:?} is not its one rate {one:.1}/s",
            p.name
        ));
    }
}

/// The probe's row of report.html's probe table (its symbol cell carries
/// a title): its calls and its one rate, as in summary.txt.
fn html_checks(html: &str, p: &ProbeResult, one: f64, out: &mut Vec<String>) {
    let start = format!("<tr><td>{}</td><td title=", html_escape(&p.name));
    let Some(at) = html.find(&start) else {
        out.push(format!(
            "{}: report.html's probe table has no row of it",
            p.name
        ));
        return;
    };
    let row = &html[at..];
    let row = &row[..row.find("</tr>").unwrap_or(row.len())];
    let cells: Vec<String> = row
        .split("<td")
        .skip(1)
        .map(|c| strip_tags(&format!("<td{c}")))
        .collect();
    // probe | symbol | calls | calls/s | ...
    let (Some(calls), Some(rate)) = (cells.get(2), cells.get(3)) else {
        out.push(format!("{}: report.html's row {row:?} is short", p.name));
        return;
    };
    calls_and_rate("report.html", p, calls, rate, one, out);
}

/// `text` as report.html has it (`PolicyMutex&lt;*&gt;::enter`): escaped
/// by the writer report.html is made with.
fn html_escape(text: &str) -> String {
    maud::html! { (text) }.into_string()
}

/// An HTML fragment's text (tags dropped; the entities innoprof writes in
/// numbers, none).
fn strip_tags(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.trim().to_string()
}

/// `innoprof top DIR`'s wait table: each probe's calls/s as shown.
fn top_rates(dir: &Path, out: &mut Vec<String>) -> Option<HashMap<String, f64>> {
    let run = std::process::Command::new(crate::run::innoprof())
        .arg("top")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output();
    let run = match run {
        Ok(r) if r.status.success() => r,
        Ok(r) => {
            out.push(format!(
                "`innoprof top {}` failed: {}",
                dir.display(),
                String::from_utf8_lossy(&r.stderr).trim()
            ));
            return None;
        }
        Err(e) => {
            out.push(format!("`innoprof top` did not run: {e}"));
            return None;
        }
    };
    let text = String::from_utf8_lossy(&run.stdout);
    let mut rates = HashMap::new();
    // The table after `waits (sorted by …):`, to the first blank line; its
    // first line is the header.
    let table = text
        .lines()
        .skip_while(|l| !l.starts_with("waits (sorted by"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty());
    for line in table {
        let mut f = line.split_whitespace();
        if let (Some(name), Some(rate)) = (f.next(), f.next()) {
            if let Some(r) = parse_rate(rate) {
                rates.insert(name.to_string(), r);
            }
        }
    }
    Some(rates)
}

/// `~616.2`, `3.7`, `193.4k ± 234.0k`, `1.2M`: the leading number.
fn parse_rate(cell: &str) -> Option<f64> {
    let t = cell.trim_start_matches('~');
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(t.len());
    let n: f64 = t[..end].replace(',', "").parse().ok()?;
    Some(match t[end..].chars().next() {
        Some('k') => n * 1e3,
        Some('M') => n * 1e6,
        Some('G') => n * 1e9,
        _ => n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_rates_read_as_written() {
        assert_eq!(role_of("[purge worker];start_thread;f"), "purge worker");
        assert_eq!(role_of("start_thread;f"), "unknown");
        let tv = total_variation(&[("a", 3.0), ("b", 1.0)], &[("a", 1.0), ("b", 1.0)]);
        assert!((tv - 25.0).abs() < 1e-9, "{tv}");
        assert_eq!(parse_rate("~616.2"), Some(616.2));
        assert_eq!(parse_rate("193.4k ± 234.0k"), Some(193_400.0));
        assert_eq!(parse_rate("0"), Some(0.0));
        assert_eq!(parse_rate("-"), None);
        assert_eq!(
            html_escape("PolicyMutex<*>::enter \"x\" & y"),
            "PolicyMutex&lt;*&gt;::enter &quot;x&quot; &amp; y"
        );
    }
}
