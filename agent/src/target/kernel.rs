//! The kernel interfaces innoprof uses, checked before anything is touched,
//! so a machine that lacks one gets one line naming it instead of a failure
//! halfway through attaching.
//!
//! innoprof needs no pseudo file system mounted by hand: the BPF syscall,
//! the kernel's BTF (`/sys/kernel/btf/vmlinux`: the verifier needs it for
//! the CPU sampler's `bpf_get_current_task_btf` and the off-CPU
//! tracepoint) and, where uprobe_multi links are
//! missing, the uprobe PMU in sysfs. tracefs, debugfs and bpffs are not used.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{path} is missing: the kernel must be built with BTF (CONFIG_DEBUG_INFO_BTF=y), which innoprof's BPF programs need")]
    NoBtf { path: &'static str },
    #[error("{path} is missing: sysfs is not mounted (mount -t sysfs sysfs /sys) or the kernel has no uprobes (CONFIG_UPROBE_EVENTS=y)")]
    NoUprobePmu { path: &'static str },
}

const BTF: &str = "/sys/kernel/btf/vmlinux";
const UPROBE_PMU: &str = "/sys/bus/event_source/devices/uprobe/type";

/// Checks every interface innoprof uses on this host.
pub fn check() -> Result<(), KernelError> {
    check_at(Path::new("/"))
}

/// The same checks under another root (tests).
fn check_at(root: &Path) -> Result<(), KernelError> {
    let exists = |p: &str| root.join(p.trim_start_matches('/')).exists();
    if !exists(BTF) {
        return Err(KernelError::NoBtf { path: BTF });
    }
    if !exists(UPROBE_PMU) {
        return Err(KernelError::NoUprobePmu { path: UPROBE_PMU });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_has_what_innoprof_needs() {
        check().unwrap();
    }

    #[test]
    fn names_the_missing_interface() {
        let root = tempfile::tempdir().unwrap();
        let err = check_at(root.path()).unwrap_err().to_string();
        assert!(
            err.starts_with("/sys/kernel/btf/vmlinux is missing"),
            "{err}"
        );
        let btf = root.path().join("sys/kernel/btf");
        std::fs::create_dir_all(&btf).unwrap();
        std::fs::write(btf.join("vmlinux"), b"").unwrap();
        let err = check_at(root.path()).unwrap_err().to_string();
        assert!(
            err.contains("uprobe/type is missing") && err.contains("sysfs"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }
}
