//! Change against sampling noise: when a difference between two sampled figures is more than
//! the sampler's own scatter.
//!
//! Every sampled figure is a Horvitz-Thompson estimate: a block of `s` bytes is sampled with
//! `p = 1 - exp(-s/P)` (`P` the sample interval, a pprof's `period`) and weighs `s/p` bytes.
//! Two dumps of the same unchanged program therefore differ stack by stack, and a diff that
//! ranks by the raw change puts that scatter first. This module says how large the scatter is
//! and whether a change is beyond it, for `ying diff`, the HTML diff and the leak suspects
//! ([`super::leaks`]), so that they all decide the same way.
//!
//! # The variance of one figure: [`variance`], the one place that decides
//!
//! The estimate's variance is `sum over samples of s²(1-p)/p²`. When the producer says it (a
//! standard error it computed from its samples) that is used. Otherwise a bound that needs
//! nothing but the figure and `P`: each term is at most `s/p · P` (as `s(1-p)/p ≤ P` for
//! `p = 1 - exp(-s/P)`), so `Var(B) ≤ |B|·P` for `B` estimated bytes; and a count `C` of the
//! same samples (each weighing `1/p`) has `Var(C) ≤ C²·P/B`. The bound is tight for blocks much
//! smaller than `P` (the usual case) and conservative for large ones, which are nearly always
//! sampled: it can only hide a change, never invent one.
//!
//! # Beyond noise
//!
//! A change `Δ = B - A` between two independent estimates has `Var(Δ) = Var(A) + Var(B)`; two
//! dumps of one process share their older samples, which makes the true variance of `Δ` smaller,
//! so the sum is again conservative. The change's `z = |Δ| / sqrt(Var(Δ))`. One change is beyond
//! noise at 95 % when `z > 1.96`; but a diff tests every row at once, and among a hundred
//! unchanged rows five would pass that. So a row is *beyond noise* when its p-value is below
//! [`FAMILY_ALPHA`] (1 %) divided by the number of rows tested (Bonferroni): across the whole
//! diff, the chance that any unchanged row is marked is at most 1 % (for 100 rows two-sided,
//! `z > 3.89`). [`threshold`] gives that `z`.

/// The chance, over a whole table, that any row whose figure did not change is called
/// beyond noise (see the module documentation).
pub const FAMILY_ALPHA: f64 = 0.01;

/// The suffix of the sample type that holds another's per-sample standard errors in Ying's
/// pprof profiles (`inuse_space_stderr` beside `inuse_space`): what a reader passes to
/// [`variance`] as the producer's standard error.
pub const STDERR_SAMPLE_SUFFIX: &str = "_stderr";

/// The variance of one sampled figure: the square of `stderr` when the producer gives it (a
/// figure's exact standard error), else the bound from the sample interval `period` (bytes):
/// `|bytes|·period` for a figure of bytes (`value == bytes`), `value²·period/|bytes|` for a
/// count whose samples' bytes are `bytes`. 0 when `period` is 0 or 1 (every block counted: a
/// period of one byte samples every allocation).
pub fn variance(value: f64, bytes: f64, period: f64, stderr: Option<f64>) -> f64 {
    if let Some(se) = stderr.filter(|se| se.is_finite() && *se >= 0.0) {
        return se * se;
    }
    let (value, bytes, period) = (value.abs(), bytes.abs(), period.max(0.0));
    if value == 0.0 || period <= 1.0 {
        return 0.0;
    }
    if bytes == 0.0 {
        // A count without bytes (zero-size requests): each sample weighs at most `value`.
        return value * value;
    }
    value * value * period / bytes
}

/// A change between two estimates and the variance of that change.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Change {
    /// New minus old.
    pub delta: f64,
    /// `Var(old) + Var(new)`.
    pub var: f64,
}

impl Change {
    /// The change from `a` (variance `var_a`) to `b` (variance `var_b`).
    pub fn between(a: f64, var_a: f64, b: f64, var_b: f64) -> Self {
        Change { delta: b - a, var: var_a.max(0.0) + var_b.max(0.0) }
    }

    /// `|delta|` in standard errors: infinite for a change of exact figures, 0 for none.
    pub fn z(&self) -> f64 {
        if self.delta == 0.0 {
            0.0
        } else if self.var <= 0.0 {
            f64::INFINITY
        } else {
            self.delta.abs() / self.var.sqrt()
        }
    }

    /// The standard error of the change.
    pub fn stderr(&self) -> f64 {
        self.var.max(0.0).sqrt()
    }
}

/// The upper tail of the standard normal distribution, `P(Z > z)` (relative error below
/// 1.2e-7: Numerical Recipes' `erfcc`).
pub fn normal_sf(z: f64) -> f64 {
    if z.is_nan() {
        return f64::NAN;
    }
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    0.5 * erfc
}

/// The two-sided p-value of `z`.
pub fn p_value(z: f64) -> f64 {
    (2.0 * normal_sf(z.abs())).min(1.0)
}

/// The `z` above which a change is beyond noise when `tests` changes are tested together:
/// two-sided (a change either way) or one-sided (growth only, as for leaks). At least 1.96
/// (one test, two-sided, 95 %).
pub fn threshold(tests: usize, two_sided: bool) -> f64 {
    let tail = FAMILY_ALPHA / tests.max(1) as f64 / if two_sided { 2.0 } else { 1.0 };
    // normal_sf decreases: bisect for normal_sf(z) = tail.
    let (mut lo, mut hi) = (0.0f64, 40.0f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if normal_sf(mid) > tail {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi.max(1.96)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_tail_matches_known_values() {
        assert!((normal_sf(1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_sf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_sf(-1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((p_value(-2.575_829) - 0.01).abs() < 1e-6);
    }

    #[test]
    fn the_threshold_grows_with_the_rows_tested() {
        // One row, two-sided at 1 %: 2.576; 100 rows: 1e-4 / 2 in each tail, 3.891.
        assert!((threshold(1, true) - 2.5758).abs() < 1e-3, "{}", threshold(1, true));
        assert!((threshold(100, true) - 3.8906).abs() < 1e-3, "{}", threshold(100, true));
        assert!((threshold(1, false) - 2.3263).abs() < 1e-3);
        assert!(threshold(1000, true) > threshold(100, true));
    }

    #[test]
    fn the_bound_is_used_only_without_a_standard_error() {
        // 1 MiB at a 64 KiB interval: Var ≤ 1 MiB · 64 KiB, a standard error of 256 KiB.
        let (b, p) = (1048576.0, 65536.0);
        assert_eq!(variance(b, b, p, None).sqrt(), 262_144.0);
        assert_eq!(variance(b, b, p, Some(1000.0)), 1e6);
        assert_eq!(variance(b, b, p, Some(f64::NAN)), b * p, "a bad stderr falls back");
        // 16 blocks of 64 KiB: Var(C) ≤ C²P/B = 256 · 64 KiB / 1 MiB = 16.
        assert_eq!(variance(16.0, b, p, None), 16.0);
        assert_eq!(variance(-b, -b, p, None), b * p, "a negative figure has the same scatter");
        assert_eq!(variance(b, b, 0.0, None), 0.0, "exact mode");
        assert_eq!(variance(b, b, 1.0, None), 0.0, "a period of one byte samples everything");
    }

    #[test]
    fn a_change_is_measured_in_standard_errors() {
        let c = Change::between(100.0, 50.0, 130.0, 50.0);
        assert_eq!(c.delta, 30.0);
        assert_eq!(c.z(), 3.0);
        assert_eq!(Change::between(1.0, 0.0, 2.0, 0.0).z(), f64::INFINITY);
        assert_eq!(Change::between(2.0, 0.0, 2.0, 0.0).z(), 0.0);
    }
}
