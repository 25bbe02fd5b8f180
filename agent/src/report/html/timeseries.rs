//! The page's line charts, from `timeseries.json` as the recorder wrote
//! it ([`crate::model::timeseries::TimeSeries`], whose doc states the file's
//! contract): `t_ms` is the end of an interval in ms since the start;
//! `calls`/`wait_ns` are deltas within it; `callsite` null is the probe's
//! total. Every line is per second the probe was watched in the interval
//! (`attached_ms`), with a gap where it was never on: a probe the governor
//! cut reads at its rate while watched, not as the governor's duty cycle.

pub use crate::model::timeseries::{Point, TimeSeries};

/// One line of a chart: (x = seconds since the start, y) points.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl TimeSeries {
    /// Probes in order of first appearance.
    pub fn probes(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.points {
            if !out.contains(&p.probe.as_str()) {
                out.push(&p.probe);
            }
        }
        out
    }

    /// Per probe total (callsite null): `y(point)` per interval.
    pub fn probe_lines(&self, y: impl Fn(&Point) -> f64) -> Vec<Line> {
        self.probes()
            .into_iter()
            .map(|probe| Line {
                name: probe.to_string(),
                points: self
                    .points
                    .iter()
                    .filter(|p| p.probe == probe && p.callsite.is_none())
                    .map(|p| (p.t_ms as f64 / 1000.0, y(p)))
                    .collect(),
            })
            .filter(|l| !l.points.is_empty())
            .collect()
    }

    /// `v` of `p` per second the probe was watched in that interval; NaN
    /// (a gap in a chart) where it was never on.
    pub fn per_watched_s(&self, p: &Point, v: u64) -> f64 {
        p.watched_s(self.interval_s(), self.legacy())
            .map_or(f64::NAN, |s| v as f64 / s)
    }

    /// One probe's call sites: wait per second watched, per site.
    pub fn callsite_lines(&self, probe: &str) -> Vec<Line> {
        let mut sites: Vec<&str> = Vec::new();
        for p in self.points.iter().filter(|p| p.probe == probe) {
            if let Some(s) = p.callsite.as_deref() {
                if !sites.contains(&s) {
                    sites.push(s);
                }
            }
        }
        sites
            .into_iter()
            .map(|site| Line {
                name: site.to_string(),
                points: self
                    .points
                    .iter()
                    .filter(|p| p.probe == probe && p.callsite.as_deref() == Some(site))
                    .map(|p| (p.t_ms as f64 / 1000.0, self.per_watched_s(p, p.wait_ns)))
                    .collect(),
            })
            .collect()
    }

    /// The wait per second watched of `probe`'s call sites named in
    /// `sites`, summed: one latch's line. `None` when the series has none
    /// of them (they were not among the probe's busiest, whose rows it
    /// keeps).
    pub fn sites_line(&self, probe: &str, sites: &[&str], name: &str) -> Option<Line> {
        // (end of interval, the probe's total row there, wait summed)
        let mut sums: Vec<(u64, Option<&Point>, u64)> = Vec::new();
        let mut seen = false;
        for p in self.points.iter().filter(|p| p.probe == probe) {
            let at = match sums.binary_search_by_key(&p.t_ms, |(t, _, _)| *t) {
                Ok(i) => i,
                Err(i) => {
                    sums.insert(i, (p.t_ms, None, 0));
                    i
                }
            };
            sums[at].1.get_or_insert(p);
            if p.callsite.as_deref().is_some_and(|c| sites.contains(&c)) {
                sums[at].2 = sums[at].2.saturating_add(p.wait_ns);
                seen = true;
            }
        }
        seen.then(|| Line {
            name: name.to_string(),
            points: sums
                .into_iter()
                .map(|(t, row, w)| {
                    let y = row.map_or(f64::NAN, |p| self.per_watched_s(p, w));
                    (t as f64 / 1000.0, y)
                })
                .collect(),
        })
    }

    pub fn interval_s(&self) -> f64 {
        self.interval_ms.max(1) as f64 / 1000.0
    }
}
