//! Allocation lifetime histograms.
//!
//! Every sampled allocation that is freed adds its lifetime, weighted like its bytes (it stands
//! for `1/p` allocations), to its stack's histogram. Buckets are log-spaced from a millisecond to
//! an hour. The same type also describes the *age* of the bytes a stack still retains (then the
//! weights are retained bytes, not counts).

/// Upper bounds (inclusive, in milliseconds) of every bucket but the last, which is open.
pub const BUCKET_BOUNDS_MILLIS: [u64; 8] = [1, 10, 100, 1_000, 10_000, 60_000, 600_000, 3_600_000];
/// Number of buckets (`BUCKET_BOUNDS_MILLIS.len() + 1`).
pub const NUM_BUCKETS: usize = BUCKET_BOUNDS_MILLIS.len() + 1;
/// Short labels of the buckets, for reports.
pub const BUCKET_LABELS: [&str; NUM_BUCKETS] =
    ["<=1ms", "<=10ms", "<=100ms", "<=1s", "<=10s", "<=1m", "<=10m", "<=1h", ">1h"];

/// A weighted histogram of durations in milliseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct MillisHistogram {
    weights: [f64; NUM_BUCKETS],
    weighted_sum_millis: f64,
    total_weight: f64,
}

/// Index of the bucket holding `millis`.
pub fn bucket_of(millis: u64) -> usize {
    BUCKET_BOUNDS_MILLIS.iter().position(|&b| millis <= b).unwrap_or(NUM_BUCKETS - 1)
}

impl MillisHistogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self { weights: [0.0; NUM_BUCKETS], weighted_sum_millis: 0.0, total_weight: 0.0 }
    }

    /// Adds one observation of `millis` standing for `weight` observations.
    pub fn add_weighted(&mut self, millis: f64, weight: f64) {
        // Through `i64`: one instruction where the unsigned conversion is about eight (a
        // lifetime past 2^63 ms reads as that).
        let idx = bucket_of(millis.max(0.0) as i64 as u64);
        if let Some(w) = self.weights.get_mut(idx) {
            *w += weight;
        }
        self.weighted_sum_millis += millis * weight;
        self.total_weight += weight;
    }

    /// The bucket weights, the weighted sum of milliseconds and the total weight: what
    /// [`MillisHistogram::from_parts`] rebuilds it from (a live file stores them).
    pub(crate) fn parts(&self) -> (&[f64; NUM_BUCKETS], f64, f64) {
        (&self.weights, self.weighted_sum_millis, self.total_weight)
    }

    /// The histogram of `parts` (see [`MillisHistogram::parts`]); missing bucket weights are 0,
    /// extra ones are ignored.
    pub(crate) fn from_parts(weights: &[f64], weighted_sum_millis: f64, total_weight: f64) -> Self {
        let mut h = Self::new();
        for (a, b) in h.weights.iter_mut().zip(weights) {
            *a = *b;
        }
        h.weighted_sum_millis = weighted_sum_millis;
        h.total_weight = total_weight;
        h
    }

    /// Adds every observation of `other`.
    pub fn merge(&mut self, other: &MillisHistogram) {
        for (a, b) in self.weights.iter_mut().zip(other.weights.iter()) {
            *a += b;
        }
        self.weighted_sum_millis += other.weighted_sum_millis;
        self.total_weight += other.total_weight;
    }

    /// Estimated observations per bucket, rounded.
    pub fn counts(&self) -> [u64; NUM_BUCKETS] {
        self.weights.map(|w| w.round().max(0.0) as u64)
    }

    /// Estimated observations per bucket, unrounded.
    pub fn weights(&self) -> [f64; NUM_BUCKETS] {
        self.weights
    }

    /// Total estimated observations.
    pub fn total(&self) -> f64 {
        self.total_weight
    }

    /// Weighted mean in milliseconds (NaN when empty, as in 0.3.0).
    pub fn average_millis(&self) -> f64 {
        if self.total_weight > 0.0 {
            self.weighted_sum_millis / self.total_weight
        } else {
            f64::NAN
        }
    }

    /// Whether nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.total_weight <= 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_and_open_ended() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(1000), 3);
        assert_eq!(bucket_of(3_600_000), 7);
        assert_eq!(bucket_of(3_600_001), 8);
    }

    #[test]
    fn weights_and_average() {
        let mut h = MillisHistogram::new();
        h.add_weighted(5.0, 2.0);
        h.add_weighted(2000.0, 1.0);
        assert_eq!(h.counts(), [0, 2, 0, 0, 1, 0, 0, 0, 0]);
        assert!((h.average_millis() - 670.0).abs() < 1e-9);
        assert!(MillisHistogram::new().average_millis().is_nan());
    }
}
