//! The overhead governor: keeps the CPU that probe hits cost the server
//! under a budget (a percentage of one core). Each period it projects every
//! probe's cost from its live hit rate and the calibrated per-call cost,
//! shares the budget out (cheap probes stay fully on, expensive ones get
//! what is left, evenly), and duty-cycles a probe it cannot afford in
//! full: attached for `ratio` of each period, detached for the rest. A
//! probe that cannot be afforded even at `MIN_RATIO` is detached for the
//! rest of the recording. Counts of a duty-cycled probe are later scaled
//! by the fraction of time it was really attached.
//!
//! This module decides; the recorder does the attaching and detaching.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Below this share of time a probe is detached instead: its on-window
/// would be shorter than `min_on` even in the longest period.
pub const MIN_RATIO: f64 = 0.02;
/// The default budget: 1 % of one core.
pub const DEFAULT_BUDGET_PCT: f64 = 1.0;
/// The first period, with every probe on, only measures hit rates: short,
/// because a hot probe costs many times the budget while it lasts.
const FIRST_PERIOD: Duration = Duration::from_millis(50);

/// Attaching a uprobe takes tens of ms and detaching one waits for an RCU
/// grace period (hundreds of ms on a busy 2-core host), so a probe is
/// never switched on for less than `min_on`: the period stretches instead
/// (up to `max_period`), e.g. 2.5 % duty is 200 ms on in every 8 s.
#[derive(Debug, Clone, Copy)]
pub struct GovernorConfig {
    /// Percent of one core all probe hits together may cost.
    pub budget_pct: f64,
    pub min_period: Duration,
    pub max_period: Duration,
    pub min_on: Duration,
    /// The budget holds over any window this long: spending above it (a
    /// load that starts while hot probes are fully on) is paid back within
    /// the window, and older history is forgotten.
    pub window: Duration,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            budget_pct: DEFAULT_BUDGET_PCT,
            // Re-planned four times a second: a load that starts while the
            // hot probes are fully on is caught within 250 ms.
            min_period: Duration::from_millis(250),
            max_period: Duration::from_secs(10),
            min_on: Duration::from_millis(200),
            window: Duration::from_secs(10),
        }
    }
}

impl GovernorConfig {
    /// The period that gives the smallest duty ratio its `min_on` window.
    fn period_for(&self, ratios: &[f64]) -> Duration {
        let smallest = ratios
            .iter()
            .copied()
            .filter(|r| *r > 0.0 && *r < 1.0)
            .fold(1.0, f64::min);
        self.min_on
            .div_f64(smallest)
            .clamp(self.min_period, self.max_period)
    }
}

/// One probe as the governor sees it: its slots and what a call costs at each.
#[derive(Debug, Clone)]
pub struct GovernedProbe {
    pub slots: Vec<(usize, f64)>,
}

/// What the recorder must do now.
#[derive(Debug, Default, PartialEq)]
pub struct Actions {
    pub suspend: Vec<usize>,
    pub resume: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DutyState {
    /// Attached the whole time.
    Full,
    /// Attached for part of each period.
    Cycled,
    /// Detached for good: unaffordable even at `MIN_RATIO`.
    Detached,
}

/// A probe's duty over the whole recording.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DutyReport {
    pub state: DutyState,
    /// Fraction of the recording it was attached (1.0: always).
    pub attached_fraction: f64,
    /// Cost, in fractions of a core, it was projected to have fully on.
    pub projected_full_cost: f64,
    /// Calls counted while the session was still attaching, before the
    /// governor's clock started (not part of the sampled window).
    pub calls_before_start: u64,
}

struct ProbeState {
    slots: Vec<(usize, f64)>,
    ratio: f64,
    attached_since: Option<Instant>,
    attached_total: Duration,
    /// Attached time within the current period.
    attached_in_period: Duration,
    last_calls: HashMap<usize, u64>,
    calls_before_start: u64,
    /// Last projected cost fully on (fraction of a core).
    projected: f64,
    detached_for_good: bool,
    ever_cycled: bool,
}

impl ProbeState {
    fn attach(&mut self, now: Instant, actions: &mut Actions) {
        if self.attached_since.is_none() {
            self.attached_since = Some(now);
            actions.resume.extend(self.slots.iter().map(|(s, _)| *s));
        }
    }

    fn detach(&mut self, now: Instant, actions: &mut Actions) {
        if let Some(since) = self.attached_since.take() {
            let on = now.saturating_duration_since(since);
            self.attached_total += on;
            self.attached_in_period += on;
            actions.suspend.extend(self.slots.iter().map(|(s, _)| *s));
        }
    }

    /// Attached time in this period up to `now`.
    fn on_time(&self, now: Instant) -> Duration {
        self.attached_in_period
            + self
                .attached_since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

pub struct Governor {
    cfg: GovernorConfig,
    probes: Vec<ProbeState>,
    /// Core-seconds spent in probe hits so far (observed × per-call cost).
    spent: f64,
    /// (time, `spent` then) at each period end within the last `window`.
    history: std::collections::VecDeque<(Instant, f64)>,
    started: Instant,
    period_start: Instant,
    period_len: Duration,
    /// When the fully-on probes' spend was last checked mid-period.
    last_check: Instant,
}

impl Governor {
    /// All probes start attached (the session attached them) at `now`.
    /// `calls` so far (hits while the session was still attaching) are
    /// left out of the first period's rate.
    pub fn new(
        cfg: GovernorConfig,
        probes: Vec<GovernedProbe>,
        calls: &HashMap<usize, u64>,
        now: Instant,
    ) -> Self {
        let probes = probes
            .into_iter()
            .map(|p| ProbeState {
                calls_before_start: p
                    .slots
                    .iter()
                    .map(|(s, _)| calls.get(s).copied().unwrap_or(0))
                    .sum(),
                last_calls: p
                    .slots
                    .iter()
                    .map(|(s, _)| (*s, calls.get(s).copied().unwrap_or(0)))
                    .collect(),
                slots: p.slots,
                ratio: 1.0,
                attached_since: Some(now),
                attached_total: Duration::ZERO,
                attached_in_period: Duration::ZERO,
                projected: 0.0,
                detached_for_good: false,
                ever_cycled: false,
            })
            .collect();
        Self {
            cfg,
            probes,
            spent: 0.0,
            history: std::collections::VecDeque::from([(now, 0.0)]),
            started: now,
            period_start: now,
            last_check: now,
            period_len: FIRST_PERIOD.min(cfg.min_period),
        }
    }

    /// Call often (every 10–20 ms). `calls` reads the cumulative calls per
    /// slot from the maps; it is only called at period ends.
    pub fn tick(&mut self, now: Instant, calls: impl FnOnce() -> HashMap<usize, u64>) -> Actions {
        let mut actions = Actions::default();
        if now >= self.period_start + self.period_len {
            self.new_period(now, &calls(), &mut actions);
        } else if now >= self.last_check + self.cfg.min_period {
            // A long period (stretched for a small duty) would otherwise
            // leave the fully-on probes unwatched for up to `max_period`,
            // e.g. when they were planned before a load started.
            self.last_check = now;
            let calls = calls();
            if self.full_probes_overspend(now, &calls) {
                self.new_period(now, &calls, &mut actions);
            } else {
                self.end_on_phases(now, &mut actions);
            }
        } else {
            self.end_on_phases(now, &mut actions);
        }
        actions
    }

    /// Whether the probes planned fully on spent, since the period began,
    /// far more than planned: twice their projected cost plus half the
    /// budget. Duty-cycled probes are bounded by their on-time already.
    fn full_probes_overspend(&self, now: Instant, calls: &HashMap<usize, u64>) -> bool {
        let elapsed = now
            .saturating_duration_since(self.period_start)
            .as_secs_f64();
        let (mut spent, mut projected) = (0.0, 0.0);
        for p in self
            .probes
            .iter()
            .filter(|p| p.ratio >= 1.0 && !p.detached_for_good)
        {
            projected += p.projected;
            for (slot, cost) in &p.slots {
                let total = calls.get(slot).copied().unwrap_or(0);
                let last = p.last_calls.get(slot).copied().unwrap_or(0);
                spent += total.saturating_sub(last) as f64 * cost / 1e9;
            }
        }
        let budget = self.cfg.budget_pct / 100.0;
        spent > (2.0 * projected + 0.5 * budget) * elapsed
    }

    /// Switches off the duty-cycled probes whose on-time in this period is over.
    fn end_on_phases(&mut self, now: Instant, actions: &mut Actions) {
        {
            let on_until = |ratio: f64| self.period_start + self.period_len.mul_f64(ratio);
            for p in &mut self.probes {
                if p.ratio < 1.0 && now >= on_until(p.ratio) {
                    p.detach(now, actions);
                }
            }
        }
    }

    fn new_period(&mut self, now: Instant, calls: &HashMap<usize, u64>, actions: &mut Actions) {
        let mut costs = Vec::with_capacity(self.probes.len());
        for p in &mut self.probes {
            let on = p.on_time(now).as_secs_f64();
            let mut spent_ns = 0.0;
            for (slot, cost) in &p.slots {
                let total = calls.get(slot).copied().unwrap_or(0);
                let last = p.last_calls.insert(*slot, total).unwrap_or(0);
                spent_ns += total.saturating_sub(last) as f64 * cost;
            }
            self.spent += spent_ns / 1e9;
            // Too short a window says nothing new: keep the last projection.
            if on >= 0.005 {
                p.projected = spent_ns / 1e9 / on;
            }
            costs.push(if p.detached_for_good {
                0.0
            } else {
                p.projected
            });
        }
        let budget = self.cfg.budget_pct / 100.0;
        // Probes unaffordable at the minimum duty (ratio 0) go for good.
        let allocation = allocate(&costs, budget, MIN_RATIO);
        // The budget holds over the last `window`: what was overspent (the
        // all-on first period, a load that just started) is paid back by
        // running leaner, and what was underspent is not saved for a burst.
        while self
            .history
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= self.cfg.window)
        {
            self.history.pop_front();
        }
        // The time before the recording counts as spent on nothing, so a
        // burst at the start (a fixture's 1,500 calls in 50 ms) is within
        // budget as long as the window's whole allowance covers it.
        let (_, spent_then) = self.history[0];
        let span = self.cfg.window.as_secs_f64();
        let next = self.cfg.min_period.as_secs_f64();
        let allowed =
            ((budget * (span + next) - (self.spent - spent_then)) / next).clamp(0.0, budget);
        self.history.push_back((now, self.spent));
        let elapsed = now.saturating_duration_since(self.started).as_secs_f64();
        let duties: Vec<Duty> = allocation
            .iter()
            .zip(&costs)
            .map(|(&r, &cost)| {
                // A probe that costs nothing has nothing to pay back.
                let scaled = if cost > 0.0 { r * allowed / budget } else { r };
                if r <= 0.0 {
                    Duty::Detach
                } else if scaled < MIN_RATIO {
                    Duty::Pause
                } else {
                    Duty::On(scaled)
                }
            })
            .collect();
        let ratios: Vec<f64> = duties
            .iter()
            .map(|d| if let Duty::On(r) = d { *r } else { 1.0 })
            .collect();
        self.period_len = self.cfg.period_for(&ratios);
        if std::env::var_os("INNOPROF_DEBUG_GOVERNOR").is_some() {
            eprintln!(
                "governor: t={elapsed:.2}s spent={:.4} allowed={allowed:.4} period={:?} costs={:?} ratios={:?}",
                self.spent,
                self.period_len,
                costs.iter().map(|c| (c * 1e4).round() / 1e4).collect::<Vec<_>>(),
                ratios.iter().map(|c| (c * 1e3).round() / 1e3).collect::<Vec<_>>()
            );
        }
        for (p, duty) in self.probes.iter_mut().zip(duties) {
            if p.detached_for_good {
                continue;
            }
            // Close the old period's accounting at the boundary.
            if let Some(since) = p.attached_since {
                p.attached_total += now.saturating_duration_since(since);
                p.attached_since = Some(now);
            }
            p.attached_in_period = Duration::ZERO;
            match duty {
                Duty::Detach => {
                    p.ratio = 0.0;
                    p.detached_for_good = true;
                    p.detach(now, actions);
                }
                // Paying back: off this period, on again once it is paid.
                Duty::Pause => {
                    p.ratio = 0.0;
                    p.ever_cycled = true;
                    p.detach(now, actions);
                }
                Duty::On(r) => {
                    p.ratio = r;
                    p.ever_cycled |= r < 1.0;
                    p.attach(now, actions);
                }
            }
        }
        self.period_start = now;
        self.last_check = now;
    }

    /// The recorder finished re-attaching `slots` at `now`: attaching takes
    /// tens of ms, and the on-time starts when the probe is really live.
    pub fn resumed(&mut self, slots: &[usize], now: Instant) {
        for p in &mut self.probes {
            if p.slots.iter().any(|(s, _)| slots.contains(s)) {
                if let Some(since) = p.attached_since.as_mut() {
                    *since = (*since).max(now);
                }
            }
        }
    }

    /// Seconds each probe has been switched on so far, for live readers
    /// (a duty-cycled probe's calls over this is its rate while on).
    pub fn attached_seconds(&self, now: Instant) -> Vec<f64> {
        self.probes
            .iter()
            .map(|p| {
                let current = p
                    .attached_since
                    .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
                (p.attached_total + current).as_secs_f64()
            })
            .collect()
    }

    /// Detaches nothing; closes the books at the end of the recording.
    pub fn finish(&mut self, now: Instant) -> Vec<DutyReport> {
        let total = now.saturating_duration_since(self.started).as_secs_f64();
        self.probes
            .iter_mut()
            .map(|p| {
                if let Some(since) = p.attached_since.take() {
                    p.attached_total += now.saturating_duration_since(since);
                }
                let fraction = if total > 0.0 {
                    (p.attached_total.as_secs_f64() / total).min(1.0)
                } else {
                    1.0
                };
                DutyReport {
                    state: if p.detached_for_good {
                        DutyState::Detached
                    } else if p.ever_cycled {
                        DutyState::Cycled
                    } else {
                        DutyState::Full
                    },
                    attached_fraction: if p.ever_cycled || p.detached_for_good {
                        fraction
                    } else {
                        1.0
                    },
                    projected_full_cost: p.projected,
                    calls_before_start: p.calls_before_start,
                }
            })
            .collect()
    }
}

/// A probe's duty for the next period.
enum Duty {
    On(f64),
    /// Off for this period (the budget is being paid back).
    Pause,
    /// Off for good (unaffordable at the minimum duty).
    Detach,
}

/// Water-filling: the cheapest probes are kept fully on while each fits in
/// an even share of what is left; the rest split the remainder evenly, each
/// attached for `share / cost` of the time. A probe whose ratio would fall
/// under `min_ratio` gets 0 (detached) and its share goes to the others.
pub fn allocate(costs: &[f64], budget: f64, min_ratio: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|a, b| costs[*a].total_cmp(&costs[*b]));
    let mut ratios = vec![1.0; costs.len()];
    let mut left = budget.max(0.0);
    let mut remaining = costs.len();
    for i in order {
        let share = left / remaining as f64;
        remaining -= 1;
        let cost = costs[i];
        if cost <= share {
            left -= cost;
            continue;
        }
        let ratio = share / cost;
        if ratio < min_ratio {
            ratios[i] = 0.0;
        } else {
            ratios[i] = ratio;
            left -= share;
        }
    }
    ratios
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round numbers for the arithmetic below: re-planned every second,
    /// the budget held over the whole (short) recording.
    fn per_second() -> GovernorConfig {
        GovernorConfig {
            min_period: Duration::from_secs(1),
            window: Duration::from_secs(60),
            ..GovernorConfig::default()
        }
    }

    #[test]
    fn cheap_probes_stay_on_and_the_rest_share_what_is_left() {
        // Budget 1% of a core; costs in fractions of a core.
        let r = allocate(&[0.0001, 0.002, 0.08, 0.3], 0.01, MIN_RATIO / 2.0);
        assert_eq!(r[0], 1.0);
        assert_eq!(r[1], 1.0);
        let left = 0.01 - 0.0001 - 0.002;
        assert!((r[2] - left / 2.0 / 0.08).abs() < 1e-12, "{r:?}");
        assert!((r[3] - left / 2.0 / 0.3).abs() < 1e-12, "{r:?}");
        let spent: f64 = r
            .iter()
            .zip([0.0001, 0.002, 0.08, 0.3])
            .map(|(r, c)| r * c)
            .sum();
        assert!(spent <= 0.01 + 1e-12);
    }

    #[test]
    fn everything_affordable_stays_on() {
        assert_eq!(allocate(&[0.001, 0.002, 0.0], 0.01, 0.01), vec![1.0; 3]);
    }

    #[test]
    fn hopeless_probes_are_detached_and_their_share_reused() {
        // 0.005 of budget each for two probes; 10 cores of cost is hopeless.
        let r = allocate(&[0.006, 10.0], 0.01, MIN_RATIO);
        // The cheap one gets an even share (0.005) first, then 10.0 would
        // get 0.005/10 < 2%: detached.
        assert_eq!(r[1], 0.0);
        assert!((r[0] - 0.005 / 0.006).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn period_stretches_so_the_smallest_duty_gets_its_window() {
        let cfg = GovernorConfig::default();
        assert_eq!(cfg.period_for(&[1.0, 1.0]), Duration::from_millis(250));
        assert_eq!(cfg.period_for(&[1.0, 0.5]), Duration::from_millis(400));
        assert_eq!(cfg.period_for(&[0.05, 0.5]), Duration::from_secs(4));
        assert_eq!(cfg.period_for(&[0.001]), Duration::from_secs(10));
    }

    #[test]
    fn duty_cycle_follows_the_allocation() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // One probe at 1000 ns per call, 1% of a core to spend.
        let mut g = Governor::new(
            per_second(),
            vec![GovernedProbe {
                slots: vec![(0, 1000.0)],
            }],
            &HashMap::new(),
            t0,
        );
        // Nothing to do mid-period.
        assert_eq!(g.tick(t0 + ms(10), HashMap::new), Actions::default());
        // 5k calls in the first 50 ms: 10% of a core, so the duty is 10%:
        // 200 ms on in every 2 s.
        let t1 = t0 + FIRST_PERIOD;
        let a = g.tick(t1, || HashMap::from([(0, 5_000)]));
        assert_eq!(a, Actions::default(), "still attached at the period start");
        assert!(
            (g.probes[0].ratio - 0.1).abs() < 1e-9,
            "{}",
            g.probes[0].ratio
        );
        assert_eq!(g.period_len, Duration::from_secs(2));
        assert_eq!(g.tick(t1 + ms(190), || unreachable!()), Actions::default());
        let a = g.tick(t1 + ms(201), || unreachable!());
        assert_eq!(a.suspend, vec![0]);
        // Mid-period check (a second in): the probe is off, nothing to do.
        assert_eq!(
            g.tick(t1 + ms(1500), || HashMap::from([(0, 25_100)])),
            Actions::default()
        );
        // Next period: 20,100 more calls in the 201 ms it was on (still 10%
        // of a core): re-attached at the same duty.
        let t2 = t1 + g.period_len;
        let a = g.tick(t2, || HashMap::from([(0, 25_100)]));
        assert_eq!(a.resume, vec![0]);
        assert!(
            (g.probes[0].ratio - 0.1).abs() < 1e-9,
            "{}",
            g.probes[0].ratio
        );
        let t3 = t2 + ms(100);
        let duty = g.finish(t3);
        assert_eq!(duty[0].state, DutyState::Cycled);
        // On: 50 + 201 + 100 ms of the whole.
        let whole = (t3 - t0).as_secs_f64();
        assert!(
            (duty[0].attached_fraction - 0.351 / whole).abs() < 1e-3,
            "{duty:?}"
        );
        assert!((duty[0].projected_full_cost - 0.1).abs() < 1e-3, "{duty:?}");
    }

    /// A small duty stretches the period to seconds; a probe planned fully
    /// on while the server was idle must not run unwatched that long once
    /// the load starts (CI saw 4.4 % spent on a 1 % budget that way).
    #[test]
    fn a_fully_on_probe_that_gets_dear_mid_period_is_replanned() {
        let t0 = Instant::now();
        let cfg = GovernorConfig {
            min_period: Duration::from_millis(250),
            window: Duration::from_secs(60),
            ..GovernorConfig::default()
        };
        let probes = vec![
            GovernedProbe {
                slots: vec![(0, 1000.0)],
            },
            GovernedProbe {
                slots: vec![(1, 1000.0)],
            },
        ];
        let mut g = Governor::new(cfg, probes, &HashMap::new(), t0);
        // Probe 0 costs 20% of a core, probe 1 almost nothing (idle server).
        let t1 = t0 + FIRST_PERIOD;
        g.tick(t1, || HashMap::from([(0, 10_000), (1, 1)]));
        assert!(g.probes[0].ratio < 0.1 && g.probes[1].ratio == 1.0);
        assert!(g.period_len >= Duration::from_secs(2), "{:?}", g.period_len);
        // The load starts: probe 1 now costs 20% of a core too. Within a
        // min_period the governor re-plans and cycles it.
        let t2 = t1 + Duration::from_millis(300);
        g.tick(t2, || {
            HashMap::from([(0, 10_000 + 10_000), (1, 1 + 60_000)])
        });
        assert!(g.probes[1].ratio < 0.1, "{}", g.probes[1].ratio);
        assert_eq!(g.period_start, t2);
    }

    /// Within the plan, no re-planning: a duty-cycled probe spends its
    /// period's share up front, and that is not overspending.
    #[test]
    fn front_loaded_duty_is_not_overspending() {
        let t0 = Instant::now();
        let cfg = GovernorConfig {
            min_period: Duration::from_millis(250),
            window: Duration::from_secs(60),
            ..GovernorConfig::default()
        };
        let probes = vec![GovernedProbe {
            slots: vec![(0, 1000.0)],
        }];
        let mut g = Governor::new(cfg, probes, &HashMap::new(), t0);
        let t1 = t0 + FIRST_PERIOD;
        g.tick(t1, || HashMap::from([(0, 10_000)]));
        let (start, ratio) = (g.period_start, g.probes[0].ratio);
        assert!(ratio < 0.1);
        // On for its whole on-phase at 20% of a core, then checked.
        let t2 = t1 + Duration::from_millis(300);
        g.tick(t2, || HashMap::from([(0, 10_000 + 40_000)]));
        assert_eq!(g.period_start, start, "re-planned a probe within its duty");
    }

    #[test]
    fn hits_while_attaching_are_not_in_the_first_rate() {
        let t0 = Instant::now();
        let slots = vec![GovernedProbe {
            slots: vec![(0, 1000.0), (1, 1000.0)],
        }];
        let before = HashMap::from([(0, 700_000), (1, 300_000)]);
        let mut g = Governor::new(per_second(), slots, &before, t0);
        // 200 new calls in 50 ms: 0.4% of a core, affordable: stays on.
        let a = g.tick(t0 + FIRST_PERIOD, || {
            HashMap::from([(0, 700_100), (1, 300_100)])
        });
        assert_eq!(a, Actions::default());
        assert!((g.probes[0].projected - 0.004).abs() < 1e-9);
        let duty = g.finish(t0 + FIRST_PERIOD);
        assert_eq!(duty[0].calls_before_start, 1_000_000);
        assert_eq!(duty[0].state, DutyState::Full);
    }

    #[test]
    fn a_hopeless_probe_is_detached_for_good() {
        let t0 = Instant::now();
        let mut g = Governor::new(
            per_second(),
            vec![GovernedProbe {
                slots: vec![(0, 1000.0)],
            }],
            &HashMap::new(),
            t0,
        );
        // 50k calls in 50 ms: a whole core. Even at the 2% minimum duty it
        // would cost 2% of a core, twice the budget.
        let a = g.tick(t0 + FIRST_PERIOD, || HashMap::from([(0, 50_000)]));
        assert_eq!(a.suspend, vec![0]);
        assert!(g.probes[0].detached_for_good);
        assert_eq!(g.finish(t0 + FIRST_PERIOD)[0].state, DutyState::Detached);
    }

    #[test]
    fn overspending_pauses_until_it_leaves_the_window() {
        let t0 = Instant::now();
        let cfg = GovernorConfig {
            min_period: Duration::from_secs(1),
            window: Duration::from_secs(1),
            ..GovernorConfig::default()
        };
        let mut g = Governor::new(
            cfg,
            vec![GovernedProbe {
                slots: vec![(0, 1000.0)],
            }],
            &HashMap::new(),
            t0,
        );
        // 25k calls in 50 ms: half a core, 0.025 core-s. Affordable at 2%
        // duty, but the 1 s window allows 0.02 core-s in all: paused, not
        // detached.
        let a = g.tick(t0 + FIRST_PERIOD, || HashMap::from([(0, 25_000)]));
        assert_eq!(a.suspend, vec![0]);
        assert!(!g.probes[0].detached_for_good);
        // A second later the burst has left the window: back, at the duty
        // it can afford (1% / 50% = 2%).
        let a = g.tick(t0 + FIRST_PERIOD + Duration::from_secs(1), || {
            HashMap::from([(0, 25_000)])
        });
        assert_eq!(a.resume, vec![0]);
        assert!(
            (g.probes[0].ratio - 0.02).abs() < 1e-9,
            "{}",
            g.probes[0].ratio
        );
    }
}
