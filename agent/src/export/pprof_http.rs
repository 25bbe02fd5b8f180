//! On-demand on-CPU profiles for continuous profilers (Parca, Grafana
//! Pyroscope, Alloy's `pyroscope.scrape`): Go's `/debug/pprof/profile?
//! seconds=N` contract, a gzipped pprof of the target's on-CPU stacks over
//! the next N seconds. `serve` samples no CPU between requests: each request
//! starts the profiler (the same BPF sampler as `record`, 99 Hz per CPU,
//! filtered to the target), waits, stops it and names the stacks with a
//! symbolizer dropped afterwards (its parsed DWARF would otherwise stay in
//! serve's resident set).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cpu::{CpuError, CpuOptions, CpuProfiler};
use crate::record::RecordingPlan;
use crate::report::pprof;
use crate::symbolize::ProcessMaps;

/// Go's default when `seconds` is absent.
pub const DEFAULT_SECONDS: u64 = 30;
/// The longest profile one request may hold the sampler for.
pub const MAX_SECONDS: u64 = 300;

#[derive(Debug, thiserror::Error)]
pub enum ProfileRequestError {
    #[error("seconds={0}: expected a whole number of seconds from 1 to {MAX_SECONDS}")]
    Seconds(String),
    #[error("pid={0}: expected a process id")]
    Pid(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot sample the target's CPU")]
    Cpu(#[source] CpuError),
    #[error("cannot read the target's memory map to name its stacks")]
    Maps(#[source] std::io::Error),
}

/// Every value of `key` in a request's query string (`seconds=10&pid=42`),
/// percent-decoded.
fn query_values(query: Option<&str>, key: &str) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// The first value of `key`.
fn query_value(query: Option<&str>, key: &str) -> Option<String> {
    query_values(query, key).into_iter().next()
}

/// `probe`: the probes a waits profile is asked for, repeated or comma
/// separated (`probe=a&probe=b`, `probe=a,b`); empty: every probe.
pub fn requested_probes(query: Option<&str>) -> Vec<String> {
    query_values(query, "probe")
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// `pid`, which chooses among several watched servers (`serve --all`).
pub fn requested_pid(query: Option<&str>) -> Result<Option<u32>, ProfileRequestError> {
    query_value(query, "pid")
        .as_deref()
        .map(|v| {
            v.parse::<u32>()
                .map_err(|_| ProfileRequestError::Pid(v.chars().take(32).collect()))
        })
        .transpose()
}

/// `seconds` from a request's query string (`seconds=10&…`).
pub fn requested_seconds(query: Option<&str>) -> Result<u64, ProfileRequestError> {
    match query_value(query, "seconds").as_deref() {
        None => Ok(DEFAULT_SECONDS),
        Some(v) => match v.parse::<u64>() {
            Ok(s) if (1..=MAX_SECONDS).contains(&s) => Ok(s),
            _ => Err(ProfileRequestError::Seconds(v.chars().take(32).collect())),
        },
    }
}

/// A profile being taken: started now, ended by [`Self::finish`].
pub struct PendingProfile {
    profiler: CpuProfiler,
    pid: u32,
    started_unix_ms: u64,
}

impl PendingProfile {
    pub fn start(pid: u32) -> Result<Self, ProfileError> {
        let profiler =
            CpuProfiler::start(pid, &CpuOptions::default()).map_err(ProfileError::Cpu)?;
        Ok(Self {
            profiler,
            pid,
            started_unix_ms: now_unix_ms(),
        })
    }

    /// Stops sampling and encodes the stacks seen since the start as a
    /// gzipped pprof (`samples/count`, `cpu/nanoseconds`), named as `record`
    /// names them (frames from `plan`'s binary and debug file).
    pub fn finish(self, plan: &RecordingPlan) -> Result<Vec<u8>, ProfileError> {
        let freq = self.profiler.options().frequency_hz;
        let raw = self.profiler.stop().map_err(ProfileError::Cpu)?;
        let maps = ProcessMaps::read(self.pid).map_err(ProfileError::Maps)?;
        let mut symbolizer = plan.stack_symbolizer(maps);
        let named = raw.symbolize(&mut symbolizer);
        let duration = Duration::from_secs_f64(raw.duration_s);
        let profile = pprof::cpu_profile(
            &named.oncpu_stacks,
            &named.oncpu_statements,
            freq,
            self.started_unix_ms,
            duration.as_nanos() as i64,
        );
        Ok(pprof::encode_gz(&profile))
    }
}

/// What a waits profile's numbers are, said in its comments.
fn waits_note(seconds: f64, stack_interval: Duration) -> String {
    format!(
        "serve: the probes' stacks over {seconds:.1} s, taken only while this profile was \
         asked for; at most one stack per {} us per probe and CPU, carrying the calls since, \
         so each probe's calls and wait are exact and their split across stacks is a sample. \
         A probe the governor detached part of the time shows the calls seen while attached \
         (see innoprof_probe_attached_seconds_total), unscaled",
        stack_interval.as_micros()
    )
}

/// The stacks a waits window saw (see `Recorder::close_stack_window`),
/// gzipped pprof (`calls/count`, `wait/nanoseconds`, label `probe`).
pub fn waits_gz(
    sets: &[crate::model::named_stack::ProbeStackSet],
    started_unix_ms: u64,
    elapsed: Duration,
    stack_interval: Duration,
) -> Vec<u8> {
    let note = waits_note(elapsed.as_secs_f64(), stack_interval);
    let probes: Vec<pprof::ProbeStacks> = sets
        .iter()
        .enumerate()
        .map(|(i, set)| pprof::ProbeStacks {
            set,
            note: (i == 0).then(|| note.clone()),
        })
        .collect();
    let profile = pprof::waits_profile(&probes, started_unix_ms, elapsed.as_nanos() as i64);
    pprof::encode_gz(&profile)
}

/// Milliseconds since the epoch, now.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_follow_gos_contract_within_bounds() {
        assert_eq!(requested_seconds(None).unwrap(), DEFAULT_SECONDS);
        assert_eq!(requested_seconds(Some("debug=1")).unwrap(), DEFAULT_SECONDS);
        assert_eq!(requested_seconds(Some("seconds=5")).unwrap(), 5);
        assert_eq!(requested_seconds(Some("a=b&seconds=12")).unwrap(), 12);
        for bad in [
            "seconds=0",
            "seconds=301",
            "seconds=-1",
            "seconds=1.5",
            "seconds=",
        ] {
            assert!(requested_seconds(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(requested_pid(Some("seconds=5")).unwrap(), None);
        assert_eq!(requested_pid(Some("seconds=5&pid=42")).unwrap(), Some(42));
        assert!(requested_pid(Some("pid=x")).is_err());
        assert!(requested_probes(Some("seconds=5")).is_empty());
        assert_eq!(
            requested_probes(Some(
                "probe=a,b&seconds=1&probe=PolicyMutex%3C%2A%3E%3A%3Aenter"
            )),
            ["a", "b", "PolicyMutex<*>::enter"]
        );
    }
}
