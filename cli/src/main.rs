//! `innoprof`: argument parsing and wiring only; the work is in the library.

mod cpu_args;
mod diff;
mod limit_args;
mod parse;
mod probe_args;
mod probes;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use innoprof::record::{Plan, RecordOptions, Recorder};
use innoprof::report::model::EndReason;
use innoprof::report::{self, table};
use tokio::signal::unix::{signal, SignalKind};

/// Exit status when the target exited during the recording (partial output written).
pub(crate) const EXIT_TARGET_EXITED: u8 = 3;
/// Exit status when the results could not be written (disk full, output
/// directory removed); probes are detached and the table went to stdout.
pub(crate) const EXIT_OUTPUT_FAILED: u8 = 4;

#[derive(Parser)]
#[command(
    name = "innoprof",
    version,
    about = "Where a live MySQL/MariaDB server waits: InnoDB latch, undo and redo latency from eBPF uprobes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Attach to a running server, record for a while, write a summary and folded stacks.
    Record(RecordArgs),
    /// What each catalog probe resolves to in a server (by PID) or a binary: symbols, addresses, cost, or why not.
    Probes(probes::ProbesArgs),
    /// Live table of the server's hottest functions (on-CPU samples), refreshed every few seconds.
    Top(top::TopArgs),
    /// Compare two recordings: differential folded stacks and flame graphs, and what changed most.
    Diff(diff::DiffArgs),
}

#[derive(Args)]
struct RecordArgs {
    /// PID of the running mysqld/mariadbd.
    #[arg(long)]
    pid: u32,
    /// How long to record (e.g. 30s, 2m, 500ms).
    #[arg(long, default_value = "30s", value_parser = parse::recording_duration)]
    duration: Duration,
    /// Output directory (created if missing).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    probe: probe_args::ProbeArgs,
    /// Profile a process that is not mysqld/mariadbd.
    #[arg(long)]
    force: bool,
    /// Do not capture stacks (cheaper; counts and latency only).
    #[arg(long, conflicts_with = "max_stacks")]
    no_stacks: bool,
    /// Do not profile CPU (on-CPU sampling is on by default; `--probes none` records CPU only).
    #[arg(long, conflicts_with_all = ["offcpu", "offcpu_min", "freq"])]
    no_cpu: bool,
    #[command(flatten)]
    cpu: cpu_args::CpuArgs,
    #[command(flatten)]
    limits: limit_args::LimitArgs,
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
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("innoprof: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn record(args: RecordArgs) -> Result<ExitCode> {
    let opts = RecordOptions {
        pid: args.pid,
        force: args.force,
        probes: args.probe.request(),
        debuginfo: args.probe.debug_search(),
        capture_stacks: !args.no_stacks,
        cpu: (!args.no_cpu).then(|| args.cpu.options()),
        limits: args.limits.limits(),
    };
    // Signal handlers first: a Ctrl-C during attach must still detach.
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;

    let plan = Plan::build(&opts)?;
    // Checked before any probe is attached, so a bad --out costs nothing.
    report::prepare_dir(&args.out)?;
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
    let recorder = Recorder::start(plan, !args.no_stacks)?;
    let target = recorder.target().clone();
    let cpu = match recorder.plan().cpu.as_ref() {
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
    };
    eprintln!(
        "innoprof: attached {} uprobes{cpu} to {} (pid {}, {}); recording for {}",
        recorder.attached_links(),
        target.exe.display(),
        target.pid,
        recorder.plan().server,
        humantime::format_duration(args.duration)
    );

    let bar = ProgressBar::new(args.duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} recording [{bar:30}] {elapsed}/{duration}")
            .expect("template"),
    );
    let deadline = tokio::time::sleep(args.duration);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let started = std::time::Instant::now();
    let end = loop {
        tokio::select! {
            _ = &mut deadline => break EndReason::Duration,
            _ = sigint.recv() => break EndReason::Interrupted,
            _ = sigterm.recv() => break EndReason::Interrupted,
            _ = tick.tick() => {
                bar.set_position(started.elapsed().as_millis() as u64);
                if !target.is_alive() {
                    break EndReason::TargetExited;
                }
            }
        }
    };
    bar.finish_and_clear();
    match end {
        EndReason::Interrupted => {
            eprintln!("innoprof: interrupted; detaching and writing what was collected")
        }
        EndReason::TargetExited => eprintln!(
            "innoprof: pid {} exited during the recording; writing what was collected",
            target.pid
        ),
        EndReason::Duration => {}
    }

    let recording = recorder.finish(end)?;
    // The table goes to stdout first: if the files cannot be written, the
    // numbers are still on the terminal.
    print!("{}", table::render(&recording.summary));
    if let Err(e) = recording.write(&args.out) {
        eprintln!("innoprof: error: {e}");
        return Ok(ExitCode::from(EXIT_OUTPUT_FAILED));
    }
    eprintln!("innoprof: wrote {}", args.out.display());
    Ok(if end == EndReason::TargetExited {
        ExitCode::from(EXIT_TARGET_EXITED)
    } else {
        ExitCode::SUCCESS
    })
}
