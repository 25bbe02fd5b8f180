//! A benchmark instrument: every attached probe switched off and on again
//! on a fixed period, the way the governor cuts probes (the BPF flag, the
//! links dropped on a background thread, then re-attached in one batch),
//! with no governor deciding. `scripts/bench.py`'s `toggle` configuration
//! sets `INNOPROF_BENCH_TOGGLE_MS` on probes the load never calls, so
//! what the server pays is the switching alone: breakpoints written into
//! and out of its text under its mmap lock, TLB flushes, the detach's RCU
//! grace periods (issue 12, item 2). Ignored while a governor runs: the
//! two would fight over the same links.

use std::time::{Duration, Instant};

/// The environment variable: the period, in ms, between switches.
pub const TOGGLE_ENV: &str = "INNOPROF_BENCH_TOGGLE_MS";

#[derive(Debug, Clone)]
pub struct Toggle {
    every: Duration,
    next: Instant,
    on: bool,
}

impl Toggle {
    /// From [`TOGGLE_ENV`], when set to a whole number of ms ≥ 1.
    pub fn from_env(now: Instant) -> Option<Self> {
        let ms: u64 = std::env::var(TOGGLE_ENV).ok()?.trim().parse().ok()?;
        (ms >= 1).then(|| Self::new(Duration::from_millis(ms), now))
    }

    pub fn new(every: Duration, now: Instant) -> Self {
        Self {
            every,
            next: now + every,
            on: true,
        }
    }

    /// At `now`: `Some(true)` to switch everything on, `Some(false)` off,
    /// `None` when no switch is due. A late call switches once, not once
    /// per period missed.
    pub fn due(&mut self, now: Instant) -> Option<bool> {
        if now < self.next {
            return None;
        }
        self.on = !self.on;
        self.next = now + self.every;
        Some(self.on)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_off_then_on_once_per_period() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut t = Toggle::new(ms(250), t0);
        assert_eq!(t.due(t0 + ms(100)), None);
        assert_eq!(t.due(t0 + ms(250)), Some(false));
        assert_eq!(t.due(t0 + ms(400)), None);
        // Late: one switch, and the next period counts from now.
        assert_eq!(t.due(t0 + ms(900)), Some(true));
        assert_eq!(t.due(t0 + ms(1100)), None);
        assert_eq!(t.due(t0 + ms(1150)), Some(false));
    }
}
