//! The machine-readable "attached" signal of `record` and `serve`, for a
//! script or a service manager that must not start its load before the
//! probes see it (the stderr lines are for people, and may change).
//!
//! Once every probe is attached (`serve`: also the HTTP listener bound),
//! innoprof writes one JSON line, a [`Ready`], to the descriptor given with
//! `--ready-fd N` and closes it, so a reader may wait for the line or for
//! end of file; a reader that gets end of file without a line knows
//! innoprof gave up before attaching. When `NOTIFY_SOCKET` is set (a
//! systemd unit of `Type=notify`), innoprof also sends `READY=1` there, as
//! `sd_notify(3)` does, without linking libsystemd.
//! Either is sent once: a `record --follow` re-attaching after a restart
//! says so on stderr only.

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};

use serde::{Deserialize, Serialize};

use crate::record::Recorder;

/// The line written to `--ready-fd` (schema: `docs/schema/ready.schema.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ready {
    /// innoprof's output contract version (docs/OUTPUTS.md); 0 in
    /// lines written before the ready line carried one.
    #[serde(default)]
    pub format_version: u32,
    /// Always `attached`.
    pub event: String,
    /// `record` or `serve`.
    pub command: String,
    /// innoprof's own pid (to signal it, e.g. SIGINT to end a recording).
    pub innoprof_pid: u32,
    /// `record`: seconds until the recording ends by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording_s: Option<f64>,
    /// `serve`: the address `/metrics` is served on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The server processes attached to (`serve --all`: those found so
    /// far, possibly none).
    pub targets: Vec<ReadyTarget>,
}

/// One server process and what is attached to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReadyTarget {
    pub pid: u32,
    /// The executable, as the target sees it.
    pub exe: String,
    /// e.g. `MySQL 5.6.24`.
    pub server: String,
    /// Names of the probes attached (those that resolved to nothing are not).
    pub probes: Vec<String>,
    /// Probe points (symbol offsets, entry and return counted apart).
    pub probe_points: usize,
    /// BPF links of the probes (`uprobe_multi` or `perf_event`).
    pub uprobe_links: usize,
    /// The CPU profiler's perf events and tracepoint links (0 without one).
    pub cpu_links: usize,
}

impl ReadyTarget {
    pub fn of(recorder: &Recorder) -> Self {
        let target = recorder.target();
        let info = recorder.attach_info();
        Self {
            pid: target.pid,
            exe: target.exe.display().to_string(),
            server: recorder.plan().server.to_string(),
            probes: recorder
                .attached_probes()
                .into_iter()
                .map(String::from)
                .collect(),
            probe_points: info.map_or(0, |a| a.points),
            uprobe_links: recorder.attached_links(),
            cpu_links: recorder.cpu_links(),
        }
    }
}

impl Ready {
    /// `record` attached to one process, ending in `recording_s`.
    pub fn record(recorder: &Recorder, recording_s: f64) -> Self {
        Self {
            recording_s: Some(recording_s),
            ..Self::new("record", vec![ReadyTarget::of(recorder)])
        }
    }

    /// `serve` listening on `listen`, attached to `recorders`.
    pub fn serve<'a>(listen: String, recorders: impl Iterator<Item = &'a Recorder>) -> Self {
        Self {
            listen: Some(listen),
            ..Self::new("serve", recorders.map(ReadyTarget::of).collect())
        }
    }

    fn new(command: &str, targets: Vec<ReadyTarget>) -> Self {
        Self {
            format_version: crate::model::files::FORMAT_VERSION,
            event: "attached".into(),
            command: command.into(),
            innoprof_pid: std::process::id(),
            recording_s: None,
            listen: None,
            targets,
        }
    }

    /// The `--ready-fd` line: JSON, newline-terminated.
    pub fn line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("plain data serializes");
        line.push('\n');
        line
    }

    /// The `sd_notify` message.
    fn notify_message(&self) -> String {
        let probes: usize = self.targets.iter().map(|t| t.probes.len()).sum();
        let pids: Vec<String> = self.targets.iter().map(|t| t.pid.to_string()).collect();
        format!(
            "READY=1\nMAINPID={}\nSTATUS=attached {probes} probe{} to pid {}\n",
            self.innoprof_pid,
            if probes == 1 { "" } else { "s" },
            if pids.is_empty() {
                "none yet".to_string()
            } else {
                pids.join(", ")
            }
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error("--ready-fd {0}: not an open descriptor")]
    BadFd(RawFd),
    #[error("--ready-fd {fd}: cannot write the ready line")]
    Write {
        fd: RawFd,
        #[source]
        source: std::io::Error,
    },
    #[error("NOTIFY_SOCKET {socket:?}: cannot send READY=1")]
    Notify {
        socket: OsString,
        #[source]
        source: std::io::Error,
    },
}

/// Where the signal goes: the `--ready-fd` descriptor and systemd's socket.
pub struct Notifier {
    fd: Option<(RawFd, File)>,
    notify_socket: Option<OsString>,
}

impl Notifier {
    /// Takes over `ready_fd` (checked open now, so a wrong number fails
    /// before anything is attached) and reads `NOTIFY_SOCKET`. The
    /// descriptor is not passed on to processes innoprof starts.
    pub fn new(ready_fd: Option<RawFd>) -> Result<Self, ReadyError> {
        let fd = ready_fd.map(|n| take_fd(n).map(|f| (n, f))).transpose()?;
        Ok(Self {
            fd,
            notify_socket: std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
        })
    }

    /// Sends `ready` the first time it is called; later calls do nothing.
    /// Both destinations are tried; the first failure is returned.
    pub fn announce(&mut self, ready: &Ready) -> Result<(), ReadyError> {
        let written = self.fd.take().map(|(n, mut file)| {
            // Closed on return: the reader sees end of file after the line.
            file.write_all(ready.line().as_bytes())
                .map_err(|source| ReadyError::Write { fd: n, source })
        });
        let notified = self.notify_socket.take().map(|socket| {
            sd_notify(&socket, &ready.notify_message())
                .map_err(|source| ReadyError::Notify { socket, source })
        });
        written.transpose()?;
        notified.transpose()?;
        Ok(())
    }
}

/// `n` as a file of our own, close-on-exec. stdin, stdout and stderr are
/// duplicated rather than taken: closing them would break later output.
fn take_fd(n: RawFd) -> Result<File, ReadyError> {
    // SAFETY: fcntl on a descriptor number only queries or duplicates it.
    let flags = unsafe { libc::fcntl(n, libc::F_GETFD) };
    if n < 0 || flags < 0 {
        return Err(ReadyError::BadFd(n));
    }
    let owned = if n <= 2 {
        // SAFETY: as above; the duplicate (>= 3) is ours.
        let dup = unsafe { libc::fcntl(n, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            return Err(ReadyError::BadFd(n));
        }
        dup
    } else {
        // SAFETY: as above.
        unsafe { libc::fcntl(n, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
        n
    };
    // SAFETY: an open descriptor nothing else in innoprof uses (inherited
    // for this purpose, or our duplicate); the File closes it.
    Ok(unsafe { File::from_raw_fd(owned) })
}

/// One datagram to systemd's notification socket: a path, or an abstract
/// name spelled with a leading `@`.
fn sd_notify(socket: &OsString, message: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = socket.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(socket))?,
    };
    UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> Ready {
        Ready {
            recording_s: Some(30.0),
            ..Ready::new(
                "record",
                vec![ReadyTarget {
                    pid: 42,
                    exe: "/usr/sbin/mysqld".into(),
                    server: "MySQL 5.6.24".into(),
                    probes: vec!["innodb.mutex.enter".into()],
                    probe_points: 2,
                    uprobe_links: 2,
                    cpu_links: 0,
                }],
            )
        }
    }

    #[test]
    fn the_line_is_one_json_object_that_reads_back() {
        let line = ready().line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let back: Ready = serde_json::from_str(&line).unwrap();
        assert_eq!(back, ready());
        assert!(!line.contains("listen"), "{line}");
    }

    #[test]
    fn the_descriptor_gets_the_line_once_then_end_of_file() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the read end is ours.
        let mut reader = unsafe { File::from_raw_fd(fds[0]) };
        let mut notifier = Notifier {
            fd: Some((fds[1], take_fd(fds[1]).unwrap())),
            notify_socket: None,
        };
        notifier.announce(&ready()).unwrap();
        notifier.announce(&ready()).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut reader, &mut text).unwrap();
        assert_eq!(text, ready().line());
    }

    #[test]
    fn a_closed_descriptor_is_refused() {
        assert!(matches!(take_fd(9999), Err(ReadyError::BadFd(9999))));
        assert!(matches!(take_fd(-1), Err(ReadyError::BadFd(-1))));
    }

    #[test]
    fn stdout_is_duplicated_not_taken() {
        use std::os::fd::AsRawFd;
        let file = take_fd(1).unwrap();
        assert!(file.as_raw_fd() >= 3);
        // SAFETY: fcntl queries descriptors this test can see.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        drop(file);
        // SAFETY: as above.
        let stdout = unsafe { libc::fcntl(1, libc::F_GETFD) };
        assert!(stdout >= 0, "stdout still open");
    }

    #[test]
    fn systemd_gets_ready_with_the_facts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let mut notifier = Notifier {
            fd: None,
            notify_socket: Some(path.into_os_string()),
        };
        notifier.announce(&ready()).unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.starts_with("READY=1\n"), "{text}");
        assert!(
            text.contains(&format!("MAINPID={}\n", std::process::id())),
            "{text}"
        );
        assert!(text.contains("STATUS=attached 1 probe to pid 42"), "{text}");
    }
}
