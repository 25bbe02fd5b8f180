//! The server's own account as data: the snapshots of its state taken over
//! SQL (by [`crate::server_state`]), what changed between two, and who holds
//! the oldest snapshot. summary.json carries it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One client connection as the processlist shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Connection {
    /// The processlist id (`KILL` takes it).
    pub id: u64,
    pub user: Option<String>,
    pub host: Option<String>,
    pub db: Option<String>,
    /// innoprof's own connection, reading this state: its statements
    /// (SHOW ENGINE INNODB STATUS, ...) are innoprof's, not the workload's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub innoprof: bool,
}

/// A connection's user as tables show it: innoprof's own marked as such
/// (its statements are innoprof reading the server's state).
pub fn user_shown(user: Option<&str>, innoprof: bool) -> Option<String> {
    match (user, innoprof) {
        (Some(u), true) => Some(format!("{u} (innoprof)")),
        (None, true) => Some("innoprof".into()),
        (u, false) => u.map(str::to_string),
    }
}

impl Connection {
    /// Its user as tables show it ([`user_shown`]).
    pub fn user_shown(&self) -> Option<String> {
        user_shown(self.user.as_deref(), self.innoprof)
    }
}

/// One transaction, oldest first: information_schema.innodb_trx joined
/// with the processlist, and whether InnoDB's status shows a read view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Transaction {
    pub trx_id: String,
    pub state: String,
    pub started: String,
    /// Seconds since it started, by the server's clock.
    pub age_s: u64,
    pub isolation: Option<String>,
    pub rows_locked: Option<u64>,
    pub rows_modified: Option<u64>,
    /// The connection (processlist id, `KILL` takes it).
    pub connection: Option<u64>,
    pub user: Option<String>,
    pub host: Option<String>,
    pub db: Option<String>,
    /// Processlist command (`Sleep` while it idles between statements).
    pub command: Option<String>,
    /// The running statement, or none between statements.
    pub query: Option<String>,
    /// It holds a consistent-read snapshot (read view).
    pub read_view: bool,
}

/// A table whose clustered index InnoDB generated (`GEN_CLUST_INDEX`): no
/// primary key and no unique NOT NULL key, so every insert takes a row id
/// from the one server-wide counter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoPkTable {
    /// `schema/table`, as InnoDB names it.
    pub name: String,
    /// Rows changed since InnoDB last computed its statistics
    /// (MODIFIED_COUNTER; it restarts at each automatic recalculation).
    pub modified: u64,
    /// InnoDB's row estimate.
    pub rows: u64,
}

/// performance_schema's instrumentation, when it is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PerfSchemaState {
    pub instruments: u64,
    pub enabled: u64,
    pub timed: u64,
    /// Mutex, rw-lock and condition instruments enabled and timed: the
    /// dearest, hit on every latch acquisition.
    pub synch_timed: u64,
    pub consumers: Vec<String>,
}

/// A query that failed, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QueryError {
    pub what: String,
    pub error: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Snapshot {
    pub taken_unix_ms: u128,
    /// How long the snapshot's queries took.
    pub took_ms: f64,
    pub variables: BTreeMap<String, String>,
    /// Numeric global status kept by [`keep_status`].
    pub status: BTreeMap<String, u64>,
    pub history_list_length: Option<u64>,
    pub transactions: Vec<Transaction>,
    /// The client connections (information_schema.PROCESSLIST), to name
    /// the users behind the statements the probes saw; empty in bundles
    /// older than it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<Connection>,
    pub no_pk_tables: Vec<NoPkTable>,
    pub performance_schema: Option<PerfSchemaState>,
    pub errors: Vec<QueryError>,
    /// SHOW ENGINE INNODB STATUS, written beside the summary
    /// (innodb_status.start.txt / .end.txt), not inside it.
    #[serde(skip)]
    pub innodb_status: Option<String>,
}

/// Global status read at each `--interval`: the counters whose rate tells
/// the story of an incident (throughput, row work, waits), and threads.
pub const SAMPLED_STATUS: &[&str] = &[
    "Threads_running",
    "Threads_connected",
    "Questions",
    "Com_commit",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_delete",
    "Innodb_rows_read",
    "Innodb_rows_inserted",
    "Innodb_rows_updated",
    "Innodb_rows_deleted",
    "Innodb_row_lock_current_waits",
    "Innodb_row_lock_waits",
    "Innodb_log_waits",
    "Innodb_os_log_fsyncs",
    "Innodb_data_fsyncs",
    "Innodb_buffer_pool_pages_dirty",
];

/// The cheap part of the server's state, read at each `--interval` of a
/// recording: three short queries (about a millisecond here), no SHOW
/// ENGINE INNODB STATUS (which walks every transaction under a global
/// mutex) and no dictionary scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatePoint {
    pub taken_unix_ms: u128,
    pub took_ms: f64,
    /// From InnoDB's `trx_rseg_history_len` metric (enabled by default on
    /// every server line here; never enabled by innoprof, which only reads).
    pub history_list_length: Option<u64>,
    /// The oldest open transaction (our own left out): its connection and
    /// age in seconds, by the server's clock.
    pub oldest_trx_connection: Option<u64>,
    pub oldest_trx_age_s: Option<u64>,
    /// [`SAMPLED_STATUS`] counters the server has.
    pub status: BTreeMap<String, u64>,
    pub errors: Vec<QueryError>,
}

/// What was captured over a recording.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerState {
    /// The socket and user logged in with; empty when no login worked.
    pub socket: String,
    pub user: String,
    /// Why nothing was captured (no socket, login refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub start: Option<Snapshot>,
    pub end: Option<Snapshot>,
    /// Read at each `--interval` between the two, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<StatePoint>,
}

impl ServerState {
    /// This state with every transaction's statement fingerprinted
    /// (literals replaced by `?`, see [`crate::text::fingerprint`]), and
    /// SHOW ENGINE INNODB STATUS (which quotes statements) dropped: for
    /// readers who may not see the data a statement carries (`serve`'s
    /// /findings, open to every local user).
    pub fn fingerprinted(mut self) -> Self {
        for snapshot in [&mut self.start, &mut self.end].into_iter().flatten() {
            for t in &mut snapshot.transactions {
                if let Some(q) = &mut t.query {
                    *q = crate::text::fingerprint(q);
                }
            }
            snapshot.innodb_status = None;
        }
        self
    }

    /// The end snapshot, else the start one.
    pub fn latest(&self) -> Option<&Snapshot> {
        self.end.as_ref().or(self.start.as_ref())
    }

    /// History list length at the start and at the end, where read.
    pub fn history_list_lengths(&self) -> (Option<u64>, Option<u64>) {
        let at = |s: &Option<Snapshot>| s.as_ref().and_then(|s| s.history_list_length);
        (at(&self.start), at(&self.end))
    }

    /// How much a global status counter grew between start and end.
    pub fn status_delta(&self, name: &str) -> Option<u64> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        Some(e.status.get(name)?.saturating_sub(*s.status.get(name)?))
    }

    /// The transaction whose snapshot holds purge back, at the end (else
    /// at the start), and whether the server said so: the oldest one
    /// InnoDB's status shows with a read view (MySQL 5.6-8.0 list every
    /// transaction there), else the oldest in REPEATABLE READ or
    /// SERIALIZABLE open for a second or more, which keeps the read view
    /// of its first read until it ends (MariaDB 10.2's status leaves
    /// read-only transactions out of its list).
    pub fn snapshot_holder(&self) -> Option<(&Transaction, HolderEvidence)> {
        let txs = &self.latest()?.transactions;
        if let Some(t) = txs.iter().filter(|t| t.read_view).max_by_key(|t| t.age_s) {
            return Some((t, HolderEvidence::ReadView));
        }
        txs.iter()
            .filter(|t| {
                t.age_s >= 1
                    && t.isolation
                        .as_deref()
                        .is_some_and(|i| i.starts_with("REPEATABLE") || i == "SERIALIZABLE")
            })
            .max_by_key(|t| t.age_s)
            .map(|t| (t, HolderEvidence::Isolation))
    }

    /// Tables without a primary key that were written while recording:
    /// (name, rows changed), most first. Not exact: the rows-changed
    /// counter restarts at every statistics recalculation, and the row
    /// count is InnoDB's estimate; the larger of the two changes is shown.
    pub fn no_pk_tables_written(&self) -> Vec<(String, u64)> {
        let Some(end) = self.end.as_ref() else {
            return Vec::new();
        };
        let before: BTreeMap<&str, &NoPkTable> = self
            .start
            .iter()
            .flat_map(|s| s.no_pk_tables.iter().map(|t| (t.name.as_str(), t)))
            .collect();
        let mut written: Vec<(String, u64)> = end
            .no_pk_tables
            .iter()
            .filter_map(|t| {
                // A statistics recalculation (InnoDB's background thread,
                // after 10 % of a table changed) restarts the counter and
                // refreshes the row estimate: either one moving shows writes.
                let grew = match before.get(t.name.as_str()) {
                    Some(b) => {
                        let modified = if t.modified >= b.modified {
                            t.modified - b.modified
                        } else {
                            t.modified
                        };
                        modified.max(t.rows.abs_diff(b.rows))
                    }
                    None => t.modified,
                };
                (grew > 0).then(|| (t.name.clone(), grew))
            })
            .collect();
        written.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        written
    }
}

/// Of [`SAMPLED_STATUS`], the gauges (levels, not counts): `diff`
/// compares the rest per second.
const STATUS_GAUGES: &[&str] = &[
    "Threads_running",
    "Threads_connected",
    "Innodb_row_lock_current_waits",
    "Innodb_buffer_pool_pages_dirty",
];

/// Two recordings' server state side by side (`innoprof diff`): what a
/// DBA compares first when "it was fine yesterday".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateComparison {
    /// Settings whose value differs (each recording's latest snapshot).
    pub settings_changed: Vec<SettingChange>,
    /// At each recording's end.
    pub history_list_length: [Option<u64>; 2],
    /// The oldest open transaction's age at each recording's end.
    pub oldest_trx_age_s: [Option<u64>; 2],
    /// [`SAMPLED_STATUS`]' counters per second over each recording, where both
    /// recordings have the counter.
    pub rates: Vec<RateChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingChange {
    pub name: String,
    pub baseline: Option<String>,
    pub incident: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateChange {
    pub name: String,
    pub baseline_per_s: f64,
    pub incident_per_s: f64,
}

/// `delta` per second between two readings taken at these times.
fn per_second(earlier_ms: u128, later_ms: u128, delta: Option<u64>) -> Option<f64> {
    let dt = later_ms.checked_sub(earlier_ms)? as f64 / 1e3;
    (dt > 0.0).then(|| delta.map(|d| d as f64 / dt))?
}

impl StatePoint {
    /// A status counter's growth per second since `earlier`; None when
    /// either lacks it or it went back (a server restart).
    pub fn rate_since(&self, earlier: &StatePoint, name: &str) -> Option<f64> {
        let delta = self
            .status
            .get(name)?
            .checked_sub(*earlier.status.get(name)?);
        per_second(earlier.taken_unix_ms, self.taken_unix_ms, delta)
    }
}

impl ServerState {
    /// A status counter's growth per second between start and end.
    pub fn status_rate(&self, name: &str) -> Option<f64> {
        let (s, e) = (self.start.as_ref()?, self.end.as_ref()?);
        per_second(s.taken_unix_ms, e.taken_unix_ms, self.status_delta(name))
    }

    /// This recording (the baseline) against `incident`; None unless both
    /// have a snapshot.
    pub fn compare(&self, incident: &ServerState) -> Option<StateComparison> {
        let (b, i) = (self.latest()?, incident.latest()?);
        let names: std::collections::BTreeSet<&String> =
            b.variables.keys().chain(i.variables.keys()).collect();
        let settings_changed = names
            .into_iter()
            .filter(|n| b.variables.get(*n) != i.variables.get(*n))
            // A setting only one side has is a rename across versions
            // (tx_isolation, transaction_isolation), not a change.
            .filter(|n| b.variables.contains_key(*n) && i.variables.contains_key(*n))
            .map(|n| SettingChange {
                name: n.clone(),
                baseline: b.variables.get(n).cloned(),
                incident: i.variables.get(n).cloned(),
            })
            .collect();
        let oldest = |s: &Snapshot| s.transactions.iter().map(|t| t.age_s).max();
        let rates = SAMPLED_STATUS
            .iter()
            .filter(|n| !STATUS_GAUGES.contains(n))
            .filter_map(|n| {
                Some(RateChange {
                    name: n.to_string(),
                    baseline_per_s: self.status_rate(n)?,
                    incident_per_s: incident.status_rate(n)?,
                })
            })
            .collect();
        Some(StateComparison {
            settings_changed,
            history_list_length: [b.history_list_length, i.history_list_length],
            oldest_trx_age_s: [oldest(b), oldest(i)],
            rates,
        })
    }
}

/// How [`ServerState::snapshot_holder`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderEvidence {
    /// InnoDB's status lists its read view.
    ReadView,
    /// Its isolation level keeps one for its whole life.
    Isolation,
}
