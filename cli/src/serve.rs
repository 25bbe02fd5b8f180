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
use innoprof::discover::Instance;
use innoprof::export::check_listen_address;
use innoprof::export::prometheus::{
    Exporter, ExporterOptions, CONTENT_TYPE, DEFAULT_CALLSITE_LIMIT,
};
use innoprof::live::LiveView;
use innoprof::record::{Plan, RecordOptions, Recorder};
use innoprof::target::{Liveness, Target};
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
    /// innoprof_finding{rule,severity} (1 while the last window raised it), whole at /findings.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::parse_interval)]
    pub findings_window: Duration,
    #[command(flatten)]
    pub state: crate::state_args::StateArgs,
    /// Exit (status 3) when the server exits. Without it serve waits for the
    /// same server (the same datadir) to start again, and attaches to it.
    #[arg(long)]
    pub exit_with_target: bool,
}

/// Pause after a failed accept(2): out of descriptors or memory, the next
/// accept fails the same way at once, and a busy loop would starve the
/// governor and the liveness check.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

struct Live {
    /// None while the server is down and serve waits for it.
    run: Option<Run>,
    /// Kept across the server's restarts: its series carry on.
    exporter: Exporter,
    /// The server's own state, snapshotted once per findings window.
    state: Option<innoprof::server_state::StateWatcher>,
    /// The last window's findings, served whole at /findings.
    findings: Vec<innoprof::findings::Finding>,
    /// An on-CPU profile is being taken for /debug/pprof/profile (one at
    /// a time: each is a sampler of its own on every CPU).
    profiling: bool,
}

/// The probes on one run of the server (one process).
struct Run {
    recorder: Recorder,
    /// Reads the counters per findings window.
    view: LiveView,
}

/// The answer while the server is down.
fn server_down() -> Response<Full<Bytes>> {
    reply(
        StatusCode::SERVICE_UNAVAILABLE,
        TEXT,
        "the server is not running; serve waits for it to start again\n",
    )
}

/// Clears `profiling` however the request ends (answered, or dropped by a
/// client that went away mid-profile: the profiler is dropped with it).
struct ProfilingSlot(Shared);

impl Drop for ProfilingSlot {
    fn drop(&mut self) {
        self.0.borrow_mut().profiling = false;
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .body(Full::new(body.into()))
        .expect("static response parts")
}

/// `/debug/pprof/profile?seconds=N`: the target's on-CPU stacks over the
/// next N seconds, gzipped pprof (see innoprof::export::pprof_http).
async fn pprof_profile(live: Shared, query: Option<&str>) -> Response<Full<Bytes>> {
    use innoprof::export::pprof_http::{requested_seconds, PendingProfile};
    let text = |status: StatusCode, body: String| reply(status, TEXT, body + "\n");
    let seconds = match requested_seconds(query) {
        Ok(s) => s,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (pending, pid) = {
        let mut l = live.borrow_mut();
        let Some(pid) = l.run.as_ref().map(|r| r.recorder.target().pid) else {
            return server_down();
        };
        if l.profiling {
            return text(
                StatusCode::CONFLICT,
                "a profile is being taken already; try again when it is done".into(),
            );
        }
        match PendingProfile::start(pid) {
            Ok(p) => {
                l.profiling = true;
                (p, pid)
            }
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, innoprof::error_chain(&e)),
        }
    };
    let _slot = ProfilingSlot(live.clone());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let l = live.borrow();
    // The server restarted meanwhile: its samples are of the old run.
    let Some(run) = l.run.as_ref().filter(|r| r.recorder.target().pid == pid) else {
        return server_down();
    };
    match pending.finish(run.recorder.plan()) {
        Ok(gz) => Response::builder()
            .status(StatusCode::OK)
            .header("Content-Type", "application/octet-stream")
            .header("Content-Disposition", "attachment; filename=\"profile\"")
            .body(Full::new(Bytes::from(gz)))
            .expect("static response parts"),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, innoprof::error_chain(&e)),
    }
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
    // A server is followed across restarts by its datadir; a process of
    // another name (--force) is not a server instance, and ends serve.
    let instance = if args.exit_with_target || !plan.target.is_server() {
        None
    } else {
        Some(Instance::of(plan.target.pid)?)
    };
    let recorder = Recorder::start(plan, false)?;
    let export_opts = ExporterOptions {
        callsite_limit: args.callsite_limit,
        commit: env!("INNOPROF_GIT_COMMIT").to_string(),
    };
    let exporter = Exporter::for_recorder(&recorder, export_opts.clone());
    let mut target = recorder.target().clone();
    eprintln!(
        "innoprof: attached {} uprobes to {} (pid {}, {}); serving http://{}/metrics",
        recorder.attached_links(),
        target.exe.display(),
        target.pid,
        recorder.plan().server,
        listener.local_addr().unwrap_or(args.listen)
    );
    let view = LiveView::new(&recorder)?;
    let state = args.state.watcher(target.pid, args.findings_window);
    let live: Shared = Rc::new(RefCell::new(Live {
        run: Some(Run { recorder, view }),
        exporter,
        state,
        findings: Vec::new(),
        profiling: false,
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
    let mut follower = instance.map(|instance| Follower {
        instance,
        down_since: None,
        last_failure: None,
    });
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
            _ = tick.tick() => if let Some(run) = &mut live.borrow_mut().run {
                run.recorder.govern();
            },
            _ = findings_tick.tick() => {
                let Live { run, exporter, state, findings, .. } = &mut *live.borrow_mut();
                let Some(Run { recorder, view }) = run else { continue };
                match view.advance(recorder) {
                    Ok((before, now)) => {
                        let window = innoprof::findings::window::summary(
                            recorder.plan(),
                            view.probes(),
                            &before,
                            &now,
                            state.as_ref().and_then(|s| s.latest()),
                        );
                        exporter.set_findings(&window.findings);
                        *findings = window.findings;
                    }
                    Err(e) => eprintln!(
                        "innoprof: findings not evaluated this window: {}",
                        innoprof::error_chain(&e)
                    ),
                }
            }
            _ = alive_check.tick() => {
                if let Some(f) = follower.as_mut().filter(|f| f.down_since.is_some()) {
                    if let Some(run) = f.look_again(&opts) {
                        let mut l = live.borrow_mut();
                        let mut fresh = Exporter::for_recorder(&run.recorder, export_opts.clone());
                        fresh.carry_on_from(&l.exporter);
                        l.exporter = fresh;
                        target = run.recorder.target().clone();
                        l.state = args.state.watcher(target.pid, args.findings_window);
                        l.run = Some(run);
                    }
                    continue;
                }
                match target.liveness() {
                Liveness::Alive => check_failing = false,
                Liveness::Gone => match follower.as_mut() {
                    Some(f) => f.went_down(&mut live.borrow_mut(), &target),
                    None => {
                        eprintln!("innoprof: pid {} exited; detaching", target.pid);
                        break ExitCode::from(EXIT_TARGET_EXITED);
                    }
                },
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
                }
            }
        }
    };
    // Connection tasks may still hold the state: detach explicitly.
    if let Some(run) = &mut live.borrow_mut().run {
        run.recorder.detach_probes();
        eprintln!("innoprof: probes detached");
    }
    Ok(code)
}

/// Follows one server instance (its datadir) across restarts.
struct Follower {
    instance: Instance,
    /// Set while the server is down.
    down_since: Option<std::time::Instant>,
    /// The last failure to attach to the new run (said once).
    last_failure: Option<String>,
}

impl Follower {
    /// The server exited: read its counters one last time, detach, wait.
    fn went_down(&mut self, live: &mut Live, target: &Target) {
        let Some(mut run) = live.run.take() else {
            return;
        };
        if let Err(e) = live.exporter.retire(&run.recorder) {
            eprintln!(
                "innoprof: the last counts of pid {} are lost: {}",
                target.pid,
                innoprof::error_chain(&e)
            );
        }
        run.recorder.detach_probes();
        live.state = None;
        live.findings.clear();
        self.down_since = Some(std::time::Instant::now());
        eprintln!(
            "innoprof: pid {} exited; probes detached; waiting for the server in {} to start again",
            target.pid,
            self.instance.datadir.display()
        );
    }

    /// The instance's new run, attached, once it has started (None while
    /// it has not, or cannot be attached to yet: tried again next time).
    fn look_again(&mut self, opts: &RecordOptions) -> Option<Run> {
        let started = match self.instance.running() {
            Ok(found) => found?,
            Err(e) => {
                self.say_once(format!(
                    "cannot look for the server: {}",
                    innoprof::error_chain(&e)
                ));
                return None;
            }
        };
        let opts = RecordOptions {
            pid: started.pid,
            ..opts.clone()
        };
        match attach_again(&opts) {
            Ok(run) => {
                let down = self
                    .down_since
                    .take()
                    .map(|t| t.elapsed())
                    .unwrap_or_default();
                self.last_failure = None;
                let target = run.recorder.target();
                eprintln!(
                    "innoprof: the server in {} is back as pid {} after {:.1} s down; attached {} \
                     uprobes to {} ({})",
                    self.instance.datadir.display(),
                    target.pid,
                    down.as_secs_f64(),
                    run.recorder.attached_links(),
                    target.exe.display(),
                    run.recorder.plan().server,
                );
                Some(run)
            }
            Err(e) => {
                self.say_once(format!(
                    "cannot attach to pid {} yet: {e:#}; retrying",
                    started.pid
                ));
                None
            }
        }
    }

    fn say_once(&mut self, message: String) {
        if self.last_failure.as_ref() != Some(&message) {
            eprintln!("innoprof: {message}");
            self.last_failure = Some(message);
        }
    }
}

/// Plans and attaches the probes to a restarted server (its binary may
/// have been upgraded: everything is resolved anew).
fn attach_again(opts: &RecordOptions) -> Result<Run> {
    let plan = Plan::build(opts)?;
    crate::warn_unattached(&plan);
    let recorder = Recorder::start(plan, false)?;
    let view = LiveView::new(&recorder)?;
    Ok(Run { recorder, view })
}

async fn respond(
    live: Shared,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == Method::GET && req.uri().path() == "/debug/pprof/profile" {
        return Ok(pprof_profile(live, req.uri().query()).await);
    }
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let live = &mut *live.borrow_mut();
            let scraped = match &live.run {
                Some(run) => live.exporter.scrape(&run.recorder),
                None => live.exporter.scrape_while_down(),
            };
            match scraped {
                Ok(body) => reply(StatusCode::OK, CONTENT_TYPE, body),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    format!("{}\n", innoprof::error_chain(&e)),
                ),
            }
        }
        // The last window's findings with their titles, evidence and next
        // steps (the metric carries only rule and severity).
        (&Method::GET, "/findings") => reply(
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&live.borrow().findings).unwrap_or_else(|_| "[]".into())
                + "\n",
        ),
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            TEXT,
            "innoprof exporter: see /metrics, /findings (the last window's findings, JSON) and \
             /debug/pprof/profile?seconds=N (on-CPU pprof)\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found: see /metrics\n"),
    })
}
