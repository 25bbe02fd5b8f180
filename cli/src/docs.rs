//! Shell completions and the man page, generated from the same clap
//! definitions as `--help` (clap_complete, clap_mangen), so they cannot
//! drift from the flags.

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, ValueEnum};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use clap_complete::Shell;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: CompletionShell,
}

/// The shells people run innoprof from (clap_complete's other two,
/// elvish and PowerShell, are not where database hosts live).
#[derive(Clone, Copy, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

pub fn completions(args: CompletionsArgs) -> Result<()> {
    let shell = match args.shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut cmd = crate::Cli::command();
    clap_complete::generate(shell, &mut cmd, "innoprof", &mut std::io::stdout());
    Ok(())
}

#[derive(Args)]
pub struct ManpagesArgs {
    /// Directory to write innoprof.1 and innoprof-COMMAND.1 into (e.g. /usr/local/share/man/man1).
    dir: PathBuf,
}

/// innoprof(1) and a page per command, innoprof-record(1) and so on, as
/// git and perf ship theirs: written into DIR, which must exist.
pub fn manpages(args: ManpagesArgs) -> Result<()> {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(cmd, &args.dir, &mut written)?;
    eprintln!(
        "innoprof: wrote {} man pages into {} (try: man innoprof-record)",
        written.len(),
        args.dir.display()
    );
    Ok(())
}

fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, written)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let mut page = Vec::new();
    man.render(&mut page)?;
    let path = dir.join(man.get_filename());
    // As root into a shared directory: a symlink planted at the page's
    // name is refused, not followed.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(&page)
        .with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    Ok(())
}
