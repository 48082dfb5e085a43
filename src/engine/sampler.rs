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
//! **Bytes are counted bytes.** `s` is what the front end counts for a block in its exact totals
//! and charges to the countdown: `Layout::size()` in the Rust front end, glibc's chunk size in
//! the shim (where `free` carries no size, so the chunk is all the exact totals can count). The
//! estimates count the very same bytes, so the header's exact lines and every estimate speak
//! of one unit, and at `R = 1` they agree to the byte.
//!
//! **The invariant.** A live block of `c` counted bytes is sampled with probability exactly
//! `p(c)`, whatever its history. A sampled block stands for `1/p(c)` blocks and `c/p(c)`
//! bytes (Horvitz-Thompson): summed over the sampled blocks, these estimate the live blocks and
//! bytes without bias, because each block's term has expectation `p(c) * c/p(c) = c`. The
//! weights are stored with the sample and the very same weights are subtracted when it is
//! freed; they are never reconstructed from average sizes (the known bias of jeprof's
//! unbiasing). Every way a block can come to exist or change keeps the invariant:
//!
//! * **An allocation** of `c` bytes charges `c` bytes: sampled with probability `p(c)`.
//! * **A realloc that grows** a block from `a` to `b` counted bytes charges the growth `b - a`.
//!   An unsampled block (probability `1 - p(a)`) becomes sampled when the growth holds a marked
//!   byte (probability `p(b - a)`); a sampled block stays sampled. Since
//!   `1 - p(x) = (1 - 1/R)^x`, the block is sampled afterwards with probability
//!   `1 - (1 - p(a)) (1 - p(b - a)) = p(b)`, and a sampled block now weighs `1/p(b)`. A block
//!   first sampled at a realloc carries the realloc's stack; one sampled earlier keeps its own
//!   stack and birth time (a realloc'd block is one long-lived allocation).
//! * **A realloc that shrinks** a block from `a` to `b` cannot make an unsampled block sampled,
//!   so a sampled block is kept with probability `p(b)/p(a)` and otherwise forgotten (the block
//!   lives on, unsampled): it is sampled afterwards with probability
//!   `p(a) * p(b)/p(a) = p(b)`. Without this thinning, re-weighting a sampled block by its new,
//!   smaller size overstates it by `p(a)/p(b)` (twenty-fold for 1000 bytes shrunk to 50); keeping
//!   its old weight instead would break the invariant for the next growth, whose probability
//!   could then not be known for blocks that were never sampled.
//! * **`realloc(p, 0)`** that frees, and `free`, retire the sample with its current weights;
//!   `realloc(NULL, n)` is an allocation.
//!
//! **Allocated and freed.** A realloc'd block is one allocation. Its allocated bytes are the
//! bytes it was ever charged (its first size plus every growth); its freed bytes are what every
//! shrink gave back plus its size when freed; so allocated = retained + freed, for the exact
//! totals and per stack alike. Per stack, freed bytes and frees are Horvitz-Thompson sums over
//! the events seen on sampled blocks (a shrink of `a - b` bytes of a block sampled with
//! probability `p(a)` adds `(a - b)/p(a)`; a free of `c` bytes adds `c/p(c)` and one free of
//! weight `1/p(c)`), and allocated bytes and allocations are retained plus freed. Each term is
//! unbiased, so each sum is; a figure can move down when a shrink forgets a sample (a zero-mean
//! step, like the re-weighting of a grown block's count).
/// What a front end counts as a block's bytes: the same in its exact totals, its estimates and
/// every report (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteUnit {
    /// The requested size (`Layout::size()`): the Rust front end, which sees it at both ends.
    Requested,
    /// glibc's chunk (usable size plus its 8-byte header, 16 for mmapped blocks): the shim,
    /// whose `free` carries no size, so the chunk header is all that can be counted there.
    Chunk,
    /// The usable size of another allocator under the shim (its `malloc_usable_size`), the
    /// same at allocation and at free.
    Usable,
}

impl ByteUnit {
    /// The unit as the text report's header names it.
    pub fn describe(self) -> &'static str {
        match self {
            ByteUnit::Requested => "requested bytes (Layout::size)",
            ByteUnit::Chunk => "glibc chunk bytes (usable size + 8-byte header)",
            ByteUnit::Usable => "usable bytes (the allocator's malloc_usable_size)",
        }
    }
}

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

/// `ln(1 - 1/interval)`, the log of the probability that a byte is not marked: every
/// sampled-path formula is a function of it, so the settings keep it beside the interval
/// (`Settings::ln_unmarked`) and a sample does not recompute it. `-inf` at interval 1 (every
/// byte marked), which the formulas below carry to a countdown of 1 and a probability of 1.
pub(crate) fn ln_unmarked(interval: u64) -> f64 {
    if interval >= 1024 {
        ln_unmarked_series(interval)
    } else {
        (-1.0 / interval.max(1) as f64).ln_1p()
    }
}

/// [`ln_unmarked`] for intervals of at least 1 KiB, where a short series is exact to double
/// precision (the first omitted term is below `q^6/6` against a value near `q`); `const` so
/// that static settings carry it from the start.
pub(crate) const fn ln_unmarked_series(interval: u64) -> f64 {
    let q = 1.0 / interval as f64;
    -(q + q * q * (0.5 + q * (1.0 / 3.0 + q * (0.25 + q * 0.2))))
}

/// Bytes up to and including the next marked byte: geometric with mean `interval`, at least 1.
/// The tests' form of [`draw_countdown_at`].
#[cfg(test)]
fn draw_countdown(state: &mut u64, interval: u64) -> u64 {
    if interval <= 1 {
        return 1;
    }
    draw_countdown_at(state, ln_unmarked(interval))
}

/// [`draw_countdown`] from the interval's [`ln_unmarked`] (the sampled path's form).
#[inline]
pub(crate) fn draw_countdown_at(state: &mut u64, ln_unmarked: f64) -> u64 {
    let u = uniform_open0(state);
    // Both logs are <= 0, so the quotient is >= 0 and truncation is `floor`; below 9e18 it
    // fits an `i64`, whose conversion is one instruction (the unsigned one about eight).
    let k = u.ln() / ln_unmarked;
    if k >= 9.0e18 {
        return u64::MAX / 2;
    }
    // SAFETY: `k` is finite, at least -0.0 and below 9e18, so truncated it fits an `i64`: the
    // numerator is finite (`u` > 0) and at most 0, the divisor below 0 or -inf (never 0, nor
    // NaN: `ln_unmarked` of an interval of at least 1), so the quotient is not NaN. The checked
    // `as` conversion adds a NaN and a bound test the range above already excludes (4
    // instructions a sample).
    let whole = unsafe { k.to_int_unchecked::<i64>() };
    whole as u64 + 1
}

/// Probability that an allocation of `size` bytes is sampled at interval `interval`.
pub fn sample_probability(size: u64, interval: u64) -> f64 {
    if interval <= 1 {
        return if size == 0 { 0.0 } else { 1.0 };
    }
    probability_at(size, ln_unmarked(interval))
}

/// `n` as `f64` through the signed conversion: one instruction where the unsigned one is about
/// eight, on the sampled path's sizes, lifetimes and tallies. The same value below `2^63`;
/// figures past `i64::MAX` (8 EiB, or 292 years of nanoseconds) read as that.
#[inline(always)]
pub(crate) fn f64_of(n: u64) -> f64 {
    n.min(i64::MAX as u64) as i64 as f64
}

/// [`sample_probability`] from the interval's [`ln_unmarked`] (the sampled path's form).
#[inline]
pub(crate) fn probability_at(size: u64, ln_unmarked: f64) -> f64 {
    if size == 0 {
        return 0.0;
    }
    // 1 - (1-q)^n, computed without cancellation for small q*n.
    -exp_m1(f64_of(size) * ln_unmarked)
}

/// `e^x - 1` for `x <= 0`. Most sampled blocks are far smaller than the interval, where `x`
/// is near zero and a Taylor polynomial is exact to double precision: below `2^-5` the first
/// omitted term, `x^9/9!`, is under `3e-18` of the value (one term fewer would be `7e-16`,
/// which the test sees). Beyond, the library's.
#[inline]
fn exp_m1(x: f64) -> f64 {
    if x > -1.0 / 32.0 {
        const C: [f64; 7] = [
            1.0 / 2.0,
            1.0 / 6.0,
            1.0 / 24.0,
            1.0 / 120.0,
            1.0 / 720.0,
            1.0 / 5040.0,
            1.0 / 40320.0,
        ];
        let mut p = C[6];
        for c in C[..6].iter().rev() {
            p = p * x + c;
        }
        x + x * x * p
    } else {
        x.exp_m1()
    }
}

/// The weights a sample carries: how many allocations and bytes it stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weight {
    /// Estimated number of allocations this sample represents (`1/p`).
    pub count: f64,
    /// Estimated bytes this sample represents (`size/p`).
    pub bytes: f64,
}

/// Horvitz-Thompson weights for a sampled block of `size` counted bytes (see the module docs:
/// it is sampled with probability `p(size)` however it came to be that size).
pub fn weight(size: u64, interval: u64) -> Weight {
    weight_at(size, ln_unmarked(interval))
}

/// [`weight`] from the interval's [`ln_unmarked`] (the sampled path's form).
#[inline]
pub(crate) fn weight_at(size: u64, ln_unmarked: f64) -> Weight {
    let p = probability_at(size, ln_unmarked);
    if p >= 1.0 || p <= 0.0 {
        return Weight { count: 1.0, bytes: f64_of(size) };
    }
    Weight { count: 1.0 / p, bytes: f64_of(size) / p }
}

impl Weight {
    /// This sample's terms of the Horvitz-Thompson variance estimates of the byte and count
    /// figures it is added to: `(1-p)/p^2` times the square of what it counts (`size` bytes,
    /// one allocation), `bytes^2 (1 - p)` and `count (count - 1)` with `count = 1/p`. Summed
    /// over a stack's samples they estimate its figures' variances without bias: the byte
    /// sampler includes each block independently (a Poisson process over the bytes), so the
    /// variance is the sum of the blocks' own. Zero for a block sampled surely.
    #[inline]
    pub fn variance(&self) -> (f64, f64) {
        if self.count <= 1.0 {
            return (0.0, 0.0);
        }
        let keep = 1.0 - 1.0 / self.count;
        (self.bytes * self.bytes * keep, self.count * (self.count - 1.0))
    }
}

/// Probability that a sampled block of weight `old` (it was sampled with probability
/// `1/old.count`) stays sampled when it shrinks to `new_size` counted bytes: `p(new) / p(old)`,
/// so that it is sampled afterwards with probability `p(new)` (see the module docs).
pub(crate) fn keep_probability(old: Weight, new_size: u64, interval: u64) -> f64 {
    (sample_probability(new_size, interval) * old.count).min(1.0)
}

/// Draws whether a sampled block of weight `old` that shrank to `new_size` bytes stays sampled
/// (true with [`keep_probability`]), from the thread's generator.
pub(crate) fn keep_after_shrink(
    state: &mut u64,
    old: Weight,
    new_size: u64,
    interval: u64,
) -> bool {
    let keep = keep_probability(old, new_size, interval);
    keep >= 1.0 || uniform_open0(state) <= keep
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
    fn polynomial_exp_m1_matches_libm_near_zero_and_hands_over_beyond() {
        // Through the polynomial's whole range and past its edge, from tiny blocks at a large
        // interval to blocks near the interval.
        let mut x = -1e-300f64;
        while x > -4.0 {
            let (ours, libm) = (exp_m1(x), x.exp_m1());
            let rel = ((ours - libm) / libm).abs();
            assert!(rel < 4e-16, "x = {x:e}: {ours:e} vs {libm:e} (rel {rel:e})");
            x *= 1.01;
        }
        assert_eq!(exp_m1(0.0), 0.0);
        assert_eq!(exp_m1(f64::NEG_INFINITY), -1.0);
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
    fn thinning_a_shrunk_sample_leaves_it_sampled_with_the_probability_of_its_new_size() {
        let r = 64 * 1024;
        for (a, b) in [(1008u64, 64u64), (10_016, 16), (1 << 20, 4096), (5000, 4999)] {
            let w = weight(a, r);
            let keep = keep_probability(w, b, r);
            let after = sample_probability(a, r) * keep;
            assert!((after / sample_probability(b, r) - 1.0).abs() < 1e-12, "{a} -> {b}");
            // Drawn: the kept share is within 5 sigma of `keep`.
            let mut s = seed_for(3, a);
            let n = 100_000;
            let kept = (0..n).filter(|_| keep_after_shrink(&mut s, w, b, r)).count() as f64;
            let sigma = (n as f64 * keep * (1.0 - keep)).sqrt();
            assert!((kept - n as f64 * keep).abs() <= 5.0 * sigma + 1.0, "{a} -> {b}: {kept}");
        }
        // Exact mode keeps every sample.
        assert_eq!(keep_probability(weight(1000, 1), 50, 1), 1.0);
    }

    #[test]
    fn growth_chances_compose_to_the_probability_of_the_new_size() {
        // 1 - (1 - p(a)) (1 - p(b - a)) = p(b): a block's growth charged on its own leaves it
        // sampled with the probability of its new size.
        let r = 512 * 1024;
        for (a, b) in [(16u64, 10_016u64), (1000, 1_000_000), (4096, 4097)] {
            let (pa, pg) = (sample_probability(a, r), sample_probability(b - a, r));
            let composed = 1.0 - (1.0 - pa) * (1.0 - pg);
            assert!((composed / sample_probability(b, r) - 1.0).abs() < 1e-9, "{a} -> {b}");
        }
    }

    #[test]
    fn variance_terms_are_those_of_a_bernoulli_inclusion() {
        // A block of size s sampled with probability p, weighted s/p: the estimate's variance
        // is s^2 (1-p)/p, whose unbiased estimate from the one draw is s^2 (1-p)/p^2, once
        // sampled (probability p).
        let r = 64 * 1024;
        for s in [16u64, 4096, 1 << 20, 64 << 20] {
            let p = sample_probability(s, r);
            let w = weight(s, r);
            let (vb, vc) = w.variance();
            let truth_b = (s as f64).powi(2) * (1.0 - p) / p;
            let truth_c = (1.0 - p) / p;
            assert!((p * vb / truth_b - 1.0).abs() < 1e-9 || truth_b < 1e-3, "{s}: {vb}");
            assert!((p * vc / truth_c - 1.0).abs() < 1e-9 || truth_c < 1e-9, "{s}: {vc}");
        }
        assert_eq!(weight(100, 1).variance(), (0.0, 0.0), "exact mode has no variance");
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
