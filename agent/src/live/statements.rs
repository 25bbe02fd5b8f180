//! `innoprof top`'s statements and connections: what the client
//! connections ran in the last interval. The recorder's statement book
//! is cumulative ([`BookTotals`]); [`Statements::between`] turns the
//! difference of two of its totals into rates, as [`super::Frame`] does
//! with two counter readings. [`StatementsView`] takes the totals from a
//! running [`Recorder`]; [`Statements::from_who`] builds the same tables
//! from a saved recording's `who` (rates over the whole recording).
//!
//! Rates are over the interval's wall-clock seconds: a probe the
//! governor switched off part of the interval adds no hits meanwhile (the
//! wait table rates its own calls over its on-time instead).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::bpf::abi::SlotId;
use crate::collect::Counts;
use crate::model::server_state::Connection;
use crate::model::who::Who;
use crate::record::statements::{statement_id, BookTotals};
use crate::record::Recorder;

/// One statement (fingerprint) of the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementRow {
    /// summary.json's `who.statements[].id` for the same fingerprint.
    pub id: String,
    pub fingerprint: String,
    pub wait_ns_per_s: f64,
    pub calls_per_s: f64,
    /// Executions (distinct `query_id`s) that hit a probe, per second.
    pub executions_per_s: f64,
    /// Connections that ran it (and hit a probe).
    pub connections: u64,
    /// Their users, most calls first (empty: not known).
    pub users: Vec<String>,
    /// The probe it waited on most (then called most).
    pub top_probe: Option<String>,
}

/// One client connection of the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionRow {
    /// The processlist id ([`crate::record::statements::OTHER_CONNECTION`]:
    /// the connections past the book's bound, together).
    pub id: u64,
    pub user: Option<String>,
    pub host: Option<String>,
    pub db: Option<String>,
    pub wait_ns_per_s: f64,
    pub calls_per_s: f64,
    /// The fingerprint of the statement it waited on most (then called most).
    pub top_statement: Option<String>,
}

/// The statements and connections of one interval, most wait first,
/// then most calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Statements {
    /// Seconds the rates are over.
    pub interval_s: f64,
    /// Whether hits are tied to statements; `how` says how, or why not
    /// (`statements not attributed: ...`).
    pub attributed: bool,
    pub how: String,
    pub statements: Vec<StatementRow>,
    pub connections: Vec<ConnectionRow>,
    /// Whether users, hosts and dbs are known (from the processlist);
    /// otherwise connections are known by their id only.
    pub named: bool,
    /// Client connections' calls per second tied to no statement.
    pub unattributed_per_s: f64,
}

impl Statements {
    /// No table: `how` says why.
    pub fn not_attributed(how: String) -> Self {
        Self {
            how,
            ..Self::default()
        }
    }

    /// The interval between two totals of the same book, `dt` seconds
    /// apart; slots named by `probe_of`, connections by `names` (the
    /// processlist, by id) when there is one.
    pub fn between(
        earlier: &BookTotals,
        later: &BookTotals,
        dt: f64,
        probe_of: &HashMap<SlotId, String>,
        names: Option<&HashMap<u64, Connection>>,
    ) -> Self {
        let per_s = |v: u64| if dt > 0.0 { v as f64 / dt } else { 0.0 };
        let zero = Counts::default();
        let since = |now: &Counts, before: Option<&Counts>| now.since(*before.unwrap_or(&zero));

        // Per statement number: its calls and wait, and per probe.
        let mut per_statement: HashMap<u32, (Counts, HashMap<&str, Counts>)> = HashMap::new();
        for (key @ (d, slot), now) in &later.rows {
            let delta = since(now, earlier.rows.get(key));
            if delta.calls == 0 && delta.wait_ns == 0 {
                continue;
            }
            let e = per_statement.entry(*d).or_default();
            e.0.add(delta);
            let probe = probe_of.get(slot).map_or("?", String::as_str);
            e.1.entry(probe).or_default().add(delta);
        }
        // Per connection: its statements' calls and wait.
        let mut per_connection: HashMap<u64, Vec<(u32, Counts)>> = HashMap::new();
        // Per statement: its connections' calls.
        let mut statement_connections: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for (key @ (conn, d), now) in &later.connections {
            let delta = since(now, earlier.connections.get(key));
            if delta.calls == 0 && delta.wait_ns == 0 {
                continue;
            }
            per_connection.entry(*conn).or_default().push((*d, delta));
            statement_connections
                .entry(*d)
                .or_default()
                .push((*conn, delta.calls));
        }
        let fingerprint = |d: u32| later.statements.get(d as usize).map(|(f, _)| f.as_str());
        let executions = |d: u32| {
            let now = later.statements.get(d as usize).map_or(0, |s| s.1);
            let before = earlier.statements.get(d as usize).map_or(0, |s| s.1);
            now.saturating_sub(before)
        };
        // Statements with executions but no hit counted yet (their rows
        // come with the next drain) are shown too.
        for d in 0..later.statements.len() as u32 {
            if executions(d) > 0 {
                per_statement.entry(d).or_default();
            }
        }

        let mut statements: Vec<StatementRow> = per_statement
            .into_iter()
            .filter_map(|(d, (total, probes))| {
                let fingerprint = fingerprint(d)?.to_string();
                let top_probe = probes
                    .iter()
                    .max_by(|a, b| {
                        (a.1.wait_ns, a.1.calls)
                            .cmp(&(b.1.wait_ns, b.1.calls))
                            .then_with(|| b.0.cmp(a.0))
                    })
                    .map(|(p, _)| p.to_string());
                let conns = statement_connections.remove(&d).unwrap_or_default();
                Some(StatementRow {
                    id: statement_id(&fingerprint),
                    fingerprint,
                    wait_ns_per_s: per_s(total.wait_ns),
                    calls_per_s: per_s(total.calls),
                    executions_per_s: per_s(executions(d)),
                    connections: conns.len() as u64,
                    users: names
                        .map(|n| crate::model::who::users_of(&conns, n))
                        .unwrap_or_default(),
                    top_probe,
                })
            })
            .collect();
        sort_statements(&mut statements);

        let mut connections: Vec<ConnectionRow> = per_connection
            .into_iter()
            .map(|(id, per)| {
                let mut total = Counts::default();
                for (_, c) in &per {
                    total.add(*c);
                }
                let top = per
                    .iter()
                    .max_by(|a, b| {
                        (a.1.wait_ns, a.1.calls)
                            .cmp(&(b.1.wait_ns, b.1.calls))
                            .then_with(|| b.0.cmp(&a.0))
                    })
                    .and_then(|(d, _)| fingerprint(*d))
                    .map(String::from);
                let row = names.and_then(|n| n.get(&id));
                ConnectionRow {
                    id,
                    user: row.and_then(|r| r.user_shown()),
                    host: row.and_then(|r| r.host.clone()),
                    db: row.and_then(|r| r.db.clone()),
                    wait_ns_per_s: per_s(total.wait_ns),
                    calls_per_s: per_s(total.calls),
                    top_statement: top,
                }
            })
            .collect();
        sort_connections(&mut connections);

        Self {
            interval_s: dt,
            attributed: true,
            how: String::new(),
            statements,
            connections,
            named: names.is_some(),
            unattributed_per_s: per_s(later.unattributed.saturating_sub(earlier.unattributed)),
        }
    }

    /// The same tables from a saved recording's `who` (its top
    /// statements and connections), rates over its `duration_s`.
    pub fn from_who(who: &Who, duration_s: f64) -> Self {
        if !who.attributed {
            return Self::not_attributed(who.how.clone());
        }
        let per_s = |v: u64| {
            if duration_s > 0.0 {
                v as f64 / duration_s
            } else {
                0.0
            }
        };
        let fingerprint_of: HashMap<&str, &str> = who
            .statements
            .iter()
            .map(|s| (s.id.as_str(), s.fingerprint.as_str()))
            .collect();
        let mut statements: Vec<StatementRow> = who
            .statements
            .iter()
            .map(|s| StatementRow {
                id: s.id.clone(),
                fingerprint: s.fingerprint.clone(),
                wait_ns_per_s: per_s(s.wait_ns_total),
                calls_per_s: per_s(s.calls),
                executions_per_s: per_s(s.executions),
                connections: s.connections,
                users: s.users.iter().filter(|u| *u != "?").cloned().collect(),
                top_probe: s.probes.first().map(|p| p.probe.clone()),
            })
            .collect();
        sort_statements(&mut statements);
        let mut connections: Vec<ConnectionRow> = who
            .connections
            .iter()
            .map(|c| ConnectionRow {
                id: c.id,
                user: c.user_shown(),
                host: c.host.clone(),
                db: c.db.clone(),
                wait_ns_per_s: per_s(c.wait_ns_total),
                calls_per_s: per_s(c.calls),
                // A top statement past the summary's top list has no
                // fingerprint here: its id then.
                top_statement: c.top_statement.as_ref().map(|id| {
                    fingerprint_of
                        .get(id.as_str())
                        .map_or_else(|| id.clone(), |f| f.to_string())
                }),
            })
            .collect();
        sort_connections(&mut connections);
        let u = &who.unattributed;
        Self {
            interval_s: duration_s,
            attributed: true,
            how: who.how.clone(),
            statements,
            named: who.connections.iter().any(|c| c.user.is_some()),
            connections,
            unattributed_per_s: per_s(u.map_full + u.no_thd + u.no_text),
        }
    }
}

fn sort_statements(rows: &mut [StatementRow]) {
    rows.sort_by(|a, b| {
        b.wait_ns_per_s
            .total_cmp(&a.wait_ns_per_s)
            .then_with(|| b.calls_per_s.total_cmp(&a.calls_per_s))
            .then_with(|| a.fingerprint.cmp(&b.fingerprint))
    });
}

fn sort_connections(rows: &mut [ConnectionRow]) {
    rows.sort_by(|a, b| {
        b.wait_ns_per_s
            .total_cmp(&a.wait_ns_per_s)
            .then_with(|| b.calls_per_s.total_cmp(&a.calls_per_s))
            .then_with(|| a.id.cmp(&b.id))
    });
}

/// Refreshes closer together than this show the last statements again:
/// each refresh drains the statement maps, and the book forgets a
/// statement unseen for a few drains.
pub const MIN_STATEMENTS_INTERVAL: Duration = Duration::from_millis(500);

/// Takes the statement book's totals from a running recorder and turns
/// each pair into [`Statements`].
pub struct StatementsView {
    probe_of: HashMap<SlotId, String>,
    /// How statements are read; Err: why they are not.
    how: Result<String, String>,
    /// The last totals and when they were taken (None: not attributed).
    last: Option<(Instant, BookTotals)>,
    shown: Statements,
    names: Option<HashMap<u64, Connection>>,
}

impl StatementsView {
    /// Takes the first totals: the first interval starts now.
    pub fn new(recorder: &mut Recorder) -> Self {
        let probe_of = recorder
            .live_probes()
            .into_iter()
            .flat_map(|p| {
                let name = p.name;
                p.slots.into_iter().map(move |s| (s, name.clone()))
            })
            .collect();
        let last = recorder
            .statement_totals()
            .map(|totals| (Instant::now(), totals));
        let how = match (&recorder.plan().thd, &last) {
            (Err(why), _) => Err(format!("statements not attributed: {why}")),
            (Ok(_), None) => Err("statements not attributed: no probe attached".into()),
            (Ok(layout), Some(_)) => Ok(crate::plan::thd::describe(layout)),
        };
        let shown = match &how {
            Ok(how) => Statements {
                attributed: true,
                how: how.clone(),
                ..Statements::default()
            },
            Err(why) => Statements::not_attributed(why.clone()),
        };
        Self {
            probe_of,
            how,
            last,
            shown,
            names: None,
        }
    }

    /// Users, hosts and dbs by connection id (the processlist), for the
    /// refreshes from now on.
    pub fn name_connections(&mut self, rows: HashMap<u64, Connection>) {
        self.names = Some(rows);
    }

    /// The interval since the last refresh (or since `new`); the last
    /// one again when that was less than [`MIN_STATEMENTS_INTERVAL`] ago.
    pub fn refresh(&mut self, recorder: &mut Recorder) -> &Statements {
        let (Ok(how), Some((then, before))) = (&self.how, &self.last) else {
            return &self.shown;
        };
        if then.elapsed() < MIN_STATEMENTS_INTERVAL {
            return &self.shown;
        }
        let Some(now) = recorder.statement_totals() else {
            return &self.shown;
        };
        let at = Instant::now();
        let dt = at.saturating_duration_since(*then).as_secs_f64();
        let mut shown = Statements::between(before, &now, dt, &self.probe_of, self.names.as_ref());
        shown.how.clone_from(how);
        self.shown = shown;
        self.last = Some((at, now));
        &self.shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::abi::StmtVal;
    use crate::collect::{StatementRows, StmtLost};
    use crate::record::statements::StatementBook;

    const UPDATE: &str = "UPDATE t SET k=k+? WHERE id=?";
    const SELECT: &str = "SELECT c FROM t WHERE id=?";

    use crate::record::statements::tests::text;

    fn v(calls: u64, wait_ns: u64) -> StmtVal {
        StmtVal { calls, wait_ns }
    }

    fn slots() -> (SlotId, SlotId, HashMap<SlotId, String>) {
        let (a, b) = (SlotId::of_index(0), SlotId::of_index(1));
        let probe_of = HashMap::from([(a, "redo".to_string()), (b, "versions".to_string())]);
        (a, b, probe_of)
    }

    /// A book whose first drains hold much (a long run's worth), and the
    /// totals before and after one more drain: only that drain may show.
    fn book_and_interval() -> (BookTotals, BookTotals) {
        let (redo, versions, _) = slots();
        let mut book = StatementBook::new(false);
        // Before the interval: connection 7's UPDATE waits a lot, 8's
        // SELECT runs; 9's SELECT ran once and is done.
        book.add(StatementRows {
            stats: vec![
                (10, redo, v(1_000, 9_000_000_000)),
                (11, versions, v(500, 500)),
                (12, versions, v(3, 3)),
            ],
            texts: vec![
                (10, text(7, "UPDATE t SET k=k+1 WHERE id=5")),
                (11, text(8, "SELECT c FROM t WHERE id=9")),
                (12, text(9, "SELECT c FROM t WHERE id=1")),
            ],
            lost: StmtLost {
                no_thd: 40,
                ..StmtLost::default()
            },
            holders: vec![],
            latches: vec![],
            cpu: vec![],
            stacks: vec![],
        });
        let earlier = book.totals();
        // The interval (2 s): 7's UPDATE goes on a little; 8 runs two new
        // SELECTs that wait more than its UPDATE; 7 runs a SELECT too.
        book.add(StatementRows {
            stats: vec![
                (10, redo, v(4, 1_000_000)),
                (20, versions, v(100, 6_000_000)),
                (20, redo, v(2, 2_000_000)),
                (21, versions, v(50, 50)),
                (22, versions, v(10, 10)),
                (23, redo, v(2, 10)),
            ],
            texts: vec![
                (20, text(8, "SELECT c FROM t WHERE id=10")),
                (21, text(8, "SELECT c FROM t WHERE id=11")),
                (22, text(7, "SELECT c FROM t WHERE id=12")),
                (23, text(8, "UPDATE t SET k=k+1 WHERE id=6")),
            ],
            lost: StmtLost {
                no_thd: 46,
                ..StmtLost::default()
            },
            holders: vec![],
            latches: vec![],
            cpu: vec![],
            stacks: vec![],
        });
        (earlier, book.totals())
    }

    #[test]
    fn an_interval_shows_its_own_hits_only() {
        let (_, _, probe_of) = slots();
        let (earlier, later) = book_and_interval();
        let s = Statements::between(&earlier, &later, 2.0, &probe_of, None);
        assert!(s.attributed && !s.named);
        assert_eq!(s.interval_s, 2.0);
        // Fingerprint, wait/s, calls/s, executions/s, connections, top probe.
        type Row<'a> = (&'a str, f64, f64, f64, u64, Option<&'a str>);
        let rows: Vec<Row> = s
            .statements
            .iter()
            .map(|r| {
                (
                    r.fingerprint.as_str(),
                    r.wait_ns_per_s,
                    r.calls_per_s,
                    r.executions_per_s,
                    r.connections,
                    r.top_probe.as_deref(),
                )
            })
            .collect();
        // The SELECT first: it waited 8 ms in the interval, the UPDATE
        // 1 ms (and 9 s before it, which must not count).
        assert_eq!(
            rows,
            vec![
                (SELECT, 4_000_030.0, 81.0, 1.5, 2, Some("versions")),
                (UPDATE, 500_005.0, 3.0, 0.5, 2, Some("redo")),
            ]
        );
        assert_eq!(s.statements[0].id, statement_id(SELECT));
        assert!(s.statements.iter().all(|r| r.users.is_empty()));
        // Connection 9 ran nothing in the interval: not listed. 7's top
        // statement is its UPDATE (1 ms of wait in the interval), though
        // its SELECT came later; 8's is the SELECT.
        let conns: Vec<(u64, f64, f64, Option<&str>)> = s
            .connections
            .iter()
            .map(|c| {
                (
                    c.id,
                    c.wait_ns_per_s,
                    c.calls_per_s,
                    c.top_statement.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            conns,
            vec![
                (8, 4_000_030.0, 77.0, Some(SELECT)),
                (7, 500_005.0, 7.0, Some(UPDATE)),
            ]
        );
        assert_eq!(s.unattributed_per_s, 3.0);
    }

    #[test]
    fn an_idle_interval_is_empty_and_the_first_counts_from_zero() {
        let (_, _, probe_of) = slots();
        let (earlier, later) = book_and_interval();
        let idle = Statements::between(&later, &later, 1.0, &probe_of, None);
        assert!(idle.statements.is_empty() && idle.connections.is_empty());
        assert_eq!(idle.unattributed_per_s, 0.0);
        // From an empty book: everything, the 9 s of UPDATE wait included.
        let all = Statements::between(&BookTotals::default(), &earlier, 1.0, &probe_of, None);
        assert_eq!(all.statements[0].fingerprint, UPDATE);
        assert_eq!(all.statements[0].wait_ns_per_s, 9e9);
        assert_eq!(all.connections.len(), 3);
        // No time: no rates.
        let none = Statements::between(&earlier, &later, 0.0, &probe_of, None);
        assert!(none.statements.iter().all(|r| r.calls_per_s == 0.0));
    }

    #[test]
    fn connections_are_named_from_the_processlist() {
        let (_, _, probe_of) = slots();
        let (earlier, later) = book_and_interval();
        let row = |id, user: &str| Connection {
            id,
            user: Some(user.into()),
            host: Some("localhost".into()),
            db: Some("sbtest".into()),
            innoprof: false,
        };
        // Connection 7 is not in the processlist (it came and went).
        let names = HashMap::from([(8, row(8, "app_ro")), (9, row(9, "app_rw"))]);
        let s = Statements::between(&earlier, &later, 2.0, &probe_of, Some(&names));
        assert!(s.named);
        // The SELECT: 8 made 152 of its calls, 7 made 10.
        assert_eq!(s.statements[0].users, vec!["app_ro", "?"]);
        let c8 = &s.connections[0];
        assert_eq!(
            (c8.id, c8.user.as_deref(), c8.db.as_deref()),
            (8, Some("app_ro"), Some("sbtest"))
        );
        assert_eq!(s.connections[1].user, None);
    }

    #[test]
    fn a_saved_recording_gives_whole_recording_rates() {
        let (redo, versions, probe_of) = slots();
        let mut book = StatementBook::new(false);
        book.add(StatementRows {
            stats: vec![(10, redo, v(20, 4_000)), (11, versions, v(10, 10))],
            texts: vec![
                (10, text(7, "UPDATE t SET k=k+1 WHERE id=5")),
                (11, text(8, "SELECT c FROM t WHERE id=9")),
            ],
            ..StatementRows::default()
        });
        let mut who = book.result("how".into(), &probe_of);
        who.connections[0].user = Some("app_rw".into());
        let s = Statements::from_who(&who, 10.0);
        assert!(s.attributed && s.named);
        assert_eq!(s.statements[0].fingerprint, UPDATE);
        assert_eq!(
            (s.statements[0].wait_ns_per_s, s.statements[0].calls_per_s),
            (400.0, 2.0)
        );
        assert_eq!(s.statements[0].top_probe.as_deref(), Some("redo"));
        assert_eq!(s.connections[0].top_statement.as_deref(), Some(UPDATE));
        assert_eq!(s.connections[0].user.as_deref(), Some("app_rw"));
        let off = Statements::from_who(
            &Who {
                how: "statements not attributed: no DWARF".into(),
                ..Who::default()
            },
            10.0,
        );
        assert!(!off.attributed && off.statements.is_empty());
        assert_eq!(off.how, "statements not attributed: no DWARF");
    }
}
