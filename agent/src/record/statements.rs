//! The statements behind the hits: the BPF side counts each connection
//! hit under its statement's `query_id` and reads the statement's text
//! once; this book drains those maps every second, or every 200 ms while
//! they fill (so they keep room),
//! fingerprints each text and adds the counts up per fingerprint and per
//! connection.

use std::collections::{HashMap, HashSet};

use crate::bpf::abi::{SlotId, StackKey, StmtText, StmtVal};
use crate::collect::{StatementRows, StmtLost};
use crate::model::who::{
    sort_latch_statements, Blocking, BlockingTotal, ConnectionResult, LatchStatement,
    StatementProbe, StatementResult, Unattributed, Who, MAX_BLOCKING, MAX_CONNECTIONS,
    MAX_STATEMENTS,
};

/// A `query_id` unseen for this many drains and this long is forgotten
/// (its later hits, if any, count as of an unknown statement): statements
/// that hit probes come by the thousand a second. Both, because drains
/// come faster on a busy server, and a long statement may pause between
/// hits (a version walk per row of a slow scan).
const FORGET_AFTER_DRAINS: u32 = 5;
const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(5);
/// Raw texts remembered with their fingerprint (prepared statements and
/// ORMs repeat theirs), so a text is fingerprinted once.
const MAX_KNOWN_TEXTS: usize = 4096;
/// Fingerprints kept; past it, new ones count as "other statements".
const MAX_DIGESTS: usize = 10_000;
/// Connections and waiter -> holder edges kept: `serve` runs for days
/// over servers whose connections come and go. Past it, a new connection
/// counts as [`OTHER_CONNECTION`] and a new edge is not kept (counted).
const MAX_CONNECTIONS_KEPT: usize = 10_000;
const MAX_EDGES_KEPT: usize = 10_000;
/// Statement runs (query ids) remembered with their fingerprint because
/// the CPU sampler counted them, so that the CPU profile's stacks, keyed
/// by query id and read at the end, can be labelled: one per run that had
/// a sample, so at most the samples taken (99 a second per CPU). Past it,
/// a stack's statement is not named (its count in `cpu_samples` stays).
const MAX_CPU_IDS: usize = 1 << 18;
/// (stack counter, statement) rows kept for the wait profile's
/// `statement` label: one per stack taken by a statement's hit, so at most
/// one per millisecond per CPU and probe. Past it, a stack's hits keep no
/// statement (counted in `who.unattributed.stacks_full`).
const MAX_STACK_ROWS: usize = 1 << 16;
/// Statements kept in the summary for their CPU samples even when their
/// wait is not among the [`MAX_STATEMENTS`] most.
const CPU_STATEMENTS_KEPT: usize = 10;
/// (statement, latch) rows handed on to be named: latches of one name
/// are summed after, so more than the summary keeps.
const LATCH_ROWS_NAMED: usize = 1000;
/// The connection id that stands for every connection past the bound.
pub const OTHER_CONNECTION: u64 = u64::MAX;

#[derive(Debug, Clone, Copy)]
struct Seen {
    digest: u32,
    conn: u64,
    last_drain: u32,
}

#[derive(Debug)]
struct Digest {
    fingerprint: String,
    sample: Option<String>,
    executions: u64,
    connections: HashSet<u64>,
}

/// A latch's exclusive holder: a connection's statement, or a thread
/// running none (a background thread, or a connection between statements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    Statement { digest: u32, conn: u64 },
    Thread(u32),
}

/// How a holder was found: read from the latch (with its lock site, where
/// the latch records it), or by its release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct HeldHow {
    released: bool,
    site: Option<(u64, u32)>,
}

/// A latch as a call site carries it: id + 1, creation file pointer, line.
type RawLatch = (u32, u64, u32);

#[derive(Debug, Default, Clone, Copy)]
struct Acc {
    calls: u64,
    wait_ns: u64,
    /// The CPU sampler's on-CPU samples (per connection rows only).
    cpu: u64,
}

impl Acc {
    fn add(&mut self, v: &StmtVal) {
        self.calls += v.calls;
        self.wait_ns += v.wait_ns;
    }
}

/// The statements seen so far, per fingerprint, probe and connection.
#[derive(Debug, Default)]
pub struct StatementBook {
    keep_text: bool,
    drains: u32,
    /// When each remembered drain was (see [`FORGET_AFTER`]).
    drain_times: std::collections::VecDeque<(u32, std::time::Instant)>,
    seen: HashMap<u64, Seen>,
    known_texts: HashMap<Vec<u8>, u32>,
    by_fingerprint: HashMap<String, u32>,
    digests: Vec<Digest>,
    rows: HashMap<(u32, SlotId), Acc>,
    conns: HashMap<u64, HashMap<u32, Acc>>,
    /// Per (slot, waiter's statement, holder, how and where it held the
    /// latch): waits for a latch's holder.
    edges: HashMap<(SlotId, Option<u32>, Holder, HeldHow), Acc>,
    /// Waits whose edge was past [`MAX_EDGES_KEPT`].
    edges_dropped: u64,
    /// Per (statement, slot, raw latch): a statement's hits on a latch.
    latch_rows: HashMap<(u32, SlotId, RawLatch), Acc>,
    /// Hits whose (statement, latch) row was past [`MAX_EDGES_KEPT`].
    latch_rows_dropped: u64,
    no_text: u64,
    lost: StmtLost,
    /// Per fingerprint: the CPU sampler's on-CPU samples of it.
    cpu: HashMap<u32, u64>,
    /// Query ids with CPU samples, and their fingerprint (see [`MAX_CPU_IDS`]).
    cpu_ids: HashMap<u64, u32>,
    /// CPU samples of a query id whose text was never read.
    cpu_no_text: u64,
    /// Per (stack counter, statement): the hits its stacks carried.
    stacks: HashMap<(StackKey, u32), Acc>,
    /// Stack hits whose row was past [`MAX_STACK_ROWS`].
    stacks_dropped: u64,
}

impl StatementBook {
    /// `keep_text`: keep one raw text per fingerprint (`--statement-text`).
    pub fn new(keep_text: bool) -> Self {
        Self {
            keep_text,
            ..Self::default()
        }
    }

    /// Statements the maps had no room for, so far (the kernel's counts
    /// are cumulative).
    pub fn lost_so_far(&self) -> u64 {
        self.lost.keys_full + self.lost.text_full
    }

    /// Adds what one drain of the maps took.
    pub fn add(&mut self, rows: StatementRows) {
        self.drains += 1;
        for (query_id, text) in &rows.texts {
            if let Some(digest) = self.digest_of(text) {
                self.digests[digest as usize].executions += 1;
                self.digests[digest as usize].connections.insert(text.conn);
                self.seen.insert(
                    *query_id,
                    Seen {
                        digest,
                        conn: text.conn,
                        last_drain: self.drains,
                    },
                );
            }
        }
        for (query_id, slot, v) in &rows.stats {
            let Some(seen) = self.seen.get_mut(query_id) else {
                self.no_text += v.calls;
                continue;
            };
            seen.last_drain = self.drains;
            let (digest, mut conn) = (seen.digest, seen.conn);
            if self.conns.len() >= MAX_CONNECTIONS_KEPT && !self.conns.contains_key(&conn) {
                conn = OTHER_CONNECTION;
            }
            self.rows.entry((digest, *slot)).or_default().add(v);
            self.conns
                .entry(conn)
                .or_default()
                .entry(digest)
                .or_default()
                .add(v);
        }
        for &(query_id, samples) in &rows.cpu {
            let Some(seen) = self.seen.get_mut(&query_id) else {
                self.cpu_no_text += samples;
                continue;
            };
            // A long statement sampled at every drain stays remembered.
            seen.last_drain = self.drains;
            *self.cpu.entry(seen.digest).or_default() += samples;
            let mut conn = seen.conn;
            if self.conns.len() >= MAX_CONNECTIONS_KEPT && !self.conns.contains_key(&conn) {
                conn = OTHER_CONNECTION;
            }
            self.conns
                .entry(conn)
                .or_default()
                .entry(seen.digest)
                .or_default()
                .cpu += samples;
            if self.cpu_ids.len() < MAX_CPU_IDS || self.cpu_ids.contains_key(&query_id) {
                self.cpu_ids.insert(query_id, seen.digest);
            }
        }
        for r in &rows.stacks {
            let Some(seen) = self.seen.get(&r.query_id) else {
                continue;
            };
            let row = (r.stack, seen.digest);
            if self.stacks.len() >= MAX_STACK_ROWS && !self.stacks.contains_key(&row) {
                self.stacks_dropped += r.count;
                continue;
            }
            self.stacks.entry(row).or_default().add(&StmtVal {
                calls: r.count,
                wait_ns: r.wait_ns,
            });
        }
        for (query_id, slot, site, v) in &rows.latches {
            let Some(seen) = self.seen.get(query_id) else {
                continue;
            };
            let key = (
                seen.digest,
                *slot,
                (site.latch, site.created_file, site.created_line),
            );
            if self.latch_rows.len() >= MAX_EDGES_KEPT && !self.latch_rows.contains_key(&key) {
                self.latch_rows_dropped += v.calls;
                continue;
            }
            self.latch_rows.entry(key).or_default().add(v);
        }
        for (slot, k, v) in &rows.holders {
            let waiter = self.seen.get(&k.waiter_query_id).map(|s| s.digest);
            let holder = match self.seen.get(&k.holder_query_id) {
                Some(h) if k.holder_query_id != 0 => Holder::Statement {
                    digest: h.digest,
                    conn: h.conn,
                },
                _ => Holder::Thread(k.holder_tid),
            };
            let how = HeldHow {
                released: k.how == crate::bpf::abi::HOLDER_RELEASED,
                site: (k.holder_file != 0).then_some((k.holder_file, k.holder_line)),
            };
            let key = (*slot, waiter, holder, how);
            if self.edges.len() >= MAX_EDGES_KEPT && !self.edges.contains_key(&key) {
                self.edges_dropped += v.calls;
                continue;
            }
            self.edges.entry(key).or_default().add(v);
        }
        // The oldest drain still remembered: within FORGET_AFTER_DRAINS of
        // this one, or younger than FORGET_AFTER.
        let now = std::time::Instant::now();
        self.drain_times.push_back((self.drains, now));
        while let Some(&(n, at)) = self.drain_times.front() {
            if self.drains - n >= FORGET_AFTER_DRAINS && now.duration_since(at) >= FORGET_AFTER {
                self.drain_times.pop_front();
            } else {
                break;
            }
        }
        let keep_from = self.drain_times.front().map_or(self.drains, |&(n, _)| n);
        self.seen.retain(|_, s| s.last_drain >= keep_from);
        self.lost = rows.lost;
    }

    /// The fingerprint id of a statement's text (a new one if unseen).
    fn digest_of(&mut self, text: &StmtText) -> Option<u32> {
        let len = (text.len as usize).min(text.text.len());
        let raw = &text.text[..len];
        if let Some(&d) = self.known_texts.get(raw) {
            return Some(d);
        }
        let s = String::from_utf8_lossy(raw);
        let cut = u64::from(text.len) < text.full_len;
        let mut fingerprint = digest_text(&s);
        if cut {
            fingerprint.push('…');
        }
        let d = match self.by_fingerprint.get(&fingerprint) {
            Some(&d) => d,
            None if self.digests.len() < MAX_DIGESTS => {
                let d = self.digests.len() as u32;
                self.digests.push(Digest {
                    fingerprint: fingerprint.clone(),
                    sample: self
                        .keep_text
                        .then(|| crate::text::printable(&s).into_owned()),
                    executions: 0,
                    connections: HashSet::new(),
                });
                self.by_fingerprint.insert(fingerprint, d);
                d
            }
            None => return None,
        };
        if self.known_texts.len() >= MAX_KNOWN_TEXTS {
            self.known_texts.clear();
        }
        self.known_texts.insert(raw.to_vec(), d);
        Some(d)
    }

    /// Per query id the CPU sampler counted: its statement's fingerprint
    /// (the CPU profile's `statement` label).
    pub fn cpu_fingerprints(&self) -> HashMap<u64, String> {
        self.cpu_ids
            .iter()
            .map(|(&id, &d)| (id, self.digests[d as usize].fingerprint.clone()))
            .collect()
    }

    /// The probes' stack counters split by statement: each counter's
    /// hits under the statement whose hit took its stack (the wait
    /// profile's `statement` label), the rest without one.
    pub fn split_stacks(
        &self,
        samples: Vec<crate::collect::StackSample>,
    ) -> Vec<crate::collect::StackSample> {
        let mut parts: HashMap<StackKey, Vec<(String, u64, u64)>> = HashMap::new();
        for ((key, digest), acc) in &self.stacks {
            parts.entry(*key).or_default().push((
                self.digests[*digest as usize].fingerprint.clone(),
                acc.calls,
                acc.wait_ns,
            ));
        }
        samples
            .into_iter()
            .flat_map(|s| match parts.get_mut(&s.key) {
                Some(p) => {
                    // The most waited first, so a part the counter cannot
                    // hold (a hit lost in a drain) is the least.
                    p.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
                    s.split(p)
                }
                None => vec![s],
            })
            .collect()
    }

    /// Forgets the stack rows (`serve`, once a stacks window has closed:
    /// stacks are taken only in windows, and a window's split is the
    /// difference of two, so a row from before it is not needed, and
    /// `serve`, which runs for days, keeps no more than one window's).
    pub fn forget_stacks(&mut self) {
        self.stacks.clear();
    }

    /// CPU samples of statements whose text was never read.
    pub fn cpu_no_text(&self) -> u64 {
        self.cpu_no_text
    }

    /// The cumulative counts as they stand, whole (not cut to the
    /// summary's top lists), for live views that take the difference of
    /// two ([`crate::live::statements`]).
    pub fn totals(&self) -> BookTotals {
        let counts = |a: &Acc| crate::collect::Counts::of(a.calls, a.wait_ns);
        BookTotals {
            statements: self
                .digests
                .iter()
                .map(|d| (d.fingerprint.clone(), d.executions))
                .collect(),
            rows: self.rows.iter().map(|(k, a)| (*k, counts(a))).collect(),
            connections: self
                .conns
                .iter()
                .flat_map(|(&conn, per)| per.iter().map(move |(&d, a)| ((conn, d), counts(a))))
                .collect(),
            unattributed: self.lost.keys_full + self.lost.no_thd + self.no_text,
        }
    }

    /// The summary's `who`, probes named by `probe_of`; users are named
    /// later, from the processlist ([`Who::name_users`]).
    pub fn result(&self, how: String, probe_of: &HashMap<SlotId, String>) -> Who {
        let mut per_digest: HashMap<u32, (Acc, HashMap<&str, Acc>)> = HashMap::new();
        for (&(d, slot), acc) in &self.rows {
            let e = per_digest.entry(d).or_default();
            e.0.calls += acc.calls;
            e.0.wait_ns += acc.wait_ns;
            let name = probe_of.get(&slot).map_or("?", String::as_str);
            let p = e.1.entry(name).or_default();
            p.calls += acc.calls;
            p.wait_ns += acc.wait_ns;
        }
        // Statements sampled on CPU that hit no probe are statements too.
        for &d in self.cpu.keys() {
            per_digest.entry(d).or_default();
        }
        let mut conn_calls: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        for (conn, per) in &self.conns {
            for (d, acc) in per {
                conn_calls.entry(*d).or_default().push((*conn, acc.calls));
            }
        }
        let statements: Vec<StatementResult> = per_digest
            .into_iter()
            .map(|(d, (acc, probes))| {
                let digest = &self.digests[d as usize];
                let mut probes: Vec<StatementProbe> = probes
                    .into_iter()
                    .map(|(probe, a)| StatementProbe {
                        probe: probe.to_string(),
                        calls: a.calls,
                        wait_ns_total: a.wait_ns,
                    })
                    .collect();
                probes.sort_by(|a, b| {
                    (b.wait_ns_total, b.calls, &a.probe).cmp(&(a.wait_ns_total, a.calls, &b.probe))
                });
                StatementResult {
                    id: statement_id(&digest.fingerprint),
                    fingerprint: digest.fingerprint.clone(),
                    sample: digest.sample.clone(),
                    executions: digest.executions,
                    connections: digest.connections.len() as u64,
                    users: Vec::new(),
                    calls: acc.calls,
                    wait_ns_total: acc.wait_ns,
                    probes,
                    cpu_samples: self.cpu.get(&d).copied().unwrap_or(0),
                    connection_calls: conn_calls.remove(&d).unwrap_or_default(),
                }
            })
            .collect();
        let total = statements.len();
        let statements = keep_statements(statements);
        let statements_more = (total - statements.len()) as u64;

        let mut connections: Vec<ConnectionResult> = self
            .conns
            .iter()
            .map(|(&id, per)| {
                let calls = per.values().map(|a| a.calls).sum();
                let wait_ns_total = per.values().map(|a| a.wait_ns).sum();
                let cpu_samples = per.values().map(|a| a.cpu).sum();
                let top = per
                    .iter()
                    .max_by_key(|(d, a)| (a.wait_ns, a.calls, std::cmp::Reverse(**d)))
                    .map(|(d, _)| statement_id(&self.digests[*d as usize].fingerprint));
                ConnectionResult {
                    id,
                    user: None,
                    host: None,
                    db: None,
                    calls,
                    wait_ns_total,
                    statements: per.len() as u64,
                    top_statement: top,
                    cpu_samples,
                    innoprof: false,
                }
            })
            .collect();
        connections.sort_by(|a, b| {
            (b.wait_ns_total, b.calls, a.id).cmp(&(a.wait_ns_total, a.calls, b.id))
        });
        let connections_more = connections.len().saturating_sub(MAX_CONNECTIONS) as u64;
        connections.truncate(MAX_CONNECTIONS);
        let id_of = |d: u32| statement_id(&self.digests[d as usize].fingerprint);
        let mut blocking: Vec<Blocking> = self
            .edges
            .iter()
            .map(|(&(slot, waiter, holder, how), acc)| {
                let (holder, holder_connection, holder_thread) = match holder {
                    Holder::Statement { digest, conn } => (Some(digest), Some(conn), None),
                    Holder::Thread(tid) => (None, None, Some(tid)),
                };
                let fingerprint = |d: u32| self.digests[d as usize].fingerprint.clone();
                Blocking {
                    probe: probe_of.get(&slot).cloned().unwrap_or_else(|| "?".into()),
                    waiter_statement: waiter.map(id_of),
                    waiter_fingerprint: waiter.map(fingerprint),
                    holder_statement: holder.map(id_of),
                    holder_fingerprint: holder.map(fingerprint),
                    holder_connection,
                    holder_thread,
                    released: how.released,
                    raw_site: how.site,
                    calls: acc.calls,
                    wait_ns_total: acc.wait_ns,
                    ..Default::default()
                }
            })
            .collect();
        let mut blocking_totals: Vec<BlockingTotal> = Vec::new();
        for b in &blocking {
            match blocking_totals.iter_mut().find(|t| t.probe == b.probe) {
                Some(t) => {
                    t.calls += b.calls;
                    t.wait_ns_total += b.wait_ns_total;
                }
                None => blocking_totals.push(BlockingTotal {
                    probe: b.probe.clone(),
                    calls: b.calls,
                    wait_ns_total: b.wait_ns_total,
                }),
            }
        }
        blocking_totals.sort_by(|a, b| a.probe.cmp(&b.probe));
        blocking.sort_by(|a, b| {
            (b.wait_ns_total, b.calls, &a.probe).cmp(&(a.wait_ns_total, a.calls, &b.probe))
        });
        blocking.truncate(MAX_BLOCKING);
        // Raw latches are named (and rows of one name summed) when the
        // recording ends; keep enough rows for that.
        let mut latch_statements: Vec<LatchStatement> = self
            .latch_rows
            .iter()
            .map(|(&(d, slot, raw), acc)| LatchStatement {
                probe: probe_of.get(&slot).cloned().unwrap_or_else(|| "?".into()),
                latch: String::new(),
                statement: id_of(d),
                fingerprint: self.digests[d as usize].fingerprint.clone(),
                calls: acc.calls,
                wait_ns_total: acc.wait_ns,
                raw_latch: Some(raw),
            })
            .collect();
        sort_latch_statements(&mut latch_statements);
        latch_statements.truncate(LATCH_ROWS_NAMED);
        Who {
            latch_statements,
            blocking,
            blocking_totals,
            how,
            attributed: true,
            text_kept: self.keep_text,
            statements,
            connections,
            statements_more,
            connections_more,
            unattributed: Unattributed {
                map_full: self.lost.keys_full,
                no_thd: self.lost.no_thd,
                no_text: self.no_text,
                holders_full: self.lost.holders_full + self.edges_dropped,
                latches_full: self.lost.latches_full + self.latch_rows_dropped,
                stacks_full: self.lost.stacks_full + self.stacks_dropped,
            },
            // Set by the recorder, which knows the sampler's counters.
            cpu: None,
        }
    }
}

/// The summary's statements: the [`MAX_STATEMENTS`] with the most wait
/// (then calls), and the [`CPU_STATEMENTS_KEPT`] with the most CPU
/// samples among the rest, so that a statement that burns CPU without
/// waiting is not cut; most wait first.
fn keep_statements(mut statements: Vec<StatementResult>) -> Vec<StatementResult> {
    let by_wait = |a: &StatementResult, b: &StatementResult| {
        (b.wait_ns_total, b.calls, b.cpu_samples, &a.id).cmp(&(
            a.wait_ns_total,
            a.calls,
            a.cpu_samples,
            &b.id,
        ))
    };
    statements.sort_by(by_wait);
    if statements.len() <= MAX_STATEMENTS {
        return statements;
    }
    let mut rest = statements.split_off(MAX_STATEMENTS);
    rest.retain(|s| s.cpu_samples > 0);
    rest.sort_by(|a, b| (b.cpu_samples, &a.id).cmp(&(a.cpu_samples, &b.id)));
    rest.truncate(CPU_STATEMENTS_KEPT);
    statements.extend(rest);
    statements.sort_by(by_wait);
    statements
}

/// A [`StatementBook`]'s cumulative counts ([`StatementBook::totals`]).
/// A statement's number is its index in `statements`, the same for the
/// book's life.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BookTotals {
    /// Per statement number: its fingerprint and executions so far.
    pub statements: Vec<(String, u64)>,
    /// Per (statement number, slot): calls and wait.
    pub rows: HashMap<(u32, SlotId), crate::collect::Counts>,
    /// Per (connection id, statement number): calls and wait (past the
    /// bound, connections count as [`OTHER_CONNECTION`]).
    pub connections: HashMap<(u64, u32), crate::collect::Counts>,
    /// Client connections' calls tied to no statement so far.
    pub unattributed: u64,
}

/// The grouping text of a statement: [`crate::text::fingerprint`], then
/// every list of placeholders `(?, ?, ?)` as `(?+)` (pt-query-digest's
/// rule: `IN` lists and multi-row `VALUES` of any length are one statement).
pub fn digest_text(sql: &str) -> String {
    let fp = crate::text::fingerprint(sql);
    let mut out = String::with_capacity(fp.len());
    let mut rest = fp.as_str();
    while let Some(open) = rest.find('(') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // Only after IN or VALUES, as pt-query-digest folds: `SLEEP(?)`
        // or `COALESCE(?, ?)` are calls, not lists.
        let before = rest[..open].trim_end().to_ascii_lowercase();
        let list = ["in", "values", "value"].iter().any(|w| {
            before.strip_suffix(w).is_some_and(|b| {
                b.is_empty() || !b.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        });
        match after.find(')') {
            Some(close)
                if list
                    && after[..close].contains('?')
                    && after[..close].split(',').all(|item| item.trim() == "?") =>
            {
                out.push_str("(?+)");
                rest = &after[close + 1..];
                // `VALUES (?+), (?+)`: the rows after the first are one.
                while let Some(more) = rest.strip_prefix(", (").or_else(|| rest.strip_prefix(",("))
                {
                    match more.find(')') {
                        Some(c) if more[..c].split(',').all(|i| i.trim() == "?") => {
                            rest = &more[c + 1..];
                        }
                        _ => break,
                    }
                }
            }
            _ => {
                out.push('(');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A fingerprint's stable id: 16 hex digits of its FNV-1a hash.
pub fn statement_id(fingerprint: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in fingerprint.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A drained text as BPF writes it (also for live's tests).
    pub(crate) fn text(conn: u64, s: &str) -> StmtText {
        let mut t: StmtText = bytemuck::Zeroable::zeroed();
        t.conn = conn;
        t.len = s.len() as u32;
        t.full_len = s.len() as u64;
        t.text[..s.len()].copy_from_slice(s.as_bytes());
        t
    }

    #[test]
    fn lists_fold_into_one_statement() {
        assert_eq!(
            digest_text("SELECT c FROM t WHERE id IN (1, 2, 3) AND k = 4"),
            "SELECT c FROM t WHERE id IN (?+) AND k = ?"
        );
        assert_eq!(
            digest_text("INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'),(3,'z')"),
            "INSERT INTO t (a, b) VALUES (?+)"
        );
        assert_eq!(
            digest_text("SELECT f(a, b) FROM t"),
            "SELECT f(a, b) FROM t"
        );
        // Calls are not lists: pt-query-digest folds after IN and VALUES only.
        assert_eq!(
            digest_text("SELECT 5, SLEEP(0.01), COALESCE(1, 2) FROM t WHERE a IN (7)"),
            "SELECT ?, SLEEP(?), COALESCE(?, ?) FROM t WHERE a IN (?+)"
        );
        assert_eq!(
            digest_text("SELECT * FROM t JOIN (1)"),
            "SELECT * FROM t JOIN (?)"
        );
    }

    /// A statement that pauses over several fast drains (a slow scan
    /// walking versions now and then) keeps its text: forgetting takes
    /// both FORGET_AFTER_DRAINS drains and FORGET_AFTER.
    /// Stack counters split by the statement whose hit took the stack:
    /// runs of one fingerprint add up over drains, a statement never seen
    /// labels nothing, the rest of a counter stays unlabelled, and the
    /// parts never take more than the counter holds.
    #[test]
    fn stacks_split_by_statement() {
        use crate::bpf::abi::{StackKey, StackStmtRec};
        use crate::collect::StackSample;
        let mut book = StatementBook::new(false);
        let key = |hash| StackKey {
            slot: 0,
            stack_hash: hash,
            ..bytemuck::Zeroable::zeroed()
        };
        let rec = |hash, query_id, count, wait_ns| StackStmtRec {
            stack: key(hash),
            query_id,
            count,
            wait_ns,
        };
        book.add(StatementRows {
            texts: vec![
                (10, text(7, "SELECT c FROM t WHERE id=5")),
                (11, text(8, "UPDATE t SET k=k+1 WHERE id=9")),
            ],
            stacks: vec![
                rec(1, 10, 3, 300),
                rec(1, 11, 1, 100),
                rec(2, 11, 5, 50),
                rec(2, 99, 7, 70),
            ],
            ..StatementRows::default()
        });
        book.add(StatementRows {
            texts: vec![(12, text(7, "SELECT c FROM t WHERE id=6"))],
            stacks: vec![rec(1, 12, 2, 200)],
            ..StatementRows::default()
        });
        let sample = |hash, count, wait_ns| StackSample {
            slot: SlotId::of_index(0),
            ips: vec![0x10, 0x20],
            site: Default::default(),
            role: 1,
            count,
            wait_ns,
            key: key(hash),
            statement: None,
            unsampled: false,
        };
        let mut got: Vec<(u64, Option<String>, u64, u64)> = book
            .split_stacks(vec![sample(1, 10, 1000), sample(2, 4, 40), sample(3, 1, 1)])
            .into_iter()
            .map(|s| (s.key.stack_hash, s.statement, s.count, s.wait_ns))
            .collect();
        got.sort();
        let select = Some("SELECT c FROM t WHERE id=?".to_string());
        let update = Some("UPDATE t SET k=k+? WHERE id=?".to_string());
        assert_eq!(
            got,
            vec![
                (1, None, 4, 400),
                (1, select, 5, 500),
                (1, update.clone(), 1, 100),
                // The part is more than the counter (a hit lost as the
                // row was taken): the counter caps it.
                (2, update, 4, 40),
                (3, None, 1, 1),
            ]
        );
    }

    /// A statement's hits on a latch add up per fingerprint (two texts of
    /// one fingerprint, two drains) and per raw latch; naming sums the
    /// raw latches that come out the same (two latches created at one
    /// site), and a hit of a statement never seen is not a row.
    #[test]
    fn latch_rows_add_up_per_fingerprint_and_named_latch() {
        use crate::bpf::abi::Callsite;
        let mut book = StatementBook::new(false);
        let s1 = SlotId::of_index(0);
        let v = |calls, wait_ns| StmtVal { calls, wait_ns };
        let created = |file, line| Callsite {
            created_file: file,
            created_line: line,
            ..Callsite::default()
        };
        let id = |n| Callsite {
            latch: n,
            ..Callsite::default()
        };
        book.add(StatementRows {
            texts: vec![
                (10, text(7, "SELECT c FROM t WHERE id=5")),
                (11, text(8, "SELECT c FROM t WHERE id=9")),
                (12, text(8, "UPDATE t SET k=k+1 WHERE id=9")),
            ],
            latches: vec![
                (10, s1, created(0x100, 7), v(2, 200)),
                (11, s1, created(0x100, 7), v(1, 100)),
                (12, s1, created(0x100, 7), v(1, 50)),
                (12, s1, id(3), v(4, 400)),
                (99, s1, id(3), v(9, 900)),
            ],
            ..StatementRows::default()
        });
        book.add(StatementRows {
            latches: vec![(10, s1, created(0x200, 7), v(1, 10))],
            ..StatementRows::default()
        });
        let mut who = book.result("how".into(), &HashMap::from([(s1, "p".to_string())]));
        // Named: latch id 3 (id + 1) is `lock_sys`; both creation files
        // name the same site (two latches created by one line).
        who.name_latches(|probe, (latch, file, line)| {
            assert_eq!(probe, "p");
            Some(match (latch, file, line) {
                (3, 0, 0) => "lock_sys".to_string(),
                (0, 0x100 | 0x200, 7) => "buf0buf.cc:7".to_string(),
                other => panic!("{other:?}"),
            })
        });
        let rows: Vec<(&str, &str, u64, u64)> = who
            .latch_statements
            .iter()
            .map(|r| {
                (
                    r.latch.as_str(),
                    r.fingerprint.as_str(),
                    r.calls,
                    r.wait_ns_total,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("lock_sys", "UPDATE t SET k=k+? WHERE id=?", 4, 400),
                ("buf0buf.cc:7", "SELECT c FROM t WHERE id=?", 4, 310),
                ("buf0buf.cc:7", "UPDATE t SET k=k+? WHERE id=?", 1, 50),
            ]
        );
        assert!(who.latch_statements.iter().all(|r| r.raw_latch.is_none()));
        assert_eq!(who.statements_on_latch("p", "buf0buf.cc:7").count(), 2);
    }

    #[test]
    fn a_statement_pausing_over_fast_drains_keeps_its_text() {
        let mut book = StatementBook::new(false);
        let s1 = SlotId::of_index(0);
        let v = StmtVal {
            calls: 1,
            wait_ns: 10,
        };
        let empty = || StatementRows {
            stats: vec![],
            texts: vec![],
            lost: StmtLost::default(),
            holders: vec![],
            latches: vec![],
            cpu: vec![],
            stacks: vec![],
        };
        book.add(StatementRows {
            stats: vec![(10, s1, v)],
            texts: vec![(10, text(7, "SELECT c FROM t WHERE k > 5"))],
            ..empty()
        });
        for _ in 0..3 * FORGET_AFTER_DRAINS {
            book.add(empty());
        }
        book.add(StatementRows {
            stats: vec![(10, s1, v)],
            ..empty()
        });
        let who = book.result("how".into(), &HashMap::from([(s1, "a".to_string())]));
        assert_eq!(who.unattributed.no_text, 0, "{:?}", who.unattributed);
        assert_eq!(who.statements.len(), 1);
        assert_eq!(
            (who.statements[0].calls, who.statements[0].executions),
            (2, 1)
        );
    }

    /// CPU samples drained by query id add up per fingerprint, with the
    /// wait counts or alone (a statement that burns CPU and hits no
    /// probe) and per connection; a sampled query id keeps its fingerprint
    /// for the profile's labels; samples of an id with no text are counted
    /// apart.
    #[test]
    fn cpu_samples_add_up_per_fingerprint() {
        let mut book = StatementBook::new(false);
        let s1 = SlotId::of_index(0);
        let v = StmtVal {
            calls: 2,
            wait_ns: 20,
        };
        book.add(StatementRows {
            stats: vec![(10, s1, v)],
            texts: vec![
                (10, text(7, "UPDATE t SET k=k+1 WHERE id=5")),
                (11, text(7, "UPDATE t SET k=k+1 WHERE id=6")),
                (12, text(8, "SELECT SUM(k) FROM t WHERE id > 7")),
            ],
            cpu: vec![(10, 3), (11, 4), (12, 40)],
            ..StatementRows::default()
        });
        // Next drain: 12 runs on (sampled only), 77 was never read.
        book.add(StatementRows {
            cpu: vec![(12, 9), (77, 5)],
            ..StatementRows::default()
        });
        let who = book.result("how".into(), &HashMap::from([(s1, "a".to_string())]));
        let by_fp = |fp: &str| who.statements.iter().find(|s| s.fingerprint == fp).unwrap();
        let upd = by_fp("UPDATE t SET k=k+? WHERE id=?");
        assert_eq!((upd.calls, upd.cpu_samples), (2, 7));
        let sum = by_fp("SELECT SUM(k) FROM t WHERE id > ?");
        assert_eq!((sum.calls, sum.wait_ns_total, sum.cpu_samples), (0, 0, 49));
        assert_eq!(
            who.statements[0].fingerprint, upd.fingerprint,
            "most wait first"
        );
        assert_eq!(book.cpu_no_text(), 5);
        // Per connection too: 7 ran the UPDATEs (3 + 4 samples), 8 the
        // SELECT seen only on CPU (49), which is then a statement of
        // connection 8's, so its users are named.
        let conn = |id: u64| who.connections.iter().find(|c| c.id == id).unwrap();
        assert_eq!((conn(7).calls, conn(7).cpu_samples), (2, 7));
        assert_eq!(
            (conn(8).calls, conn(8).cpu_samples, conn(8).statements),
            (0, 49, 1)
        );
        assert_eq!(sum.connection_calls, vec![(8, 0)]);
        let labels = book.cpu_fingerprints();
        assert_eq!(labels.len(), 3);
        assert_eq!(labels[&12], "SELECT SUM(k) FROM t WHERE id > ?");
        assert_eq!(labels[&11], labels[&10]);
    }

    /// Past the top statements by wait, the ones with the most CPU
    /// samples are kept too (a CPU-bound statement that never waits).
    #[test]
    fn cpu_heavy_statements_are_kept_past_the_wait_list() {
        let st = |i: u64, wait: u64, cpu: u64| StatementResult {
            id: format!("{i:016x}"),
            fingerprint: format!("SELECT {i}"),
            sample: None,
            executions: 1,
            connections: 1,
            users: vec![],
            calls: 1,
            wait_ns_total: wait,
            probes: vec![],
            cpu_samples: cpu,
            connection_calls: vec![],
        };
        let mut all: Vec<StatementResult> = (0..MAX_STATEMENTS as u64 + 20)
            .map(|i| st(i, 1000 + i, 0))
            .collect();
        all.push(st(900, 0, 500));
        all.push(st(901, 1, 0));
        let kept = keep_statements(all);
        assert_eq!(kept.len(), MAX_STATEMENTS + 1);
        assert_eq!(
            kept.last().unwrap().cpu_samples,
            500,
            "the CPU-bound one, last by wait"
        );
        assert!(kept.iter().all(|s| s.fingerprint != "SELECT 901"));
    }

    #[test]
    fn hits_add_up_per_fingerprint_probe_and_connection() {
        let mut book = StatementBook::new(false);
        let s1 = SlotId::of_index(0);
        let s2 = SlotId::of_index(1);
        let v = |calls, wait_ns| StmtVal { calls, wait_ns };
        let key = |waiter, holder, tid| crate::bpf::abi::HolderKey {
            waiter_query_id: waiter,
            holder_query_id: holder,
            slot: 1,
            holder_tid: tid,
            ..Default::default()
        };
        book.add(StatementRows {
            stats: vec![(10, s1, v(3, 300)), (11, s1, v(1, 100)), (12, s2, v(5, 50))],
            texts: vec![
                (10, text(7, "UPDATE t SET k=k+1 WHERE id=5")),
                (11, text(8, "UPDATE t SET k=k+1 WHERE id=9")),
                (12, text(8, "SELECT c FROM t WHERE id=9")),
            ],
            lost: StmtLost::default(),
            holders: vec![
                (s2, key(12, 10, 0), v(2, 40)),
                (s2, key(12, 0, 555), v(1, 5)),
            ],
            latches: vec![],
            cpu: vec![],
            stacks: vec![],
        });
        // The second drain: query 10 goes on; 99 has no text.
        book.add(StatementRows {
            stats: vec![(10, s1, v(2, 200)), (99, s1, v(4, 0))],
            texts: vec![],
            lost: StmtLost {
                no_thd: 6,
                ..StmtLost::default()
            },
            holders: vec![
                (s2, key(12, 10, 0), v(1, 10)),
                // The same holder found by its release, and one with its
                // lock site: edges of their own.
                (
                    s2,
                    crate::bpf::abi::HolderKey {
                        how: crate::bpf::abi::HOLDER_RELEASED,
                        ..key(12, 10, 0)
                    },
                    v(1, 2),
                ),
                (
                    s2,
                    crate::bpf::abi::HolderKey {
                        holder_file: 0x1000,
                        holder_line: 77,
                        ..key(12, 10, 0)
                    },
                    v(1, 1),
                ),
            ],
            latches: vec![],
            cpu: vec![],
            stacks: vec![],
        });
        let probes = HashMap::from([(s1, "a".to_string()), (s2, "b".to_string())]);
        let users = HashMap::from([(
            7,
            crate::model::server_state::Connection {
                id: 7,
                user: Some("app_rw".into()),
                host: None,
                db: None,
                innoprof: false,
            },
        )]);
        let mut who = book.result("how".into(), &probes);
        who.name_users(&users);
        assert_eq!(who.statements.len(), 2);
        let upd = &who.statements[0];
        assert_eq!(upd.fingerprint, "UPDATE t SET k=k+? WHERE id=?");
        assert_eq!((upd.calls, upd.wait_ns_total, upd.executions), (6, 600, 2));
        assert_eq!(upd.connections, 2);
        assert_eq!(upd.users, vec!["app_rw".to_string(), "?".to_string()]);
        assert_eq!(upd.probes[0].probe, "a");
        assert_eq!(who.statements[1].probes[0].probe, "b");
        assert_eq!(who.unattributed.no_text, 4);
        assert_eq!(who.unattributed.no_thd, 6);
        assert_eq!(who.connections[0].id, 7);
        assert_eq!(who.connections[0].calls, 5);
        assert_eq!(who.connections[0].user.as_deref(), Some("app_rw"));
        assert_eq!(who.connections[1].statements, 2);
        assert!(who.statements.iter().all(|s| s.sample.is_none()));
        // Waits for a holder: summed over drains, the holder's statement
        // and connection named; a holder with no statement by its thread.
        assert_eq!(who.blocking.len(), 4);
        let b = &who.blocking[0];
        assert_eq!(b.probe, "b");
        assert_eq!(
            b.waiter_fingerprint.as_deref(),
            Some("SELECT c FROM t WHERE id=?")
        );
        assert_eq!(
            b.holder_fingerprint.as_deref(),
            Some("UPDATE t SET k=k+? WHERE id=?")
        );
        assert_eq!(
            (b.holder_connection, b.calls, b.wait_ns_total),
            (Some(7), 3, 50)
        );
        assert!(!b.released && b.raw_site.is_none());
        assert_eq!(who.blocking[1].holder_thread, Some(555));
        assert_eq!(
            (who.blocking[2].released, who.blocking[2].wait_ns_total),
            (true, 2)
        );
        assert_eq!(who.blocking[3].raw_site, Some((0x1000, 77)));
        // Every edge of the probe, summed.
        assert_eq!(
            who.blocking_totals,
            [crate::model::who::BlockingTotal {
                probe: "b".into(),
                calls: 6,
                wait_ns_total: 58,
            }]
        );
    }
}
