//! `innoprof serve --pid PID`: keeps the probes attached and serves the
//! live counters at `/metrics` for Prometheus. The metrics are built in
//! the library (`innoprof::export::prometheus`); this is the HTTP wiring:
//! hyper's HTTP/1 server on tokio, one connection task each, on this
//! thread (the BPF handles stay single-threaded).

use std::cell::RefCell;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use innoprof::export::check_listen_address;
use innoprof::export::prometheus::{
    Exporter, ExporterOptions, CONTENT_TYPE, DEFAULT_CALLSITE_LIMIT,
};
use innoprof::live::LiveView;
use innoprof::record::{Plan, RecordOptions, Recorder};
use innoprof::target::Liveness;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::http_guard::{ConnectionGuard, DEFAULT_MAX_CONNECTIONS};
use crate::pid_arg::PidArg;
use crate::probe_args::ProbeArgs;
use crate::EXIT_TARGET_EXITED;

#[derive(Args)]
#[command(after_help = crate::AFTER_HELP)]
pub struct ServeArgs {
    #[command(flatten)]
    pub pid: PidArg,
    /// Address for the /metrics endpoint.
    #[arg(long, default_value = "127.0.0.1:9707")]
    pub listen: SocketAddr,
    /// Allow a --listen address that is not loopback.
    #[arg(long)]
    pub listen_any: bool,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Call-site labels per probe; less busy sites are summed as callsite="other".
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CALLSITE_LIMIT)]
    pub callsite_limit: usize,
    /// Profile a process that is not mysqld/mariadbd.
    #[arg(long)]
    pub force: bool,
    /// CPU that probe hits may cost the server, in % of one core (e.g. 1, 0.5, 5), or `off`.
    /// Dearer probes are duty-cycled: their counters grow only while on, and
    /// innoprof_probe_attached_seconds_total says how long that was.
    #[arg(long, default_value = "1", value_parser = crate::parse_budget)]
    pub max_overhead: crate::Budget,
    /// HTTP connections served at once; more are answered 503 and closed.
    /// Each client must send its request headers within 5 s and is closed
    /// after 30 s without traffic.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_connections: u32,
    /// Evaluate the findings rules over windows of this length and export them as
    /// innoprof_finding{rule,severity} (1 while the last window raised it).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::parse_interval)]
    pub findings_window: Duration,
}

/// Pause after a failed accept(2): out of descriptors or memory, the next
/// accept fails the same way at once, and a busy loop would starve the
/// governor and the liveness check.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Live {
    recorder: Recorder,
    exporter: Exporter,
    /// Reads the counters per findings window.
    view: LiveView,
}

type Shared = Rc<RefCell<Live>>;

pub async fn run(args: ServeArgs) -> Result<ExitCode> {
    // Before anything else: a refused address must cost nothing.
    check_listen_address(args.listen, args.listen_any)?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let opts = RecordOptions {
        pid: args.pid.resolve()?,
        force: args.force,
        probes: args.probe.request(),
        debuginfo: args.probe.debug_search(),
        capture_stacks: false,
        recalibrate: false,
        stack_interval: innoprof::attach::DEFAULT_STACK_INTERVAL,
        cpu: None,
        // Counters stay raw (observed calls only go up); a duty-cycled
        // probe's rate is recovered from its attached-seconds counter.
        governor: args.max_overhead.governor(),
        limits: Default::default(),
    };
    let plan = Plan::build(&opts)?;
    // Bound before attaching: a busy port fails with nothing attached.
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (choose another --listen)", args.listen))?;
    crate::warn_unattached(&plan);
    let recorder = Recorder::start(plan, false)?;
    let exporter = Exporter::for_recorder(
        &recorder,
        ExporterOptions {
            callsite_limit: args.callsite_limit,
        },
    );
    let target = recorder.target().clone();
    eprintln!(
        "innoprof: attached {} uprobes to {} (pid {}, {}); serving http://{}/metrics",
        recorder.attached_links(),
        target.exe.display(),
        target.pid,
        recorder.plan().server,
        listener.local_addr().unwrap_or(args.listen)
    );
    let view = LiveView::new(&recorder)?;
    let live: Shared = Rc::new(RefCell::new(Live {
        recorder,
        exporter,
        view,
    }));
    let mut findings_tick = tokio::time::interval_at(
        tokio::time::Instant::now() + args.findings_window,
        args.findings_window,
    );
    findings_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // The governor's own period (it switches probes within a second); each
    // wakeup costs the agent CPU, so no more often than that.
    let mut tick = tokio::time::interval(innoprof::governor::GovernorConfig::default().tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut alive_check = tokio::time::interval(Duration::from_millis(250));
    let guard = ConnectionGuard::new(args.max_connections as usize);
    // Set while accepting is paused after an error.
    let mut accept_again: Option<tokio::time::Instant> = None;
    // Local failures are said once per streak, not every 100 ms.
    let mut accept_failing = false;
    let mut check_failing = false;
    let code = loop {
        let resume = accept_again.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            accepted = listener.accept(), if accept_again.is_none() => match accepted {
                Ok((stream, _)) => {
                    accept_failing = false;
                    let live = live.clone();
                    guard.handle(stream, service_fn(move |req| respond(live.clone(), req)));
                }
                // EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED: all pass;
                // none is a reason to stop serving.
                Err(e) => {
                    if !accept_failing {
                        eprintln!("innoprof: cannot accept connections ({e}); retrying");
                        accept_failing = true;
                    }
                    accept_again = Some(tokio::time::Instant::now() + ACCEPT_BACKOFF);
                }
            },
            _ = tokio::time::sleep_until(resume), if accept_again.is_some() => accept_again = None,
            _ = sigint.recv() => break ExitCode::SUCCESS,
            _ = sigterm.recv() => break ExitCode::SUCCESS,
            _ = tick.tick() => live.borrow_mut().recorder.govern(),
            _ = findings_tick.tick() => {
                let Live { recorder, exporter, view } = &mut *live.borrow_mut();
                match view.advance(recorder) {
                    Ok((before, now)) => {
                        let window = innoprof::findings::window::summary(
                            recorder.plan(),
                            view.probes(),
                            &before,
                            &now,
                        );
                        exporter.set_findings(&window.findings);
                    }
                    Err(e) => eprintln!(
                        "innoprof: findings not evaluated this window: {}",
                        innoprof::error_chain(&e)
                    ),
                }
            }
            _ = alive_check.tick() => match target.liveness() {
                Liveness::Alive => check_failing = false,
                Liveness::Gone => {
                    eprintln!("innoprof: pid {} exited; detaching", target.pid);
                    break ExitCode::from(EXIT_TARGET_EXITED);
                }
                // Our failure (out of descriptors, say), not the target's.
                Liveness::Unknown(e) => {
                    if !check_failing {
                        eprintln!(
                            "innoprof: cannot check pid {} ({e}); still serving",
                            target.pid
                        );
                        check_failing = true;
                    }
                }
            },
        }
    };
    // Connection tasks may still hold the state: detach explicitly.
    live.borrow_mut().recorder.detach_probes();
    eprintln!("innoprof: probes detached");
    Ok(code)
}

async fn respond(
    live: Shared,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("Content-Type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts")
    };
    let text = "text/plain; charset=utf-8";
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let live = &mut *live.borrow_mut();
            match live.exporter.scrape(&live.recorder) {
                Ok(body) => reply(StatusCode::OK, CONTENT_TYPE, body),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    text,
                    format!("{}\n", innoprof::error_chain(&e)),
                ),
            }
        }
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            text,
            "innoprof exporter: see /metrics\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            text,
            "not found: see /metrics\n".into(),
        ),
    })
}
