//! What the kernel means by the errno of a failed uprobe attach
//! (`perf_event_open` on the uprobe PMU, `BPF_LINK_CREATE` of a
//! uprobe_multi link), and whether trying again can help.
//!
//! Checked on 6.18.44 (this VM) with all three attach paths (uprobe,
//! uretprobe, uprobe_multi): a refused instruction gives 524 (the kernel's
//! internal ENOTSUPP, which strerror calls "Unknown error 524"), an offset
//! past the end of the file EINVAL, a missing file ENOENT.

use std::time::Duration;

/// The kernel's internal ENOTSUPP (include/linux/errno.h): not in libc.
pub const ENOTSUPP: i32 = 524;

/// An errno, named and explained for a one-line message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachErrno {
    pub errno: i32,
    /// `EBUSY`, or `errno N` when unknown.
    pub name: &'static str,
    /// What it means for a uprobe attach, with what to do where there is something.
    pub meaning: &'static str,
    /// Trying again shortly may succeed (see `retry_delay`).
    pub transient: bool,
}

impl std::fmt::Display for AttachErrno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.name == "errno" {
            write!(f, "errno {}: {}", self.errno, self.meaning)
        } else {
            write!(f, "{} ({}): {}", self.name, self.errno, self.meaning)
        }
    }
}

/// Names and explains `errno` as returned by a uprobe attach.
pub fn explain(errno: i32) -> AttachErrno {
    let (name, meaning, transient) = match errno {
        ENOTSUPP => (
            "ENOTSUPP",
            "the kernel refuses a uprobe on the instruction at this offset (lock or es/cs/ss/ds \
             prefix, an opcode it will not single-step, a load of %ss, a 66-prefixed branch); \
             `innoprof probes` shows each symbol's probed instruction",
            false,
        ),
        libc::ENOEXEC => (
            "ENOEXEC",
            "the kernel could not decode an instruction at this offset (not the start of an \
             instruction, or not code)",
            false,
        ),
        libc::EINVAL => (
            "EINVAL",
            "the kernel rejected the request: the offset is past the end of the file, a probe at \
             the same offset uses another reference counter, or (uprobe_multi) the kernel lacks \
             that link type (before 6.6)",
            false,
        ),
        libc::EBUSY => (
            "EBUSY",
            "the probe point is busy (another tool's uprobe there is being set up or torn down)",
            true,
        ),
        libc::EINTR => ("EINTR", "interrupted by a signal", true),
        libc::EAGAIN => (
            "EAGAIN",
            "the kernel asked to try again (a uprobe there was being removed)",
            true,
        ),
        libc::ENOENT => (
            "ENOENT",
            "the binary is gone from that path (deleted or replaced since the server started)",
            false,
        ),
        libc::EPERM | libc::EACCES => (
            if errno == libc::EPERM {
                "EPERM"
            } else {
                "EACCES"
            },
            "not permitted: needs root (CAP_BPF and CAP_PERFMON), perf_event_paranoid, or the \
             kernel is locked down",
            false,
        ),
        libc::EEXIST => (
            "EEXIST",
            "already attached: the same program is on this point already (an offset given twice)",
            false,
        ),
        libc::E2BIG => (
            "E2BIG",
            "the request is larger than this kernel accepts (too many offsets in one uprobe_multi \
             link, or an attribute size it does not know): attach in smaller batches",
            false,
        ),
        libc::ENOSPC => (
            "ENOSPC",
            "the kernel has no room for another probe or link of this kind",
            false,
        ),
        libc::ENOMEM => (
            "ENOMEM",
            "the kernel could not allocate memory for the probe (or the locked-memory limit for BPF)",
            false,
        ),
        libc::EMFILE | libc::ENFILE => (
            if errno == libc::EMFILE {
                "EMFILE"
            } else {
                "ENFILE"
            },
            "out of file descriptors (each per-probe link holds one): raise `ulimit -n`",
            false,
        ),
        libc::ENODEV => (
            "ENODEV",
            "the kernel has no uprobe event source (CONFIG_UPROBE_EVENTS)",
            false,
        ),
        libc::EOPNOTSUPP => (
            "EOPNOTSUPP",
            "this kernel does not support the attach type (uprobe_multi, or a uprobe on this \
             kind of process)",
            false,
        ),
        libc::ESRCH => ("ESRCH", "the target process is gone", false),
        libc::EBADF => (
            "EBADF",
            "the BPF program or file descriptor was closed during the attach",
            false,
        ),
        libc::EFAULT => (
            "EFAULT",
            "the kernel could not read the attach request (an innoprof bug)",
            false,
        ),
        libc::ENOSYS => (
            "ENOSYS",
            "the kernel lacks the system call (perf events or BPF compiled out)",
            false,
        ),
        _ => ("errno", "unexpected error from the kernel", false),
    };
    AttachErrno {
        errno,
        name,
        meaning,
        transient,
    }
}

/// Whether an attach that failed with `errno` may succeed if tried again.
pub fn is_transient(errno: i32) -> bool {
    explain(errno).transient
}

/// Attempts at one attach, the first included.
pub const ATTEMPTS: u32 = 4;

/// How long to wait before retry `attempt` (1-based) of an attach that
/// failed with `errno`; `None`: give up (not transient, or out of tries).
/// 10, 40, 160 ms: a concurrent uprobe teardown waits for an RCU grace
/// period, tens to hundreds of ms on a busy 2-core host.
pub fn retry_delay(errno: i32, attempt: u32) -> Option<Duration> {
    (is_transient(errno) && (1..ATTEMPTS).contains(&attempt))
        .then(|| Duration::from_millis(10 << (2 * (attempt - 1))))
}

/// The errno inside an error (an `io::Error` anywhere in its `source`
/// chain, as libbpf-rs and `thiserror` wrappers keep it).
pub fn errno_in(err: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(code) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
        {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

/// `err`'s message with the errno named and explained when there is one:
/// "`perf_event_open` failed: ENOTSUPP (524): the kernel refuses …".
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    match errno_in(err) {
        Some(errno) => format!("{err}: {}", explain(errno)),
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_transience() {
        assert_eq!(explain(ENOTSUPP).name, "ENOTSUPP");
        assert!(explain(ENOTSUPP).meaning.contains("lock"));
        assert_eq!(explain(libc::EINVAL).name, "EINVAL");
        for e in [libc::EBUSY, libc::EINTR, libc::EAGAIN] {
            assert!(is_transient(e), "{e}");
        }
        for e in [
            ENOTSUPP,
            libc::EINVAL,
            libc::ENOENT,
            libc::EPERM,
            libc::EEXIST,
            libc::E2BIG,
            libc::ENOSPC,
            libc::EMFILE,
        ] {
            assert!(!is_transient(e), "{e}");
            assert_ne!(explain(e).name, "errno", "{e} unnamed");
        }
        assert_eq!(
            explain(9999).to_string(),
            "errno 9999: unexpected error from the kernel"
        );
        assert!(explain(libc::EBUSY).to_string().starts_with("EBUSY (16): "));
    }

    #[test]
    fn retries_only_transient_errors_a_few_times() {
        assert_eq!(retry_delay(libc::EBUSY, 1), Some(Duration::from_millis(10)));
        assert_eq!(
            retry_delay(libc::EAGAIN, 3),
            Some(Duration::from_millis(160))
        );
        assert_eq!(retry_delay(libc::EBUSY, ATTEMPTS), None);
        assert_eq!(retry_delay(ENOTSUPP, 1), None);
        assert_eq!(retry_delay(libc::EINTR, 0), None);
    }

    /// An error wrapping a syscall's: the errno is in the source.
    #[derive(Debug, thiserror::Error)]
    #[error("`perf_event_open` failed")]
    struct Syscall {
        #[source]
        io_error: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("attach failed")]
    struct Outer(#[source] Syscall);

    #[test]
    fn finds_the_errno_in_a_source_chain() {
        let err = Outer(Syscall {
            io_error: std::io::Error::from_raw_os_error(ENOTSUPP),
        });
        assert_eq!(errno_in(&err), Some(ENOTSUPP));
        let text = describe(&err.0);
        assert!(
            text.starts_with("`perf_event_open` failed: ENOTSUPP (524): the kernel refuses"),
            "{text}"
        );
        let plain = std::io::Error::other("no errno");
        assert_eq!(errno_in(&plain), None);
    }
}
