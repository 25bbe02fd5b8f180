//! Whether the host had CPU to spare while recording: the share of all
//! CPUs' time spent idle (`/proc/stat`, first line: idle + iowait over
//! all fields).
//!
//! Why it is in every recording: innoprof's estimate of what its probe
//! hits cost the server is per hit (trap + the programs' run time). With
//! CPU to spare, that model holds in the target (0.80–1.03 of the measured
//! change in server CPU per transaction, ungoverned and governed, README
//! "innoprof's estimate against the server's measured cost"); on a
//! saturated host the server pays more than it, in knock-on costs no
//! per-hit model sees (threads waiting longer for cores and for latches
//! held across hits). The idle share over the recording says which case a
//! recording was in, so the estimate is read as a lower bound when the
//! host had none to spare. The kernel's CPU pressure figure
//! (`/proc/pressure/cpu`, `some`) was tried first: on this 2-core VM it
//! read 13 % at 1,000 tps and 15–25 % saturated, while the idle share
//! reads 0 % saturated.

/// Below this share of idle CPU time, the host was saturated and the
/// per-hit estimate is a lower bound.
pub const SATURATED_BELOW_PCT: f64 = 5.0;

/// Busy and idle time of all CPUs together since boot, from `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Ticks in every state.
    pub total: u64,
    /// Ticks idle or waiting for I/O with nothing to run.
    pub idle: u64,
}

impl CpuTimes {
    /// Now, or None where `/proc/stat` cannot be read.
    pub fn now() -> Option<Self> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The idle share of all CPUs' time from `self` to `later`, in %.
    pub fn idle_pct_until(&self, later: &CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        let idle = later.idle.checked_sub(self.idle)?;
        (total > 0).then(|| idle as f64 / total as f64 * 100.0)
    }
}

/// The aggregate `cpu` line: user nice system idle iowait irq softirq
/// steal (guest time is inside user and nice already, so not added).
fn parse(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_ascii_whitespace()
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    (fields.len() >= 5).then(|| CpuTimes {
        total: fields.iter().sum(),
        idle: fields[3] + fields[4],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_iowait_of_the_aggregate_line() {
        let stat = "cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4 5 6 7 8\n";
        assert_eq!(
            parse(stat),
            Some(CpuTimes {
                total: 1000,
                idle: 840
            })
        );
        assert_eq!(parse("cpu0 1 2 3 4 5\n"), None);
        assert_eq!(parse("cpu  1 x 3 4 5\n"), None);
    }

    #[test]
    fn idle_share_between_two_readings() {
        let a = CpuTimes {
            total: 1_000,
            idle: 500,
        };
        let b = CpuTimes {
            total: 1_400,
            idle: 600,
        };
        assert_eq!(a.idle_pct_until(&b), Some(25.0));
        assert_eq!(b.idle_pct_until(&a), None);
        assert_eq!(a.idle_pct_until(&a), None);
    }

    /// A busy loop on one CPU for 300 ms: this host's own figures show at
    /// least that CPU busy (idle at most the other CPUs' share, with a
    /// tick's slack).
    #[test]
    fn this_host_reports_its_cpu_times() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let a = CpuTimes::now().expect("/proc/stat readable");
        let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = CpuTimes::now().unwrap();
        let idle = a.idle_pct_until(&b).expect("time passed");
        assert!(idle <= (cpus - 1.0) / cpus * 100.0 + 10.0, "{idle} % idle");
    }
}
