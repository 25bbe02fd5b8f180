//! `innoprof report DIR`: rebuilds report.html and summary.txt from a saved
//! bundle (its summary.json and other files); no target needed. With
//! `--symbolize` (implied by `--debuginfo`, `--debug-dir`, and by a
//! `record --no-symbolize` bundle), names the bundle's raw stacks here
//! first (`innoprof::bundle::name_raw`), like `perf report` after
//! `perf record`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use innoprof::bundle;
use innoprof::bundle::name_raw::{self, FileOutcome, NameOptions};

#[derive(Args)]
pub struct ReportArgs {
    /// A directory written by `innoprof record --out` (or unpacked from its .tar.gz).
    dir: PathBuf,
    /// Name the stacks from stacks.raw.json on this host, checking every file by build id,
    /// and rewrite the folded files, flame graphs, pprof files and summary in DIR. Implied by
    /// --debuginfo, --debug-dir and by a `record --no-symbolize` recording.
    #[arg(long)]
    symbolize: bool,
    /// A binary or debug file to name frames from (repeatable): used for the mapped file
    /// whose build id it carries.
    #[arg(long, value_name = "FILE")]
    debuginfo: Vec<PathBuf>,
    /// Where to look for binaries and debug files by build id (DIR/.build-id/ab/cdef….debug
    /// or …/cdef) or by the mapped file's name (repeatable). /usr/lib/debug is always searched.
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

pub fn run(args: ReportArgs) -> Result<()> {
    let asked = args.symbolize || !args.debuginfo.is_empty() || !args.debug_dir.is_empty();
    let unnamed = || {
        name_raw::read_raw(&args.dir)
            .map(|r| !r.named_on_host)
            .unwrap_or(false)
    };
    if asked || unnamed() {
        let mut debug_dirs = args.debug_dir.clone();
        debug_dirs.push(PathBuf::from("/usr/lib/debug"));
        let opts = NameOptions {
            debuginfo: args.debuginfo.clone(),
            debug_dirs,
        };
        let named = name_raw::name_bundle(&args.dir, &opts)?;
        print!("{}", innoprof::report::table::render(&named.summary));
        for note in &named.written.notes {
            eprintln!("innoprof: note: {note}");
        }
        for f in &named.files {
            let mark = match f {
                FileOutcome::Named { .. } => "",
                FileOutcome::Missing { .. } => "warning: ",
            };
            eprintln!("innoprof: {mark}{f}");
        }
        eprintln!(
            "innoprof: named the stacks of {} here; rewrote its folded files, flame graphs, pprof files, summary and {}",
            args.dir.display(),
            named.written.report.display()
        );
        return Ok(());
    }
    let (summary, written) = bundle::rerender(&args.dir)?;
    print!("{}", innoprof::report::table::render(&summary));
    for note in &written.notes {
        eprintln!("innoprof: note: {note}");
    }
    eprintln!(
        "innoprof: wrote {} and {}",
        written.report.display(),
        args.dir.join(innoprof::model::files::SUMMARY_TXT).display()
    );
    Ok(())
}
