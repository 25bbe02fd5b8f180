//! The recording's data model, serialised as `summary.json`.

use serde::{Deserialize, Serialize};

use super::top_symbols::TopSymbols;
use crate::bpf::histogram::Bucket;
use crate::collect::Drops;
use crate::cost::hit_cost::HitCost;
use crate::plan::catalog::{CostClass, Measure};
pub use crate::plan::memcounters::{CounterResult, CounterStatus};
use crate::plan::server::ServerInfo;
use crate::resolve::{EntryInsn, SkippedSymbol, SymbolTable};
use crate::target::placement::Placement;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// The bundle's output contract version (docs/OUTPUTS.md); 0 in
    /// recordings made before summary.json carried one.
    #[serde(default)]
    pub format_version: u32,
    pub tool: String,
    pub tool_version: String,
    pub target: TargetInfo,
    /// Catalog file the probes came from, if any.
    pub catalog: Option<String>,
    pub started_unix_ms: u128,
    pub duration_s: f64,
    pub end_reason: EndReason,
    /// False when the recording ended early (interrupted, target exited).
    pub complete: bool,
    pub probes: Vec<ProbeResult>,
    /// Counters InnoDB keeps in memory, read at start and end instead of
    /// probed (catalog entries with `measure = "counter"`): exact counts at
    /// no cost per event. Absent in recordings made before they existed.
    #[serde(default)]
    pub counters: Vec<CounterResult>,
    pub drops: Drops,
    /// CPU profile (on-CPU samples, off-CPU time); absent with `--no-cpu`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSummary>,
    /// Absent in recordings made before the governor existed.
    #[serde(default)]
    pub overhead: OverheadSummary,
    /// The interval series written beside, with `--interval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeseries: Option<TimeseriesNote>,
    /// What is wrong, most severe first (docs/FINDINGS.md); empty when no
    /// rule fired, and in recordings made before findings existed.
    #[serde(default)]
    pub findings: Vec<crate::model::finding::Finding>,
    /// The server's own state at start and end, read over SQL
    /// (docs/FINDINGS.md); absent without a login or with
    /// `--no-server-state`, and in recordings made before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_state: Option<crate::model::server_state::ServerState>,
    /// The statements and client connections behind the probes' hits;
    /// absent where no probe ran, and in recordings made before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub who: Option<crate::model::who::Who>,
    /// With `record --follow`: one per server process watched, oldest
    /// first; the time between two is a gap nothing watched (the server
    /// restarting). Counts are of the segments' seconds only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<Segment>,
}

/// A stretch of a `record --follow` recording watching one server process.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Segment {
    pub pid: u32,
    /// Seconds from the recording's start.
    pub start_s: f64,
    pub duration_s: f64,
    pub end_reason: EndReason,
}

impl Summary {
    /// Seconds watched: the segments' (a `--follow` recording's gaps left
    /// out), else the whole recording.
    pub fn watched_s(&self) -> f64 {
        if self.segments.is_empty() {
            self.duration_s
        } else {
            self.segments.iter().map(|g| g.duration_s).sum()
        }
    }

    /// The gaps between segments: (start, end) seconds from the start.
    pub fn gaps(&self) -> Vec<(f64, f64)> {
        self.segments
            .windows(2)
            .map(|w| (w[0].start_s + w[0].duration_s, w[1].start_s))
            .collect()
    }
}

/// What the recording cost, as measured and as projected from probe hits.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OverheadSummary {
    /// Per-call cost of a probe hit on this host, calibrated at start.
    pub hit_cost: HitCost,
    /// Why the hit cost is a fallback (calibration failed), if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration_note: Option<String>,
    /// When the hit cost is this boot's earlier measurement (see
    /// `hitcost_cache`), how old and where from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_reused: Option<String>,
    /// The governor's budget (`--max-overhead`); None when it was off.
    pub budget_pct_of_core: Option<f64>,
    /// Server CPU spent in probe hits: per probe, its hits (calls, and
    /// hits while switched off before the kernel detached it) × (the
    /// calibrated trap + its programs' average run time in the target).
    pub probes_pct_of_core: f64,
    /// Of that, the BPF programs' run time as the kernel measured it in the
    /// target (all probes, hits of switched-off slots included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_pct_of_core: Option<f64>,
    /// Of that, the traps: hits × calibrated trap cost.
    #[serde(default)]
    pub trap_pct_of_core: f64,
    /// Hits on probes switched off by the governor before the kernel
    /// detached them (all probes): not calls, but counted in the cost.
    #[serde(default)]
    pub switched_off_hits: u64,
    /// Of `probes_pct_of_core`, those hits: the kernel's detach lag, which
    /// the governor pays for but cannot shorten (an uprobe's removal takes
    /// the target's mmap lock; under load it can take ~1 s).
    #[serde(default)]
    pub switched_off_pct_of_core: f64,
    /// What probe hits cost the server as the CPU samples saw it (None
    /// without CPU sampling): a measurement beside `probes_pct_of_core`,
    /// which is a model (hits × per-hit cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_seen_in_samples: Option<SampledCost>,
    /// What the CPU profiler's BPF programs (the sampler, and the switch
    /// tracer with `--offcpu`) cost, kernel-measured, in % of one core
    /// (see `cpu.oncpu.program`): outside the governor's budget, which is
    /// for probe hits. None without CPU profiling or run statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_profiler_pct_of_core: Option<f64>,
    /// The host's idle share of all CPUs' time over the recording, in %
    /// (`/proc/stat`). Below 5 % (`SATURATED_BELOW_PCT`) the
    /// host was saturated and `probes_pct_of_core` is a lower bound: the
    /// server paid more, in costs no per-hit model sees. None where
    /// `/proc/stat` could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu_idle_pct: Option<f64>,
    /// What the probes cost the server measured in it: its CPU per row
    /// read at the governor's looks, against what the model priced the
    /// hits at between them (see `in_target`). None where not measured;
    /// `in_target_note` says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_target: Option<InTargetSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_target_note: Option<String>,
    /// innoprof's own CPU (user + system) over the recording.
    pub agent_cpu_pct_of_core: f64,
    pub agent_max_rss_kb: u64,
    /// Re-attaches the kernel refused while duty-cycling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub governor_errors: Vec<String>,
    /// How the uprobes were attached (links, mode) and what attaching and
    /// detaching took; None with no uprobes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<crate::attach::AttachInfo>,
}

/// What one of innoprof's own BPF programs cost, as the kernel measured it
/// (`BPF_ENABLE_STATS`: a clock read around each run). Measured, not
/// modelled; paid by whatever thread the CPU was running when the program
/// ran (the CPU sampler runs at every tick of every CPU, and returns at
/// once outside the target). Not included: the timer interrupt or
/// tracepoint that calls the program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProgramCost {
    pub runs: u64,
    pub run_ns: u64,
    /// run_ns / runs (0 without runs).
    pub avg_ns: f64,
    /// run_ns as % of one core over the recording.
    pub pct_of_core: f64,
}

impl ProgramCost {
    pub fn new(runs: crate::bpf::run_stats::ProgramRuns, duration_s: f64) -> Self {
        Self {
            runs: runs.runs,
            run_ns: runs.run_ns,
            avg_ns: if runs.runs > 0 {
                runs.run_ns as f64 / runs.runs as f64
            } else {
                0.0
            },
            pct_of_core: if duration_s > 0.0 {
                runs.run_ns as f64 / 1e9 / duration_s * 100.0
            } else {
                0.0
            },
        }
    }

    /// Two segments' costs as one over `duration_s`, the time both watched
    /// (`record --follow`): runs and time add. One missing is left out.
    pub fn merged(a: Option<Self>, b: Option<Self>, duration_s: f64) -> Option<Self> {
        let runs = [a, b]
            .into_iter()
            .flatten()
            .map(|c| crate::bpf::run_stats::ProgramRuns {
                runs: c.runs,
                run_ns: c.run_ns,
            })
            .reduce(|x, y| crate::bpf::run_stats::ProgramRuns {
                runs: x.runs + y.runs,
                run_ns: x.run_ns + y.run_ns,
            })?;
        Some(Self::new(runs, duration_s))
    }
}

/// CPU time seen by sampling: `samples` of a `frequency_hz` cpu-clock event,
/// each 1/frequency of a CPU second, as % of one core over the recording,
/// with a 95 % interval for the count (Poisson, square-root approximation:
/// (√k ∓ 0.98)², the upper end from k + 1).
///
/// For probe hits it counts the kernel's part of a hit: a sample that lands
/// in the few user-mode instructions of a hit (the out-of-line step, the
/// return trampoline) shows no kernel frame and is not counted; nor is the
/// time of a trap taken with interrupts off, which the timer sees only at
/// the point they are back on (usually still inside the handling).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SampledCost {
    pub samples: u64,
    pub frequency_hz: u64,
    pub pct_of_core: f64,
    pub pct_of_core_lo: f64,
    pub pct_of_core_hi: f64,
}

impl SampledCost {
    pub fn new(samples: u64, frequency_hz: u64, duration_s: f64) -> Option<Self> {
        if frequency_hz == 0 || duration_s <= 0.0 {
            return None;
        }
        let pct = |k: f64| k / frequency_hz as f64 / duration_s * 100.0;
        let k = samples as f64;
        let lo = (k.sqrt() - 0.98).max(0.0).powi(2);
        let hi = ((k + 1.0).sqrt() + 0.98).powi(2);
        Some(Self {
            samples,
            frequency_hz,
            pct_of_core: pct(k),
            pct_of_core_lo: pct(lo),
            pct_of_core_hi: pct(hi),
        })
    }
}

/// A probe the governor detached part of the time. Its `calls` and wait
/// totals are what it saw (exact); `estimate` adds only the gaps between
/// its on-windows, never time after the last one.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Sampling {
    pub state: SamplingState,
    /// Fraction of the recording it was on.
    pub attached_fraction: f64,
    /// Calls seen (= `calls`).
    pub observed_calls: u64,
    /// Calls seen while the session was still attaching, before the
    /// governor's clock started (in `calls`, in no window).
    pub calls_before_start: u64,
    /// When it was on and what it saw there.
    pub windows: Vec<crate::cost::estimate::OnWindow>,
    /// Seen + interpolated between windows, with its 95 % bound.
    pub estimate: crate::cost::estimate::CallEstimate,
    /// Off for this long at the end of the recording: not projected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_at_end_s: Option<f64>,
    /// What it would have cost fully on with every stack, in % of one core.
    pub projected_full_pct_of_core: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SamplingState {
    /// Cut, and on again at the end.
    DutyCycled,
    /// Off from the end of its last window to the end of the recording.
    OffAtEnd,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeseriesNote {
    pub interval_ms: u64,
    pub intervals: usize,
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetInfo {
    pub pid: u32,
    pub comm: String,
    /// Path as the target sees it.
    pub binary: String,
    pub build_id: Option<String>,
    pub server: ServerInfo,
    pub server_version: Option<String>,
    pub position_independent: bool,
    pub has_symtab: bool,
    pub has_debug_info: bool,
    /// Separate debug info used for symbols and DWARF, if any.
    pub debug_file: Option<String>,
    /// The cgroup and container it ran in, and its namespaces (absent in
    /// bundles written before it was recorded).
    #[serde(default)]
    pub placement: Placement,
    /// Where that debug file came from (a path, innoprof's kept copies,
    /// elfutils' cache, a debuginfod server), or why there is none;
    /// empty in bundles written before it existed.
    #[serde(default)]
    pub debug_origin: crate::resolve::debuginfo::DebugOrigin,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Duration,
    Interrupted,
    TargetExited,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    Attached,
    Unresolved,
    AttachFailed,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SymbolInfo {
    pub name: String,
    pub raw: String,
    /// Virtual address in the binary, hex.
    pub address: String,
    pub file_offset: String,
    pub table: SymbolTable,
    pub clone: Option<String>,
    pub entry: EntryInsn,
    /// Set when the probe sits past the first instruction (the kernel
    /// refused it): `moved past `lock cmpxchg` (+5 bytes): …`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<String>,
    pub calls: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeResult {
    pub name: String,
    pub description: String,
    pub measure: Measure,
    pub cost: CostClass,
    pub status: ProbeStatus,
    /// Why it is not attached, or which symbols the kernel refused.
    pub reason: Option<String>,
    pub symbols: Vec<SymbolInfo>,
    pub skipped: Vec<SkippedSymbol>,
    /// Calls seen, exactly; a probe the governor cut has its estimate
    /// (with a bound) in `sampling.estimate`.
    pub calls: u64,
    pub calls_per_sec: f64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    pub wait_ns_avg: Option<u64>,
    /// Upper bounds of the log2 buckets holding the quantile.
    pub wait_ns_p50: Option<u64>,
    pub wait_ns_p99: Option<u64>,
    pub histogram: Vec<Bucket>,
    /// Per caller `file:line`, for probes whose function takes them.
    pub callsites: Vec<CallsiteResult>,
    /// Per latch (`dict_sys_mutex`), for probes that name latches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latches: Vec<LatchResult>,
    /// Why latches could not be named, when the probe asks for names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latch_note: Option<String>,
    /// Who made the calls: per thread role (a client connection or a
    /// background role), most wait first, then most calls. Every call is
    /// under one role (`unknown` where none was found); empty in a bundle
    /// older than roles, or where no call was seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleResult>,
    /// Set when the overhead governor detached the probe part of the time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// Server CPU its hits cost (observed hits × calibrated cost), % of one core.
    #[serde(default)]
    pub overhead_pct_of_core: f64,
    pub stacks: StackStats,
}

impl ProbeResult {
    /// Calls of background threads (purge, page cleaner, ...): the
    /// server's own work, never the workload's.
    pub fn background_calls(&self) -> u64 {
        self.roles
            .iter()
            .filter(|r| r.kind == RoleKind::Background)
            .map(|r| r.calls)
            .sum()
    }

    /// Fraction of the recording the probe was attached (1.0: always).
    pub fn attached_fraction(&self) -> f64 {
        self.sampling.as_ref().map_or(1.0, |s| s.attached_fraction)
    }

    /// Its one rate (see [`ProbeRate::of`]) over a recording of
    /// `duration_s`.
    pub fn rate(&self, duration_s: f64) -> ProbeRate {
        ProbeRate::of(
            self.calls,
            self.wait_ns_total,
            duration_s,
            self.sampling.as_ref(),
        )
    }
}

/// How a probe's rate was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateBasis {
    /// On throughout: its counts over the recording, exact.
    Exact,
    /// Cut by the governor, its estimate quotable: the estimate over the
    /// seconds it covers, with its bound.
    Estimate,
    /// Cut, its estimate too wide to quote (or none): what was seen per
    /// second watched, with the windows' spread as its bound.
    Watched,
}

/// A probe's calls and wait per second: the one rate every surface shows
/// (summary.json's `calls_per_sec`, summary.txt, report.html, the
/// findings, `top DIR`, `diff`), so a probe never reads as three rates.
/// Prometheus exports the counters and their watched seconds instead,
/// whose quotient (alerts.yml's `rate5m_watched`) is the same measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeRate {
    pub calls_per_s: f64,
    /// 95 % half-width of `calls_per_s`; 0 for an exact rate.
    pub calls_bound_per_s: f64,
    /// Thread-nanoseconds waited per second (1e9: one thread waiting all
    /// the time).
    pub wait_ns_per_s: f64,
    pub basis: RateBasis,
}

impl ProbeRate {
    /// From a probe's counts and its sampling: exact over the recording
    /// when it was on throughout; the estimate's rate over the seconds it
    /// covers where that estimate is quotable; else per second watched.
    /// A total no surface may quote (too wide) is never divided into a
    /// rate: dividing what a cut probe saw by the whole recording read
    /// sql.commit at 466.6/s where the server committed 1,391.7/s.
    pub fn of(calls: u64, wait_ns: u64, duration_s: f64, sampling: Option<&Sampling>) -> Self {
        let per = |n: f64, secs: f64| if secs > 0.0 { n / secs } else { 0.0 };
        let Some(smp) = sampling else {
            return Self {
                calls_per_s: per(calls as f64, duration_s),
                calls_bound_per_s: 0.0,
                wait_ns_per_s: per(wait_ns as f64, duration_s),
                basis: RateBasis::Exact,
            };
        };
        let e = &smp.estimate;
        if !crate::cost::estimate::too_wide(e) && e.covered_s > 0.0 {
            return Self {
                calls_per_s: e.calls / e.covered_s,
                calls_bound_per_s: e.calls_bound / e.covered_s,
                wait_ns_per_s: e.wait_ns / e.covered_s,
                basis: RateBasis::Estimate,
            };
        }
        let (calls_per_s, calls_bound_per_s, wait_ns_per_s) = if smp.windows.is_empty() {
            // No window kept (an older bundle): the attached share of the
            // recording is the time watched.
            let watched = duration_s * smp.attached_fraction;
            (
                per(calls as f64, watched),
                0.0,
                per(wait_ns as f64, watched),
            )
        } else {
            let (rate, half) = crate::cost::estimate::watched_rate(&smp.windows);
            let watched: f64 = smp
                .windows
                .iter()
                .map(|w| (w.end_s - w.start_s).max(0.0))
                .sum();
            let waited: f64 = smp.windows.iter().map(|w| w.wait_ns as f64).sum();
            (rate, half, per(waited, watched))
        };
        Self {
            calls_per_s,
            calls_bound_per_s,
            wait_ns_per_s,
            basis: RateBasis::Watched,
        }
    }
}

pub use crate::plan::thread_role::RoleKind;

/// One thread role's share of a probe's calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoleResult {
    /// `connection`, `purge worker`, `page cleaner`, ..., `unknown`.
    pub role: String,
    pub kind: RoleKind,
    /// Distinct threads of this role that made calls.
    pub threads: u64,
    pub calls: u64,
    pub wait_ns_total: u64,
    /// Of them, the hits its threads made before their role was known:
    /// the call-site table's background column, the stacks and the pprof
    /// `role` label have them under `unknown` (hits of threads that
    /// settled on several roles cannot be told apart there). 0 where the
    /// stacks agree with this row.
    #[serde(default)]
    pub unlabelled_calls: u64,
    #[serde(default)]
    pub unlabelled_wait_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallsiteResult {
    /// `btr0cur.cc:304`
    pub site: String,
    /// The full `__FILE__` as compiled, when it could be read.
    pub file: Option<String>,
    pub line: u64,
    /// The latch this call took, where the probe names latches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latch: Option<String>,
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    /// Of `wait_ns_total`, the wait of background threads.
    #[serde(default)]
    pub background_wait_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatchResult {
    /// `dict_sys_mutex`
    pub latch: String,
    pub calls: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
    /// Of `wait_ns_total`, the wait of background threads (purge, page
    /// cleaner, ...): not the workload's contention.
    #[serde(default)]
    pub background_wait_ns: u64,
}

impl LatchResult {
    /// The wait the workload feels on this latch.
    pub fn contention_wait_ns(&self) -> u64 {
        self.wait_ns_total.saturating_sub(self.background_wait_ns)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StackStats {
    pub distinct: usize,
    /// Calls whose stack could not be captured (map full, error or busy).
    pub lost_calls: u64,
    /// Calls of (call site, latch, role) cells none of whose hits took a
    /// stack: in the folded files as `[stack not sampled]` under their
    /// labels, so the stacks split as the exact tables do.
    #[serde(default)]
    pub unsampled_calls: u64,
    pub folded_by_wait: Option<String>,
    pub folded_by_count: Option<String>,
    /// The sparsest stack sampling the governor used: 1 is every hit past
    /// `interval_ns`; N > 1: at times one such hit in N.
    #[serde(default = "one")]
    pub sampled_every_max: u32,
    /// τ of the stack sampling, ns (0: every hit's stack): past each
    /// CPU's first 5 hits of every 100 ms (always taken), a timed hit
    /// waiting at least this long always took its stack, a shorter one
    /// with probability at least wait/τ, a count-only one with a
    /// probability set by the hits before it. The stacks are scaled to
    /// the probe's exact calls and wait, each (call site, latch, role)
    /// cell's to its exact share: their split by those is the exact
    /// tables', within a cell an unbiased sample.
    #[serde(default)]
    pub interval_ns: u64,
}

fn one() -> u32 {
    1
}

impl Default for StackStats {
    fn default() -> Self {
        Self {
            distinct: 0,
            lost_calls: 0,
            unsampled_calls: 0,
            folded_by_wait: None,
            folded_by_count: None,
            sampled_every_max: 1,
            interval_ns: 0,
        }
    }
}

/// The CPU profile's part of `summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuSummary {
    pub oncpu: OnCpuSummary,
    /// Present when off-CPU time was recorded (`--offcpu`).
    pub offcpu: Option<OffCpuSummary>,
    /// CFI rows the user-stack walker had, per mapped file; a file
    /// without rows is walked by frame pointers only.
    pub unwind: crate::cpu::UnwindInfo,
}

impl CpuSummary {
    /// What the profiler's BPF programs cost, kernel-measured, in % of one
    /// core (None: not measured).
    pub fn program_pct_of_core(&self) -> Option<f64> {
        let on = self.oncpu.program?.pct_of_core;
        let off = match &self.offcpu {
            Some(off) => off.program?.pct_of_core,
            None => 0.0,
        };
        Some(on + off)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnCpuSummary {
    /// The perf event sampled: `cpu-clock` (software).
    pub event: String,
    pub frequency_hz: u64,
    /// CPUs sampled (one event each).
    pub cpus: usize,
    /// Samples that landed in the target, all counted in `folded`.
    pub samples: u64,
    /// Timer ticks seen on all CPUs, any process: with `ticks_expected`
    /// (cpus × frequency × duration) it shows ticks the kernel skipped.
    pub ticks_seen: u64,
    pub ticks_expected: u64,
    /// Share of the sampled CPUs' time the target was running, in %.
    pub target_cpu_pct: f64,
    pub lost: OnCpuLost,
    pub distinct_stacks: usize,
    /// Samples whose kernel stack is in the kernel's uprobe handling (the
    /// breakpoint trap, the probe programs, the return trampoline): what
    /// innoprof's probes cost the target, seen from the target's side. See
    /// `overhead.probes_seen_in_samples`.
    #[serde(default)]
    pub probe_handling_samples: u64,
    /// The sampling program's runs (one per tick, any process) and their
    /// kernel-measured time; None where run statistics were refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramCost>,
    /// `oncpu.folded`: weighted by samples.
    pub folded: Option<String>,
    pub flamegraph: Option<String>,
    pub top: TopSymbols,
}

/// Samples whose stack is incomplete (still counted, under an
/// `[unwind stopped]`, `[truncated]` or `[kernel stack lost]` frame) or
/// that could not be counted at all (`map_full`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnCpuLost {
    /// The user stack walk ended before the thread's first frame
    /// (unreadable stack memory, or CFI the walker does not implement).
    pub unwind_stopped: u64,
    pub kernel_stack: u64,
    /// User stack deeper than the 127 frames kept: root frames cut.
    pub truncated: u64,
    /// Not counted: the stack map was full.
    pub map_full: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OffCpuSummary {
    /// Blocks shorter than this are counted in `below_min` only.
    pub min_block_ns: u64,
    /// Unit of the weights in `offcpu.folded`: microseconds blocked.
    pub weight_unit: String,
    /// Blocks at or above the threshold (ended during the recording).
    pub blocks: u64,
    pub blocked_ns_total: u64,
    /// Threads blocked when the recording stopped, charged up to the stop
    /// (also in `folded`).
    pub still_blocked_threads: u64,
    pub still_blocked_ns: u64,
    pub below_min_blocks: u64,
    pub below_min_ns: u64,
    /// Switches away while runnable (preempted): waiting for a CPU, not
    /// blocked, so not in the off-CPU profile.
    pub preempted_switches: u64,
    /// The switch program's runs (every context switch on the host) and
    /// their kernel-measured time; None where run statistics were refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramCost>,
    pub lost: OffCpuLost,
    pub distinct_stacks: usize,
    pub folded: Option<String>,
    pub flamegraph: Option<String>,
    /// Self is the innermost frame of the target's executable (the server
    /// code that waits), else the innermost user frame.
    pub top: TopSymbols,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OffCpuLost {
    /// Counted under an `[unwind stopped]` root frame.
    pub unwind_stopped: u64,
    /// Not counted: the stack map was full.
    pub map_full: u64,
    /// Not counted: the per-thread start map was full.
    pub start_map_full: u64,
}

#[cfg(test)]
mod sampled_cost_tests {
    use super::{ProgramCost, SampledCost};
    use crate::bpf::run_stats::ProgramRuns;

    #[test]
    fn a_programs_cost_is_its_measured_time_over_the_recording() {
        let c = ProgramCost::new(
            ProgramRuns {
                runs: 1_000,
                run_ns: 20_000_000,
            },
            4.0,
        );
        // 20 ms of 4 s: 0.5 % of a core, 20 µs a run.
        assert_eq!((c.avg_ns, c.pct_of_core), (20_000.0, 0.5));
        assert_eq!(ProgramCost::new(ProgramRuns::default(), 4.0).avg_ns, 0.0);
        assert_eq!(
            ProgramCost::new(ProgramRuns::default(), 0.0).pct_of_core,
            0.0
        );
        // Two segments of 4 s: runs and time add, over the 8 s watched;
        // a segment not measured leaves the other's time over all of it.
        let two = ProgramCost::merged(Some(c), Some(c), 8.0).unwrap();
        assert_eq!(
            (two.runs, two.run_ns, two.pct_of_core),
            (2_000, 40_000_000, 0.5)
        );
        let one = ProgramCost::merged(None, Some(c), 8.0).unwrap();
        assert_eq!((one.runs, one.pct_of_core), (1_000, 0.25));
        assert_eq!(ProgramCost::merged(None, None, 8.0), None);
    }

    #[test]
    fn a_sampled_share_is_its_samples_time_with_a_poisson_interval() {
        // 990 samples at 99 Hz over 20 s: 10 CPU seconds, 50 % of a core.
        let s = SampledCost::new(990, 99, 20.0).unwrap();
        assert!((s.pct_of_core - 50.0).abs() < 1e-9);
        // ±1.96 sd of a Poisson count (sd √990 ≈ 31.5 samples ≈ 1.6 %).
        assert!((s.pct_of_core_lo - 46.93).abs() < 0.01, "{s:?}");
        assert!((s.pct_of_core_hi - 53.22).abs() < 0.01, "{s:?}");
        // None seen: zero, with room above for what the samples missed
        // ((1 + 0.98)² = 3.92 samples; the exact 95 % bound is 3.69).
        let z = SampledCost::new(0, 99, 10.0).unwrap();
        assert_eq!((z.pct_of_core, z.pct_of_core_lo), (0.0, 0.0));
        assert!((z.pct_of_core_hi - 3.9204 / 99.0 / 10.0 * 100.0).abs() < 1e-9);
        assert_eq!(SampledCost::new(5, 0, 10.0), None);
        assert_eq!(SampledCost::new(5, 99, 0.0), None);
    }
}

/// The cost the probes had in the server, measured there (see
/// docs/OVERHEAD.md): the fitted factor times `probes_pct_of_core`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InTargetSummary {
    pub pct_of_core: f64,
    pub pct_of_core_low: f64,
    pub pct_of_core_high: f64,
    #[serde(flatten)]
    pub fit: crate::cost::in_target::InTargetFit,
}

impl InTargetSummary {
    pub fn new(fit: crate::cost::in_target::InTargetFit, probes_pct_of_core: f64) -> Self {
        Self {
            pct_of_core: fit.factor * probes_pct_of_core,
            pct_of_core_low: fit.factor_low * probes_pct_of_core,
            pct_of_core_high: fit.factor_high * probes_pct_of_core,
            fit,
        }
    }
}
