//! Servers "in containers" without a container runtime: a real mysqld
//! started by `unshare --mount --pid --fork` (util-linux) in its own mount
//! and PID namespaces, a host directory bind-mounted (privately) at a path
//! every such server shares, and in a cgroup v2 directory of its own. What
//! innoprof must cope with in docker or Kubernetes is all there: a datadir
//! path that means another directory in each namespace, a socket reached
//! only through the server's root, a PID that is 1 inside, a cgroup.
//! Everything made here is undone on drop, on failure too.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::repo_root;

/// A cgroup v2 directory the test made, removed (once empty) on drop.
pub struct Cgroup {
    pub dir: PathBuf,
    /// As /proc/PID/cgroup shows it: the path under the v2 mount.
    pub path: String,
}

impl Cgroup {
    /// `innoprof-test-<our pid>-<name>` under the cgroup v2 mount (the
    /// unified hierarchy of a hybrid host, or /sys/fs/cgroup itself).
    pub fn new(name: &str) -> Self {
        let root = cgroup2_mount().expect("a cgroup v2 mount (see /proc/self/mountinfo)");
        let leaf = format!("innoprof-test-{}-{name}", std::process::id());
        let dir = root.join(&leaf);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self {
            dir,
            path: format!("/{leaf}"),
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // rmdir fails while a process is still in it (exiting): retry a
        // moment; a cgroup is never removed with anything inside.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Where cgroup v2 is mounted, from /proc/self/mountinfo.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| PathBuf::from(left.split_whitespace().nth(4).unwrap()))
    })
}

/// A real server in its own mount and PID namespaces and cgroup.
pub struct ContainedServer {
    /// Its PID as the host sees it.
    pub pid: u32,
    /// The host directory bound at `inside` (data/, tmp/, mysql.sock).
    pub host_dir: PathBuf,
    /// The path the server is given: the same for every such server.
    pub inside: PathBuf,
    name: String,
    unshare: Option<Child>,
    cgroup: String,
}

impl ContainedServer {
    /// Starts server `name` (fetched by scripts/servers.sh) on the
    /// datadir `host_dir/data`, seen by the server as `inside/data`, in
    /// `cgroup`; waits until it answers SQL on its socket.
    pub fn start(name: &str, host_dir: &Path, inside: &Path, cgroup: &Cgroup) -> Self {
        let mut s = Self {
            pid: 0,
            host_dir: host_dir.to_path_buf(),
            inside: inside.to_path_buf(),
            name: name.to_string(),
            unshare: None,
            cgroup: cgroup.dir.join("cgroup.procs").display().to_string(),
        };
        s.start_again();
        s
    }

    /// Starts it (again) in fresh namespaces, the same directory bound at
    /// the same path, in the same cgroup.
    pub fn start_again(&mut self) {
        let out = Command::new(repo_root().join("scripts/servers.sh"))
            .args(["path", &self.name])
            .output()
            .unwrap();
        assert!(out.status.success(), "{} is not fetched", self.name);
        let binary = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        // <dist>/bin/mysqld, its libraries in <dist>/libs.
        let dist = binary.parent().unwrap().parent().unwrap().to_path_buf();
        let _ = std::fs::remove_file(self.host_dir.join("mysql.sock"));
        std::fs::create_dir_all(self.host_dir.join("tmp")).unwrap();
        let inside = self.inside.display().to_string();
        // In the new namespaces: into the cgroup (`0`: the writer itself),
        // the bind mount (private: the host never sees it, and it goes
        // with the namespace), then the server as the namespace's PID 1.
        let script = r#"echo 0 > "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@""#;
        let child = Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--propagation", "private"])
            .args(["sh", "-c", script, "sh", &self.cgroup])
            .arg(&self.host_dir)
            .arg(&self.inside)
            .arg(&binary)
            .args([
                "--no-defaults".to_string(),
                format!("--basedir={}", dist.display()),
                format!("--datadir={inside}/data"),
                format!("--tmpdir={inside}/tmp"),
                format!("--socket={inside}/mysql.sock"),
                format!("--pid-file={inside}/mysqld.pid"),
                format!("--log-error={inside}/error.log"),
                // The network namespace is the host's: no port to clash.
                "--skip-networking".into(),
                "--user=root".into(),
                "--innodb-buffer-pool-size=128M".into(),
            ])
            .env("LD_LIBRARY_PATH", dist.join("libs"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare (util-linux)");
        let unshare = child.id();
        self.unshare = Some(child);
        self.pid = self.wait_for(
            || child_of(unshare).filter(|&p| comm(p) == "mysqld"),
            "mysqld",
        );
        let dir = self.host_dir.clone();
        self.wait_for(|| answers(&dir).then_some(()), "its socket");
    }

    /// Waits up to 60 s for `f`, failing with the server's error log.
    fn wait_for<T>(&mut self, mut f: impl FnMut() -> Option<T>, what: &str) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = f() {
                return v;
            }
            let exited = self.unshare.as_mut().unwrap().try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.host_dir.join("error.log")).unwrap_or_default();
                panic!(
                    "{} in {}: no {what} ({exited:?}):\n{log}",
                    self.name,
                    self.host_dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The SQL client on its socket (scripts/servers.sh's, as root).
    pub fn client(&self, args: &[&str]) -> Command {
        client(&self.host_dir, args)
    }

    /// Runs `script` in a background client (killed on drop).
    pub fn sql_background(&self, script: &str) -> crate::Background {
        let mut cmd = self.client(&["-N", "--silent"]);
        cmd.stdin(Stdio::piped());
        let mut bg = crate::Background::spawn(cmd);
        let mut stdin = bg.child.stdin.take().unwrap();
        let script = script.to_string();
        std::thread::spawn(move || {
            let _ = stdin.write_all(script.as_bytes());
        });
        bg
    }

    /// Kills the server (SIGKILL, by its host PID) and waits until its
    /// namespace is gone (the bind mount with it).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.unshare.take() {
            // SAFETY: kill(2) on the server this helper started.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ContainedServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `SELECT 1` over the socket in `dir`, on the host side of the bind.
fn answers(dir: &Path) -> bool {
    dir.join("mysql.sock").exists()
        && client(dir, &["-e", "select 1"])
            .status()
            .is_ok_and(|s| s.success())
}

/// The SQL client on the socket in `dir` (scripts/servers.sh's, as root).
fn client(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(repo_root().join("scripts/servers.sh"));
    cmd.arg("client")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// A child of `parent`, from the host's /proc.
fn child_of(parent: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}
