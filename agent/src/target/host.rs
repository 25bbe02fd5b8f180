//! The machine a recording ran on, as a ticket needs it (what pt-summary
//! puts at the top): CPU, memory, NUMA, transparent huge pages, swap, the
//! clock source, virtualisation, the load at the start and the end, and the
//! file system, device and I/O scheduler under the server's datadir.
//!
//! Everything is read, never written, from /proc and /sys, each file once
//! and bounded. Strings a target can choose (its mount points and sources,
//! seen through /proc/PID/mountinfo) and strings a host's firmware reports
//! (DMI) are cut to [`MAX_TEXT`] characters and escaped: the bundle is
//! attached to tickets and shown in a browser and a terminal. A fact that
//! cannot be read is left out (None), never guessed.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use procfs::Current;
use serde::{Deserialize, Serialize};

/// The longest string kept from any one source (a mount point, a CPU
/// model, a DMI name).
pub const MAX_TEXT: usize = 200;
/// The most bytes read from one /proc or /sys file (cpuinfo on a large host
/// is the largest: ~1.5 KB a CPU).
const MAX_FILE: u64 = 4 << 20;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostInfo {
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryFacts>,
    /// NUMA nodes the kernel lists (/sys/devices/system/node/nodeN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparent_hugepages: Option<HugePages>,
    /// The kernel's clock source (`tsc`, `kvm-clock`, `hpet`...): a slow one
    /// makes every timestamp, the server's and innoprof's, cost more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualization: Option<Virtualization>,
    /// /proc/loadavg when the recording started and when it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_at_start: Option<Load>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_at_end: Option<Load>,
    /// Where the server's datadir (its working directory) lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datadir: Option<DatadirFacts>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuFacts {
    /// /proc/cpuinfo's `model name` of the first CPU.
    pub model: Option<String>,
    /// CPUs the kernel lists in /proc/cpuinfo (hardware threads).
    pub logical: u32,
    /// Distinct (physical id, core id) pairs; None where cpuinfo has no
    /// topology (some virtual machines).
    pub cores: Option<u32>,
    /// Distinct physical ids (sockets).
    pub sockets: Option<u32>,
    /// /sys/devices/system/cpu/online, as the kernel writes it (`0-15`).
    pub online: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryFacts {
    pub total_bytes: u64,
    /// MemAvailable: what can be had without swapping, at the start.
    pub available_bytes: Option<u64>,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
    /// vm.swappiness.
    pub swappiness: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HugePages {
    /// The selected value of /sys/kernel/mm/transparent_hugepage/enabled
    /// (`always`, `madvise`, `never`).
    pub enabled: Option<String>,
    /// The selected value of .../transparent_hugepage/defrag.
    pub defrag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Virtualization {
    /// The CPU says it runs under a hypervisor (the `hypervisor` flag of
    /// /proc/cpuinfo, set from CPUID).
    pub hypervisor: bool,
    /// The firmware's system vendor and product (DMI), e.g. `QEMU` and
    /// `Standard PC (Q35 + ICH9, 2009)`, or a cloud's instance type.
    pub vendor: Option<String>,
    pub product: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Load {
    pub one: f32,
    pub five: f32,
    pub fifteen: f32,
    /// Runnable scheduling entities (threads) at that instant.
    pub runnable: u32,
    /// Scheduling entities that exist.
    pub threads: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DatadirFacts {
    /// The datadir as the server sees it (in its own mount namespace).
    pub path: String,
    /// The file system type of the mount holding it (`ext4`, `xfs`, `overlay`...).
    pub fs_type: Option<String>,
    /// Its mount point, in the server's mount namespace.
    pub mount_point: Option<String>,
    /// What is mounted there (`/dev/nvme0n1p2`), as the kernel lists it.
    pub mount_source: Option<String>,
    /// Per-mount and per-superblock options, sorted (`noatime`, `data=ordered`...).
    pub mount_options: Vec<String>,
    /// `major:minor` of the file system's device (st_dev).
    pub device: String,
    /// The block device under it, where there is one (none for tmpfs,
    /// overlay, NFS): its name, I/O scheduler and whether it rotates.
    pub block_device: Option<BlockDevice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlockDevice {
    /// The kernel's name (`vda`, `nvme0n1p2`, `dm-0`).
    pub name: String,
    /// The selected scheduler of the whole disk's queue (`none`, `mq-deadline`...).
    pub scheduler: Option<String>,
    pub rotational: Option<bool>,
}

impl HostInfo {
    /// Only what `hostname` and `uname -r` print: the least a bundle
    /// carries (and what bundles from before the rest carried).
    pub fn names() -> Self {
        Self {
            hostname: read_text("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            kernel: read_text("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            ..Self::default()
        }
    }

    /// This machine at the start of a recording of `pid` (whose working
    /// directory is its datadir): everything but `load_at_end`.
    pub fn at_start(pid: u32) -> Self {
        let cpuinfo = procfs::CpuInfo::current().ok();
        Self {
            cpu: cpuinfo.as_ref().map(cpu_facts),
            memory: memory_facts(),
            numa_nodes: numa_nodes(Path::new("/sys/devices/system/node")),
            transparent_hugepages: huge_pages(),
            clock_source: read_text(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            virtualization: cpuinfo.as_ref().map(virtualization),
            load_at_start: load(),
            datadir: datadir_facts(pid),
            ..Self::names()
        }
    }

    /// Adds the load at the end.
    pub fn ended(mut self) -> Self {
        self.load_at_end = load();
        self
    }
}

/// A file's text, trimmed, bounded and escaped; None if unreadable or empty.
fn read_text(path: impl AsRef<Path>) -> Option<String> {
    let text = read_bounded(path.as_ref())?;
    let line = text.trim();
    (!line.is_empty()).then(|| bounded(line))
}

fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// At most [`MAX_TEXT`] characters, terminal and markup sequences escaped.
fn bounded(s: &str) -> String {
    let cut: String = s.chars().take(MAX_TEXT).collect();
    crate::text::printable(&cut).into_owned()
}

/// The bracketed choice of a sysfs selector (`always [madvise] never`).
fn selected(line: &str) -> Option<String> {
    let start = line.find('[')?;
    let end = start + line[start..].find(']')?;
    Some(bounded(&line[start + 1..end]))
}

fn cpu_facts(info: &procfs::CpuInfo) -> CpuFacts {
    let logical = info.num_cores();
    let field = |cpu: usize, name: &str| info.get_field(cpu, name).map(str::to_string);
    let sockets: BTreeSet<String> = (0..logical)
        .filter_map(|c| field(c, "physical id"))
        .collect();
    let cores: BTreeSet<(String, String)> = (0..logical)
        .filter_map(|c| Some((field(c, "physical id")?, field(c, "core id")?)))
        .collect();
    let count = |n: usize| (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX));
    CpuFacts {
        model: info.model_name(0).map(bounded),
        logical: u32::try_from(logical).unwrap_or(u32::MAX),
        cores: count(cores.len()),
        sockets: count(sockets.len()),
        online: read_text("/sys/devices/system/cpu/online"),
    }
}

fn memory_facts() -> Option<MemoryFacts> {
    let m = procfs::Meminfo::current().ok()?;
    Some(MemoryFacts {
        total_bytes: m.mem_total,
        available_bytes: m.mem_available,
        swap_total_bytes: m.swap_total,
        swap_free_bytes: m.swap_free,
        swappiness: read_text("/proc/sys/vm/swappiness").and_then(|s| s.parse().ok()),
    })
}

/// The `nodeN` entries of the kernel's node directory.
fn numa_nodes(dir: &Path) -> Option<u32> {
    let n = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("node")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    (n > 0).then(|| u32::try_from(n).unwrap_or(u32::MAX))
}

fn huge_pages() -> Option<HugePages> {
    let dir = Path::new("/sys/kernel/mm/transparent_hugepage");
    let pick = |f: &str| read_text(dir.join(f)).as_deref().and_then(selected);
    let facts = HugePages {
        enabled: pick("enabled"),
        defrag: pick("defrag"),
    };
    (facts.enabled.is_some() || facts.defrag.is_some()).then_some(facts)
}

fn virtualization(info: &procfs::CpuInfo) -> Virtualization {
    let hypervisor = info.flags(0).is_some_and(|f| f.contains(&"hypervisor"));
    let dmi = |f: &str| read_text(Path::new("/sys/class/dmi/id").join(f));
    Virtualization {
        hypervisor,
        vendor: dmi("sys_vendor"),
        product: dmi("product_name"),
    }
}

fn load() -> Option<Load> {
    let l = procfs::LoadAverage::current().ok()?;
    Some(Load {
        one: l.one,
        five: l.five,
        fifteen: l.fifteen,
        runnable: l.cur,
        threads: l.max,
    })
}

/// The datadir is the server's working directory (mysqld and mariadbd
/// chdir there at start). Its device comes from a stat through
/// /proc/PID/cwd (the kernel's link, valid in any mount namespace); its
/// mount is the entry of /proc/PID/mountinfo with that device whose
/// mount point is the longest prefix of the path.
fn datadir_facts(pid: u32) -> Option<DatadirFacts> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let path = std::fs::read_link(proc.join("cwd")).ok()?;
    let dev = std::fs::metadata(proc.join("cwd")).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let majmin = format!("{major}:{minor}");
    let mounts = procfs::process::Process::new(i32::try_from(pid).ok()?)
        .and_then(|p| p.mountinfo())
        .ok();
    let mount = mounts.as_ref().and_then(|m| {
        m.0.iter()
            .filter(|m| m.majmin == majmin && path.starts_with(&m.mount_point))
            .max_by_key(|m| m.mount_point.as_os_str().len())
    });
    let options = |m: &procfs::process::MountInfo| {
        let mut all: Vec<String> = [&m.mount_options, &m.super_options]
            .into_iter()
            .flat_map(option_words)
            .collect();
        all.sort();
        all.dedup();
        all.truncate(64);
        all
    };
    Some(DatadirFacts {
        path: bounded(&path.to_string_lossy()),
        fs_type: mount.map(|m| bounded(&m.fs_type)),
        mount_point: mount.map(|m| bounded(&m.mount_point.to_string_lossy())),
        mount_source: mount.and_then(|m| m.mount_source.as_deref()).map(bounded),
        mount_options: mount.map(options).unwrap_or_default(),
        device: majmin,
        block_device: block_device(Path::new("/sys/dev/block"), major, minor),
    })
}

fn option_words(opts: &HashMap<String, Option<String>>) -> impl Iterator<Item = String> + '_ {
    opts.iter().map(|(k, v)| match v {
        Some(v) => bounded(&format!("{k}={v}")),
        None => bounded(k),
    })
}

/// The block device `major:minor` names under `sys_dev_block`
/// (/sys/dev/block), with the queue of the disk it is on: a partition has
/// no queue of its own, its parent directory (the disk) has.
fn block_device(sys_dev_block: &Path, major: u32, minor: u32) -> Option<BlockDevice> {
    let dev = std::fs::canonicalize(sys_dev_block.join(format!("{major}:{minor}"))).ok()?;
    let name = dev.file_name()?.to_string_lossy().into_owned();
    let queue = [dev.join("queue"), dev.parent()?.join("queue")]
        .into_iter()
        .find(|q| q.is_dir());
    let read = |f: &str| queue.as_ref().and_then(|q| read_text(q.join(f)));
    Some(BlockDevice {
        name: bounded(&name),
        scheduler: read("scheduler").as_deref().and_then(selected),
        rotational: read("rotational").map(|r| r == "1"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_the_bracketed_choice() {
        assert_eq!(
            selected("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected("[none] mq-deadline").as_deref(), Some("none"));
        assert_eq!(selected("none"), None);
        assert_eq!(selected("a [b"), None);
    }

    #[test]
    fn text_from_a_source_is_cut_and_escaped() {
        let long = "x".repeat(MAX_TEXT * 3);
        assert_eq!(bounded(&long).chars().count(), MAX_TEXT);
        assert!(!bounded("evil\x1b[31mred").contains('\x1b'));
    }

    #[test]
    fn numa_nodes_count_node_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["node0", "node1", "node", "nodeX", "possible"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        assert_eq!(numa_nodes(dir.path()), Some(2));
        assert_eq!(numa_nodes(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_partition_reads_its_disks_queue() {
        // /sys/dev/block/MAJ:MIN links to .../block/vda/vda1; the queue is vda's.
        let sys = tempfile::tempdir().unwrap();
        let disk = sys.path().join("devices/block/vda");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::write(disk.join("queue/scheduler"), "[mq-deadline] none\n").unwrap();
        std::fs::write(disk.join("queue/rotational"), "0\n").unwrap();
        std::fs::create_dir_all(disk.join("vda1")).unwrap();
        let links = sys.path().join("dev/block");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(disk.join("vda1"), links.join("253:1")).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("253:0")).unwrap();
        for (minor, name) in [(1, "vda1"), (0, "vda")] {
            let b = block_device(&links, 253, minor).unwrap();
            assert_eq!(b.name, name);
            assert_eq!(b.scheduler.as_deref(), Some("mq-deadline"));
            assert_eq!(b.rotational, Some(false));
        }
        assert_eq!(block_device(&links, 0, 42), None);
    }

    #[test]
    fn this_process_host_and_datadir_read() {
        // Our own working directory stands in for a datadir: its mount is
        // found and its device matches a stat of it.
        let me = std::process::id();
        let h = HostInfo::at_start(me).ended();
        assert!(h.cpu.as_ref().is_some_and(|c| c.logical >= 1));
        assert!(h.memory.as_ref().is_some_and(|m| m.total_bytes > 0));
        assert!(h.load_at_start.is_some() && h.load_at_end.is_some());
        let d = h.datadir.expect("our cwd");
        assert_eq!(d.path, std::env::current_dir().unwrap().to_string_lossy());
        let dev = std::fs::metadata(".").unwrap().dev();
        assert_eq!(
            d.device,
            format!("{}:{}", libc::major(dev), libc::minor(dev))
        );
        assert!(d.fs_type.is_some(), "{d:?}");
        assert!(
            d.mount_point
                .as_ref()
                .is_some_and(|m| d.path.starts_with(m.as_str())),
            "{d:?}"
        );
    }
}
