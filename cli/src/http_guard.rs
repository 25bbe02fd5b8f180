//! What `serve` grants one HTTP client, so that one local user cannot
//! starve the scrapes (slowloris: a few hundred sockets trickling their
//! headers held every slot and 5 of 44 scrapes were answered):
//!
//! - a short deadline to send a request's headers ([`HEADER_TIMEOUT`]),
//!   and one for the whole request ([`REQUEST_TIMEOUT`]);
//! - a bound on connections at once, and a lower one per peer (a TCP
//!   peer's address, a unix socket peer's uid);
//! - past a bound, the newcomer is served and the connection idle longest
//!   (no request being answered: trickling headers, or kept alive) of the
//!   peer holding most is closed. A scraper's connection is new and sends
//!   its request at once, so it is answered however many slow ones there
//!   are; the attacker mostly closes its own. Only when every connection
//!   is answering a request is a newcomer refused (503).

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::{service_fn, Service};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, Semaphore};

/// Connections served at once by default: Prometheus needs one per
/// scraper, a person a few; 64 leaves room and keeps innoprof far from a
/// 1,024 descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64;

/// Connections one peer holds at once by default. Every local user
/// reaches a loopback port from 127.0.0.1, so over TCP this bounds them
/// all together (the global bound then matters for `--listen-any`); over
/// a unix socket each uid has its own.
pub const DEFAULT_MAX_PER_PEER: u32 = 32;

/// Time a client has to send a request's headers in full, from the moment
/// hyper waits for them: after accept, and after each answer on a kept
/// alive connection (so it bounds keep-alive idleness too). Trickling
/// bytes does not extend it. Prometheus sends its headers at once.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection must complete a request (headers, body, answer) within
/// this long of being accepted or of its last answer; the time a request
/// is being answered (a pprof profile lasts the seconds it asked for)
/// does not count.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a refused client has to send its request and read the 503.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Who a connection is from, for the per-peer bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A TCP peer's address.
    Ip(IpAddr),
    /// A unix socket peer's uid (SO_PEERCRED).
    Uid(u32),
}

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max: usize,
    pub per_peer: usize,
}

/// One connection served.
struct Conn {
    peer: Peer,
    /// Accepted, or last answered: the oldest is closed first.
    idle_since: Instant,
    /// Requests being answered (0 or 1 over HTTP/1).
    answering: usize,
    /// Wakes the connection's task to close it.
    close: Rc<Notify>,
}

/// Every connection served, by id.
#[derive(Default)]
struct Table {
    next_id: u64,
    conns: HashMap<u64, Conn>,
}

impl Table {
    fn held_by(&self, peer: Peer) -> usize {
        self.conns.values().filter(|c| c.peer == peer).count()
    }

    /// The connection to close so one from `peer` may be served, or None
    /// when there is room; Err when every candidate is answering.
    fn to_close(&self, peer: Peer, limits: Limits) -> Result<Option<u64>, ()> {
        let idle = || self.conns.iter().filter(|(_, c)| c.answering == 0);
        let oldest = |it: &mut dyn Iterator<Item = (&u64, &Conn)>| {
            it.min_by_key(|(id, c)| (c.idle_since, **id))
                .map(|(id, _)| *id)
        };
        if self.held_by(peer) >= limits.per_peer {
            // The peer makes room among its own.
            return oldest(&mut idle().filter(|(_, c)| c.peer == peer))
                .map(Some)
                .ok_or(());
        }
        if self.conns.len() < limits.max {
            return Ok(None);
        }
        let mut held: HashMap<Peer, usize> = HashMap::new();
        for c in self.conns.values() {
            *held.entry(c.peer).or_default() += 1;
        }
        // The peer holding most gives way first; its longest idle goes.
        idle()
            .max_by_key(|(id, c)| (held[&c.peer], std::cmp::Reverse((c.idle_since, **id))))
            .map(|(id, _)| Some(*id))
            .ok_or(())
    }

    fn close(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            c.close.notify_one();
        }
    }
}

pub struct ConnectionGuard {
    limits: Limits,
    table: Rc<RefCell<Table>>,
    /// Connections being answered 503: bounded too, or a flood of them
    /// would hold the descriptors the bound is there to save.
    refusing: Arc<Semaphore>,
}

impl ConnectionGuard {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            table: Rc::default(),
            refusing: Arc::new(Semaphore::new(limits.max)),
        }
    }

    /// Serves `stream` from `peer` with `service` on this thread
    /// (`spawn_local`), closing another connection to make room if need
    /// be, or refuses it when every connection is answering a request.
    pub fn handle<I, S>(&self, stream: I, peer: Peer, service: S)
    where
        I: AsyncRead + AsyncWrite + Unpin + 'static,
        S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>
            + 'static,
        S::Future: 'static,
    {
        let admitted = {
            let mut table = self.table.borrow_mut();
            match table.to_close(peer, self.limits) {
                Ok(victim) => {
                    if let Some(id) = victim {
                        table.close(id);
                    }
                    let id = table.next_id;
                    table.next_id += 1;
                    let close = Rc::new(Notify::new());
                    table.conns.insert(
                        id,
                        Conn {
                            peer,
                            idle_since: Instant::now(),
                            answering: 0,
                            close: close.clone(),
                        },
                    );
                    Some((id, close))
                }
                Err(()) => None,
            }
        };
        if let Some((id, close)) = admitted {
            let table = self.table.clone();
            tokio::task::spawn_local(async move {
                serve_with_deadlines(stream, service, &table, id, &close).await;
                table.borrow_mut().conns.remove(&id);
            });
        } else if let Ok(permit) = self.refusing.clone().try_acquire_owned() {
            let max = self.limits.max;
            tokio::task::spawn_local(async move {
                refuse(stream, max).await;
                drop(permit);
            });
        }
        // Else the stream drops here: closed without a word.
    }
}

/// Serves one connection until it ends, is closed to make room
/// (`close`), or misses [`REQUEST_TIMEOUT`].
async fn serve_with_deadlines<I, S>(
    stream: I,
    service: S,
    table: &Rc<RefCell<Table>>,
    id: u64,
    close: &Notify,
) where
    I: AsyncRead + AsyncWrite + Unpin + 'static,
    S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    let service = Rc::new(service);
    let counted = {
        let table = table.clone();
        service_fn(move |req: Request<Incoming>| {
            let (table, service) = (table.clone(), service.clone());
            update(&table, id, |c| c.answering += 1);
            async move {
                let response = service.call(req).await;
                update(&table, id, |c| {
                    c.answering -= 1;
                    c.idle_since = Instant::now();
                });
                response
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let conn = builder.serve_connection(TokioIo::new(stream), counted);
    tokio::pin!(conn);
    loop {
        let Some((since, answering)) = table
            .borrow()
            .conns
            .get(&id)
            .map(|c| (c.idle_since, c.answering))
        else {
            return;
        };
        if answering == 0 && since + REQUEST_TIMEOUT <= Instant::now() {
            // Dropping the connection closes the socket.
            return;
        }
        let deadline = if answering > 0 {
            Instant::now() + REQUEST_TIMEOUT
        } else {
            since + REQUEST_TIMEOUT
        };
        tokio::select! {
            _ = &mut conn => return,
            _ = close.notified() => return,
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
    }
}

fn update(table: &RefCell<Table>, id: u64, f: impl FnOnce(&mut Conn)) {
    if let Some(c) = table.borrow_mut().conns.get_mut(&id) {
        f(c);
    }
}

/// Answers 503 to one request and closes, within `REFUSE_TIMEOUT`.
async fn refuse<I>(stream: I, max: usize)
where
    I: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let service = service_fn(move |_req: Request<Incoming>| async move {
        let body = format!(
            "innoprof: {max} connections already busy answering (serve --max-connections); \
             retry later\n"
        );
        Ok::<_, Infallible>(
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header("Content-Type", "text/plain; charset=utf-8")
                .header("Connection", "close")
                .header("Retry-After", "1")
                .body(Full::new(Bytes::from(body)))
                .expect("static response parts"),
        )
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(REFUSE_TIMEOUT)
        .keep_alive(false);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, conn).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Peer = Peer::Uid(1000);
    const B: Peer = Peer::Uid(0);

    fn table(conns: &[(Peer, u64, usize)]) -> Table {
        let t0 = Instant::now();
        let mut t = Table::default();
        for (i, &(peer, age_ms, answering)) in conns.iter().enumerate() {
            t.conns.insert(
                i as u64,
                Conn {
                    peer,
                    idle_since: t0 - Duration::from_millis(age_ms),
                    answering,
                    close: Rc::new(Notify::new()),
                },
            );
        }
        t
    }

    #[test]
    fn room_left_closes_nothing() {
        let t = table(&[(A, 10, 0)]);
        let limits = Limits {
            max: 4,
            per_peer: 2,
        };
        assert_eq!(t.to_close(B, limits), Ok(None));
        assert_eq!(t.to_close(A, limits), Ok(None));
    }

    #[test]
    fn a_peer_over_its_bound_closes_its_own_longest_idle() {
        let t = table(&[(A, 10, 0), (A, 30, 0), (B, 50, 0)]);
        let limits = Limits {
            max: 8,
            per_peer: 2,
        };
        assert_eq!(t.to_close(A, limits), Ok(Some(1)));
        // Its own, never another's, even when that one is older.
        let busy = table(&[(A, 10, 1), (A, 30, 1), (B, 50, 0)]);
        assert_eq!(busy.to_close(A, limits), Err(()));
    }

    #[test]
    fn at_the_global_bound_the_peer_holding_most_gives_way() {
        // B's idle connection is the oldest, but A holds more.
        let t = table(&[(B, 90, 0), (A, 10, 0), (A, 30, 0), (A, 20, 1)]);
        let limits = Limits {
            max: 4,
            per_peer: 4,
        };
        assert_eq!(t.to_close(B, limits), Ok(Some(2)));
        // Every connection answering: the newcomer is refused.
        let busy = table(&[(A, 10, 1), (B, 10, 1)]);
        assert_eq!(
            busy.to_close(
                B,
                Limits {
                    max: 2,
                    per_peer: 2
                }
            ),
            Err(())
        );
    }
}
