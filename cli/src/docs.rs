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

/// clap_mangen's sections but its "extra" one (the `--help` footer, which
/// [`sections`] splits into EXIT STATUS and PRIVILEGES) and its version
/// line (kept, last).
fn render_page(man: &clap_mangen::Man, cmd: &clap::Command, page: &mut Vec<u8>) -> Result<()> {
    man.render_title(page)?;
    man.render_name_section(page)?;
    man.render_synopsis_section(page)?;
    man.render_description_section(page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(page)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(page)?;
    }
    Ok(())
}

/// Commands a reader of innoprof-NAME(1) can paste, by command (`innoprof`
/// for the top page). Each parses (a unit test checks).
const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "innoprof",
        &[
            (
                "innoprof record -d 30",
                "record the one server on this host for 30 s",
            ),
            ("innoprof top", "live waits, latches, statements and CPU"),
            ("innoprof diff ./baseline /tmp/incident", "what changed"),
        ],
    ),
    (
        "record",
        &[
            (
                "innoprof record -d 30",
                "the one mysqld/mariadbd on this host, 30 s, into ./innoprof-PID-DATE-TIME/",
            ),
            (
                "innoprof record -p 4242 -d 60 --interval 1s -o /tmp/incident",
                "a chosen server, with a time axis",
            ),
            (
                "innoprof record --probes all --max-overhead 2 -d 20",
                "every catalog probe, within 2 % of a core",
            ),
            (
                "innoprof record --follow -d 10m",
                "across restarts of the same server",
            ),
        ],
    ),
    (
        "probes",
        &[
            ("innoprof probes", "what resolves in the running server"),
            (
                "innoprof probes --binary /usr/sbin/mariadbd --json",
                "in a binary on disk",
            ),
        ],
    ),
    (
        "top",
        &[
            (
                "innoprof top",
                "live, on the one server on this host; q quits",
            ),
            (
                "innoprof top /tmp/incident",
                "the tables of a saved recording",
            ),
        ],
    ),
    (
        "diff",
        &[(
            "innoprof diff ./baseline /tmp/incident -o /tmp/what-changed",
            "baseline against incident",
        )],
    ),
    (
        "report",
        &[
            (
                "innoprof report /tmp/incident",
                "rebuild report.html and summary.txt",
            ),
            (
                "innoprof report /tmp/incident --debug-dir /srv/debug",
                "name a `record --no-symbolize` recording's stacks from debug files by build id",
            ),
        ],
    ),
    (
        "serve",
        &[
            (
                "innoprof serve -p 4242",
                "metrics at http://127.0.0.1:9707/metrics",
            ),
            (
                "innoprof serve --all",
                "every trusted server on this host, labelled by datadir",
            ),
        ],
    ),
    (
        "calibrate",
        &[("innoprof calibrate --json", "this host's price of a hit")],
    ),
    (
        "completions",
        &[(
            "innoprof completions bash > /etc/bash_completion.d/innoprof",
            "bash completion",
        )],
    ),
    (
        "manpages",
        &[(
            "innoprof manpages /usr/local/share/man/man1",
            "install these pages",
        )],
    ),
];

/// roff text: backslashes and hyphens as roff wants them, no line may
/// start with a control character.
fn roff_text(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with('.') || t.starts_with('\'') {
        format!("\\&{t}")
    } else {
        t
    }
}

/// EXAMPLES, EXIT STATUS, PRIVILEGES and SEE ALSO for page `name`.
fn sections(name: &str, page: &mut Vec<u8>) {
    let mut out = String::new();
    if let Some((_, examples)) = EXAMPLES.iter().find(|(n, _)| *n == name) {
        out.push_str(".SH EXAMPLES\n");
        for (command, what) in examples.iter() {
            out.push_str(&format!(
                ".TP\n.B {}\n{}\n",
                roff_text(command),
                roff_text(what)
            ));
        }
    }
    let (status, privileges) = crate::AFTER_HELP
        .split_once("\n\nPrivileges: ")
        .unwrap_or((crate::AFTER_HELP, ""));
    out.push_str(".SH \"EXIT STATUS\"\n");
    for line in status.lines().skip(1) {
        match line.trim_start().split_once("  ") {
            Some((code, what)) if code.len() == 1 => {
                out.push_str(&format!(".TP\n.B {code}\n{}\n", roff_text(what.trim())))
            }
            _ => out.push_str(&format!("{}\n", roff_text(line.trim()))),
        }
    }
    if !privileges.is_empty() {
        out.push_str(&format!(
            ".SH PRIVILEGES\n{}\n",
            roff_text(&privileges.replace('\n', " "))
        ));
    }
    let mut see: Vec<String> = EXAMPLES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| *n != name)
        .map(|n| match n {
            "innoprof" => "innoprof(1)".to_string(),
            n => format!("innoprof\\-{n}(1)"),
        })
        .collect();
    see.extend(["perf(1)".into(), "bpftrace(8)".into(), "mysqld(8)".into()]);
    out.push_str(&format!(".SH \"SEE ALSO\"\n{}\n", see.join(", ")));
    page.extend_from_slice(out.as_bytes());
}

fn write_pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, written)?;
    }
    let name = cmd.get_name().to_string();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    render_page(&man, &cmd, &mut page)?;
    sections(&name, &mut page);
    if cmd.get_version().is_some() {
        man.render_version_section(&mut page)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `serve --help` names every endpoint serve answers, above the exit
    /// statuses every command's help has.
    #[test]
    fn serve_help_lists_its_endpoints() {
        let mut cmd = crate::Cli::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for path in [
            "/metrics",
            "/findings",
            "/debug/pprof/profile",
            "/debug/pprof/waits",
        ] {
            assert!(
                help.contains(&format!("  {path} ")),
                "{path} missing:\n{help}"
            );
        }
        let endpoints = help.find("Endpoints (GET):").unwrap();
        assert!(help.find("Exit status:").unwrap() > endpoints, "{help}");
    }

    /// Every example is a command innoprof accepts (a shell redirection
    /// aside), and every command has some.
    #[test]
    fn every_example_parses() {
        for (_, examples) in EXAMPLES {
            for (command, _) in examples.iter() {
                let argv = command.split(" > ").next().unwrap().split_whitespace();
                if let Err(e) = crate::Cli::try_parse_from(argv) {
                    panic!("{command}: {e}");
                }
            }
        }
        let cmd = crate::Cli::command();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            assert!(
                EXAMPLES.iter().any(|(n, _)| *n == sub.get_name()),
                "no examples for {}",
                sub.get_name()
            );
        }
    }

    /// A page has the sections a man page reader looks for, each once, and
    /// every exit status.
    #[test]
    fn pages_have_examples_exit_status_and_see_also() {
        let dir = tempfile_dir();
        manpages(ManpagesArgs { dir: dir.clone() }).unwrap();
        for page in ["innoprof.1", "innoprof-record.1", "innoprof-serve.1"] {
            let text = std::fs::read_to_string(dir.join(page)).unwrap();
            for section in [
                ".SH EXAMPLES",
                ".SH \"EXIT STATUS\"",
                ".SH \"SEE ALSO\"",
                ".SH OPTIONS",
            ] {
                assert_eq!(
                    text.matches(section).count(),
                    1,
                    "{page}: {section}\n{text}"
                );
            }
            for code in 0..=4 {
                assert!(
                    text.contains(&format!(".TP\n.B {code}\n")),
                    "{page}: exit {code}"
                );
            }
        }
        let record = std::fs::read_to_string(dir.join("innoprof-record.1")).unwrap();
        assert!(record.contains("innoprof record \\-p 4242"), "{record}");
        assert!(record.contains("innoprof\\-serve(1)") && !record.contains("innoprof\\-record(1)"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("innoprof-man-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
