//! innoprof's machine-readable "attached" signal (`--ready-fd`), as a test
//! waits on it instead of a human stderr line.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub use innoprof::record::ready::{Ready, ReadyTarget};

/// A ready line as its type, after checking it against the committed
/// schema (docs/schema/ready.schema.json, compiled once) and that it
/// carries this build's `format_version`.
pub fn parse_line(line: &str) -> Ready {
    use innoprof::model::files::{FORMAT_VERSION, READY_SCHEMA};
    let value: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
    let errors = crate::bundle::schema_errors(READY_SCHEMA, &value);
    assert!(
        errors.is_empty(),
        "ready line {line:?} does not match {READY_SCHEMA}:\n{}",
        errors.join("\n")
    );
    assert_eq!(
        value["format_version"].as_u64(),
        Some(FORMAT_VERSION.into()),
        "ready line {line:?}"
    );
    serde_json::from_value(value).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"))
}

/// The descriptor innoprof is given with `--ready-fd`.
pub const READY_FD: i32 = 3;

/// The read end of the pipe innoprof writes its ready line to.
pub struct ReadyPipe {
    reader: File,
    /// Read so far (the line may come in pieces).
    text: String,
}

impl ReadyPipe {
    /// Gives `cmd` the pipe's write end as descriptor [`READY_FD`]; the
    /// caller adds `--ready-fd 3` where innoprof's arguments go.
    pub fn attach_to(cmd: &mut Command) -> Self {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills both; close-on-exec, so no other child
        // spawned meanwhile keeps the write end (and end of file) away.
        assert_eq!(
            unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) },
            0
        );
        // SAFETY: both descriptors are new and ours.
        let (reader, writer) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let w = writer.as_raw_fd();
        // SAFETY: only async-signal-safe calls between fork and exec. The
        // pre_exec closure owns `writer`, so the parent's copy closes when
        // `cmd` is dropped.
        unsafe {
            cmd.pre_exec(move || {
                let _keep = &writer;
                let ok = if w == READY_FD {
                    libc::fcntl(w, libc::F_SETFD, 0)
                } else {
                    libc::dup2(w, READY_FD)
                };
                if ok < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self {
            reader,
            text: String::new(),
        }
    }

    /// Blocks (up to 60 s) until innoprof says it is attached; panics with
    /// its stderr if it closes the descriptor or exits first.
    pub fn wait(&mut self, child: &mut Child, stderr_path: &Path) -> Ready {
        let stderr = || std::fs::read_to_string(stderr_path).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 4096];
        loop {
            if let Some((line, _)) = self.text.split_once('\n') {
                return parse_line(line);
            }
            match self.reader.read(&mut buf) {
                Ok(0) => {
                    let status = child.wait().unwrap();
                    panic!(
                        "innoprof ({status}) closed --ready-fd without attaching (read {:?}): {}",
                        self.text,
                        stderr()
                    );
                }
                Ok(n) => self.text.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(
                        Instant::now() < deadline,
                        "innoprof never said it was attached: {}",
                        stderr()
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("reading --ready-fd: {e}"),
            }
        }
    }
}
