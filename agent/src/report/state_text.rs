//! The server's own state (`crate::server_state`) as summary.txt lines:
//! the few facts a reader of the findings checks first. report.html shows
//! all of it.

use crate::findings::thousands;
use crate::server_state::ServerState;

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
