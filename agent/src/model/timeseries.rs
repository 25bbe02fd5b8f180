//! The interval series as data (timeseries.json and .csv); built from
//! live readings by [`crate::live::timeseries`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::collect::Counts;
use crate::model::files::{TIMESERIES_CSV, TIMESERIES_JSON};
use crate::model::summary::TimeseriesNote;

/// `timeseries.json`: what `record --interval` writes and `report.html`
/// reads (one type for both, so the two cannot drift apart; schema:
/// `docs/schema/timeseries.schema.json`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeSeries {
    /// The bundle's output contract version (docs/OUTPUTS.md); 0 in
    /// files written before timeseries.json carried one.
    #[serde(default)]
    pub format_version: u32,
    pub interval_ms: u64,
    pub started_unix_ms: u128,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// End of the interval, ms since the recording started.
    pub t_ms: u64,
    pub probe: String,
    /// None: the probe's total.
    pub callsite: Option<String>,
    /// Deltas within the interval.
    pub calls: u64,
    pub wait_ns: u64,
    /// How long the probe was switched on within the interval; 0 in
    /// files written before it existed.
    #[serde(default)]
    pub attached_ms: u64,
    /// Hits within the interval while the probe was switched off in BPF
    /// (trapped, not counted in `calls`), on the probe's total row; 0 on
    /// call-site rows and in files written before it existed.
    #[serde(default)]
    pub off_hits: u64,
    /// What the interval's hits (`calls + off_hits`) cost the server by
    /// innoprof's model, ns: each at the calibrated trap plus the BPF
    /// programs' run time per hit over this interval as the kernel
    /// measured it, the price `summary.json` puts on the whole recording,
    /// so the intervals add up to its probes' cost. On the probe's total
    /// row; 0 on call-site rows, counters, and in files written before it
    /// existed.
    #[serde(default)]
    pub cost_ns: u64,
}

impl TimeSeries {
    /// A saved `timeseries.json`.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    pub fn intervals(&self) -> usize {
        let mut ends: Vec<u64> = self.points.iter().map(|p| p.t_ms).collect();
        ends.dedup();
        ends.len()
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("time series serialises")
    }

    /// `t_ms,probe,callsite,calls,wait_ns,attached_ms,off_hits,cost_ns`; the callsite is empty for a
    /// probe's total. Quoted where a name needs it (ad-hoc probe
    /// patterns can hold commas).
    pub fn to_csv(&self) -> Vec<u8> {
        let mut w = csv::Writer::from_writer(Vec::new());
        for p in &self.points {
            w.serialize(p).expect("CSV into memory");
        }
        w.into_inner().expect("CSV into memory")
    }

    /// What the summary says about the series.
    pub fn note(&self) -> TimeseriesNote {
        TimeseriesNote {
            interval_ms: self.interval_ms,
            intervals: self.intervals(),
            files: vec![TIMESERIES_JSON.to_string(), TIMESERIES_CSV.to_string()],
        }
    }
}

/// Per probe name, the totals over all intervals: what `summary.json`
/// reports for the same recording.
pub fn totals_by_probe(series: &TimeSeries) -> HashMap<&str, Counts> {
    let mut out: HashMap<&str, Counts> = HashMap::new();
    for p in series.points.iter().filter(|p| p.callsite.is_none()) {
        out.entry(p.probe.as_str())
            .or_default()
            .add(Counts::of(p.calls, p.wait_ns));
    }
    out
}
