//! Findings: what is wrong, in plain words, with the numbers that show it.
//!
//! Each rule is one small module under `rules/` that reads a finished
//! recording (its [`Summary`]) and returns at most one [`Finding`]: a
//! title a DBA reads first, the evidence (each item a number from the
//! recording and where in report.html it is), the likely cause and what
//! to check next. Rules only read what the recording measured: a rate is
//! per second the probe was watched (a duty-cycled probe is not projected
//! over time it was off), and a rule whose probe was not attached says
//! nothing rather than guessing.
//!
//! Findings are ranked by severity, then by `weight`: the share of the
//! server's time the finding explains (thread-seconds of waiting per
//! second, or the share of CPU samples), so a large absolute cost outranks
//! a large ratio of small numbers.

pub mod change;
pub mod measure;
mod rules;

use crate::model::finding::Finding;
use crate::model::summary::Summary;
pub use measure::thousands;

/// Every rule's finding on `summary`, most severe and heaviest first.
pub fn evaluate(summary: &Summary) -> Vec<Finding> {
    // A rule names a cause only when that cause's rule fires on the same
    // recording (see latch_hotspot).
    let mut found: Vec<Finding> = rules::ALL.iter().filter_map(|rule| rule(summary)).collect();
    rank(&mut found);
    found
}

fn rank(found: &mut Vec<Finding>) {
    found.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(b.weight.total_cmp(&a.weight))
            .then_with(|| a.rule.cmp(&b.rule))
    });
    // Each consequence right after its cause: the cause is what to act on.
    // One pass over the ranked order, so a cause that is itself explained
    // (or a cycle) cannot reorder forever: such findings keep their rank.
    let placed_after_cause = |f: &Finding, all: &[Finding]| {
        f.explained_by
            .as_ref()
            .is_some_and(|c| all.iter().any(|g| &g.rule == c && g.explained_by.is_none()))
    };
    let ranked = std::mem::take(found);
    for f in ranked.iter().filter(|f| !placed_after_cause(f, &ranked)) {
        found.push(f.clone());
        found.extend(
            ranked
                .iter()
                .filter(|g| {
                    g.explained_by.as_ref() == Some(&f.rule) && placed_after_cause(g, &ranked)
                })
                .cloned(),
        );
    }
}

/// The findings as the text summary's first lines.
pub fn render(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "findings: none (no rule fired; see the tables below)\n".into();
    }
    let mut out = String::from("findings:\n");
    for (i, f) in findings.iter().enumerate() {
        out.push_str(&format!("{}. [{}] {}\n", i + 1, f.severity, f.title));
        for e in &f.evidence {
            out.push_str(&format!("   - {}\n", e.text));
        }
        out.push_str(&format!("   cause: {}\n", f.cause));
        for n in &f.next {
            out.push_str(&format!("   next: {n}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
