//! `innoprof serve --pid PID` (or `--all`): keeps the probes attached and
//! serves the live counters at `/metrics` for Prometheus, following each
//! server across its restarts. The metrics are built in
//! the library (`innoprof::export::prometheus`); this is the HTTP wiring:
//! hyper's HTTP/1 server on tokio, one connection task each, on this
//! thread (the BPF handles stay single-threaded).

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use innoprof::export::check_listen_address;
use innoprof::export::prometheus::{
    render, Exporter, ExporterOptions, Scrape, CONTENT_TYPE, DEFAULT_CALLSITE_LIMIT,
};
use innoprof::live::LiveView;
use innoprof::record::ready::Notifier;
use innoprof::record::{RecordOptions, Recorder, RecordingPlan};
use innoprof::target::discover::{Instance, InstanceKey};
use innoprof::target::{Liveness, Target};

use crate::clock::{Clock, Event, Signals};
use crate::http_guard::{ConnectionGuard, Limits, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_PER_PEER};
use crate::listen::{Accepted, AuthToken, ListenAddr, Listener};
use crate::pid_arg::PidArg;
use crate::probe_args::ProbeArgs;
use crate::EXIT_TARGET_EXITED;

#[derive(Args)]
#[command(after_help = crate::AFTER_HELP)]
pub struct ServeArgs {
    #[command(flatten)]
    pub pid: PidArg,
    /// Watch every mysqld/mariadbd on this host, and each that starts later, each under
    /// its own --max-overhead budget; every series is labelled server="DATADIR".
    #[arg(long, conflicts_with_all = ["pid", "force", "exit_with_target", "mysql_socket"])]
    pub all: bool,
    /// Address to serve on: HOST:PORT (:PORT for every interface, with --listen-any), or
    /// unix:PATH for a unix socket created mode 0600,
    /// owned by root (each local user reaches a loopback port; a unix socket only whom
    /// root lets in, each known by uid).
    #[arg(long, default_value = "127.0.0.1:9707", value_parser = crate::listen::parse_listen)]
    pub listen: ListenAddr,
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
    /// HTTP connections served at once. Past it (or past --max-connections-per-peer) a
    /// new client is served and the longest idle connection of the peer holding most is
    /// closed; only when all are answering is it refused (503). Each client must send its
    /// request headers within 2 s and complete a request within 10 s.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_connections: u32,
    /// HTTP connections one peer holds at once: a TCP peer by address (every local user is
    /// 127.0.0.1), a unix socket peer by uid.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_PER_PEER,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_connections_per_peer: u32,
    /// Require `Authorization: Bearer TOKEN` on /debug/pprof/* and /findings, TOKEN being
    /// this file's first line: a regular file of root's that others cannot read (chmod 600).
    /// /metrics stays open (Prometheus scrapes it).
    #[arg(long, value_name = "PATH")]
    pub auth_token_file: Option<PathBuf>,
    /// Serve the statements quoted in /findings as the server reported them. By default
    /// their literals are replaced by `?` (they may be data the reader has no right to).
    #[arg(long)]
    pub raw_statements: bool,
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
    #[command(flatten)]
    pub ready: crate::ready_args::ReadyArgs,
    /// Do not tie client connections' hits to their statements (the THD reads at each
    /// connection hit, ~0.1 µs each, and the statement maps): no
    /// innoprof_statement_* series.
    #[arg(long)]
    pub no_statements: bool,
}

/// Pause after a failed accept(2): out of descriptors or memory, the next
/// accept fails the same way at once, and a busy loop would starve the
/// governor and the liveness check.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// With `--all`: how often the host is searched for servers started since.
const DISCOVER_EVERY: Duration = Duration::from_secs(1);
/// With `--all`: the age at which a new server process is taken (see
/// `discover_new`).
const SETTLE: Duration = Duration::from_secs(1);

struct Live {
    /// One per server instance (one without `--all`).
    servers: Vec<Watched>,
    /// `--all`: several servers, series labelled by server.
    all: bool,
    commit: String,
    /// An on-CPU profile is being taken for /debug/pprof/profile (one at
    /// a time: each is a sampler of its own on every CPU).
    profiling: bool,
    /// Set while a waits profile is taken (one at a time).
    waiting: bool,
}

/// One server instance and what serve keeps of it.
struct Watched {
    /// None while the server is down and serve waits for it.
    run: Option<Run>,
    /// Kept across the server's restarts: its series carry on.
    exporter: Exporter,
    /// The server's own state, snapshotted once per findings window.
    state: Option<innoprof::server_state::StateWatcher>,
    /// The last window's findings, served whole at /findings.
    findings: Vec<innoprof::model::finding::Finding>,
    /// The process watched (the one that exited, while down).
    target: Target,
    /// Follows it across restarts (None: a `--force` target, or
    /// `--exit-with-target`: its exit ends serve).
    follower: Option<Follower>,
    /// A liveness check failed (said once per streak).
    check_failing: bool,
}

/// The probes on one run of the server (one process).
struct Run {
    /// This run among all serve started: when the runs change, the
    /// governors' alarms are taken again.
    serial: u64,
    recorder: Recorder,
    /// Reads the counters per findings window.
    view: LiveView,
}

/// What every server is watched with.
struct Setup {
    opts: RecordOptions,
    export: ExporterOptions,
    state: crate::state_args::StateArgs,
    findings_window: Duration,
    all: bool,
}

impl Setup {
    /// Attaches to `pid` and starts watching it; `follow`: across restarts.
    /// `watched`: the servers watched already, whose series must stay
    /// apart from this one's.
    fn watch(&self, pid: u32, follow: bool, watched: &[Watched]) -> Result<Watched> {
        let opts = self.opts.for_pid(pid);
        let plan = planned(&opts)?;
        // A server is followed by its datadir; a process of another name
        // (--force) is no server instance, and its exit ends serve.
        let instance = if follow && plan.target.is_server() {
            Some(Instance::of(pid)?)
        } else {
            None
        };
        let run = Run::start(plan)?;
        let export = ExporterOptions {
            instance: match (&instance, self.all) {
                (Some(i), true) => instance_labels(i, &run.recorder.target().placement, watched),
                _ => Vec::new(),
            },
            ..self.export.clone()
        };
        let exporter = Exporter::for_recorder(&run.recorder, export);
        let target = run.recorder.target().clone();
        release_freed_memory();
        eprintln!(
            "innoprof: attached {} uprobes to {} (pid {}, {}){}",
            run.recorder.attached_links(),
            shown(&target.exe),
            target.pid,
            run.recorder.plan().server,
            where_runs(&target),
        );
        Ok(Watched {
            state: self
                .state
                .watcher(target.pid, self.findings_window, &self.opts.trust),
            run: Some(run),
            exporter,
            findings: Vec::new(),
            target,
            follower: instance.map(|instance| Follower {
                instance,
                down_since: None,
                last_failure: None,
                earlier: None,
            }),
            check_failing: false,
        })
    }
}

/// The labels of an instance's series under `--all`: `server` (its datadir
/// as it sees it), and where it runs, `cgroup` and `container` (each left
/// out when unknown; already bounded and plain, see
/// `innoprof::target::placement`). Two servers alike in all three (the
/// same datadir path in two mount namespaces of one cgroup) are told apart
/// by the datadir's inode in `server`, which is what the instance is.
fn instance_labels(
    instance: &Instance,
    placement: &innoprof::target::placement::Placement,
    watched: &[Watched],
) -> Vec<(&'static str, String)> {
    let mut labels = vec![("server", instance.datadir.display().to_string())];
    labels.extend(placement.cgroup.clone().map(|c| ("cgroup", c)));
    labels.extend(placement.container_id.clone().map(|c| ("container", c)));
    if watched
        .iter()
        .any(|w| w.exporter.options().instance == labels)
    {
        labels[0].1 = format!("{} (inode {})", labels[0].1, instance.key.ino);
    }
    labels
}

/// `, in container ID (cgroup PATH)` for a log line, or nothing.
fn where_runs(target: &Target) -> String {
    target
        .placement
        .label()
        .map(|l| format!(", in {l}"))
        .unwrap_or_default()
}

/// The probes resolved for `opts.pid`; those that cannot be attached are
/// said on stderr.
fn planned(opts: &RecordOptions) -> Result<RecordingPlan> {
    let plan = RecordingPlan::build(opts)?;
    crate::warn_unattached(&plan);
    Ok(plan)
}

/// Hands the heap pages freed since back to the kernel. Attaching
/// resolves the server anew (its ELF and DWARF for latch layouts and
/// in-memory counters, libbpf's BTF): tens of MiB allocated and freed
/// within a second, which glibc keeps resident, so each restart left serve
/// a few MiB larger (24.7 to 26.8 MiB at the first of four restarts under
/// load). Between restarts scrapes, findings windows and their SQL leave
/// freed pages too (a creep of ~0.5 MiB over 3 minutes that levelled off):
/// trimmed once per findings window as well. `malloc_trim` returns the free
/// pages of every arena (well under a millisecond on serve's heap); live
/// data is untouched, so a leak would still show.
fn release_freed_memory() {
    // SAFETY: malloc_trim only releases memory glibc holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keeps glibc's mmap threshold at its default (128 KiB) for the life of
/// serve instead of letting it adapt. Adapting, it rises to the size of
/// the largest mapped block freed (the SQL connection's two 4 MiB
/// buffers, dropped at each login), after which those buffers come from
/// an arena's recycled memory: pages an earlier buffer or a restart's
/// resolution already touched stay resident while the connection lives
/// (+3 to +6 MiB after a restart in a 15-minute run on MariaDB 10.2.11,
/// `malloc_stats`: one arena 8.7 MB in use). Mapped afresh, a buffer
/// brings in only the pages its reads touch and is unmapped when freed.
/// Serve makes few large allocations, so the extra mmap calls cost
/// nothing measurable.
///
/// And one arena for every thread. glibc gives a thread that finds every
/// arena busy a new one (up to 8 per core), and serve's short-lived
/// threads overlap at each restart (the new SQL watcher while the old one
/// is still waking up to stop, calibration, the detach thread): a
/// 15-minute run grew two new arenas and the SQL thread's own by ~90 KiB,
/// each keeping its fragments resident, none of it shrinking (smaps, per
/// mapping). Serve's threads allocate little and rarely at once; one
/// arena costs them nothing measurable and keeps one heap to trim.
fn tune_allocator() {
    // SAFETY: mallopt only changes glibc's allocation policy; setting
    // M_MMAP_THRESHOLD also turns its dynamic adjustment off.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Drops the server binary's pages from innoprof's mapping of it, at each
/// scrape. The kernel used to fault them in: a process that has held a
/// uprobe has every mapping of a probed binary visited at each unregister
/// (0.25-0.6 MiB after a restart or a governor cut on MariaDB 10.2.11),
/// which the hit-cost calibration caused until it moved to a child
/// ([`innoprof::cost::calibrate::Calibrator::Child`]). What serve's own reads
/// bring in (naming stacks for /debug/pprof, call sites) is released here
/// still; the page cache keeps it, and an madvise over a mapping with
/// almost nothing resident costs microseconds.
fn release_binary_pages(run: &Run) {
    run.recorder.plan().image.release_pages();
}

impl Run {
    fn start(plan: RecordingPlan) -> Result<Self> {
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut recorder = Recorder::start(plan, innoprof::record::StackCapture::OnDemand)?;
        // Days of connections coming and going: exited threads' rows leave the map.
        recorder.fold_exited_threads();
        let view = LiveView::new(&recorder)?;
        Ok(Self {
            serial: STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            recorder,
            view,
        })
    }
}

impl Watched {
    /// Checks the server is still there, follows it when it went or came
    /// back; Err(exit code) when its exit ends serve.
    fn check(&mut self, setup: &Setup) -> Result<(), ExitCode> {
        if let Some(f) = self.follower.as_mut().filter(|f| f.down_since.is_some()) {
            if let Some(run) = f.look_again(&setup.opts) {
                let mut fresh = Exporter::for_recorder(&run.recorder, self.exporter.options());
                fresh.carry_on_from(&self.exporter);
                self.exporter = fresh;
                self.target = run.recorder.target().clone();
                self.state =
                    setup
                        .state
                        .watcher(self.target.pid, setup.findings_window, &setup.opts.trust);
                self.run = Some(run);
                release_freed_memory();
            }
            return Ok(());
        }
        match self.target.liveness() {
            Liveness::Alive => self.check_failing = false,
            Liveness::Gone => {
                if self.follower.is_none() {
                    eprintln!("innoprof: pid {} exited; detaching", self.target.pid);
                    return Err(ExitCode::from(EXIT_TARGET_EXITED));
                }
                self.went_down();
            }
            // Our failure (out of descriptors, say), not the target's.
            Liveness::Unknown(e) => {
                if !self.check_failing {
                    eprintln!(
                        "innoprof: cannot check pid {} ({e}); still serving",
                        self.target.pid
                    );
                    self.check_failing = true;
                }
            }
        }
        Ok(())
    }

    /// The server exited: read its counters one last time, detach, wait.
    fn went_down(&mut self) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        if let Err(e) = self.exporter.retire(&mut run.recorder) {
            eprintln!(
                "innoprof: the last counts of pid {} are lost: {}",
                self.target.pid,
                innoprof::error_chain(&e)
            );
        }
        run.recorder.detach_probes();
        let plan = run.recorder.into_plan();
        if let Some(f) = &mut self.follower {
            f.earlier = Some(plan);
        }
        release_freed_memory();
        self.state = None;
        self.findings.clear();
        if let Some(f) = &mut self.follower {
            f.down_since = Some(std::time::Instant::now());
            eprintln!(
                "innoprof: pid {} exited; probes detached; waiting for the server in {} to \
                 start again",
                self.target.pid,
                shown(&f.instance.datadir)
            );
        }
    }

    /// Evaluates the findings rules over the window since the last call;
    /// statements are fingerprinted unless `raw_statements`.
    fn findings_window(&mut self, raw_statements: bool) {
        let Some(Run { recorder, view, .. }) = &mut self.run else {
            return;
        };
        match view.advance(recorder) {
            Ok((before, now)) => {
                let window = innoprof::live::findings_window::summary(
                    recorder.plan(),
                    view.probes(),
                    &before,
                    &now,
                    self.state.as_ref().and_then(|s| s.latest()).map(|state| {
                        if raw_statements {
                            state
                        } else {
                            state.fingerprinted()
                        }
                    }),
                );
                self.exporter.set_findings(&window.findings);
                self.findings = window.findings;
            }
            Err(e) => eprintln!(
                "innoprof: findings not evaluated this window: {}",
                innoprof::error_chain(&e)
            ),
        }
    }

    fn read(&mut self) -> Result<Scrape, innoprof::export::prometheus::ExportError> {
        match &mut self.run {
            Some(run) => {
                release_binary_pages(run);
                self.exporter.read(&mut run.recorder)
            }
            None => Ok(self.exporter.read_while_down()),
        }
    }

    fn datadir(&self) -> Option<&std::path::Path> {
        self.follower.as_ref().map(|f| f.instance.datadir.as_path())
    }

    /// The instance followed, by its identity (not its path).
    fn instance_key(&self) -> Option<InstanceKey> {
        self.follower.as_ref().map(|f| f.instance.key)
    }
}

/// Clears `profiling` however the request ends (answered, or dropped by a
/// client that went away mid-profile: the profiler is dropped with it).
struct ProfilingSlot(Shared);

impl Drop for ProfilingSlot {
    fn drop(&mut self) {
        self.0.borrow_mut().profiling = false;
    }
}

/// Clears `waiting` however the request ends. A window left open by a
/// client that went away closes itself past its deadline (see
/// `Recorder::govern`).
struct WaitingSlot(Shared);

impl Drop for WaitingSlot {
    fn drop(&mut self) {
        self.0.borrow_mut().waiting = false;
    }
}

/// The pid a pprof request is for: `pid=` among the running servers, or
/// the only one running; else the answer to give.
fn chosen_server(live: &Live, wanted: Option<u32>) -> Result<u32, Box<Response<Full<Bytes>>>> {
    let text = |status: StatusCode, body: String| reply(status, TEXT, body + "\n");
    let running: Vec<u32> = live
        .servers
        .iter()
        .filter(|w| w.run.is_some())
        .map(|w| w.target.pid)
        .collect();
    match (wanted, running.as_slice()) {
        (Some(p), _) if running.contains(&p) => Ok(p),
        (Some(p), _) => Err(Box::new(text(
            StatusCode::NOT_FOUND,
            format!("pid={p}: no server watched runs as that pid (running: {running:?})"),
        ))),
        (None, [only]) => Ok(*only),
        (None, []) => Err(Box::new(server_down())),
        (None, _) => Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            format!("several servers run: choose one with pid= (one of {running:?})"),
        ))),
    }
}

/// The run of the server with `pid`, if it still runs.
fn run_of(live: &mut Live, pid: u32) -> Option<&mut Run> {
    live.servers
        .iter_mut()
        .filter_map(|w| w.run.as_mut())
        .find(|r| r.recorder.target().pid == pid)
}

fn gzipped_profile(gz: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "application/octet-stream")
        .header("Content-Disposition", "attachment; filename=\"profile\"")
        .body(Full::new(Bytes::from(gz)))
        .expect("static response parts")
}

/// `/debug/pprof/waits?seconds=N[&probe=NAME…][&pid=P]`: the probes' wait
/// time and calls by stack over the next N seconds, gzipped pprof. Between
/// requests serve takes no stacks; the asked probes take them for the
/// window only (see `StackCapture::OnDemand`).
async fn pprof_waits(live: Shared, query: Option<&str>) -> Response<Full<Bytes>> {
    use innoprof::export::pprof_http::{
        now_unix_ms, requested_pid, requested_probes, requested_seconds, waits_gz,
    };
    let text = |status: StatusCode, body: String| reply(status, TEXT, body + "\n");
    let (seconds, wanted) = match (requested_seconds(query), requested_pid(query)) {
        (Ok(s), Ok(p)) => (s, p),
        (Err(e), _) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        (_, Err(e)) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (window, pid, started_ms) = {
        let l = &mut *live.borrow_mut();
        let pid = match chosen_server(l, wanted) {
            Ok(p) => p,
            Err(answer) => return *answer,
        };
        if l.waiting {
            return text(
                StatusCode::CONFLICT,
                "a waits profile is being taken already; try again when it is done".into(),
            );
        }
        let run = run_of(l, pid).expect("chosen among the running");
        let names = requested_probes(query);
        let attached: Vec<String> = run
            .recorder
            .attached_probes()
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut probes = Vec::new();
        for name in &names {
            match run.recorder.probe_index(name) {
                Some(i) => probes.push(i),
                None => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "probe={name}: not attached here (attached: {})",
                            attached.join(", ")
                        ),
                    )
                }
            }
        }
        if names.is_empty() {
            probes = run.recorder.attached_probe_ids();
        }
        if probes.is_empty() {
            return text(
                StatusCode::NOT_FOUND,
                "no probe is attached: no waits to profile".into(),
            );
        }
        let until = std::time::Instant::now() + Duration::from_secs(seconds);
        match run.recorder.open_stack_window(&probes, until) {
            Ok(Some(w)) => {
                l.waiting = true;
                (w, pid, now_unix_ms())
            }
            Ok(None) => {
                return text(
                    StatusCode::CONFLICT,
                    "the last waits window has not closed yet; try again in a few seconds".into(),
                )
            }
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, innoprof::error_chain(&e)),
        }
    };
    let _slot = WaitingSlot(live.clone());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let l = &mut *live.borrow_mut();
    // The server restarted meanwhile: its window went with its probes.
    let Some(run) = run_of(l, pid) else {
        return server_down();
    };
    let interval = run.recorder.plan().stack_interval;
    match run.recorder.close_stack_window(window) {
        Ok((sets, elapsed)) => gzipped_profile(waits_gz(&sets, started_ms, elapsed, interval)),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, innoprof::error_chain(&e)),
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer to a request for a token-protected path without the token.
fn unauthorized() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::UNAUTHORIZED)
        .header("Content-Type", TEXT)
        .header("WWW-Authenticate", "Bearer realm=\"innoprof\"")
        .body(Full::new(Bytes::from(
            "this path needs `Authorization: Bearer TOKEN` (serve --auth-token-file)\n",
        )))
        .expect("static response parts")
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .body(Full::new(body.into()))
        .expect("static response parts")
}

/// The answer while no server runs.
fn server_down() -> Response<Full<Bytes>> {
    reply(
        StatusCode::SERVICE_UNAVAILABLE,
        TEXT,
        "the server is not running; serve waits for it to start again\n",
    )
}

/// `/debug/pprof/profile?seconds=N[&pid=P]`: the target's on-CPU stacks
/// over the next N seconds, gzipped pprof (see
/// innoprof::export::pprof_http). `pid` chooses among several servers.
async fn pprof_profile(live: Shared, query: Option<&str>) -> Response<Full<Bytes>> {
    use innoprof::export::pprof_http::{requested_pid, requested_seconds, PendingProfile};
    let text = |status: StatusCode, body: String| reply(status, TEXT, body + "\n");
    let (seconds, wanted) = match (requested_seconds(query), requested_pid(query)) {
        (Ok(s), Ok(p)) => (s, p),
        (Err(e), _) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        (_, Err(e)) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (pending, pid) = {
        let mut l = live.borrow_mut();
        let pid = match chosen_server(&l, wanted) {
            Ok(p) => p,
            Err(answer) => return *answer,
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
    let l = &mut *live.borrow_mut();
    // The server restarted meanwhile: its samples are of the old run.
    let Some(run) = run_of(l, pid) else {
        return server_down();
    };
    match pending.finish(run.recorder.plan()) {
        Ok(gz) => gzipped_profile(gz),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, innoprof::error_chain(&e)),
    }
}

type Shared = Rc<RefCell<Live>>;

pub async fn run(args: ServeArgs) -> Result<ExitCode> {
    // Before anything else: a refused address must cost nothing.
    if let ListenAddr::Tcp(addr) = &args.listen {
        check_listen_address(*addr, args.listen_any)?;
    }
    let auth = match &args.auth_token_file {
        Some(path) => Some(Rc::new(AuthToken::read(path)?)),
        None => None,
    };
    tune_allocator();
    let mut signals = Signals::install()?;
    let mut notifier = args.ready.notifier()?;
    let commit = env!("INNOPROF_GIT_COMMIT").to_string();
    let setup = Setup::of(&args, &commit)?;
    let (listener, live, unattachable) = bind_and_attach(&args, &setup, commit).await?;
    announce_serving(&args, &listener, &live.borrow(), &mut notifier);
    // The governors decide when one asks or its alarm rings, as in record.
    let mut duties = Duties {
        setup: &setup,
        live: &live,
        runs: live.borrow().run_serials(),
        unattachable,
        raw_statements: args.raw_statements,
    };
    let mut clock = duty_clock(&mut signals, &live.borrow(), &args);
    let limits = Limits {
        max: args.max_connections as usize,
        per_peer: args.max_connections_per_peer as usize,
    };
    let code = serve_until_done(&listener, &live, auth, limits, &mut clock, &mut duties).await;
    // Connection tasks may still hold the state: detach explicitly.
    detach_all(&live);
    Ok(code)
}

impl Setup {
    /// What every server is watched with, from the command line.
    fn of(args: &ServeArgs, commit: &str) -> Result<Self> {
        Ok(Setup {
            // Counters stay raw (observed calls only go up); a duty-cycled
            // probe's rate is recovered from its attached-seconds counter.
            // Statements (innoprof_statement_*) unless --no-statements: the
            // server pays their reads at every connection hit.
            opts: crate::record_options(
                0, // each server's own, in Setup::watch
                args.force,
                &args.probe,
                args.max_overhead.governor(),
                args.pid.trust()?,
            )
            .statements(!args.no_statements),
            export: ExporterOptions {
                callsite_limit: args.callsite_limit,
                commit: commit.to_string(),
                instance: Vec::new(),
            },
            state: args.state.clone(),
            findings_window: args.findings_window,
            all: args.all,
        })
    }
}

/// Datadirs whose server could not be attached (`--all`), with why (said
/// once).
type Unattachable = HashMap<InstanceKey, String>;

/// Binds the address, then attaches to the server (`--pid`) or to every
/// one on the host (`--all`): the listener, the servers watched and those
/// that could not be attached yet.
async fn bind_and_attach(
    args: &ServeArgs,
    setup: &Setup,
    commit: String,
) -> Result<(Listener, Shared, Unattachable)> {
    // Without --pid: no server, or several, fails before anything is bound.
    let first = if args.all {
        None
    } else {
        Some(args.pid.resolve()?)
    };
    // Bound before attaching: a busy port fails with nothing attached.
    let listener = Listener::bind(&args.listen).await?;
    let mut servers = Vec::new();
    if let Some(pid) = first {
        servers.push(setup.watch(pid, !args.exit_with_target, &[])?);
    }
    let live: Shared = Rc::new(RefCell::new(Live {
        servers,
        all: args.all,
        commit,
        profiling: false,
        waiting: false,
    }));
    // --all: datadirs whose server could not be attached, with why (said once).
    let mut unattachable: Unattachable = HashMap::new();
    if args.all {
        discover_new(setup, &mut live.borrow_mut().servers, &mut unattachable);
    }
    Ok((listener, live, unattachable))
}

/// Says where /metrics is served, and that serve is ready (`--ready-fd`,
/// systemd) with the probes attached so far.
fn announce_serving(args: &ServeArgs, listener: &Listener, live: &Live, notifier: &mut Notifier) {
    let listening = listener.local(&args.listen);
    match &args.listen {
        ListenAddr::Tcp(_) => eprintln!("innoprof: serving http://{listening}/metrics"),
        ListenAddr::Unix(_) => eprintln!("innoprof: serving /metrics on {listening}"),
    }
    let ready = innoprof::record::ready::Ready::serve(
        listening,
        live.servers
            .iter()
            .filter_map(|w| w.run.as_ref())
            .map(|r| &r.recorder),
    );
    crate::ready_args::announce(notifier, &ready);
}

/// What the watch loop does besides serving connections.
#[derive(Clone, Copy)]
enum Duty {
    Govern,
    Findings,
    Discover,
    AliveCheck,
}

/// The clock of the duties: the governors on demand (their alarms), the
/// findings windows, `--all`'s search for new servers and the liveness
/// check.
fn duty_clock<'s>(signals: &'s mut Signals, live: &Live, args: &ServeArgs) -> Clock<'s, Duty> {
    let mut clock = Clock::new(signals)
        .on_demand(Duty::Govern, live.alarms())
        .every(Duty::Findings, args.findings_window);
    if args.all {
        clock = clock.every(Duty::Discover, DISCOVER_EVERY);
    }
    clock.alive_check(Duty::AliveCheck)
}

/// The watch loop: serves connections and does the duties as they come
/// due, until a signal (success) or a server's exit ends serve (its exit
/// code).
async fn serve_until_done(
    listener: &Listener,
    live: &Shared,
    auth: Option<Rc<AuthToken>>,
    limits: Limits,
    clock: &mut Clock<'_, Duty>,
    duties: &mut Duties<'_>,
) -> ExitCode {
    let mut accepting = Accepting {
        guard: ConnectionGuard::new(limits),
        accept_again: None,
        accept_failing: false,
    };
    loop {
        let resume = accepting
            .accept_again
            .unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            accepted = listener.accept(), if accepting.accept_again.is_none() => {
                accepting.took(accepted, live, &auth).await;
            }
            _ = tokio::time::sleep_until(resume), if accepting.accept_again.is_some() => {
                accepting.accept_again = None;
            }
            event = clock.next() => match event {
                // No deadline is set: serve runs until a signal.
                Event::Signal | Event::Deadline => break ExitCode::SUCCESS,
                Event::Due(duty) => {
                    if let Some(code) = duties.perform(duty, clock) {
                        break code;
                    }
                }
            },
        }
    }
}

/// Takes connections in, each to a task of its own; pauses a moment after
/// accept(2) fails.
struct Accepting {
    guard: ConnectionGuard,
    /// Set while accepting is paused after an error.
    accept_again: Option<tokio::time::Instant>,
    /// Local failures are said once per streak, not every 100 ms.
    accept_failing: bool,
}

impl Accepting {
    /// Hands an accepted connection to the guard, or pauses accepting
    /// after a failure.
    async fn took(
        &mut self,
        accepted: std::io::Result<Accepted>,
        live: &Shared,
        auth: &Option<Rc<AuthToken>>,
    ) {
        match accepted {
            Ok(accepted) => {
                self.accept_failing = false;
                let (live, auth) = (live.clone(), auth.clone());
                self.guard.handle(
                    accepted.stream,
                    accepted.peer,
                    service_fn(move |req| respond(live.clone(), auth.clone(), req)),
                );
                // Let the connection read its request before the next
                // accept: a flood of new ones must not close it (see
                // http_guard) before it had its turn.
                tokio::task::yield_now().await;
            }
            // EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED: all pass;
            // none is a reason to stop serving.
            Err(e) => {
                if !self.accept_failing {
                    eprintln!("innoprof: cannot accept connections ({e}); retrying");
                    self.accept_failing = true;
                }
                self.accept_again = Some(tokio::time::Instant::now() + ACCEPT_BACKOFF);
            }
        }
    }
}

/// What the duties work on besides the clock.
struct Duties<'a> {
    setup: &'a Setup,
    live: &'a Shared,
    /// The runs whose governor alarms the clock holds (see `watch_alarms`).
    runs: Vec<u64>,
    unattachable: Unattachable,
    raw_statements: bool,
}

impl Duties<'_> {
    /// Does a duty come due; Some(exit code) when a server's exit ends
    /// serve.
    fn perform(&mut self, duty: Duty, clock: &mut Clock<'_, Duty>) -> Option<ExitCode> {
        match duty {
            Duty::Govern => {
                for run in self
                    .live
                    .borrow_mut()
                    .servers
                    .iter_mut()
                    .filter_map(|w| w.run.as_mut())
                {
                    run.recorder.govern();
                }
                clock.due_again_at(self.live.borrow().next_govern_at());
            }
            Duty::Findings => {
                for w in &mut self.live.borrow_mut().servers {
                    w.findings_window(self.raw_statements);
                }
                release_freed_memory();
            }
            Duty::Discover => {
                discover_new(
                    self.setup,
                    &mut self.live.borrow_mut().servers,
                    &mut self.unattachable,
                );
                watch_alarms(&self.live.borrow(), &mut self.runs, clock);
            }
            Duty::AliveCheck => {
                let exit = self
                    .live
                    .borrow_mut()
                    .servers
                    .iter_mut()
                    .map(|w| w.check(self.setup))
                    .find_map(Result::err);
                if exit.is_some() {
                    return exit;
                }
                watch_alarms(&self.live.borrow(), &mut self.runs, clock);
            }
        }
        None
    }
}

/// Detaches every run's probes as serve ends.
fn detach_all(live: &Shared) {
    for run in live
        .borrow_mut()
        .servers
        .iter_mut()
        .filter_map(|w| w.run.as_mut())
    {
        run.recorder.detach_probes();
        eprintln!(
            "innoprof: probes detached from pid {}",
            run.recorder.target().pid
        );
    }
}

impl Live {
    /// The runs watched now (see [`Run::serial`]).
    fn run_serials(&self) -> Vec<u64> {
        self.servers
            .iter()
            .filter_map(|w| Some(w.run.as_ref()?.serial))
            .collect()
    }

    /// Every run's governor alarm.
    fn alarms(&self) -> Vec<std::os::fd::OwnedFd> {
        self.servers
            .iter()
            .filter_map(|w| w.run.as_ref()?.recorder.alarm_fd())
            .collect()
    }

    /// When the first governor wants to decide again; without one, a
    /// governor's tick from now (the duty still closes stack windows).
    fn next_govern_at(&self) -> tokio::time::Instant {
        self.servers
            .iter()
            .filter_map(|w| w.run.as_ref()?.recorder.next_govern_at())
            .min()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| {
                tokio::time::Instant::now()
                    + innoprof::cost::governor::GovernorConfig::default().tick
            })
    }
}

/// Takes the governors' alarms again when the runs watched changed (a
/// restart followed, a server found or gone), and looks at once.
fn watch_alarms<D: Copy>(live: &Live, runs: &mut Vec<u64>, clock: &mut Clock<'_, D>) {
    let now = live.run_serials();
    if now != *runs {
        *runs = now;
        clock.set_alarms(live.alarms());
        clock.due_again_at(tokio::time::Instant::now());
    }
}

/// `--all`: attaches to every server on the host not yet watched (a
/// watched one that is down is its follower's to find again).
fn discover_new(
    setup: &Setup,
    servers: &mut Vec<Watched>,
    unattachable: &mut HashMap<InstanceKey, String>,
) {
    let found = match innoprof::target::discover::servers() {
        Ok(found) => found,
        Err(e) => {
            eprintln!(
                "innoprof: cannot list servers: {}",
                innoprof::error_chain(&e)
            );
            return;
        }
    };
    for process in found {
        // A server enters its datadir within its first moments: one
        // younger than this may still be where it was started from.
        if innoprof::target::process_age(process.pid).is_none_or(|age| age < SETTLE) {
            continue;
        }
        let Ok(instance) = Instance::of(process.pid) else {
            continue;
        };
        if servers
            .iter()
            .any(|w| w.instance_key() == Some(instance.key))
        {
            continue;
        }
        // Another user's process under a server's name: passed over, said
        // once (Setup::watch would refuse it too, after planning).
        let attached = match setup.opts.trust.check_pid(process.pid) {
            Ok(_) => setup.watch(process.pid, true, servers),
            Err(untrusted) => Err(anyhow::Error::from(untrusted)),
        };
        match attached {
            Ok(w) => {
                unattachable.remove(&instance.key);
                eprintln!(
                    "innoprof: watching the server in {}{}",
                    shown(&instance.datadir),
                    where_runs(&w.target),
                );
                servers.push(w);
            }
            Err(e) => {
                let why = format!("{e:#}");
                if unattachable.get(&instance.key) != Some(&why) {
                    eprintln!(
                        "innoprof: cannot attach to {process} ({}): {why}; retrying",
                        shown(&instance.datadir)
                    );
                    unattachable.insert(instance.key, why);
                }
            }
        }
    }
}

/// Follows one server instance (its datadir) across restarts.
struct Follower {
    instance: Instance,
    /// Set while the server is down.
    down_since: Option<std::time::Instant>,
    /// The last failure to attach to the new run (said once).
    last_failure: Option<String>,
    /// The plan of the run that ended, reused for the next run of the same
    /// binary ([`Plan::build_again`]).
    earlier: Option<RecordingPlan>,
}

impl Follower {
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
        let opts = opts.for_pid(started.pid);
        // The same binary's resolution is reused; an upgrade (another
        // file) is resolved anew. A failed attempt resolves anew next time.
        let plan = match self.earlier {
            Some(_) => RecordingPlan::build_again(&opts, &mut self.earlier)
                .map_err(anyhow::Error::from)
                .inspect(crate::warn_unattached),
            None => planned(&opts),
        };
        let attached = plan.and_then(Run::start);
        match attached {
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
                     uprobes to {} ({}){}",
                    shown(&self.instance.datadir),
                    target.pid,
                    down.as_secs_f64(),
                    run.recorder.attached_links(),
                    shown(&target.exe),
                    run.recorder.plan().server,
                    where_runs(target),
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

async fn respond(
    live: Shared,
    auth: Option<Rc<AuthToken>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(token) = auth.filter(|_| crate::listen::needs_token(req.uri().path())) {
        let given = req.headers().get(hyper::header::AUTHORIZATION);
        if !token.admits(given.map(|v| v.as_bytes())) {
            return Ok(unauthorized());
        }
    }
    if req.method() == Method::GET && req.uri().path() == "/debug/pprof/profile" {
        return Ok(pprof_profile(live, req.uri().query()).await);
    }
    if req.method() == Method::GET && req.uri().path() == "/debug/pprof/waits" {
        return Ok(pprof_waits(live, req.uri().query()).await);
    }
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => {
            let live = &mut *live.borrow_mut();
            let scraped: Result<Vec<Scrape>, _> =
                live.servers.iter_mut().map(Watched::read).collect();
            match scraped.and_then(|s| render(s, &live.commit)) {
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
        (&Method::GET, "/findings") => {
            let live = live.borrow();
            let json = if live.all {
                // Each server's findings under its datadir.
                let all: Vec<serde_json::Value> = live
                    .servers
                    .iter()
                    .map(|w| {
                        serde_json::json!({
                            "server": w.datadir(),
                            "cgroup": w.target.placement.cgroup,
                            "container": w.target.placement.container_id,
                            "pid": w.target.pid,
                            "up": w.run.is_some(),
                            "findings": &w.findings,
                        })
                    })
                    .collect();
                serde_json::to_string_pretty(&all)
            } else {
                let none = Vec::new();
                let findings = live.servers.first().map_or(&none, |w| &w.findings);
                serde_json::to_string_pretty(findings)
            };
            reply(
                StatusCode::OK,
                "application/json",
                json.unwrap_or_else(|_| "[]".into()) + "\n",
            )
        }
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            TEXT,
            "innoprof exporter: see /metrics, /findings (the last window's findings, JSON) and \
             /debug/pprof/profile?seconds=N[&pid=P] (on-CPU pprof)\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found: see /metrics\n"),
    })
}

/// A path a target chose (its executable, its datadir), for a line on
/// stderr: control characters escaped.
fn shown(p: &std::path::Path) -> String {
    innoprof::text::printable(&p.to_string_lossy()).into_owned()
}
