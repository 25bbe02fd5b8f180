//! The process being profiled: found by PID through /proc, checked to be a
//! MySQL/MariaDB server, and its binary opened as the file the process runs
//! (see [`crate::target::rootfs`]), so a server in a container (another mount
//! namespace) works too and a symlink planted there is never followed.

pub mod discover;
pub mod file_id;
pub mod host;
pub mod host_idle;
pub mod kernel;
pub mod maps;
pub mod own_usage;
pub mod placement;
pub mod privileges;
pub mod rootfs;
pub mod trust;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::target::rootfs::{Home, RootError, TargetFile};
use crate::target::trust::{Trust, Untrusted};

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("no process with PID {0} (check the PID: `pidof mysqld mariadbd`)")]
    NoSuchProcess(u32),
    #[error("PID {0} is a zombie (exited, not yet reaped); point innoprof at a running server")]
    Zombie(u32),
    #[error("PID {0} is a kernel thread, not a server process")]
    KernelThread(u32),
    #[error(
        "PID {pid} is `{comm}` ({exe}), not mysqld/mariadbd; pass the server's PID (`pidof mysqld mariadbd`) or --force to profile it anyway"
    )]
    NotAServer { pid: u32, comm: String, exe: String },
    #[error("reading /proc/{pid}")]
    Proc { pid: u32, source: std::io::Error },
    /// EACCES/EPERM on /proc/PID: said with what would grant it, not as a
    /// bare errno.
    #[error("cannot inspect PID {pid}: permission denied; {why}")]
    NoAccess {
        pid: u32,
        why: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Binary(#[from] RootError),
    /// Run or owned by a user innoprof does not act for ([`crate::target::trust`]).
    #[error("not attaching: {0}")]
    Untrusted(#[from] Untrusted),
}

impl TargetError {
    /// A failed read of /proc/PID: a refusal names what is missing.
    fn proc(pid: u32, source: std::io::Error) -> Self {
        let denied = matches!(
            source.raw_os_error(),
            Some(libc::EACCES) | Some(libc::EPERM)
        );
        if !denied {
            return Self::Proc { pid, source };
        }
        let why = if crate::target::privileges::can_ptrace() {
            "innoprof has CAP_SYS_PTRACE, so the process is out of its reach (another user namespace, \
             or a ptrace policy such as Yama or an LSM); run innoprof in the server's namespace"
        } else {
            "reading another user's process needs CAP_SYS_PTRACE: run innoprof as root, or grant it \
             (`setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep innoprof`)"
        };
        Self::NoAccess { pid, why, source }
    }
}

/// What a liveness check found. `Unknown` is a local failure (out of file
/// descriptors or memory, /proc unreadable): never a reason to stop
/// watching a server that may well be running.
#[derive(Debug)]
pub enum Liveness {
    Alive,
    /// Exited, a zombie, or its PID now belongs to another process.
    Gone,
    Unknown(std::io::Error),
}

/// Process names of the servers innoprof knows.
pub(crate) const SERVER_NAMES: &[&str] = &["mysqld", "mariadbd", "mysqld-debug", "mariadbd-debug"];

#[derive(Debug, Clone)]
pub struct Target {
    pub pid: u32,
    pub comm: String,
    /// The executable's path as the target sees it (inside its mount namespace).
    pub exe: PathBuf,
    /// The path innoprof opens and attaches to: `/proc/self/fd/N` of the
    /// executable opened and checked at [`Target::open`], valid while this
    /// `Target` (or a clone) lives.
    pub binary: PathBuf,
    /// Its cgroup, container and namespaces, read when opened (a label for
    /// headers, series and logs; see [`placement`]).
    pub placement: placement::Placement,
    /// Keeps `binary` open.
    file: Arc<TargetFile>,
    /// The target's root, where files beside its binary are looked up.
    root: Arc<OwnedFd>,
    /// Kernel start time in clock ticks: distinguishes a restarted server
    /// that got the same PID.
    start_time: u64,
    /// A pidfd of the process (Linux >= 5.3): it polls readable once the
    /// process has exited, so a liveness check is one `poll(2)` instead of
    /// reading `/proc/PID/stat`, whose cost grows with the server's thread
    /// count (3 % of innoprof's CPU over a 30 s recording, checked every
    /// 10 ms). None where the kernel has no pidfd_open.
    pidfd: Option<Arc<OwnedFd>>,
}

impl Target {
    /// Finds the process; refuses anything that is not mysqld/mariadbd unless
    /// `force`, and any process `trust` does not cover, before its binary
    /// is read.
    pub fn open(pid: u32, force: bool, trust: &Trust) -> Result<Self, TargetError> {
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let io = |source| TargetError::proc(pid, source);
        if pid == 0 || !proc_dir.exists() {
            return Err(TargetError::NoSuchProcess(pid));
        }
        let stat = std::fs::read_to_string(proc_dir.join("stat")).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TargetError::NoSuchProcess(pid),
            _ => io(e),
        })?;
        let (state, start_time) =
            parse_stat(&stat).ok_or_else(|| io(std::io::Error::other("malformed stat")))?;
        if state == 'Z' || state == 'X' {
            return Err(TargetError::Zombie(pid));
        }
        let comm = std::fs::read_to_string(proc_dir.join("comm"))
            .map_err(io)?
            .trim()
            .to_string();
        let exe = match std::fs::read_link(proc_dir.join("exe")) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TargetError::KernelThread(pid))
            }
            Err(e) => return Err(io(e)),
        };
        let exe_name = exe
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let is_server = SERVER_NAMES.iter().any(|n| *n == comm || *n == exe_name);
        if !is_server && !force {
            return Err(TargetError::NotAServer {
                pid,
                comm,
                exe: exe.display().to_string(),
            });
        }
        let file = rootfs::open_exe(pid, &exe)?;
        let exe_meta = file.file().metadata().map_err(io)?;
        trust.check_process(pid, &exe_meta)?;
        let root = rootfs::open_root(pid).map_err(io)?;
        let pidfd = open_pidfd(pid, start_time);
        // Opened after the checks: the same process must still own the PID.
        let same = std::fs::read_to_string(proc_dir.join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
            .is_some_and(|(_, start)| start == start_time);
        if !same {
            return Err(TargetError::NoSuchProcess(pid));
        }
        Ok(Self {
            pid,
            pidfd,
            placement: placement::Placement::of(pid),
            comm,
            binary: file.fd_path(),
            file: Arc::new(file),
            root: Arc::new(root),
            exe,
            start_time,
        })
    }

    /// A MySQL-family server by its process or executable name (not a
    /// process profiled with `force`).
    pub fn is_server(&self) -> bool {
        let exe_name = self.exe.file_name().map(|n| n.to_string_lossy());
        SERVER_NAMES
            .iter()
            .any(|n| *n == self.comm || exe_name.as_deref() == Some(*n))
    }

    /// Where the executable lives, to look beside it (its debug file)
    /// inside the target's root.
    pub fn home(&self) -> Home {
        let exe = self.exe.to_string_lossy();
        let exe = rootfs::in_target_root(self.pid, Path::new(exe.trim_end_matches(" (deleted)")));
        Home::Target {
            root: Arc::clone(&self.root),
            dir: exe.parent().unwrap_or(Path::new("/")).to_path_buf(),
        }
    }

    /// The opened executable.
    pub fn file(&self) -> &TargetFile {
        &self.file
    }

    /// True unless the process is known to be gone: a check that could
    /// not be made (EMFILE, ENOMEM) counts as alive.
    pub fn is_alive(&self) -> bool {
        !matches!(self.liveness(), Liveness::Gone)
    }

    /// Whether the same process (not a successor with a reused PID) runs,
    /// telling "gone" (exited, ESRCH/ENOENT, start time changed) from "could
    /// not check" (any other error).
    pub fn liveness(&self) -> Liveness {
        if let Some(fd) = &self.pidfd {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            match unsafe { libc::poll(&mut p, 1, 0) } {
                0 => return Liveness::Alive,
                // POLLIN: exited. POLLNVAL/POLLERR would be our descriptor's
                // fault, not the process's: ask /proc instead.
                n if n > 0 && p.revents & libc::POLLIN != 0 => return Liveness::Gone,
                _ => {} // EINTR and the like: ask /proc
            }
        }
        let stat = match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(s) => s,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH)) => {
                return Liveness::Gone
            }
            Err(e) => return Liveness::Unknown(e),
        };
        match parse_stat(&stat) {
            Some((state, start)) if start == self.start_time && state != 'Z' && state != 'X' => {
                Liveness::Alive
            }
            Some(_) => Liveness::Gone,
            None => Liveness::Unknown(std::io::Error::other("malformed /proc/PID/stat")),
        }
    }
}

/// A pidfd for the process started at `start_time`: opened, then the
/// start time read again, so a PID reused in between is not taken for it.
fn open_pidfd(pid: u32, start_time: u64) -> Option<Arc<OwnedFd>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor the kernel just gave us, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let same = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|(_, start)| start == start_time);
    same.then(|| Arc::new(fd))
}

/// State and start time from /proc/PID/stat (comm may contain spaces and parens).
/// How long ago process `pid` started (None when it cannot be read).
pub fn process_age(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, start_ticks) = parse_stat(&stat)?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let started = start_ticks as f64 / hz as f64;
    Some(std::time::Duration::from_secs_f64(
        (uptime - started).max(0.0),
    ))
}

fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After comm: state is field 3, starttime is field 22 (1-based in proc(5)).
    Some((
        fields.first()?.chars().next()?,
        fields.get(19)?.parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let stat = "1234 (my (odd) d) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 30 0 987654 1000 100";
        assert_eq!(parse_stat(stat), Some(('S', 987654)));
    }

    #[test]
    fn own_process_is_not_a_server() {
        let pid = std::process::id();
        assert!(matches!(
            Target::open(pid, false, &Trust::default()),
            Err(TargetError::NotAServer { .. })
        ));
        let me = Target::open(pid, true, &Trust::default()).unwrap();
        assert!(me.is_alive());
        assert!(me.binary.exists());
    }

    /// Alive while it runs; not once it has exited, reaped or not.
    #[test]
    fn a_process_that_exits_is_seen_to_exit() {
        for reap in [false, true] {
            let mut child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            let t = Target::open(child.id(), true, &Trust::default()).unwrap();
            assert!(t.pidfd.is_some(), "pidfd_open works on this kernel");
            assert!(t.is_alive());
            child.kill().unwrap();
            if reap {
                child.wait().unwrap();
            } else {
                // A zombie until reaped: exited all the same.
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            assert!(!t.is_alive(), "reaped: {reap}");
            let _ = child.wait();
        }
    }

    #[test]
    fn missing_pid() {
        assert!(matches!(
            Target::open(0, true, &Trust::default()),
            Err(TargetError::NoSuchProcess(0))
        ));
        assert!(matches!(
            Target::open(u32::MAX - 1, true, &Trust::default()),
            Err(TargetError::NoSuchProcess(_))
        ));
    }
}
