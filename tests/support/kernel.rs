//! The kernel's side: a lock for tests that load BPF, and what bpftool,
//! /proc/*/fdinfo and tracefs say innoprof holds or left behind.

use std::collections::HashSet;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held by a test that loads BPF programs or inspects the kernel's list of
/// them, so its checks never see another test's programs: a mutex within
/// this test process and an flock across processes (other test binaries,
/// a second checkout's test run).
pub struct KernelLock {
    _file: std::fs::File,
    _guard: MutexGuard<'static, ()>,
}

pub fn kernel_lock() -> KernelLock {
    use std::os::fd::AsRawFd;
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("innoprof-kernel-tests.lock"))
        .unwrap();
    // SAFETY: flock on a descriptor we own; released when the file closes.
    assert_eq!(
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) },
        0,
        "flock"
    );
    KernelLock {
        _file: file,
        _guard: guard,
    }
}

fn bpftool_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("bpftool (apt-get install bpftool)");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// The ids of the BPF maps named `name` that process `pid` holds.
fn maps_held_by(pid: u32, name: &str) -> Vec<String> {
    let mut ids = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        ids.extend(
            info.lines()
                .filter_map(|l| l.strip_prefix("map_id:"))
                .filter_map(|v| v.trim().parse::<u64>().ok()),
        );
    }
    ids.into_iter()
        .map(|id| id.to_string())
        .filter(|id| {
            let show = Command::new("bpftool")
                .args(["-j", "map", "show", "id", id])
                .output()
                .unwrap();
            let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap_or_default();
            show["name"] == name
        })
        .collect()
}

/// The values (as u64, little-endian) of the BPF array map named `name`
/// that process `pid` holds, by bpftool: e.g. `stack_every`, which says per
/// probe slot whether hits take stacks.
pub fn bpf_array_values_held_by(pid: u32, name: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for id in maps_held_by(pid, name) {
        for e in bpftool_json(&["map", "dump", "id", &id]) {
            let v = &e["formatted"]["value"];
            out.push(
                v.as_u64()
                    .unwrap_or_else(|| panic!("bpftool map value {e}")),
            );
        }
    }
    out
}

/// How many entries the BPF maps named `name` that process `pid` holds
/// have now (bpftool's dump).
pub fn bpf_map_entries_held_by(pid: u32, name: &str) -> usize {
    let ids = maps_held_by(pid, name);
    assert!(!ids.is_empty(), "process {pid} holds no map {name}");
    ids.iter()
        .map(|id| bpftool_json(&["map", "dump", "id", id]).len())
        .sum()
}

const UPROBE_PROGRAMS: [&str; 3] = ["lat_enter", "lat_return", "count_hit"];
/// The CPU profiler's programs (bpf/cpu.bpf.c).
const CPU_PROGRAMS: [&str; 2] = ["cpu_sample", "offcpu_switch"];
const PROGRAM_NAMES: [&str; 5] = [
    UPROBE_PROGRAMS[0],
    UPROBE_PROGRAMS[1],
    UPROBE_PROGRAMS[2],
    CPU_PROGRAMS[0],
    CPU_PROGRAMS[1],
];

/// innoprof's BPF programs currently loaded in the kernel, as "name#id".
pub fn loaded_innoprof_programs() -> Vec<String> {
    bpftool_json(&["prog", "show"])
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| PROGRAM_NAMES.contains(&n))
        })
        .map(|p| format!("{}#{}", p["name"].as_str().unwrap(), p["id"]))
        .collect()
}

/// BPF links (one per attached uprobe) that run an innoprof uprobe program.
pub fn innoprof_links() -> Vec<String> {
    links_of(&UPROBE_PROGRAMS)
}

/// BPF links running an innoprof uprobe program that process `pid` holds
/// (other innoprof runs on this machine hold their own).
pub fn innoprof_links_held_by(pid: u32) -> Vec<String> {
    let (_, held) = bpf_ids_held_by(std::iter::once(std::path::PathBuf::from(format!(
        "/proc/{pid}"
    ))));
    links_of(&UPROBE_PROGRAMS)
        .into_iter()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["id"].as_u64())
                .is_some_and(|id| held.contains(&id))
        })
        .collect()
}

/// BPF links of the CPU profiler: one perf event per CPU, one tracepoint.
pub fn cpu_profiler_links() -> Vec<String> {
    links_of(&CPU_PROGRAMS)
}

fn links_of(names: &[&str]) -> Vec<String> {
    let ids: Vec<u64> = bpftool_json(&["prog", "show"])
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| names.contains(&n)))
        .filter_map(|p| p["id"].as_u64())
        .collect();
    bpftool_json(&["link", "list"])
        .iter()
        .filter(|l| l["prog_id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .map(|l| l.to_string())
        .collect()
}

/// Waits (up to 5 s: program release is deferred in the kernel) until no
/// innoprof program or link remains that no live process holds; returns
/// what is left. Called once the innoprof under test has exited, so what a
/// live process still holds belongs to another innoprof (another
/// checkout's test or a manual run on this shared machine), not to a leak:
/// a leaked program or link is one nothing holds any more.
pub fn leftovers_after_exit() -> (Vec<String>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (held_progs, held_links) = bpf_ids_held_by_live_processes();
        let id_of = |item: &str| -> Option<u64> {
            match item.split_once('#') {
                Some((_, id)) => id.parse().ok(),
                None => serde_json::from_str::<serde_json::Value>(item).ok()?["id"].as_u64(),
            }
        };
        let unheld = |items: Vec<String>, held: &HashSet<u64>| -> Vec<String> {
            items
                .into_iter()
                .filter(|i| id_of(i).is_none_or(|id| !held.contains(&id)))
                .collect()
        };
        let (p, l) = (
            unheld(loaded_innoprof_programs(), &held_progs),
            unheld(links_of(&PROGRAM_NAMES), &held_links),
        );
        if (p.is_empty() && l.is_empty()) || Instant::now() > deadline {
            return (p, l);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// (program ids, link ids) of the BPF descriptors live processes hold,
/// from /proc/*/fdinfo.
fn bpf_ids_held_by_live_processes() -> (HashSet<u64>, HashSet<u64>) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return (HashSet::new(), HashSet::new());
    };
    bpf_ids_held_by(procs.flatten().map(|d| d.path()))
}

/// (program ids, link ids) held by the processes at these /proc/PID paths.
fn bpf_ids_held_by(
    proc_dirs: impl Iterator<Item = std::path::PathBuf>,
) -> (HashSet<u64>, HashSet<u64>) {
    let (mut progs, mut links) = (HashSet::new(), HashSet::new());
    for proc_dir in proc_dirs {
        let Ok(fds) = std::fs::read_dir(proc_dir.join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            for line in info.lines() {
                let (set, value) = if let Some(v) = line.strip_prefix("prog_id:") {
                    (&mut progs, v)
                } else if let Some(v) = line.strip_prefix("link_id:") {
                    (&mut links, v)
                } else {
                    continue;
                };
                if let Ok(id) = value.trim().parse() {
                    set.insert(id);
                }
            }
        }
    }
    (progs, links)
}

/// Lines of the tracefs `uprobe_events` file (uprobes created through
/// tracefs). innoprof's uprobes are perf events and never appear there;
/// this proves none leaked into that interface either.
pub fn tracefs_uprobe_events() -> Vec<String> {
    [
        "/sys/kernel/tracing/uprobe_events",
        "/sys/kernel/debug/tracing/uprobe_events",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .expect("tracefs uprobe_events (mount tracefs on /sys/kernel/tracing)")
    .lines()
    .map(String::from)
    .collect()
}
