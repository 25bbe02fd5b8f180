//! Finding the server when no PID is given: the mysqld/mariadbd processes
//! on this host, as `pidof mysqld mariadbd` would list them. With exactly
//! one, that is the target; with none or several the caller says so and
//! lists them, never guesses.

use std::path::Path;

use crate::target::placement::Placement;
use crate::target::trust::{Trust, Untrusted};
use crate::target::SERVER_NAMES;

/// A running server process, as /proc shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProcess {
    pub pid: u32,
    pub comm: String,
    /// The executable's path as the process sees it (may be in another
    /// mount namespace); "?" when unreadable.
    pub exe: String,
    /// `--port=` and `--socket=` from its command line, where given there.
    pub listens: Vec<String>,
    /// Its container or cgroup ([`Placement::label`]), to tell apart
    /// servers that look alike from inside their containers.
    pub runs_in: Option<String>,
}

impl std::fmt::Display for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names a target chose: control characters escaped.
        let shown = crate::text::printable;
        write!(
            f,
            "{} {} ({})",
            self.pid,
            shown(&self.comm),
            shown(&self.exe)
        )?;
        if !self.listens.is_empty() {
            write!(f, " {}", shown(&self.listens.join(" ")))?;
        }
        if let Some(place) = &self.runs_in {
            write!(f, " in {}", shown(place))?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("no mysqld or mariadbd process runs on this host; start the server, or give its PID with -p PID")]
    None,
    #[error("no trusted mysqld or mariadbd process runs on this host; skipped:\n{}", skipped(.0))]
    NoneTrusted(Vec<(ServerProcess, Untrusted)>),
    #[error("{} servers run on this host; choose one with -p PID:\n{}", .0.len(), list(.0))]
    Several(Vec<ServerProcess>),
    #[error("listing processes in /proc")]
    Proc(#[source] std::io::Error),
}

fn list(servers: &[ServerProcess]) -> String {
    servers
        .iter()
        .map(|s| format!("  {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn skipped(untrusted: &[(ServerProcess, Untrusted)]) -> String {
    untrusted
        .iter()
        .map(|(s, why)| format!("  {s}: {why}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every mysqld/mariadbd process (threads are not listed: /proc's top
/// level has thread-group leaders only), by PID.
pub fn servers() -> Result<Vec<ServerProcess>, DiscoverError> {
    servers_in(Path::new("/proc"))
}

/// Servers found but not trusted, each with why not.
pub type UntrustedServers = Vec<(ServerProcess, Untrusted)>;

/// The servers `trust` covers, and the others with why each is not.
pub fn trusted_servers(
    trust: &Trust,
) -> Result<(Vec<ServerProcess>, UntrustedServers), DiscoverError> {
    let mut trusted = Vec::new();
    let mut untrusted = Vec::new();
    for s in servers()? {
        match trust.check_pid(s.pid) {
            Ok(_) => trusted.push(s),
            Err(why) => untrusted.push((s, why)),
        }
    }
    Ok((trusted, untrusted))
}

/// The one trusted server on this host, and the untrusted ones passed
/// over (for the caller to say). A process another user runs under a
/// server's name is never chosen for root, even when it is the only one
/// (as in a restart window).
pub fn the_server(
    trust: &Trust,
) -> Result<(ServerProcess, Vec<(ServerProcess, Untrusted)>), DiscoverError> {
    let (mut trusted, untrusted) = trusted_servers(trust)?;
    match trusted.len() {
        0 if untrusted.is_empty() => Err(DiscoverError::None),
        0 => Err(DiscoverError::NoneTrusted(untrusted)),
        1 => Ok((trusted.remove(0), untrusted)),
        _ => Err(DiscoverError::Several(trusted)),
    }
}

fn servers_in(proc_root: &Path) -> Result<Vec<ServerProcess>, DiscoverError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(proc_root).map_err(DiscoverError::Proc)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        // A process that exits meanwhile is simply not listed.
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        if !SERVER_NAMES.contains(&comm.as_str()) {
            continue;
        }
        let exe = std::fs::read_link(dir.join("exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "?".into());
        let listens = std::fs::read(dir.join("cmdline"))
            .map(|c| listen_args(&c))
            .unwrap_or_default();
        found.push(ServerProcess {
            pid,
            comm,
            exe,
            listens,
            runs_in: Placement::of_in(proc_root, pid).label(),
        });
    }
    found.sort_by_key(|s| s.pid);
    Ok(found)
}

/// What one server instance is across its restarts: its data directory,
/// run by one user. mysqld and mariadbd chdir into it at start
/// (`my_setwd`), and two running servers cannot share one, so the process
/// of that user whose working directory it is, is the instance, whatever
/// its PID, and whatever binary an upgrade put at the same path.
/// The directory is known by its device and inode, as the kernel has it,
/// never by its path: another user can mount her own directory over the
/// path in a namespace of her own, and two containers may both call
/// theirs /var/lib/mysql. Not by mount namespace either: a restarted
/// container has a new one, while its datadir (a volume, a bind mount) is
/// the same directory, so the key follows the server across the restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// As the server sees it (inside its mount namespace), for messages.
    pub datadir: std::path::PathBuf,
    /// The executable the instance ran, for the log (a restart may run another).
    pub exe: String,
    pub key: InstanceKey,
}

/// An instance's identity: its datadir's device and inode and the user
/// that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InstanceKey {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
}

impl std::fmt::Display for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "datadir {}", self.datadir.display())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("reading the working directory (datadir) of pid {pid}")]
pub struct InstanceError {
    pub pid: u32,
    #[source]
    pub source: std::io::Error,
}

impl Instance {
    /// The instance a running server process belongs to.
    pub fn of(pid: u32) -> Result<Self, InstanceError> {
        Self::of_in(Path::new("/proc"), pid)
    }

    fn of_in(proc_root: &Path, pid: u32) -> Result<Self, InstanceError> {
        let dir = proc_root.join(pid.to_string());
        use std::os::unix::fs::MetadataExt;
        let err = |source| InstanceError { pid, source };
        let datadir = std::fs::read_link(dir.join("cwd")).map_err(err)?;
        let cwd = std::fs::metadata(dir.join("cwd")).map_err(err)?;
        // The process's user, from the owner of its /proc directory (its
        // effective uid; the trust check reads all four).
        let uid = std::fs::metadata(&dir).map_err(err)?.uid();
        let exe = std::fs::read_link(dir.join("exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "?".into());
        Ok(Self {
            datadir,
            exe,
            key: InstanceKey {
                dev: cwd.dev(),
                ino: cwd.ino(),
                uid,
            },
        })
    }

    /// The server process now running this instance. None while none
    /// runs, or while a starting one has not yet entered its datadir: the
    /// caller asks again. An exited one is never it, even as a zombie
    /// (its `cwd` link no longer reads).
    pub fn running(&self) -> Result<Option<ServerProcess>, DiscoverError> {
        self.running_in(Path::new("/proc"))
    }

    fn running_in(&self, proc_root: &Path) -> Result<Option<ServerProcess>, DiscoverError> {
        Ok(servers_in(proc_root)?
            .into_iter()
            .find(|s| Self::of_in(proc_root, s.pid).is_ok_and(|i| i.key == self.key)))
    }
}

/// `--port=N` / `--socket=PATH` from a NUL-separated command line: what
/// tells instances on one host apart. Values are shown, never used.
fn listen_args(cmdline: &[u8]) -> Vec<String> {
    cmdline
        .split(|&b| b == 0)
        .filter_map(|a| std::str::from_utf8(a).ok())
        .filter(|a| a.starts_with("--port=") || a.starts_with("--socket="))
        .map(|a| a.chars().filter(|c| !c.is_control()).take(200).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(dir: &Path, pid: u32, comm: &str, cmdline: &[u8]) {
        let p = dir.join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(p.join("cmdline"), cmdline).unwrap();
    }

    #[test]
    fn lists_servers_only_with_their_ports() {
        let dir = tempfile::tempdir().unwrap();
        fake_proc(
            dir.path(),
            300,
            "mariadbd",
            b"/usr/sbin/mariadbd\0--port=3307\0--user=mysql\0",
        );
        fake_proc(dir.path(), 20, "mysqld", b"mysqld\0--socket=/tmp/a.sock\0");
        fake_proc(dir.path(), 7, "bash", b"bash\0");
        std::fs::create_dir_all(dir.path().join("self")).unwrap();
        let found = servers_in(dir.path()).unwrap();
        assert_eq!(
            found
                .iter()
                .map(|s| (s.pid, s.comm.as_str()))
                .collect::<Vec<_>>(),
            [(20, "mysqld"), (300, "mariadbd")]
        );
        assert_eq!(found[1].listens, ["--port=3307"]);
        assert_eq!(found[0].to_string(), "20 mysqld (?) --socket=/tmp/a.sock");
        let several = DiscoverError::Several(found).to_string();
        assert!(
            several.starts_with("2 servers run on this host; choose one with -p PID:\n  20 mysqld"),
            "{several}"
        );
    }

    #[test]
    fn an_instance_is_found_again_by_its_datadir_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let datadir = root.join("data");
        std::fs::create_dir(&datadir).unwrap();
        fake_proc(root, 10, "mysqld", b"mysqld\0");
        std::os::unix::fs::symlink(&datadir, root.join("10/cwd")).unwrap();
        let inst = Instance::of_in(root, 10).unwrap();
        assert_eq!(inst.datadir, datadir);
        assert_eq!(inst.to_string(), format!("datadir {}", datadir.display()));
        assert_eq!(inst.running_in(root).unwrap().unwrap().pid, 10);
        // Once exited (no cwd link): gone. A server elsewhere, one still starting (cwd not yet its datadir),
        // and a non-server in the datadir are not it.
        fake_proc(root, 11, "mysqld", b"mysqld\0");
        std::os::unix::fs::symlink(root, root.join("11/cwd")).unwrap();
        fake_proc(root, 12, "bash", b"bash\0");
        std::os::unix::fs::symlink(&datadir, root.join("12/cwd")).unwrap();
        fake_proc(root, 13, "mariadbd", b"mariadbd\0");
        std::fs::remove_file(root.join("10/cwd")).unwrap();
        assert_eq!(inst.running_in(root).unwrap(), None);
        // An upgrade to another binary name, in the same datadir, is.
        std::os::unix::fs::symlink(&datadir, root.join("13/cwd")).unwrap();
        let again = inst.running_in(root).unwrap().unwrap();
        assert_eq!((again.pid, again.comm.as_str()), (13, "mariadbd"));
        // The same directory entered by another user's process is not it
        // (a look-alike run by someone else in a restart window).
        std::fs::remove_file(root.join("13/cwd")).unwrap();
        fake_proc(root, 14, "mysqld", b"mysqld\0");
        std::os::unix::fs::symlink(&datadir, root.join("14/cwd")).unwrap();
        std::os::unix::fs::lchown(root.join("14"), Some(65534), None).unwrap();
        assert_eq!(inst.running_in(root).unwrap(), None);
        let err = Instance::of_in(root, 12345).unwrap_err();
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn this_test_process_is_not_a_server() {
        let me = std::process::id();
        assert!(servers().unwrap().iter().all(|s| s.pid != me));
    }
}
