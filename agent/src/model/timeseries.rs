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

impl Point {
    /// Seconds of the interval the probe was watched (switched on): a cut
    /// probe's counts are per this time, not per interval, or the
    /// governor's duty cycle draws itself into the series. None for an
    /// interval it was never on: a gap, not a zero. `legacy`: a series
    /// written before `attached_ms` existed, watched whole.
    pub fn watched_s(&self, interval_s: f64, legacy: bool) -> Option<f64> {
        if legacy {
            return (interval_s > 0.0).then_some(interval_s);
        }
        (self.attached_ms > 0).then(|| self.attached_ms as f64 / 1000.0)
    }
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

    /// `t_ms,probe,callsite,calls,wait_ns,attached_ms,off_hits,cost_ns,
    /// calls_per_s,wait_ns_per_s`; the callsite is empty for a probe's
    /// total, and the two rates (per second watched, [`Point::watched_s`])
    /// are empty for an interval the probe was never on. Quoted where a
    /// name needs it (ad-hoc probe patterns can hold commas).
    pub fn to_csv(&self) -> Vec<u8> {
        /// A point and its rates: the rates are the CSV's alone
        /// (timeseries.json keeps the counts a rate is made from).
        /// (csv cannot write a flattened struct: the fields again.)
        #[derive(Serialize)]
        struct Row<'a> {
            t_ms: u64,
            probe: &'a str,
            callsite: Option<&'a str>,
            calls: u64,
            wait_ns: u64,
            attached_ms: u64,
            off_hits: u64,
            cost_ns: u64,
            calls_per_s: Option<f64>,
            wait_ns_per_s: Option<f64>,
        }
        let legacy = self.legacy();
        let interval_s = self.interval_ms as f64 / 1000.0;
        let mut w = csv::Writer::from_writer(Vec::new());
        for p in &self.points {
            let watched = p.watched_s(interval_s, legacy);
            // Whole numbers to a thousandth: enough for a rate, and no
            // float noise in the file.
            let per = |n: u64| watched.map(|s| (n as f64 / s * 1000.0).round() / 1000.0);
            w.serialize(Row {
                t_ms: p.t_ms,
                probe: &p.probe,
                callsite: p.callsite.as_deref(),
                calls: p.calls,
                wait_ns: p.wait_ns,
                attached_ms: p.attached_ms,
                off_hits: p.off_hits,
                cost_ns: p.cost_ns,
                calls_per_s: per(p.calls),
                wait_ns_per_s: per(p.wait_ns),
            })
            .expect("CSV into memory");
        }
        w.into_inner().expect("CSV into memory")
    }

    /// Written before `attached_ms` existed (every point has 0): each
    /// interval is taken as watched whole.
    pub fn legacy(&self) -> bool {
        self.points.iter().all(|p| p.attached_ms == 0)
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
