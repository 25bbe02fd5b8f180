//! Findings over a window of a live session (`serve`): the rules read a
//! [`Summary`], so one is made of the difference of two live readings —
//! each probe's calls, wait, histogram, call sites and latches in the
//! window, and the share of it the governor kept the probe on, with the
//! server's last two state snapshots when serve is logged in. Serve
//! samples no CPU, so the rules or evidence that need it stay silent;
//! nothing is projected over time a probe was off.

use crate::bpf::histogram::Log2Histogram;
use crate::collect::LiveProbe;
use crate::live::{moved, Reading};
use crate::model::summary::{
    CallsiteResult, EndReason, LatchResult, ProbeResult, ProbeStatus, Sampling, SamplingState,
    StackStats, Summary,
};
use crate::record::RecordingPlan;

/// The window between `earlier` and `later` (readings of `probes`, in that
/// order) as a summary the rules can read, with the server's own state
/// when a [`crate::server_state::StateWatcher`] has it.
pub fn summary(
    plan: &RecordingPlan,
    probes: &[LiveProbe],
    earlier: &Reading,
    later: &Reading,
    server_state: Option<crate::model::server_state::ServerState>,
) -> Summary {
    let window_s = (later.elapsed_s - earlier.elapsed_s).max(0.0);
    let results = probes
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let spec = &plan.probes.get(p.probe)?.spec;
            let (a, b) = (earlier.probes.get(i)?, later.probes.get(i)?);
            let d = b.since(a);
            let (calls, wait) = (d.counts.calls, d.counts.wait_ns);
            let on = if window_s > 0.0 {
                (d.on_s / window_s).clamp(0.0, 1.0)
            } else {
                1.0
            };
            let sites = |now, before| {
                moved(now, before)
                    .filter(|(k, _)| k.probe == i)
                    .map(|(k, d)| (k.name.clone(), d))
                    .collect::<Vec<_>>()
            };
            let timed = spec.measure == crate::plan::catalog::Measure::Latency;
            Some(ProbeResult {
                name: spec.name.clone(),
                description: spec.description.clone(),
                measure: spec.measure,
                cost: spec.cost,
                status: ProbeStatus::Attached,
                reason: None,
                symbols: Vec::new(),
                skipped: Vec::new(),
                calls,
                calls_per_sec: if window_s > 0.0 {
                    calls as f64 / window_s
                } else {
                    0.0
                },
                wait_ns_total: wait,
                wait_ns_max: 0,
                wait_ns_avg: (timed && calls > 0).then(|| wait / calls),
                wait_ns_p50: None,
                wait_ns_p99: None,
                histogram: Log2Histogram::new(&d.hist).buckets(),
                callsites: sites(&later.callsites, &earlier.callsites)
                    .into_iter()
                    .map(|(site, d)| CallsiteResult {
                        line: site
                            .rsplit_once(':')
                            .and_then(|(_, l)| l.parse().ok())
                            .unwrap_or(0),
                        site,
                        file: None,
                        latch: None,
                        calls: d.calls,
                        wait_ns_total: d.wait_ns,
                        wait_ns_max: 0,
                        background_wait_ns: d.background_wait_ns,
                    })
                    .collect(),
                latches: sites(&later.latches, &earlier.latches)
                    .into_iter()
                    .map(|(latch, d)| LatchResult {
                        latch,
                        calls: d.calls,
                        wait_ns_total: d.wait_ns,
                        wait_ns_max: 0,
                        background_wait_ns: d.background_wait_ns,
                    })
                    .collect(),
                latch_note: None,
                roles: Vec::new(),
                sampling: (on < 1.0).then(|| Sampling {
                    state: SamplingState::DutyCycled,
                    attached_fraction: on,
                    observed_calls: calls,
                    calls_before_start: 0,
                    windows: Vec::new(),
                    estimate: crate::cost::estimate::CallEstimate::seen_only(calls, wait, window_s),
                    off_at_end_s: None,
                    projected_full_pct_of_core: 0.0,
                }),
                overhead_pct_of_core: 0.0,
                stacks: StackStats::default(),
            })
        })
        .collect();
    // A window is always complete: it ends when its period does.
    let mut summary = Summary {
        server_state,
        ..crate::record::results::bare_summary(plan, results, window_s, EndReason::Duration)
    };
    summary.findings = crate::findings::evaluate(&summary);
    summary
}
