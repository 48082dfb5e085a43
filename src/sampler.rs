//! Byte-based sampling and the weights that make every estimate unbiased.
//!
//! Model: every byte handed out is marked independently with probability `1/R`, where `R` is
//! the mean sampling interval in bytes. An allocation of `s` bytes is sampled when it contains a
//! marked byte: `p(s) = 1 - (1 - 1/R)^s`. Each thread keeps a countdown of bytes to the next
//! marked byte, drawn from a geometric distribution with mean `R`; an allocation of fewer bytes
//! than the countdown just subtracts its size (one compare and one subtraction on the hot path),
//! and because the distribution is memoryless the countdown is simply redrawn after each sample.
//! `R = 1` marks every byte: every allocation is sampled with weight one, which makes the
//! "estimates" exact. Zero-byte requests hold no bytes and are never sampled (the exact totals
//! still count them).
//!
//! A sampled allocation stands for `1/p(s)` allocations and `s/p(s)` bytes (Horvitz-Thompson).
//! The weights are stored with the sample and the very same weights are subtracted when it is
//! freed, so per-stack allocated, retained and freed figures are sums of unbiased terms; they are
//! never reconstructed from average sizes (the known bias of jeprof's unbiasing).

/// Default mean sampling interval: 512 KiB, as jemalloc (`lg_prof_sample:19`) and Go.
pub const DEFAULT_SAMPLE_INTERVAL_BYTES: u64 = 512 * 1024;

/// Draws from the thread's xorshift64* generator, seeding it first if needed.
pub(crate) fn next_u64(state: &mut u64) -> u64 {
    let mut x = *state;
    if x == 0 {
        x = 0x9E37_79B9_7F4A_7C15;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// SplitMix64: turns a seed and a thread ordinal into independent, non-zero generator states.
pub(crate) fn seed_for(seed: u64, ordinal: u64) -> u64 {
    let mut z = seed.wrapping_add(ordinal.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 { 1 } else { z }
}

/// A uniform draw in (0, 1].
fn uniform_open0(state: &mut u64) -> f64 {
    ((next_u64(state) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// `ln(1 - 1/interval)`, the log of the probability that a byte is not marked. Both sampled-path
/// formulas need it; for the usual intervals (at least 1 KiB) a short series is exact to double
/// precision (the first omitted term is below `q^6/6` against a value near `q`) and saves a libm
/// call per sample.
fn ln_unmarked(interval: u64) -> f64 {
    let q = 1.0 / interval as f64;
    if interval >= 1024 {
        -(q + q * q * (0.5 + q * (1.0 / 3.0 + q * (0.25 + q * 0.2))))
    } else {
        (-q).ln_1p()
    }
}

/// Bytes up to and including the next marked byte: geometric with mean `interval`, at least 1.
pub(crate) fn draw_countdown(state: &mut u64, interval: u64) -> u64 {
    if interval <= 1 {
        return 1;
    }
    let u = uniform_open0(state);
    // Both logs are <= 0, so the quotient is >= 0 and truncation is `floor`.
    let k = u.ln() / ln_unmarked(interval);
    if k >= 9.0e18 { u64::MAX / 2 } else { k as u64 + 1 }
}

/// Probability that an allocation of `size` bytes is sampled at interval `interval`.
pub fn sample_probability(size: u64, interval: u64) -> f64 {
    if size == 0 {
        return 0.0;
    }
    if interval <= 1 {
        return 1.0;
    }
    let n = size as f64;
    // 1 - (1-q)^n, computed without cancellation for small q*n.
    -((n * ln_unmarked(interval)).exp_m1())
}

/// The weights a sample carries: how many allocations and bytes it stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weight {
    /// Estimated number of allocations this sample represents (`1/p`).
    pub count: f64,
    /// Estimated bytes this sample represents (`size/p`).
    pub bytes: f64,
}

/// Horvitz-Thompson weights for a sampled allocation of `size` bytes.
pub fn weight(size: u64, interval: u64) -> Weight {
    weight_charged(size, size, interval)
}

/// Horvitz-Thompson weights for a sampled allocation of `size` requested bytes that took its
/// chance with `charged` bytes (the shim charges glibc's chunk size, a little more than the
/// request): it was sampled with probability `p(charged)` and stands for `size / p` bytes.
pub fn weight_charged(size: u64, charged: u64, interval: u64) -> Weight {
    let p = sample_probability(charged, interval);
    if p >= 1.0 || p <= 0.0 {
        return Weight { count: 1.0, bytes: size as f64 };
    }
    Weight { count: 1.0 / p, bytes: size as f64 / p }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_for_the_unmarked_log_matches_libm() {
        for r in [1024u64, 1025, 4096, 65_536, 524_288, 1 << 30, u64::MAX] {
            let exact = (-(1.0 / r as f64)).ln_1p();
            let rel = ((ln_unmarked(r) - exact) / exact).abs();
            assert!(rel < 1e-14, "interval {r}: {} vs {exact} (rel {rel:e})", ln_unmarked(r));
        }
        assert_eq!(ln_unmarked(2), (-0.5f64).ln_1p());
    }

    #[test]
    fn interval_one_samples_everything_with_unit_weight() {
        let mut s = 42;
        for _ in 0..100 {
            assert_eq!(draw_countdown(&mut s, 1), 1);
        }
        assert_eq!(weight(0, 1), Weight { count: 1.0, bytes: 0.0 });
        assert_eq!(weight(12345, 1), Weight { count: 1.0, bytes: 12345.0 });
    }

    #[test]
    fn countdown_mean_within_five_sigma() {
        // Geometric(1/R) has mean R and standard deviation ~R; the sample mean of n draws has
        // standard error R/sqrt(n).
        let r = 64 * 1024u64;
        let n = 200_000u64;
        let mut s = seed_for(7, 0);
        let sum: f64 = (0..n).map(|_| draw_countdown(&mut s, r) as f64).sum();
        let mean = sum / n as f64;
        let sigma = r as f64 / (n as f64).sqrt();
        assert!((mean - r as f64).abs() < 5.0 * sigma, "mean {mean} vs {r} (sigma {sigma})");
    }

    #[test]
    fn countdown_follows_geometric_distribution_ks() {
        // Kolmogorov-Smirnov against the geometric CDF F(k) = 1 - (1-q)^k. With n = 20000 the
        // critical value at alpha = 1e-4 is about 1.95/sqrt(n) = 0.0138.
        let r = 4096u64;
        let n = 20_000usize;
        let mut s = seed_for(99, 3);
        let mut xs: Vec<u64> = (0..n).map(|_| draw_countdown(&mut s, r)).collect();
        xs.sort_unstable();
        let q = 1.0 / r as f64;
        let mut d: f64 = 0.0;
        for (i, &k) in xs.iter().enumerate() {
            let f = 1.0 - (1.0 - q).powf(k as f64);
            let lo = i as f64 / n as f64;
            let hi = (i + 1) as f64 / n as f64;
            d = d.max((f - lo).abs()).max((hi - f).abs());
        }
        // Discreteness of the CDF adds at most q per step; allow for it.
        assert!(d < 0.0138 + q, "KS statistic {d}");
    }

    #[test]
    fn probability_matches_closed_form_and_weights_invert_it() {
        let r = 512 * 1024;
        let p = sample_probability(4096, r);
        let exact = 1.0 - (1.0 - 1.0 / r as f64).powf(4096.0);
        assert!((p - exact).abs() < 1e-12);
        let w = weight(4096, r);
        assert!((w.count * p - 1.0).abs() < 1e-9);
        assert!((w.bytes * p - 4096.0).abs() < 1e-6);
        // A block far larger than R is sampled almost surely and weighs about its size.
        let big = weight(64 << 20, r);
        assert!((big.bytes - (64 << 20) as f64).abs() < 1.0);
    }

    #[test]
    fn seeds_are_repeatable_and_distinct_per_thread() {
        assert_eq!(seed_for(1, 0), seed_for(1, 0));
        assert_ne!(seed_for(1, 0), seed_for(1, 1));
        let (mut a, mut b) = (seed_for(5, 2), seed_for(5, 2));
        for _ in 0..10 {
            assert_eq!(draw_countdown(&mut a, 1000), draw_countdown(&mut b, 1000));
        }
    }
}
