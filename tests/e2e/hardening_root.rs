//! Issue 14, item 2: innoprof reads only the files a target runs and maps,
//! as the target sees them. Each target here is the static fixture run by
//! an unprivileged user (uid 65534) in a user-namespace chroot it owns, so
//! that user can plant what it likes inside; the host files it points at
//! are root-only (0600), and an inotify watch on them shows whether
//! root-innoprof ever opened one.

use std::path::{Path, PathBuf};
use std::process::Command;

use innoprof_e2e::*;

const NOBODY: &str = "65534";
const A: u64 = 1000;
const B: u64 = 500;

/// A chroot in a fresh directory: `dir/r` is the root, owned by nobody;
/// `dir` itself is root's (where an escaping `../../x` lands).
struct Jail {
    dir: tempfile::TempDir,
}

impl Jail {
    /// The jail with `binary` as its `/bin/fixture`.
    fn with(binary: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let jail = Self { dir };
        std::fs::create_dir_all(jail.root().join("bin")).unwrap();
        std::fs::copy(binary, jail.root().join("bin/fixture")).unwrap();
        // nobody must reach the root to chroot into it.
        chmod(jail.dir.path(), 0o755);
        run(
            "chown",
            &["-R", &format!("{NOBODY}:{NOBODY}"), path(&jail.root())],
        );
        jail
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("r")
    }

    /// The fixture, run by nobody chrooted in a user namespace it owns.
    fn spawn(&self) -> Fixture {
        let root = format!("--root={}", self.root().display());
        let args: Vec<String> = [
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            &root,
            "/bin/fixture",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([A, B, 0, 0, 0].iter().map(u64::to_string))
        .collect();
        Fixture::spawn_with(Path::new("/usr/bin/setpriv"), &args)
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command as the jail's owner: what the attacker can do.
fn as_nobody(args: &[&str]) {
    let who = [
        format!("--reuid={NOBODY}"),
        format!("--regid={NOBODY}"),
        "--clear-groups".to_string(),
    ];
    let mut all: Vec<&str> = who.iter().map(String::as_str).collect();
    all.extend_from_slice(args);
    run("setpriv", &all);
}

/// A root-only host file: an ELF (another program), so whatever opened it
/// would find something to parse.
struct Secret {
    path: PathBuf,
    watch: i32,
}

impl Secret {
    fn at(path: PathBuf) -> Self {
        std::fs::copy(spin_binary(), &path).unwrap();
        chmod(&path, 0o600);
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: plain syscalls on a path we own; results checked.
        let watch = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(watch >= 0);
        let wd =
            unsafe { libc::inotify_add_watch(watch, c.as_ptr(), libc::IN_OPEN | libc::IN_ACCESS) };
        assert!(wd >= 0, "{}", std::io::Error::last_os_error());
        Self { path, watch }
    }

    /// Whether anything opened or read it since the watch was set.
    fn touched(&self) -> bool {
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a buffer of the size passed.
        let n = unsafe { libc::read(self.watch, buf.as_mut_ptr().cast(), buf.len()) };
        n > 0
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        unsafe { libc::close(self.watch) };
        let _ = std::fs::remove_file(&self.path);
    }
}

fn probes(pid: u32) -> String {
    let pid = pid.to_string();
    let out = run_innoprof(&[
        "probes",
        "--pid",
        &pid,
        "--force",
        // The jailed user is the attacker, trusted here on purpose: what
        // innoprof reads of a target it does attach to is under test.
        "--trust-user",
        NOBODY,
        "--probe",
        "fixture_counted",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "probes failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// /proc shows a chrooted process's executable by innoprof's path to it
/// (`/tmp/…/r/bin/fixture`); the jail's owner plants that path inside the
/// jail as an absolute symlink to a root-only host file, which
/// `/proc/PID/root/<path>` used to follow. innoprof still reads and probes
/// the file the process runs (exact counts), never opens the host file,
/// and the by-path route (resolving the name inside the jail, where the
/// owner mounted a symlink over it) refuses with one clear line.
#[test]
fn exe_path_planted_as_a_symlink_is_not_followed() {
    let _k = kernel_lock();
    let jail = Jail::with(&static_fixture_binary());
    let mut fx = jail.spawn();
    let secret = Secret::at(PathBuf::from(format!(
        "/root/innoprof-h14-secret-{}",
        std::process::id()
    )));
    let exe = jail.root().join("bin/fixture");
    let planted = jail.root().join(exe.strip_prefix("/").unwrap());
    as_nobody(&["mkdir", "-p", path(planted.parent().unwrap())]);
    as_nobody(&["ln", "-s", path(&secret.path), path(&planted)]);
    // In its own mount namespace the owner also mounts over /bin, so the
    // running file's name now leads to a symlink, and that to a file in
    // the jail: the same name, not the file running.
    let decoy_dir = jail.root().join("root");
    as_nobody(&["mkdir", "-p", path(&decoy_dir)]);
    let decoy = decoy_dir.join(secret.path.file_name().unwrap());
    as_nobody(&["cp", "/bin/true", path(&decoy)]);
    let bin = jail.root().join("bin");
    let overmount = format!(
        "mount -t tmpfs none {0} && ln -s {1} {0}/fixture",
        bin.display(),
        secret.path.display()
    );
    let pid_arg = fx.pid.to_string();
    as_nobody(&[
        "nsenter",
        "-t",
        &pid_arg,
        "-U",
        "-m",
        "--preserve-credentials",
        "sh",
        "-c",
        &overmount,
    ]);

    let listed = probes(fx.pid);
    assert!(
        listed.contains(&format!("binary:   {}\n", exe.display())),
        "{listed}"
    );
    assert!(listed.contains("fixture_counted @"), "{listed}");

    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--trust-user",
        NOBODY,
        "--duration",
        "2s",
        "--no-stacks",
        "--probe",
        "fixture_counted",
    ]);
    rec.wait_attached();
    fx.run_calls();
    let (code, _, rec) = rec.finish();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());
    let s = rec.summary();
    assert_eq!(
        probe(&s, "fixture_counted").calls,
        A + B,
        "probed the running file"
    );
    assert_eq!(s.target.binary, path(&exe));

    let err = innoprof::rootfs::open_mapped_by_path(fx.pid, path(&exe))
        .expect_err("the planted name leads to another file")
        .to_string();
    fx.exit();
    assert!(
        err.contains(&format!(
            "{} inside PID {pid}'s root is not the file the process maps",
            exe.display()
        )) && err.contains("refusing to read it")
            && !err.contains('\n'),
        "{err}"
    );
    assert!(
        !secret.touched(),
        "innoprof opened {}",
        secret.path.display()
    );
}

/// `.gnu_debuglink` naming `data` instead of a file name, in a stripped
/// copy of `binary`.
fn with_debuglink(binary: &Path, dir: &Path, data: &[u8]) -> PathBuf {
    let stripped = dir.join("stripped");
    let linked = dir.join("linked");
    run(
        "strip",
        &["--strip-all", "-o", path(&stripped), path(binary)],
    );
    // The section as objcopy writes it: name, NUL, pad to 4, CRC32.
    let mut section = data.to_vec();
    section.push(0);
    while !section.len().is_multiple_of(4) {
        section.push(0);
    }
    section.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    let file = dir.join("section");
    std::fs::write(&file, section).unwrap();
    let add = format!(".gnu_debuglink={}", file.display());
    run(
        "objcopy",
        &["--add-section", &add, path(&stripped), path(&linked)],
    );
    linked
}

/// A debuglink that is a path (absolute, or `..` out of the chroot) is
/// ignored with a note: the file it names is never opened.
#[test]
fn debuglink_that_is_a_path_is_ignored() {
    let work = tempfile::tempdir().unwrap();
    let absolute = PathBuf::from(format!("/root/innoprof-h14-link-{}", std::process::id()));
    for name in [absolute.to_str().unwrap(), "../../x"] {
        let binary = with_debuglink(&static_fixture_binary(), work.path(), name.as_bytes());
        let jail = Jail::with(&binary);
        // `../../x` beside /bin/fixture: `x` next to the jail's root.
        let target = if name.starts_with('/') {
            absolute.clone()
        } else {
            jail.dir.path().join("x")
        };
        let secret = Secret::at(target);
        let fx = jail.spawn();
        let listed = probes(fx.pid);
        fx.exit();
        assert!(
            listed.contains(&format!(
                "note:     ignored .gnu_debuglink {name:?}: not a bare file name"
            )),
            "{listed}"
        );
        assert!(!listed.contains("(from "), "no debug file used: {listed}");
        assert!(
            !secret.touched(),
            "innoprof opened {}",
            secret.path.display()
        );
    }
}

/// A bare debuglink is followed inside the target's root (a normal
/// stripped target still gets its symbols), but the debug file there must
/// not be a symlink: swapped for one to a host file, it is not opened.
#[test]
fn bare_debuglink_is_found_in_the_targets_root_and_never_through_a_symlink() {
    let jail = Jail::with(&static_fixture_binary());
    let bin = jail.root().join("bin");
    let debug = bin.join("fixture.debug");
    let full = static_fixture_binary();
    run("objcopy", &["--only-keep-debug", path(&full), path(&debug)]);
    let stripped = jail.dir.path().join("stripped");
    run(
        "strip",
        &["--strip-all", "-o", path(&stripped), path(&full)],
    );
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run(
        "objcopy",
        &[&link, path(&stripped), path(&bin.join("fixture"))],
    );
    run("chown", &["-R", &format!("{NOBODY}:{NOBODY}"), path(&bin)]);
    let fx = jail.spawn();

    let listed = probes(fx.pid);
    assert!(listed.contains("(from /bin/fixture.debug)"), "{listed}");
    assert!(listed.contains("fixture_counted @"), "{listed}");

    let secret = Secret::at(PathBuf::from(format!(
        "/root/innoprof-h14-debug-{}",
        std::process::id()
    )));
    as_nobody(&["ln", "-sfn", path(&secret.path), path(&debug)]);
    let listed = probes(fx.pid);
    fx.exit();
    assert!(!listed.contains("(from "), "{listed}");
    assert!(
        !secret.touched(),
        "innoprof opened {}",
        secret.path.display()
    );
}
