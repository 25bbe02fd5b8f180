//! Log2 latency histograms as kept by the BPF side.

use serde::{Deserialize, Serialize};

use crate::bpf::abi::HIST_SLOTS;

/// Slot `i` counts waits in `[2^i, 2^(i+1))` ns (slot 0: `[0, 2)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log2Histogram {
    pub counts: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bucket {
    pub low_ns: u64,
    pub high_ns: u64,
    pub count: u64,
}

impl Log2Histogram {
    pub fn new(counts: &[u64; HIST_SLOTS]) -> Self {
        Self {
            counts: counts.to_vec(),
        }
    }

    pub fn bounds(slot: usize) -> (u64, u64) {
        let low = if slot == 0 { 0 } else { 1u64 << slot };
        (low, 1u64 << (slot + 1))
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Non-empty buckets, low to high.
    pub fn buckets(&self) -> Vec<Bucket> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, &count)| {
                let (low_ns, high_ns) = Self::bounds(i);
                Bucket {
                    low_ns,
                    high_ns,
                    count,
                }
            })
            .collect()
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1): the true
    /// value is at most this, and at least half of it.
    pub fn quantile_upper_ns(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Self::bounds(i).1);
            }
        }
        None
    }

    pub fn add(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_bucket_upper_bound() {
        let mut counts = [0u64; HIST_SLOTS];
        counts[10] = 98; // [1024, 2048) ns
        counts[20] = 2; // [1 Mi, 2 Mi) ns
        let h = Log2Histogram::new(&counts);
        assert_eq!(h.quantile_upper_ns(0.5), Some(2048));
        assert_eq!(h.quantile_upper_ns(0.98), Some(2048));
        assert_eq!(h.quantile_upper_ns(0.99), Some(2 << 20));
        assert_eq!(
            Log2Histogram::new(&[0; HIST_SLOTS]).quantile_upper_ns(0.5),
            None
        );
        assert_eq!(Log2Histogram::bounds(0), (0, 2));
        assert_eq!(h.buckets().len(), 2);
    }
}
