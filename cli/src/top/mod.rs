//! `innoprof top`: what a live server waits on and runs, refreshed every
//! interval (`--pid PID`), or the same tables once from a saved recording
//! (`DIR`). Live, the probes stay attached as `serve` keeps them (default
//! set, overhead governor, no stacks) beside the CPU profiler; each
//! refresh is the difference of two readings (`innoprof::live`), so it
//! shows the last interval, not an average since the start. On a
//! terminal it is a keyboard-driven UI (`tui`), else plain text (`plain`).
//! The statements and connections behind the client connections' hits
//! are the interval's too (`innoprof::live::statements`), by connection
//! id: top does not log in to the server, so it reads no processlist.

mod plain;
mod tui;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use innoprof::live::statements::StatementsView;
use innoprof::live::{Frame, LiveView, SortKey};
use innoprof::plan::catalog::CatalogError;
use innoprof::plan::probeset::ProbeRequest;
use innoprof::record::{RecordError, RecordOptions, Recorder, RecordingPlan};
use innoprof::target::Liveness;

use crate::clock::{Clock, Event, Signals};
use crate::cpu_args::CpuArgs;
use crate::pid_arg::PidArg;
use crate::probe_args::ProbeArgs;
use crate::EXIT_TARGET_EXITED;

#[derive(Args)]
#[command(after_help = crate::AFTER_HELP)]
pub struct TopArgs {
    #[command(flatten)]
    pub pid: PidArg,
    /// A directory written by `innoprof record --out`: print its tables once.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[command(flatten)]
    pub cpu: CpuArgs,
    /// CPU that probe hits may cost the server, in % of one core (e.g. 1, 0.5, 5), or `off`.
    /// Dearer probes are duty-cycled; their rates are over the time they were on.
    #[arg(long, default_value = "1", value_parser = crate::parse_budget)]
    pub max_overhead: crate::Budget,
    /// Refresh interval (each refresh shows that interval).
    #[arg(long, default_value = "1s", value_parser = crate::parse_interval)]
    pub interval: Duration,
    /// Stop after this many refreshes (default: until q or Ctrl-C).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Rows of the on-CPU table in plain text.
    #[arg(long, default_value_t = 25)]
    pub rows: usize,
    /// Profile a process that is not mysqld/mariadbd.
    #[arg(long)]
    pub force: bool,
    /// Do not tie client connections' hits to their statements (the THD reads at each
    /// connection hit, ~0.1 µs each, and the statement maps): no statements or connections
    /// table.
    #[arg(long)]
    pub no_statements: bool,
}

pub async fn run(args: TopArgs) -> Result<ExitCode> {
    match (args.pid.pid, &args.dir) {
        (None, Some(dir)) => saved(dir, &args),
        (Some(_), Some(_)) => Err(crate::UsageError(
            "give -p PID (a running server) or DIR (a recording), not both",
        )
        .into()),
        // Without either: the only server on the host, if there is one.
        (_, None) => live(args.pid.resolve()?, &args).await,
    }
}

/// `top DIR`: the recording's tables, over its whole duration, once.
fn saved(dir: &std::path::Path, args: &TopArgs) -> Result<ExitCode> {
    let summary = innoprof::bundle::read_summary(dir)?;
    let mut frame = Frame::from_summary(&summary);
    let sort = SortKey::default();
    frame.sort(sort);
    let t = &summary.target;
    let title = format!(
        "innoprof top: {} (pid {} {}, {}), recorded {:.1}s",
        dir.display(),
        t.pid,
        t.comm,
        t.server_version.as_deref().unwrap_or("version unknown"),
        summary.duration_s
    );
    print_text(&plain::render(&title, &frame, sort, args.rows))?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to stdout; false when the reader is gone (`| head`):
/// nothing left to do then, and no error to report.
fn print_text(text: &str) -> Result<bool> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing to stdout"),
    }
}

async fn live(pid: u32, args: &TopArgs) -> Result<ExitCode> {
    // Signal handlers first: a Ctrl-C during attach must still detach.
    // SIGHUP: the ssh session or terminal went away; detach as on q.
    let mut signals = Signals::install()?.with_hangup()?;
    let opts = crate::record_options(
        pid,
        args.force,
        &args.probe,
        args.max_overhead.governor(),
        args.pid.trust()?,
    )
    .cpu(Some(args.cpu.options()))
    .statements(!args.no_statements);
    let plan = match RecordingPlan::build(&opts) {
        // `top --force` on a process no catalog knows (before the wait
        // probes, top was CPU only): the CPU profile alone, said once.
        Err(RecordError::Catalog(e @ CatalogError::NoCatalog { .. }))
            if !opts.probes.is_explicit() =>
        {
            eprintln!("innoprof: {e}; showing the CPU profile only");
            let cpu_only = RecordOptions {
                probes: ProbeRequest {
                    selection: Some("none".into()),
                    ..opts.probes.clone()
                },
                ..opts.clone()
            };
            RecordingPlan::build(&cpu_only)?
        }
        plan => plan?,
    };
    crate::warn_unattached(&plan);
    let mut recorder = Recorder::start(plan, innoprof::record::StackCapture::Off)?;
    recorder.fold_exited_threads();
    let target = recorder.target().clone();
    eprintln!(
        "innoprof: attached {} uprobes and the CPU profiler to {} (pid {}, {})",
        recorder.attached_links(),
        innoprof::text::printable(&target.exe.to_string_lossy()),
        target.pid,
        recorder.plan().server,
    );
    let title = format!(
        "innoprof top: pid {} ({}, {})",
        target.pid,
        target.comm,
        recorder.plan().server
    );
    let mut view = LiveView::new(&recorder)?;
    let mut statements = StatementsView::new(&mut recorder);
    // The screen only when a person watches: piped or redirected, the
    // same tables as text, one block per refresh.
    let mut screen = if std::io::stdout().is_terminal() {
        Some(tui::Screen::enter()?)
    } else {
        None
    };
    let mut keys = tui::Controls::default();
    let mut shown = Frame::default();
    let mut refreshes = 0u64;
    // Until the first profile is named, the CPU panel says why it is empty.
    let profiled = recorder.plan().cpu.is_some();
    let mut pending = profiled.then(|| "sampling the first interval...".to_string());
    if let Some(s) = screen.as_mut() {
        draw(s, &title, &shown, keys, refreshes, pending.as_deref())?;
    }

    #[derive(Clone, Copy)]
    enum Duty {
        Govern,
        Refresh,
        AliveCheck,
    }
    // Keys are read on the governor's tick (50 ms is quick enough for a
    // keypress and costs no thread).
    let mut clock = Clock::new(&mut signals)
        .governor(Duty::Govern)
        .every(Duty::Refresh, args.interval)
        .alive_check(Duty::AliveCheck);
    let code = loop {
        match clock.next().await {
            // No deadline is set: top runs until q, a signal or --iterations.
            Event::Signal | Event::Deadline => break ExitCode::SUCCESS,
            Event::Due(Duty::Govern) => {
                recorder.govern();
                let Some(s) = screen.as_mut() else { continue };
                let actions = s.actions()?;
                if actions.contains(&tui::Action::Quit) {
                    break ExitCode::SUCCESS;
                }
                if !actions.is_empty() {
                    for a in actions {
                        keys.apply(a, &mut shown);
                    }
                    draw(s, &title, &shown, keys, refreshes, pending.as_deref())?;
                }
            }
            Event::Due(Duty::Refresh) => {
                if profiled && shown.cpu.is_none() {
                    // This refresh names the first stacks: seconds on a
                    // host's first run, during which the screen stands
                    // still. Said before, not after.
                    let note = naming_note(&target.comm, view.stack_names_kept(&recorder));
                    match screen.as_mut() {
                        Some(s) => draw(s, &title, &shown, keys, refreshes, Some(&note))?,
                        None if note.contains("first run") => eprintln!("innoprof: {note}"),
                        None => {}
                    }
                    pending = Some(note);
                }
                // Read even when paused: unpausing then shows the last
                // interval, not everything since the pause. The
                // statements first, so the probes are read right after
                // their drain (the CPU profile's naming may take seconds).
                let interval_statements = statements.refresh(&mut recorder).clone();
                let mut frame = view.refresh(&recorder)?;
                frame.statements = Some(interval_statements);
                if keys.paused {
                    continue;
                }
                frame.sort(keys.sort);
                shown = frame;
                refreshes += 1;
                match screen.as_mut() {
                    Some(s) => draw(s, &title, &shown, keys, refreshes, pending.as_deref())?,
                    None => {
                        let head = format!("{title}, last {:.1}s", shown.interval_s);
                        let text = plain::render(&head, &shown, keys.sort, args.rows);
                        if !print_text(&(text + "\n"))? {
                            break ExitCode::SUCCESS;
                        }
                    }
                }
                if args.iterations.is_some_and(|n| refreshes >= n) {
                    break ExitCode::SUCCESS;
                }
            }
            Event::Due(Duty::AliveCheck) => {
                if matches!(target.liveness(), Liveness::Gone) {
                    // The screen goes first, so the message stays visible.
                    drop(screen.take());
                    eprintln!("innoprof: pid {} exited; detaching", target.pid);
                    break ExitCode::from(EXIT_TARGET_EXITED);
                }
            }
        }
    };
    drop(screen);
    recorder.detach_probes();
    eprintln!("innoprof: probes detached");
    Ok(code)
}

/// What the CPU panel says while the first stacks are named: on a host's
/// first run (nothing kept by an earlier run, see
/// `LiveView::stack_names_kept`), that this is why it takes a while.
fn naming_note(server: &str, kept: bool) -> String {
    if kept {
        format!("naming stacks of {server}...")
    } else {
        format!("naming stacks of {server} (first run on this host: building the symbol index)...")
    }
}

fn draw(
    screen: &mut tui::Screen,
    title: &str,
    frame: &Frame,
    controls: tui::Controls,
    refreshes: u64,
    cpu_pending: Option<&str>,
) -> Result<()> {
    screen.draw(&tui::View {
        title,
        frame,
        controls,
        refreshes,
        cpu_pending,
    })
}
