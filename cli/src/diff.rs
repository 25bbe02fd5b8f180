//! `innoprof diff BASELINE INCIDENT`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use innoprof::bundle::diff::diff_dirs;

#[derive(Args)]
pub struct DiffArgs {
    /// Output directory of the baseline recording (`record --out`).
    pub baseline: PathBuf,
    /// Output directory of the recording to compare with it.
    pub incident: PathBuf,
    /// Where to write diff.*.folded, diff.*.svg, diff.json and diff.txt; never a recording
    /// (default: innoprof-diff-BASELINE-vs-INCIDENT in the current directory).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

/// The recordings' own names, so two diffs in one directory do not collide
/// and the name says what was compared.
fn default_out(baseline: &Path, incident: &Path) -> PathBuf {
    let name = |p: &Path| {
        p.canonicalize()
            .ok()
            .and_then(|c| c.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "recording".into())
    };
    PathBuf::from(format!(
        "innoprof-diff-{}-vs-{}",
        name(baseline),
        name(incident)
    ))
}

pub fn run(args: DiffArgs) -> Result<()> {
    let report = diff_dirs(&args.baseline, &args.incident)?;
    if same_recording(&args.baseline, &args.incident) {
        eprintln!(
            "innoprof: warning: {} and {} are the same recording; nothing can differ",
            args.baseline.display(),
            args.incident.display()
        );
    }
    let out = args
        .out
        .unwrap_or_else(|| default_out(&args.baseline, &args.incident));
    report.write(&out)?;
    print!("{}", report.render());
    eprintln!("innoprof: wrote {}", out.display());
    Ok(())
}

/// One directory given twice, or two copies of one recording (the same
/// summary.json, byte for byte): a diff of a recording with itself.
fn same_recording(a: &std::path::Path, b: &std::path::Path) -> bool {
    let same_dir = matches!(
        (a.canonicalize(), b.canonicalize()),
        (Ok(x), Ok(y)) if x == y
    );
    let summary = |d| {
        innoprof::bundle::read::BundleDir::new(d)
            .read(innoprof::model::files::SUMMARY_JSON)
            .ok()
            .flatten()
    };
    same_dir || matches!((summary(a), summary(b)), (Some(x), Some(y)) if x == y)
}
