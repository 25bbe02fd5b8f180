//! The overhead lines of the summary: what probe hits cost the server, what
//! innoprof cost itself, and which probes the governor duty-cycled.

use serde::{Deserialize, Serialize};

use crate::cost::hit_cost::HitCost;
use crate::model::summary::{ProbeStatus, Summary};
use crate::text::units;

pub fn render(summary: &Summary) -> String {
    let o = &summary.overhead;
    let budget = match o.budget_pct_of_core {
        Some(b) => format!("budget {b}% of one core"),
        None => "no budget (governor off)".to_string(),
    };
    let mut out = format!(
        "overhead: probe hits cost the server ~{:.2}% of one core ({budget}); innoprof itself {:.2}% CPU, {} MiB peak RSS\n",
        o.probes_pct_of_core,
        o.agent_cpu_pct_of_core,
        o.agent_max_rss_kb / 1024,
    );
    if let Some(line) = in_target_line(o) {
        out.push_str(&format!("  {line}\n"));
    }
    if let Some(line) = saturation_line(o) {
        out.push_str(&format!("  {line}\n"));
    }
    // Above a hundredth of a percent: a line worth reading.
    if o.switched_off_pct_of_core >= 0.01 {
        out.push_str(&format!(
            "  of which ~{:.2}% in {} hits on probes the governor had switched off, before the kernel detached them\n",
            o.switched_off_pct_of_core, o.switched_off_hits,
        ));
    }
    if let Some(seen) = &o.probes_seen_in_samples {
        out.push_str(&format!(
            "  seen in the CPU samples: {:.2}% of one core [{:.2}, {:.2}] ({} samples in the kernel's uprobe handling)\n",
            seen.pct_of_core, seen.pct_of_core_lo, seen.pct_of_core_hi, seen.samples,
        ));
    }
    if let Some(line) = summary.cpu.as_ref().and_then(cpu_profiler_line) {
        out.push_str(&format!("  {line}\n"));
    }
    out.push_str(&render_hit_cost(&o.hit_cost));
    for note in [&o.calibration_note, &o.calibration_reused]
        .into_iter()
        .flatten()
    {
        out.push_str(&format!("  ({note})\n"));
    }
    if let Some(note) = stack_sampling_note(summary) {
        out.push_str(&format!("stacks: {note}\n"));
    }
    for p in &summary.probes {
        if let Some(s) = &p.sampling {
            out.push_str(&format!(
                "sampled: {} on {:.1}% of the time in {} windows (fully on it would cost ~{:.1}% of a core): {}\n",
                p.name,
                s.attached_fraction * 100.0,
                s.windows.len(),
                s.projected_full_pct_of_core,
                estimate_text(s),
            ));
        }
    }
    // One line for every probe whose stacks the governor thinned (the
    // default set under load can be all eight of them).
    let thinned: Vec<String> = summary
        .probes
        .iter()
        .filter(|p| p.stacks.sampled_every_max > 1)
        .map(|p| format!("{} (1 in up to {})", p.name, p.stacks.sampled_every_max))
        .collect();
    if !thinned.is_empty() {
        out.push_str(&format!(
            "stacks sampled by the governor: {}; each stack taken stands for N times the hits it would (folded totals exact, the split between stacks a sample)\n",
            thinned.join(", "),
        ));
    }
    for e in &o.governor_errors {
        out.push_str(&format!("governor: {e}\n"));
    }
    out
}

/// The cost measured in the server (see `in_target`), e.g. `measured in
/// the server: ~10.0% of one core [9.1, 11.0], 1.18x the per-hit figure
/// (...)`. When it was not measured, why, but only where it matters: on a
/// saturated host, where the per-hit figure is a lower bound.
pub fn in_target_line(o: &crate::model::summary::OverheadSummary) -> Option<String> {
    if let Some(t) = &o.in_target {
        return Some(format!(
            "measured in the server: ~{:.2}% of one core [{:.2}, {:.2}], {:.2}x [{:.2}, {:.2}] the per-hit figure (its CPU per {} at {} governor looks, against what the hits between them were priced at)",
            t.pct_of_core,
            t.pct_of_core_low,
            t.pct_of_core_high,
            t.fit.factor,
            t.fit.factor_low,
            t.fit.factor_high,
            work_unit(&t.fit.work),
            t.fit.looks,
        ));
    }
    let saturated = o
        .host_cpu_idle_pct
        .is_some_and(|idle| idle < crate::target::host_idle::SATURATED_BELOW_PCT);
    let note = o.in_target_note.as_ref()?;
    (saturated && o.probes_pct_of_core > 0.0).then(|| format!("not measured in the server: {note}"))
}

/// The unit of work a counter's count is, in words.
fn work_unit(counter: &str) -> &str {
    match counter {
        crate::cost::in_target::WORK_COUNTER => "InnoDB row read",
        other => other,
    }
}

/// Said when the host had no CPU to spare while probes were hit: the
/// per-hit estimate is then a lower bound (see `host_idle`).
pub fn saturation_line(o: &crate::model::summary::OverheadSummary) -> Option<String> {
    let idle = o.host_cpu_idle_pct?;
    (idle < crate::target::host_idle::SATURATED_BELOW_PCT && o.probes_pct_of_core > 0.0).then(|| {
        format!(
            "the host's CPUs were {idle:.1}% idle: saturated, so the per-hit estimate is a lower bound{}",
            if o.in_target.is_some() {
                ": the server's measured figure above includes what it paid around the hits"
            } else {
                "; on a saturated host the server paid 1.3-1.9x it in this project's benchmark (README)"
            }
        )
    })
}

/// What the CPU profiler's BPF programs cost, as the kernel measured them,
/// e.g. `CPU profiler: 2,376 sampler runs at 19.8 µs (1,100 samples of the
/// target at ~42.7 µs), ~0.16% of one core (kernel-measured; outside the
/// probes' budget)`. The sampler runs at every tick of every CPU and
/// returns at once outside the target, so its average per run understates
/// what a sample costs: all its time over the target's samples is the
/// figure to compare. None where not measured.
pub fn cpu_profiler_line(cpu: &crate::model::summary::CpuSummary) -> Option<String> {
    let pct = cpu.program_pct_of_core()?;
    let on = cpu.oncpu.program?;
    let per_sample = (cpu.oncpu.samples > 0).then(|| {
        format!(
            " ({} samples of the target at ~{})",
            cpu.oncpu.samples,
            units::ns(on.run_ns / cpu.oncpu.samples)
        )
    });
    let mut parts = vec![format!(
        "{} sampler runs at {}{}",
        on.runs,
        units::ns(on.avg_ns.round() as u64),
        per_sample.unwrap_or_default()
    )];
    if let Some(off) = cpu.offcpu.as_ref().and_then(|o| o.program) {
        parts.push(format!(
            "{} switch-tracer runs at {}",
            off.runs,
            units::ns(off.avg_ns.round() as u64)
        ));
    }
    Some(format!(
        "CPU profiler: {}, ~{pct:.2}% of one core (kernel-measured BPF time, paid by whatever ran; outside the probes' budget)",
        parts.join(" and "),
    ))
}

/// How probe stacks were taken, when they were sampled in time: what a
/// reader of the folded files and wait flame graphs must know.
pub fn stack_sampling_note(summary: &Summary) -> Option<String> {
    let interval = summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .map(|p| p.stacks.interval_ns)
        .max()
        .filter(|&ns| ns > 0)?;
    Some(format!(
        "each stack is one hit's own: a probe's first 5 hits of each 100 ms on each CPU always, then about one per {} per CPU for the count and, for the wait, a wait of that or more always and a shorter one in proportion to it; each weighted for the hits it stands for: a probe's stacks add up to its exact calls and wait, and their split by stack, latch, role and statement is an unbiased sample (`--stack-interval 0` takes every hit's)",
        units::ns(interval),
    ))
}

/// What a cut probe saw and the only estimate made from it, e.g.
/// `10,010 calls seen in the first 0.6 s, then off (last 7.4 s not projected)`
/// or `9,000 calls seen; ~27,100 ± 1,900 over 0-7.0 s (95 %, interpolated
/// over 4.0 s between 3 windows)`.
pub fn estimate_text(s: &crate::model::summary::Sampling) -> String {
    let e = &s.estimate;
    let mut out = if crate::cost::estimate::too_wide(e) {
        let (rate, half) = crate::cost::estimate::watched_rate(&s.windows);
        format!(
            "{} calls seen; {:.0} ± {:.0} calls per second watched ({:.0} %, in {} windows; a total over 0-{:.1} s would be ~{} ± {}, too wide to quote)",
            s.observed_calls,
            rate,
            half,
            e.confidence * 100.0,
            e.windows,
            e.covered_s,
            e.calls.round(),
            e.calls_bound.ceil(),
        )
    } else if e.gap_s > 0.0 {
        format!(
            "{} calls seen; ~{} ± {} over 0-{:.1} s ({:.0} %, {:.1} s unwatched estimated from {} windows spread over it)",
            s.observed_calls,
            e.calls.round(),
            e.calls_bound.ceil(),
            e.covered_s,
            e.confidence * 100.0,
            e.gap_s,
            e.windows,
        )
    } else {
        format!(
            "{} calls seen in the first {:.1} s",
            s.observed_calls, e.covered_s
        )
    };
    if let Some(off) = s.off_at_end_s.filter(|off| *off > 0.0) {
        out.push_str(&format!(", then off (last {off:.1} s not projected)"));
    }
    out
}

/// One line: what a probe hit costs here, by kind.
pub fn render_hit_cost(c: &HitCost) -> String {
    let ns = |v: f64| units::ns(v.round() as u64);
    format!(
        "per-call probe cost here{}: timed {} (push entry, emulated) / {} (single-stepped entry); count-only {} / {}\n",
        if c.with_stacks { " (with stacks)" } else { "" },
        ns(c.latency_emulated_ns),
        ns(c.latency_stepped_ns),
        ns(c.count_emulated_ns),
        ns(c.count_stepped_ns),
    )
}

/// The overhead figures `metadata.json` carries: observed hits × (the trap
/// calibrated at start + the programs' run time measured in the target).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OverheadEstimate {
    /// How the numbers were made, for whoever reads the file later.
    pub method: String,
    /// False when calibration failed and typical costs were used.
    pub calibrated: bool,
    /// Server CPU spent in probe hits over the whole recording.
    pub total_ns: u64,
    /// `total_ns` as a share of one CPU over the recording, in %: the
    /// `overhead.probes_pct_of_core` of summary.json.
    #[serde(alias = "pct_of_one_cpu")]
    pub probes_pct_of_core: f64,
    pub probes: Vec<ProbeOverhead>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeOverhead {
    pub name: String,
    /// Hits seen: summary.json's `calls` of the probe.
    #[serde(alias = "hits")]
    pub calls: u64,
    pub estimated_ns: u64,
}

pub fn estimate(summary: &Summary) -> OverheadEstimate {
    let wall_ns = summary.duration_s * 1e9;
    let probes: Vec<ProbeOverhead> = summary
        .probes
        .iter()
        .filter(|p| p.status == ProbeStatus::Attached)
        .map(|p| ProbeOverhead {
            name: p.name.clone(),
            calls: p.calls,
            estimated_ns: (p.overhead_pct_of_core / 100.0 * wall_ns).round() as u64,
        })
        .collect();
    let c = &summary.overhead.hit_cost;
    OverheadEstimate {
        method: format!(
            "hits seen x (the trap, calibrated at start, + the BPF programs' run time measured in the target); calibrated per-call cost{}: timed {:.0} ns (emulated entry) / {:.0} ns (single-stepped), count-only {:.0} / {:.0} ns",
            if c.with_stacks { " with stacks" } else { "" },
            c.latency_emulated_ns,
            c.latency_stepped_ns,
            c.count_emulated_ns,
            c.count_stepped_ns,
        ),
        calibrated: summary.overhead.calibration_note.is_none(),
        total_ns: crate::model::saturating_sum(probes.iter().map(|p| p.estimated_ns)),
        probes_pct_of_core: summary.overhead.probes_pct_of_core,
        probes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::summary::OverheadSummary;

    #[test]
    fn a_saturated_host_makes_the_estimate_a_lower_bound() {
        let o = |idle, probes| OverheadSummary {
            host_cpu_idle_pct: idle,
            probes_pct_of_core: probes,
            ..OverheadSummary::default()
        };
        let line = saturation_line(&o(Some(0.4), 12.0)).expect("saturated");
        assert!(line.contains("0.4% idle"), "{line}");
        assert!(line.contains("lower bound"), "{line}");
        // CPU to spare, no probe hits, or no figures: nothing to say.
        assert_eq!(saturation_line(&o(Some(30.0), 12.0)), None);
        assert_eq!(saturation_line(&o(Some(0.4), 0.0)), None);
        assert_eq!(saturation_line(&o(None, 12.0)), None);
    }

    #[test]
    fn the_cost_measured_in_the_server_is_shown_or_why_not_where_it_matters() {
        let fit = crate::cost::in_target::InTargetFit {
            factor: 1.2,
            factor_low: 1.1,
            factor_high: 1.3,
            cpu_per_work_ns: 700.0,
            looks: 118,
            work: crate::cost::in_target::WORK_COUNTER.into(),
        };
        let measured = OverheadSummary {
            host_cpu_idle_pct: Some(0.3),
            probes_pct_of_core: 10.0,
            in_target: Some(crate::model::summary::InTargetSummary::new(fit, 10.0)),
            ..OverheadSummary::default()
        };
        assert_eq!(
            in_target_line(&measured).unwrap(),
            "measured in the server: ~12.00% of one core [11.00, 13.00], 1.20x [1.10, 1.30] \
             the per-hit figure (its CPU per InnoDB row read at 118 governor looks, against \
             what the hits between them were priced at)"
        );
        assert!(saturation_line(&measured)
            .unwrap()
            .contains("measured figure above includes"));
        let why = |idle| OverheadSummary {
            host_cpu_idle_pct: Some(idle),
            probes_pct_of_core: 10.0,
            in_target_note: Some("no governor".into()),
            ..OverheadSummary::default()
        };
        assert_eq!(
            in_target_line(&why(0.3)).as_deref(),
            Some("not measured in the server: no governor")
        );
        // CPU to spare: the per-hit figure holds, the note is noise.
        assert_eq!(in_target_line(&why(40.0)), None);
    }
}
