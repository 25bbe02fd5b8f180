//! A finding as data: what is wrong, how severe, and the numbers behind
//! it (the rules that make them are in [`crate::findings`]).

use serde::{Deserialize, Serialize};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; nothing to act on by itself.
    Info,
    /// Costs the server noticeably; look at it.
    Warning,
    /// Dominates where the server's time goes.
    Critical,
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

/// One number that triggered a finding, and where it is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    /// `innodb.undo.prev_version: 41,200 calls/s while watched (x310 per transaction)`
    pub text: String,
    /// The report.html section holding it (`summary`, `cpu`, `latches`…).
    pub anchor: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// The rule's name (`many_row_versions`), stable: Prometheus labels it.
    pub rule: String,
    pub severity: Severity,
    /// What is wrong, in plain words.
    pub title: String,
    pub evidence: Vec<Evidence>,
    /// Why this usually happens.
    pub cause: String,
    /// What to check or do next.
    pub next: Vec<String>,
    /// Share of the server's time it explains: thread-seconds per second
    /// of waiting, or the fraction of CPU samples. Ranks findings of one
    /// severity.
    pub weight: f64,
    /// The rule of another finding of this recording that causes this one
    /// (page-latch waits while readers walk undo chains holding the page's
    /// latch): ranked right after it, whatever the weights say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explained_by: Option<String>,
}
