//! Issue 55, items 1-2: root's SQL password never reaches a process an
//! ordinary user runs. The attacker (uid 65534 here) runs a fake MySQL
//! server under the name `mysqld` (tests/support/bin/fake_mysqld.rs) in a
//! data directory of her own, from her own copy of the binary or from a
//! root-owned one, and asks for the password in each of three ways
//! (caching_sha2 full authentication, a native-password nonce of her
//! choosing, a switch to mysql_clear_password). Root's option file holds a
//! canary password. Whatever innoprof is asked to do (`record -p`, the
//! automatic PID, `serve --all`, `serve` following a restart into a
//! look-alike mounted over the real datadir's path), the fake receives
//! nothing; trusted on purpose with `--trust-user`, it receives the canary,
//! which shows the fake would tell.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use innoprof_e2e::*;

const NOBODY: u32 = 65534;
const CANARY: &str = "CANARY123";
const MODES: [&str; 3] = ["sha2", "native", "clear"];

/// The tests here list the host's servers: one at a time.
static HOST: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    HOST.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who owns the fake's executable.
#[derive(Clone, Copy, Debug)]
enum ExeOwner {
    /// Her own copy.
    Attacker,
    /// A root-owned binary she runs (the real mariadbd under LD_PRELOAD).
    Root,
}

/// A fake `mysqld` run by nobody, logging what clients send it.
struct Fake {
    child: Child,
    pid: u32,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fake {
    fn start(mode: &str, owner: ExeOwner) -> Self {
        Self::start_in(mode, owner, None)
    }

    /// `over`: a directory (another server's datadir) she mounts her own
    /// data directory over, in a user and mount namespace of her own, and
    /// runs in.
    fn start_in(mode: &str, owner: ExeOwner, over: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        let (bin, data) = (dir.path().join("bin"), dir.path().join("data"));
        std::fs::create_dir(&bin).unwrap();
        std::fs::create_dir(&data).unwrap();
        let exe = bin.join("mysqld");
        std::fs::copy(env!("CARGO_BIN_EXE_fake_mysqld"), &exe).unwrap();
        chmod(&exe, 0o755);
        if let ExeOwner::Attacker = owner {
            std::os::unix::fs::chown(&exe, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY)).unwrap();
        chmod(&data, 0o700);
        let cwd = over.unwrap_or(&data);
        let socket = cwd.join("mysql.sock");
        let log = data.join("received.log");
        let serve = format!(
            "exec {} --socket {} --log {} --mode {mode}",
            exe.display(),
            socket.display(),
            log.display()
        );
        let script = match over {
            Some(target) => format!(
                "mount --bind {} {} && cd {} && {serve}",
                data.display(),
                target.display(),
                target.display()
            ),
            None => serve,
        };
        let mut cmd = Command::new("setpriv");
        cmd.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
        ]);
        if over.is_some() {
            cmd.args(["unshare", "--user", "--map-root-user", "--mount"]);
        }
        let child = cmd
            .args(["sh", "-c", &script])
            .current_dir(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut fake = Self {
            child,
            pid,
            log,
            _dir: dir,
        };
        // Serving once its socket exists (seen from its own root).
        let reach = PathBuf::from(format!("/proc/{pid}/root{}", socket.display()));
        fake.wait_until("its socket", || {
            reach.exists() && comm(pid).as_deref() == Some("mysqld")
        });
        fake
    }

    fn wait_until(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !done() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the fake server exited ({status}) before {what}");
            }
            assert!(Instant::now() < deadline, "no {what} within 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What clients sent it.
    fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn assert_untouched(&self, how: &str) {
        let got = self.received();
        assert!(
            !got.contains(CANARY),
            "{how}: the canary reached the fake: {got}"
        );
        assert!(got.is_empty(), "{how}: innoprof talked to the fake: {got}");
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        // Its process group: sh exec'd it, unshare forked it.
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.pid.to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A home whose `~/.my.cnf` (root's, 0600) holds the canary as root's
/// password: what the default option files give innoprof.
fn home_with_canary() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let cnf = home.path().join(".my.cnf");
    std::fs::write(&cnf, format!("[client]\nuser=root\npassword={CANARY}\n")).unwrap();
    chmod(&cnf, 0o600);
    home
}

fn innoprof_as_root(home: &Path, args: &[&str]) -> Output {
    Command::new(innoprof())
        .args(args)
        .env("HOME", home)
        .env_remove("MYSQL_PWD")
        .output()
        .unwrap()
}

/// `record -p` refuses each fake, in each auth mode, from either binary,
/// in one line naming the user and the flag, before reading anything of
/// it or logging in; no output directory is made.
#[test]
fn record_pid_refuses_a_server_another_user_runs() {
    let _one = one_at_a_time();
    let home = home_with_canary();
    for owner in [ExeOwner::Attacker, ExeOwner::Root] {
        for mode in MODES {
            let fake = Fake::start(mode, owner);
            let out_dir = home.path().join(format!("out-{mode}-{owner:?}"));
            let out = innoprof_as_root(
                home.path(),
                &[
                    "record",
                    "-p",
                    &fake.pid.to_string(),
                    "--probes",
                    "none",
                    "--duration",
                    "1",
                    "--out",
                    out_dir.to_str().unwrap(),
                ],
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{mode} {owner:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains(&format!("pid {} runs as nobody (uid {NOBODY})", fake.pid))
                    && stderr.contains("--trust-user nobody"),
                "{stderr}"
            );
            assert!(!out_dir.exists());
            fake.assert_untouched(&format!("record -p, {mode}, {owner:?}"));
        }
    }
}

/// Trusted on purpose, the same fake gets the canary: the fake tells, so
/// the refusals above mean something.
#[test]
fn a_user_trusted_on_purpose_gets_the_login() {
    let _one = one_at_a_time();
    let home = home_with_canary();
    let fake = Fake::start("sha2", ExeOwner::Attacker);
    let out_dir = home.path().join("out");
    let out = innoprof_as_root(
        home.path(),
        &[
            "record",
            "-p",
            &fake.pid.to_string(),
            "--trust-user",
            "nobody",
            "--probes",
            "none",
            "--duration",
            "1",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let got = fake.received();
    assert!(got.contains(CANARY), "{got}\n{stderr}");
    // Root by its uid first, without the password; then the password.
    let logins: Vec<&str> = got
        .split("CONNECT")
        .filter(|s| s.contains("RESPONSE"))
        .collect();
    assert_eq!(logins.len(), 2, "{got}");
    assert!(
        !logins[0].contains(CANARY) && logins[1].contains(CANARY),
        "{got}"
    );
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// Without `-p`, when the only "server" on the host is hers (a restart
/// window), innoprof says so and picks nothing.
#[test]
fn the_automatic_pid_passes_over_a_server_another_user_runs() {
    let _one = one_at_a_time();
    let home = home_with_canary();
    let fakes: Vec<Fake> = MODES
        .iter()
        .map(|m| Fake::start(m, ExeOwner::Root))
        .collect();
    let out = innoprof_as_root(
        home.path(),
        &[
            "record",
            "--probes",
            "none",
            "--duration",
            "1",
            "--out",
            "/nonexistent/x",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("using pid") {
        // A trusted server of some other test run shares this host: the
        // choice is still never hers.
        assert!(fakes
            .iter()
            .all(|f| !stderr.contains(&format!("using pid {} ", f.pid))));
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("no trusted mysqld or mariadbd process runs on this host"),
            "{stderr}"
        );
    }
    for f in &fakes {
        assert!(
            stderr.contains(&format!("{} mysqld", f.pid)) && stderr.contains("runs as nobody"),
            "pid {} not said: {stderr}",
            f.pid
        );
        f.assert_untouched("automatic pid");
    }
}

/// `serve --all` passes over her servers, says why once each, and never
/// logs in to them.
#[test]
fn serve_all_passes_over_servers_another_user_runs() {
    let _one = one_at_a_time();
    let home = home_with_canary();
    let fakes: Vec<Fake> = MODES
        .iter()
        .map(|m| Fake::start(m, ExeOwner::Attacker))
        .collect();
    let home_env = format!("HOME={}", home.path().display());
    let serve = Serve::start_under(&["env", &home_env], &["--all"]);
    for f in &fakes {
        let needle = format!("cannot attach to {} mysqld", f.pid);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !serve.stderr().contains(&needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?}: {}",
                serve.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let said = serve.stderr();
    assert!(said.contains("runs as nobody"), "{said}");
    for f in &fakes {
        f.assert_untouched("serve --all");
        let needle = format!("cannot attach to {} mysqld", f.pid);
        assert_eq!(said.matches(&needle).count(), 1, "said once: {said}");
    }
    // No series of hers either.
    let metrics = serve.scrape();
    assert!(!metrics.contains("innoprof_target_info{"), "{metrics}");
}

/// `serve -p` follows the real server across a restart by its datadir's
/// identity: while it is down, her look-alike, mounted over the datadir's
/// path in a namespace of her own, is not followed into (nothing sent),
/// and the real server, back, is.
#[test]
fn serve_does_not_follow_a_restart_into_a_look_alike() {
    let _one = one_at_a_time();
    let _k = kernel_lock();
    let home = home_with_canary();
    let mut server = Server::start("mariadb-10.2.11", &[]);
    let datadir = server.dir.path().join("data");
    let home_env = format!("HOME={}", home.path().display());
    let serve = Serve::start_under(&["env", &home_env], &["--pid", &server.pid.to_string()]);
    server.stop();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !serve.stderr().contains("waiting for the server in") {
        assert!(Instant::now() < deadline, "{}", serve.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    // She needs to reach the path to mount over it, as /var/lib/mysql is.
    chmod(server.dir.path(), 0o755);
    let fake = Fake::start_in("sha2", ExeOwner::Root, Some(&datadir));
    let cwd = std::fs::read_link(format!("/proc/{}/cwd", fake.pid)).unwrap();
    assert_eq!(
        cwd, datadir,
        "the look-alike's datadir path is the real one"
    );
    server.start_again();
    let back = format!("is back as pid {}", server.pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !serve.stderr().contains(&back) {
        assert!(Instant::now() < deadline, "no {back:?}: {}", serve.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !serve.stderr().contains(&format!("pid {}", fake.pid)),
        "{}",
        serve.stderr()
    );
    fake.assert_untouched("serve following a restart");
}
