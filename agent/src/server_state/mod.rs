//! The server's own account of itself, read over SQL at the start and end
//! of a recording: what the probes cannot say (which transaction holds the
//! snapshot, which tables have no primary key, which durability settings
//! are in force, whether performance_schema times everything).
//!
//! Optional by design: without a login (or with `--no-server-state`) a
//! recording is complete without it, and the findings that would name a
//! transaction or a table say what they can from the probes alone.
//! Capture is read-only (SHOW and SELECT on information_schema and
//! performance_schema), bounded in time (each query [`QUERY_TIMEOUT`], each
//! snapshot [`SNAPSHOT_BUDGET`]) and size (row limits, truncated text), and
//! a failing query is recorded in the snapshot, never fatal.

pub mod connect;
pub mod innodb_status;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::model::server_state::{
    NoPkTable, PerfSchemaState, QueryError, ServerState, Snapshot, StatePoint, Transaction,
    SAMPLED_STATUS,
};
pub use connect::{connect, ConnectError, SqlError, SqlSession, StateSource, QUERY_TIMEOUT};

pub const SNAPSHOT_BUDGET: Duration = Duration::from_secs(6);
/// The oldest transactions kept per snapshot.
const MAX_TRANSACTIONS: usize = 20;
/// Connections listed per snapshot (to name statements' users).
const MAX_CONNECTIONS: usize = 5000;
/// Statement text kept per transaction.
const MAX_QUERY_CHARS: usize = 1024;
/// SHOW ENGINE INNODB STATUS kept per snapshot (the server caps it near
/// 1 MB itself).
const MAX_STATUS_BYTES: usize = 1 << 20;
/// Tables without a primary key kept per snapshot.
const MAX_NO_PK_TABLES: usize = 200;

/// Variables that explain findings: durability, isolation, sizes,
/// concurrency, instrumentation. Spelt as each server line names them
/// (`tx_isolation` before MySQL 8.0 / MariaDB 11.1, `transaction_isolation`
/// after); a server without one leaves it out.
const VARIABLES: &[&str] = &[
    "version",
    "version_comment",
    "innodb_flush_log_at_trx_commit",
    "sync_binlog",
    "log_bin",
    "innodb_flush_method",
    "innodb_doublewrite",
    "tx_isolation",
    "transaction_isolation",
    "innodb_buffer_pool_size",
    "innodb_log_file_size",
    "innodb_log_files_in_group",
    "innodb_log_buffer_size",
    "innodb_thread_concurrency",
    "innodb_purge_threads",
    "innodb_autoinc_lock_mode",
    "max_connections",
    "performance_schema",
];

/// Of [`VARIABLES`], those whose change does not by itself change the cost
/// of commits, reads or latches; every other one does (`diff` warns when
/// one changed: see [`is_consequential`]).
const INCIDENTAL_VARIABLES: &[&str] = &[
    "version_comment",
    "innodb_log_buffer_size",
    "innodb_log_files_in_group",
    "innodb_purge_threads",
    "innodb_autoinc_lock_mode",
    "max_connections",
];

/// A setting whose change alone can change what every commit, read or
/// latch costs (durability, isolation, sizes, concurrency,
/// performance_schema, the version).
pub fn is_consequential(variable: &str) -> bool {
    VARIABLES.contains(&variable) && !INCIDENTAL_VARIABLES.contains(&variable)
}

/// Global status kept: InnoDB's and the handler's counters, statements by
/// kind, threads.
fn keep_status(name: &str) -> bool {
    ["Innodb_", "Handler_", "Com_"]
        .iter()
        .any(|p| name.starts_with(p))
        || matches!(
            name,
            "Threads_running" | "Threads_connected" | "Questions" | "Uptime" | "Slow_queries"
        )
}

/// An open session and what it has captured so far.
pub struct StateCapture {
    session: SqlSession,
    /// Our own connection, left out of the transaction list.
    own_id: Option<u64>,
    start: Option<Snapshot>,
    samples: Vec<StatePoint>,
}

/// The most a login with the start snapshot, or the end snapshot, may hold
/// up a recording. A server in trouble may never answer: its socket's
/// backlog full (a Unix `connect` then blocks, with no timeout of its own)
/// or the process stopped. The work goes on in a thread that is abandoned
/// when this passes.
pub const CAPTURE_DEADLINE: Duration = Duration::from_secs(8);

/// Runs `work` in a thread, waiting at most `deadline` for it.
fn within<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("innoprof-sql".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .ok()?;
    rx.recv_timeout(deadline).ok()
}

impl StateCapture {
    /// [`Self::start`], given up after [`CAPTURE_DEADLINE`].
    pub fn start_within(pid: u32, source: &StateSource) -> Result<Self, ConnectError> {
        let source = source.clone();
        within(CAPTURE_DEADLINE, move || Self::start(pid, &source)).unwrap_or(Err(
            ConnectError::NoAnswer {
                pid,
                after: CAPTURE_DEADLINE,
            },
        ))
    }

    /// [`Self::finish`], given up after [`CAPTURE_DEADLINE`]: then the
    /// start snapshot is kept and the end one says why it is missing.
    pub fn finish_within(self) -> ServerState {
        let (socket, user, start, samples) = (
            self.session.socket.clone(),
            self.session.user.clone(),
            self.start.clone(),
            self.samples.clone(),
        );
        within(CAPTURE_DEADLINE, move || self.finish()).unwrap_or_else(|| ServerState {
            socket,
            user,
            error: Some(format!(
                "the end snapshot got no answer within {} s",
                CAPTURE_DEADLINE.as_secs()
            )),
            start,
            end: None,
            samples,
        })
    }

    /// Reads [`StatePoint`]s every `interval` in a thread of its own, so a
    /// slow server never delays the recording's loop, until
    /// [`SamplingCapture::finish_within`].
    pub fn sample_every(self, interval: Duration) -> SamplingCapture {
        let (socket, user, start) = (
            self.session.socket.clone(),
            self.session.user.clone(),
            self.start.clone(),
        );
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (back, returned) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("innoprof-sql".into())
            .spawn(move || {
                let mut capture = self;
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(interval)
                {
                    let point = capture.sample();
                    capture.samples.push(point);
                }
                let _ = back.send(capture);
            });
        SamplingCapture {
            stop: spawned.is_ok().then_some(stop),
            returned,
            socket,
            user,
            start,
        }
    }

    /// Logs in (see [`connect`]) and takes the start snapshot.
    pub fn start(pid: u32, source: &StateSource) -> Result<Self, ConnectError> {
        let mut session = connect(pid, source)?;
        let own_id = session
            .conn
            .query_first::<u64, _>("SELECT CONNECTION_ID()")
            .ok()
            .flatten();
        let mut capture = Self {
            session,
            own_id,
            start: None,
            samples: Vec::new(),
        };
        capture.start = Some(capture.snapshot());
        Ok(capture)
    }

    /// Takes the end snapshot and returns both. A server that did not
    /// answer the end snapshot's first query (stopped, hung) has none:
    /// the state says so in one line, as summary.txt and report.html show it.
    pub fn finish(mut self) -> ServerState {
        let (end, silent) = self.snapshot_answered();
        let (end, error) = match silent {
            true => (
                None,
                Some(format!(
                    "the server did not answer within {} s: end snapshot skipped",
                    QUERY_TIMEOUT.as_secs()
                )),
            ),
            false => (Some(end), None),
        };
        ServerState {
            socket: self.session.socket.clone(),
            user: self.session.user.clone(),
            error,
            start: self.start.take(),
            end,
            samples: std::mem::take(&mut self.samples),
        }
    }

    /// The cheap state: history list length, the oldest transaction, and
    /// [`SAMPLED_STATUS`]. Each query bounded by [`QUERY_TIMEOUT`]; a
    /// failing one is listed in the point's `errors`.
    pub fn sample(&mut self) -> StatePoint {
        let began = Instant::now();
        let mut point = StatePoint {
            taken_unix_ms: unix_ms(),
            ..Default::default()
        };
        let conn = &mut self.session.conn;
        let mut silent = false;
        let names = quoted(SAMPLED_STATUS);
        if let Some(rows) = query_noting(
            conn,
            "status",
            &format!("SHOW GLOBAL STATUS WHERE Variable_name IN ({names})"),
            (&mut point.errors, &mut silent),
        ) {
            for r in rows {
                if let (Some(k), Some(v)) = (cell(&r, 0), num(&r, 1)) {
                    point.status.insert(k, v);
                }
            }
        }
        // A metric someone disabled reads a stale count: left out then.
        if let Some(rows) = query_noting(
            conn,
            "history list length",
            "SELECT COUNT FROM information_schema.INNODB_METRICS \
             WHERE NAME = 'trx_rseg_history_len' \
             AND TIME_ENABLED IS NOT NULL AND TIME_DISABLED IS NULL",
            (&mut point.errors, &mut silent),
        ) {
            point.history_list_length = rows.first().and_then(|r| num(r, 0));
        }
        let own = self
            .own_id
            .map(|id| format!("WHERE trx_mysql_thread_id <> {id}"))
            .unwrap_or_default();
        if let Some(rows) = query_noting(
            conn,
            "oldest transaction",
            &format!(
                "SELECT trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, trx_started, NOW()) \
                 FROM information_schema.INNODB_TRX {own} ORDER BY trx_started LIMIT 1"
            ),
            (&mut point.errors, &mut silent),
        ) {
            if let Some(r) = rows.first() {
                point.oldest_trx_connection = num(r, 0);
                point.oldest_trx_age_s = num(r, 1);
            }
        }
        point.took_ms = began.elapsed().as_secs_f64() * 1e3;
        point
    }

    /// The full state, one query group after another, each query bounded
    /// by [`QUERY_TIMEOUT`] and the whole by [`SNAPSHOT_BUDGET`]; a
    /// failing or skipped query is listed in the snapshot's `errors`.
    fn snapshot(&mut self) -> Snapshot {
        self.snapshot_answered().0
    }

    /// [`Self::snapshot`], and whether the server answered none of its
    /// queries for not answering at all (stopped, hung): not a refusal.
    fn snapshot_answered(&mut self) -> (Snapshot, bool) {
        let began = Instant::now();
        let mut snap = Snapshot {
            taken_unix_ms: unix_ms(),
            ..Default::default()
        };
        let mut sql = Budgeted {
            conn: &mut self.session.conn,
            began,
            stopped: false,
            answered: false,
            unanswered: false,
        };
        sql.variables(&mut snap);
        sql.status(&mut snap);
        let read_views = sql.innodb_status(&mut snap);
        sql.transactions(&mut snap, self.own_id, &read_views);
        sql.connections(&mut snap, self.own_id);
        sql.no_pk_tables(&mut snap);
        sql.performance_schema(&mut snap);
        snap.took_ms = began.elapsed().as_secs_f64() * 1e3;
        let silent = sql.unanswered && !sql.answered;
        (snap, silent)
    }
}

/// A snapshot's connection: its queries share [`SNAPSHOT_BUDGET`] from
/// `began`, so that a slow server costs the recording a bounded wait.
struct Budgeted<'c> {
    conn: &'c mut mysql::Conn,
    began: Instant,
    /// The budget ran out, or the server stopped answering: the queries
    /// left are not sent (each would wait [`QUERY_TIMEOUT`] again, on a
    /// connection out of step), and only the first is listed.
    stopped: bool,
    /// Some query got an answer (rows or the server's refusal).
    answered: bool,
    /// A query got none in time, or the connection broke.
    unanswered: bool,
}

impl Budgeted<'_> {
    /// Runs `q` unless the snapshot stopped (the budget spent, or the
    /// server not answering: said once, for the first query left out);
    /// a failure is noted in the snapshot's errors as `what`.
    fn run(&mut self, what: &str, q: &str, snap: &mut Snapshot) -> Option<Vec<mysql::Row>> {
        if self.stopped {
            return None;
        }
        if self.began.elapsed() > SNAPSHOT_BUDGET {
            self.stopped = true;
            snap.errors.push(QueryError {
                what: what.into(),
                error: format!(
                    "skipped, with the queries after it: the snapshot had taken {:.1} s of its {} s",
                    self.began.elapsed().as_secs_f64(),
                    SNAPSHOT_BUDGET.as_secs()
                ),
            });
            return None;
        }
        match self.conn.query::<mysql::Row, _>(q) {
            Ok(rows) => {
                self.answered = true;
                Some(rows)
            }
            Err(e) => {
                let e = SqlError(e);
                self.unanswered = e.is_unanswered();
                self.answered |= !self.unanswered;
                self.stopped = self.unanswered;
                let rest = if self.stopped {
                    "; the queries after it skipped"
                } else {
                    ""
                };
                snap.errors.push(QueryError {
                    what: what.into(),
                    error: format!("{}{rest}", crate::error_chain(&e)),
                });
                None
            }
        }
    }

    /// The [`VARIABLES`] the server has, by lowercase name.
    fn variables(&mut self, snap: &mut Snapshot) {
        let names = quoted(VARIABLES);
        if let Some(rows) = self.run(
            "variables",
            &format!("SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})"),
            snap,
        ) {
            for r in rows {
                if let (Some(k), Some(v)) = (cell(&r, 0), cell(&r, 1)) {
                    snap.variables.insert(k.to_ascii_lowercase(), v);
                }
            }
        }
    }

    /// The global status counters [`keep_status`] keeps.
    fn status(&mut self, snap: &mut Snapshot) {
        if let Some(rows) = self.run("status", "SHOW GLOBAL STATUS", snap) {
            for r in rows {
                if let (Some(k), Some(v)) = (cell(&r, 0), cell(&r, 1)) {
                    if let (true, Ok(v)) = (keep_status(&k), v.parse::<u64>()) {
                        snap.status.insert(k, v);
                    }
                }
            }
        }
    }

    /// SHOW ENGINE INNODB STATUS, kept up to [`MAX_STATUS_BYTES`], and the
    /// history list length it gives. Returns the connections whose
    /// transaction holds a read view, which only this text says (for
    /// [`Self::transactions`]).
    fn innodb_status(&mut self, snap: &mut Snapshot) -> HashSet<u64> {
        let mut read_views = HashSet::new();
        if let Some(rows) = self.run("innodb status", "SHOW ENGINE INNODB STATUS", snap) {
            if let Some(mut text) = rows.first().and_then(|r| cell(r, 2)) {
                snap.history_list_length = innodb_status::history_list_length(&text);
                for t in innodb_status::transactions(&text) {
                    if let (true, Some(id)) = (t.read_view, t.thread_id) {
                        read_views.insert(id);
                    }
                }
                if text.len() > MAX_STATUS_BYTES {
                    let mut cut = MAX_STATUS_BYTES;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
                snap.innodb_status = Some(text);
            }
        }
        read_views
    }

    /// The oldest [`MAX_TRANSACTIONS`] open transactions but our own
    /// (`own_id`), with their connection's user, host, database, command
    /// and statement, and whether they hold a read view (`read_views`).
    fn transactions(
        &mut self,
        snap: &mut Snapshot,
        own_id: Option<u64>,
        read_views: &HashSet<u64>,
    ) {
        let own = own_id
            .map(|id| format!("AND t.trx_mysql_thread_id <> {id}"))
            .unwrap_or_default();
        if let Some(rows) = self.run(
            "transactions",
            &format!(
                "SELECT t.trx_id, t.trx_state, t.trx_started, \
                 TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), t.trx_isolation_level, \
                 t.trx_rows_locked, t.trx_rows_modified, t.trx_mysql_thread_id, \
                 p.USER, p.HOST, p.DB, p.COMMAND, LEFT(COALESCE(t.trx_query, p.INFO), {MAX_QUERY_CHARS}) \
                 FROM information_schema.INNODB_TRX t \
                 LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
                 WHERE 1=1 {own} ORDER BY t.trx_started LIMIT {MAX_TRANSACTIONS}"
            ),
            snap,
        ) {
            snap.transactions = rows
                .iter()
                .map(|r| {
                    let connection = num(r, 7);
                    Transaction {
                        trx_id: cell(r, 0).unwrap_or_default(),
                        state: cell(r, 1).unwrap_or_default(),
                        started: cell(r, 2).unwrap_or_default(),
                        age_s: num(r, 3).unwrap_or(0),
                        isolation: cell(r, 4),
                        rows_locked: num(r, 5),
                        rows_modified: num(r, 6),
                        connection,
                        user: cell(r, 8),
                        host: cell(r, 9),
                        db: cell(r, 10),
                        command: cell(r, 11),
                        query: cell(r, 12),
                        read_view: connection.is_some_and(|c| read_views.contains(&c)),
                    }
                })
                .collect();
        }
    }

    /// The client connections but our own, up to [`MAX_CONNECTIONS`]
    /// (the busiest servers' thousands are cut, and said).
    /// Our own connection is listed too, marked: the probes see its
    /// statements, and they must not pass for a client's.
    fn connections(&mut self, snap: &mut Snapshot, own_id: Option<u64>) {
        if let Some(rows) = self.run(
            "connections",
            &format!(
                "SELECT ID, LEFT(USER, 80), LEFT(HOST, 80), LEFT(DB, 80) \
                 FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon' \
                 ORDER BY ID LIMIT {MAX_CONNECTIONS}"
            ),
            snap,
        ) {
            snap.connections = rows
                .iter()
                .filter_map(|r| {
                    let id = num(r, 0)?;
                    Some(crate::model::server_state::Connection {
                        id,
                        user: cell(r, 1),
                        host: cell(r, 2),
                        db: cell(r, 3),
                        innoprof: Some(id) == own_id,
                    })
                })
                .collect();
        }
    }

    /// The InnoDB tables without a primary key (their clustered index is
    /// InnoDB's own), most modified first, up to [`MAX_NO_PK_TABLES`]. The
    /// views are named by the server's version, read by
    /// [`Self::variables`] before.
    fn no_pk_tables(&mut self, snap: &mut Snapshot) {
        // InnoDB's dictionary: MySQL 5.6 and MariaDB name these views
        // INNODB_SYS_*, MySQL 8.0 INNODB_*. Only tables InnoDB has open
        // have statistics, which the tables being written to are.
        let no_pk = |prefix: &str| {
            format!(
                "SELECT ts.NAME, ts.MODIFIED_COUNTER, ts.NUM_ROWS \
                 FROM information_schema.INNODB_{prefix}TABLESTATS ts \
                 JOIN information_schema.INNODB_{prefix}INDEXES i ON i.TABLE_ID = ts.TABLE_ID \
                 WHERE i.NAME = 'GEN_CLUST_INDEX' \
                 ORDER BY ts.MODIFIED_COUNTER DESC LIMIT {MAX_NO_PK_TABLES}"
            )
        };
        let eight = snap
            .variables
            .get("version")
            .is_some_and(|v| v.starts_with("8.") || v.starts_with("9."));
        let query = no_pk(if eight { "" } else { "SYS_" });
        if let Some(rows) = self.run("tables without a primary key", &query, snap) {
            snap.no_pk_tables = rows
                .iter()
                .filter_map(|r| {
                    Some(NoPkTable {
                        name: cell(r, 0)?,
                        modified: num(r, 1).unwrap_or(0),
                        rows: num(r, 2).unwrap_or(0),
                    })
                })
                .collect();
        }
    }

    /// Where performance_schema is on (per [`Self::variables`]): how many
    /// instruments it has, enabled and timed (the synch waits' among
    /// them), and its enabled consumers.
    fn performance_schema(&mut self, snap: &mut Snapshot) {
        if !snap
            .variables
            .get("performance_schema")
            .is_some_and(|v| v.eq_ignore_ascii_case("ON"))
        {
            return;
        }
        let counts = self.run(
            "performance_schema instruments",
            "SELECT COUNT(*), SUM(ENABLED='YES'), SUM(ENABLED='YES' AND TIMED='YES'), \
             SUM(ENABLED='YES' AND TIMED='YES' AND NAME LIKE 'wait/synch/%') \
             FROM performance_schema.setup_instruments",
            snap,
        );
        let consumers = self.run(
            "performance_schema consumers",
            "SELECT NAME FROM performance_schema.setup_consumers WHERE ENABLED='YES'",
            snap,
        );
        if let Some(r) = counts.as_ref().and_then(|rows| rows.first()) {
            snap.performance_schema = Some(PerfSchemaState {
                instruments: num(r, 0).unwrap_or(0),
                enabled: num(r, 1).unwrap_or(0),
                timed: num(r, 2).unwrap_or(0),
                synch_timed: num(r, 3).unwrap_or(0),
                consumers: consumers
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|r| cell(r, 0))
                    .collect(),
            });
        }
    }
}

/// Runs `q`; a failure is noted in `errors` as `what`, not returned.
/// After a query the server did not answer (`*silent`), runs none: each
/// would wait its own timeout on a stopped server (3 of them outlasted
/// the capture's deadline).
fn query_noting(
    conn: &mut mysql::Conn,
    what: &str,
    q: &str,
    (errors, silent): (&mut Vec<QueryError>, &mut bool),
) -> Option<Vec<mysql::Row>> {
    if *silent {
        return None;
    }
    match conn.query::<mysql::Row, _>(q) {
        Ok(rows) => Some(rows),
        Err(e) => {
            let e = SqlError(e);
            *silent = e.is_unanswered();
            errors.push(QueryError {
                what: what.into(),
                error: crate::error_chain(&e),
            });
            None
        }
    }
}

/// `'a','b'` for a `Variable_name IN (...)`.
fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(",")
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// A capture reading [`StatePoint`]s in its own thread
/// ([`StateCapture::sample_every`]).
pub struct SamplingCapture {
    /// Dropped to stop the sampler; `None` when its thread did not start.
    stop: Option<std::sync::mpsc::Sender<()>>,
    returned: std::sync::mpsc::Receiver<StateCapture>,
    socket: String,
    user: String,
    start: Option<Snapshot>,
}

impl SamplingCapture {
    /// Stops sampling and takes the end snapshot, all given up after
    /// [`CAPTURE_DEADLINE`] (a sample in flight included): then the start
    /// snapshot is kept and the error says why the rest is missing.
    pub fn finish_within(mut self) -> ServerState {
        drop(self.stop.take());
        match self.returned.recv_timeout(CAPTURE_DEADLINE) {
            Ok(capture) => capture.finish_within(),
            Err(_) => ServerState {
                socket: self.socket,
                user: self.user,
                error: Some(format!(
                    "the server state sampler got no answer within {} s",
                    CAPTURE_DEADLINE.as_secs()
                )),
                start: self.start,
                end: None,
                samples: Vec::new(),
            },
        }
    }
}

/// Snapshots a [`StateWatcher`] takes on one connection before it logs in
/// anew. The mysql crate reads and writes through 4 MiB buffers per
/// connection (mysql_common's framed stream) whose cursor walks forward
/// until it reaches their end, so a connection kept for hours brings up to
/// 8 MiB into serve's resident set, ~27 KB a snapshot on MariaDB 10.2.11
/// (SHOW ENGINE INNODB STATUS is most of it). One login per 3 windows
/// (30 s at the default 10 s) bounds that at ~80 KiB, a tenth of the
/// 5 % a steady serve may wander; a login costs the server one
/// connection per 30 s (pt-stalk's default logs in every second).
const SNAPSHOTS_PER_LOGIN: u32 = 3;

/// The server's state for a long-running session (`serve`): a thread of
/// its own takes a full snapshot every `period` and keeps the last two, so
/// the findings of each window read "start" and "end" without waiting on
/// SQL. It logs in again after a failed login or a broken connection (each
/// said once on stderr, with the recovery), and stops when dropped.
pub struct StateWatcher {
    latest: std::sync::Arc<std::sync::Mutex<Option<ServerState>>>,
    /// Dropped with the watcher: its thread stops at its next wakeup.
    _stop: std::sync::mpsc::Sender<()>,
}

impl StateWatcher {
    pub fn start(pid: u32, source: StateSource, period: Duration) -> Self {
        let latest = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let shared = latest.clone();
        let _ = std::thread::Builder::new()
            .name("innoprof-sql".into())
            .spawn(move || {
                let mut capture: Option<StateCapture> = None;
                let mut failing = false;
                // Snapshots taken on the current connection.
                let mut taken = 0u32;
                // The last snapshot: the next one's "start".
                let mut last_end: Option<Snapshot> = None;
                loop {
                    let state = match capture.as_mut() {
                        None => match StateCapture::start(pid, &source) {
                            // The login's snapshot is the first "end".
                            Ok(c) => {
                                if failing {
                                    eprintln!("innoprof: server state: logged in again");
                                }
                                failing = false;
                                taken = 0;
                                // After a planned login, the window runs
                                // from the last snapshot as usual.
                                let state = ServerState {
                                    socket: c.session.socket.clone(),
                                    user: c.session.user.clone(),
                                    start: last_end.take(),
                                    end: c.start.clone(),
                                    ..Default::default()
                                };
                                capture = Some(c);
                                state
                            }
                            Err(e) => {
                                if !failing {
                                    eprintln!(
                                        "innoprof: note: server state not read: {}; trying again every {} s",
                                        crate::error_chain(&e),
                                        period.as_secs()
                                    );
                                }
                                failing = true;
                                failed(&e)
                            }
                        },
                        Some(c) => {
                            let state = ServerState {
                                socket: c.session.socket.clone(),
                                user: c.session.user.clone(),
                                error: None,
                                start: last_end.take(),
                                end: Some(c.snapshot()),
                                samples: Vec::new(),
                            };
                            // A dead connection (connection killed, server
                            // restarting) fails every query: log in anew.
                            if c.session.conn.ping().is_err() {
                                eprintln!(
                                    "innoprof: server state: the connection broke; logging in again"
                                );
                                failing = true;
                                capture = None;
                            }
                            taken += 1;
                            if taken >= SNAPSHOTS_PER_LOGIN {
                                capture = None;
                            }
                            state
                        }
                    };
                    last_end = state.end.clone();
                    *shared.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
                    if !matches!(
                        stopped.recv_timeout(period),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    ) {
                        break;
                    }
                }
            });
        Self {
            latest,
            _stop: stop,
        }
    }

    /// The last two snapshots (start = the one before), or why there are
    /// none; `None` until the first login was tried.
    pub fn latest(&self) -> Option<ServerState> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A cell as text (the text protocol sends every value as bytes).
fn cell(row: &mysql::Row, i: usize) -> Option<String> {
    match row.as_ref(i)? {
        mysql::Value::NULL => None,
        mysql::Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        mysql::Value::Int(n) => Some(n.to_string()),
        mysql::Value::UInt(n) => Some(n.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn num(row: &mysql::Row, i: usize) -> Option<u64> {
    cell(row, i)?.trim().parse::<f64>().ok().map(|f| f as u64)
}

/// Why a server state could not be captured, as a [`ServerState`] that
/// says so (written to summary.json like a captured one).
pub fn failed(error: &ConnectError) -> ServerState {
    ServerState {
        error: Some(crate::error_chain(error)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(tables: &[(&str, u64, u64)]) -> Snapshot {
        Snapshot {
            no_pk_tables: tables
                .iter()
                .map(|&(n, m, rows)| NoPkTable {
                    name: n.into(),
                    modified: m,
                    rows,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// What /findings serves by default: the statement's shape, not its
    /// literals, and no InnoDB status (which quotes statements raw).
    #[test]
    fn fingerprinted_state_keeps_no_literal() {
        let trx = Transaction {
            trx_id: "421".into(),
            state: "RUNNING".into(),
            started: String::new(),
            age_s: 37,
            isolation: None,
            rows_locked: None,
            rows_modified: None,
            connection: Some(9),
            user: None,
            host: None,
            db: None,
            command: Some("Query".into()),
            query: Some("UPDATE users SET password='hunter2' WHERE id=42".into()),
            read_view: true,
        };
        let state = ServerState {
            end: Some(Snapshot {
                transactions: vec![trx],
                innodb_status: Some("---TRANSACTION 421 ... hunter2".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let served = state.fingerprinted();
        let end = served.end.unwrap();
        assert_eq!(
            end.transactions[0].query.as_deref(),
            Some("UPDATE users SET password=? WHERE id=?")
        );
        assert_eq!(end.innodb_status, None);
    }

    /// A capture that does not finish in time is given up, not waited for.
    #[test]
    fn work_past_its_deadline_is_abandoned() {
        let slow = within(Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(2));
            1
        });
        assert_eq!(slow, None);
        assert_eq!(within(Duration::from_secs(5), || 2), Some(2));
    }

    #[test]
    fn a_relative_socket_is_refused_before_connecting() {
        let source = StateSource {
            socket: Some("mysql.sock".into()),
            ..Default::default()
        };
        assert!(matches!(
            connect(std::process::id(), &source),
            Err(ConnectError::RelativeSocket(_))
        ));
    }

    /// Growth since start; a reset counter counts from zero, or the row
    /// estimate's change when larger; untouched tables are left out.
    #[test]
    fn tables_written_are_the_ones_whose_counter_moved() {
        let state = ServerState {
            start: Some(snap(&[
                ("db/a", 10, 0),
                ("db/b", 500, 0),
                ("db/c", 7, 0),
                ("db/e", 900, 1000),
            ])),
            end: Some(snap(&[
                ("db/a", 110, 0),
                ("db/b", 40, 0),
                ("db/c", 7, 0),
                ("db/d", 3, 0),
                ("db/e", 0, 1500),
            ])),
            ..Default::default()
        };
        assert_eq!(
            state.no_pk_tables_written(),
            vec![
                ("db/e".to_string(), 500),
                ("db/a".to_string(), 100),
                ("db/b".to_string(), 40),
                ("db/d".to_string(), 3)
            ]
        );
    }
}
