//! The one tick loop of `record`, `serve` and `top`: a [`Clock`] holds
//! each command's periodic duties (the governor's tick, `--interval`
//! samples, findings windows, discovery, alive checks, refreshes) and
//! says which is due next, or that a signal or the deadline ends the loop.
//! What the commands share is written here once: the governor's period,
//! the alive check's period, Delay on missed ticks, and SIGINT/SIGTERM
//! (SIGHUP for `top`) ending the loop. Each command keeps only what its
//! duties do.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};

/// How often a command looks whether its server is still there: a
/// restart or exit is seen within a quarter second, at little cost.
pub const ALIVE_EVERY: Duration = Duration::from_millis(250);

/// The signals that end a command's loop. Installed before attaching (a
/// Ctrl-C during attach must still detach) and kept across the loops of
/// one command (`record --follow` waits and records with the same ones).
pub struct Signals {
    int: Signal,
    term: Signal,
    /// `top` only: the ssh session or terminal went away.
    hup: Option<Signal>,
}

impl Signals {
    /// SIGINT and SIGTERM.
    pub fn install() -> Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
            hup: None,
        })
    }

    /// SIGHUP ends the loop too.
    pub fn with_hangup(mut self) -> Result<Self> {
        self.hup = Some(signal(SignalKind::hangup()).context("installing SIGHUP handler")?);
        Ok(self)
    }

    fn poll(&mut self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        // recv's None (the driver gone) ends the loop as a signal did.
        let hup = self.hup.as_mut().map(|h| h.poll_recv(cx));
        if self.int.poll_recv(cx).is_ready()
            || self.term.poll_recv(cx).is_ready()
            || hup.is_some_and(|p| p.is_ready())
        {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// What [`Clock::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<D> {
    /// SIGINT, SIGTERM (or SIGHUP when installed): the loop ends.
    Signal,
    /// The instant given to [`Clock::until`] has come.
    Deadline,
    /// This duty's period has come round.
    Due(D),
}

/// A command's periodic duties, named by its own `D` (a small enum).
pub struct Clock<'s, D> {
    signals: &'s mut Signals,
    deadline: Option<Pin<Box<Sleep>>>,
    duties: Vec<(D, Interval)>,
    asked: Option<Asked<D>>,
}

/// A duty due when its doer says ([`Clock::due_again_at`]), or at once
/// when one of its alarm file descriptors becomes readable (`serve`
/// watches several servers, each with its governor's alarm).
struct Asked<D> {
    duty: D,
    at: Pin<Box<Sleep>>,
    alarms: Vec<AsyncFd<OwnedFd>>,
}

fn registered(alarms: impl IntoIterator<Item = OwnedFd>) -> Vec<AsyncFd<OwnedFd>> {
    alarms
        .into_iter()
        // An alarm the reactor refuses is not watched: its governor still
        // decides when it said it would.
        // SAFETY: the AsyncFd owns the descriptor, open until it drops.
        .filter_map(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE).ok() })
        .collect()
}

/// An on-demand duty whose doer did not say when again: due this much
/// later anyway.
const ASKED_FALLBACK: Duration = Duration::from_secs(1);

impl<'s, D: Copy> Clock<'s, D> {
    pub fn new(signals: &'s mut Signals) -> Self {
        Clock {
            signals,
            deadline: None,
            duties: Vec::new(),
            asked: None,
        }
    }

    /// [`Event::Deadline`] at `at`.
    pub fn until(mut self, at: Instant) -> Self {
        self.deadline = Some(Box::pin(tokio::time::sleep_until(at)));
        self
    }

    /// `duty` at once, then at the governor's own period (it switches
    /// probes within a second); each wakeup costs the agent CPU, so no
    /// more often than that.
    pub fn governor(self, duty: D) -> Self {
        self.now_and_every(
            duty,
            innoprof::cost::governor::GovernorConfig::default().tick,
        )
    }

    /// `duty` at once, then whenever [`Self::due_again_at`] says, or as
    /// soon as one of `alarms` is readable (the governors' alarms: their
    /// decisions come when something changed, not twenty times a second).
    pub fn on_demand(mut self, duty: D, alarms: impl IntoIterator<Item = OwnedFd>) -> Self {
        self.asked = Some(Asked {
            duty,
            at: Box::pin(tokio::time::sleep_until(Instant::now())),
            alarms: registered(alarms),
        });
        self
    }

    /// Replaces the on-demand duty's alarms (the servers watched changed).
    pub fn set_alarms(&mut self, alarms: impl IntoIterator<Item = OwnedFd>) {
        if let Some(a) = self.asked.as_mut() {
            a.alarms = registered(alarms);
        }
    }

    /// When the on-demand duty is due next (alarm aside).
    pub fn due_again_at(&mut self, at: Instant) {
        if let Some(a) = self.asked.as_mut() {
            a.at.as_mut().reset(at);
        }
    }

    /// `duty` at once, then every [`ALIVE_EVERY`].
    pub fn alive_check(self, duty: D) -> Self {
        self.now_and_every(duty, ALIVE_EVERY)
    }

    /// `duty` at once, then every `period`.
    pub fn now_and_every(self, duty: D, period: Duration) -> Self {
        self.starting(duty, Instant::now(), period)
    }

    /// `duty` every `period`, the first one period from now (a window or
    /// an interval is due when it is full, not at its start).
    pub fn every(self, duty: D, period: Duration) -> Self {
        self.starting(duty, Instant::now() + period, period)
    }

    fn starting(mut self, duty: D, first: Instant, period: Duration) -> Self {
        let mut interval = tokio::time::interval_at(first, period);
        // A late loop (a slow findings window, a stalled terminal) does
        // each duty once when it wakes, not once per period missed: the
        // duties read counters up to now, so catching up repeats nothing
        // useful and costs the agent CPU.
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.duties.push((duty, interval));
        self
    }

    /// Waits for the next event. When several are ready at once, signals
    /// come first, then the deadline, then the duties in the order they
    /// were added; a duty done is not due again for a period (Delay), so
    /// the first duties cannot starve the others. Cancel safe: used as a
    /// branch of `select!` beside other work (`serve` accepts).
    pub async fn next(&mut self) -> Event<D> {
        poll_fn(|cx| {
            if self.signals.poll(cx).is_ready() {
                return Poll::Ready(Event::Signal);
            }
            if let Some(d) = self.deadline.as_mut() {
                if d.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::Deadline);
                }
            }
            if let Some(a) = self.asked.as_mut() {
                if a.at.as_mut().poll(cx).is_ready() {
                    a.at.as_mut().reset(Instant::now() + ASKED_FALLBACK);
                    return Poll::Ready(Event::Due(a.duty));
                }
                for fd in &a.alarms {
                    if let Poll::Ready(Ok(mut ready)) = fd.poll_read_ready(cx) {
                        // Edge-triggered: the doer empties the ring buffer,
                        // and the next ring is a new edge.
                        ready.clear_ready();
                        return Poll::Ready(Event::Due(a.duty));
                    }
                }
            }
            for (duty, interval) in &mut self.duties {
                if interval.poll_tick(cx).is_ready() {
                    return Poll::Ready(Event::Due(*duty));
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Duty {
        Fast,
        Slow,
    }

    #[tokio::test(start_paused = true)]
    async fn duties_come_due_at_their_periods_and_the_deadline_ends() {
        let mut signals = Signals::install().unwrap();
        let start = Instant::now();
        let mut clock = Clock::new(&mut signals)
            .until(start + Duration::from_millis(250))
            .now_and_every(Duty::Fast, Duration::from_millis(100))
            .every(Duty::Slow, Duration::from_millis(200));
        let mut seen = Vec::new();
        loop {
            let e = clock.next().await;
            seen.push((e, (Instant::now() - start).as_millis()));
            if e == Event::Deadline {
                break;
            }
        }
        assert_eq!(
            seen,
            [
                (Event::Due(Duty::Fast), 0),
                (Event::Due(Duty::Fast), 100),
                (Event::Due(Duty::Fast), 200),
                (Event::Due(Duty::Slow), 200),
                (Event::Deadline, 250),
            ]
        );
    }

    /// The governor's duty: at once, then when its doer says, and at once
    /// whenever the alarm descriptor becomes readable.
    #[tokio::test(start_paused = true)]
    async fn an_on_demand_duty_comes_when_asked_or_when_its_alarm_rings() {
        use std::io::Write;
        let mut signals = Signals::install().unwrap();
        let start = Instant::now();
        let (mut ring, alarm) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut clock = Clock::new(&mut signals)
            .until(start + Duration::from_millis(1_000))
            .on_demand(Duty::Fast, Some(OwnedFd::from(alarm)));
        let ms = |start: Instant| (Instant::now() - start).as_millis();
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 0);
        clock.due_again_at(start + Duration::from_millis(300));
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 300);
        clock.due_again_at(start + Duration::from_millis(800));
        ring.write_all(b"x").unwrap();
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 300, "the alarm brings the duty at once");
        // Not again for the same ring: next at 800 as asked.
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 800);
        // Not asked again: a second later at the latest (past the deadline here).
        assert_eq!(clock.next().await, Event::Deadline);
        assert_eq!(ms(start), 1_000);
    }

    /// `serve`: every watched server's alarm rings the duty, and only the
    /// alarms of the servers watched now.
    #[tokio::test(start_paused = true)]
    async fn an_on_demand_duty_rings_for_each_alarm_it_holds_now() {
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let mut signals = Signals::install().unwrap();
        let start = Instant::now();
        let (mut gone, gone_alarm) = UnixStream::pair().unwrap();
        let (mut first, first_alarm) = UnixStream::pair().unwrap();
        let (mut second, second_alarm) = UnixStream::pair().unwrap();
        let mut clock = Clock::new(&mut signals)
            .until(start + Duration::from_millis(1_000))
            .on_demand(Duty::Fast, [OwnedFd::from(gone_alarm)]);
        let ms = |start: Instant| (Instant::now() - start).as_millis();
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        clock.set_alarms([OwnedFd::from(first_alarm), OwnedFd::from(second_alarm)]);
        clock.due_again_at(start + Duration::from_millis(600));
        second.write_all(b"x").unwrap();
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 0, "the second alarm rings at once");
        clock.due_again_at(start + Duration::from_millis(600));
        tokio::time::sleep(Duration::from_millis(100)).await;
        first.write_all(b"x").unwrap();
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 100, "the first alarm rings at once");
        clock.due_again_at(start + Duration::from_millis(600));
        // The replaced alarm is closed, not watched: next as asked.
        assert!(gone.write_all(b"x").is_err());
        assert_eq!(clock.next().await, Event::Due(Duty::Fast));
        assert_eq!(ms(start), 600);
    }
}
