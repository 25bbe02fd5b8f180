//! `innoprof probes`: resolution report for a running server or a binary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use innoprof::plan::inspect;
use innoprof::target::Target;

use crate::pid_arg::PidArg;
use crate::probe_args::ProbeArgs;

#[derive(Args)]
pub struct ProbesArgs {
    /// PID of a running mysqld/mariadbd (default without --binary: the only one on this host).
    #[arg(short = 'p', long, conflicts_with = "binary")]
    pid: Option<u32>,
    /// Also act on servers this user runs or owns (name or uid; repeatable).
    #[arg(long, value_name = "USER")]
    trust_user: Vec<String>,
    /// A server binary on disk.
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Accept a PID that is not mysqld/mariadbd.
    #[arg(long)]
    force: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    probe: ProbeArgs,
}

pub fn run(args: ProbesArgs) -> Result<ExitCode> {
    // Default to every catalog probe: the point is to see what exists.
    let mut request = args.probe.request();
    if request.selection.is_none() && request.ad_hoc.is_empty() {
        request.selection = Some("all".into());
    }
    let debug = args.probe.debug_search();
    let inspection = match &args.binary {
        Some(b) => inspect::inspect(b, &b.display().to_string(), &request, &debug)?,
        None => {
            let target = PidArg {
                pid: args.pid,
                trust_user: args.trust_user.clone(),
            };
            let t = Target::open(target.resolve()?, args.force, &target.trust()?)?;
            inspect::inspect_target(&t, &request, &debug)?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&inspection)?);
    } else {
        print!("{}", inspect::render(&inspection));
    }
    Ok(ExitCode::SUCCESS)
}
