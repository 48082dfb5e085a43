//! The pieces every statistical test repeats: one seeded run of a program under the shim, and
//! the mean and standard error of a figure over the seeds. A statistical claim is tested over
//! many seeds (the mean within a few standard errors of the truth), never on one lucky seed.

use std::path::Path;

use crate::{ReportSet, Run, report_sets};

/// The run of `exe args` under the shim at a mean sampling interval of `interval` bytes with
/// `YING_SEED=seed`, writing into `reports` (exit report only, no flamegraph, `extra` on top).
pub fn seeded(
    exe: &Path,
    args: &[&str],
    interval: u64,
    seed: u64,
    reports: &Path,
    extra: &[(&str, &str)],
) -> Run {
    Run::new(exe)
        .args(args)
        .with_preload()
        .envs(&[
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_GEN_FLAMEGRAPHS", "false"),
            ("YING_TOP_K", "1"),
        ])
        .env("YING_SAMPLE_INTERVAL_BYTES", interval.to_string())
        .env("YING_SEED", seed.to_string())
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .envs(extra)
}

/// Runs [`seeded`] and returns the last report set it wrote. Fails the test if the program
/// fails or writes none.
pub fn seeded_run(
    exe: &Path,
    args: &[&str],
    interval: u64,
    seed: u64,
    reports: &Path,
    extra: &[(&str, &str)],
) -> ReportSet {
    let out = seeded(exe, args, interval, seed, reports, extra).run();
    out.assert_success(&format!("{} {args:?} under the shim (seed {seed})", exe.display()));
    report_sets(reports)
        .pop()
        .unwrap_or_else(|| panic!("seed {seed}: no report set in {}", reports.display()))
}

/// The mean of `xs` and its standard error (the sample standard deviation over `sqrt(n)`).
pub fn mean_and_stderr(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    assert!(xs.len() >= 2, "a standard error needs two values at least");
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_stderr_of_known_values() {
        let (m, se) = mean_and_stderr(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        // Sample variance 5/3, over 4.
        assert!((se - (5.0f64 / 3.0 / 4.0).sqrt()).abs() < 1e-12);
    }
}
