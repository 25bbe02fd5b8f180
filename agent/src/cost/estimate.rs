//! What a probe the governor watched in spread windows saw, and the
//! estimate innoprof makes from it: a design-based estimate of a
//! systematic sample (issue 50). The governor opens a cut probe's window
//! once per period at a random phase, so each window stands for its
//! period: its rate times the time around it (the cell from the middle of
//! the gap before to the middle of the gap after), never across a gap
//! longer than one period (a window stands for at most half a period on
//! either side then, and the rest is left out), nor past one period after
//! the last window. The variance is that of a systematic sample, from the
//! successive differences of the windows' rates (Wolter's estimator,
//! collapsing neighbouring periods as strata), floored per cell by the
//! window's own Poisson noise, with Student's t for the number of windows.
//!
//! Calls in flight at a switch: BPF counts a timed call when its return is
//! seen and its entry was recorded while the probe was on (`enabled`), so
//! a window counts the calls that *entered* inside it. A call that entered
//! before the window (its entry unseen) is dropped at its return
//! (`returns_without_entry`): it belongs to the gap, whose estimate covers
//! it. A call that entered inside the window and returns after the return
//! link is gone is lost: at most `rate x mean latency` calls per switch-off
//! (the return links go ~100 ms after the flag, so only calls longer than
//! that are really at risk). That allowance is added to the bound.

use serde::{Deserialize, Serialize};

/// One stretch of time a probe was on, and what it saw there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnWindow {
    /// Seconds since the recording started.
    pub start_s: f64,
    pub end_s: f64,
    pub calls: u64,
    pub wait_ns: u64,
}

impl OnWindow {
    fn len(&self) -> f64 {
        (self.end_s - self.start_s).max(1e-6)
    }

    /// The span a call had to start in to be counted here. A timed call
    /// is counted at its return, and only if its entry was seen: one
    /// entered before the attach, or returning after the window was read,
    /// is not. For calls of `latency_s` that is the window less one
    /// latency: 2 ms calls in a 21 ms window are seen over 19 ms, and
    /// dividing by 21 read the fixture's 900 calls/s at ~780 (an estimate
    /// 15 % low, outside its bound). Never below half the window.
    fn counted_span(&self, latency_s: f64) -> f64 {
        (self.len() - latency_s.max(0.0)).max(self.len() / 2.0)
    }
}

/// Calls (and wait) of a probe over `0..covered_s`: seen in the windows,
/// plus the interpolated gaps between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallEstimate {
    /// Seen in the on-windows (exact).
    pub observed_calls: u64,
    /// Seen + interpolated over the gaps between windows.
    pub calls: f64,
    /// 95 % half-width of `calls` (see `ASSUMPTION`).
    pub calls_bound: f64,
    pub wait_ns: f64,
    pub wait_ns_bound: f64,
    /// The estimate covers the recording from 0 to here (the end of the
    /// last on-window); nothing after it is projected.
    pub covered_s: f64,
    /// Time between windows, interpolated.
    pub gap_s: f64,
    pub windows: usize,
    pub confidence: f64,
    pub assumption: String,
}

impl CallEstimate {
    /// Two estimates of consecutive stretches of one recording (`other`'s
    /// clock starting `offset_s` into it) as one: seen and interpolated
    /// calls add, and so do the bounds (the sum of two 95 % half-widths
    /// bounds their sum at least as well: conservative).
    pub fn plus(&self, other: &Self, offset_s: f64) -> Self {
        Self {
            observed_calls: self.observed_calls + other.observed_calls,
            calls: self.calls + other.calls,
            calls_bound: self.calls_bound + other.calls_bound,
            wait_ns: self.wait_ns + other.wait_ns,
            wait_ns_bound: self.wait_ns_bound + other.wait_ns_bound,
            covered_s: offset_s + other.covered_s,
            gap_s: self.gap_s + other.gap_s,
            windows: self.windows + other.windows,
            confidence: self.confidence.min(other.confidence),
            assumption: if self.assumption == other.assumption || self.windows == 0 {
                other.assumption.clone()
            } else {
                self.assumption.clone()
            },
        }
    }

    /// What was seen and nothing more: no gap interpolated (a live window,
    /// whose rate is read per second the probe was on).
    pub fn seen_only(calls: u64, wait_ns: u64, covered_s: f64) -> Self {
        Self {
            observed_calls: calls,
            calls: calls as f64,
            calls_bound: 0.0,
            wait_ns: wait_ns as f64,
            wait_ns_bound: 0.0,
            covered_s,
            gap_s: 0.0,
            windows: 0,
            confidence: 0.95,
            assumption: "seen only: nothing interpolated".into(),
        }
    }
}

/// What the bound assumes, stated in every output that carries it.
pub const ASSUMPTION: &str = "95 %: design-based, the windows a systematic sample (one per period, random phase); each window's rate stands for the time around it, up to half a period either side of a longer gap; variance from the successive differences of the windows' rates (floored at each window's Poisson noise), Student t for the windows, plus the calls in flight at each switch-off";

/// 97.5 % quantile of Student's t for `df` degrees of freedom (1.96 past
/// the table's 30; 12.7 for none, which only a single window has).
fn t975(df: usize) -> f64 {
    // 97.5 % quantiles of Student's t, 1..=30 degrees of freedom.
    const T975: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => T975[0],
        df if df <= T975.len() => T975[df - 1],
        _ => 1.96,
    }
}

/// The time each window stands for: (left, right) edges of its cell.
/// Neighbours split a gap of up to `max_gap` at its middle; a longer gap
/// gets half a period from each side, and its middle is not estimated.
/// The last window stands for up to one period after it, to `end_s`.
fn cells(windows: &[OnWindow], end_s: f64, period_s: f64) -> Vec<(f64, f64)> {
    let half = period_s / 2.0;
    // Looks come up to a tick late: a gap a little over a period is
    // still the period's.
    let max_gap = 1.25 * period_s;
    let mut out: Vec<(f64, f64)> = windows.iter().map(|w| (w.start_s, w.end_s)).collect();
    for k in 1..windows.len() {
        let (prev_end, start) = (windows[k - 1].end_s, windows[k].start_s);
        let gap = (start - prev_end).max(0.0);
        if gap <= max_gap {
            let mid = prev_end + gap / 2.0;
            out[k - 1].1 = mid;
            out[k].0 = mid;
        } else {
            out[k - 1].1 = prev_end + half;
            out[k].0 = start - half;
        }
    }
    if let (Some(last), Some(w)) = (out.last_mut(), windows.last()) {
        last.1 = w.end_s + (end_s - w.end_s).clamp(0.0, period_s);
    }
    out
}

/// Estimates the calls (and wait) of a probe over a recording of `end_s`
/// seconds from its on-`windows` (in time order, non-overlapping), taken
/// once per `period_s`. `mean_latency_ns` (0 for count probes) sizes the
/// in-flight allowance.
pub fn estimate(
    windows: &[OnWindow],
    end_s: f64,
    period_s: f64,
    mean_latency_ns: f64,
) -> CallEstimate {
    let observed = saturating_sum(windows.iter().map(|w| w.calls));
    let observed_wait = saturating_sum(windows.iter().map(|w| w.wait_ns));
    let cells = cells(windows, end_s, period_s.max(1e-3));
    let (mut gap_calls, mut gap_wait, mut gap_s) = (0.0, 0.0, 0.0);
    // The windows that stand for time they did not watch, in order:
    // (unwatched seconds, rate, wait rate, Poisson variance of the rate).
    let mut sampled: Vec<(f64, f64, f64, f64)> = Vec::new();
    let latency_s = mean_latency_ns / 1e9;
    for (w, (left, right)) in windows.iter().zip(&cells) {
        let unwatched = ((right - left) - w.len()).max(0.0);
        if unwatched <= 1e-9 {
            continue;
        }
        let span = w.counted_span(latency_s);
        let (rate, wait_rate) = (w.calls as f64 / span, w.wait_ns as f64 / span);
        gap_s += unwatched;
        gap_calls += unwatched * rate;
        gap_wait += unwatched * wait_rate;
        sampled.push((
            unwatched,
            rate,
            wait_rate,
            (w.calls as f64 + 1.0) / span.powi(2),
        ));
    }
    let m = sampled.len();
    let successive = |f: fn(&(f64, f64, f64, f64)) -> f64| {
        if m < 2 {
            return 0.0;
        }
        let ss: f64 = sampled
            .windows(2)
            .map(|p| (f(&p[1]) - f(&p[0])).powi(2))
            .sum();
        ss / (2.0 * (m - 1) as f64)
    };
    let (s2, s2_wait) = (successive(|s| s.1), successive(|s| s.2));
    let var: f64 = sampled
        .iter()
        .map(|&(u, rate, _, poisson)| u * u * s2.max(poisson) + u * rate)
        .sum();
    let var_wait: f64 = sampled.iter().map(|&(u, ..)| u * u * s2_wait).sum();
    let t = t975(m.saturating_sub(1));
    // Calls entered in a window whose return came after the switch-off.
    let switch_offs = windows.len().saturating_sub(1) as f64;
    let mean_rate = if sampled.is_empty() {
        0.0
    } else {
        sampled.iter().map(|s| s.1).sum::<f64>() / m as f64
    };
    let in_flight = switch_offs * mean_rate * mean_latency_ns / 1e9;
    let mean_wait = if observed > 0 {
        observed_wait as f64 / observed as f64
    } else {
        0.0
    };
    let (calls_bound, wait_ns_bound) = if m == 0 {
        (0.0, 0.0)
    } else {
        let poisson_wait = mean_wait * (t * gap_calls.max(1.0).sqrt() + in_flight);
        (
            t * var.sqrt() + in_flight,
            t * var_wait.sqrt() + poisson_wait,
        )
    };
    CallEstimate {
        observed_calls: observed,
        calls: observed as f64 + gap_calls,
        calls_bound,
        wait_ns: observed_wait as f64 + gap_wait,
        wait_ns_bound,
        covered_s: cells.last().map_or(0.0, |c| c.1),
        gap_s,
        windows: windows.len(),
        confidence: 0.95,
        assumption: ASSUMPTION.to_string(),
    }
}

/// What the ratio estimate assumes.
pub const RATIO_ASSUMPTION: &str = "95 %: ratio to an exact server counter that moves with the probe: the probe's calls per counter unit in the spread windows x the counter's exact total; variance from the successive differences of the windows' residual rates (calls less the ratio times the counter's), Student t for the windows, plus the ratio's own Poisson noise";

/// A ratio estimate (issue 50, item 3): where an exact server counter
/// moves with the probe (row ids with row-id allocations, transaction ids
/// with commits), the probe's calls per counter unit in the windows times
/// the counter's exact total over the recording. The watched windows'
/// rate is lowered by the probes themselves (the server is slower while
/// they are on), and so is the counter's in the same windows: the ratio
/// cancels that observer effect, which a total from the windows' rates
/// alone does not. `aux[k]` is the counter's advance in window `k`;
/// `aux_total` its advance over the recording. None where a window's
/// reading is missing or the counter did not move in the windows.
pub fn ratio_estimate(
    windows: &[OnWindow],
    aux: &[u64],
    aux_total: u64,
    end_s: f64,
    period_s: f64,
    counter: &str,
) -> Option<CallEstimate> {
    if aux.len() != windows.len() || windows.is_empty() {
        return None;
    }
    let observed = saturating_sum(windows.iter().map(|w| w.calls));
    let observed_wait = saturating_sum(windows.iter().map(|w| w.wait_ns));
    let aux_seen: u64 = aux.iter().sum();
    if aux_seen == 0 || aux_total == 0 {
        return None;
    }
    let r = observed as f64 / aux_seen as f64;
    let calls = r * aux_total as f64;
    let cells = cells(windows, end_s, period_s.max(1e-3));
    // Residual rates of the windows that stand for unwatched time.
    let mut sampled: Vec<(f64, f64)> = Vec::new();
    let mut gap_s = 0.0;
    for ((w, x), (left, right)) in windows.iter().zip(aux).zip(&cells) {
        let unwatched = ((right - left) - w.len()).max(0.0);
        if unwatched <= 1e-9 {
            continue;
        }
        gap_s += unwatched;
        sampled.push((unwatched, (w.calls as f64 - r * *x as f64) / w.len()));
    }
    let m = sampled.len();
    let s2 = if m < 2 {
        0.0
    } else {
        sampled
            .windows(2)
            .map(|p| (p[1].1 - p[0].1).powi(2))
            .sum::<f64>()
            / (2.0 * (m - 1) as f64)
    };
    let covered = cells.last().map_or(0.0, |c| c.1);
    let unwatched_share = if covered > 0.0 { gap_s / covered } else { 0.0 };
    let var = sampled.iter().map(|(u, _)| u * u * s2).sum::<f64>()
        + (calls * unwatched_share).powi(2) / observed.max(1) as f64;
    let t = t975(m.saturating_sub(1));
    let mean_wait = if observed > 0 {
        observed_wait as f64 / observed as f64
    } else {
        0.0
    };
    let calls_bound = if m == 0 { 0.0 } else { t * var.sqrt() };
    Some(CallEstimate {
        observed_calls: observed,
        calls: calls.max(observed as f64),
        calls_bound,
        wait_ns: mean_wait * calls.max(observed as f64),
        wait_ns_bound: mean_wait * calls_bound,
        covered_s: covered,
        gap_s,
        windows: windows.len(),
        confidence: 0.95,
        assumption: format!("{RATIO_ASSUMPTION} (counter: {counter})"),
    })
}

/// The exact server counter that moves with a catalog probe, where one
/// does: (probe, counter). Row ids are handed out one per row-id
/// allocation; a read-write transaction takes a transaction id at its
/// first write and one at commit (read-only ones none: the ratio in the
/// windows carries the mix).
pub const AUXILIARY: &[(&str, &str)] = &[
    ("innodb.dict_sys.row_id", "innodb.dict_sys.row_ids"),
    ("sql.commit", "innodb.trx_sys.trx_ids"),
];

/// An auxiliary counter's readings at a probe's switches: (seconds into
/// the recording, value), taken by the recorder as it switches the probe
/// on and off, so that each window's advance of the counter is known.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuxMarks {
    pub counter: String,
    pub marks: Vec<(f64, u64)>,
}

impl AuxMarks {
    /// The counter's advance over each window, from the readings nearest
    /// its start and end (within `tol` seconds); None if any is missing.
    pub fn per_window(&self, windows: &[OnWindow], tol: f64) -> Option<Vec<u64>> {
        let at = |t: f64| {
            self.marks
                .iter()
                .filter(|(m, _)| (m - t).abs() <= tol)
                .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
                .map(|(_, v)| *v)
        };
        windows
            .iter()
            .map(|w| Some(at(w.end_s)?.saturating_sub(at(w.start_s)?)))
            .collect()
    }
}

/// The auxiliary counter of `probe`, if the catalog ties one to it.
pub fn auxiliary_of(probe: &str) -> Option<&'static str> {
    AUXILIARY.iter().find(|(p, _)| *p == probe).map(|(_, c)| *c)
}

/// An estimate whose 95 % bound is wider than half of it says little as a
/// total: the headline is then what was seen and the rate per watched
/// second (issue 50).
pub fn too_wide(e: &CallEstimate) -> bool {
    e.gap_s > 0.0 && e.calls_bound > 0.5 * e.calls
}

/// The sum of counts read from a bundle (any of them may be `u64::MAX`),
/// stopping at `u64::MAX` rather than overflowing.
pub fn saturating_sum(counts: impl IntoIterator<Item = u64>) -> u64 {
    counts.into_iter().fold(0, u64::saturating_add)
}

/// Calls per second watched over `windows`, with a 95 % half-width: the
/// windows' rates weighted by their length, their spread (Student's t for
/// the windows), floored at the Poisson noise of all the calls seen.
pub fn watched_rate(windows: &[OnWindow]) -> (f64, f64) {
    let watched: f64 = windows.iter().map(OnWindow::len).sum();
    // A bundle's windows (report re-renders them): counts may be anything.
    let seen = saturating_sum(windows.iter().map(|w| w.calls));
    if watched <= 1e-6 {
        return (0.0, 0.0);
    }
    let rate = seen as f64 / watched;
    let n = windows.len();
    let spread = if n >= 2 {
        let var = windows
            .iter()
            .map(|w| w.len() * (w.calls as f64 / w.len() - rate).powi(2))
            .sum::<f64>()
            / watched
            / (n - 1) as f64;
        var.sqrt()
    } else {
        0.0
    };
    let poisson = (seen as f64).max(1.0).sqrt() / watched;
    (rate, t975(n.saturating_sub(1)) * spread.max(poisson))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start_s: f64, end_s: f64, calls: u64) -> OnWindow {
        OnWindow {
            start_s,
            end_s,
            calls,
            wait_ns: calls * 1000,
        }
    }

    /// Calls of 2 ms at 900/s, counted at their return: a 21 ms window
    /// sees those that started in its first 19 ms. The fixture's shape (CI,
    /// 2026-11-30): one long window, then 21 ms windows a second apart.
    #[test]
    fn a_window_counts_calls_that_started_a_latency_before_its_end() {
        let (rate, latency_s) = (900.0, 0.0021);
        let seen = |start: f64, end: f64| {
            let span: f64 = end - start - latency_s;
            OnWindow {
                start_s: start,
                end_s: end,
                calls: (rate * span).round() as u64,
                wait_ns: ((rate * span).round() * latency_s * 1e9) as u64,
            }
        };
        let mut windows = vec![seen(0.0, 3.4)];
        for k in 4..10 {
            let start = k as f64 + 0.18;
            windows.push(seen(start, start + 0.021));
        }
        let e = estimate(&windows, 10.0, 1.0, latency_s * 1e9);
        let truth = rate * 10.0;
        assert!((e.calls - truth).abs() <= 0.02 * truth, "{e:?}");
        // Without the latency, the short windows' rate reads ~10 % low.
        let naive = estimate(&windows, 10.0, 1.0, 0.0);
        assert!(naive.calls < 0.95 * truth, "{naive:?}");
    }

    /// Normal draws (Box-Muller) and Poisson draws (normal approximation
    /// past 30, Knuth's product below) from one seeded generator.
    struct Draw(fastrand::Rng);

    impl Draw {
        fn normal(&mut self) -> f64 {
            let (u, v) = (1.0 - self.0.f64(), self.0.f64());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }

        fn poisson(&mut self, mean: f64) -> u64 {
            if mean > 30.0 {
                return (mean + mean.sqrt() * self.normal()).round().max(0.0) as u64;
            }
            let (l, mut k, mut p) = ((-mean).exp(), 0u64, 1.0);
            loop {
                p *= self.0.f64();
                if p <= l {
                    return k;
                }
                k += 1;
            }
        }
    }

    /// A probe cut at `cut_s` and then watched `window_s` once a second
    /// at phase `phase_s`, calls drawn from `rate(t)` (per 10 ms step);
    /// returns the windows and the truth over the recording.
    fn systematic(
        d: &mut Draw,
        rate: impl Fn(f64) -> f64,
        end_s: f64,
        cut_s: f64,
        window_s: f64,
        phase_s: f64,
    ) -> (Vec<OnWindow>, f64) {
        let step = 0.01;
        let steps = (end_s / step).round() as usize;
        let counts: Vec<u64> = (0..steps)
            .map(|i| d.poisson(rate(i as f64 * step) * step))
            .collect();
        let truth = counts.iter().sum::<u64>() as f64;
        let seen = |a: f64, b: f64| -> u64 {
            let (i, j) = ((a / step).round() as usize, (b / step).round() as usize);
            counts[i.min(steps)..j.min(steps)].iter().sum()
        };
        let mut ws = vec![w(0.0, cut_s, seen(0.0, cut_s))];
        let mut start = phase_s;
        while start < cut_s {
            start += 1.0;
        }
        while start < end_s {
            let end = (start + window_s).min(end_s);
            ws.push(w(start, end, seen(start, end)));
            start += 1.0;
        }
        (ws, truth)
    }

    #[test]
    fn one_window_is_exact_and_projects_nothing() {
        // A burst seen in the first 0.6 s of a 0.6 s recording.
        let e = estimate(&[w(0.0, 0.6, 10_010)], 0.6, 1.0, 0.0);
        assert_eq!(e.calls, 10_010.0);
        assert_eq!(e.calls_bound, 0.0);
        assert_eq!(e.covered_s, 0.6);
    }

    #[test]
    fn nothing_is_projected_across_more_than_a_period() {
        // Two windows 5 s apart (1 s period): each stands for half a
        // period into the gap; 4 s of it are not estimated. After the
        // last, at most one period.
        let e = estimate(&[w(0.0, 1.0, 1_000), w(6.0, 7.0, 3_000)], 20.0, 1.0, 0.0);
        assert!((e.gap_s - 2.0).abs() < 1e-9, "{e:?}");
        assert!((e.covered_s - 8.0).abs() < 1e-9, "{e:?}");
        // 0.5 s at 1,000/s, 0.5 s and 1 s at 3,000/s.
        assert!(
            (e.calls - (4_000.0 + 500.0 + 4_500.0)).abs() < 1e-6,
            "{e:?}"
        );
    }

    #[test]
    fn a_steady_rate_has_a_tight_bound() {
        // 1,000/s, cut at 0.5 s, 100 ms watched a second for 30 s.
        let mut d = Draw(fastrand::Rng::with_seed(3));
        let (ws, truth) = systematic(&mut d, |_| 1_000.0, 30.0, 0.5, 0.1, 0.37);
        let e = estimate(&ws, 30.0, 1.0, 0.0);
        assert!((e.calls - truth).abs() <= e.calls_bound, "{e:?} vs {truth}");
        assert!(e.calls_bound < 0.05 * e.calls, "{e:?}");
    }

    /// How often the bound holds, over `trials` recordings of `rate(t)`.
    fn coverage(trials: usize, rate: impl Fn(f64) -> f64 + Copy, window_s: f64) -> (f64, f64) {
        let mut d = Draw(fastrand::Rng::with_seed(12));
        let (mut held, mut width) = (0, 0.0);
        for _ in 0..trials {
            let phase = d.0.f64();
            let (ws, truth) = systematic(&mut d, rate, 20.0, 0.7, window_s, phase);
            let e = estimate(&ws, 20.0, 1.0, 0.0);
            held += usize::from((e.calls - truth).abs() <= e.calls_bound);
            width += e.calls_bound / truth;
        }
        (held as f64 / trials as f64, width / trials as f64)
    }

    #[test]
    fn the_bound_holds_95_percent_of_the_time() {
        // Steady, a step (the snapshot opened at 3 s: x100), a slow swing
        // and short bursts, each watched 50 ms a second.
        type Rate = fn(f64) -> f64;
        let cases: [(&str, Rate); 4] = [
            ("steady", |_| 8_000.0),
            ("step x100 at 3 s", |t| {
                if t < 3.0 {
                    1_000.0
                } else {
                    100_000.0
                }
            }),
            ("swing", |t| 5_000.0 * (1.5 + (t / 3.0).sin())),
            ("bursts", |t| {
                if ((t * 10.0) as u64).is_multiple_of(7) {
                    20_000.0
                } else {
                    500.0
                }
            }),
        ];
        for (name, rate) in cases {
            let (held, width) = coverage(2_000, rate, 0.05);
            eprintln!(
                "{name}: held {:.1} %, mean bound ±{:.1} %",
                held * 100.0,
                width * 100.0
            );
            assert!(
                held >= 0.93,
                "{name}: the bound held in {:.1} %",
                held * 100.0
            );
        }
    }

    #[test]
    fn a_change_mid_recording_shows_within_a_period() {
        // x100 at 3 s: every window after 4 s sees the new rate.
        let mut d = Draw(fastrand::Rng::with_seed(5));
        let rate = |t: f64| if t < 3.0 { 1_000.0 } else { 100_000.0 };
        let (ws, truth) = systematic(&mut d, rate, 12.0, 0.7, 0.05, 0.5);
        let before: Vec<f64> = ws
            .iter()
            .filter(|w| w.end_s <= 3.0)
            .map(|w| w.calls as f64 / w.len())
            .collect();
        let after: Vec<f64> = ws
            .iter()
            .filter(|w| w.start_s >= 4.0)
            .map(|w| w.calls as f64 / w.len())
            .collect();
        assert!(!before.is_empty() && after.len() >= 7, "{ws:?}");
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean(&after) / mean(&before) > 50.0, "{before:?} {after:?}");
        let e = estimate(&ws, 12.0, 1.0, 0.0);
        assert!((e.calls - truth).abs() <= e.calls_bound, "{e:?} vs {truth}");
    }
}
