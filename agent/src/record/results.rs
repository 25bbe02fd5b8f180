//! A recording's results, built once the probes are detached and the maps
//! read: per probe its counts, latency, call sites, latches and named
//! stacks; the overhead; the CPU profile named; the findings. The
//! [`Recorder`](crate::record::Recorder) coordinates; this turns what it
//! collected into a [`Recording`].

use std::collections::HashMap;
use std::time::Duration;

use crate::attach::{AttachOutcome, RunStats, Session, Slot};
use crate::bpf::abi::{Callsite, SiteVal, SlotId, SlotStats};
use crate::bpf::histogram::Log2Histogram;
use crate::collect::{MapsSnapshot, StackSample};
use crate::cost::governor::DutyReport;
use crate::cost::hit_cost::HitCost;
use crate::cost::live::LiveCost;
use crate::cpu::RawCpuProfile;
use crate::model::files::instance;
use crate::model::files::FOLDED_FILES as FOLDED;
use crate::model::named_stack::ProbeStackSet;
use crate::model::named_stack::{NamedStack, RecordedStacks};
use crate::model::raw_stacks::{
    KernelName, RawFileStamp, RawMapping, RawProbeSample, RawProbeStacks, RawSegment, RawStacks,
};
use crate::model::summary::{
    CallsiteResult, EndReason, LatchResult, OverheadSummary, ProbeResult, ProbeStatus, RoleKind,
    RoleResult, SampledCost, Sampling, SamplingState, StackStats, Summary, SymbolInfo,
};
use crate::plan::catalog::Measure;
use crate::plan::memcounters::CounterResult;
use crate::plan::probeset::PlannedProbe;
use crate::record::cpu_profile::{CpuProfile, NamedCpu};
use crate::record::recording::Recording;
use crate::record::recording_plan::RecordingPlan;
use crate::report;
use crate::report::flamegraph::FlameGraphError;
use crate::report::folded::FoldedStacks;
use crate::resolve::{SkipReason, Unresolved};
use crate::symbolize::callsite::CallsiteNamer;
use crate::symbolize::{Frame, FrameKind, ProcessMaps, StackSymbolizer};
use crate::target::own_usage::{debug_phase, own_cpu_time, own_max_rss_kb};

/// What the recorder hands over once its probes are detached, its maps
/// read and its CPU profiler stopped.
pub(crate) struct Finished<'a> {
    pub plan: &'a RecordingPlan,
    /// None when nothing resolved (a CPU-only recording).
    pub session: Option<&'a Session>,
    pub snapshot: MapsSnapshot,
    /// The governor's account per planned probe (None: no governor).
    pub duties: Option<Vec<DutyReport>>,
    pub cpu: Option<RawCpuProfile>,
    /// The target's mappings, to name the stacks with.
    pub maps: ProcessMaps,
    pub hit_cost: HitCost,
    /// The per-call cost measured in the target (None: no session).
    pub live_cost: Option<&'a LiveCost>,
    pub calibration_note: Option<String>,
    pub calibration_reused: Option<String>,
    pub governor_errors: Vec<String>,
    /// innoprof's own CPU time when it started attaching.
    pub agent_cpu_at_start: Duration,
    /// The host's idle share of CPU time over the recording, in %.
    pub host_cpu_idle_pct: Option<f64>,
    /// The in-target fit, or why there is none.
    pub in_target: Result<crate::cost::in_target::InTargetFit, String>,
    pub counters: Vec<CounterResult>,
    /// Per planned probe: its auxiliary counter's readings at its
    /// switches, where it has one (see [`crate::cost::estimate::AUXILIARY`]).
    pub aux: Vec<Option<crate::cost::estimate::AuxMarks>>,
    pub started_unix_ms: u128,
    pub duration_s: f64,
    pub end_reason: EndReason,
    /// The statements, their holders and latches not yet named.
    pub who: Option<crate::model::who::Who>,
}

/// Builds the recording from what the recorder collected, in the order
/// its parts depend on each other: the user stacks named, the probes'
/// results, the CPU profile named, the overhead (after the naming, which
/// is most of what the end costs), then the summary.
pub(crate) fn build(finished: Finished) -> Result<Recording, FlameGraphError> {
    let Finished {
        plan,
        session,
        snapshot,
        duties,
        cpu: cpu_raw,
        maps,
        hit_cost,
        live_cost,
        calibration_note,
        calibration_reused,
        governor_errors,
        agent_cpu_at_start,
        host_cpu_idle_pct,
        in_target,
        counters,
        aux,
        started_unix_ms,
        duration_s,
        end_reason,
        who,
    } = finished;
    let pricing = Pricing {
        hit_cost,
        live_cost,
        run_stats: session.map(Session::run_stats).unwrap_or_default(),
    };
    let mut symbolizer = plan.stack_symbolizer(maps);
    name_user_stacks(plan, session, &snapshot, cpu_raw.as_ref(), &mut symbolizer);
    let mut namer = CallsiteNamer::new(plan.target.pid, &plan.image);
    let mut collected = Collected::default();
    let results = ProbeInputs {
        plan,
        session,
        snapshot: &snapshot,
        duties: duties.as_deref(),
        aux: &aux,
        counters: &counters,
        pricing,
        duration_s,
    }
    .results(&mut symbolizer, &mut namer, &mut collected);
    let who = who.map(|w| name_who(w, plan, &snapshot, &mut namer));
    let probes_cost_pct: f64 = results.iter().map(|r| r.overhead_pct_of_core).sum();
    debug_phase("after probe results");
    let cpu = name_cpu_profile(cpu_raw, &mut symbolizer, &mut collected)?;
    let overhead = OverheadInputs {
        plan,
        session,
        pricing,
        calibration_note,
        calibration_reused,
        governor_errors,
        agent_cpu_at_start,
        host_cpu_idle_pct,
        in_target,
        duration_s,
    }
    .summary(cpu.as_ref(), &collected.hits, probes_cost_pct);

    let mut summary = Summary {
        started_unix_ms,
        counters,
        drops: snapshot.drops,
        cpu: cpu.map(|c| c.summary),
        overhead,
        who,
        ..bare_summary(plan, results, duration_s, end_reason)
    };
    summary.findings = crate::findings::evaluate(&summary);
    let mut raw = collected.raw;
    raw.format_version = crate::model::files::FORMAT_VERSION;
    raw.named_on_host = plan.symbolize;
    raw.mappings = raw_mappings(symbolizer.maps());
    raw.kernel = symbolizer
        .kernel_names()
        .into_iter()
        .map(|(address, name)| KernelName { address, name })
        .collect();
    Ok(Recording {
        summary,
        folded: collected.folded,
        timeseries: None,
        stacks: collected.stacks,
        host: None,
        raw: Some(raw),
    })
}

/// The holders' threads (by role), their lock sites and the latches of
/// `who` named, as the probes' call sites and latch tables name them.
fn name_who(
    mut who: crate::model::who::Who,
    plan: &RecordingPlan,
    snapshot: &MapsSnapshot,
    namer: &mut CallsiteNamer,
) -> crate::model::who::Who {
    who.name_holders(&snapshot.thread_roles, |file, line| {
        namer.file_line(file, line)
    });
    let latch_names: HashMap<&str, LatchNames> = plan
        .probes
        .iter()
        .map(|p| (p.spec.name.as_str(), LatchNames::new(p)))
        .collect();
    who.name_latches(|probe, (latch, created_file, created_line)| {
        let site = Callsite {
            latch,
            created_file,
            created_line,
            ..Default::default()
        };
        latch_names.get(probe)?.of(&site, namer)
    });
    who
}

/// Every executable mapping of the target, with its file's build id, load
/// segments and stamp: what naming its raw addresses later checks a file
/// found then against. Read from the files opened as the target mapped
/// them (headers and notes only).
fn raw_mappings(maps: &ProcessMaps) -> Vec<RawMapping> {
    let mut facts: HashMap<String, (Option<String>, Vec<RawSegment>, Option<RawFileStamp>)> =
        HashMap::new();
    maps.regions_with_ids()
        .map(|(start, end, file_offset, path, id)| {
            let (build_id, segments, file) = facts
                .entry(path.to_string())
                .or_insert_with(|| {
                    let Ok(f) = maps.opened(path) else {
                        return (None, Vec::new(), None);
                    };
                    let (build_id, offsets) = crate::symbolize::build_id_and_segments(f.file())
                        .unwrap_or((
                            None,
                            crate::resolve::elf::OffsetMap::from_segments(Vec::new()),
                        ));
                    let segments = offsets
                        .segments()
                        .iter()
                        .map(|&(offset, size, address)| RawSegment {
                            offset,
                            size,
                            address,
                        })
                        .collect();
                    let stamp = crate::persist::stamp::file_stamp(f.file());
                    let file = id.zip(stamp).map(|(id, st)| RawFileStamp {
                        major: id.major,
                        minor: id.minor,
                        inode: id.inode,
                        size: st.len,
                        mtime_ns: system_time_ns(st.modified),
                        ctime_ns: st.changed_ns,
                    });
                    (build_id, segments, file)
                })
                .clone();
            RawMapping {
                start,
                end,
                file_offset,
                path: path.to_string(),
                build_id,
                segments,
                file,
            }
        })
        .collect()
}

/// Nanoseconds since the epoch (negative before it).
pub fn system_time_ns(t: std::time::SystemTime) -> i128 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// What one call of a slot's function costs innoprof, by the best measure
/// there is: the cost measured in the target (its programs' run time over
/// the recording) where there is a session, else the calibrated price.
#[derive(Clone, Copy)]
struct Pricing<'a> {
    hit_cost: HitCost,
    live_cost: Option<&'a LiveCost>,
    /// The programs' run statistics at the end (default without a session).
    run_stats: RunStats,
}

impl Pricing<'_> {
    fn per_call_ns(&self, slot: &Slot) -> f64 {
        match self.live_cost {
            Some(c) => c.per_call_ns_overall(slot.measure, slot.symbol.entry, self.run_stats),
            None => self.hit_cost.per_call_ns(slot.measure, slot.symbol.entry),
        }
    }
}

/// What the probes' hits cost over every probe, for the overhead: the
/// traps, and the hits while a probe was switched off (paid in full for
/// nothing seen).
#[derive(Default)]
struct HitTotals {
    trap_ns: f64,
    switched_off_hits: u64,
    switched_off_ns: f64,
}

/// What the recording gathers besides the probes' rows, added to probe by
/// probe and then by the CPU profile: the folded files, the named stacks
/// and the hits' costs.
#[derive(Default)]
struct Collected {
    folded: Vec<(String, String)>,
    stacks: RecordedStacks,
    hits: HitTotals,
    /// The stacks as addresses: `stacks.raw.json`.
    raw: RawStacks,
}

/// Names every user stack of the recording up front (the probes' and the
/// CPU profile's), file by file: the peak RSS of the end is then one
/// file's debug info, not all of them.
fn name_user_stacks(
    plan: &RecordingPlan,
    session: Option<&Session>,
    snapshot: &MapsSnapshot,
    cpu_raw: Option<&RawCpuProfile>,
    symbolizer: &mut StackSymbolizer,
) {
    // Count stacks are taken at the probed instruction itself, whose
    // address is exact (latency stacks at a return address).
    let exact_first: HashMap<SlotId, bool> = (0..plan.probes.len())
        .flat_map(|idx| {
            let count = plan.probes[idx].spec.measure == Measure::Count;
            probe_slots(session, idx)
                .into_iter()
                .map(move |(id, _)| (id, count))
        })
        .collect();
    let cpu_user: Vec<Vec<u64>> = cpu_raw.map_or_else(Vec::new, |c| c.user_stacks());
    symbolizer.name_user_stacks(
        snapshot
            .stacks
            .iter()
            .filter_map(|s| Some((s.ips.as_slice(), *exact_first.get(&s.slot)?)))
            .chain(cpu_user.iter().map(|ips| (ips.as_slice(), true))),
    );
    drop(cpu_user);
    crate::target::own_usage::debug_phase("after user stacks named");
}

/// What every probe's result is read from: the plan, the attached slots,
/// the maps as read at the end, and the governor's account.
struct ProbeInputs<'a> {
    plan: &'a RecordingPlan,
    /// None when nothing resolved (a CPU-only recording).
    session: Option<&'a Session>,
    snapshot: &'a MapsSnapshot,
    duties: Option<&'a [DutyReport]>,
    aux: &'a [Option<crate::cost::estimate::AuxMarks>],
    counters: &'a [CounterResult],
    pricing: Pricing<'a>,
    duration_s: f64,
}

impl ProbeInputs<'_> {
    /// Every planned probe's result, in the plan's order; their stacks and
    /// costs go to `collected`.
    fn results(
        &self,
        symbolizer: &mut StackSymbolizer,
        namer: &mut CallsiteNamer,
        collected: &mut Collected,
    ) -> Vec<ProbeResult> {
        self.plan
            .probes
            .iter()
            .enumerate()
            .map(|(idx, planned)| self.result(idx, planned, symbolizer, namer, collected))
            .collect()
    }

    /// Probe `idx`'s row in summary.json: its counts and latency over its
    /// symbols, whether it attached, its call sites, latches, roles and
    /// stacks, its cost, and the governor's estimate where it was cut.
    fn result(
        &self,
        idx: usize,
        planned: &PlannedProbe,
        symbolizer: &mut StackSymbolizer,
        namer: &mut CallsiteNamer,
        collected: &mut Collected,
    ) -> ProbeResult {
        // No session when nothing resolved (CPU-only recording).
        let no_failures = AttachOutcome::default();
        let outcome = self.session.map_or(&no_failures, |s| &s.outcomes[idx]);
        let spec = &planned.spec;
        let my_slots = probe_slots(self.session, idx);
        let (total, symbols, spent_ns) = self.slot_totals(&my_slots, &mut collected.hits);
        let (calls, wait_total, wait_max) = (total.calls, total.wait_ns_total, total.wait_ns_max);
        let hist = Log2Histogram::new(&total.hist);
        let (status, reason) = probe_status(planned, outcome, !my_slots.is_empty());

        let latch_names = LatchNames::new(planned);
        let stacks = if status == ProbeStatus::Attached {
            self.probe_stacks(
                planned,
                &my_slots,
                &latch_names,
                symbolizer,
                namer,
                collected,
            )
        } else {
            StackStats::default()
        };

        let timed = spec.measure == Measure::Latency && calls > 0;
        let duration_s = self.duration_s;
        let sites = &self.snapshot.site_roles;
        let mut result = ProbeResult {
            name: spec.name.clone(),
            description: spec.description.clone(),
            measure: spec.measure,
            cost: spec.cost,
            status,
            reason,
            symbols,
            skipped: planned.resolution.skipped.clone(),
            calls,
            calls_per_sec: if duration_s > 0.0 {
                calls as f64 / duration_s
            } else {
                0.0
            },
            wait_ns_total: wait_total,
            wait_ns_max: wait_max,
            wait_ns_avg: timed.then(|| wait_total / calls),
            // A bucket's upper bound can exceed the largest wait seen.
            wait_ns_p50: if timed {
                hist.quantile_upper_ns(0.5).map(|q| q.min(wait_max))
            } else {
                None
            },
            wait_ns_p99: if timed {
                hist.quantile_upper_ns(0.99).map(|q| q.min(wait_max))
            } else {
                None
            },
            histogram: if spec.measure == Measure::Latency {
                hist.buckets()
            } else {
                Vec::new()
            },
            callsites: callsite_results(&my_slots, sites, namer, &latch_names),
            latches: latch_results(&my_slots, sites, namer, &latch_names),
            roles: role_results(&my_slots, self.snapshot, calls, wait_total),
            latch_note: planned.latch.as_ref().and_then(|l| l.unavailable.clone()),
            stacks: StackStats {
                sampled_every_max: self.duties.map_or(1, |d| d[idx].stack_every_max),
                interval_ns: self.plan.stack_interval_ns(),
                ..stacks
            },
            sampling: None,
            overhead_pct_of_core: spent_ns / 1e9 / duration_s.max(1e-9) * 100.0,
        };
        self.describe_cut(idx, !my_slots.is_empty(), &mut result);
        result
    }

    /// A probe's counts summed over its slots, its symbols with each one's
    /// calls, and what its hits cost; the traps and the hits while
    /// switched off are added to `totals` too.
    fn slot_totals(
        &self,
        slots: &[(SlotId, &Slot)],
        totals: &mut HitTotals,
    ) -> (SlotStats, Vec<SymbolInfo>, f64) {
        let mut total = SlotStats::default();
        let mut symbols = Vec::new();
        let mut spent_ns = 0.0;
        for (slot_id, slot) in slots {
            let st = self
                .snapshot
                .slots
                .get(slot_id)
                .copied()
                .unwrap_or_default();
            // A hit while switched off ran the programs only to return,
            // but paid the whole trap; the programs' average run time per
            // hit is over all their runs, those included, so hits × average
            // is the kernel's measured total.
            let hits = st.hits() as f64;
            let per_call_ns = self.pricing.per_call_ns(slot);
            let trap_ns = self
                .pricing
                .hit_cost
                .trap_ns(slot.measure, slot.symbol.entry);
            spent_ns += hits * per_call_ns;
            totals.trap_ns += hits * trap_ns;
            totals.switched_off_hits += st.off_hits;
            totals.switched_off_ns += st.off_hits as f64 * per_call_ns;
            total += &st;
            let s = &slot.symbol;
            symbols.push(SymbolInfo {
                name: s.name.clone(),
                raw: s.raw.clone(),
                address: format!("{:#x}", s.address),
                file_offset: format!("{:#x}", s.file_offset),
                table: s.table,
                clone: s.clone.clone(),
                entry: s.entry,
                moved: s.moved.as_ref().map(|m| m.to_string()),
                calls: st.calls,
            });
        }
        (total, symbols, spent_ns)
    }

    /// An attached probe's stacks folded into its files and named for the
    /// recording's stacks (both added to `collected`); their statistics
    /// for its row.
    fn probe_stacks(
        &self,
        planned: &PlannedProbe,
        slots: &[(SlotId, &Slot)],
        latches: &LatchNames,
        symbolizer: &mut StackSymbolizer,
        namer: &mut CallsiteNamer,
        collected: &mut Collected,
    ) -> StackStats {
        let spec = &planned.spec;
        let stem = report::file_stem(&spec.name);
        let (stats, files, set, raw) = fold_stacks(
            &spec.name,
            &stem,
            spec.measure,
            slots,
            &self.snapshot.stacks,
            symbolizer,
            namer,
            latches,
        );
        collected.folded.extend(files);
        if !set.stacks.is_empty() {
            collected.stacks.probes.push(set);
            collected.raw.probes.push(raw);
        }
        stats
    }

    /// A probe the governor cut (and that attached) saw only part of its
    /// calls: its row says so, with the estimate (see
    /// [`describe_sampling`]); from its auxiliary counter's ratio where
    /// it has one and the counter was read.
    fn describe_cut(&self, idx: usize, attached: bool, result: &mut ProbeResult) {
        let Some(duty) = self.duties.map(|d| &d[idx]) else {
            return;
        };
        if !duty.cut || !attached {
            return;
        }
        let ratio = self.aux.get(idx).and_then(Option::as_ref).and_then(|m| {
            let total = self.counters.iter().find(|c| c.name == m.counter)?.count?;
            Some((m, total))
        });
        describe_sampling(result, duty, self.duration_s, ratio);
    }
}

/// Whether a probe attached, and why not (or which of its symbols were
/// refused) where that is worth saying.
fn probe_status(
    planned: &PlannedProbe,
    outcome: &AttachOutcome,
    attached: bool,
) -> (ProbeStatus, Option<String>) {
    // First instructions the kernel refuses were never tried.
    let unprobeable = planned
        .resolution
        .skipped
        .iter()
        .filter(|s| s.reason == SkipReason::Unprobeable)
        .map(|s| format!("{}: {s}", s.name));
    if attached {
        let refused = unprobeable
            .chain(outcome.failures.iter().map(crate::attach::Refusal::said))
            .collect::<Vec<_>>();
        (
            ProbeStatus::Attached,
            (!refused.is_empty()).then(|| format!("some symbols refused: {}", refused.join("; "))),
        )
    } else if let Some(u @ Unresolved::Unprobeable(_)) = &planned.resolution.unresolved {
        (ProbeStatus::AttachFailed, Some(u.to_string()))
    } else if let Some(u) = &planned.resolution.unresolved {
        (ProbeStatus::Unresolved, Some(u.to_string()))
    } else {
        let refused = outcome
            .failures
            .iter()
            .map(crate::attach::Refusal::said)
            .collect::<Vec<_>>();
        (ProbeStatus::AttachFailed, Some(refused.join("; ")))
    }
}

/// The CPU profile with its stacks named; its folded files and named
/// stacks join the probes' in `collected`.
fn name_cpu_profile(
    raw: Option<RawCpuProfile>,
    symbolizer: &mut StackSymbolizer,
    collected: &mut Collected,
) -> Result<Option<CpuProfile>, FlameGraphError> {
    let cpu = raw.map(|raw| {
        let stacks = raw.raw_stacks();
        let named = raw.named(NamedCpu::of(&stacks, symbolizer));
        collected.raw.cpu = Some(stacks);
        named
    });
    debug_phase("after CPU stacks named");
    Ok(match cpu {
        Some(mut c) => {
            collected.folded.extend(c.files()?);
            collected.stacks.oncpu = std::mem::take(&mut c.oncpu_stacks);
            collected.stacks.oncpu_statements = std::mem::take(&mut c.oncpu_statements);
            collected.stacks.offcpu = std::mem::take(&mut c.offcpu_stacks);
            Some(c)
        }
        None => None,
    })
}

/// What the overhead is read from besides the probes' costs: the plan and
/// session, the prices, and what the recorder measured of itself and of
/// the host.
struct OverheadInputs<'a> {
    plan: &'a RecordingPlan,
    session: Option<&'a Session>,
    pricing: Pricing<'a>,
    calibration_note: Option<String>,
    calibration_reused: Option<String>,
    governor_errors: Vec<String>,
    agent_cpu_at_start: Duration,
    host_cpu_idle_pct: Option<f64>,
    in_target: Result<crate::cost::in_target::InTargetFit, String>,
    duration_s: f64,
}

impl OverheadInputs<'_> {
    /// The recording's overhead: the probes' (priced, seen in the CPU
    /// samples, fitted in the target), the CPU profiler's and innoprof's
    /// own. Taken once the stacks are named: the end's symbolization is
    /// most of what a recording costs innoprof, and its peak RSS.
    fn summary(
        self,
        cpu: Option<&CpuProfile>,
        hits: &HitTotals,
        probes_cost_pct: f64,
    ) -> OverheadSummary {
        let duration_s = self.duration_s;
        let agent_cpu = own_cpu_time().saturating_sub(self.agent_cpu_at_start);
        // Only where probes were attached: without them a sample in uprobe
        // handling is somebody else's probe.
        let probes_seen_in_samples = cpu.filter(|_| self.session.is_some()).and_then(|c| {
            let on = &c.summary.oncpu;
            SampledCost::new(on.probe_handling_samples, on.frequency_hz, duration_s)
        });
        let run_stats = self.pricing.run_stats;
        OverheadSummary {
            probes_seen_in_samples,
            hit_cost: self.pricing.hit_cost,
            calibration_note: self.calibration_note,
            calibration_reused: self.calibration_reused,
            budget_pct_of_core: self.plan.governor.map(|g| g.budget_pct),
            probes_pct_of_core: probes_cost_pct,
            cpu_profiler_pct_of_core: cpu.and_then(|c| c.summary.program_pct_of_core()),
            host_cpu_idle_pct: self.host_cpu_idle_pct,
            in_target: self
                .in_target
                .as_ref()
                .ok()
                .map(|f| crate::model::summary::InTargetSummary::new(f.clone(), probes_cost_pct)),
            in_target_note: self.in_target.err(),
            agent_cpu_pct_of_core: agent_cpu.as_secs_f64() / duration_s.max(1e-9) * 100.0,
            agent_max_rss_kb: own_max_rss_kb(),
            governor_errors: self.governor_errors,
            attach: self.session.map(|s| s.info.clone()),
            bpf_pct_of_core: self.pricing.live_cost.map(|c| {
                c.bpf_run_ns_since_start(run_stats) as f64 / 1e9 / duration_s.max(1e-9) * 100.0
            }),
            trap_pct_of_core: hits.trap_ns / 1e9 / duration_s.max(1e-9) * 100.0,
            switched_off_hits: hits.switched_off_hits,
            switched_off_pct_of_core: hits.switched_off_ns / 1e9 / duration_s.max(1e-9) * 100.0,
        }
    }
}

/// A summary of `plan`'s `probes` over `duration_s` with nothing else
/// measured yet: a recording adds its counters, drops, CPU profile and
/// overhead, a findings window (`serve`) the server's state. One
/// constructor, so the two say what tool, format and target they are of
/// alike; the caller evaluates the findings once it is filled.
pub(crate) fn bare_summary(
    plan: &RecordingPlan,
    probes: Vec<ProbeResult>,
    duration_s: f64,
    end_reason: EndReason,
) -> Summary {
    Summary {
        // Filled by the recorder, which holds the statements.
        who: None,
        format_version: crate::model::files::FORMAT_VERSION,
        tool: "innoprof".to_string(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        target: plan.target_info(),
        catalog: plan.catalog_file.clone(),
        started_unix_ms: 0,
        duration_s,
        end_reason,
        complete: end_reason == EndReason::Duration,
        probes,
        counters: Vec::new(),
        drops: Default::default(),
        cpu: None,
        overhead: Default::default(),
        timeseries: None,
        findings: Vec::new(),
        server_state: None,
        segments: Vec::new(),
    }
}

/// A probe the governor cut saw only part of the calls: its counts stay
/// what was seen (exact), and the estimate interpolates only over the gaps
/// between its on-windows, with a 95 % bound; nothing is projected after
/// the last window (nor before the first: every probe starts on).
fn describe_sampling(
    r: &mut ProbeResult,
    duty: &DutyReport,
    duration_s: f64,
    ratio: Option<(&crate::cost::estimate::AuxMarks, u64)>,
) {
    let mean_latency_ns = if r.calls > 0 {
        r.wait_ns_total as f64 / r.calls as f64
    } else {
        0.0
    };
    // Where an exact counter moves with the probe, the ratio estimate
    // (it also corrects the observer effect), else the windows' rates.
    // Switches are read within a few ms of the windows' ends.
    let estimate = ratio
        .and_then(|(marks, total)| {
            let per_window = marks.per_window(&duty.windows, 0.05)?;
            crate::cost::estimate::ratio_estimate(
                &duty.windows,
                &per_window,
                total,
                duration_s,
                duty.period_s,
                &marks.counter,
            )
        })
        .unwrap_or_else(|| {
            crate::cost::estimate::estimate(
                &duty.windows,
                duration_s,
                duty.period_s,
                mean_latency_ns,
            )
        });
    // Spread windows stand for up to a period past the last one: only a
    // probe whose windows stopped (a refused attach) is off at the end.
    let off_at_end_s = (!duty.on_at_end)
        .then(|| (duration_s - estimate.covered_s).max(0.0))
        .filter(|off| *off > 0.01);
    r.sampling = Some(Sampling {
        state: if off_at_end_s.is_none() {
            SamplingState::DutyCycled
        } else {
            SamplingState::OffAtEnd
        },
        attached_fraction: duty.attached_fraction,
        observed_calls: r.calls,
        calls_before_start: duty.calls_before_start,
        windows: duty.windows.clone(),
        estimate,
        off_at_end_s,
        projected_full_pct_of_core: duty.projected_full_cost * 100.0,
    });
    // The probe's one rate (the estimate's over the time it covers, or per
    // second watched where it is too wide), never over the whole recording.
    r.calls_per_sec = r.rate(duration_s).calls_per_s;
}

/// Names for the latch ids a probe read (`dict_sys_mutex`).
pub(crate) struct LatchNames<'a> {
    plan: Option<(
        &'a crate::plan::catalog::LatchSpec,
        &'a crate::plan::probeset::LatchPlan,
    )>,
}

impl<'a> LatchNames<'a> {
    pub(crate) fn new(planned: &'a PlannedProbe) -> Self {
        Self {
            plan: planned.spec.latch.as_ref().zip(planned.latch.as_ref()),
        }
    }

    /// The latch id's name, else the latch's creation site.
    pub(crate) fn of(&self, site: &Callsite, namer: &mut CallsiteNamer) -> Option<String> {
        if let Some(id) = site.latch_id() {
            return Some(match self.plan {
                Some((spec, plan)) => plan.layout.name_of(id, spec),
                None => format!("latch#{id}"),
            });
        }
        let (file, line) = site.created()?;
        Some(namer.created_label(file, line))
    }
}

/// Call sites of one probe, merged across its symbols, most wait first;
/// one row per (latch, site) where the probe names latches.
fn callsite_results(
    slots: &[(SlotId, &Slot)],
    sites: &[(SlotId, Callsite, u32, SiteVal)],
    namer: &mut CallsiteNamer,
    latches: &LatchNames,
) -> Vec<CallsiteResult> {
    let rows = sum_sites(slots, sites, |site| {
        if site.file == 0 {
            return None;
        }
        let label = namer.label(*site);
        Some((label, latches.of(site, namer)))
    });
    rows.into_iter()
        .map(|((label, latch), site, val)| CallsiteResult {
            site: label,
            file: namer.file(site.file),
            line: u64::from(site.line),
            latch,
            calls: val.all.calls,
            wait_ns_total: val.all.wait_ns_total,
            wait_ns_max: val.all.wait_ns_max,
            background_wait_ns: val.background_wait_ns,
        })
        .collect()
}

/// Per named latch: calls and wait, most wait first.
fn latch_results(
    slots: &[(SlotId, &Slot)],
    sites: &[(SlotId, Callsite, u32, SiteVal)],
    namer: &mut CallsiteNamer,
    latches: &LatchNames,
) -> Vec<LatchResult> {
    let rows = sum_sites(slots, sites, |site| latches.of(site, namer));
    rows.into_iter()
        .map(|(latch, _, val)| LatchResult {
            latch,
            calls: val.all.calls,
            wait_ns_total: val.all.wait_ns_total,
            wait_ns_max: val.all.wait_ns_max,
            background_wait_ns: val.background_wait_ns,
        })
        .collect()
}

/// A row's counts over every role, and the wait of background roles.
#[derive(Debug, Clone, Copy, Default)]
struct RowVal {
    all: SiteVal,
    background_wait_ns: u64,
}

/// The call-site counts of `slots` summed per row `row_of` names (None:
/// the site has no row), each row with the first site that named it;
/// most wait first, then most calls, then by row.
fn sum_sites<K: Ord + std::hash::Hash>(
    slots: &[(SlotId, &Slot)],
    sites: &[(SlotId, Callsite, u32, SiteVal)],
    mut row_of: impl FnMut(&Callsite) -> Option<K>,
) -> Vec<(K, Callsite, RowVal)> {
    let mut rows: HashMap<K, (Callsite, RowVal)> = HashMap::new();
    for (_, site, role, val) in sites
        .iter()
        .filter(|(slot, ..)| slots.iter().any(|(id, _)| id == slot))
    {
        let Some(row) = row_of(site) else {
            continue;
        };
        let r = &mut rows
            .entry(row)
            .or_insert_with(|| (*site, RowVal::default()))
            .1;
        r.all += val;
        if crate::plan::thread_role::role(*role).1 == RoleKind::Background {
            r.background_wait_ns += val.wait_ns_total;
        }
    }
    let mut out: Vec<(K, Callsite, RowVal)> = rows
        .into_iter()
        .map(|(k, (site, val))| (k, site, val))
        .collect();
    out.sort_by(|(ka, _, a), (kb, _, b)| {
        (b.all.wait_ns_total, b.all.calls, ka).cmp(&(a.all.wait_ns_total, a.all.calls, kb))
    });
    out
}

/// Who made the calls of `slots`: per thread role, from the exact
/// per-thread counts, each thread under the role the BPF side found at
/// its first hit. Calls the thread map could not hold (its `drops`) and
/// any other difference from the probe's totals are `unknown`'s, so the
/// roles always add up to `calls` and `wait`.
fn role_results(
    slots: &[(SlotId, &Slot)],
    snapshot: &crate::collect::MapsSnapshot,
    calls: u64,
    wait: u64,
) -> Vec<RoleResult> {
    #[derive(Default)]
    struct Row {
        threads: std::collections::HashSet<u32>,
        calls: u64,
        wait: u64,
        unlabelled: (u64, u64),
    }
    let mut by_role: HashMap<u32, Row> = HashMap::new();
    for (_, tid, v) in snapshot
        .threads
        .iter()
        .filter(|(slot, ..)| slots.iter().any(|(id, _)| id == slot))
    {
        let role = snapshot.thread_roles.get(tid).copied().unwrap_or(0);
        let e = by_role.entry(role).or_default();
        e.threads.insert(*tid);
        e.calls += v.calls;
        e.wait += v.wait_ns;
        if role != 0 {
            e.unlabelled.0 += v.unlabelled_calls;
            e.unlabelled.1 += v.unlabelled_wait_ns;
        }
    }
    let (seen_calls, seen_wait) = by_role
        .values()
        .fold((0, 0), |(c, w), e| (c + e.calls, w + e.wait));
    if calls > seen_calls || wait > seen_wait {
        let e = by_role.entry(0).or_default();
        e.calls += calls.saturating_sub(seen_calls);
        e.wait += wait.saturating_sub(seen_wait);
    }
    let mut out: Vec<RoleResult> = by_role
        .into_iter()
        .filter(|(_, e)| e.calls > 0)
        .map(|(id, e)| {
            let (role, kind) = crate::plan::thread_role::role(id);
            RoleResult {
                role: role.to_string(),
                kind,
                threads: e.threads.len() as u64,
                calls: e.calls,
                wait_ns_total: e.wait,
                unlabelled_calls: e.unlabelled.0,
                unlabelled_wait_ns: e.unlabelled.1,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (b.wait_ns_total, b.calls, &a.role).cmp(&(a.wait_ns_total, a.calls, &b.role))
    });
    out
}

/// The attached slots of probe `idx`, with their ids as the maps key them
/// (none without a session).
pub(crate) fn probe_slots(session: Option<&Session>, idx: usize) -> Vec<(SlotId, &Slot)> {
    session.map_or_else(Vec::new, |s| s.slots_of(idx).collect())
}

/// Folded stacks of one probe, weighted by wait time and by count: its
/// samples with the markers around them labelled ([`raw_probe_stacks`]),
/// then named ([`fold_raw`]); the raw stacks too, for the raw bundle file.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fold_stacks(
    probe: &str,
    stem: &str,
    measure: Measure,
    slots: &[(SlotId, &Slot)],
    samples: &[StackSample],
    symbolizer: &mut StackSymbolizer,
    namer: &mut CallsiteNamer,
    latches: &LatchNames,
) -> (
    StackStats,
    Vec<(String, String)>,
    ProbeStackSet,
    RawProbeStacks,
) {
    let raw = raw_probe_stacks(probe, stem, measure, slots, samples, namer, latches);
    let (stats, files, set) = fold_raw(&raw, symbolizer);
    (stats, files, set, raw)
}

/// One probe's samples as addresses, each with the labels of the markers
/// around it (its function, latch and call site, named on the host: they
/// come from the plan and the call-site namer, not from the stack).
pub(crate) fn raw_probe_stacks(
    probe: &str,
    stem: &str,
    measure: Measure,
    slots: &[(SlotId, &Slot)],
    samples: &[StackSample],
    namer: &mut CallsiteNamer,
    latches: &LatchNames,
) -> RawProbeStacks {
    let names: HashMap<SlotId, &str> = slots
        .iter()
        .map(|(id, s)| (*id, s.symbol.short_name.as_str()))
        .collect();
    let samples = samples
        .iter()
        .filter_map(|sample| {
            Some(RawProbeSample {
                function: names.get(&sample.slot)?.to_string(),
                role: sample.role,
                ips: sample.ips.clone(),
                unsampled: sample.unsampled,
                count: sample.count,
                wait_ns: sample.wait_ns,
                latch: latches.of(&sample.site, namer),
                callsite: (sample.site.file != 0).then(|| namer.label(sample.site)),
                statement: sample
                    .statement
                    .as_deref()
                    .map(crate::model::raw_stacks::statement_label),
            })
        })
        .collect();
    RawProbeStacks {
        probe: probe.to_string(),
        stem: stem.to_string(),
        measure,
        samples,
    }
}

/// A probe's raw stacks named and folded: its folded files (by wait and
/// by count), their statistics, and the stacks as named (for pprof). The
/// one naming of probe stacks: a recording's on the host, and a raw
/// bundle's later (`innoprof report`), which is why both fold alike.
pub fn fold_raw(
    raw: &RawProbeStacks,
    symbolizer: &mut StackSymbolizer,
) -> (StackStats, Vec<(String, String)>, ProbeStackSet) {
    let measure = raw.measure;
    let mut by_wait = FoldedStacks::default();
    let mut by_count = FoldedStacks::default();
    let mut stats = StackStats::default();
    let mut set = ProbeStackSet {
        probe: raw.probe.clone(),
        ..Default::default()
    };
    let marker = |name: String| Frame::new(name, "", FrameKind::Unknown);
    for sample in &raw.samples {
        let mut stack = NamedStack {
            frames: Vec::new(),
            thread: None,
        };
        let mut labels = Vec::new();
        // The thread's role at the root, as `perf report --sort comm` puts
        // the thread's name: a flame graph splits connections from
        // background threads at its first level.
        let (role, _) = crate::plan::thread_role::role(sample.role);
        if sample.role != 0 {
            stack.push_marker(marker(format!("[{role}]")));
        }
        labels.push(("role".to_string(), role.to_string()));
        if sample.unsampled {
            // The exact tables' hits of a cell none of whose hits took a
            // stack (`collect::scale_to_cells`): its labels, no frames.
            stats.unsampled_calls += sample.count;
            stack.push_marker(marker("[stack not sampled]".into()));
        } else if sample.ips.is_empty() {
            stats.lost_calls += sample.count;
            stack.push_marker(marker("[lost stack]".into()));
        } else {
            stats.distinct += 1;
            // Latency stacks are taken at the return address, in the
            // caller; count stacks at the probed instruction itself.
            stack.push_located(symbolizer.user_locations(&sample.ips, measure == Measure::Count));
        }
        if measure == Measure::Latency {
            stack.push_marker(Frame::new(sample.function.as_str(), "", FrameKind::User));
        }
        if let Some(latch) = &sample.latch {
            stack.push_marker(marker(format!("[{latch}]")));
            labels.push(("latch".to_string(), latch.clone()));
        }
        if let Some(site) = &sample.callsite {
            stack.push_marker(marker(format!("[{site}]")));
            labels.push(("callsite".to_string(), site.clone()));
        }
        // A label, not a frame: folded files stay one line per stack.
        if let Some(fingerprint) = &sample.statement {
            labels.push(("statement".to_string(), fingerprint.clone()));
        }
        let frames = stack.folded_names();
        by_count.add(&frames, sample.count);
        by_wait.add(&frames, sample.wait_ns);
        set.stacks.push((stack, sample.count, sample.wait_ns));
        set.labels.push(labels);
    }
    let stem = raw.stem.as_str();
    let mut files = Vec::new();
    if !by_count.is_empty() {
        let name = instance(FOLDED, &format!("{stem}.count"));
        files.push((name.clone(), by_count.render()));
        stats.folded_by_count = Some(name);
    }
    if measure == Measure::Latency && !by_wait.is_empty() {
        let name = instance(FOLDED, stem);
        files.push((name.clone(), by_wait.render()));
        stats.folded_by_wait = Some(name);
    }
    (stats, files, set)
}
