//! Checks the capabilities BPF tracing needs before touching anything.

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("missing capabilities {missing}: run innoprof as root, or grant them (`setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep innoprof`)")]
    Missing { missing: String },
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability mask of this process.
fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .unwrap_or(0)
}

/// Whether innoprof may read any process's /proc entries (its binary,
/// maps, memory): CAP_SYS_PTRACE, or CAP_SYS_ADMIN which implies it here.
pub fn can_ptrace() -> bool {
    let caps = effective_caps();
    caps & (1 << CAP_SYS_PTRACE) != 0 || caps & (1 << CAP_SYS_ADMIN) != 0
}

/// Loading BPF and opening uprobe perf events needs CAP_BPF + CAP_PERFMON
/// (or CAP_SYS_ADMIN on its own); reading another process's maps and
/// binary needs CAP_SYS_PTRACE unless it runs as our user.
pub fn check() -> Result<(), PrivilegeError> {
    check_mask(effective_caps())
}

fn check_mask(caps: u64) -> Result<(), PrivilegeError> {
    let has = |c: u32| caps & (1 << c) != 0;
    let mut missing = Vec::new();
    if !has(CAP_SYS_ADMIN) {
        if !has(CAP_BPF) {
            missing.push("CAP_BPF");
        }
        if !has(CAP_PERFMON) {
            missing.push("CAP_PERFMON");
        }
    }
    if !has(CAP_SYS_PTRACE) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_SYS_PTRACE");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PrivilegeError::Missing {
            missing: missing.join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_is_missing() {
        let err = check_mask(1 << CAP_BPF).unwrap_err().to_string();
        assert!(
            err.contains("CAP_PERFMON")
                && err.contains("CAP_SYS_PTRACE")
                && !err.contains("CAP_BPF,")
        );
        assert!(check_mask(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_mask((1 << CAP_BPF) | (1 << CAP_PERFMON) | (1 << CAP_SYS_PTRACE)).is_ok());
    }
}
