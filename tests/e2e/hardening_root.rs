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

    let err = innoprof::target::rootfs::open_mapped_by_path(fx.pid, path(&exe))
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

/// Issue 55, item 3: a section header is the file's word. A copy of a
/// binary whose `.eh_frame` and `.debug_frame` headers point at a sparse
/// hole appended to the file (`truncate -s +2G`: no disk used) made root
/// innoprof copy the hole into memory (2.1 GB resident for 2 GiB, held to
/// the end). The table is refused (it is larger than any real one and
/// outside every loaded segment), the file's frames fall back to frame
/// pointers, and innoprof's peak RSS stays what it is on the unmodified
/// binary.
#[test]
fn unwind_tables_in_a_sparse_hole_are_not_read() {
    let _k = kernel_lock();
    let work = tempfile::tempdir().unwrap();
    let plain = work.path().join("spin");
    std::fs::copy(spin_binary(), &plain).unwrap();
    let holed = with_sections_in_a_hole(&plain, work.path(), HOLE);
    assert!(allocated_bytes(&holed) < 64 << 20, "the hole takes no disk");

    let (normal, _) = record_cpu_peak_kib(&plain);
    let (peak, rec) = record_cpu_peak_kib(&holed);
    eprintln!("innoprof peak RSS: {normal} KiB on the binary, {peak} KiB on its holed copy");
    assert!(
        peak < PEAK_KIB,
        "peak RSS {peak} KiB on the holed copy (normal {normal} KiB)"
    );
    let s = rec.summary();
    let unwind = &s.cpu.as_ref().expect("a CPU profile").unwind;
    let file = unwind
        .files
        .iter()
        .find(|f| f.path == path(&holed))
        .unwrap_or_else(|| panic!("{unwind:?}"));
    assert_eq!(file.rows, 0, "{file:?}");
    let error = file.error.as_deref().unwrap_or_default();
    assert!(
        error.starts_with("no usable .eh_frame: section .eh_frame "),
        "{error}"
    );
    // Its frames are still named (from the sample's own address).
    assert!(rec.file("oncpu.folded").contains("spin_hot"));
}

/// The hole appended after the file's data.
const HOLE: u64 = 2 << 30;
/// innoprof's peak RSS recording the spin fixture: 16-17 MiB on the
/// unmodified binary and, since the fix, on its holed copy (2.0 GiB before
/// it; debug build, 2026-11-29). The bound leaves room for noise and stays
/// far below any copy of the hole.
const PEAK_KIB: u64 = 64 << 10;

/// A copy of `binary` with a `.debug_frame` added and both it and
/// `.eh_frame` pointed at a `hole`-byte sparse hole appended to the file.
fn with_sections_in_a_hole(binary: &Path, dir: &Path, hole: u64) -> PathBuf {
    let frame = dir.join("debug_frame");
    std::fs::write(&frame, [0u8; 64]).unwrap();
    let holed = dir.join("spin-holed");
    let add = format!(".debug_frame={}", frame.display());
    run(
        "objcopy",
        &["--add-section", &add, path(binary), path(&holed)],
    );
    let end = std::fs::metadata(&holed).unwrap().len();
    let mut data = std::fs::read(&holed).unwrap();
    for name in [".eh_frame", ".debug_frame"] {
        let at = section_header(&data, name);
        data[at + 0x18..at + 0x20].copy_from_slice(&end.to_le_bytes());
        data[at + 0x20..at + 0x28].copy_from_slice(&hole.to_le_bytes());
    }
    std::fs::write(&holed, &data).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&holed)
        .unwrap();
    f.set_len(end + hole).unwrap();
    chmod(&holed, 0o755);
    holed
}

/// Where the ELF64 section header of `name` starts in `data`.
fn section_header(data: &[u8], name: &str) -> usize {
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, entsize, count, strndx) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let names = u64_at(shoff + strndx * entsize + 0x18);
    (0..count)
        .map(|i| shoff + i * entsize)
        .find(|&h| {
            let at = names + u32_at(h);
            data[at..].split(|b| *b == 0).next() == Some(name.as_bytes())
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Bytes of disk the file takes.
fn allocated_bytes(file: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(file).unwrap().blocks() * 512
}

/// Records the spin fixture run from `binary` (CPU samples: its unwind
/// rows are built), and innoprof's peak RSS in KiB, from the kernel's
/// accounting of that one child (`wait4`).
fn record_cpu_peak_kib(binary: &Path) -> (u64, Recording) {
    let args: Vec<String> = ["hot", "1", "1500", "10", "20"].map(String::from).to_vec();
    let mut fx = Fixture::spawn_with(binary, &args);
    let pid = fx.pid.to_string();
    let kept = tempfile::tempdir().unwrap();
    let mut rec = Recording::start_env(
        &[
            "--pid",
            &pid,
            "--force",
            "--probes",
            "none",
            "--duration",
            "3s",
        ],
        // No rows kept from an earlier run: this one builds them.
        &[
            (
                "INNOPROF_RUN_DIR",
                kept.path().join("run").to_str().unwrap(),
            ),
            (
                "INNOPROF_CACHE_DIR",
                kept.path().join("kept").to_str().unwrap(),
            ),
        ],
    );
    rec.wait_attached();
    fx.run_calls();
    let mut stdout = String::new();
    std::io::Read::read_to_string(rec.child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(rec.child.id() as i32, &mut status, 0, &mut usage) };
    fx.exit();
    assert_eq!(waited, rec.child.id() as i32);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "innoprof: {status:#x} {}",
        rec.stderr()
    );
    (usage.ru_maxrss as u64, rec)
}
