//! The machine in plain rows (report.html's "Host" section): one fact a
//! row, as pt-summary prints them, from metadata.json's `host`.

use crate::target::host::{HostInfo, Load};

/// (label, value) rows for what is known; unknown facts are left out.
pub fn rows(h: &HostInfo) -> Vec<(&'static str, String)> {
    let mut rows = vec![("host", format!("{} (kernel {})", h.hostname, h.kernel))];
    if let Some(c) = &h.cpu {
        let mut line = format!("{} logical", c.logical);
        if let Some(cores) = c.cores {
            line.push_str(&format!(", {cores} cores"));
        }
        if let Some(s) = c.sockets {
            line.push_str(&format!(", {s} socket{}", if s == 1 { "" } else { "s" }));
        }
        if let Some(online) = &c.online {
            line.push_str(&format!(" (online {online})"));
        }
        if let Some(model) = &c.model {
            line.push_str(&format!(": {model}"));
        }
        rows.push(("CPUs", line));
    }
    if let Some(n) = h.numa_nodes {
        rows.push(("NUMA nodes", n.to_string()));
    }
    if let Some(m) = &h.memory {
        let mut line = gib(m.total_bytes);
        if let Some(a) = m.available_bytes {
            line.push_str(&format!(", {} available at the start", gib(a)));
        }
        rows.push(("memory", line));
        let mut swap = if m.swap_total_bytes == 0 {
            "none".to_string()
        } else {
            format!(
                "{}, {} used",
                gib(m.swap_total_bytes),
                gib(m.swap_total_bytes.saturating_sub(m.swap_free_bytes))
            )
        };
        if let Some(s) = m.swappiness {
            swap.push_str(&format!(" (swappiness {s})"));
        }
        rows.push(("swap", swap));
    }
    if let Some(t) = &h.transparent_hugepages {
        let v = |o: &Option<String>| o.clone().unwrap_or_else(|| "?".into());
        rows.push((
            "transparent huge pages",
            format!("enabled {}, defrag {}", v(&t.enabled), v(&t.defrag)),
        ));
    }
    if let Some(c) = &h.clock_source {
        rows.push(("clock source", c.clone()));
    }
    if let Some(v) = &h.virtualization {
        let what: Vec<&str> = [v.vendor.as_deref(), v.product.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        let line = match (v.hypervisor, what.is_empty()) {
            (true, true) => "yes (a hypervisor)".to_string(),
            (true, false) => format!("yes: {}", what.join(" ")),
            (false, true) => "no".to_string(),
            (false, false) => format!("no hypervisor flag; {}", what.join(" ")),
        };
        rows.push(("virtualised", line));
    }
    match (&h.load_at_start, &h.load_at_end) {
        (None, None) => {}
        (a, b) => {
            let l = |x: &Option<Load>| x.as_ref().map_or("?".into(), load);
            rows.push((
                "load (1, 5, 15 min)",
                format!("{} at the start, {} at the end", l(a), l(b)),
            ));
        }
    }
    if let Some(d) = &h.datadir {
        let mut line = d.path.clone();
        if let Some(fs) = &d.fs_type {
            line.push_str(&format!(" on {fs}"));
        }
        if let Some(src) = &d.mount_source {
            line.push_str(&format!(" from {src}"));
        }
        if let Some(mp) = &d.mount_point {
            line.push_str(&format!(" mounted at {mp}"));
        }
        line.push_str(&format!(" (device {})", d.device));
        rows.push(("datadir", line));
        if !d.mount_options.is_empty() {
            rows.push(("mount options", d.mount_options.join(",")));
        }
        let disk = match &d.block_device {
            Some(b) => format!(
                "{}: scheduler {}, {}",
                b.name,
                b.scheduler.as_deref().unwrap_or("?"),
                match b.rotational {
                    Some(true) => "rotational",
                    Some(false) => "non-rotational",
                    None => "rotation unknown",
                }
            ),
            None => "no block device under it".to_string(),
        };
        rows.push(("disk", disk));
    }
    rows
}

fn load(l: &Load) -> String {
    format!(
        "{:.2} {:.2} {:.2} ({} runnable of {})",
        l.one, l.five, l.fifteen, l.runnable, l.threads
    )
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::host::*;

    #[test]
    fn a_bare_host_is_one_row_and_a_full_one_reads_like_pt_summary() {
        let bare = HostInfo {
            hostname: "db1".into(),
            kernel: "6.1.0".into(),
            ..Default::default()
        };
        assert_eq!(
            rows(&bare),
            vec![("host", "db1 (kernel 6.1.0)".to_string())]
        );
        let full = HostInfo {
            cpu: Some(CpuFacts {
                model: Some("AMD EPYC".into()),
                logical: 4,
                cores: Some(2),
                sockets: Some(1),
                online: Some("0-3".into()),
            }),
            memory: Some(MemoryFacts {
                total_bytes: 8 << 30,
                available_bytes: Some(6 << 30),
                swap_total_bytes: 0,
                swap_free_bytes: 0,
                swappiness: Some(60),
            }),
            load_at_start: Some(Load {
                one: 1.5,
                five: 1.0,
                fifteen: 0.5,
                runnable: 3,
                threads: 300,
            }),
            datadir: Some(DatadirFacts {
                path: "/var/lib/mysql".into(),
                fs_type: Some("xfs".into()),
                mount_point: Some("/var/lib/mysql".into()),
                mount_source: Some("/dev/nvme0n1p2".into()),
                mount_options: vec!["noatime".into(), "rw".into()],
                device: "259:2".into(),
                block_device: Some(BlockDevice {
                    name: "nvme0n1p2".into(),
                    scheduler: Some("none".into()),
                    rotational: Some(false),
                }),
            }),
            ..bare
        };
        let text: Vec<String> = rows(&full)
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        assert_eq!(
            text,
            [
                "host: db1 (kernel 6.1.0)",
                "CPUs: 4 logical, 2 cores, 1 socket (online 0-3): AMD EPYC",
                "memory: 8.0 GiB, 6.0 GiB available at the start",
                "swap: none (swappiness 60)",
                "load (1, 5, 15 min): 1.50 1.00 0.50 (3 runnable of 300) at the start, ? at the end",
                "datadir: /var/lib/mysql on xfs from /dev/nvme0n1p2 mounted at /var/lib/mysql (device 259:2)",
                "mount options: noatime,rw",
                "disk: nvme0n1p2: scheduler none, non-rotational",
            ]
        );
    }
}
