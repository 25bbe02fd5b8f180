//! `innoprof report DIR`: rebuilds report.html and summary.txt from a saved
//! bundle (its summary.json and other files); no target needed.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use innoprof::bundle;

#[derive(Args)]
pub struct ReportArgs {
    /// A directory written by `innoprof record --out` (or unpacked from its .tar.gz).
    dir: PathBuf,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let (summary, written) = bundle::rerender(&args.dir)?;
    print!("{}", innoprof::report::table::render(&summary));
    eprintln!(
        "innoprof: wrote {} and {}",
        written.report.display(),
        args.dir.join(innoprof::model::files::SUMMARY_TXT).display()
    );
    Ok(())
}
