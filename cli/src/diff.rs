//! `innoprof diff BASELINE INCIDENT`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use innoprof::diff::diff_dirs;

#[derive(Args)]
pub struct DiffArgs {
    /// Output directory of the baseline recording (`record --out`).
    pub baseline: PathBuf,
    /// Output directory of the recording to compare with it.
    pub incident: PathBuf,
    /// Where to write diff.*.folded, diff.*.svg, diff.json and diff.txt (default: INCIDENT).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: DiffArgs) -> Result<()> {
    let report = diff_dirs(&args.baseline, &args.incident)?;
    let out = args.out.unwrap_or_else(|| args.incident.clone());
    report.write(&out)?;
    print!("{}", report.render());
    eprintln!("innoprof: wrote {}", out.display());
    Ok(())
}
