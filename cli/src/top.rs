//! `innoprof top --pid PID`: the on-CPU top-symbols table, live. The
//! profiler stays attached; each refresh shows the difference between two
//! snapshots of its maps, so the table is the last interval, not an
//! average since the start.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use innoprof::cpu::CpuProfiler;
use innoprof::privileges;
use innoprof::report::cpu_table;
use innoprof::symbolize::{ProcessMaps, StackSymbolizer};
use innoprof::target::Target;
use tokio::signal::unix::{signal, SignalKind};

use crate::cpu_args::CpuArgs;
use crate::EXIT_TARGET_EXITED;

#[derive(Args)]
pub struct TopArgs {
    /// PID of the running mysqld/mariadbd.
    #[arg(long)]
    pub pid: u32,
    #[command(flatten)]
    pub cpu: CpuArgs,
    /// Refresh interval (each refresh shows that interval's samples).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long)]
    pub iterations: Option<u64>,
    /// Rows of the table.
    #[arg(long, default_value_t = 25)]
    pub rows: usize,
    /// Profile a process that is not mysqld/mariadbd.
    #[arg(long)]
    pub force: bool,
}

pub async fn run(args: TopArgs) -> Result<ExitCode> {
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    privileges::check()?;
    innoprof::kernel::check()?;
    let target = Target::open(args.pid, args.force)?;
    let opts = args.cpu.options();
    let maps = ProcessMaps::read(target.pid).context("reading the target's memory map")?;
    let mut symbolizer = StackSymbolizer::new(maps.clone());
    let mut maps = maps;
    let clear = std::io::stdout().is_terminal();

    let profiler = CpuProfiler::start(target.pid, &opts)?;
    let mut previous = profiler.snapshot()?;
    let mut refreshes = 0u64;
    loop {
        let interrupted = tokio::select! {
            _ = tokio::time::sleep(args.interval) => false,
            _ = sigint.recv() => true,
            _ = sigterm.recv() => true,
        };
        if let Ok(fresh) = ProcessMaps::read(target.pid) {
            if fresh != maps {
                symbolizer.set_maps(fresh.clone());
                maps = fresh;
            }
        }
        let now = profiler.snapshot()?;
        let profile = now.since(&previous).symbolize(&mut symbolizer);
        if clear {
            print!("\x1b[H\x1b[2J");
        }
        // The interval as sampled: the refresh period plus the time the
        // last refresh took to print.
        let interval = now.duration_s - previous.duration_s;
        println!(
            "innoprof top: pid {} ({}), last {interval:.1}s (Ctrl-C to stop)",
            target.pid, target.comm,
        );
        print!(
            "{}",
            cpu_table::render_rows(&profile.summary, args.rows, args.rows / 2)
        );
        println!();
        previous = now;
        refreshes += 1;
        if interrupted || args.iterations.is_some_and(|n| refreshes >= n) {
            return Ok(ExitCode::SUCCESS);
        }
        if !target.is_alive() {
            eprintln!("innoprof: pid {} exited", target.pid);
            return Ok(ExitCode::from(EXIT_TARGET_EXITED));
        }
    }
}
