//! `innoprof`: argument parsing and wiring only; the work is in the library.

mod clock;
mod cpu_args;
mod diff;
mod docs;
mod http_guard;
mod limit_args;
mod listen;
mod parse;
mod pid_arg;
mod probe_args;
mod probes;
mod ready_args;
mod report;
mod serve;
mod state_args;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use innoprof::bundle;
use innoprof::cost::governor::GovernorConfig;
use innoprof::live::timeseries::IntervalSeries;
use innoprof::model::summary::EndReason;
use innoprof::record::{RecordOptions, Recorder, RecordingPlan, StackCapture};
use innoprof::report::table;

use crate::clock::{Clock, Event, Signals};

/// Exit status when the target exited during the recording (partial output written).
pub(crate) const EXIT_TARGET_EXITED: u8 = 3;
/// Exit status when the results could not be written (disk full, output
/// directory removed); probes are detached and the table went to stdout.
pub(crate) const EXIT_OUTPUT_FAILED: u8 = 4;

/// `innoprof --version`: which source a copied binary came from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("INNOPROF_GIT_COMMIT"),
    ", built ",
    env!("INNOPROF_BUILD_DATE"),
    ")"
);

/// Shown under every command's --help: what a script or a service manager
/// needs to know before running it (a macro, so that serve's help can put
/// its endpoints above it at compile time).
macro_rules! after_help {
    () => {
        "\
Exit status:
  0  done (the recording was written, or Ctrl-C/SIGTERM ended it and it was written)
  1  error: bad input, no such server, not permitted, attach failed (one line on stderr)
  2  usage error: unknown flag, bad value, or arguments that cannot go together
  3  the server exited while attached (record writes what it had; serve waits for
     it to start again unless --exit-with-target)
  4  the results could not be written (disk full, --out removed); the table went to stdout

Privileges: root, or CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN) to load BPF and attach
uprobes and perf events, and CAP_SYS_PTRACE to read the server's /proc/PID/maps and
map_files. `innoprof probes --binary` and `report`, `diff`, `top DIR` need none.

Environment: DEBUGINFOD_URLS (space-separated servers a stripped server's missing debug
file is fetched from by build id, then kept in /var/cache/innoprof; --debuginfod URL
replaces it, --no-debuginfod fetches nothing), DEBUGINFOD_TIMEOUT (seconds per connect
and read, default 5), DEBUGINFOD_MAXTIME (seconds per fetch, default 60),
DEBUGINFOD_MAXSIZE (bytes, default 2 GiB)."
    };
}
pub(crate) const AFTER_HELP: &str = after_help!();

/// serve's endpoints, above the common part.
const SERVE_AFTER_HELP: &str = concat!(
    "\
Endpoints (GET):
  /                       what is served here
  /metrics                Prometheus text: probe calls, waits, latencies, latches, counters, findings
  /findings               the last findings window's findings, as JSON (token-guarded)
  /debug/pprof/profile    on-CPU profile for ?seconds=N, pprof protobuf (token-guarded)
  /debug/pprof/waits      wait stacks for ?seconds=N, pprof protobuf (token-guarded)
With --all, /findings lists every server and the pprof endpoints take &pid=P.
(token-guarded: behind --auth-token-file when one is given)

",
    after_help!()
);

#[derive(Parser)]
#[command(
    name = "innoprof",
    version = VERSION,
    about = "Where a live MySQL/MariaDB server waits: InnoDB latch, undo and redo latency from eBPF uprobes",
    after_help = AFTER_HELP,
    propagate_version = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Attach to a running server, record for a while, write a summary and folded stacks.
    Record(RecordArgs),
    /// What each catalog probe resolves to in a server (by PID) or a binary: symbols, addresses, cost, or why not.
    Probes(probes::ProbesArgs),
    /// Live waits (probes, latches, call sites), statements, connections and on-CPU top of a server, or the tables of a saved recording.
    Top(top::TopArgs),
    /// Compare two recordings: differential folded stacks and flame graphs, and what changed most.
    Diff(diff::DiffArgs),
    /// Rebuild report.html and summary.txt from a saved recording, or name its raw stacks here (--symbolize).
    Report(report::ReportArgs),
    /// Keep the probes attached and serve their live counters as Prometheus metrics at /metrics.
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(serve::ServeArgs),
    /// Measure what one probe hit costs on this host (what the overhead governor budgets with).
    Calibrate(CalibrateArgs),
    /// Print a shell completion script: `innoprof completions bash > /etc/bash_completion.d/innoprof`.
    Completions(docs::CompletionsArgs),
    /// Write the man pages: `innoprof manpages /usr/local/share/man/man1`.
    Manpages(docs::ManpagesArgs),
}

#[derive(Args)]
struct CalibrateArgs {
    /// Measure without stack capture (as `record --no-stacks`).
    #[arg(long)]
    no_stacks: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
#[command(after_help = AFTER_HELP)]
struct RecordArgs {
    #[command(flatten)]
    pid: pid_arg::PidArg,
    /// How long to record: seconds (30, 0.5) or with a unit (30s, 2m, 500ms).
    #[arg(short = 'd', long, default_value = "30s", value_parser = parse::recording_duration)]
    duration: Duration,
    /// Output directory, written whole at the end with OUT.tar.gz beside it
    /// (must be absent, empty, or an earlier recording, which is replaced).
    /// Default: innoprof-PID-YYYYMMDD-HHMMSS (UTC) in the current directory.
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    probe: probe_args::ProbeArgs,
    /// Profile a process that is not mysqld/mariadbd.
    #[arg(long)]
    force: bool,
    /// Do not capture stacks (cheaper; counts and latency only).
    #[arg(long, conflicts_with_all = ["max_stacks", "stack_interval"])]
    no_stacks: bool,
    /// τ of the stack sampling: past a probe's first 5 hits of each 100 ms on each CPU (always
    /// taken), about one hit per DURATION per CPU takes its stack for the count, and for the
    /// wait a wait of DURATION or more always, a shorter one in proportion to it (each weighted
    /// for the hits it stands for). Folded totals stay exact, the
    /// split between stacks is an unbiased sample. `0`: every hit's stack (dearer on hot probes).
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = humantime::parse_duration)]
    stack_interval: Duration,
    /// Measure what a probe hit costs on this host now, instead of reusing this boot's
    /// earlier measurement (kept in /run/innoprof for a day; `innoprof calibrate` refreshes it).
    #[arg(long)]
    recalibrate: bool,
    /// Do not profile CPU (on-CPU sampling is on by default; `--probes none` records CPU only).
    #[arg(long, conflicts_with_all = ["offcpu", "offcpu_min", "freq"])]
    no_cpu: bool,
    /// CPU that probe hits may cost the server, in % of one core (e.g. 1, 0.5, 5), or `off`.
    /// Probes that would cost more get their stacks sampled, then are duty-cycled (on for
    /// >= 1 s at a time); counts are what was seen, estimates carry a bound (`sampled:` lines).
    #[arg(long, default_value = "1", value_parser = parse_budget)]
    max_overhead: Budget,
    #[command(flatten)]
    cpu: cpu_args::CpuArgs,
    /// Calls and wait time per interval of this length go to timeseries.json/.csv (every 1s
    /// when not given, except with --follow); given, the server's cheap state (history list
    /// length, oldest transaction, status counters) is also read at each interval when logged
    /// in (summary.json `server_state.samples`).
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    interval: Option<Duration>,
    /// When the server exits during the recording (a restart, a crash), wait for the same
    /// instance (the mysqld/mariadbd in the same datadir, any pid or binary) to start again
    /// and record it too, until --duration ends: one bundle, counts of the seconds watched,
    /// the gaps marked (summary.json `segments`).
    #[arg(long, conflicts_with_all = ["interval", "force"])]
    follow: bool,
    /// Leave user frames unnamed (`mysqld+0x…`): the stacks' addresses, mappings and build
    /// ids go to stacks.raw.json (every recording writes it), and `innoprof report DIR
    /// --symbolize` names them later, on any host with the binaries or their debug files.
    /// Saves most of innoprof's CPU at the end. Kernel frames are still named here.
    #[arg(long, conflicts_with = "follow")]
    no_symbolize: bool,
    /// Keep one raw text of each statement (cut to 512 bytes, literals and all) in the
    /// bundle's `who` table. Without it only fingerprints are kept (literals as `?`), since
    /// bundles are attached to tickets and literals may be data.
    #[arg(long, conflicts_with = "no_statements")]
    statement_text: bool,
    /// Do not tie client connections' hits to their statements (the THD reads at each
    /// connection hit, ~0.1 µs each, and the statement maps).
    #[arg(long)]
    no_statements: bool,
    #[command(flatten)]
    limits: limit_args::LimitArgs,
    #[command(flatten)]
    state: state_args::StateArgs,
    #[command(flatten)]
    ready: ready_args::ReadyArgs,
}

/// The time series' interval when `--interval` is not given.
const DEFAULT_SERIES_INTERVAL: Duration = Duration::from_secs(1);

/// Intervals shorter than 100 ms would be mostly read jitter.
pub(crate) fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(100) {
        return Err(format!("{s} is too short; use 100ms or more"));
    }
    Ok(d)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Record(args) => record(args).await,
            Command::Top(args) => top::run(args).await,
            Command::Probes(args) => probes::run(args),
            Command::Diff(args) => diff::run(args).map(|()| ExitCode::SUCCESS),
            Command::Report(args) => report::run(args).map(|()| ExitCode::SUCCESS),
            Command::Calibrate(args) => calibrate(args),
            Command::Completions(args) => docs::completions(args).map(|()| ExitCode::SUCCESS),
            Command::Manpages(args) => docs::manpages(args).map(|()| ExitCode::SUCCESS),
            // Connection tasks share the BPF handles on this one thread.
            Command::Serve(args) => {
                tokio::task::LocalSet::new()
                    .run_until(serve::run(args))
                    .await
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "innoprof: error: {}",
                innoprof::join_causes(e.chain().map(|c| c as &dyn std::error::Error))
            );
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Exit status of a usage error, as clap exits on one it finds itself.
const EXIT_USAGE: u8 = 2;

/// A usage error clap cannot see (a combination of arguments it allows):
/// one line, exit status 2 like clap's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) &'static str);

#[derive(Clone, Copy)]
pub(crate) struct Budget(pub(crate) Option<f64>);

impl Budget {
    /// The governor for this budget (default tick and windows); None: off.
    pub(crate) fn governor(self) -> Option<GovernorConfig> {
        self.0.map(|budget_pct| GovernorConfig {
            budget_pct,
            ..GovernorConfig::default()
        })
    }
}

pub(crate) fn parse_budget(s: &str) -> Result<Budget, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(Budget(None));
    }
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage of one core (e.g. 1, 0.5, 5) or `off`"))?;
    if !(v.is_finite() && v > 0.0 && v <= 100.0) {
        return Err(format!(
            "{s}: the budget must be in (0, 100] % of one core, or `off`"
        ));
    }
    Ok(Budget(Some(v)))
}

/// The options record, serve and top all start from: the probes asked
/// for on `pid`, attached as `--trust-user` allows, under `governor`, the
/// hit cost measured in a child innoprof; each command adds its own.
pub(crate) fn record_options(
    pid: u32,
    force: bool,
    probe: &probe_args::ProbeArgs,
    governor: Option<GovernorConfig>,
    trust: innoprof::target::trust::Trust,
) -> RecordOptions {
    RecordOptions::new(pid, probe.request(), governor, own_calibrator(), trust)
        .force(force)
        .debuginfo(probe.debug_search())
}

/// Record, serve and top measure the hit cost in a child innoprof (its own
/// `calibrate --json`), so that their own process never holds a uprobe:
/// see [`innoprof::cost::calibrate::Calibrator`].
pub(crate) fn own_calibrator() -> innoprof::cost::calibrate::Calibrator {
    innoprof::cost::calibrate::Calibrator::Child("/proc/self/exe".into())
}

fn calibrate(args: CalibrateArgs) -> Result<ExitCode> {
    innoprof::target::privileges::check()?;
    innoprof::target::kernel::check()?;
    let cost = innoprof::cost::calibrate::measure_and_keep(!args.no_stacks)?.cost;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&cost)?);
    } else {
        print!("{}", innoprof::report::overhead::render_hit_cost(&cost));
    }
    Ok(ExitCode::SUCCESS)
}

/// One stderr line per requested probe that resolved to nothing, and why.
pub(crate) fn warn_unattached(plan: &RecordingPlan) {
    for p in plan
        .probes
        .iter()
        .filter(|p| p.resolution.symbols.is_empty())
    {
        eprintln!(
            "innoprof: probe {} not attached: {}",
            p.spec.name,
            p.resolution.why_unresolved()
        );
    }
}

/// `record` without `-o`: a new directory named for the target and the
/// time, as perf writes perf.data where it runs.
fn default_out(pid: u32) -> PathBuf {
    // RFC 3339 in UTC, `2026-11-23T20:41:07Z`, to `20261123-204107`.
    let stamp: String = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect();
    PathBuf::from(format!("innoprof-{pid}-{stamp}"))
}

async fn record(args: RecordArgs) -> Result<ExitCode> {
    let pid = args.pid.resolve()?;
    let out = args.out.clone().unwrap_or_else(|| default_out(pid));
    let mut opts = record_options(
        pid,
        args.force,
        &args.probe,
        args.max_overhead
            .governor()
            .map(|g| g.with_interval(args.interval)),
        args.pid.trust()?,
    )
    .stacks(!args.no_stacks, args.stack_interval)
    .cpu((!args.no_cpu).then(|| args.cpu.options()))
    .limits(args.limits.limits())
    .recalibrate(args.recalibrate)
    .symbolize(!args.no_symbolize)
    .statement_text(args.statement_text)
    .statements(!args.no_statements);
    // Signal handlers first: a Ctrl-C during attach must still detach.
    let mut signals = Signals::install()?;
    // --follow knows the server again by its datadir (its working directory).
    let instance = if args.follow {
        Some(
            innoprof::target::discover::Instance::of(pid).with_context(|| {
                format!("--follow: cannot tell which server instance pid {pid} is")
            })?,
        )
    } else {
        None
    };

    let mut notifier = args.ready.notifier()?;
    innoprof::target::own_usage::debug_phase("start");
    let plan = RecordingPlan::build(&opts)?;
    innoprof::target::own_usage::debug_phase("after plan");
    // Checked before any probe is attached, so a bad --out costs nothing.
    let prepared = bundle::prepare(&out)?;
    // Set when the first segment is attached: --duration counts from there.
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut segments = Vec::new();
    let mut plan = Some(plan);
    let end = loop {
        let (recording, end) = record_segment(
            plan.take().expect("a plan per segment"),
            &args,
            &mut deadline,
            &mut signals,
            &mut notifier,
        )
        .await?;
        segments.push(recording);
        let Some(instance) = instance.as_ref().filter(|_| end == EndReason::TargetExited) else {
            break end;
        };
        eprintln!(
            "innoprof: --follow: waiting for the server in {} to start again",
            innoprof::text::printable(&instance.datadir.to_string_lossy())
        );
        let down = std::time::Instant::now();
        let until = deadline.expect("set by the first segment");
        match wait_for_instance(instance, &mut opts, until, &mut signals).await {
            Some(next) => {
                eprintln!(
                    "innoprof: the server in {} is back as pid {} after {:.1} s down",
                    innoprof::text::printable(&instance.datadir.to_string_lossy()),
                    next.target.pid,
                    down.elapsed().as_secs_f64()
                );
                plan = Some(next);
            }
            None => break end,
        }
    };
    let recording = if args.follow {
        innoprof::record::segments::merge(segments)
    } else {
        segments.pop().expect("one segment")
    };
    // The table goes to stdout first: if the files cannot be written, the
    // numbers are still on the terminal.
    print!("{}", table::render(&recording.summary));
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let written = match bundle::write(&recording, &prepared, &argv) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("innoprof: error: {}", innoprof::error_chain(&e));
            return Ok(ExitCode::from(EXIT_OUTPUT_FAILED));
        }
    };
    innoprof::target::own_usage::debug_phase("after write");
    eprintln!(
        "innoprof: wrote {} and {}; open {}",
        written.dir.display(),
        written.tarball.display(),
        written.report.display()
    );
    Ok(if end == EndReason::TargetExited {
        ExitCode::from(EXIT_TARGET_EXITED)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--follow`: polls for the instance's next process until `deadline` or a
/// signal, and plans its probes (resolved anew: an upgrade may have
/// brought another build). None: it did not come back in time.
async fn wait_for_instance(
    instance: &innoprof::target::discover::Instance,
    opts: &mut RecordOptions,
    deadline: tokio::time::Instant,
    signals: &mut Signals,
) -> Option<RecordingPlan> {
    #[derive(Clone, Copy)]
    struct Poll;
    let mut clock = Clock::new(signals)
        .until(deadline)
        .now_and_every(Poll, Duration::from_millis(250));
    let mut said: Option<String> = None;
    // The deadline or a signal: not back in time.
    while let Event::Due(Poll) = clock.next().await {
        let Ok(Some(found)) = instance.running() else {
            continue;
        };
        opts.pid = found.pid;
        match RecordingPlan::build(opts) {
            Ok(plan) => return Some(plan),
            // Still starting (or briefly unreadable): tried again.
            Err(e) => {
                let why = innoprof::error_chain(&e);
                if said.as_deref() != Some(why.as_str()) {
                    eprintln!(
                        "innoprof: cannot attach to pid {} yet: {why}; retrying",
                        found.pid
                    );
                    said = Some(why);
                }
            }
        }
    }
    None
}

/// One server process's part of a recording: attach, record until
/// `deadline` (set here, --duration from now, by the first segment), a
/// signal or the process's exit, and name what was seen.
async fn record_segment(
    plan: RecordingPlan,
    args: &RecordArgs,
    deadline: &mut Option<tokio::time::Instant>,
    signals: &mut Signals,
    notifier: &mut innoprof::record::ready::Notifier,
) -> Result<(innoprof::record::recording::Recording, EndReason)> {
    let pid = plan.target.pid;
    warn_unattached(&plan);
    // Before attaching: its queries are not what the probes should see.
    let state = args
        .state
        .start(pid, &args.pid.trust()?)
        .sampling(args.interval);
    innoprof::target::own_usage::debug_phase("after start snapshot");
    let stacks = if args.no_stacks {
        StackCapture::Off
    } else {
        StackCapture::Always
    };
    let mut recorder = Recorder::start(plan, stacks)?;
    innoprof::target::own_usage::debug_phase("after attach");
    let deadline_at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + args.duration);
    // Waits over time by default: a look at the maps a second costs the
    // agent ~nothing and the server nothing. The server's state is read
    // per interval only when asked (--interval): that is SQL on the target.
    let series_every = args
        .interval
        .or((!args.follow).then_some(DEFAULT_SERIES_INTERVAL));
    let mut series = series_every.map(|d| IntervalSeries::for_recorder(&recorder, d));
    let target = recorder.target().clone();
    let left = announce_attached(&recorder, &target, deadline_at, notifier);
    let end = record_until_end(
        &mut recorder,
        &target,
        &mut series,
        deadline_at,
        left,
        series_every,
        signals,
    )
    .await?;
    innoprof::target::own_usage::debug_phase("after recording");
    // The window ends with the recording's clock: the end snapshot (which
    // a stopped server keeps waiting) is neither timed nor seen by the
    // probes, as the start snapshot before attaching is not.
    recorder.detach_probes();
    let state = state.finish();
    say_how_it_ended(end, target.pid, args.follow);
    finish_segment(recorder, end, state, series)
}

/// Says what was attached to which server and for how long, and tells
/// whoever waits for the recording to be under way (--ready). Returns the
/// time left until the deadline, as said.
fn announce_attached(
    recorder: &Recorder,
    target: &innoprof::target::Target,
    deadline_at: tokio::time::Instant,
    notifier: &mut innoprof::record::ready::Notifier,
) -> Duration {
    let probes = attached_probes(recorder);
    let cpu = cpu_sampling(recorder);
    for note in &recorder.plan().image.notes {
        eprintln!("innoprof: note: {}", innoprof::text::printable(note));
    }
    let left = deadline_at.saturating_duration_since(tokio::time::Instant::now());
    eprintln!(
        "innoprof: attached {probes}{cpu} to {} (pid {}, {}); recording for {}",
        innoprof::text::printable(&target.exe.to_string_lossy()),
        target.pid,
        recorder.plan().server,
        // Whole seconds (the first segment's is --duration itself).
        humantime::format_duration(if left >= Duration::from_secs(1) {
            Duration::from_secs(left.as_secs_f64().round() as u64)
        } else {
            Duration::from_millis(left.as_millis() as u64)
        })
    );
    let ready = innoprof::record::ready::Ready::record(recorder, left.as_secs_f64());
    ready_args::announce(notifier, &ready);
    left
}

/// The attach line's account of the uprobes: how many points and links,
/// how long attaching took, and whether the breakpoints reach beyond the
/// server (and why the attach fell back, where it did).
fn attached_probes(recorder: &Recorder) -> String {
    match recorder.attach_info() {
        Some(a) => format!(
            "{} probe points ({} {} links, {:.0} ms{}{})",
            a.points,
            a.links,
            a.mode,
            a.attach_ms,
            // Said where other processes of the binary pay the traps too.
            if a.pid_scoped {
                ""
            } else {
                "; breakpoints in every process of the binary: the kernel scopes links to a PID from 6.10"
            },
            a.fallback_reason
                .as_deref()
                .map(|r| format!("; {r}"))
                .unwrap_or_default()
        ),
        None => "no uprobes".to_string(),
    }
}

/// The attach line's account of the CPU profiler, if any (off-CPU time
/// takes one of its perf events, not counted with the sampling ones).
fn cpu_sampling(recorder: &Recorder) -> String {
    match recorder.plan().cpu.as_ref() {
        Some(c) if c.offcpu => format!(
            ", CPU sampling at {} Hz ({} perf events) and off-CPU time",
            c.frequency_hz,
            recorder.cpu_links() - 1
        ),
        Some(c) => format!(
            ", CPU sampling at {} Hz ({} perf events)",
            c.frequency_hz,
            recorder.cpu_links()
        ),
        None => String::new(),
    }
}

/// Records until `deadline_at`, a signal or the server's exit: the
/// governor's duty when it asks (or on its tick), the --interval samples,
/// and the progress bar over the `left` time.
async fn record_until_end(
    recorder: &mut Recorder,
    target: &innoprof::target::Target,
    series: &mut Option<IntervalSeries>,
    deadline_at: tokio::time::Instant,
    left: Duration,
    interval: Option<Duration>,
    signals: &mut Signals,
) -> Result<EndReason> {
    let bar = progress_bar(left);
    #[derive(Clone, Copy)]
    enum Duty {
        Govern,
        Sample,
    }
    let clock = Clock::new(signals).until(deadline_at);
    // With a governor, its decisions come when it asks or its alarm rings;
    // without, the duty still runs on the governor's tick (the alive check
    // rides on it).
    let mut clock = match recorder.next_govern_at() {
        Some(_) => clock.on_demand(Duty::Govern, recorder.alarm_fd()),
        None => clock.governor(Duty::Govern),
    };
    if let Some(period) = interval {
        clock = clock.every(Duty::Sample, period);
    }
    let started = std::time::Instant::now();
    let end = loop {
        match clock.next().await {
            Event::Deadline => break EndReason::Duration,
            Event::Signal => break EndReason::Interrupted,
            Event::Due(Duty::Govern) => {
                recorder.govern();
                if let Some(at) = recorder.next_govern_at() {
                    // Looked at no later than ALIVE_EVERY: the recording
                    // ends soon after the server's exit.
                    let at = tokio::time::Instant::from_std(at)
                        .min(tokio::time::Instant::now() + clock::ALIVE_EVERY);
                    clock.due_again_at(at);
                }
                if let Some(bar) = &bar {
                    bar.set_position(started.elapsed().as_millis() as u64);
                }
                // At each look (ALIVE_EVERY apart at most): the recording
                // ends soon after the server's exit.
                if !target.is_alive() {
                    break EndReason::TargetExited;
                }
            }
            Event::Due(Duty::Sample) => {
                series
                    .as_mut()
                    .expect("a series where sampled")
                    .sample(recorder)?;
            }
        }
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    Ok(end)
}

/// A progress bar over `left`, only where someone watches: indicatif draws
/// nothing to a pipe or a file, but still keeps its state at every
/// governor tick.
fn progress_bar(left: Duration) -> Option<ProgressBar> {
    std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let bar = ProgressBar::new(left.as_millis() as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} recording [{bar:30}] {elapsed}/{duration}")
                .expect("template"),
        );
        bar
    })
}

/// One line on stderr where the recording ended early, saying what
/// happens next (with --follow, a server that exited is waited for).
fn say_how_it_ended(end: EndReason, pid: u32, follow: bool) {
    match end {
        EndReason::Interrupted => {
            eprintln!("innoprof: interrupted; detaching and writing what was collected")
        }
        EndReason::TargetExited if follow => {
            eprintln!("innoprof: pid {pid} exited during the recording; naming what it showed")
        }
        EndReason::TargetExited => {
            eprintln!("innoprof: pid {pid} exited during the recording; writing what was collected")
        }
        EndReason::Duration => {}
    }
}

/// Detaches and names what the segment saw, with the server's state and
/// the --interval series added.
fn finish_segment(
    mut recorder: Recorder,
    end: EndReason,
    state: Option<innoprof::model::server_state::ServerState>,
    series: Option<IntervalSeries>,
) -> Result<(innoprof::record::recording::Recording, EndReason)> {
    let series = series.map(|s| s.finish(&mut recorder)).transpose()?;
    innoprof::target::own_usage::debug_phase("after end snapshot");
    let mut recording = recorder.finish(end)?;
    innoprof::target::own_usage::debug_phase("after finish");
    if let Some(state) = state {
        recording.add_server_state(state);
    }
    if let Some(series) = series {
        recording.summary.timeseries = Some(series.note());
        recording.timeseries = Some(series);
    }
    Ok((recording, end))
}
