//! The host's calibrated hit cost, kept for the rest of the boot so that
//! each recording does not pay for measuring it again.
//!
//! Calibration probes innoprof itself for ~0.1–0.2 s of CPU (its own
//! binary's symbols, a BPF load, ~60,000 trapped calls): at the start of
//! every 30 s recording that alone was a third of the agent's 1 % budget.
//! What it measures — the trap and the programs on a shallow stack — is a
//! property of this kernel, this CPU and this innoprof build, none of which
//! changes within a boot, and the target's own per-program run time
//! replaces the BPF part while recording anyway ([`crate::cost::live`]).
//!
//! So a measurement is reused when it was taken in this boot (`boot_id`),
//! by this very innoprof binary (device, inode, size, mtime of
//! `/proc/self/exe`), with the same stack setting, less than [`MAX_AGE`]
//! ago. `innoprof calibrate` always measures and refreshes it.
//!
//! It lives in `/run/innoprof` (tmpfs: gone at reboot), a directory
//! innoprof creates 0700. A directory that is not root's own, is a
//! symlink, or is open to others is not trusted: nothing is read from it or
//! written to it, and every recording measures. A file that does not parse
//! or holds implausible figures is ignored (and replaced by the next
//! measurement).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::cost::hit_cost::HitCost;
use crate::persist::{self, BootAndBuild};

/// How long a measurement is reused within a boot.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// What identifies the conditions a measurement holds for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Key {
    build: BootAndBuild,
    stacks: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    key: Key,
    measured_unix_s: u64,
    cost: HitCost,
}

/// A kept hit cost and how long ago it was measured.
#[derive(Debug, Clone, Copy)]
pub struct Cached {
    pub cost: HitCost,
    pub age: Duration,
}

pub struct HitCostCache {
    dir: PathBuf,
}

impl Default for HitCostCache {
    fn default() -> Self {
        Self::in_dir(persist::default_dir())
    }
}

impl HitCostCache {
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// One file per innoprof binary (device and inode of its executable)
    /// and stack setting: two builds measured side by side (a benchmark
    /// of the agent's own cost) each keep their own, instead of
    /// overwriting each other's and measuring again in every run.
    fn file(&self, key: &Key) -> PathBuf {
        let stacks = if key.stacks { "stacks" } else { "nostacks" };
        self.dir.join(format!(
            "hitcost-{stacks}-{:x}-{:x}.json",
            key.build.build.exe_dev, key.build.build.exe_ino
        ))
    }

    /// This boot's measurement for this binary and stack setting, if a
    /// trusted, fresh and plausible one exists.
    pub fn load(&self, stacks: bool) -> Option<Cached> {
        let key = current_key(stacks)?;
        let bytes = persist::read_own_file(&self.dir, &self.file(&key), 64 << 10)?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        let fresh = entry.measured_unix_s <= now && now - entry.measured_unix_s < MAX_AGE.as_secs();
        (entry.key == key && fresh && plausible(&entry.cost)).then(|| Cached {
            cost: entry.cost,
            age: Duration::from_secs(now - entry.measured_unix_s),
        })
    }

    /// Keeps a fresh measurement; failures only mean the next recording
    /// measures again.
    pub fn store(&self, cost: &HitCost) -> std::io::Result<()> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        if !plausible(cost) {
            return Err(bad("implausible hit cost"));
        }
        let key = current_key(cost.with_stacks).ok_or_else(|| bad("no boot id"))?;
        let path = self.file(&key);
        let entry = Entry {
            key,
            measured_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_err(|_| bad("clock before 1970"))?
                .as_secs(),
            cost: *cost,
        };
        let bytes = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        persist::write_own_file(&self.dir, &path, &bytes)
    }
}

fn current_key(stacks: bool) -> Option<Key> {
    Some(Key {
        build: BootAndBuild::current()?,
        stacks,
    })
}

/// Costs a real measurement can give: positive and finite, under 1 ms a
/// call; the BPF and stack parts within their totals' range.
fn plausible(c: &HitCost) -> bool {
    let per_call = [
        c.latency_emulated_ns,
        c.latency_stepped_ns,
        c.count_emulated_ns,
        c.count_stepped_ns,
    ];
    let parts = [c.bpf_latency_ns, c.bpf_count_ns, c.stack_ns];
    per_call
        .iter()
        .all(|v| v.is_finite() && *v > 0.0 && *v < 1e6)
        && parts.iter().all(|v| v.is_finite() && *v >= 0.0 && *v < 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn cost(stacks: bool) -> HitCost {
        HitCost {
            latency_emulated_ns: 1900.0,
            latency_stepped_ns: 9000.0,
            count_emulated_ns: 1200.0,
            count_stepped_ns: 8000.0,
            with_stacks: stacks,
            bpf_latency_ns: 300.0,
            bpf_count_ns: 100.0,
            stack_ns: 700.0,
        }
    }

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn a_stored_cost_is_reused_for_its_own_stack_setting_only() {
        let d = private_dir();
        let cache = HitCostCache::in_dir(d.path().join("run"));
        assert!(cache.load(true).is_none());
        cache.store(&cost(true)).unwrap();
        let dir_mode = std::fs::metadata(d.path().join("run")).unwrap().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(cache.load(true).unwrap().cost, cost(true));
        assert!(cache.load(false).is_none());
        // Nothing but the two result files is ever left there.
        let names: Vec<_> = std::fs::read_dir(d.path().join("run"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let own = cache.file(&current_key(true).unwrap());
        assert_eq!(names, [own.file_name().unwrap()]);
        assert!(own.to_string_lossy().contains("hitcost-stacks-"));
    }

    #[test]
    fn an_untrusted_directory_or_file_is_not_used() {
        let d = private_dir();
        let run = d.path().join("run");
        let cache = HitCostCache::in_dir(&run);
        cache.store(&cost(false)).unwrap();
        // Open to others: neither read nor written.
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(cache.load(false).is_none());
        assert!(cache.store(&cost(false)).is_err());
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(cache.load(false).is_some());
        // A symlinked directory is refused.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&run, &link).unwrap();
        assert!(HitCostCache::in_dir(&link).load(false).is_none());
        // A file someone else could have written is ignored.
        let file = cache.file(&current_key(false).unwrap());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(cache.load(false).is_none());
    }

    #[test]
    fn stale_foreign_or_implausible_entries_are_ignored() {
        let d = private_dir();
        let run = d.path().join("run");
        let cache = HitCostCache::in_dir(&run);
        cache.store(&cost(true)).unwrap();
        let file = cache.file(&current_key(true).unwrap());
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            f(&mut v);
            std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
        };
        edit(&|v| {
            v["measured_unix_s"] = (v["measured_unix_s"].as_u64().unwrap() - 25 * 3600).into()
        });
        assert!(cache.load(true).is_none(), "older than a day");
        cache.store(&cost(true)).unwrap();
        edit(&|v| v["key"]["build"]["boot_id"] = "another boot".into());
        assert!(cache.load(true).is_none(), "another boot");
        cache.store(&cost(true)).unwrap();
        edit(&|v| v["cost"]["latency_emulated_ns"] = (-1.0).into());
        assert!(cache.load(true).is_none(), "implausible");
        std::fs::write(&file, b"{not json").unwrap();
        assert!(cache.load(true).is_none());
        let mut nan = cost(true);
        nan.stack_ns = f64::NAN;
        assert!(cache.store(&nan).is_err());
    }
}
