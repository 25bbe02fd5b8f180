//! What the rules read off a recording: a probe, its watched time and
//! rates, a counter's rate, a CPU share; and how they print numbers.

use crate::model::finding::Evidence;
use crate::model::summary::{ProbeResult, ProbeStatus, Summary};

/// An attached probe by name.
pub fn probe<'a>(summary: &'a Summary, name: &str) -> Option<&'a ProbeResult> {
    summary
        .probes
        .iter()
        .find(|p| p.name == name && p.status == ProbeStatus::Attached)
}

/// Seconds the probe was watched (attached): the recording's seconds
/// watched (a `--follow` recording's gaps left out), times the fraction
/// the governor kept it on.
pub fn watched_s(summary: &Summary, p: &ProbeResult) -> f64 {
    summary.watched_s() * p.attached_fraction()
}

/// The probe's calls per second, as every surface shows it
/// ([`ProbeResult::rate`]: exact, its estimate's, or per second watched);
/// None if it was never on.
pub fn watched_rate(summary: &Summary, p: &ProbeResult) -> Option<f64> {
    (watched_s(summary, p) > 0.0).then(|| p.rate(summary.watched_s()).calls_per_s)
}

/// Thread-seconds waited per second while watched (1.0: one thread
/// waiting all the time), from the same rate.
pub fn waiting_threads(summary: &Summary, p: &ProbeResult) -> Option<f64> {
    (watched_s(summary, p) > 0.0).then(|| p.rate(summary.watched_s()).wait_ns_per_s / 1e9)
}

/// An exact in-memory counter's rate (`innodb.trx_sys.trx_ids`).
pub fn counter_rate(summary: &Summary, name: &str) -> Option<f64> {
    summary
        .counters
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.per_sec)
}

/// The share (0..1) of on-CPU samples whose stacks pass through a
/// function whose name starts with one of `prefixes` (total %).
pub fn cpu_share(summary: &Summary, prefixes: &[&str]) -> Option<f64> {
    let on = &summary.cpu.as_ref()?.oncpu;
    if on.samples == 0 {
        return None;
    }
    let best = on
        .top
        .rows
        .iter()
        .filter(|r| prefixes.iter().any(|p| r.symbol.starts_with(p)))
        .map(|r| r.total_pct)
        .fold(0.0, f64::max);
    Some(best / 100.0)
}

/// `12,345`
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Who waits at `probe`: its client connections' wait (calls where
/// untimed) by statement, the `n` largest shares, as evidence text
/// (`82 % under UPDATE sbtest1 SET k=k+? WHERE id=? (app_rw, 3 connections)`);
/// None without statements or hits.
pub fn statements_at(summary: &Summary, probe: &str, n: usize) -> Option<Evidence> {
    let who = summary.who.as_ref().filter(|w| w.attributed)?;
    let mut rows: Vec<(StatementName<'_>, u64)> = who
        .statements
        .iter()
        .filter_map(|s| {
            let p = s.probes.iter().find(|p| p.probe == probe)?;
            Some((
                StatementName::Full(s),
                if p.wait_ns_total > 0 {
                    p.wait_ns_total
                } else {
                    p.calls
                },
            ))
        })
        .collect();
    shares_evidence(&mut rows, n, &format!("the statements waiting at {probe}"))
}

/// Who waits on `latch` through `probe` (`who.latch_statements`): the
/// statements' shares of its wait (calls where untimed), the `n` largest;
/// None where no statement's hit on it was counted.
pub fn statements_on_latch(
    summary: &Summary,
    probe: &str,
    latch: &str,
    n: usize,
) -> Option<Evidence> {
    let who = summary.who.as_ref().filter(|w| w.attributed)?;
    let timed = who
        .statements_on_latch(probe, latch)
        .any(|r| r.wait_ns_total > 0);
    let mut rows: Vec<(StatementName<'_>, u64)> = who
        .statements_on_latch(probe, latch)
        .map(|r| {
            let name = match who.statements.iter().find(|s| s.id == r.statement) {
                Some(s) => StatementName::Full(s),
                None => StatementName::Fingerprint(&r.fingerprint),
            };
            (name, if timed { r.wait_ns_total } else { r.calls })
        })
        .collect();
    shares_evidence(&mut rows, n, &format!("the statements waiting on {latch}"))
}

/// A statement as evidence names it: with its users and connections
/// where the summary lists it, else by fingerprint.
enum StatementName<'a> {
    Full(&'a crate::model::who::StatementResult),
    Fingerprint(&'a str),
}

impl StatementName<'_> {
    fn key(&self) -> &str {
        match self {
            Self::Full(s) => &s.id,
            Self::Fingerprint(f) => f,
        }
    }
}

/// "`what`: 82 % under UPDATE ... (app_rw, 3 connections); ..." for the
/// `n` largest shares of the rows' values; None when they sum to 0.
fn shares_evidence(
    rows: &mut [(StatementName<'_>, u64)],
    n: usize,
    what: &str,
) -> Option<Evidence> {
    let total = crate::model::saturating_sum(rows.iter().map(|(_, v)| *v));
    if total == 0 {
        return None;
    }
    let parts = shares(rows, total, n);
    Some(Evidence {
        text: format!("{what}: {}", parts.join("; ")),
        anchor: "statements".into(),
    })
}

/// `82 % under UPDATE ... (app_rw, 3 connections)` for the `n` largest
/// shares of `total`, largest first.
fn shares(rows: &mut [(StatementName<'_>, u64)], total: u64, n: usize) -> Vec<String> {
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.key().cmp(b.0.key())));
    rows.iter()
        .take(n)
        .map(|(name, v)| {
            let share = 100.0 * *v as f64 / total as f64;
            let s = match name {
                StatementName::Full(s) => s,
                StatementName::Fingerprint(f) => return format!("{share:.0} % under {f}"),
            };
            let users = match s.users.as_slice() {
                [] => String::new(),
                [one] => format!("{one}, "),
                [first, rest @ ..] => format!("{first} +{}, ", rest.len()),
            };
            let conns = if s.connections == 1 {
                "1 connection".to_string()
            } else {
                format!("{} connections", s.connections)
            };
            format!("{share:.0} % under {} ({users}{conns})", s.fingerprint)
        })
        .collect()
}

/// Who held the latch while `probe`'s waits waited, where the latch
/// records its holder (`who.blocking`): "held by UPDATE t SET ... (connection
/// 31) for 80 % of the 2,410 waits tied to a holder; ...", the `n` holders
/// with the most wait. None when no wait was tied to a holder.
pub fn holders_at(summary: &Summary, probe: &str, n: usize) -> Option<Evidence> {
    let who = summary.who.as_ref()?;
    let mut by_holder: Vec<(String, u64, u64)> = Vec::new();
    let (mut released, mut edges) = (0u64, 0u64);
    for e in who.blocking.iter().filter(|e| e.probe == probe) {
        let Some(name) = e.holder_name() else {
            continue;
        };
        let name = match &e.holder_site {
            Some(site) => format!("{name} at {site}"),
            None => name,
        };
        edges = edges.saturating_add(e.calls);
        if e.released {
            released = released.saturating_add(e.calls);
        }
        match by_holder.iter_mut().find(|h| h.0 == name) {
            Some(h) => {
                h.1 = h.1.saturating_add(e.wait_ns_total);
                h.2 = h.2.saturating_add(e.calls);
            }
            None => by_holder.push((name, e.wait_ns_total, e.calls)),
        }
    }
    // Every edge's waits, where the recording kept the totals (the list
    // keeps the biggest edges only).
    let listed = by_holder
        .iter()
        .fold((0, 0), |(w, c), h| (w + h.1, c + h.2));
    let (wait, calls) = who
        .blocking_totals
        .iter()
        .find(|t| t.probe == probe)
        .map_or(listed, |t| {
            (t.wait_ns_total.max(listed.0), t.calls.max(listed.1))
        });
    if calls == 0 || by_holder.is_empty() {
        return None;
    }
    by_holder.sort_by(|a, b| (b.1, b.2).cmp(&(a.1, a.2)).then_with(|| a.0.cmp(&b.0)));
    let share = |h: &(String, u64, u64)| {
        if wait > 0 {
            100.0 * h.1 as f64 / wait as f64
        } else {
            100.0 * h.2 as f64 / calls as f64
        }
    };
    let parts: Vec<String> = by_holder
        .iter()
        .take(n)
        .map(|h| format!("{:.0} % {}", share(h), h.0))
        .collect();
    let how = if released == 0 {
        String::new()
    } else if released == edges {
        " (each the thread whose release ended the wait)".to_string()
    } else {
        format!(
            " ({} of them by the thread whose release ended the wait)",
            thousands(released as f64)
        )
    };
    Some(Evidence {
        text: format!(
            "held, for the {} waits at {probe} tied to a holder{how}, by: {}",
            thousands(calls as f64),
            parts.join("; ")
        ),
        anchor: "blocking".into(),
    })
}
