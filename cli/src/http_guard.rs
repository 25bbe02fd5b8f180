//! What `serve` grants one HTTP client: a bounded number of connections at
//! once, a deadline to send its request headers and a limit on idle time,
//! so sockets that never speak (slowloris) or never read cannot pile up
//! until innoprof runs out of file descriptors. Past the bound a client is
//! answered 503 and closed; past twice the bound it is closed at once.

use std::cell::Cell;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::{service_fn, Service};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// Connections served at once by default: Prometheus needs one per
/// scraper, a person a few; 64 leaves room and keeps innoprof far from a
/// 1,024 descriptor limit.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64;

/// Time a client has to send a request's headers in full once hyper
/// starts reading them (trickling bytes does not extend it). Prometheus
/// sends them at once.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection that moves no byte for this long is closed. Above
/// Prometheus's default 15 s scrape interval, so its keep-alive connection
/// is reused between scrapes.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a refused client has to send its request and read the 503.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(1);

pub struct ConnectionGuard {
    max: usize,
    served: Arc<Semaphore>,
    /// Connections being answered 503: bounded too, or a flood of them
    /// would hold the descriptors the bound is there to save.
    refusing: Arc<Semaphore>,
}

impl ConnectionGuard {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            served: Arc::new(Semaphore::new(max)),
            refusing: Arc::new(Semaphore::new(max)),
        }
    }

    /// Serves `stream` with `service` on this thread (`spawn_local`), or
    /// refuses it if `max` connections are already served.
    pub fn handle<S>(&self, stream: TcpStream, service: S)
    where
        S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>
            + 'static,
        S::Future: 'static,
    {
        if let Ok(permit) = self.served.clone().try_acquire_owned() {
            tokio::task::spawn_local(async move {
                serve_with_idle_limit(stream, service).await;
                drop(permit);
            });
        } else if let Ok(permit) = self.refusing.clone().try_acquire_owned() {
            let max = self.max;
            tokio::task::spawn_local(async move {
                refuse(stream, max).await;
                drop(permit);
            });
        }
        // Else the stream drops here: closed without a word.
    }
}

async fn serve_with_idle_limit<S>(stream: TcpStream, service: S)
where
    S: Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    let last = Rc::new(Cell::new(Instant::now()));
    let io = TokioIo::new(Tracked {
        inner: stream,
        last: last.clone(),
    });
    // A request being answered is not idle time: a pprof profile holds its
    // response for the seconds it asked for, with no traffic meanwhile.
    let answering = Rc::new(Cell::new(0usize));
    let service = Rc::new(service);
    let counted = {
        let (answering, last) = (answering.clone(), last.clone());
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let (answering, last, service) = (answering.clone(), last.clone(), service.clone());
            answering.set(answering.get() + 1);
            async move {
                let response = service.call(req).await;
                answering.set(answering.get() - 1);
                last.set(Instant::now());
                response
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let conn = builder.serve_connection(io, counted);
    tokio::pin!(conn);
    loop {
        let deadline = last.get() + IDLE_TIMEOUT;
        tokio::select! {
            _ = &mut conn => return,
            _ = tokio::time::sleep_until(deadline.into()) => {
                if answering.get() > 0 {
                    last.set(Instant::now());
                } else if last.get() + IDLE_TIMEOUT <= Instant::now() {
                    // Dropping the connection closes the socket.
                    return;
                }
            }
        }
    }
}

/// Answers 503 to one request and closes, within `REFUSE_TIMEOUT`.
async fn refuse(stream: TcpStream, max: usize) {
    let service = service_fn(move |_req: Request<Incoming>| async move {
        let body = format!(
            "innoprof: {max} connections already open (serve --max-connections); retry later\n"
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

/// A stream that notes when it last moved a byte either way.
struct Tracked {
    inner: TcpStream,
    last: Rc<Cell<Instant>>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last.set(Instant::now());
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.last.set(Instant::now());
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
