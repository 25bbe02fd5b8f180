//! The server's own state (`crate::server_state`) as summary.txt lines:
//! the few facts a reader of the findings checks first. report.html shows
//! all of it.

use crate::findings::thousands;
use crate::model::server_state::ServerState;

/// Settings shown in summary.txt, in this order, when the server has them.
pub const SHOWN_VARIABLES: &[&str] = &[
    "innodb_flush_log_at_trx_commit",
    "sync_binlog",
    "tx_isolation",
    "transaction_isolation",
    "innodb_buffer_pool_size",
    "innodb_log_file_size",
    "innodb_thread_concurrency",
    "performance_schema",
];

pub fn render(state: Option<&ServerState>) -> String {
    let Some(st) = state else {
        return String::new();
    };
    let Some(latest) = st.latest() else {
        let why = st.error.as_deref().unwrap_or("no snapshot");
        return format!("server state: not read ({why})\n");
    };
    let mut out = format!("server state (as {} on {}):\n", st.user, st.socket);
    if let Some(e) = &st.error {
        out.push_str(&format!("  {e}\n"));
    }
    if let (Some(a), Some(b)) = st.history_list_lengths() {
        out.push_str(&format!(
            "  history list length: {} -> {}\n",
            thousands(a as f64),
            thousands(b as f64)
        ));
    }
    if !st.samples.is_empty() {
        out.push_str(&samples_line(st));
    }
    let settings: Vec<String> = SHOWN_VARIABLES
        .iter()
        .filter_map(|v| latest.variables.get(*v).map(|x| format!("{v}={x}")))
        .collect();
    if !settings.is_empty() {
        out.push_str(&format!("  settings: {}\n", settings.join(" ")));
    }
    if let Some(t) = latest.transactions.first() {
        out.push_str(&format!(
            "  oldest transaction: {} (connection {}), open {} s, {}{}\n",
            t.trx_id,
            t.connection
                .map(|c| c.to_string())
                .unwrap_or_else(|| "?".into()),
            t.age_s,
            t.state,
            if t.read_view {
                ", holds a read view"
            } else {
                ""
            }
        ));
    }
    for e in &latest.errors {
        out.push_str(&format!("  not read: {}: {}\n", e.what, e.error));
    }
    out
}

/// One line for the interval samples: how far the history list length and
/// the oldest transaction went, and the most threads running.
fn samples_line(st: &ServerState) -> String {
    let hll: Vec<u64> = st
        .samples
        .iter()
        .filter_map(|p| p.history_list_length)
        .collect();
    let mut parts = Vec::new();
    if let (Some(first), Some(last), Some(max)) = (hll.first(), hll.last(), hll.iter().max()) {
        parts.push(format!(
            "history list length {} -> {} (max {})",
            thousands(*first as f64),
            thousands(*last as f64),
            thousands(*max as f64)
        ));
    }
    if let Some(max) = st
        .samples
        .iter()
        .filter_map(|p| p.status.get("Threads_running"))
        .max()
    {
        parts.push(format!("threads running up to {max}"));
    }
    if let Some(p) = st
        .samples
        .iter()
        .filter(|p| p.oldest_trx_age_s.is_some())
        .max_by_key(|p| p.oldest_trx_age_s)
    {
        parts.push(format!(
            "oldest transaction up to {} s (connection {})",
            p.oldest_trx_age_s.unwrap_or(0),
            p.oldest_trx_connection
                .map(|c| c.to_string())
                .unwrap_or_else(|| "?".into())
        ));
    }
    let failed = st.samples.iter().filter(|p| !p.errors.is_empty()).count();
    if failed > 0 {
        parts.push(format!("{failed} samples with a failed query"));
    }
    format!(
        "  at each interval ({} samples): {}\n",
        st.samples.len(),
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::server_state::{Snapshot, StatePoint};

    fn point(hll: Option<u64>, running: u64, oldest: Option<(u64, u64)>) -> StatePoint {
        StatePoint {
            history_list_length: hll,
            oldest_trx_connection: oldest.map(|o| o.0),
            oldest_trx_age_s: oldest.map(|o| o.1),
            status: [("Threads_running".to_string(), running)].into(),
            ..Default::default()
        }
    }

    /// The interval line says where the history list length went (first,
    /// last, max), the most threads running, and the oldest transaction at
    /// its oldest, from the samples that have each.
    #[test]
    fn interval_samples_are_one_line() {
        let st = ServerState {
            user: "root".into(),
            socket: "/s".into(),
            start: Some(Snapshot::default()),
            end: Some(Snapshot::default()),
            samples: vec![
                point(Some(120), 3, Some((23, 4))),
                point(None, 9, None),
                point(Some(4_800), 2, Some((23, 6))),
                point(Some(3_000), 1, Some((23, 7))),
            ],
            ..Default::default()
        };
        let text = render(Some(&st));
        assert!(
            text.contains(
                "  at each interval (4 samples): history list length 120 -> 3,000 (max 4,800); \
                 threads running up to 9; oldest transaction up to 7 s (connection 23)\n"
            ),
            "{text}"
        );
    }
}
