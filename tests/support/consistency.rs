//! One story on every surface: a bundle's views must tell what its exact
//! tables tell. Run on every bundle a test has innoprof write
//! ([`crate::check_files`]), so a new output cannot drift from the
//! tables unseen. What is checked, per attached probe:
//!
//! - its folded files (stacks by count and by wait) add up to its exact
//!   calls and wait, less the calls whose stack was lost;
//! - their split by thread role, latch and call site against the exact
//!   role, latch and call-site tables, in points of total variation:
//!   printed past [`SPLIT_POINTS`] (the stacks are calibrated to the
//!   call-site table's cells, so only rounding and the role a thread had
//!   at its first hit against at each hit should be left; to be asserted
//!   once a whole suite run prints none);
//! - timeseries.csv's intervals add up to its calls and wait (but for the
//!   calls seen while attaching, before the first interval);
//! - summary.txt's probe table shows its calls (seen) and its one rate.

use innoprof::model::summary::{ProbeResult, ProbeStatus, Summary};
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
    let series = timeseries_totals(dir);
    let text = std::fs::read_to_string(dir.join("summary.txt")).ok();
    for p in s
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
    {
        folded_checks(dir, p, s.drops.stack_key_map_full, &mut out);
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
        if let Some(text) = &text {
            table_checks(text, p, s.watched_s(), &mut out);
        }
    }
    out
}

/// `key_full`: the recording's hits whose stack found the stack-count map
/// full (any probe's): in no stack, so folded totals undercount by them.
fn folded_checks(dir: &Path, p: &ProbeResult, key_full: u64, out: &mut Vec<String>) {
    let want_calls = p.calls.saturating_sub(p.stacks.lost_calls);
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
        if p.calls < SPLIT_MIN_CALLS {
            continue;
        }
        let pick = |r: (u64, u64)| (if by_wait { r.1 } else { r.0 }) as f64;
        let roles: Vec<(&str, f64)> = p
            .roles
            .iter()
            .map(|r| (r.role.as_str(), pick((r.calls, r.wait_ns_total))))
            .collect();
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
            let names: HashSet<&str> = exact.iter().map(|e| e.0).collect();
            let mut by: HashMap<&str, f64> = HashMap::new();
            for (frames, w) in &stacks {
                *by.entry(label.of(frames, &names)).or_default() += *w as f64;
            }
            let mut exact = exact;
            let rest = whole - exact.iter().map(|e| e.1).sum::<f64>();
            if label != Label::Role && rest > 0.0 {
                exact.push((NONE, rest));
            }
            let tv = total_variation(&by.into_iter().collect::<Vec<_>>(), &exact);
            if tv > SPLIT_POINTS {
                // Printed, not yet asserted: the calibration to the
                // call-site table's cells is new and this check has not
                // yet run over the whole suite (issue 64 item 5).
                eprintln!(
                    "consistency: {}: {}: {file}'s split by {what} is {tv:.1} points from its table (cut: {}, stacks 1 in up to {}, {} calls without a sampled stack)",
                    dir.display(),
                    p.name,
                    p.sampling.is_some(),
                    p.stacks.sampled_every_max,
                    p.stacks.unsampled_calls,
                );
            }
        }
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
/// without a call site). None without the file.
fn timeseries_totals(dir: &Path) -> Option<HashMap<String, (u64, u64)>> {
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
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    for line in lines {
        // Probe names and call sites hold no commas (file:line).
        let f: Vec<&str> = line.split(',').collect();
        if f.get(site).is_some_and(|s| !s.is_empty()) {
            continue;
        }
        let (Some(name), Some(c), Some(w)) = (f.get(probe), f.get(calls), f.get(wait)) else {
            continue;
        };
        let e = out.entry(name.to_string()).or_default();
        e.0 += c.parse::<u64>().unwrap_or(0);
        e.1 += w.parse::<u64>().unwrap_or(0);
    }
    Some(out)
}

/// The probe's row of summary.txt's first table: its calls as seen, and
/// its rate as [`ProbeResult::rate`] gives it over the seconds watched (a
/// `--follow` recording's gaps left out), to the table's rounding.
fn table_checks(text: &str, p: &ProbeResult, watched_s: f64, out: &mut Vec<String>) {
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
    let seen = calls
        .split_whitespace()
        .next()
        .unwrap_or("")
        .replace(',', "");
    if seen != p.calls.to_string() {
        out.push(format!(
            "{}: summary.txt shows {calls:?} calls, summary.json {}",
            p.name, p.calls
        ));
    }
    let Some(shown) = parse_rate(rate) else {
        return;
    };
    let one = p.rate(watched_s).calls_per_s;
    if (shown - one).abs() > 0.06 * one.abs() + 0.1 {
        out.push(format!(
            "{}: summary.txt's rate {rate:?} is not its one rate {one:.1}/s",
            p.name
        ));
    }
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
    }
}
