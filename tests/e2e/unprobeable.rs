//! Functions whose first instruction the kernel refuses a uprobe on
//! (tests/fixture/unprobeable.cc), against the running kernel.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use innoprof::attach::errno;
use innoprof::resolve::placement::kernel_refusal;
use innoprof::resolve::{ElfImage, EntryInsn, SkipReason};
use innoprof_e2e::*;

const N: u64 = 1234;

/// A uprobe on `offset` of `path` through the uprobe PMU, closed at once:
/// the kernel's errno, or `None` when it attached.
fn perf_uprobe(pmu: u32, path: &CString, offset: u64) -> Option<i32> {
    // perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1, 72 bytes):
    // type and size, then config1 (the path) at 56 and config2 (the offset) at 64.
    let mut attr = [0u64; 9];
    attr[0] = u64::from(pmu) | (72 << 32);
    attr[7] = path.as_ptr() as u64;
    attr[8] = offset;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
    // SAFETY: attr outlives the call; the returned fd is closed below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            -1 as libc::pid_t,
            0 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return std::io::Error::last_os_error().raw_os_error();
    }
    // SAFETY: fd was just returned by the kernel and is ours.
    unsafe { libc::close(fd as libc::c_int) };
    None
}

/// The resolver's copy of the kernel's instruction checks agrees with
/// this kernel on every class in the fixture: each refused one fails with
/// ENOTSUPP (524), each accepted one attaches.
#[test]
fn kernel_verdicts_match_the_mirror() {
    let _k = kernel_lock();
    let bin = unprobeable_binary();
    // The kernel checks the instruction when it places the breakpoint in a
    // process mapping the binary: one must run.
    let fx = Fixture::spawn_with(&bin, &["0".to_string()]);
    let pmu: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .expect("uprobe PMU")
        .trim()
        .parse()
        .unwrap();
    let path = CString::new(bin.as_os_str().as_bytes()).unwrap();
    let image = ElfImage::open(&bin).unwrap();
    let (mut checked, mut refused) = (0, 0);
    let mut mismatches = Vec::new();
    for sym in image
        .symbols()
        .iter()
        .filter(|s| s.raw.starts_with("fixture_insn_"))
    {
        let offset = image.file_offset(sym.address).unwrap();
        let bytes = image.bytes_at(sym.address, sym.size as usize).unwrap();
        let predicted = kernel_refusal(bytes);
        let errno = perf_uprobe(pmu, &path, offset);
        match (predicted, errno) {
            (None, None) => {}
            (Some(_), Some(errno::ENOTSUPP)) => refused += 1,
            (p, e) => mismatches.push(format!(
                "{} ({bytes:02x?}): predicted {p:?}, kernel said {}",
                sym.raw,
                e.map_or("ok".to_string(), |e| errno::explain(e).to_string())
            )),
        }
        checked += 1;
    }
    fx.exit();
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    assert_eq!((checked, refused), (31, 19));
}

/// `innoprof probes` shows the move and each refusal with its reason.
#[test]
fn probes_shows_moves_and_refusals() {
    let bin = unprobeable_binary();
    let out = run_innoprof(&[
        "probes",
        "--binary",
        bin.to_str().unwrap(),
        "--probe",
        "fixture_locked",
        "--probe",
        "fixture_locked_loop",
        "--probe",
        "fixture_locked_rsp",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "(push, emulated; moved past `lock inc` (+7 bytes): the kernel refuses the lock prefix)",
        "fixture_locked_loop: first instruction `lock inc`: the kernel refuses the lock prefix; \
         not moved past it: the branch at",
        "fixture_locked_rsp: first instruction `lock add`: the kernel refuses the lock prefix; \
         not moved past it: it uses the stack pointer",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
}

/// A probe moved past a lock prefix counts every call, and times every
/// one (its return probe sits there too); the functions where moving is
/// unsafe are reported with the reason, not a bare attach failure.
#[test]
fn record_counts_past_a_lock_prefix_and_names_refusals() {
    let _k = kernel_lock();
    let bin = unprobeable_binary();
    let mut fx = Fixture::spawn_with(&bin, &[N.to_string()]);
    let pid = fx.pid.to_string();
    let mut rec = Recording::start(&[
        "--pid",
        &pid,
        "--force",
        "--duration",
        "3s",
        "--probe",
        "fixture_locked",
        "--probe",
        "fixture_locked_loop",
        "--probe",
        "fixture_locked_rsp",
        "--probe",
        "fixture_locked*",
    ]);
    rec.wait_attached();
    // The lock ran in fixture_locked and fixture_locked_loop.
    assert_eq!(fx.run_calls(), (2 * N).to_string());
    let (code, stdout, rec) = rec.finish();
    fx.exit();
    assert_eq!(code, Some(0), "stderr: {}", rec.stderr());

    let s = rec.summary();
    let locked = probe(&s, "fixture_locked");
    assert_eq!(locked.status, ProbeStatus::Attached, "{locked:?}");
    assert_eq!(locked.calls, N, "exact call count");
    let timed: u64 = locked.histogram.iter().map(|b| b.count).sum();
    assert_eq!(timed, N, "every return seen");
    let sym = &locked.symbols[0];
    assert_eq!(
        sym.moved.as_deref(),
        Some("moved past `lock inc` (+7 bytes): the kernel refuses the lock prefix")
    );
    assert_eq!(sym.entry, EntryInsn::Push);

    // A probe with some symbols refused attaches the rest and says which.
    let glob = probe(&s, "fixture_locked*");
    assert_eq!(glob.status, ProbeStatus::Attached, "{glob:?}");
    assert_eq!(glob.calls, N);
    let reason = glob.reason.as_deref().unwrap();
    assert!(
        reason
            .starts_with("some symbols refused: fixture_locked_loop: first instruction `lock inc`")
            && reason.contains("fixture_locked_rsp: first instruction `lock add`"),
        "{reason}"
    );
    assert_eq!(glob.skipped[0].reason, SkipReason::Unprobeable, "{glob:?}");

    for (name, why) in [
        ("fixture_locked_loop", "jumps to"),
        ("fixture_locked_rsp", "stack pointer"),
    ] {
        let p = probe(&s, name);
        assert_eq!(p.status, ProbeStatus::AttachFailed, "{p:?}");
        let reason = p.reason.as_deref().unwrap();
        assert!(
            reason.contains("first instruction `lock ") && reason.contains(why),
            "{reason}"
        );
        assert!(!reason.contains("perf_event_open"), "{reason}");
        assert!(
            stdout.contains(&format!("not attached: {name} - {reason}")),
            "{stdout}"
        );
    }
}
