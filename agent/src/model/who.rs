//! Who made the probes' hits: the statements (by fingerprint) and the
//! client connections behind them, as summary.json keeps them.

use serde::{Deserialize, Serialize};

/// The statements and connections behind the client connections' hits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Who {
    /// How each hit's statement was read (`THD from TLS at fsbase-0x90;
    /// ...`), or why statements are not attributed in this recording.
    pub how: String,
    /// Whether hits were tied to statements at all.
    pub attributed: bool,
    /// Whether `sample` holds raw statement text (`--statement-text`);
    /// otherwise only fingerprints (no literal) are kept.
    pub text_kept: bool,
    /// Most wait first, then most calls; at most [`MAX_STATEMENTS`].
    pub statements: Vec<StatementResult>,
    /// Most wait first, then most calls; at most [`MAX_CONNECTIONS`].
    pub connections: Vec<ConnectionResult>,
    /// Statements and connections left out of the two lists.
    pub statements_more: u64,
    pub connections_more: u64,
    /// Client connections' calls tied to no statement, and why.
    pub unattributed: Unattributed,
    /// Waits for a latch's exclusive holder, where the latch records it
    /// (`rw_lock_t::writer_thread` in MySQL 5.6-5.7, MariaDB 10.2-10.5;
    /// `sux_lock::writer` in MariaDB 10.6+):
    /// waiter's statement -> holder's statement or thread. Most wait first,
    /// at most [`MAX_BLOCKING`]. Empty where no probed latch records a holder.
    #[serde(default)]
    pub blocking: Vec<Blocking>,
}

pub const MAX_BLOCKING: usize = 30;

/// One waiter -> holder edge of a probe's latch waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Blocking {
    pub probe: String,
    /// The waiting statement's id (`statements[].id`); none for a
    /// background waiter or one whose statement is unknown.
    pub waiter_statement: Option<String>,
    pub waiter_fingerprint: Option<String>,
    /// The holder's statement id, when the holder was running one (it
    /// may have hit no probe itself: then it is only here).
    pub holder_statement: Option<String>,
    pub holder_fingerprint: Option<String>,
    /// The holder's connection (processlist id), with its statement.
    pub holder_connection: Option<u64>,
    /// The holder's kernel thread id, when it ran no statement (a
    /// background thread, or a connection between statements).
    pub holder_thread: Option<u32>,
    pub calls: u64,
    pub wait_ns_total: u64,
}

pub const MAX_STATEMENTS: usize = 50;

impl Who {
    /// Names each connection's user, host and db, and each statement's
    /// users (most calls first), from the processlist rows `conns`.
    pub fn name_users(
        &mut self,
        conns: &std::collections::HashMap<u64, crate::model::server_state::Connection>,
    ) {
        for c in &mut self.connections {
            if let Some(row) = conns.get(&c.id) {
                c.user.clone_from(&row.user);
                c.host.clone_from(&row.host);
                c.db.clone_from(&row.db);
            }
        }
        for s in &mut self.statements {
            let mut per_user: std::collections::HashMap<String, u64> =
                std::collections::HashMap::new();
            for (conn, calls) in &s.connection_calls {
                let user = conns
                    .get(conn)
                    .and_then(|c| c.user.clone())
                    .unwrap_or_else(|| "?".into());
                *per_user.entry(user).or_default() += calls;
            }
            let mut users: Vec<(String, u64)> = per_user.into_iter().collect();
            users.sort_by(|a, b| (b.1, &a.0).cmp(&(a.1, &b.0)));
            s.users = users.into_iter().map(|(u, _)| u).collect();
        }
    }
}
pub const MAX_CONNECTIONS: usize = 50;

/// One statement fingerprint: every execution that hit a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatementResult {
    /// 16 hex digits of the fingerprint's hash: the same statement has the
    /// same id in every recording (what `innoprof diff` matches).
    pub id: String,
    /// Literals replaced by `?`, lists by `(?+)`, whitespace squeezed.
    pub fingerprint: String,
    /// One execution's text as the server had it, cut to 512 bytes; only
    /// with `--statement-text` (bundles are attached to tickets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<String>,
    /// Executions (distinct `query_id`s) that hit a probe; executions
    /// that hit none are not seen.
    pub executions: u64,
    pub connections: u64,
    /// Users running it (from the processlist), most calls first.
    pub users: Vec<String>,
    pub calls: u64,
    pub wait_ns_total: u64,
    /// Per probe, most wait first.
    pub probes: Vec<StatementProbe>,
    /// Per connection id: its calls of this statement (to name the users
    /// once the processlist is read; not kept in the bundle).
    #[serde(skip)]
    pub connection_calls: Vec<(u64, u64)>,
}

/// A statement's share of one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatementProbe {
    pub probe: String,
    pub calls: u64,
    pub wait_ns_total: u64,
}

/// One client connection's hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionResult {
    /// The processlist id.
    pub id: u64,
    /// From the processlist at the start or the end; none when the
    /// connection came and went between the two.
    pub user: Option<String>,
    pub host: Option<String>,
    pub db: Option<String>,
    pub calls: u64,
    pub wait_ns_total: u64,
    /// Distinct statements (fingerprints) it ran that hit a probe.
    pub statements: u64,
    /// The id of its statement with the most wait (then calls).
    pub top_statement: Option<String>,
}

/// Client connections' calls not tied to a statement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Unattributed {
    /// The statement map was full.
    pub map_full: u64,
    /// The THD or its query_id could not be read (a thread between
    /// statements, or not a THD's).
    pub no_thd: u64,
    /// Counted to a statement whose text was never read (its text map full).
    pub no_text: u64,
    /// Waits not tied to their latch's holder (the holder map full).
    #[serde(default)]
    pub holders_full: u64,
}
