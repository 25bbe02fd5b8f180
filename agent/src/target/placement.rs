//! Where a target runs: its cgroup (the cgroup v2 path of
//! `/proc/PID/cgroup`), the container id that path names, if any, and
//! whether its mount and PID namespaces are innoprof's own. Two servers in
//! two containers may look alike in every other way (same binary path,
//! same datadir path, same port inside their network namespaces); this is
//! what tells them apart in a bundle's header, in serve's series and in its
//! log.
//!
//! The cgroup path is the target's to choose (a container with a delegated
//! subtree names its own cgroups: any byte but `/` and NUL, a newline
//! included), so it is a label, not a proof, and it is cut to
//! [`MAX_CGROUP_CHARS`] and to a plain charset before anything shows it.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The longest cgroup label kept. Container runtimes' paths run to about
/// 150 characters (a Kubernetes pod's `kubepods-burstable-pod<uuid>.slice`
/// and its `cri-containerd-<64 hex>.scope`); a longer path keeps its tail,
/// where the container's own directory is.
pub const MAX_CGROUP_CHARS: usize = 160;

/// The container id's length: docker, containerd, CRI-O and podman all
/// name a container by 64 hex digits (a SHA-256).
const CONTAINER_ID_LEN: usize = 64;

/// Where one server process runs, as the host sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    /// Its cgroup v2 path (the `0::` line of /proc/PID/cgroup; on a host
    /// without cgroup v2, the v1 `name=systemd` hierarchy's), at most 160
    /// characters of `A-Z a-z 0-9 / . _ - : @ = + ,` (anything else shown as
    /// `_`; a longer path keeps its tail after `...`). None when unreadable.
    pub cgroup: Option<String>,
    /// The container id found in its cgroup path (64 hex digits, as docker,
    /// containerd, CRI-O and podman name their scopes), lowercase.
    pub container_id: Option<String>,
    /// It runs in a mount namespace other than innoprof's (a container):
    /// the paths it names are inside its own root.
    #[serde(default)]
    pub own_mount_namespace: bool,
    /// Its PID in its own PID namespace, when that is not innoprof's (1 for
    /// a container's main process).
    pub namespace_pid: Option<u32>,
}

impl Placement {
    /// The placement of process `pid`; whatever cannot be read is left out.
    pub fn of(pid: u32) -> Self {
        Self::of_in(Path::new("/proc"), pid)
    }

    pub(crate) fn of_in(proc_root: &Path, pid: u32) -> Self {
        let dir = proc_root.join(pid.to_string());
        // The file is a few lines; a target cannot make it large (each
        // path is bounded by the kernel's PATH_MAX per hierarchy).
        let (cgroup, container_id) = std::fs::read_to_string(dir.join("cgroup"))
            .map(|text| cgroup_label(&text))
            .unwrap_or_default();
        let own_mount_namespace = match (
            namespace(&dir.join("ns/mnt")),
            namespace(&proc_root.join("self/ns/mnt")),
        ) {
            (Some(theirs), Some(ours)) => theirs != ours,
            _ => false,
        };
        let namespace_pid = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| namespace_pid(&s));
        Self {
            cgroup,
            container_id,
            own_mount_namespace,
            namespace_pid,
        }
    }

    /// For a line of text: `container ID12 (cgroup PATH)`, `cgroup PATH`,
    /// or None without a cgroup or for the root cgroup outside any
    /// container (nothing to tell).
    pub fn label(&self) -> Option<String> {
        let cgroup = self.cgroup.as_deref().filter(|c| *c != "/");
        match (&self.container_id, cgroup) {
            (Some(id), Some(c)) => Some(format!("container {} (cgroup {c})", short_id(id))),
            (Some(id), None) => Some(format!("container {}", short_id(id))),
            (None, Some(c)) => Some(format!("cgroup {c}")),
            (None, None) => None,
        }
    }

    /// Where it runs and in which namespaces, for a bundle's header: its
    /// [`label`](Self::label), then what differs from innoprof's own view.
    pub fn describe(&self) -> Option<String> {
        let mut parts: Vec<String> = self.label().into_iter().collect();
        if self.own_mount_namespace {
            parts.push("its own mount namespace".into());
        }
        if let Some(p) = self.namespace_pid {
            parts.push(format!("its own PID namespace (pid {p} there)"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// The first 12 digits of a container id, as `docker ps` shows it.
pub fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// (the cgroup label, the container id) of a /proc/PID/cgroup text. Lines
/// are `hierarchy-id:controllers:path`; `0::path` is cgroup v2. A path
/// holding a newline could forge a line, so a text with two v2 lines is
/// not believed (no label rather than a wrong one).
fn cgroup_label(text: &str) -> (Option<String>, Option<String>) {
    // `N:controllers:path`: the path is all after the second colon (it
    // may hold colons of its own).
    let lines: Vec<(&str, &str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            Some((parts.next()?, parts.next()?, parts.next()?))
        })
        .collect();
    let v2: Vec<&str> = lines
        .iter()
        .filter(|(id, controllers, _)| *id == "0" && controllers.is_empty())
        .map(|(_, _, p)| *p)
        .collect();
    let chosen = match v2.as_slice() {
        [one] => Some(*one),
        [] => lines
            .iter()
            .find(|(_, controllers, _)| *controllers == "name=systemd")
            .map(|(_, _, p)| *p),
        _ => return (None, None),
    };
    // The id in the chosen path, else in any hierarchy's (docker on a
    // cgroup v1 host names it in every controller's path but not in v2's).
    let id = chosen
        .and_then(container_id)
        .or_else(|| lines.iter().find_map(|(_, _, p)| container_id(p)));
    (chosen.map(bounded), id)
}

/// The last run of exactly 64 hex digits in a cgroup path (the innermost
/// directory names the container: `docker-<id>.scope`,
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `libpod-<id>.scope`,
/// `/docker/<id>`, `/kubepods/.../<id>`).
fn container_id(path: &str) -> Option<String> {
    path.split(|c: char| !c.is_ascii_hexdigit())
        .rfind(|run| run.len() == CONTAINER_ID_LEN)
        .map(|id| id.to_ascii_lowercase())
}

/// A cgroup path as a label: a plain charset, bounded (its tail kept).
fn bounded(path: &str) -> String {
    let plain: String = path
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "/._-:@=+,".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if plain.len() <= MAX_CGROUP_CHARS {
        return plain;
    }
    // ASCII only from here: any byte index is a char boundary.
    format!("...{}", &plain[plain.len() - (MAX_CGROUP_CHARS - 3)..])
}

/// A namespace's inode, from its `/proc/PID/ns/*` link.
fn namespace(link: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(link).ok().map(|m| m.ino())
}

/// The process's PID in its innermost PID namespace, when that is not
/// the reader's: the last of several `NSpid:` fields.
fn namespace_pid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Vec<u32> = line
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    pids.last().copied().filter(|_| pids.len() > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1e3f6a5a8e0c0d9b7c6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d";

    #[test]
    fn container_ids_of_the_runtimes() {
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ef_aaaa_bbbbccccdddd.slice/cri-containerd-{ID}.scope"),
            format!("/kubepods/besteffort/pod12345678-aaaa-bbbb-cccc-ddddeeeeffff/{ID}"),
            format!("/machine.slice/libpod-{ID}.scope/container"),
            format!("/kubepods.slice/crio-{ID}.scope"),
        ] {
            assert_eq!(container_id(&path).as_deref(), Some(ID), "{path}");
        }
        // 63 or 65 digits, a pod's uuid, a plain service: no container.
        assert_eq!(container_id(&format!("/docker/{}", &ID[1..])), None);
        assert_eq!(container_id(&format!("/docker/{ID}0")), None);
        assert_eq!(container_id("/system.slice/mariadb.service"), None);
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-4.scope"),
            None
        );
    }

    #[test]
    fn the_v2_path_is_the_label() {
        let text = format!(
            "4:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/system.slice/containerd.service\n"
        );
        let (cgroup, id) = cgroup_label(&text);
        assert_eq!(cgroup.as_deref(), Some("/system.slice/containerd.service"));
        // docker on cgroup v1: the id only in the v1 paths.
        assert_eq!(id.as_deref(), Some(ID));
        // No v2 line: the systemd hierarchy's path.
        let (cgroup, _) = cgroup_label("3:cpu:/a\n1:name=systemd:/b/c.scope\n");
        assert_eq!(cgroup.as_deref(), Some("/b/c.scope"));
        // A colon in the path stays in it.
        let (cgroup, _) = cgroup_label("0::/a:b\n");
        assert_eq!(cgroup.as_deref(), Some("/a:b"));
    }

    #[test]
    fn a_target_chosen_path_is_bounded_and_plain() {
        // A newline forging a second v2 line: no label at all.
        assert_eq!(
            cgroup_label("0::/evil\n0::/system.slice/docker-x.scope\n"),
            (None, None)
        );
        let (cgroup, _) = cgroup_label("0::/a b\x1b[2J\"}{=é\n");
        assert_eq!(cgroup.as_deref(), Some("/a_b__2J___=_"));
        let long = format!("0::/{}/{}\n", "x".repeat(300), "tail");
        let (cgroup, _) = cgroup_label(&long);
        let cgroup = cgroup.unwrap();
        assert_eq!(cgroup.len(), MAX_CGROUP_CHARS);
        assert!(
            cgroup.starts_with("...") && cgroup.ends_with("/tail"),
            "{cgroup}"
        );
    }

    #[test]
    fn labels_and_namespaces() {
        let p = Placement {
            cgroup: Some(format!("/system.slice/docker-{ID}.scope")),
            container_id: Some(ID.into()),
            own_mount_namespace: true,
            namespace_pid: Some(1),
        };
        assert_eq!(
            p.label().unwrap(),
            format!("container 4f1e3f6a5a8e (cgroup /system.slice/docker-{ID}.scope)")
        );
        assert!(p
            .describe()
            .unwrap()
            .ends_with(", its own mount namespace, its own PID namespace (pid 1 there)"));
        assert_eq!(
            Placement {
                cgroup: Some("/".into()),
                ..Default::default()
            }
            .label(),
            None
        );
        assert_eq!(namespace_pid("Name:\tx\nNSpid:\t4242\t1\n"), Some(1));
        assert_eq!(namespace_pid("NSpid:\t4242\n"), None);
    }

    #[test]
    fn this_process_is_in_innoprofs_namespaces() {
        let me = Placement::of(std::process::id());
        assert!(!me.own_mount_namespace);
        assert_eq!(me.namespace_pid, None);
        assert!(me.cgroup.is_some());
    }
}
