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
    /// Waits for a latch's holder: its exclusive holder where the latch
    /// records it (`rw_lock_t::writer_thread` in MySQL 5.6-5.7, MariaDB
    /// 10.2-10.5; `sux_lock::writer` in MariaDB 10.6+), else the thread
    /// whose release ended the wait (`released`):
    /// waiter's statement -> holder's statement or thread. Most wait first,
    /// at most [`MAX_BLOCKING`]. Empty where no probed latch records a holder.
    #[serde(default)]
    pub blocking: Vec<Blocking>,
    /// Per probe, every wait tied to a holder (all edges, also those past
    /// `blocking`).
    #[serde(default)]
    pub blocking_totals: Vec<BlockingTotal>,
    /// The CPU profile's samples of client connections, by statement
    /// (`statements[].cpu_samples`); none without a CPU profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<StatementCpu>,
    /// Which statements hit which latch, per probe (a latch as the
    /// probe's `latches` name it): most wait first, then most calls; at
    /// most [`MAX_LATCH_STATEMENTS`].
    #[serde(default)]
    pub latch_statements: Vec<LatchStatement>,
}

/// A statement's hits on one latch through one probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatchStatement {
    pub probe: String,
    /// The latch, named as in the probe's `latches` (`dict_sys_mutex`, or
    /// its creation site `buf0buf.cc:1433 (buf_pool_init_instance)`).
    pub latch: String,
    /// The statement's id (`statements[].id`) and fingerprint.
    pub statement: String,
    pub fingerprint: String,
    pub calls: u64,
    pub wait_ns_total: u64,
    /// The latch as read (id + 1, creation file pointer, line), named
    /// into `latch` when the recording ends.
    #[serde(skip)]
    #[schemars(skip)]
    pub raw_latch: Option<(u32, u64, u32)>,
}

pub const MAX_LATCH_STATEMENTS: usize = 50;

impl Who {
    /// Names each raw latch by `name` (probe, raw latch), then sums the
    /// rows that come out the same (two latches created at one site) and
    /// keeps the [`MAX_LATCH_STATEMENTS`] with the most wait.
    pub fn name_latches(&mut self, mut name: impl FnMut(&str, (u32, u64, u32)) -> Option<String>) {
        let mut rows: Vec<LatchStatement> = Vec::new();
        for mut r in std::mem::take(&mut self.latch_statements) {
            if let Some(raw) = r.raw_latch.take() {
                r.latch = name(&r.probe, raw).unwrap_or_else(|| "?".into());
            }
            add_latch_row(&mut rows, r);
        }
        sort_latch_statements(&mut rows);
        rows.truncate(MAX_LATCH_STATEMENTS);
        self.latch_statements = rows;
    }

    /// The statements that hit `latch` through `probe`, most wait first.
    pub fn statements_on_latch<'a>(
        &'a self,
        probe: &'a str,
        latch: &'a str,
    ) -> impl Iterator<Item = &'a LatchStatement> + 'a {
        self.latch_statements
            .iter()
            .filter(move |r| r.probe == probe && r.latch == latch)
    }
}

/// Adds `r` to the row of its (probe, latch, statement), or as a new one.
fn add_latch_row(rows: &mut Vec<LatchStatement>, r: LatchStatement) {
    match rows
        .iter_mut()
        .find(|x| x.probe == r.probe && x.latch == r.latch && x.statement == r.statement)
    {
        Some(x) => {
            x.calls += r.calls;
            x.wait_ns_total += r.wait_ns_total;
        }
        None => rows.push(r),
    }
}

/// Most wait first, then most calls, then by probe, latch and statement.
pub fn sort_latch_statements(rows: &mut [LatchStatement]) {
    rows.sort_by(|a, b| {
        (b.wait_ns_total, b.calls, &a.probe, &a.latch, &a.statement).cmp(&(
            a.wait_ns_total,
            a.calls,
            &b.probe,
            &b.latch,
            &b.statement,
        ))
    });
}

/// How the CPU profile's on-CPU samples of connections were tied to
/// statements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatementCpu {
    /// Whether samples were tied to statements at all (the sampler shares
    /// the wait probes' statement maps: statements on, a probe attached).
    pub attributed: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Samples of connection threads tied to a statement, every statement
    /// (also those past the list).
    pub samples: u64,
    /// Samples of connection threads with no statement to read (between
    /// statements, or the THD not readable).
    pub no_statement: u64,
    /// Samples of a statement whose text was never read.
    pub no_text: u64,
}

impl StatementCpu {
    fn merge(a: &Option<Self>, b: &Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Self {
                attributed: a.attributed || b.attributed,
                note: b.note.clone().or_else(|| a.note.clone()),
                samples: a.samples + b.samples,
                no_statement: a.no_statement + b.no_statement,
                no_text: a.no_text + b.no_text,
            }),
            (a, b) => b.clone().or_else(|| a.clone()),
        }
    }
}

pub const MAX_BLOCKING: usize = 30;

/// One waiter -> holder edge of a probe's latch waits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// That thread's role (`purge coordinator`, `page cleaner`, ...),
    /// where it is known (the thread hit a probe during the recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_role: Option<String>,
    /// Where the holder took the latch (`btr0cur.cc:1234`), where the
    /// latch records it (`rw_lock_t::last_x_file_name`/`last_x_line`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_site: Option<String>,
    /// The holder is the thread whose release ended the wait (a release
    /// probe: mutexes, latches held shared), not one read from the latch
    /// at the wait's start (its exclusive holder).
    #[serde(default)]
    pub released: bool,
    /// The raw lock site (`__FILE__` pointer, line), named into
    /// `holder_site` when the recording ends.
    #[serde(skip)]
    #[schemars(skip)]
    pub raw_site: Option<(u64, u32)>,
    pub calls: u64,
    pub wait_ns_total: u64,
}

impl Blocking {
    /// The holder as a reader names it: its statement, or its thread (by
    /// role where known).
    pub fn holder_label(&self, width: usize) -> String {
        match (
            &self.holder_fingerprint,
            self.holder_thread,
            &self.holder_role,
        ) {
            (Some(f), _, _) => crate::text::cut(f, width),
            (None, Some(tid), Some(role)) => format!("{role} (thread {tid})"),
            (None, Some(tid), None) => format!("thread {tid} (no statement)"),
            (None, None, _) => "-".into(),
        }
    }

    /// The holder in a line of prose (a finding's): its statement and
    /// connection, a connection between statements, or a thread by its
    /// role. None when no holder is known.
    pub fn holder_name(&self) -> Option<String> {
        let whole = || self.holder_label(usize::MAX);
        match (
            self.holder_fingerprint.is_some(),
            self.holder_connection,
            self.holder_thread,
        ) {
            (true, Some(c), _) => Some(format!("{} (connection {c})", whole())),
            (true, None, _) => Some(whole()),
            (false, Some(c), _) => Some(format!("connection {c}, between statements")),
            (false, None, Some(_)) => Some(whole()),
            (false, None, None) => None,
        }
    }
}

/// Every waiter -> holder edge of a probe, summed (`blocking` keeps the
/// biggest only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlockingTotal {
    pub probe: String,
    /// Waits tied to a holder.
    pub calls: u64,
    pub wait_ns_total: u64,
}

pub const MAX_STATEMENTS: usize = 50;

impl Who {
    /// Names each thread holder by its role (`roles`: thread id -> role
    /// id, as the BPF side found them) and each raw lock site by `site`.
    pub fn name_holders(
        &mut self,
        roles: &std::collections::HashMap<u32, u32>,
        mut site: impl FnMut(u64, u32) -> String,
    ) {
        for b in &mut self.blocking {
            if let Some(tid) = b.holder_thread.filter(|_| b.holder_statement.is_none()) {
                b.holder_role = roles
                    .get(&tid)
                    .filter(|r| **r != 0)
                    .map(|r| crate::plan::thread_role::role(*r).0.to_string());
            }
            if let Some((file, line)) = b.raw_site {
                b.holder_site = Some(site(file, line));
            }
        }
    }

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
                c.innoprof = row.innoprof;
            }
        }
        for s in &mut self.statements {
            s.users = users_of(&s.connection_calls, conns);
        }
    }
}

/// The users of `conns` (connection, calls), most calls first, as
/// [`crate::model::server_state::Connection::user_shown`] names them; a
/// connection the processlist did not list counts as `?`.
pub fn users_of(
    conns: &[(u64, u64)],
    names: &std::collections::HashMap<u64, crate::model::server_state::Connection>,
) -> Vec<String> {
    let mut per_user: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for (conn, calls) in conns {
        let user = names
            .get(conn)
            .and_then(|c| c.user_shown())
            .unwrap_or_else(|| "?".into());
        *per_user.entry(user).or_default() += calls;
    }
    let mut users: Vec<(String, u64)> = per_user.into_iter().collect();
    users.sort_by(|a, b| (b.1, &a.0).cmp(&(a.1, &b.0)));
    users.into_iter().map(|(u, _)| u).collect()
}

impl ConnectionResult {
    /// Its user as tables show it ("root (innoprof)" for innoprof's own).
    pub fn user_shown(&self) -> Option<String> {
        crate::model::server_state::user_shown(self.user.as_deref(), self.innoprof)
    }
}

pub const MAX_CONNECTIONS: usize = 50;

/// One statement fingerprint: every execution that hit a probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The CPU profile's on-CPU samples of it (`record --cpu`; see
    /// `who.cpu`): 0 without a CPU profile, or one not tied to statements.
    #[serde(default)]
    pub cpu_samples: u64,
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
    /// Distinct statements (fingerprints) it ran that hit a probe or
    /// were sampled on CPU.
    pub statements: u64,
    /// The id of its statement with the most wait (then calls).
    pub top_statement: Option<String>,
    /// The CPU profile's on-CPU samples of it while it ran a statement
    /// (see `who.cpu`); 0 without a CPU profile.
    #[serde(default)]
    pub cpu_samples: u64,
    /// innoprof's own connection (reading the server's state at the start
    /// and the end): its statements are innoprof's, not the workload's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub innoprof: bool,
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
    /// Latch hits not tied to their (statement, latch) row (its map
    /// full); the statement's and the latch's own counts keep them.
    #[serde(default)]
    pub latches_full: u64,
    /// Stack hits not tied to their statement (the wait profile's
    /// `statement` label; its map full); the stacks' counts keep them.
    #[serde(default)]
    pub stacks_full: u64,
}

impl Who {
    /// `record --follow`: the statements of two segments (two server
    /// processes) as one recording's. Statements are matched by id (a
    /// hash of the fingerprint, the same in every process) and summed;
    /// connections and holder threads are ids of one process (a restarted
    /// server counts its connections from 1 again), so only the later
    /// segment's are kept, and the earlier segment's waiter -> holder
    /// edges only where the holder is a statement.
    pub fn merge_segments(a: &Who, b: &Who) -> Who {
        let mut statements: Vec<StatementResult> = b.statements.clone();
        for sa in &a.statements {
            match statements.iter_mut().find(|s| s.id == sa.id) {
                Some(s) => {
                    s.executions += sa.executions;
                    s.connections += sa.connections;
                    s.calls += sa.calls;
                    s.wait_ns_total += sa.wait_ns_total;
                    s.cpu_samples += sa.cpu_samples;
                    for u in &sa.users {
                        if !s.users.contains(u) {
                            s.users.push(u.clone());
                        }
                    }
                    if s.sample.is_none() {
                        s.sample.clone_from(&sa.sample);
                    }
                    for pa in &sa.probes {
                        match s.probes.iter_mut().find(|p| p.probe == pa.probe) {
                            Some(p) => {
                                p.calls += pa.calls;
                                p.wait_ns_total += pa.wait_ns_total;
                            }
                            None => s.probes.push(pa.clone()),
                        }
                    }
                    s.probes.sort_by(|x, y| {
                        (y.wait_ns_total, y.calls).cmp(&(x.wait_ns_total, x.calls))
                    });
                }
                None => statements.push(sa.clone()),
            }
        }
        statements.sort_by_key(|s| std::cmp::Reverse((s.wait_ns_total, s.calls)));
        let cut = statements.len().saturating_sub(MAX_STATEMENTS) as u64;
        statements.truncate(MAX_STATEMENTS);

        let mut blocking = b.blocking.clone();
        for ea in a.blocking.iter().filter(|e| e.holder_statement.is_some()) {
            let same = |e: &&mut Blocking| {
                e.probe == ea.probe
                    && e.waiter_statement == ea.waiter_statement
                    && e.holder_statement == ea.holder_statement
            };
            match blocking.iter_mut().find(same) {
                Some(e) => {
                    e.calls += ea.calls;
                    e.wait_ns_total += ea.wait_ns_total;
                }
                None => blocking.push(Blocking {
                    holder_connection: None,
                    holder_thread: None,
                    holder_role: None,
                    ..ea.clone()
                }),
            }
        }
        blocking.sort_by_key(|e| std::cmp::Reverse((e.wait_ns_total, e.calls)));
        blocking.truncate(MAX_BLOCKING);
        let mut blocking_totals = b.blocking_totals.clone();
        for ta in &a.blocking_totals {
            match blocking_totals.iter_mut().find(|t| t.probe == ta.probe) {
                Some(t) => {
                    t.calls += ta.calls;
                    t.wait_ns_total += ta.wait_ns_total;
                }
                None => blocking_totals.push(ta.clone()),
            }
        }

        let (ua, ub) = (&a.unattributed, &b.unattributed);
        Who {
            how: b.how.clone(),
            attributed: a.attributed || b.attributed,
            text_kept: a.text_kept || b.text_kept,
            statements,
            connections: b.connections.clone(),
            statements_more: a.statements_more + b.statements_more + cut,
            connections_more: b.connections_more,
            unattributed: Unattributed {
                map_full: ua.map_full + ub.map_full,
                no_thd: ua.no_thd + ub.no_thd,
                no_text: ua.no_text + ub.no_text,
                holders_full: ua.holders_full + ub.holders_full,
                latches_full: ua.latches_full + ub.latches_full,
                stacks_full: ua.stacks_full + ub.stacks_full,
            },
            blocking,
            blocking_totals,
            cpu: StatementCpu::merge(&a.cpu, &b.cpu),
            latch_statements: {
                // Latch names and statement ids hold across processes.
                let mut rows = b.latch_statements.clone();
                for ra in &a.latch_statements {
                    add_latch_row(&mut rows, ra.clone());
                }
                sort_latch_statements(&mut rows);
                rows.truncate(MAX_LATCH_STATEMENTS);
                rows
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(id: &str, calls: u64, wait: u64, user: &str, probe: &str) -> StatementResult {
        StatementResult {
            id: id.into(),
            fingerprint: format!("SELECT {id}"),
            sample: None,
            executions: calls,
            connections: 1,
            users: vec![user.into()],
            calls,
            wait_ns_total: wait,
            probes: vec![StatementProbe {
                probe: probe.into(),
                calls,
                wait_ns_total: wait,
            }],
            cpu_samples: 0,
            connection_calls: vec![],
        }
    }

    fn edge(holder: Option<&str>, conn: Option<u64>, calls: u64) -> Blocking {
        Blocking {
            probe: "p".into(),
            waiter_statement: Some("w".into()),
            waiter_fingerprint: None,
            holder_statement: holder.map(str::to_string),
            holder_fingerprint: None,
            holder_connection: conn,
            holder_thread: None,
            calls,
            wait_ns_total: calls * 10,
            ..Default::default()
        }
    }

    /// Two segments of `--follow`: statements summed by id, users and
    /// probes united; connections and thread-only holders the later
    /// process's; losses summed.
    #[test]
    fn segments_sum_statements_by_id_and_keep_the_later_connections() {
        let a = Who {
            how: "old".into(),
            attributed: true,
            statements: vec![
                statement("u", 10, 100, "app_rw", "redo"),
                statement("x", 1, 1, "a", "q"),
            ],
            connections: vec![ConnectionResult {
                id: 5,
                user: None,
                host: None,
                db: None,
                calls: 11,
                wait_ns_total: 101,
                statements: 2,
                top_statement: Some("u".into()),
                cpu_samples: 0,
                innoprof: false,
            }],
            unattributed: Unattributed {
                no_thd: 2,
                ..Default::default()
            },
            blocking: vec![edge(Some("u"), Some(5), 3), edge(None, None, 7)],
            ..Default::default()
        };
        let b = Who {
            how: "new".into(),
            attributed: true,
            statements: vec![statement("u", 4, 40, "app_rw2", "undo")],
            unattributed: Unattributed {
                no_thd: 1,
                ..Default::default()
            },
            blocking: vec![edge(Some("u"), Some(9), 1)],
            ..Default::default()
        };
        let m = Who::merge_segments(&a, &b);
        assert_eq!(m.how, "new");
        assert_eq!(m.statements.len(), 2);
        let u = &m.statements[0];
        assert_eq!(
            (u.id.as_str(), u.calls, u.wait_ns_total, u.executions),
            ("u", 14, 140, 14)
        );
        assert_eq!(u.users, vec!["app_rw2".to_string(), "app_rw".to_string()]);
        assert_eq!(
            u.probes
                .iter()
                .map(|p| (p.probe.as_str(), p.calls))
                .collect::<Vec<_>>(),
            vec![("redo", 10), ("undo", 4)]
        );
        assert!(
            m.connections.is_empty(),
            "connection 5 was the old process's"
        );
        assert_eq!(m.unattributed.no_thd, 3);
        // The holder statement's edge summed (the later process's
        // connection kept); the thread-only edge of the old process gone.
        assert_eq!(m.blocking.len(), 1, "{:?}", m.blocking);
        assert_eq!(
            (m.blocking[0].calls, m.blocking[0].holder_connection),
            (4, Some(9))
        );
        assert_eq!(m.cpu, None, "no CPU profile in either segment");
    }

    /// `--follow` with a CPU profile: a statement's samples add up across
    /// segments, and so do the samples tied to none.
    /// innoprof's own connection (the server-state session) is named as
    /// such, on the connection and in its statements' users.
    #[test]
    fn innoprofs_own_connection_is_named_as_such() {
        use crate::model::server_state::Connection;
        let conn = |id, innoprof| ConnectionResult {
            id,
            user: None,
            host: None,
            db: None,
            calls: 1,
            wait_ns_total: 1,
            statements: 1,
            top_statement: None,
            cpu_samples: 0,
            innoprof,
        };
        let mut show = statement("s", 1, 1, "", "p");
        show.connection_calls = vec![(18, 1)];
        let mut update = statement("u", 3, 3, "", "p");
        update.connection_calls = vec![(11, 2), (18, 1)];
        let mut who = Who {
            statements: vec![show, update],
            connections: vec![conn(11, false), conn(18, false)],
            ..Default::default()
        };
        let row = |id, user: &str, innoprof| Connection {
            id,
            user: Some(user.into()),
            host: None,
            db: None,
            innoprof,
        };
        let rows = std::collections::HashMap::from([
            (11, row(11, "app_rw", false)),
            (18, row(18, "root", true)),
        ]);
        who.name_users(&rows);
        assert!(who.connections[1].innoprof && !who.connections[0].innoprof);
        assert_eq!(
            who.connections[1].user_shown().as_deref(),
            Some("root (innoprof)")
        );
        assert_eq!(who.connections[0].user_shown().as_deref(), Some("app_rw"));
        assert_eq!(who.statements[0].users, ["root (innoprof)"]);
        assert_eq!(who.statements[1].users, ["app_rw", "root (innoprof)"]);
    }

    #[test]
    fn segments_sum_cpu_samples_by_statement() {
        let cpu = |samples, no_statement| StatementCpu {
            attributed: true,
            note: None,
            samples,
            no_statement,
            no_text: 1,
        };
        let with_cpu = |n| StatementResult {
            cpu_samples: n,
            ..statement("u", 1, 10, "app", "redo")
        };
        let a = Who {
            statements: vec![with_cpu(30)],
            cpu: Some(cpu(30, 2)),
            ..Default::default()
        };
        let b = Who {
            statements: vec![with_cpu(12), statement("v", 1, 1, "app", "redo")],
            cpu: Some(cpu(12, 5)),
            ..Default::default()
        };
        let m = Who::merge_segments(&a, &b);
        let u = m.statements.iter().find(|s| s.id == "u").unwrap();
        assert_eq!(u.cpu_samples, 42);
        assert_eq!(
            m.cpu,
            Some(StatementCpu {
                no_text: 2,
                ..cpu(42, 7)
            })
        );
        // A segment without a CPU profile keeps the other's.
        let plain = Who::default();
        assert_eq!(Who::merge_segments(&plain, &a).cpu, a.cpu);
    }
}
