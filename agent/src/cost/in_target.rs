//! What the probes cost the server, measured in the server itself rather
//! than priced per hit.
//!
//! The per-hit model (calibrated trap + the programs' kernel-measured run
//! time, see [`crate::cost::live`]) sees only the hits. A server also pays for
//! what the hits do to it around them: its caches and branch predictors
//! disturbed, latches held across a trap so that other threads spin
//! longer. On a saturated host this project's benchmark measured the
//! server paying 1.3-1.9x the model.
//!
//! The governor gives a natural experiment: between its looks the set of
//! probes switched on changes, so the model's cost changes from one look
//! to the next while the work goes on. At each look innoprof reads the
//! server's CPU time (its process CPU clock, exact to the ns), a count of
//! its work (InnoDB's rows read, from its memory: see
//! [`crate::plan::memcounters`]) and what the model priced the hits since the
//! last look at. Between looks `i`,
//!
//! ```text
//! cpu_i = c * work_i + k * model_i
//! ```
//!
//! where `c` is the server's own CPU per row and `k` how much CPU each
//! modelled second of probe cost really took: `k` is fitted by least
//! squares (no intercept), and `k` times the model is the cost measured in
//! the target. Its interval is a delete-one-block jackknife over ten
//! contiguous blocks of looks (looks next to each other are not
//! independent), with Student's t at nine degrees of freedom.
//!
//! It needs the model's cost to vary between looks: with probes on
//! throughout (no governor, or a set that fits its budget) `model_i` is
//! proportional to `work_i` and `k` cannot be told from `c`. It is then
//! not reported, and said why.

use std::collections::VecDeque;

/// The counter whose count is the server's work for [`crate::cost::in_target`].
pub const WORK_COUNTER: &str = "innodb.rows_read";

use serde::{Deserialize, Serialize};

/// Fewer looks than this are not fitted.
pub const MIN_LOOKS: usize = 20;
/// Looks kept (the newest): ~10 minutes at the governor's 250 ms grid,
/// bounding `serve`'s memory.
const MAX_LOOKS: usize = 2400;
/// Jackknife blocks.
const BLOCKS: usize = 10;
/// Student's t, 97.5 % quantile, 9 degrees of freedom.
const T_975_9: f64 = 2.262;
/// A fit whose interval is wider than this fraction of `k` either side is
/// not reported: the model's cost varied too little to tell.
const MAX_HALF_WIDTH: f64 = 0.5;

/// The server's CPU time, read through its process CPU clock: utime +
/// stime of all its threads, in ns (the kernel sums the threads' exact run
/// times; `/proc/PID/stat` rounds to 10 ms ticks).
#[derive(Debug, Clone, Copy)]
pub struct ServerCpuClock {
    clock: libc::clockid_t,
}

impl ServerCpuClock {
    pub fn of(pid: u32) -> Option<Self> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: writes one clockid_t.
        let ret = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
        let me = (ret == 0).then_some(Self { clock })?;
        me.now_ns().map(|_| me)
    }

    pub fn now_ns(&self) -> Option<u64> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec.
        let ret = unsafe { libc::clock_gettime(self.clock, &mut ts) };
        (ret == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

/// What happened between two looks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The server's CPU, s.
    pub cpu_s: f64,
    /// Units of work (rows read).
    pub work: f64,
    /// What the per-hit model priced the hits at, s.
    pub model_s: f64,
}

/// The in-target measurement of one recording, fed at each governor look.
#[derive(Debug)]
pub struct InTargetCost {
    clock: ServerCpuClock,
    /// The work counter's name (for the output).
    work_name: String,
    last: Option<(u64, u64)>,
    steps: VecDeque<Step>,
}

impl InTargetCost {
    pub fn new(clock: ServerCpuClock, work_name: &str) -> Self {
        Self {
            clock,
            work_name: work_name.to_string(),
            last: None,
            steps: VecDeque::new(),
        }
    }

    /// A look: the work counter's value now, and what the model priced the
    /// hits since the last look at (ns). A failed read breaks the chain
    /// (the next look starts a new step).
    pub fn look(&mut self, work: Option<u64>, model_ns: f64) {
        let now = self.clock.now_ns().zip(work);
        if let (Some((cpu, work)), Some((cpu0, work0))) = (now, self.last) {
            if cpu >= cpu0 && work >= work0 {
                if self.steps.len() == MAX_LOOKS {
                    self.steps.pop_front();
                }
                self.steps.push_back(Step {
                    cpu_s: (cpu - cpu0) as f64 / 1e9,
                    work: (work - work0) as f64,
                    model_s: model_ns / 1e9,
                });
            }
        }
        self.last = now;
    }

    /// The fit over the looks so far.
    pub fn result(&self) -> Result<InTargetFit, String> {
        fit(self.steps.iter()).map(|mut f| {
            f.work = self.work_name.clone();
            f
        })
    }
}

/// `k` and its interval: how much server CPU each modelled second of probe
/// cost took, measured in the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InTargetFit {
    pub factor: f64,
    pub factor_low: f64,
    pub factor_high: f64,
    /// The server's own CPU per unit of work (probes aside), ns.
    pub cpu_per_work_ns: f64,
    /// Steps between looks fitted.
    pub looks: usize,
    /// The unit of work (the counter's name).
    #[serde(default)]
    pub work: String,
}

/// Least squares for `cpu = c * work + k * model`: (c, k), or None when
/// the two regressors cannot be told apart.
fn least_squares<'a>(steps: impl Iterator<Item = &'a Step>) -> Option<(f64, f64)> {
    let (mut s11, mut s12, mut s22, mut y1, mut y2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for s in steps {
        s11 += s.work * s.work;
        s12 += s.work * s.model_s;
        s22 += s.model_s * s.model_s;
        y1 += s.work * s.cpu_s;
        y2 += s.model_s * s.cpu_s;
    }
    let det = s11 * s22 - s12 * s12;
    // Collinear within rounding (or no data, NaN): the model's cost moved
    // with the work.
    if det.is_nan() || det <= 1e-9 * s11 * s22 {
        return None;
    }
    Some(((s22 * y1 - s12 * y2) / det, (s11 * y2 - s12 * y1) / det))
}

/// The fit with its jackknife interval (see the module's doc), over the
/// steps in order (iterated once per block left out rather than copied:
/// the governor asks once a second, over up to [`MAX_LOOKS`]).
pub fn fit<'a, I>(steps: I) -> Result<InTargetFit, String>
where
    I: ExactSizeIterator<Item = &'a Step> + Clone,
{
    let n = steps.len();
    if n < MIN_LOOKS {
        return Err(format!(
            "{n} looks with the server's work counted, {MIN_LOOKS} needed"
        ));
    }
    let not_varied = "the probes' modelled cost did not vary apart from the work between the \
                      governor's looks (probes on throughout), so their share of the server's \
                      CPU cannot be told from its own";
    let (c, k) = least_squares(steps.clone()).ok_or(not_varied)?;
    let block = n / BLOCKS;
    let mut leave_one_out = Vec::with_capacity(BLOCKS);
    for b in 0..BLOCKS {
        let (start, end) = (b * block, if b + 1 == BLOCKS { n } else { (b + 1) * block });
        let rest = steps
            .clone()
            .enumerate()
            .filter(|(i, _)| *i < start || *i >= end)
            .map(|(_, s)| s);
        leave_one_out.push(least_squares(rest).ok_or(not_varied)?.1);
    }
    let mean = leave_one_out.iter().sum::<f64>() / BLOCKS as f64;
    let var = leave_one_out
        .iter()
        .map(|x| (x - mean).powi(2))
        .sum::<f64>()
        * (BLOCKS - 1) as f64
        / BLOCKS as f64;
    let half = T_975_9 * var.sqrt();
    if k.is_nan() || k <= 0.0 || half > MAX_HALF_WIDTH * k {
        return Err(format!(
            "too uncertain: {k:.2}x the model [{:.2}, {:.2}] over {} looks (the probes' cost \
             varied too little between looks against the server's own swings)",
            k - half,
            k + half,
            n
        ));
    }
    Ok(InTargetFit {
        factor: k,
        factor_low: (k - half).max(0.0),
        factor_high: k + half,
        cpu_per_work_ns: c * 1e9,
        looks: n,
        work: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that spends 700 ns per row and 1.2 s per modelled second
    /// of probe cost, with the probes switched on in some looks and off in
    /// others, and a deterministic wobble of its own: the fit finds 1.2.
    fn steps(factor: f64, wobble: f64, n: usize) -> Vec<Step> {
        (0..n)
            .map(|i| {
                let work = 300_000.0 + 20_000.0 * ((i * 7 % 11) as f64);
                let model_s = if i % 3 == 0 { 0.03 } else { 0.001 };
                let noise = wobble * (((i * 13 % 17) as f64) - 8.0) / 8.0;
                Step {
                    cpu_s: work * 700e-9 + factor * model_s + noise,
                    work,
                    model_s,
                }
            })
            .collect()
    }

    #[test]
    fn the_factor_is_found_between_on_and_off_looks() {
        let f = fit(steps(1.2, 0.0, 60).iter()).unwrap();
        assert!((f.factor - 1.2).abs() < 1e-6, "{f:?}");
        assert!((f.cpu_per_work_ns - 700.0).abs() < 1e-3, "{f:?}");
        assert!(f.factor_high - f.factor_low < 1e-6, "exact data, no width");
        let f = fit(steps(1.8, 0.002, 60).iter()).unwrap();
        assert!(f.factor_low < 1.8 && 1.8 < f.factor_high, "{f:?}");
        assert!(f.factor_high - f.factor_low < 0.5, "{f:?}");
    }

    #[test]
    fn probes_on_throughout_are_not_fitted() {
        // The model moves with the work: nothing tells k from c.
        let s: Vec<Step> = (0..40)
            .map(|i| {
                let work = 300_000.0 + 1000.0 * i as f64;
                Step {
                    cpu_s: work * 800e-9,
                    work,
                    model_s: work * 1e-7,
                }
            })
            .collect();
        assert!(fit(s.iter()).unwrap_err().contains("did not vary"));
        assert!(fit(steps(1.2, 0.0, 10).iter())
            .unwrap_err()
            .contains("20 needed"));
        // Swings of the server's own as large as the probes' effect.
        let err = fit(steps(0.2, 0.02, 60).iter()).unwrap_err();
        assert!(err.contains("too uncertain"), "{err}");
    }

    #[test]
    fn the_server_cpu_clock_reads_a_process_cpu_time() {
        // Spins until this process has used 20 ms of CPU by its own clock
        // (wall time is no measure on a loaded host), then reads it by pid.
        let own = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid clock id and a timespec to write.
            assert_eq!(
                unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) },
                0
            );
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let clock = ServerCpuClock::of(std::process::id()).unwrap();
        let a = clock.now_ns().unwrap();
        let start = own();
        while own() - start < 20_000_000 {}
        let b = clock.now_ns().unwrap();
        assert!(b - a >= 20_000_000, "{a} -> {b}");
        // Pids are below pid_max: no process has it.
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(ServerCpuClock::of(pid_max).is_none());
    }
}
