//! The overhead governor: keeps the server CPU that probe hits cost under
//! a budget (a percentage of one core, held over any `window`, 10 s).
//!
//! At each decision it reads each probe's calls, charges them at the
//! probe's per-call cost (`SlotCost`: what every hit pays + the stack
//! walk, divided by the stack sampling rate), and plans the next `horizon`
//! with what the window still allows: the savings of a quiet stretch pay
//! for a burst, and a window spent in full allows nothing more until its
//! spending slides out, so the budget holds over every `window` (the cut
//! probes' minimum on-time aside, see `min_on`).
//! Decisions come every `tick` (50 ms) while anything moves, up to
//! `calm_tick` (500 ms) apart once settled, and at once when the BPF alarm
//! rings (more hits on some CPU than the stretch was planned for: see
//! `Governor::look_again`). The plan:
//!
//! 1. Probes that fit stay fully on with every stack: cheapest first, as
//!    long as each costs no more than an equal share of what is left
//!    (max-min fair). Probes that all fit together are never sampled or
//!    cut; in a set over the budget, a probe cheaper than its share is
//!    not either, and the dearer ones share the rest.
//!    A burst that the window's allowance covers (10,000 calls in 0.6 s)
//!    is therefore counted in full.
//! 2. The rest keep counting every hit but take the stack of one hit in N
//!    (BPF `stack_every`, no attach or detach): the smallest power of two
//!    up to `MAX_STACK_EVERY` that makes them fit.
//! 3. Only if that is not enough are they watched in **spread windows**:
//!    once every `period` (1 s, or `--interval` if shorter), at a phase
//!    drawn at random when the recording starts (the same for every cut
//!    probe, so their switches share one batched attach), on for their
//!    share of the period (at least `min_window`), off for the rest. A
//!    systematic sample of the whole recording: never off for longer than
//!    a period, so a change that starts mid-recording shows within one.
//!    (Until issue 50 a cut probe was on for 1 s windows and off for up to
//!    19 s; the seed incident's undo probe was watched 0-0.7 s of a 12 s
//!    recording and never while the snapshot was open.) A probe that fits
//!    its share of the steady budget is never cut, whatever the others do.
//!    All switches of one tick come in one `Actions`.
//!
//! One price: every hit is charged at its own slot's cost (the calibrated
//! trap plus the programs' run time measured in the target, stacks as
//! thinned), the figure `hit_price` puts on the same hits; and a probe's
//! rate for planning is its calls per second *on* over the last seconds,
//! not over the stretch since the last look (which the alarm brings in a
//! burst).
//!
//! Every on-window of every probe is recorded (start, end, calls, wait):
//! [`crate::cost::estimate`] turns them into design-based estimates.
//!
//! This module decides; the recorder attaches, detaches and sets rates.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::bpf::abi::SlotId;
use crate::collect::SlotCount;
use crate::cost::estimate::OnWindow;

/// The default budget: 1 % of one core.
pub const DEFAULT_BUDGET_PCT: f64 = 1.0;
/// The sparsest stack sampling: one hit in 1,024.
pub const MAX_STACK_EVERY: u32 = 1024;
/// The first decision, with every probe on, only measures hit rates: short,
/// because a hot probe costs many times the budget while it lasts.
const FIRST_TICK: Duration = Duration::from_millis(50);
/// No calm look before the probes were watched this long: the first
/// rates are a few ticks' worth, and the per-hit costs measured in the
/// target replace the calibrated ones only after a second. A calm look on
/// the first 50 ms let `--probes all` on MariaDB 10.2.11 spend 44 % of a
/// core for its 500 ms (its rates and costs underestimated 2.4x).
const CALM_AFTER: Duration = Duration::from_secs(1);

/// The shortest on-time a rate is measured over.
const MIN_RATE_SPAN: Duration = Duration::from_millis(5);

/// A probe's steady rate (what it is planned with) is its calls per second
/// on over the looks of this last stretch of wall time. The rate since the
/// last look alone was what the plan used until issue 50: the BPF alarm
/// brings a look when a CPU takes more hits than planned, i.e. inside a
/// burst, so the rates it measured were burst rates. On MariaDB 11.4.5
/// (S1) the undo walk comes in bursts at each SELECT of the reader, and the
/// probe's projected full cost read 68.5 % of a core where its hits,
/// priced the same way, cost ~2 %.
const STEADY_SPAN: Duration = Duration::from_secs(3);

/// Calm looks and cut probes' switches fall on multiples of this from the
/// start (see `look_again` and `on_grid`).
const CALM_GRID: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy)]
pub struct GovernorConfig {
    /// Percent of one core all probe hits together may cost.
    pub budget_pct: f64,
    /// How often costs are re-read and the plan re-made (BPF-side levers
    /// change at once; detaching waits for `min_on`).
    pub tick: Duration,
    /// After a decision that changed nothing, the next comes this much
    /// later at most (a switch planned earlier, or the alarm, brings it
    /// sooner): each look wakes the agent, which under load costs more
    /// than the read itself.
    pub calm_tick: Duration,
    /// The budget holds over any window this long.
    pub window: Duration,
    /// A cut probe is watched once per period (systematic sampling).
    pub period: Duration,
    /// The shortest window of a cut probe: its least share of each period
    /// (`min_window / period`), and the one way past the budget, for a
    /// probe whose smallest window costs more than its share.
    pub min_window: Duration,
    /// Each decision plans this far ahead: what the window still allows is
    /// spread over it. Short, because decisions come every tick and a cut
    /// takes effect within a tick and a detach (~0.1 s); a long one would
    /// cut a burst the window can still pay for.
    pub horizon: Duration,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        Self {
            budget_pct: DEFAULT_BUDGET_PCT,
            // A probe set fully on can cost more than a core under load
            // (`--probes all` on MariaDB 10.2.11: 40-150 %): the window's
            // 0.1 s goes in a few ticks, so decisions come often. A tick
            // is one batched map read.
            tick: Duration::from_millis(50),
            calm_tick: Duration::from_millis(500),
            window: Duration::from_secs(10),
            period: Duration::from_secs(1),
            // A batched attach is ~1 ms and the flag switches at once: a
            // 20 ms window is a 2 % duty (the old floor was 5 %, 1 s in 20).
            min_window: Duration::from_millis(20),
            horizon: Duration::from_millis(250),
        }
    }
}

impl GovernorConfig {
    /// The smallest share of time a cut probe is on.
    pub fn min_duty(&self) -> f64 {
        (self.min_window.as_secs_f64() / self.period.as_secs_f64()).min(1.0)
    }

    /// The sampling period for a recording with `--interval` (if any): at
    /// least one window every second or every interval, whichever is
    /// shorter, so each interval of the series holds a window.
    pub fn with_interval(mut self, interval: Option<Duration>) -> Self {
        if let Some(i) = interval.filter(|i| !i.is_zero()) {
            self.period = self.period.min(i);
            self.min_window = self.min_window.min(self.period / 4);
        }
        self
    }
}

/// What one hit of a slot costs the server: the part every hit pays and
/// the stack walk, which 1-in-N stack sampling divides by N.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SlotCost {
    pub base_ns: f64,
    pub stack_ns: f64,
}

impl SlotCost {
    /// The cost `factor` times over: what the server was measured to pay
    /// per modelled ns (see [`crate::cost::in_target`]).
    pub fn scaled(self, factor: f64) -> Self {
        Self {
            base_ns: self.base_ns * factor,
            stack_ns: self.stack_ns * factor,
        }
    }

    pub fn per_call_ns(&self, stack_every: u32) -> f64 {
        self.base_ns
            + if stack_every == 0 {
                0.0
            } else {
                self.stack_ns / f64::from(stack_every)
            }
    }
}

/// One probe as the governor sees it: its slots and their costs.
#[derive(Debug, Clone)]
pub struct GovernedProbe {
    pub slots: Vec<(SlotId, SlotCost)>,
}

/// What the recorder must do now, all in one batch.
#[derive(Debug, Default, PartialEq)]
pub struct Actions {
    pub suspend: Vec<SlotId>,
    pub resume: Vec<SlotId>,
    /// New stack sampling rates (slot, 1-in-N).
    pub stack_every: Vec<(SlotId, u32)>,
}

impl Actions {
    pub fn is_empty(&self) -> bool {
        self.suspend.is_empty() && self.resume.is_empty() && self.stack_every.is_empty()
    }
}

/// A probe's account over the whole recording.
#[derive(Debug, Clone, PartialEq)]
pub struct DutyReport {
    /// Ever detached by the governor.
    pub cut: bool,
    /// Attached at the end of the recording.
    pub on_at_end: bool,
    /// The on-windows, in time order (one spanning the recording when never cut).
    pub windows: Vec<OnWindow>,
    /// Fraction of the recording it was on.
    pub attached_fraction: f64,
    /// Cost, in fractions of a core, it was last projected to have fully on with every stack.
    pub projected_full_cost: f64,
    /// The sparsest stack sampling it had (1: every hit's stack).
    pub stack_every_max: u32,
    /// Calls counted while the session was still attaching, before the
    /// governor's clock started (not in any window).
    pub calls_before_start: u64,
    /// The spread windows' period, seconds: what each window stands for.
    pub period_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Full,
    /// Watched in spread windows: on until `on_until`, else off until
    /// `next_on` (the next period's phase).
    Cut,
}

struct ProbeState {
    slots: Vec<(SlotId, SlotCost)>,
    mode: Mode,
    /// Live (the flag is on) since.
    on_since: Option<Instant>,
    on_until: Option<Instant>,
    next_on: Option<Instant>,
    /// A cut probe's window, per period.
    window: Duration,
    /// A cut probe is on every `stride`-th period: 1 unless the detach
    /// lag's hits alone overspend its share each period.
    stride: u32,
    stride_max: u32,
    stack_every: u32,
    stack_every_max: u32,
    /// Calls per second while on, since the last look (the alarm's and the
    /// horizon's rate).
    rate: f64,
    /// When and at what call count `rate` was last measured (or the
    /// probe last switched on).
    rate_from: (Instant, u64),
    /// (look, seconds on, calls) since the look before, within
    /// [`STEADY_SPAN`]: the steady rate's samples.
    rate_samples: VecDeque<(Instant, f64, u64)>,
    /// Counters at the last tick, in all and per slot.
    last: SlotCount,
    slot_last: Vec<SlotCount>,
    /// Counters when the current (or last) window opened.
    window_start: SlotCount,
    /// Counters when the last closed window opened: its calls are topped
    /// up from them until the next window opens (`window_start` moves at a
    /// switch-on the recorder may defer, and a closed window once took
    /// that as its own start: 0 calls for a 6 s window of 4,000).
    closed_from: SlotCount,
    windows: Vec<OnWindow>,
    calls_before_start: u64,
    ever_cut: bool,
    /// Hits after the last switch-off (each paid the trap until the
    /// kernel's detach), so far.
    lag_hits_now: u64,
    /// Hits per switch-off, measured: risen at once to a larger count,
    /// halved down to smaller ones. A probe that fires in bursts (S1's undo
    /// walk, one burst per SELECT) is seen at a low rate in its 20 ms
    /// windows but takes a whole burst in every ~0.1 s detach: planned at
    /// the windows' rate, the lag cost 2-3 % of a core on a 1 % budget.
    lag_hits: f64,
}

impl ProbeState {
    fn sum(&self, counts: &HashMap<SlotId, SlotCount>) -> SlotCount {
        let mut s = SlotCount::default();
        for (slot, _) in &self.slots {
            let c = counts.get(slot).copied().unwrap_or_default();
            s.calls += c.calls;
            s.wait_ns += c.wait_ns;
            s.stacks += c.stacks;
            s.off_hits += c.off_hits;
        }
        s
    }

    /// ns per call at stack rate `every`: the slots' costs weighted by the
    /// calls each took (a probe whose hot symbol is push-entered and whose
    /// idle one single-steps costs what the hot one does; an unweighted
    /// mean priced it half-way to the stepped trap).
    fn per_call_ns(&self, every: u32) -> f64 {
        self.cost().per_call_ns(every)
    }

    /// One call's cost split as the plan wants it, the slots weighted as
    /// in [`Self::per_call_ns`].
    fn cost(&self) -> SlotCost {
        let total: u64 = self.slot_last.iter().map(|c| c.calls).sum();
        let n = self.slots.len().max(1) as f64;
        let mut out = SlotCost::default();
        for (i, (_, c)) in self.slots.iter().enumerate() {
            let w = if total == 0 {
                1.0 / n
            } else {
                self.slot_last.get(i).map_or(0.0, |s| s.calls as f64) / total as f64
            };
            out.base_ns += w * c.base_ns;
            out.stack_ns += w * c.stack_ns;
        }
        out
    }

    /// Calls per second on, over the looks of the last [`STEADY_SPAN`]
    /// (the last rate when they hold too little on-time).
    /// At least the rate its switch-offs' hits show (`lag_hits` over the
    /// detach lag): short windows can miss a bursty probe's bursts, which
    /// a 0.1 s detach takes whole (planned at the windows' ~0 rate, S1's
    /// undo probe was let back fully on and spent 5x its share).
    fn steady_rate(&self, lag: f64) -> f64 {
        let on: f64 = self.rate_samples.iter().map(|s| s.1).sum();
        let windows = if on < MIN_RATE_SPAN.as_secs_f64() {
            self.rate
        } else {
            self.rate_samples.iter().map(|s| s.2).sum::<u64>() as f64 / on
        };
        let lagged = if lag >= MIN_RATE_SPAN.as_secs_f64() {
            self.lag_hits / lag
        } else {
            0.0
        };
        windows.max(lagged)
    }

    /// The hits one switch-off costs, expected: what switch-offs were
    /// seen to cost once one was counted whole, the rate on over the
    /// detach `lag` before that. The kernel removes a link's breakpoints
    /// before it waits out the grace period, so a detach of ~0.1 s takes
    /// far fewer hits than 0.1 s at the rate: 593 for 5 switch-offs of a
    /// 60,000 calls/s probe, where rate x lag priced each at ~6,000, so
    /// its stride stretched to 3-4 periods and its estimate had 6 windows
    /// (a bound of 46 %). A bursty probe's bursts in its detaches are in
    /// the count (S1's undo walk), and the count rises at once.
    fn lag_hits(&self, rate: f64, lag: f64) -> f64 {
        // A switch-off's hits are all counted at the next switch-off (a
        // probe is not re-attached while its detach is pending), which
        // closes the second window.
        let expected = if self.windows.len() >= 2 {
            self.lag_hits
        } else {
            rate * lag
        };
        expected.max(self.lag_hits_now as f64)
    }

    /// The seconds on at `rate` that one switch-off's hits amount to (at
    /// most the detach `lag`).
    fn lag_on_s(&self, rate: f64, lag: f64) -> f64 {
        if rate > 0.0 {
            (self.lag_hits(rate, lag) / rate).min(lag)
        } else {
            lag
        }
    }

    fn slot_ids(&self) -> impl Iterator<Item = SlotId> + '_ {
        self.slots.iter().map(|(s, _)| *s)
    }

    /// Charges the hits since the last look, slot by slot at each slot's
    /// own price, and records the rate samples; returns core-seconds.
    fn charge(&mut self, now: Instant, counts: &HashMap<SlotId, SlotCount>) -> f64 {
        let mut spent = 0.0;
        for (i, (slot, cost)) in self.slots.iter().enumerate() {
            let c = counts.get(slot).copied().unwrap_or_default();
            let before = self.slot_last.get(i).copied().unwrap_or_default();
            let calls = c.calls.saturating_sub(before.calls);
            // Hits after a switch-off and before the kernel's detach paid
            // the trap (the programs return at once): at a hit without
            // its stack, an upper bound of what they cost.
            let off = c.off_hits.saturating_sub(before.off_hits);
            spent += calls as f64 * cost.per_call_ns(self.stack_every) / 1e9
                + off as f64 * cost.per_call_ns(0) / 1e9;
            self.lag_hits_now += off;
            if let Some(l) = self.slot_last.get_mut(i) {
                *l = c;
            }
        }
        let total = self.sum(counts);
        // The rate over the on-time since it was last measured (switches
        // happen only at decisions, so a probe is on for all of it from
        // `on_since`). A stretch under MIN_RATE_SPAN says little: it is
        // measured at a later look, over the calls since, not dropped.
        if let Some(since) = self.on_since {
            let (from, calls_then) = self.rate_from;
            let on = now.saturating_duration_since(from.max(since));
            if on >= MIN_RATE_SPAN {
                let calls = total.calls.saturating_sub(calls_then);
                self.rate = calls as f64 / on.as_secs_f64();
                self.rate_from = (now, total.calls);
                self.rate_samples.push_back((now, on.as_secs_f64(), calls));
            }
        }
        while self.rate_samples.len() > 1
            && self
                .rate_samples
                .front()
                .is_some_and(|s| now.saturating_duration_since(s.0) > STEADY_SPAN)
        {
            self.rate_samples.pop_front();
        }
        self.last = total;
        // Calls that land after a switch-off (returns still attached)
        // belong to the window just closed.
        if self.on_since.is_none() {
            if let Some(w) = self.windows.last_mut() {
                w.calls = total.calls.saturating_sub(self.closed_from.calls);
                w.wait_ns = total.wait_ns.saturating_sub(self.closed_from.wait_ns);
            }
        }
        spent
    }
}

pub struct Governor {
    cfg: GovernorConfig,
    probes: Vec<ProbeState>,
    /// Core-seconds spent in probe hits so far.
    spent: f64,
    /// (time, `spent` then) at each tick within the last `window`.
    history: VecDeque<(Instant, f64)>,
    started: Instant,
    next_tick: Instant,
    /// Prints each decision to stderr (`INNOPROF_DEBUG_GOVERNOR`).
    debug: bool,
    /// The alarm rang: decide at the next tick, whenever it is.
    woken: bool,
    /// The last decision changed a probe's plan (not only a cut probe's
    /// own windows): look again a `tick` later.
    replanned: bool,
    /// The window's room less what is held for cut probes' on-windows.
    unreserved: f64,
    /// Decisions made so far (the recorder re-arms the alarm after each).
    decisions: u64,
    /// Hits any one CPU may take before the next decision is due early
    /// (0: no alarm).
    alarm_hits: u64,
    /// What the window allowed per second at the last decision.
    allowance: f64,
    /// How long the kernel took to detach a switched-off probe, lately
    /// ([`Self::detach_took`]): its hits go on until then, each paying
    /// the trap.
    detach_lag: Duration,
    /// Cut probes' windows open at `started + phase + k x period`: one
    /// random phase per recording (a systematic sample with a random
    /// start), shared so that their switches come in one batch.
    phase: Duration,
}

/// One probe's plan for the next stretch: stack rate and share of time on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Allotment {
    pub stack_every: u32,
    pub duty: f64,
}

impl Governor {
    /// All probes start attached and live at `now`, every stack taken.
    /// `counts` so far (hits while the session was still attaching) are
    /// left out of the windows and the first rate.
    pub fn new(
        cfg: GovernorConfig,
        probes: Vec<GovernedProbe>,
        counts: &HashMap<SlotId, SlotCount>,
        now: Instant,
    ) -> Self {
        let probes = probes
            .into_iter()
            .map(|p| {
                let mut s = ProbeState {
                    slots: p.slots,
                    mode: Mode::Full,
                    on_since: Some(now),
                    on_until: None,
                    next_on: None,
                    window: cfg.min_window,
                    stride: 1,
                    stride_max: 1,
                    stack_every: 1,
                    stack_every_max: 1,
                    rate: 0.0,
                    rate_from: (now, 0),
                    rate_samples: VecDeque::new(),
                    last: SlotCount::default(),
                    slot_last: Vec::new(),
                    window_start: SlotCount::default(),
                    closed_from: SlotCount::default(),
                    windows: Vec::new(),
                    calls_before_start: 0,
                    ever_cut: false,
                    lag_hits_now: 0,
                    lag_hits: 0.0,
                };
                s.last = s.sum(counts);
                s.slot_last = s
                    .slots
                    .iter()
                    .map(|(slot, _)| counts.get(slot).copied().unwrap_or_default())
                    .collect();
                s.rate_from = (now, s.last.calls);
                s.window_start = s.last;
                s.calls_before_start = s.last.calls;
                s
            })
            .collect();
        Self {
            cfg,
            probes,
            spent: 0.0,
            history: VecDeque::from([(now, 0.0)]),
            started: now,
            next_tick: now + FIRST_TICK.min(cfg.tick),
            debug: std::env::var_os("INNOPROF_DEBUG_GOVERNOR").is_some(),
            woken: false,
            replanned: false,
            unreserved: 0.0,
            decisions: 0,
            alarm_hits: 0,
            allowance: cfg.budget_pct / 100.0,
            detach_lag: Duration::ZERO,
            phase: cfg.period.mul_f64(random_fraction()),
        }
    }

    /// Sets the windows' phase (tests; the recording draws it at random).
    pub fn with_phase(mut self, phase: Duration) -> Self {
        self.phase = phase.min(self.cfg.period);
        self
    }

    /// The alarm rang (some CPU took `alarm_hits` hits since the last
    /// decision): the next call to [`Self::tick`] decides.
    pub fn wake(&mut self) {
        self.woken = true;
        if self.debug {
            eprintln!("governor: alarm");
        }
    }

    /// The spread windows' period.
    pub fn period(&self) -> Duration {
        self.cfg.period
    }

    /// When the next decision is due, alarm aside.
    pub fn next_decision(&self) -> Instant {
        self.next_tick
    }

    /// Decisions so far, and the alarm's hits per CPU for the stretch
    /// until the next one (0: none).
    pub fn alarm(&self) -> (u64, u64) {
        (self.decisions, self.alarm_hits)
    }

    /// A switch-off's detach took `took`, from the decision to the kernel's
    /// last unregister (a uprobe's removal takes the target's mmap lock and
    /// waits for an RCU grace period: 0.1 s on a quiet host, ~1 s under
    /// load). Planned with from the next decision on: it rises at once to
    /// a slower detach and halves its way down to faster ones.
    pub fn detach_took(&mut self, took: Duration) {
        self.detach_lag = took.max((self.detach_lag + took) / 2);
        if self.debug {
            eprintln!(
                "governor: a detach took {:.3}s, planning with {:.3}s",
                took.as_secs_f64(),
                self.detach_lag.as_secs_f64()
            );
        }
    }

    /// New per-slot costs (measured live); used from the next tick on.
    pub fn update_costs(&mut self, costs: &HashMap<SlotId, SlotCost>) {
        for p in &mut self.probes {
            for (slot, cost) in &mut p.slots {
                if let Some(c) = costs.get(slot) {
                    *cost = *c;
                }
            }
        }
    }

    /// Call often (every 10–25 ms); `counts` reads the cumulative counters
    /// per slot and is called only when a decision is due.
    pub fn tick(
        &mut self,
        now: Instant,
        counts: impl FnOnce() -> HashMap<SlotId, SlotCount>,
    ) -> Actions {
        let mut actions = Actions::default();
        // A caller ticking every `tick` wakes a little late or early by
        // turns: a fifth of a tick's slack keeps that from skipping a
        // decision (and doubling the period).
        if self.woken || now + self.cfg.tick / 5 >= self.next_tick {
            self.woken = false;
            self.decide(now, &counts(), &mut actions);
            self.decisions += 1;
            self.next_tick = self.look_again(now);
        }
        actions
    }

    /// When to decide again after deciding at `now`, and the alarm for the
    /// stretch until then. While a probe in full is re-planned, a `tick`
    /// later. After a decision that re-planned none (a cut probe's own
    /// switches do not count), from [`CALM_AFTER`] on, at the first grid
    /// point `calm_tick` or more later if the probes fully on, at the rates
    /// they had, would not spend more over that stretch than the window
    /// allows over the `horizon` (probes inside an
    /// on-window the governor opened are left out: that window lasts
    /// `min_on` whatever the tick); never later than a switch already
    /// planned. Either way the alarm rings first when some CPU takes more
    /// hits than the stretch was planned for: 1.5 times the calls the
    /// probes on were making, plus what one tick of the whole budget pays
    /// for at the dearest hit. So a burst is met after at most that many
    /// hits per CPU, not after a stretch of time at whatever rate it has.
    fn look_again(&mut self, now: Instant) -> Instant {
        let full_rate: f64 = self
            .probes
            .iter()
            .filter(|p| p.on_since.is_some() && p.on_until.is_none())
            .map(|p| p.rate * p.per_call_ns(p.stack_every) / 1e9)
            .sum();
        // Calm looks fall on a grid from the start, so that alarms and
        // switches at odd times do not each set a stretch of their own. A
        // probe set over the steady budget must not spend, in it, the part
        // of the window held for cut probes' on-windows (a calm stretch
        // that did left a cut probe off until its first stretch slid out of
        // the window, at ~10.8 s of a 14 s recording, instead of back at
        // ~3.8 s).
        let calm_next = on_grid(self.started, now + self.cfg.calm_tick.max(self.cfg.tick));
        let stretch = calm_next.saturating_duration_since(now).as_secs_f64();
        let calm = !self.replanned
            && now >= self.started + CALM_AFTER
            && full_rate * stretch <= self.allowance * self.cfg.horizon.as_secs_f64()
            && (full_rate <= self.cfg.budget_pct / 100.0 || full_rate * stretch <= self.unreserved);
        let planned = self
            .probes
            .iter()
            .filter_map(|p| match p.on_since {
                Some(_) => p.on_until,
                None => p.next_on,
            })
            .min();
        let mut next = if calm { calm_next } else { now + self.cfg.tick };
        if let Some(t) = planned {
            next = next.min(t.max(now + self.cfg.tick / 5));
        }
        let dearest = self
            .probes
            .iter()
            .map(|p| p.per_call_ns(p.stack_every))
            .fold(0.0, f64::max);
        self.alarm_hits = if dearest > 0.0 {
            let stretch = next.saturating_duration_since(now).as_secs_f64();
            // Probes switched off within the detach lag still take hits
            // (each pays the trap) until the kernel has detached them: an
            // alarm sized without them rang every few ms after each of the
            // undo walk's windows in S1 (117k hits/s for ~60 ms).
            let lag = self.detach_lag.as_secs_f64();
            let now_s = self.since_start(now);
            let detaching: f64 = self
                .probes
                .iter()
                .filter(|p| p.on_since.is_none())
                .filter(|p| p.windows.last().is_some_and(|w| now_s - w.end_s < lag))
                .map(|p| p.rate.max(p.steady_rate(lag)) * lag.min(stretch))
                .sum();
            let expected: f64 = self
                .probes
                .iter()
                .filter(|p| p.on_since.is_some())
                .map(|p| p.rate * stretch)
                .sum::<f64>()
                + detaching;
            let one_tick =
                self.cfg.budget_pct / 100.0 * self.cfg.tick.as_secs_f64() * 1e9 / dearest;
            (1.5 * expected + one_tick).ceil().max(1.0) as u64
        } else {
            0
        };
        if self.debug {
            eprintln!(
                "governor: next look in {:.2}s, alarm at {} hits per CPU",
                next.saturating_duration_since(now).as_secs_f64(),
                self.alarm_hits
            );
        }
        next
    }

    fn since_start(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.started).as_secs_f64()
    }

    /// One decision: charge the hits since the last look, make the plans
    /// for the budget left, and carry them out probe by probe. The plans
    /// are made from every probe's charge before any is switched, so each
    /// probe is planned against the same window.
    fn decide(&mut self, now: Instant, counts: &HashMap<SlotId, SlotCount>, actions: &mut Actions) {
        for p in &mut self.probes {
            self.spent += p.charge(now, counts);
        }
        let plans = self.make_plans(now);
        if self.debug {
            self.print_plans(now, &plans);
        }
        self.replanned = self.follow_plans(now, plans, actions);
    }

    /// The steady plan and the plan of the moment, and the room they leave.
    /// The steady plan (each probe's share of the budget, at its steady
    /// rate) says who is cut and how long its windows are; the plan of
    /// the moment (what the window still allows over the horizon, at
    /// the rate since the last look) only thins stacks, shortens
    /// windows, and lets a probe in full stay on on the window's savings.
    /// Records the allowance and the unreserved room for [`Self::look_again`].
    fn make_plans(&mut self, now: Instant) -> Plans {
        let room = self.window_room(now);
        let budget = self.cfg.budget_pct / 100.0;
        let ahead = self.cfg.horizon.as_secs_f64();
        let min_duty = self.cfg.min_duty();
        let lag = self.detach_lag.as_secs_f64();
        let steady_demand: Vec<(f64, SlotCost)> = self
            .probes
            .iter()
            .map(|p| (p.steady_rate(lag), p.cost()))
            .collect();
        let demand: Vec<(f64, SlotCost)> = self.probes.iter().map(|p| (p.rate, p.cost())).collect();
        let steady = plan(&steady_demand, budget, budget, min_duty);
        let free = room - self.held_for_windows(&steady, lag);
        let allowance = ((free + budget * ahead) / ahead).max(0.0);
        self.allowance = allowance;
        self.unreserved = free;
        Plans {
            now: plan(&demand, allowance, budget, min_duty),
            steady,
            free,
        }
    }

    /// What the cut probes' smallest windows take of a whole budget window,
    /// by the `steady` plan: held back, so that what a probe in full spends
    /// of the window's savings, and what cut probes' windows take beyond
    /// their smallest, is the rest. Unheld, a probe spent the savings in
    /// full and then its share of the budget on top (0.1265 s of CPU in
    /// some 10 s allowing 0.1 s, unit test).
    fn held_for_windows(&self, steady: &[Allotment], lag: f64) -> f64 {
        self.probes
            .iter()
            .zip(steady)
            .filter(|(_, share)| share.duty < 1.0)
            .map(|(p, _)| {
                // Each window and the detach after it, every `stride` periods.
                let rate = p.steady_rate(lag);
                let per_window =
                    (rate * p.per_call_ns(MAX_STACK_EVERY) * self.cfg.min_window.as_secs_f64()
                        + p.lag_hits(rate, self.detach_lag.as_secs_f64()) * p.per_call_ns(0))
                        / 1e9;
                per_window * self.cfg.window.as_secs_f64()
                    / (self.cfg.period.as_secs_f64() * f64::from(p.stride))
            })
            .sum()
    }

    /// The decision's plans on stderr (`INNOPROF_DEBUG_GOVERNOR`), with
    /// what each probe would cost fully on: what a cut is read against.
    fn print_plans(&self, now: Instant, plans: &Plans) {
        let lag = self.detach_lag.as_secs_f64();
        eprintln!(
            "governor: t={:.2}s spent={:.4} allowance={:.4} plans={:?} steady={:?}",
            self.since_start(now),
            self.spent,
            self.allowance,
            plans
                .now
                .iter()
                .map(|p| (p.stack_every, (p.duty * 1e3).round() / 1e3))
                .collect::<Vec<_>>(),
            self.probes
                .iter()
                .zip(&plans.steady)
                .map(|(p, s)| format!(
                    "{:.0}/s x {:.0}ns = {:.2}% (share {:.3})",
                    p.steady_rate(lag),
                    p.per_call_ns(1),
                    p.steady_rate(lag) * p.per_call_ns(1) / 1e7,
                    s.duty
                ))
                .collect::<Vec<_>>()
        );
    }

    /// Carries out `plans` probe by probe: each takes its stack rate, then
    /// stays (or goes back) fully on, or is watched in windows sized to
    /// its share. Returns whether a probe's plan changed (not only a cut
    /// probe's own windows): the next look then comes a `tick` later.
    fn follow_plans(&mut self, now: Instant, plans: Plans, actions: &mut Actions) -> bool {
        let cfg = self.cfg;
        let lag = self.detach_lag.as_secs_f64();
        // The probes that share the window's free room for their windows.
        let cut = plans.steady.iter().filter(|s| s.duty < 1.0).count().max(1);
        let windows = Windows {
            now,
            first: self.started + self.phase,
            started: self.started,
            free_each: plans.free.max(0.0) / cut as f64,
            lag,
        };
        let mut replanned = false;
        for ((p, pl), share) in self.probes.iter_mut().zip(plans.now).zip(plans.steady) {
            replanned |= p.take_stack_every(pl.stack_every, actions);
            // A probe that fits its share of the steady budget is never cut
            // (a burst elsewhere, or a neighbour's switching, does not make
            // it dearer); one already in full stays on while the window's
            // savings pay for it.
            if share.duty >= 1.0 || (pl.duty >= 1.0 && p.mode == Mode::Full) {
                replanned |= p.stay_in_full(now, actions);
            } else {
                p.size_windows(share, &windows, &cfg);
                replanned |= p.follow_windows(&windows, &cfg, actions);
            }
        }
        replanned
    }

    /// What the window can still pay for at once: the budget over the
    /// window less what was spent in it, less the hits of the probes on
    /// that were ever too dear until the kernel has detached them. A
    /// window spent in full allows nothing until its spending slides out.
    /// (Floored at the budget itself until 2026-11-27, which let a window
    /// spend its savings *and* the budget: `--probes all --max-overhead
    /// 10` on a saturated MariaDB 10.2.11 spent 15.5 % of a core.)
    fn window_room(&mut self, now: Instant) -> f64 {
        while self
            .history
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= self.cfg.window)
        {
            self.history.pop_front();
        }
        let spent_then = if now.saturating_duration_since(self.history[0].0) >= self.cfg.window {
            self.history[0].1
        } else {
            0.0
        };
        self.history.push_back((now, self.spent));
        let budget = self.cfg.budget_pct / 100.0;
        let lag = self.detach_lag.as_secs_f64();
        let reserve: f64 = self
            .probes
            .iter()
            .filter(|p| p.ever_cut && p.on_since.is_some())
            .map(|p| p.lag_hits(p.rate, lag) * p.per_call_ns(0) / 1e9)
            .sum();
        budget * self.cfg.window.as_secs_f64() - (self.spent - spent_then) - reserve
    }

    /// The recorder could not re-attach `slots` yet (their last detach is
    /// still under way): they stay off and are tried again at the next tick.
    pub fn resume_deferred(&mut self, slots: &[SlotId], now: Instant) {
        let tick = self.cfg.tick;
        for p in &mut self.probes {
            if p.slots.iter().any(|(s, _)| slots.contains(s)) {
                p.on_since = None;
                p.on_until = None;
                p.next_on = Some(now + tick / 5);
            }
        }
    }

    /// The recorder finished re-attaching `slots` at `now` (asked at
    /// `asked`): the window starts when the probe is really live.
    pub fn resumed(&mut self, slots: &[SlotId], asked: Instant, now: Instant) {
        if self.debug {
            eprintln!(
                "governor: an attach took {:.3}s",
                now.saturating_duration_since(asked).as_secs_f64()
            );
        }
        for p in &mut self.probes {
            if p.slots.iter().any(|(s, _)| slots.contains(s)) {
                if let Some(since) = p.on_since.as_mut() {
                    *since = (*since).max(now);
                }
                let window = p.window;
                if let Some(until) = p.on_until.as_mut() {
                    *until = (*until).max(now + window);
                }
            }
        }
    }

    /// Seconds each probe has been on so far, for live readers.
    pub fn attached_seconds(&self, now: Instant) -> Vec<f64> {
        self.probes
            .iter()
            .map(|p| {
                let closed: f64 = p.windows.iter().map(|w| w.end_s - w.start_s).sum();
                closed
                    + p.on_since
                        .map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64())
            })
            .collect()
    }

    /// Each probe's windows so far, the open one closed at `now` with
    /// `counts`, for live estimates.
    pub fn windows_now(
        &self,
        now: Instant,
        counts: &HashMap<SlotId, SlotCount>,
    ) -> Vec<Vec<OnWindow>> {
        self.probes
            .iter()
            .map(|p| {
                let mut w = p.windows.clone();
                let total = p.sum(counts);
                match p.on_since {
                    Some(since) => {
                        let open = OnWindow {
                            start_s: self.since_start(since),
                            end_s: self.since_start(now),
                            calls: total.calls.saturating_sub(p.window_start.calls),
                            wait_ns: total.wait_ns.saturating_sub(p.window_start.wait_ns),
                        };
                        // A window switched on at this very instant (the
                        // last decision fell on the recording's end) watched
                        // nothing: no time to rate it over.
                        if open.end_s > open.start_s || open.calls > 0 {
                            w.push(open);
                        }
                    }
                    None => {
                        if let Some(last) = w.last_mut() {
                            last.calls = total.calls.saturating_sub(p.closed_from.calls);
                            last.wait_ns = total.wait_ns.saturating_sub(p.closed_from.wait_ns);
                        }
                    }
                }
                w
            })
            .collect()
    }

    /// Closes the books at `now` (the end of the recording) with the final
    /// `counts` (read after the probes were detached).
    pub fn finish(&mut self, now: Instant, counts: &HashMap<SlotId, SlotCount>) -> Vec<DutyReport> {
        let total = self.since_start(now);
        let lag = self.detach_lag.as_secs_f64();
        let windows = self.windows_now(now, counts);
        self.probes
            .iter()
            .zip(windows)
            .map(|(p, windows)| {
                let on: f64 = windows.iter().map(|w| w.end_s - w.start_s).sum();
                let per_call = p.per_call_ns(1);
                let rate = p.steady_rate(lag);
                DutyReport {
                    cut: p.ever_cut,
                    on_at_end: p.on_since.is_some(),
                    attached_fraction: if p.ever_cut && total > 0.0 {
                        (on / total).min(1.0)
                    } else {
                        1.0
                    },
                    windows,
                    projected_full_cost: rate * per_call / 1e9,
                    stack_every_max: p.stack_every_max,
                    calls_before_start: p.calls_before_start,
                    period_s: self.cfg.period.as_secs_f64() * f64::from(p.stride_max),
                }
            })
            .collect()
    }
}

/// One decision's plans, per probe in the governor's order.
struct Plans {
    /// The plan of the moment: each probe's stack rate, and whether one in
    /// full may stay on on the window's savings.
    now: Vec<Allotment>,
    /// The steady plan: who is cut, and each cut probe's share.
    steady: Vec<Allotment>,
    /// The window's room less what is held for the cut probes' smallest
    /// windows.
    free: f64,
}

/// What every cut probe's windows are sized and placed by at one decision.
struct Windows {
    now: Instant,
    /// Where the windows' grid starts: `started + phase`.
    first: Instant,
    /// The governor's start, which windows' times are counted from.
    started: Instant,
    /// Each cut probe's part of the window's free room (none if spent).
    free_each: f64,
    /// The detach lag, seconds.
    lag: f64,
}

/// A probe's part of a decision ([`Governor::follow_plans`]); each returns
/// whether the probe's plan changed, where it can.
impl ProbeState {
    /// Takes the stack rate of the plan of the moment (a BPF flag: no
    /// attach or detach). A probe in full whose stacks are thinned counts
    /// as re-planned.
    fn take_stack_every(&mut self, every: u32, actions: &mut Actions) -> bool {
        if every == self.stack_every {
            return false;
        }
        let replanned = self.mode == Mode::Full;
        self.stack_every = every;
        self.stack_every_max = self.stack_every_max.max(every);
        actions
            .stack_every
            .extend(self.slot_ids().map(|s| (s, every)));
        replanned
    }

    /// Keeps the probe fully on, switching it back on if it was cut.
    fn stay_in_full(&mut self, now: Instant, actions: &mut Actions) -> bool {
        if self.on_since.is_none() {
            // Measured again from its next window, not switched on
            // early on a rate from the last one.
            if self.next_on.is_some_and(|t| now < t) {
                return false;
            }
            switch_on(self, now, actions);
        }
        let replanned = self.mode != Mode::Full;
        self.mode = Mode::Full;
        self.on_until = None;
        self.next_on = None;
        replanned
    }

    /// A cut probe's window and stride for its `share` of each period, no
    /// more than its part of the window's room beyond what is held pays for.
    fn size_windows(&mut self, share: Allotment, w: &Windows, cfg: &GovernorConfig) {
        let rate = self.steady_rate(w.lag);
        let full = rate * self.per_call_ns(self.stack_every) / 1e9;
        let affordable = if full > 0.0 {
            (w.free_each / full + cfg.min_window.as_secs_f64()) / cfg.period.as_secs_f64()
        } else {
            1.0
        };
        let lag_on = self.lag_on_s(rate, w.lag);
        self.window = window_len(share.duty.min(affordable).max(cfg.min_duty()), lag_on, cfg);
        self.stride = stride(self, share, w.lag, cfg);
        self.stride_max = self.stride_max.max(self.stride);
    }

    /// Switches a probe watched in windows: one newly too dear goes off
    /// now and is on again at the grid's next phase; a cut one closes its
    /// window when it is over and opens the next when it is due, `stride`
    /// periods on. Only the first changes its plan.
    fn follow_windows(&mut self, w: &Windows, cfg: &GovernorConfig, actions: &mut Actions) -> bool {
        let (now, period) = (w.now, cfg.period);
        let skip = period * (self.stride - 1);
        match (self.mode, self.on_since.is_some()) {
            // Newly too dear: off now, on at the next period's phase.
            (Mode::Full, on) => {
                self.mode = Mode::Cut;
                self.ever_cut = true;
                if on {
                    switch_off(self, now, w.started, actions);
                }
                self.next_on = Some(phase_point(w.first, period, now + skip));
                true
            }
            (Mode::Cut, true) => {
                if self.on_until.is_none_or(|t| now >= t) {
                    switch_off(self, now, w.started, actions);
                    self.next_on = Some(phase_point(w.first, period, now + skip));
                }
                false
            }
            (Mode::Cut, false) => {
                if self.next_on.is_none_or(|t| now >= t) {
                    switch_on(self, now, actions);
                    self.on_until = Some(now + self.window);
                }
                false
            }
        }
    }
}

/// `t` rounded up to the grid (a quarter second from `started`) that calm
/// looks and cut probes' switches fall on: switches of several probes then
/// share one look and one batched attach or detach.
fn on_grid(started: Instant, t: Instant) -> Instant {
    let grid = CALM_GRID.as_secs_f64();
    let since = t.saturating_duration_since(started).as_secs_f64();
    let steps = ((since - 1e-6) / grid).ceil().max(0.0);
    started + Duration::from_secs_f64(steps * grid)
}

/// A fraction in [0, 1) drawn at random (the windows' phase): the hasher
/// keys std draws from the OS for each process, no crate needed.
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The first window start at or after `t` on the grid `first + k x period`.
fn phase_point(first: Instant, period: Duration, t: Instant) -> Instant {
    if t <= first {
        return first;
    }
    let period = period.as_secs_f64().max(1e-3);
    let since = t.saturating_duration_since(first).as_secs_f64();
    let k = ((since - 1e-6) / period).ceil().max(0.0);
    first + Duration::from_secs_f64(k * period)
}

/// The longest stride: a cut probe is watched every 5 periods at least,
/// whatever its detach costs.
pub const MAX_STRIDE: u32 = 5;

/// Every how many periods a cut probe can be on within its `share` of the
/// steady budget, when each window is followed by `lag` s of hits until
/// the kernel's detach: 1 but where the lag alone overspends (a detach of
/// 1 s under load, a period of 1 s: the trap is paid the whole time).
fn stride(p: &ProbeState, share: Allotment, lag: f64, cfg: &GovernorConfig) -> u32 {
    let rate = p.steady_rate(lag);
    // At the stack rate the steady plan priced its share at: its share of
    // the budget, whatever the stacks are thinned to at the moment.
    let full = rate * p.per_call_ns(share.stack_every) / 1e9;
    let allotted = share.duty.min(1.0) * full * cfg.period.as_secs_f64();
    if allotted <= 0.0 {
        return 1;
    }
    // Only the lag stretches the period: a window at its share (or the
    // smallest window, the one way past the budget) is paid each period.
    let on = rate * p.window.as_secs_f64() * p.per_call_ns(p.stack_every) / 1e9;
    let lagged = p.lag_hits(rate, lag) * p.per_call_ns(0) / 1e9;
    let ratio = (on + lagged) / allotted.max(on);
    // A quarter's slack: rounding the window to the 10 ms grid is not
    // worth a skipped period.
    ((ratio - 0.25).ceil().max(1.0) as u32).min(MAX_STRIDE)
}

/// A cut probe's window for its share `duty` of each period: the hits
/// until the kernel's detach (`lag` s on at the window's rate) are paid
/// too, so the window is that much shorter; at least `min_window`, and off
/// for a tick at least.
fn window_len(duty: f64, lag: f64, cfg: &GovernorConfig) -> Duration {
    let period = cfg.period.as_secs_f64();
    let min = cfg.min_window.as_secs_f64();
    let max = (period - cfg.tick.as_secs_f64()).max(min);
    let w = (duty * period - lag).clamp(min, max);
    // On a 10 ms grid: windows of several probes end at one look.
    Duration::from_secs_f64(((w * 100.0).round() / 100.0).max(min))
}

fn switch_on(p: &mut ProbeState, now: Instant, actions: &mut Actions) {
    p.on_since = Some(now);
    p.window_start = p.last;
    p.rate_from = (now, p.last.calls);
    actions.resume.extend(p.slot_ids());
}

fn switch_off(p: &mut ProbeState, now: Instant, started: Instant, actions: &mut Actions) {
    // Switches happen at decisions, right after the rate was read: no
    // on-time of this tick is left to account for.
    if let Some(since) = p.on_since.take() {
        // The last switch-off's hits are all in: a probe is not re-attached
        // while its detach is pending.
        if !p.windows.is_empty() {
            let seen = p.lag_hits_now as f64;
            p.lag_hits = seen.max((p.lag_hits + seen) / 2.0);
        }
        p.lag_hits_now = 0;
        let secs = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
        p.windows.push(OnWindow {
            start_s: secs(since),
            end_s: secs(now),
            calls: p.last.calls - p.window_start.calls,
            wait_ns: p.last.wait_ns - p.window_start.wait_ns,
        });
        p.closed_from = p.window_start;
        p.on_until = None;
        actions.suspend.extend(p.slot_ids());
    }
}

/// The plan for `demand` (calls/s, cost per call, per probe) under
/// `allowance` (fraction of a core the window allows over the next horizon):
/// cheapest first, fully on with every stack while each costs no more than
/// an equal share of what is left (max-min fair); the rest with
/// the sparsest stacks they need (a power of two up to `MAX_STACK_EVERY`).
/// If still too dear, the rest are cut and share the steady `budget` (what
/// is left of it after the probes that fit), evenly (water-filling): on
/// `share / cost` of the time, at least `min_duty`. Duties come from the
/// steady budget, not the window's savings: a 1 s on-window of a probe at
/// 10 % of a core is paid for by 19 s off at 0.5 %. A window already
/// spent beyond its steady share (`allowance` under `budget`) gives them
/// only what it allows.
pub fn plan(
    demand: &[(f64, SlotCost)],
    allowance: f64,
    budget: f64,
    min_duty: f64,
) -> Vec<Allotment> {
    let cost_at = |i: usize, every: u32| demand[i].0 * demand[i].1.per_call_ns(every) / 1e9;
    let mut order: Vec<usize> = (0..demand.len()).collect();
    order.sort_by(|a, b| cost_at(*a, 1).total_cmp(&cost_at(*b, 1)));
    let mut plans = vec![
        Allotment {
            stack_every: 1,
            duty: 1.0
        };
        demand.len()
    ];
    // Max-min fair: cheapest first, a probe stays fully on while it costs
    // no more than an equal share of what is left. Admitting cheapest
    // first while the sum fitted let the cheap probes of a set over the
    // budget take all of it, leaving the others 5 % of the time (19 s
    // off): the default set on MariaDB 10.2.11 at 650 tps was seen in
    // [0, 3] and [22, 26] s of 30, every estimate ±270 %.
    // A probe within an equal share of the steady budget, at every stack
    // or at the sparsest, is never cut for what the others spent: a window
    // a hot neighbour overspent (allowance 0) cut every probe, a 0.3 % one
    // beside it included (its count then an estimate, e2e
    // a_cheap_probe_beside_a_cut_hot_one_counts_exactly). Those shares add
    // up to the budget at most.
    let guaranteed = budget / demand.len().max(1) as f64;
    let mut left = allowance.max(0.0);
    let mut rest = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        let share = left / (order.len() - k) as f64;
        if rest.is_empty() && (cost_at(i, 1) <= share || cost_at(i, 1) <= guaranteed) {
            left = (left - cost_at(i, 1)).max(0.0);
        } else {
            rest.push(i);
        }
    }
    if rest.is_empty() {
        return plans;
    }
    let mut every = 2;
    while every < MAX_STACK_EVERY && rest.iter().map(|&i| cost_at(i, every)).sum::<f64>() > left {
        every *= 2;
    }
    for &i in &rest {
        plans[i].stack_every = every;
    }
    if rest.iter().map(|&i| cost_at(i, every)).sum::<f64>() <= left {
        return plans;
    }
    // Water-filling over what the steady budget leaves, cheapest first.
    let fitting: f64 = order
        .iter()
        .filter(|i| !rest.contains(i))
        .map(|&i| cost_at(i, 1))
        .sum();
    let mut left = (budget.min(allowance) - fitting).max(0.0);
    rest.sort_by(|a, b| cost_at(*a, every).total_cmp(&cost_at(*b, every)));
    let mut remaining = rest.len();
    for &i in &rest {
        let share = left / remaining as f64;
        remaining -= 1;
        let cost = cost_at(i, every);
        if cost <= share || cost <= guaranteed {
            left = (left - cost).max(0.0);
            continue;
        }
        plans[i].duty = (share / cost).max(min_duty);
        left -= share.min(left);
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn cost(base_ns: f64, stack_ns: f64) -> SlotCost {
        SlotCost { base_ns, stack_ns }
    }

    fn counts(pairs: &[(usize, u64)]) -> HashMap<SlotId, SlotCount> {
        pairs
            .iter()
            .map(|&(s, calls)| {
                (
                    SlotId::of_index(s),
                    SlotCount {
                        calls,
                        wait_ns: calls * 1000,
                        stacks: 0,
                        off_hits: 0,
                    },
                )
            })
            .collect()
    }

    /// `n` probes of one slot each, all costing `c`.
    fn equal_probes(n: usize, c: SlotCost, t0: Instant) -> Governor {
        let probes = (0..n)
            .map(|i| GovernedProbe {
                slots: vec![(SlotId::of_index(i), c)],
            })
            .collect();
        Governor::new(GovernorConfig::default(), probes, &HashMap::new(), t0)
    }

    fn one_probe(c: SlotCost, t0: Instant) -> Governor {
        equal_probes(1, c, t0)
    }

    /// A hit between a switch-off and the kernel's detach is no call, but
    /// it paid the trap: the budget is charged for it.
    #[test]
    fn hits_after_a_switch_off_are_charged() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(2_000.0, 500.0), t0);
        let mut c = counts(&[(0, 1_000)]);
        g.tick(t0 + MS(50), || c.clone());
        let after_calls = g.spent;
        assert!(after_calls > 0.0);
        c.get_mut(&SlotId::of_index(0)).unwrap().off_hits = 500;
        // Nothing changed at 50 ms, so the next look is due at 550 ms; the
        // alarm (as the hits would ring it) brings it now.
        g.wake();
        g.tick(t0 + MS(100), || c.clone());
        // 500 hits at the base cost, no stack: 2 µs each.
        let charged = g.spent - after_calls;
        assert!((charged - 500.0 * 2e-6).abs() < 1e-12, "{charged}");
    }

    /// After a decision that changed nothing the governor sleeps for
    /// `calm_tick`, with an alarm sized to the calls it expects; the alarm
    /// brings the decision at once; while things move it looks every tick.
    #[test]
    fn a_calm_governor_sleeps_until_its_alarm_or_calm_tick() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + MS(ms);
        // 1,000 calls/s at 2 µs + 0.5 µs stack: 0.25 % of a core, fits.
        let mut g = one_probe(cost(2_000.0, 500.0), t0);
        assert_eq!(g.alarm(), (0, 0));
        // Before CALM_AFTER, every tick, whatever the rates say.
        let a = g.tick(s(50), || counts(&[(0, 50)]));
        assert!(a.is_empty());
        assert_eq!(g.next_decision(), s(100));
        let a = g.tick(s(1_000), || counts(&[(0, 1_000)]));
        assert!(a.is_empty());
        assert_eq!(g.next_decision(), s(1_500));
        // 1.5 x 500 calls expected in 0.5 s, + 1 % of 50 ms at 2.5 µs (200).
        assert_eq!(g.alarm(), (2, 950));
        // Not due, no alarm: no decision (the counts are not even read).
        g.tick(s(1_050), || panic!("read before the look was due"));
        assert_eq!(g.alarm().0, 2);
        // The alarm: decided at once. 20,000 calls in 0.05 s is 400,000/s,
        // 100 % of a core: stacks go sparse, and the next look is a tick away.
        g.wake();
        let a = g.tick(s(1_050), || counts(&[(0, 21_000)]));
        assert!(!a.stack_every.is_empty(), "{a:?}");
        assert_eq!(g.alarm().0, 3);
        // (Or sooner: cut, its first window may open within the tick,
        // at the recording's random phase.)
        let next = g.next_decision();
        assert!(s(1_050) < next && next <= s(1_100), "{:?}", next - t0);
        // On the calm stretch's clock, without an alarm, too.
        let mut g = one_probe(cost(2_000.0, 500.0), t0);
        g.tick(s(50), || counts(&[(0, 50)]));
        g.tick(s(1_000), || counts(&[(0, 1_000)]));
        g.tick(s(1_500), || counts(&[(0, 1_500)]));
        assert_eq!(g.alarm().0, 3);
        assert_eq!(g.next_decision(), s(2_000));
        // 27,000 calls/s: 6.75 % of a core, which the window's savings
        // still pay for over the horizon (nothing changes), but not for
        // 500 ms: watched every tick.
        let mut g = one_probe(cost(2_000.0, 500.0), t0);
        g.tick(s(50), || counts(&[(0, 1_500)]));
        let a = g.tick(s(1_000), || counts(&[(0, 27_000)]));
        assert!(a.is_empty(), "{a:?}");
        assert_eq!(g.next_decision(), s(1_050));
    }

    /// Looks closer together than the shortest stretch a rate is measured
    /// over (the alarm rings again within a millisecond when the rates it
    /// was sized from were an idle server's) still measure the rate: over
    /// the stretch since it was last measured. Each look kept the idle
    /// rate instead, so a probe that was silent when the server was idle
    /// looked free for as long as the looks came that fast: CI saw
    /// `innodb.buf.page_get` on for 4.7 s of an 8 s recording under load,
    /// 226,426 calls, on a 1 % budget (2026-11-28).
    #[test]
    fn looks_a_millisecond_apart_still_measure_the_rate() {
        let t0 = Instant::now();
        // 50,000 calls/s at 2.5 µs + 0.5 µs stack: 15 % of a core.
        let mut g = one_probe(cost(2_500.0, 500.0), t0);
        // The first look, at idle.
        g.tick(t0 + MS(50), || counts(&[(0, 0)]));
        let mut on = true;
        let mut seen = 0u64;
        let mut t = t0 + MS(50);
        let mut off_at = None;
        // The load starts; the alarm rings every millisecond.
        for _ in 0..2_000 {
            t += MS(1);
            if on {
                seen += 50;
            }
            g.wake();
            tick_single(&mut g, t, seen, &mut on);
            if !on && off_at.is_none() {
                off_at = Some(t - t0);
            }
        }
        let off_at = off_at.expect("never cut");
        // The window's savings (0.1 s of CPU) last ~0.7 s at this cost.
        assert!(off_at < MS(1_000), "{off_at:?}");
        assert!(g.probes[0].rate > 40_000.0, "{}", g.probes[0].rate);
    }

    #[test]
    fn what_fits_is_never_sampled_or_cut() {
        // 1 % of a core: 0.2 % + 0.5 % fit, cheapest first.
        let d = [
            (1_000.0, cost(1_500.0, 500.0)),
            (2_500.0, cost(1_500.0, 500.0)),
        ];
        assert_eq!(
            plan(&d, 0.01, 0.01, 0.05),
            vec![
                Allotment {
                    stack_every: 1,
                    duty: 1.0
                };
                2
            ]
        );
    }

    #[test]
    fn stack_rate_is_lowered_before_anything_is_cut() {
        // 5,000 calls/s at 1 µs + 2 µs of stack: 1.5 % of a core fully on,
        // 0.5 % without stacks. 1 % allows 1 µs + 2 µs / N with N >= 4.
        let d = [
            (100.0, cost(1_000.0, 2_000.0)),
            (5_000.0, cost(1_000.0, 2_000.0)),
        ];
        let p = plan(&d, 0.01, 0.01, 0.05);
        assert_eq!(
            p[0],
            Allotment {
                stack_every: 1,
                duty: 1.0
            },
            "the cheap one untouched"
        );
        assert_eq!(p[1].duty, 1.0, "{p:?}");
        assert_eq!(p[1].stack_every, 4, "{p:?}");
    }

    #[test]
    fn only_what_stack_sampling_cannot_save_is_duty_cycled() {
        // 40,000 calls/s at 1 µs base: 4 % of a core even without stacks.
        let d = [(40_000.0, cost(1_000.0, 2_000.0))];
        let p = plan(&d, 0.01, 0.01, 0.05);
        assert_eq!(p[0].stack_every, MAX_STACK_EVERY);
        let at_max = 40_000.0 * (1_000.0 + 2_000.0 / 1024.0) / 1e9;
        assert!((p[0].duty - 0.01 / at_max).abs() < 1e-9, "{p:?}");
        // The window's savings decide whether it fits now, not its duty.
        let p = plan(&d, 0.03, 0.01, 0.05);
        assert!((p[0].duty - 0.01 / at_max).abs() < 1e-9, "{p:?}");
        let p = plan(&d, 0.05, 0.01, 0.05);
        assert_eq!(p[0].duty, 1.0, "{p:?}");
        // Hopeless: still at the minimum duty, never off for good.
        let p = plan(&[(1e7, cost(1_000.0, 0.0))], 0.01, 0.01, 0.05);
        assert_eq!(p[0].duty, 0.05);
    }

    /// A window its hot neighbour overspent (nothing allowed) cuts the hot
    /// probe to its minimum duty; the cheap one, within its half of the
    /// budget, stays fully on with every stack.
    #[test]
    fn a_cheap_probe_is_not_cut_for_what_its_neighbour_spent() {
        let cheap = (400.0, cost(4_000.0, 1_000.0)); // 0.2 % of a core
        let hot = (60_000.0, cost(4_000.0, 1_000.0)); // 30 %
        let p = plan(&[cheap, hot], 0.0, 0.01, 0.05);
        assert_eq!((p[0].stack_every, p[0].duty), (1, 1.0), "{p:?}");
        assert_eq!(p[1].duty, 0.05, "{p:?}");
        // Over its share (0.5 % each of a 1 % budget for two) at every
        // stack (0.6 %) but within it at the sparsest (0.4 %): on, its
        // stacks thinned.
        let stacked = (1_000.0, cost(4_000.0, 2_000.0));
        let p = plan(&[stacked, hot], 0.0, 0.01, 0.05);
        assert_eq!(p[0].duty, 1.0, "{p:?}");
        assert!(p[0].stack_every > 1, "{p:?}");
        // Over it even without stacks (0.6 %): cut too.
        let dearer = (1_500.0, cost(4_000.0, 1_000.0));
        let p = plan(&[dearer, hot], 0.0, 0.01, 0.05);
        assert!(p[0].duty < 1.0, "{p:?}");
    }

    #[test]
    fn a_burst_the_window_allows_is_counted_in_full() {
        // 10,000 calls in 0.5 s at 2 µs: 20 ms of CPU, 4 % of a core while
        // it lasts, a fifth of the 10 s window's 100 ms: never touched.
        let t0 = Instant::now();
        let mut g = one_probe(cost(1_500.0, 500.0), t0);
        let mut t = t0;
        let mut calls = 0;
        for _ in 0..40 {
            t += MS(250);
            calls = (calls + 5_000).min(10_000);
            let a = g.tick(t, || counts(&[(0, calls)]));
            assert!(a.is_empty(), "{a:?} at {:?}", t - t0);
        }
        let d = g.finish(t, &counts(&[(0, 10_000)]));
        assert!(!d[0].cut);
        assert_eq!(d[0].windows.len(), 1);
        assert_eq!(d[0].windows[0].calls, 10_000);
        assert_eq!(d[0].stack_every_max, 1);
    }

    /// A steady dear probe: stacks sampled at once, cut once the window's
    /// savings are spent, then watched in a window every period (at the
    /// recording's phase) to the end: never off for longer than a period,
    /// every window recorded with its calls, and the estimate covers the
    /// whole recording.
    #[test]
    fn a_cut_probe_is_watched_in_windows_spread_over_every_period() {
        let t0 = Instant::now();
        // 20,000 calls/s at 3 µs + 1 µs stack: 8 % of a core fully on,
        // 6 % with sparse stacks.
        let mut g = one_probe(cost(3_000.0, 1_000.0), t0).with_phase(MS(300));
        let rate = 20_000u64;
        let (mut t, mut seen, mut on) = (t0, 0u64, true);
        let mut first_sparse = None;
        let mut first_off = None;
        for _ in 0..(30_000 / 10) {
            if on {
                seen += rate / 100;
            }
            t += MS(10);
            let was = on;
            let sparse = g.probes[0].stack_every > 1;
            tick_single(&mut g, t, seen, &mut on);
            if sparse && first_sparse.is_none() {
                first_sparse = Some(t - t0);
            }
            if was && !on && first_off.is_none() {
                first_off = Some(t - t0);
            }
        }
        // Stacks first: sparse before it was ever cut.
        assert_eq!(g.probes[0].stack_every_max, MAX_STACK_EVERY);
        let (sparse, off) = (first_sparse.unwrap(), first_off.unwrap());
        assert!(sparse < off, "{sparse:?} {off:?}");
        // Cut once the window's savings (100 ms of CPU) ran low.
        assert!(off > MS(500) && off < Duration::from_secs(3), "{off:?}");
        let d = g.finish(t, &counts(&[(0, seen)]));
        assert!(d[0].cut);
        let w = &d[0].windows;
        assert_eq!(w.iter().map(|w| w.calls).sum::<u64>(), seen);
        // A window every period, opening at the phase (0.3 s past the
        // second), up to a 10 ms tick late.
        assert!(w.len() >= 27, "{w:?}");
        for pair in w[1..].windows(2) {
            assert!(pair[1].start_s - pair[0].start_s <= 1.02, "{w:?}");
        }
        for x in &w[1..] {
            let phase = x.start_s.fract();
            assert!((0.29..0.32).contains(&phase), "{x:?}");
            let r = x.calls as f64 / (x.end_s - x.start_s);
            assert!((r - rate as f64).abs() < rate as f64 * 0.25, "{x:?}");
        }
        // Its share: 1 % of a core of its 6 %, a sixth of each period.
        assert!(d[0].attached_fraction < 0.3, "{d:?}");
        let e = crate::cost::estimate::estimate(w, 30.0, d[0].period_s, 0.0);
        assert!((e.covered_s - 30.0).abs() < 1e-9, "{e:?}");
        let truth = rate as f64 * 30.0;
        assert!((e.calls - truth).abs() <= e.calls_bound, "{e:?} vs {truth}");
        assert!(e.calls_bound < 0.05 * truth, "{e:?}");
    }

    /// The undo walk of S1 comes in bursts (each SELECT of the reader):
    /// ~8,400 calls/s on average at 2.4 µs, 2 % of a core. The alarm rings
    /// inside the bursts, and the rate since the last look was then a
    /// burst's: 68.5 % of a core "fully on", x34 what its hits cost. The
    /// plan's rate is the steady one, so the projection matches the
    /// charge for the same hits.
    #[test]
    fn a_bursty_probe_is_projected_at_its_average_rate() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(2_400.0, 0.0), t0);
        let (mut t, mut seen, mut on) = (t0, 0u64, true);
        for step in 0..(12_000 / 5) {
            // 840 calls in the first 5 ms of every 100 ms.
            let burst = step % 20 == 0;
            if burst && on {
                seen += 840;
            }
            t += MS(5);
            if burst {
                g.wake();
            }
            tick_single(&mut g, t, seen, &mut on);
        }
        let d = g.finish(t, &counts(&[(0, seen)]));
        let projected = d[0].projected_full_cost;
        assert!(
            (projected - 0.0202).abs() < 0.006,
            "projected {:.2} % of a core",
            projected * 100.0
        );
    }

    /// A cheap probe (fully on ~0.01 % of a core) beside a hot one that
    /// must be cut: the hot one's spending never switches the cheap one
    /// off (the known-count program of issue 50 lost 2.3 s of its cheap
    /// function's calls that way).
    #[test]
    fn a_cheap_probe_is_never_cut_beside_a_hot_one() {
        let t0 = Instant::now();
        let mut g = equal_probes(2, cost(2_000.0, 500.0), t0);
        let (mut t, mut seen, mut on) = (t0, [0u64; 2], [true; 2]);
        for step in 0..(20_000 / 10) {
            // 1,000 calls of a 2 ms function a second, and 200,000/s
            // of a hot neighbour.
            if on[0] {
                seen[0] += 10;
            }
            if on[1] {
                seen[1] += 2_000 + (step % 3) as u64 * 100;
            }
            t += MS(10);
            tick_many(&mut g, t, &seen, &mut on);
            assert!(on[0], "the cheap probe off at {:?}", t - t0);
        }
        let d = g.finish(t, &counts(&[(0, seen[0]), (1, seen[1])]));
        assert!(!d[0].cut && d[1].cut, "{d:?}");
    }

    /// One tick of a one-probe governor that has seen `seen` calls, its
    /// switches applied to `on` as the recorder would.
    fn tick_single(g: &mut Governor, t: Instant, seen: u64, on: &mut bool) {
        let mut one = [*on];
        tick_many(g, t, &[seen], &mut one);
        *on = one[0];
    }

    /// Runs one probe for `ms` in 50 ms ticks, `calls(step)` calls in
    /// each tick it is on, and closes the books.
    fn run_single(
        g: &mut Governor,
        t0: Instant,
        ms: u64,
        calls: impl Fn(u64) -> u64,
    ) -> Vec<DutyReport> {
        let (mut t, mut seen, mut on) = (t0, 0u64, true);
        for step in 0..(ms / 50) {
            if on {
                seen += calls(step);
            }
            t += MS(50);
            tick_single(g, t, seen, &mut on);
        }
        g.finish(t, &counts(&[(0, seen)]))
    }

    /// One tick of probes `0..seen.len()` (one slot each) with `seen`
    /// calls so far; `on` follows the governor's switches.
    fn tick_many(g: &mut Governor, t: Instant, seen: &[u64], on: &mut [bool]) {
        let now: Vec<(usize, u64)> = seen.iter().copied().enumerate().collect();
        let a = g.tick(t, || counts(&now));
        for s in &a.suspend {
            on[s.index()] = false;
        }
        for s in &a.resume {
            on[s.index()] = true;
        }
        if !a.resume.is_empty() {
            g.resumed(&a.resume, t, t);
        }
    }

    /// The budget holds over every window, not only on average: a steady
    /// dear probe (8 % of a core fully on, 6 % with sparse stacks, under
    /// 1 %) spends the idle past's savings, then no more than the window
    /// gives back. With the allowance floored at the budget and cut probes
    /// back on their duty whatever the window held, one 10 s spent 0.1475 s
    /// of CPU where any 10 s may hold 0.1 s.
    #[test]
    fn the_budget_holds_over_every_window() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(3_000.0, 1_000.0), t0);
        let (mut t, mut seen, mut on) = (t0, 0u64, true);
        let mut spent = vec![(t0, 0.0)];
        // The recorder wakes at each decision due (10 ms loop here).
        for _ in 0..(60_000 / 10) {
            if on {
                seen += 20_000 / 100;
            }
            t += MS(10);
            tick_single(&mut g, t, seen, &mut on);
            spent.push((t, g.spent));
        }
        let allowed = 0.01 * GovernorConfig::default().window.as_secs_f64();
        let worst = worst_window(&spent, t0);
        // A decision lands up to a tick late: one tick at 8 % of a core
        // (4 ms) over, at most.
        assert!(
            worst <= allowed + 0.08 * 0.05 + 1e-9,
            "{worst:.4} s of CPU in a window allowing {allowed} s"
        );
        // And the budget is used, not hoarded: over the minute, most of
        // it (a window's last few ms cannot pay for a 1 s on-window).
        assert!(g.spent >= 0.01 * 60.0 * 0.8, "{}", g.spent);
    }

    /// Spend over a minute of a probe at 3 % of a core fully on (7,500
    /// calls/s at 3 + 1 us; 2.25 % with its stacks sampled away) whose
    /// detach takes `lag`: its hits go on for `lag` after each switch-off,
    /// each paying the trap. Returns the worst 10 s window's spend (s of
    /// CPU) from the second window on (the first holds the first cut's
    /// detach, which nothing measured yet) and the whole minute's.
    fn spend_with_detach_lag(lag: Duration, told: bool) -> (f64, f64) {
        let (worst, total, _) = detach_sim(7_500, cost(2_250.0, 750.0), lag, 1.0, told);
        (worst, total)
    }

    /// A minute of one probe at `rate` calls/s costing `c`, whose detach
    /// takes `lag` and whose hits go on for `lag_share` of it after each
    /// switch-off (1: the whole lag; the kernel removes the breakpoints
    /// before its grace period, so few in fact). Returns the worst 10 s
    /// window's spend from the second window on, the minute's, and the
    /// windows the probe was switched on in.
    fn detach_sim(
        rate: u64,
        c: SlotCost,
        lag: Duration,
        lag_share: f64,
        told: bool,
    ) -> (f64, f64, usize) {
        let t0 = Instant::now();
        let mut g = one_probe(c, t0);
        let mut switch_ons = 0;
        let (mut t, mut calls, mut off_hits) = (t0, 0u64, 0u64);
        // `on`: the governor's flag; `attached`: the kernel still has the
        // probe (until `lag` after a switch-off).
        let (mut on, mut attached) = (true, true);
        let mut detach_done: Option<Instant> = None;
        let mut spent = vec![(t0, 0.0)];
        for _ in 0..(60_000 / 10) {
            t += MS(10);
            if let Some(done) = detach_done.filter(|d| t >= *d) {
                // The hits up to the detach, then none.
                let before = done.saturating_duration_since(t - MS(10)).as_secs_f64();
                off_hits += (rate as f64 * before * lag_share) as u64;
                attached = false;
                detach_done = None;
                if told {
                    g.detach_took(lag);
                }
            } else if on {
                calls += rate / 100;
            } else if attached {
                off_hits += (rate as f64 / 100.0 * lag_share) as u64;
            }
            let a = g.tick(t, || {
                HashMap::from([(
                    SlotId::of_index(0),
                    SlotCount {
                        calls,
                        wait_ns: calls * 1000,
                        stacks: 0,
                        off_hits,
                    },
                )])
            });
            if !a.suspend.is_empty() {
                on = false;
                detach_done = Some(t + lag);
            }
            if !a.resume.is_empty() {
                if detach_done.is_some() {
                    // Not re-attached while the last detach is under way
                    // (the recorder defers it: both links would count).
                    g.resume_deferred(&a.resume, t);
                } else {
                    (on, attached) = (true, true);
                    g.resumed(&a.resume, t, t);
                }
                switch_ons += 1;
            }
            spent.push((t, g.spent));
        }
        let window = GovernorConfig::default().window;
        (worst_window(&spent, t0 + window), g.spent, switch_ons)
    }

    /// A hot probe (60,000 calls/s at 1.1 us: 6.6 % of a core) whose
    /// detach takes 0.15 s but whose hits stop at 2 % of it (the kernel
    /// removes the breakpoints first, as measured: 593 hits after 5
    /// switch-offs of such a probe) is planned at what its switch-offs
    /// cost once counted, not at 0.15 s of its rate (~9,900 hits, 11 ms
    /// of CPU a detach): watched every period, in windows that spend the
    /// budget (0.086 s of the 0.1 s any 10 s allows; priced at rate x lag
    /// the windows were the shortest and spent 0.015 s).
    #[test]
    fn a_detach_that_takes_few_hits_does_not_thin_the_windows() {
        let allowed = 0.01 * GovernorConfig::default().window.as_secs_f64();
        let (worst, total, windows) = detach_sim(60_000, cost(1_100.0, 0.0), MS(150), 0.02, true);
        assert!(windows >= 50, "{windows} windows in a minute");
        assert!(
            worst <= allowed * 1.05,
            "{worst:.4} s of CPU in a window allowing {allowed} s"
        );
        // The budget is spent watching: most of the minute's.
        assert!(
            total >= 0.01 * 60.0 * 0.7,
            "{total:.4} s of CPU in a minute"
        );
    }

    /// The most CPU `spent` (time, cumulative spend) grew by within any
    /// window (10 s) that starts at `from` or later.
    fn worst_window(spent: &[(Instant, f64)], from: Instant) -> f64 {
        let window = GovernorConfig::default().window;
        let mut worst = 0.0f64;
        for (i, (ta, a)) in spent.iter().enumerate().filter(|(_, (t, _))| *t >= from) {
            for (tb, b) in &spent[i..] {
                if tb.duration_since(*ta) <= window {
                    worst = worst.max(b - a);
                }
            }
        }
        worst
    }

    /// A detach that takes 0.5 s or 1 s (a loaded host) is planned for
    /// once measured: each window's on-time is paid with the detach after
    /// it, and any 10 s holds the budget (a tick late at most): 0.088 s
    /// and 0.077 s of CPU at worst, with 81 % and 77 % of the minute's
    /// budget used. (Not told, the same governor spent 0.083 s and 0.099 s;
    /// before cut probes had an on-window held for them, 0.119 s at 1 s.
    /// At 2 s, 0.116 s not told and 0.102 s told.)
    #[test]
    fn the_budget_holds_with_a_slow_detach() {
        let allowed = 0.01 * GovernorConfig::default().window.as_secs_f64();
        let slack = 0.03 * 0.05;
        for lag in [MS(500), MS(1000)] {
            let (worst, total) = spend_with_detach_lag(lag, true);
            assert!(
                worst <= allowed + slack,
                "{lag:?}: {worst:.4} s of CPU in a window allowing {allowed} s"
            );
            // And still used: most of the minute's budget.
            assert!(total >= 0.01 * 60.0 * 0.7, "{lag:?}: {total}");
        }
    }

    /// A probe at 3.2 % of a core (15,000 calls/s at 2.1 us, the e2e's
    /// paced fixture) on the 1 % budget: its first stretch spends the
    /// window's savings, but one on-window is held back, so once cut it
    /// comes back after its share of time off (~2 s), not when the first
    /// stretch has slid out of the window (~11 s: a 14 s recording on a
    /// loaded host saw it once). Over 14 s: [0, 1.55], [3.75, 4.75] and,
    /// once the first has slid out of the window, [10.95, 12.0].
    #[test]
    fn a_cut_probe_comes_back_before_its_first_stretch_slides_out() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(2_100.0, 700.0), t0);
        let d = run_single(&mut g, t0, 14_000, |_| 15_000 / 20);
        let w = &d[0].windows;
        assert!(d[0].cut && w.len() >= 12, "{w:?}");
        assert!(w[1].start_s - w[0].end_s < 1.1, "{w:?}");
    }

    /// Ten probes at 0.25 % of a core each (650 calls/s at 3.8 us: the
    /// default set on MariaDB 10.2.11 at 650 tps), 2.5 % together on the
    /// 1 % budget: each is cut, and each comes back again and again over
    /// 30 s: 10 or 11 windows each, no gap over 5.7 s. When the plan let
    /// the cheapest probes that fitted together take the whole budget,
    /// four stayed on and six came back only after 19 s off (2 windows
    /// each), as the real default recording did on MariaDB 10.2.11.
    #[test]
    fn a_probe_set_over_the_budget_together_keeps_coming_back() {
        let t0 = Instant::now();
        let mut g = equal_probes(10, cost(2_500.0, 1_300.0), t0);
        let mut t = t0;
        let mut seen = [0u64; 10];
        let mut on = [true; 10];
        for step in 0..(30_000 / 50) {
            for i in 0..10 {
                if on[i] {
                    // 650/s: 32 or 33 a tick.
                    seen[i] += 32 + (step % 2) as u64;
                }
            }
            t += MS(50);
            tick_many(&mut g, t, &seen, &mut on);
        }
        let now: Vec<(usize, u64)> = seen.iter().copied().enumerate().collect();
        for d in g.finish(t, &counts(&now)) {
            let w = &d.windows;
            let gaps: Vec<f64> = w.windows(2).map(|p| p[1].start_s - p[0].end_s).collect();
            assert!(d.cut && w.len() >= 8, "{w:?}");
            assert!(gaps.iter().all(|g| *g < 6.5), "{w:?}");
        }
    }

    /// Ten probes that together cost ~2.5 % of a core on a 1 % budget
    /// (`--probes default` on MariaDB 10.2.11 at 650 tps is of that
    /// kind), driven as the recorder drives the governor: a 10 ms loop,
    /// each tick asking whether to look. Each look wakes the agent and
    /// reads every slot (~35 us here, plus the wake-ups: the governor was
    /// ~60 % of the agent's steady CPU). A cut probe's own windows are due
    /// at their times, but a set that only cycles is looked at on a calm
    /// grid: 369 looks in 30 s before (a look 50 ms after any change,
    /// cycling probes flipping back to full on the moment's savings at
    /// most looks), 140 now, with the same windows and the same spend.
    #[test]
    fn a_cycling_probe_set_is_looked_at_when_its_switches_are_due() {
        let t0 = Instant::now();
        let mut g = equal_probes(10, cost(2_500.0, 1_300.0), t0);
        let (mut t, mut seen, mut on) = (t0, [0u64; 10], [true; 10]);
        let mut spent = vec![(t0, 0.0)];
        let mut switches = 0;
        for step in 0..(30_000 / 10) {
            for i in 0..10 {
                if on[i] {
                    // 650/s.
                    seen[i] += 6 + (step % 2) as u64;
                }
            }
            t += MS(10);
            let before = on;
            tick_many(&mut g, t, &seen, &mut on);
            switches += before.iter().zip(&on).filter(|(a, b)| a != b).count();
            spent.push((t, g.spent));
        }
        let looks = g.alarm().0;
        let now: Vec<(usize, u64)> = seen.iter().copied().enumerate().collect();
        let d = g.finish(t, &counts(&now));
        let windows: Vec<usize> = d.iter().map(|d| d.windows.len()).collect();
        eprintln!(
            "{looks} looks, {switches} switches, windows {windows:?}, spent {:.3} s",
            g.spent
        );
        assert!(looks <= 200, "{looks} looks in 30 s");
        // Every probe keeps coming back, about every 3 s.
        assert!(windows.iter().all(|w| *w >= 8), "{windows:?}");
        // The budget holds over every window and is used.
        let allowed = 0.01 * GovernorConfig::default().window.as_secs_f64();
        let worst = worst_window(&spent, t0);
        assert!(worst <= allowed * 1.05, "{worst:.4} s in a 10 s window");
        assert!(g.spent >= 0.01 * 30.0 * 0.8, "{}", g.spent);
    }

    /// A probe near the budget with a noisy rate (3k and 7k calls/s in
    /// turn, ~2.2 % of a core): cut, it is watched every period, each
    /// window at least `min_window`, never off for more than a period.
    #[test]
    fn a_noisy_probe_near_the_budget_is_watched_every_period() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(3_500.0, 900.0), t0);
        let d = run_single(
            &mut g,
            t0,
            60_000,
            |step| if step % 2 == 0 { 150 } else { 350 },
        );
        assert!(d[0].cut, "{d:?}");
        let w = &d[0].windows;
        assert!(w.len() >= 50, "{w:?}");
        for x in &w[1..] {
            assert!(x.end_s - x.start_s >= 0.019, "{x:?}");
        }
        for pair in w.windows(2) {
            assert!(pair[1].start_s - pair[0].end_s <= 1.05, "{w:?}");
        }
    }

    #[test]
    fn a_cut_probe_returns_to_full_when_it_fits_again() {
        let t0 = Instant::now();
        let mut g = one_probe(cost(3_000.0, 1_000.0), t0);
        let (mut t, mut seen, mut on) = (t0, 0u64, true);
        let mut rate = 20_000u64;
        let mut full_again = None;
        for step in 0..(40_000 / 50) {
            if step == 200 {
                // The load stops after 10 s.
                rate = 10;
            }
            if on {
                seen += rate / 20;
            }
            t += MS(50);
            tick_single(&mut g, t, seen, &mut on);
            if step > 200 && g.probes[0].mode == Mode::Full && full_again.is_none() {
                full_again = Some(t - t0);
            }
        }
        let back = full_again.expect("never back to full");
        // Within a few periods of the load stopping (its steady rate is
        // over the last 3 s).
        assert!(back < Duration::from_secs(15), "{back:?}");
        assert!(on, "on at the end");
        assert_eq!(g.probes[0].stack_every, 1, "every stack again");
    }

    #[test]
    fn hits_while_attaching_are_not_in_any_window() {
        let t0 = Instant::now();
        let probes = vec![GovernedProbe {
            slots: vec![
                (SlotId::of_index(0), cost(1_000.0, 0.0)),
                (SlotId::of_index(1), cost(1_000.0, 0.0)),
            ],
        }];
        let before = counts(&[(0, 700_000), (1, 300_000)]);
        let mut g = Governor::new(GovernorConfig::default(), probes, &before, t0);
        let a = g.tick(t0 + FIRST_TICK, || counts(&[(0, 700_100), (1, 300_100)]));
        assert!(a.is_empty());
        let d = g.finish(t0 + FIRST_TICK, &counts(&[(0, 700_100), (1, 300_100)]));
        assert_eq!(d[0].calls_before_start, 1_000_000);
        assert_eq!(d[0].windows[0].calls, 200);
        assert!(!d[0].cut);
    }

    #[test]
    fn all_switches_of_a_decision_come_in_one_batch() {
        let t0 = Instant::now();
        let mut g = equal_probes(3, cost(5_000.0, 0.0), t0);
        // Each at 100,000 calls/s, 50 % of a core: over the whole window
        // at once, so all three are cut in the first decision.
        let a = g.tick(t0 + FIRST_TICK, || {
            counts(&[(0, 5_000), (1, 5_000), (2, 5_000)])
        });
        let mut s = a.suspend.clone();
        s.sort();
        assert_eq!(s, (0..3).map(SlotId::of_index).collect::<Vec<_>>());
    }

    /// A switch-on the recorder defers (the last detach still under way)
    /// leaves the closed window's calls as they were: it once reset them to
    /// the calls since the deferred switch-on (a 6 s window of 4,000 calls
    /// read 0, and the estimate fell below what was seen).
    #[test]
    fn a_deferred_switch_on_keeps_the_closed_windows_calls() {
        let t0 = Instant::now();
        let slot = SlotId::of_index(0);
        let mut g = one_probe(cost(5_000.0, 0.0), t0).with_phase(MS(0));
        // 100,000 calls/s at 5 µs: 50 % of a core, cut at the first look.
        let a = g.tick(t0 + FIRST_TICK, || counts(&[(0, 5_000)]));
        assert_eq!(a.suspend, vec![slot]);
        let mut t = t0 + FIRST_TICK;
        let mut resumed = None;
        while resumed.is_none() {
            t += MS(10);
            let a = g.tick(t, || counts(&[(0, 5_000)]));
            if a.resume.contains(&slot) {
                resumed = Some(t);
            }
        }
        // The recorder could not re-attach yet.
        g.resume_deferred(&[slot], resumed.unwrap());
        g.wake();
        g.tick(resumed.unwrap() + MS(5), || counts(&[(0, 5_000)]));
        let d = g.finish(resumed.unwrap() + MS(10), &counts(&[(0, 5_000)]));
        assert_eq!(d[0].windows[0].calls, 5_000, "{:?}", d[0].windows);
    }

    /// A probe that fires in bursts (S1's undo walk: one burst per SELECT
    /// of the reader) is seen at a low rate in its short windows, yet the
    /// ~0.1 s detach after each takes a whole burst, every hit paying the
    /// trap. Planned at the windows' rate, the lag overspent (S1 on
    /// MariaDB 11.4.5: 2.2-3.3 % of a core on the 1 % budget, in 226,000
    /// hits after switch-offs); planned at the hits its switch-offs were
    /// seen to cost, it is watched every few periods and any 10 s holds the
    /// budget (a burst late at most).
    #[test]
    fn a_bursty_probes_detach_lag_is_planned_at_what_it_cost() {
        let t0 = Instant::now();
        // 10,000 calls/s at 2.25 + 0.75 us: 3 % of a core fully on, cut.
        // In 10 bursts a second of 1,000 hits, at 50 ms past each 100 ms;
        // the windows (20 ms, at a phase between bursts) see none; each
        // 100 ms detach takes one whole burst.
        let mut g = one_probe(cost(2_250.0, 750.0), t0).with_phase(MS(500));
        let lag = MS(100);
        let (mut t, mut calls, mut off_hits) = (t0, 0u64, 0u64);
        let mut on = true;
        let mut detach_done: Option<Instant> = None;
        let mut spent = vec![(t0, 0.0)];
        let mut resumes = Vec::new();
        for _ in 0..(60_000 / 10) {
            t += MS(10);
            let burst = t.duration_since(t0).as_millis() % 100 == 50;
            if detach_done.is_some_and(|d| t >= d) {
                detach_done = None;
                g.detach_took(lag);
            }
            if burst && on {
                calls += 10_000;
            } else if burst && detach_done.is_some() {
                off_hits += 10_000;
            }
            let a = g.tick(t, || {
                HashMap::from([(
                    SlotId::of_index(0),
                    SlotCount {
                        calls,
                        wait_ns: calls * 1000,
                        stacks: 0,
                        off_hits,
                    },
                )])
            });
            if !a.suspend.is_empty() {
                on = false;
                detach_done = Some(t + lag);
            }
            if !a.resume.is_empty() {
                if detach_done.is_some() {
                    g.resume_deferred(&a.resume, t);
                } else {
                    on = true;
                    g.resumed(&a.resume, t, t);
                    resumes.push(t.duration_since(t0).as_secs_f64());
                }
            }
            spent.push((t, g.spent));
        }
        let window = GovernorConfig::default().window;
        let worst = worst_window(&spent, t0 + window);
        let allowed = 0.01 * window.as_secs_f64();
        // 0.09 s; planned at the windows' rate, 0.51 s (the probe let back
        // fully on whenever its windows had missed the bursts).
        assert!(
            worst <= allowed + 1e-9,
            "{worst:.4} s of CPU in a window allowing {allowed} s; windows at {resumes:?}"
        );
        // Never abandoned: watched to the end, every 5 periods at least.
        assert!(resumes.len() >= 10, "{resumes:?}");
        for pair in resumes.windows(2) {
            assert!(pair[1] - pair[0] <= 5.3, "{resumes:?}");
        }
    }
}
