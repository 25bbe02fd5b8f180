//! Per-probe latency histograms as their own files, for spreadsheets and
//! plotting tools: `histograms.json` and `histograms.csv`, bucket bounds in
//! ns. Only latency probes that attached; every log2 bucket that holds a
//! call.

use serde::{Deserialize, Serialize};

use crate::bpf::histogram::Bucket;
use crate::model::summary::{ProbeStatus, Summary};
use crate::plan::catalog::Measure;

/// `histograms.json` (schema: `docs/schema/histograms.schema.json`).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Histograms {
    /// The bundle's output contract version (docs/OUTPUTS.md); 0 in
    /// files written before histograms.json carried one.
    #[serde(default)]
    pub format_version: u32,
    /// `[low_ns, high_ns)`, log2 buckets (the first is `[0, 2)`).
    pub buckets: String,
    pub probes: Vec<ProbeHistogram>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeHistogram {
    pub probe: String,
    pub calls: u64,
    pub wait_ns_total: u64,
    pub buckets: Vec<Bucket>,
}

pub fn of(summary: &Summary) -> Histograms {
    Histograms {
        format_version: crate::model::files::FORMAT_VERSION,
        buckets: "log2, [low_ns, high_ns)".to_string(),
        probes: summary
            .probes
            .iter()
            .filter(|p| p.status == ProbeStatus::Attached && p.measure == Measure::Latency)
            .map(|p| ProbeHistogram {
                probe: p.name.clone(),
                calls: p.calls,
                wait_ns_total: p.wait_ns_total,
                buckets: p.histogram.clone(),
            })
            .collect(),
    }
}

pub fn json(h: &Histograms) -> Vec<u8> {
    serde_json::to_vec_pretty(h).expect("histograms serialise")
}

/// `probe,low_ns,high_ns,count`, one row per non-empty bucket.
pub fn csv(h: &Histograms) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(["probe", "low_ns", "high_ns", "count"])
        .expect("in-memory csv");
    for p in &h.probes {
        for b in &p.buckets {
            w.write_record([
                p.probe.as_str(),
                &b.low_ns.to_string(),
                &b.high_ns.to_string(),
                &b.count.to_string(),
            ])
            .expect("in-memory csv");
        }
    }
    w.into_inner().expect("in-memory csv")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_names_with_commas() {
        let h = Histograms {
            format_version: crate::model::files::FORMAT_VERSION,
            buckets: String::new(),
            probes: vec![ProbeHistogram {
                probe: "f(int, int)".into(),
                calls: 3,
                wait_ns_total: 90,
                buckets: vec![
                    Bucket {
                        low_ns: 16,
                        high_ns: 32,
                        count: 2,
                    },
                    Bucket {
                        low_ns: 32,
                        high_ns: 64,
                        count: 1,
                    },
                ],
            }],
        };
        assert_eq!(
            String::from_utf8(csv(&h)).unwrap(),
            "probe,low_ns,high_ns,count\n\"f(int, int)\",16,32,2\n\"f(int, int)\",32,64,1\n"
        );
    }
}
