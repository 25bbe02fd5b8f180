//! `record --follow`: a recording across restarts of the server. Each
//! server process is recorded as a segment of its own (attached, counted
//! and named against that process), and the segments are merged here into
//! one recording with the gaps marked. Counts add up; nothing is projected
//! over a gap (no probe watched it): rates are over the seconds watched.

use std::collections::{BTreeMap, HashMap};

use crate::bpf::histogram::{Bucket, Log2Histogram};
use crate::model::files::describe;
use crate::model::files::innodb_status_file;
use crate::model::files::FOLDED_FILES as FOLDED;
use crate::model::named_stack::{NamedStack, RecordedStacks};
use crate::model::server_state::ServerState;
use crate::model::summary::{
    CallsiteResult, CpuSummary, InTargetSummary, LatchResult, OffCpuSummary, OnCpuSummary,
    OverheadSummary, ProbeResult, ProbeStatus, ProgramCost, RoleResult, SampledCost, Sampling,
    SamplingState, Segment, Summary, SymbolInfo,
};
use crate::model::top_symbols::{SelfFrame, TopBuilder};
use crate::plan::memcounters::CounterResult;
use crate::record::recording::Recording;
use crate::report::folded::FoldedStacks;

/// The segments (oldest first) as one recording. A single segment comes
/// back as it is, only listed in `segments`.
pub fn merge(mut segments: Vec<Recording>) -> Recording {
    assert!(!segments.is_empty(), "at least one segment");
    let first_start = segments[0].summary.started_unix_ms;
    let listed: Vec<Segment> = segments
        .iter()
        .map(|r| Segment {
            pid: r.summary.target.pid,
            start_s: (r.summary.started_unix_ms.saturating_sub(first_start)) as f64 / 1e3,
            duration_s: r.summary.duration_s,
            end_reason: r.summary.end_reason,
        })
        .collect();
    let mut merged = segments.remove(0);
    for next in segments {
        merged = merge_two(merged, next, first_start);
    }
    merged.summary.segments = listed;
    merged.summary.findings = crate::findings::evaluate(&merged.summary);
    merged
}

/// Segment `b` appended to `a` (the segments so far): counts add, rates
/// and shares are over the seconds watched, and what describes the
/// server (its target, settings, end) is the later process's.
fn merge_two(a: Recording, b: Recording, first_start: u128) -> Recording {
    let (sa, sb) = (&a.summary, &b.summary);
    let watched_a = sa.watched_s();
    let watched = watched_a + sb.duration_s;
    // Offset of b's clock from the recording's start (its windows).
    let b_offset = sb.started_unix_ms.saturating_sub(first_start) as f64 / 1e3;

    // The machine as the first segment found it; the load as the last left it.
    let host = match (a.host.clone(), &b.host) {
        (Some(first), Some(last)) => Some(crate::target::host::HostInfo {
            load_at_end: last.load_at_end.clone(),
            ..first
        }),
        (first, last) => first.or_else(|| last.clone()),
    };
    let probes = merge_probes(sa, sb, watched_a, watched, b_offset);
    let counters = merge_counters(sa, sb, watched);
    let mut drops = sa.drops.clone();
    drops.add(&sb.drops);
    let mut overhead = merge_overhead(sa, sb, watched_a, watched);
    let stacks = merge_stacks(a.stacks, b.stacks);
    let mut folded = merge_files(a.folded, b.folded);
    let cpu = merge_cpu(sa, sb, &folded, &stacks, watched);
    // From the merged programs, as a single recording derives it.
    overhead.cpu_profiler_pct_of_core = cpu.as_ref().and_then(|c| c.program_pct_of_core());
    let server_state = merge_server_state(sa, sb);

    let summary = Summary {
        // Statements by fingerprint id, summed; connections are the
        // latest process's (see `Who::merge_segments`).
        who: match (&sa.who, &sb.who) {
            (Some(wa), Some(wb)) => Some(crate::model::who::Who::merge_segments(wa, wb)),
            (wa, wb) => wb.clone().or_else(|| wa.clone()),
        },
        format_version: sb.format_version,
        tool: sb.tool.clone(),
        tool_version: sb.tool_version.clone(),
        target: sb.target.clone(),
        catalog: sb.catalog.clone(),
        started_unix_ms: sa.started_unix_ms,
        // Wall time from the first start to the last end, gaps included.
        duration_s: (sb.started_unix_ms.saturating_sub(sa.started_unix_ms)) as f64 / 1e3
            + sb.duration_s,
        end_reason: sb.end_reason,
        complete: sb.complete,
        probes,
        counters,
        drops,
        cpu,
        overhead,
        timeseries: None,
        findings: Vec::new(),
        server_state,
        segments: Vec::new(),
    };
    if let Some(c) = &summary.cpu {
        regraph_cpu(&mut folded, c);
    }
    Recording {
        summary,
        folded,
        // The series spans the whole recording: added after the merge.
        timeseries: None,
        stacks,
        host,
        // Two processes' addresses, each against its own mappings.
        raw: None,
    }
}

/// The probes of both segments, by name (a probe only one segment
/// planned is kept as it is); each one's rate over all the seconds
/// watched, since no probe watched the gaps.
fn merge_probes(
    sa: &Summary,
    sb: &Summary,
    watched_a: f64,
    watched: f64,
    b_offset: f64,
) -> Vec<ProbeResult> {
    let mut probes: Vec<ProbeResult> = sa.probes.clone();
    for p in &sb.probes {
        match probes.iter_mut().find(|q| q.name == p.name) {
            Some(q) => *q = merge_probe(q, watched_a, p, sb.duration_s, b_offset),
            None => probes.push(p.clone()),
        }
    }
    for p in &mut probes {
        p.calls_per_sec = p.calls as f64 / watched.max(1e-9);
    }
    probes
}

/// The memory counters of both segments, by name.
fn merge_counters(sa: &Summary, sb: &Summary, watched: f64) -> Vec<CounterResult> {
    let mut counters = sa.counters.clone();
    for c in &sb.counters {
        match counters.iter_mut().find(|x| x.name == c.name) {
            Some(x) => {
                // Each process counts from its own start: the counts add,
                // the raw values are the first start's and the last end's.
                // A segment whose count could not be read (its server
                // exited before the end read) is left out, and said.
                let missed = |r: &CounterResult, pid: u32| {
                    r.count.is_none().then(|| {
                        format!(
                            "pid {pid}'s segment not counted ({})",
                            r.reason.as_deref().unwrap_or("not read")
                        )
                    })
                };
                let reasons: Vec<String> = [missed(x, sa.target.pid), missed(c, sb.target.pid)]
                    .into_iter()
                    .flatten()
                    .collect();
                x.count = match (x.count, c.count) {
                    (Some(m), Some(n)) => Some(m + n),
                    (m, n) => m.or(n),
                };
                // Not exact then: what was read is kept, and why the rest
                // is missing.
                if !reasons.is_empty() {
                    x.status = crate::plan::memcounters::CounterStatus::ReadFailed;
                    x.reason = Some(reasons.join("; "));
                }
                x.end = c.end;
                x.per_sec = x.count.map(|n| n as f64 / watched.max(1e-9));
            }
            None => counters.push(c.clone()),
        }
    }
    counters
}

/// The overhead of both segments: the later one's, with its shares of a
/// core weighted by the seconds each segment watched (the CPU profiler's
/// is set from the merged programs by the caller).
fn merge_overhead(sa: &Summary, sb: &Summary, watched_a: f64, watched: f64) -> OverheadSummary {
    let weight = |x: f64, y: f64| (x * watched_a + y * sb.duration_s) / watched.max(1e-9);
    let mut overhead = sb.overhead.clone();
    overhead.probes_pct_of_core = weight(
        sa.overhead.probes_pct_of_core,
        sb.overhead.probes_pct_of_core,
    );
    overhead.trap_pct_of_core = weight(sa.overhead.trap_pct_of_core, sb.overhead.trap_pct_of_core);
    overhead.bpf_pct_of_core = match (sa.overhead.bpf_pct_of_core, sb.overhead.bpf_pct_of_core) {
        (Some(x), Some(y)) => Some(weight(x, y)),
        (x, y) => x.or(y),
    };
    // Samples add up over the segments watched (one without probes saw
    // none of theirs); the share is of all the time watched.
    let seen = [&sa.overhead, &sb.overhead].map(|o| o.probes_seen_in_samples);
    overhead.probes_seen_in_samples = seen.iter().flatten().next().and_then(|first| {
        let samples = seen.iter().flatten().map(|s| s.samples).sum();
        SampledCost::new(samples, first.frequency_hz, watched)
    });
    // Only where both segments have it: a share of one segment's time
    // is not a share of both.
    overhead.host_cpu_idle_pct = sa
        .overhead
        .host_cpu_idle_pct
        .zip(sb.overhead.host_cpu_idle_pct)
        .map(|(x, y)| weight(x, y));
    // A fit is of one server process's looks: the one with more looks
    // stands for both, re-scaled to the combined model's figure.
    let fits = [&sa.overhead, &sb.overhead].map(|o| o.in_target.as_ref());
    overhead.in_target = fits
        .into_iter()
        .flatten()
        .max_by_key(|t| t.fit.looks)
        .map(|t| InTargetSummary::new(t.fit.clone(), overhead.probes_pct_of_core));
    if overhead.in_target.is_some() {
        overhead.in_target_note = None;
    }
    overhead.agent_cpu_pct_of_core = weight(
        sa.overhead.agent_cpu_pct_of_core,
        sb.overhead.agent_cpu_pct_of_core,
    );
    overhead.agent_max_rss_kb = sa
        .overhead
        .agent_max_rss_kb
        .max(sb.overhead.agent_max_rss_kb);
    overhead.governor_errors = [
        &sa.overhead.governor_errors[..],
        &sb.overhead.governor_errors[..],
    ]
    .concat();
    overhead
}

/// The named stacks of both segments: the CPU profile's appended, the
/// probes' appended per probe (a probe only one segment has is added).
fn merge_stacks(a: RecordedStacks, b: RecordedStacks) -> RecordedStacks {
    let mut stacks = a;
    // Statements stay beside their stacks: the first segment's list is
    // padded to its stacks before the second's are appended.
    stacks.oncpu_statements.resize(stacks.oncpu.len(), None);
    stacks.oncpu.extend(b.oncpu);
    stacks.oncpu_statements.extend(b.oncpu_statements);
    stacks.offcpu.extend(b.offcpu);
    for set in b.probes {
        match stacks.probes.iter_mut().find(|s| s.probe == set.probe) {
            Some(s) => {
                s.stacks.extend(set.stacks);
                s.labels.extend(set.labels);
            }
            None => stacks.probes.push(set),
        }
    }
    stacks
}

/// The CPU profiles of both segments: the later one's settings, with the
/// counts added and what is derived from them (shares, distinct stacks,
/// top tables) derived again from the merged `folded` files and `stacks`.
/// Where only one segment was profiled, its profile.
fn merge_cpu(
    sa: &Summary,
    sb: &Summary,
    folded: &[(String, String)],
    stacks: &RecordedStacks,
    watched: f64,
) -> Option<CpuSummary> {
    match (&sa.cpu, &sb.cpu) {
        (Some(x), Some(y)) => {
            let mut c = y.clone();
            add_oncpu(&mut c.oncpu, &x.oncpu, folded, &stacks.oncpu, watched);
            if let (Some(o), Some(xo)) = (c.offcpu.as_mut(), x.offcpu.as_ref()) {
                add_offcpu(o, xo, folded, &stacks.offcpu, &sb.target.binary, watched);
            }
            Some(c)
        }
        (x, y) => y.clone().or(x.clone()),
    }
}

/// The earlier segment's on-CPU samples `x` added to `on`; the target's
/// share of a CPU, the distinct stacks and the top table derived again.
fn add_oncpu(
    on: &mut OnCpuSummary,
    x: &OnCpuSummary,
    folded: &[(String, String)],
    stacks: &[(NamedStack, u64)],
    watched: f64,
) {
    on.samples += x.samples;
    on.ticks_seen += x.ticks_seen;
    on.ticks_expected += x.ticks_expected;
    on.target_cpu_pct = if on.ticks_expected > 0 {
        on.samples as f64 * 100.0 / on.ticks_expected as f64
    } else {
        0.0
    };
    on.lost.unwind_stopped += x.lost.unwind_stopped;
    on.lost.kernel_stack += x.lost.kernel_stack;
    on.lost.truncated += x.lost.truncated;
    on.lost.map_full += x.lost.map_full;
    on.probe_handling_samples += x.probe_handling_samples;
    on.program = ProgramCost::merged(x.program, on.program, watched);
    on.folded = on.folded.clone().or(x.folded.clone());
    on.flamegraph = on.flamegraph.clone().or(x.flamegraph.clone());
    on.distinct_stacks = folded_lines(folded, on.folded.as_deref());
    let mut top = TopBuilder::new(SelfFrame::Leaf);
    for (s, n) in stacks {
        top.add(&s.flat(), *n);
    }
    on.top = top.build("samples", crate::record::cpu_profile::TOP_ROWS);
}

/// The earlier segment's off-CPU time `xo` added to `o`; the distinct
/// stacks and the top table derived again, each stack's self time in the
/// server's own code (`binary`) where it is named.
fn add_offcpu(
    o: &mut OffCpuSummary,
    xo: &OffCpuSummary,
    folded: &[(String, String)],
    stacks: &[(NamedStack, u64)],
    binary: &str,
    watched: f64,
) {
    o.blocks += xo.blocks;
    o.blocked_ns_total += xo.blocked_ns_total;
    o.below_min_blocks += xo.below_min_blocks;
    o.below_min_ns += xo.below_min_ns;
    o.preempted_switches += xo.preempted_switches;
    o.program = ProgramCost::merged(xo.program, o.program, watched);
    o.lost.unwind_stopped += xo.lost.unwind_stopped;
    o.lost.map_full += xo.lost.map_full;
    o.lost.start_map_full += xo.lost.start_map_full;
    o.folded = o.folded.clone().or(xo.folded.clone());
    o.flamegraph = o.flamegraph.clone().or(xo.flamegraph.clone());
    o.distinct_stacks = folded_lines(folded, o.folded.as_deref());
    let exe = std::path::Path::new(binary)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let mut top = TopBuilder::new(match exe {
        Some(m) => SelfFrame::InnermostIn(m),
        None => SelfFrame::UserLeaf,
    });
    for (s, us) in stacks {
        top.add(&s.flat(), *us);
    }
    o.top = top.build("us", crate::record::cpu_profile::TOP_ROWS);
}

/// The server's state at the recording's start (the first segment's) and
/// at its end (the last one's), with the samples of both.
fn merge_server_state(sa: &Summary, sb: &Summary) -> Option<ServerState> {
    match (sa.server_state.clone(), sb.server_state.clone()) {
        (Some(mut x), Some(y)) => {
            // The state at the recording's start, and at its end.
            x.end = y.end;
            x.samples.extend(y.samples);
            x.error = x.error.or(y.error);
            Some(x)
        }
        (x, y) => y.or(x),
    }
}

/// The flame graphs of the merged CPU stacks, rendered again from the
/// merged folded files (the merged files keep the last segment's graphs,
/// of its stacks only).
fn regraph_cpu(folded: &mut Vec<(String, String)>, c: &CpuSummary) {
    let title_on = format!(
        "on-CPU: {} samples at {} Hz on {} CPUs",
        c.oncpu.samples, c.oncpu.frequency_hz, c.oncpu.cpus
    );
    regraph(
        folded,
        c.oncpu.folded.as_deref(),
        c.oncpu.flamegraph.as_deref(),
        &title_on,
        "samples",
    );
    if let Some(o) = &c.offcpu {
        let title = format!(
            "off-CPU: time blocked >= {} us, by stack",
            o.min_block_ns / 1000
        );
        regraph(
            folded,
            o.folded.as_deref(),
            o.flamegraph.as_deref(),
            &title,
            "us",
        );
    }
}

fn merge_probe(a: &ProbeResult, a_s: f64, b: &ProbeResult, b_s: f64, b_offset: f64) -> ProbeResult {
    let mut p = b.clone();
    let attached = |x: &ProbeResult| x.status == ProbeStatus::Attached;
    if !attached(b) && attached(a) {
        p.status = a.status;
        p.reason = a.reason.clone();
    }
    p.symbols = merge_symbols(&a.symbols, &b.symbols);
    p.calls = a.calls + b.calls;
    p.wait_ns_total = a.wait_ns_total + b.wait_ns_total;
    p.wait_ns_max = a.wait_ns_max.max(b.wait_ns_max);
    let hist = add_buckets(&a.histogram, &b.histogram);
    let h = histogram_of(&hist);
    let timed = !hist.is_empty() && p.calls > 0;
    p.wait_ns_avg = timed.then(|| p.wait_ns_total / p.calls);
    p.wait_ns_p50 = if timed {
        h.quantile_upper_ns(0.5).map(|q| q.min(p.wait_ns_max))
    } else {
        None
    };
    p.wait_ns_p99 = if timed {
        h.quantile_upper_ns(0.99).map(|q| q.min(p.wait_ns_max))
    } else {
        None
    };
    p.histogram = hist;
    p.callsites = merge_callsites(&a.callsites, &b.callsites);
    p.latches = merge_latches(&a.latches, &b.latches);
    p.roles = merge_roles(&a.roles, &b.roles);
    p.latch_note = b.latch_note.clone().or(a.latch_note.clone());
    p.overhead_pct_of_core =
        (a.overhead_pct_of_core * a_s + b.overhead_pct_of_core * b_s) / (a_s + b_s).max(1e-9);
    p.stacks.distinct = a.stacks.distinct + b.stacks.distinct;
    p.stacks.lost_calls = a.stacks.lost_calls + b.stacks.lost_calls;
    p.stacks.unsampled_calls = a.stacks.unsampled_calls + b.stacks.unsampled_calls;
    p.stacks.folded_by_count = b
        .stacks
        .folded_by_count
        .clone()
        .or(a.stacks.folded_by_count.clone());
    p.stacks.folded_by_wait = b
        .stacks
        .folded_by_wait
        .clone()
        .or(a.stacks.folded_by_wait.clone());
    p.stacks.sampled_every_max = a.stacks.sampled_every_max.max(b.stacks.sampled_every_max);
    p.sampling = merge_sampling(a, a_s, b, b_s, b_offset);
    p
}

/// A probe the governor cut in either segment: its windows on one clock,
/// the estimates and their bounds added (a segment it watched whole counts
/// its calls exactly, bound 0).
fn merge_sampling(
    a: &ProbeResult,
    a_s: f64,
    b: &ProbeResult,
    b_s: f64,
    b_offset: f64,
) -> Option<Sampling> {
    if a.sampling.is_none() && b.sampling.is_none() {
        return None;
    }
    let whole = |p: &ProbeResult, start: f64, len: f64| Sampling {
        state: SamplingState::DutyCycled,
        attached_fraction: 1.0,
        observed_calls: p.calls,
        calls_before_start: 0,
        windows: vec![crate::cost::estimate::OnWindow {
            start_s: start,
            end_s: start + len,
            calls: p.calls,
            wait_ns: p.wait_ns_total,
        }],
        estimate: crate::cost::estimate::CallEstimate::seen_only(
            p.calls,
            p.wait_ns_total,
            start + len,
        ),
        off_at_end_s: None,
        projected_full_pct_of_core: p.overhead_pct_of_core,
    };
    let x = a.sampling.clone().unwrap_or_else(|| whole(a, 0.0, a_s));
    let mut y = b.sampling.clone().unwrap_or_else(|| whole(b, 0.0, b_s));
    for w in &mut y.windows {
        w.start_s += b_offset;
        w.end_s += b_offset;
    }
    let total = (a_s + b_s).max(1e-9);
    let mut windows = x.windows;
    windows.extend(y.windows);
    Some(Sampling {
        state: if b.sampling.is_some() {
            y.state
        } else {
            SamplingState::DutyCycled
        },
        attached_fraction: (x.attached_fraction * a_s + y.attached_fraction * b_s) / total,
        observed_calls: x.observed_calls + y.observed_calls,
        calls_before_start: x.calls_before_start + y.calls_before_start,
        windows,
        estimate: x.estimate.plus(&y.estimate, b_offset),
        off_at_end_s: y.off_at_end_s,
        projected_full_pct_of_core: (x.projected_full_pct_of_core * a_s
            + y.projected_full_pct_of_core * b_s)
            / total,
    })
}

fn merge_symbols(a: &[SymbolInfo], b: &[SymbolInfo]) -> Vec<SymbolInfo> {
    let mut out: Vec<SymbolInfo> = a.to_vec();
    for s in b {
        // The same build at the same address: one symbol; an upgrade's
        // symbols are listed beside the old ones.
        match out
            .iter_mut()
            .find(|x| x.name == s.name && x.address == s.address)
        {
            Some(x) => x.calls += s.calls,
            None => out.push(s.clone()),
        }
    }
    out
}

fn add_buckets(a: &[Bucket], b: &[Bucket]) -> Vec<Bucket> {
    let mut by_low: BTreeMap<u64, Bucket> = BTreeMap::new();
    for x in a.iter().chain(b) {
        by_low
            .entry(x.low_ns)
            .and_modify(|e| e.count += x.count)
            .or_insert_with(|| x.clone());
    }
    by_low.into_values().collect()
}

fn histogram_of(buckets: &[Bucket]) -> Log2Histogram {
    let mut counts = [0u64; crate::bpf::abi::HIST_SLOTS];
    for b in buckets {
        if let Some(slot) =
            (0..crate::bpf::abi::HIST_SLOTS).find(|&i| Log2Histogram::bounds(i).0 == b.low_ns)
        {
            counts[slot] += b.count;
        }
    }
    Log2Histogram::new(&counts)
}

fn merge_callsites(a: &[CallsiteResult], b: &[CallsiteResult]) -> Vec<CallsiteResult> {
    let mut out: Vec<CallsiteResult> = a.to_vec();
    for c in b {
        match out
            .iter_mut()
            .find(|x| x.site == c.site && x.latch == c.latch && x.file == c.file)
        {
            Some(x) => {
                x.calls += c.calls;
                x.wait_ns_total += c.wait_ns_total;
                x.wait_ns_max = x.wait_ns_max.max(c.wait_ns_max);
                x.background_wait_ns += c.background_wait_ns;
            }
            None => out.push(c.clone()),
        }
    }
    out.sort_by_key(|x| std::cmp::Reverse((x.wait_ns_total, x.calls)));
    out
}

/// Roles of both segments added by name (a restarted server's threads
/// are new threads: their counts add up too).
fn merge_roles(a: &[RoleResult], b: &[RoleResult]) -> Vec<RoleResult> {
    let mut out: Vec<RoleResult> = a.to_vec();
    for r in b {
        match out.iter_mut().find(|x| x.role == r.role) {
            Some(x) => {
                x.threads += r.threads;
                x.calls += r.calls;
                x.wait_ns_total += r.wait_ns_total;
            }
            None => out.push(r.clone()),
        }
    }
    out.sort_by(|x, y| {
        (y.wait_ns_total, y.calls, &x.role).cmp(&(x.wait_ns_total, x.calls, &y.role))
    });
    out
}

fn merge_latches(a: &[LatchResult], b: &[LatchResult]) -> Vec<LatchResult> {
    let mut out: Vec<LatchResult> = a.to_vec();
    for l in b {
        match out.iter_mut().find(|x| x.latch == l.latch) {
            Some(x) => {
                x.calls += l.calls;
                x.wait_ns_total += l.wait_ns_total;
                x.wait_ns_max = x.wait_ns_max.max(l.wait_ns_max);
                x.background_wait_ns += l.background_wait_ns;
            }
            None => out.push(l.clone()),
        }
    }
    out.sort_by(|x, y| {
        (y.wait_ns_total, y.calls, &x.latch).cmp(&(x.wait_ns_total, x.calls, &y.latch))
    });
    out
}

/// The files of both segments: folded files (same name) added line by
/// line; the server's status text at start from the first, at end from
/// the last; anything else from the last segment.
fn merge_files(a: Vec<(String, String)>, b: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (name, text) in a {
        index.insert(name.clone(), out.len());
        out.push((name, text));
    }
    for (name, text) in b {
        match index.get(&name) {
            Some(&i) if describe(&name).is_some_and(|o| o.name == FOLDED) => {
                out[i].1 = add_folded(&out[i].1, &text);
            }
            Some(_) if name == innodb_status_file("start") => {}
            Some(&i) => out[i].1 = text,
            None => {
                index.insert(name.clone(), out.len());
                out.push((name, text));
            }
        }
    }
    out
}

fn add_folded(a: &str, b: &str) -> String {
    let mut f = FoldedStacks::default();
    for line in a.lines().chain(b.lines()) {
        if let Some((stack, n)) = line.rsplit_once(' ') {
            if let Ok(n) = n.parse::<u64>() {
                // Already sanitized: `;` splits frames again as it joined them.
                let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
                f.add(&frames, n);
            }
        }
    }
    f.render()
}

fn folded_lines(files: &[(String, String)], name: Option<&str>) -> usize {
    name.and_then(|n| files.iter().find(|(f, _)| f == n))
        .map_or(0, |(_, t)| t.lines().count())
}

/// Renders `svg` again from the merged `folded` file.
fn regraph(
    files: &mut Vec<(String, String)>,
    folded: Option<&str>,
    svg: Option<&str>,
    title: &str,
    unit: &str,
) {
    let (Some(folded), Some(svg)) = (folded, svg) else {
        return;
    };
    let Some(text) = files
        .iter()
        .find(|(f, _)| f == folded)
        .map(|(_, t)| t.clone())
    else {
        return;
    };
    let Ok(Some(drawn)) = crate::report::flamegraph::render(&text, title, unit) else {
        return;
    };
    let rendered = String::from_utf8_lossy(&drawn.svg).into_owned();
    match files.iter_mut().find(|(f, _)| f == svg) {
        Some(entry) => entry.1 = rendered,
        None => files.push((svg.to_string(), rendered)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::summary::EndReason;

    /// The html tests' summary as a segment of `pid` starting `at_s` into
    /// the recording, with `calls` calls (3 in the fixture) of its probe.
    fn segment(pid: u32, at_s: f64, duration_s: f64, end: EndReason, folded: &str) -> Recording {
        let mut s = crate::report::html::tests::summary();
        s.target.pid = pid;
        s.started_unix_ms += (at_s * 1e3) as u128;
        s.duration_s = duration_s;
        s.end_reason = end;
        s.complete = end == EndReason::Duration;
        s.probes[0].stacks.folded_by_count = Some("p.count.folded".into());
        Recording {
            summary: s,
            folded: vec![("p.count.folded".into(), folded.into())],
            timeseries: None,
            stacks: Default::default(),
            host: None,
            raw: None,
        }
    }

    #[test]
    fn segments_add_up_over_the_seconds_watched_with_the_gap_marked() {
        let a = segment(
            42,
            0.0,
            4.0,
            EndReason::TargetExited,
            "main;f 2\nmain;g 1\n",
        );
        let mut b = segment(43, 6.0, 4.0, EndReason::Duration, "main;f 3\n");
        // 198 samples at 99 Hz in uprobe handling, all in the second
        // segment: 2 CPU seconds of the 8 watched.
        b.summary.overhead.probes_seen_in_samples = SampledCost::new(198, 99, 4.0);
        let r = merge(vec![a, b]);
        let s = &r.summary;
        let seen = s.overhead.probes_seen_in_samples.unwrap();
        assert_eq!((seen.samples, seen.pct_of_core), (198, 25.0));
        assert_eq!(s.target.pid, 43);
        assert_eq!((s.duration_s, s.watched_s()), (10.0, 8.0));
        assert_eq!(s.gaps(), [(4.0, 6.0)]);
        assert!(s.complete);
        let p = &s.probes[0];
        assert_eq!((p.calls, p.wait_ns_total, p.wait_ns_max), (6, 6000, 1500));
        assert_eq!(p.calls_per_sec, 6.0 / 8.0, "over the seconds watched");
        let counts: Vec<u64> = p.histogram.iter().map(|b| b.count).collect();
        assert_eq!(counts, [4, 2]);
        assert_eq!(p.wait_ns_avg, Some(1000));
        assert_eq!((p.callsites.len(), p.callsites[0].calls), (1, 6));
        assert_eq!(p.symbols.len(), 1, "the same symbol once");
        assert_eq!(p.symbols[0].calls, 6);
        assert!(p.sampling.is_none(), "watched whole: exact, no estimate");
        let folded = &r
            .folded
            .iter()
            .find(|(n, _)| n == "p.count.folded")
            .unwrap()
            .1;
        assert_eq!(folded, "main;f 5\nmain;g 1\n");
        let line = crate::report::table::segments_line(s).unwrap();
        assert!(
            line.contains("pid 42 0.0–4.0 s, pid 43 6.0–10.0 s"),
            "{line}"
        );
        assert!(
            line.contains("not watched (restarting): 4.0–6.0 s"),
            "{line}"
        );
    }

    /// A probe the governor cut in one segment: seen calls add, and so do
    /// the estimate and its bound (the whole segment counts exactly).
    #[test]
    fn a_cut_probe_adds_estimates_and_bounds() {
        let mut a = segment(42, 0.0, 4.0, EndReason::TargetExited, "");
        let b = segment(43, 5.0, 4.0, EndReason::Duration, "");
        let mut est = crate::cost::estimate::CallEstimate::seen_only(3, 3000, 4.0);
        est.calls = 10.0;
        est.calls_bound = 2.0;
        a.summary.probes[0].sampling = Some(Sampling {
            state: SamplingState::DutyCycled,
            attached_fraction: 0.5,
            observed_calls: 3,
            calls_before_start: 0,
            windows: Vec::new(),
            estimate: est,
            off_at_end_s: None,
            projected_full_pct_of_core: 1.0,
        });
        let r = merge(vec![a, b]);
        let s = r.summary.probes[0].sampling.as_ref().unwrap();
        assert_eq!((s.estimate.calls, s.estimate.calls_bound), (13.0, 2.0));
        assert_eq!(s.observed_calls, 6);
        assert_eq!(s.attached_fraction, 0.75);
        assert_eq!(s.windows.len(), 1, "the whole second segment, on one clock");
        assert_eq!(s.windows[0].start_s, 5.0);
    }
}
