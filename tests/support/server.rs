//! Real servers started by scripts/servers.sh, their SQL clients, and
//! load processes killed with their process group.

use crate::repo_root;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A real server started by scripts/servers.sh in a private temp dir.
pub struct Server {
    pub name: String,
    pub dir: tempfile::TempDir,
    pub pid: u32,
    pub(crate) prepared: std::cell::Cell<bool>,
    /// The first start's extra mysqld options, for `start_again`.
    extra: Vec<String>,
}

impl Server {
    pub fn start(name: &str, extra: &[&str]) -> Self {
        Self::start_under(name, &std::env::temp_dir(), extra)
    }

    /// Like `start`, with the server's directory (datadir, socket) under
    /// `parent`, e.g. on a filesystem of the test's own.
    pub fn start_under(name: &str, parent: &Path, extra: &[&str]) -> Self {
        Self::start_as(name, parent, None, extra)
    }

    /// Like `start`, running `binary` (e.g. a stripped copy of the server)
    /// with the fetched server's basedir and libraries.
    pub fn start_binary(name: &str, binary: &Path) -> Self {
        Self::start_as(name, &std::env::temp_dir(), Some(binary), &[])
    }

    fn start_as(name: &str, parent: &Path, binary: Option<&Path>, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("innoprof-srv-")
            .tempdir_in(parent)
            .unwrap();
        let mut cmd = Command::new(repo_root().join("scripts/servers.sh"));
        if let Some(b) = binary {
            cmd.env("INNOPROF_SERVER_BINARY", b);
        }
        let out = cmd
            .args(["start", name])
            .arg(dir.path())
            .args(extra)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "starting {name} failed");
        let pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("servers.sh prints the pid");
        Self {
            name: name.into(),
            dir,
            pid,
            prepared: false.into(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
        }
    }

    pub fn binary(&self) -> PathBuf {
        std::fs::read_link(format!("/proc/{}/exe", self.pid)).unwrap()
    }

    /// Stops the server as an administrator would (SIGTERM, waits for it).
    pub fn stop(&self) {
        let status = Command::new(repo_root().join("scripts/servers.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Starts the stopped server again on the same datadir (a new pid).
    pub fn start_again(&mut self) {
        let out = Command::new(repo_root().join("scripts/servers.sh"))
            .args(["start", &self.name])
            .arg(self.dir.path())
            .args(&self.extra)
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "starting {} again failed", self.name);
        self.pid = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("servers.sh prints the pid");
    }

    pub fn sql(&self, sql: &str) -> String {
        let out = Command::new(repo_root().join("scripts/servers.sh"))
            .args(["client"])
            .arg(self.dir.path())
            .args(["-N", "-e", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "SQL failed: {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A global status counter, e.g. `Innodb_rows_updated`.
    pub fn status(&self, name: &str) -> u64 {
        let out = self.sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"));
        out.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no status {name}: {out:?}"))
    }

    /// The SQL client reading `script` on its stdin, in the background, in
    /// its own process group: `Background` kills client and all on drop.
    pub fn sql_background(&self, script: &str) -> Background {
        self.sql_background_as("root", script)
    }

    /// [`Self::sql_background`] logged in as `user` (no password).
    pub fn sql_background_as(&self, user: &str, script: &str) -> Background {
        let mut bg = Background::spawn(self.client_reading_stdin(user));
        let mut stdin = bg.child.stdin.take().unwrap();
        let script = script.to_string();
        // A writer thread: the client may stop reading (killed) at any time.
        std::thread::spawn(move || {
            let _ = stdin.write_all(script.as_bytes());
        });
        bg
    }

    /// One connection that runs `script` and then stays open, idle between
    /// statements (an application holding a transaction), until the
    /// returned stdin or the `Background` is dropped.
    pub fn sql_session(&self, script: &str) -> (Background, std::process::ChildStdin) {
        self.sql_session_as("root", script)
    }

    /// [`Self::sql_session`] logged in as `user` (no password).
    pub fn sql_session_as(
        &self,
        user: &str,
        script: &str,
    ) -> (Background, std::process::ChildStdin) {
        let mut bg = Background::spawn(self.client_reading_stdin(user));
        let mut stdin = bg.child.stdin.take().unwrap();
        stdin.write_all(script.as_bytes()).unwrap();
        stdin.flush().unwrap();
        (bg, stdin)
    }

    /// The SQL client, its statements from a pipe, its output discarded.
    fn client_reading_stdin(&self, user: &str) -> Command {
        let mut cmd = Command::new(repo_root().join("scripts/servers.sh"));
        cmd.args(["client"])
            .arg(self.dir.path())
            .arg(format!("--user={user}"))
            .args(["-N", "--silent"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        cmd
    }

    /// A server with one hot row (sysbench's sbtest1 of 1 row), redo and
    /// binlog not flushed at each commit: the undo and purge scenarios
    /// would otherwise be benchmarks of the VM's disk.
    pub fn with_hot_row(name: &str) -> Self {
        let server = Self::start(
            name,
            &["--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0"],
        );
        server.sysbench_ok(&[
            "prepare",
            "oltp_update_non_index",
            "--tables=1",
            "--table-size=1",
        ]);
        server
    }
}

/// A load generator (sysbench, a SQL session) running in its own process
/// group, killed with everything it started when dropped.
pub struct Background {
    pub child: Child,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Self {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn().unwrap();
        Self { child }
    }

    /// Waits for it to exit by itself; returns its stdout.
    pub fn wait_output(mut self) -> String {
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        let _ = self.child.wait();
        out
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the process group we created.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/servers.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}
