//! The giant limit does not bias the estimates. A thread's budget is its sampling countdown
//! capped at `YING_MAX_ALLOC_BYTES`, so that a giant request always reaches the slow path;
//! when the cap, not the countdown, runs out, the block must be sampled only if the
//! countdown's marked byte lies in it (`sample::ran_out`). Sampling at every cap's end instead
//! made the estimates read high whenever the interval is not far below the limit: 1.63 times
//! the exact allocated bytes on `bench/churn1.c` at a 1 MiB interval and a 1 MiB limit.
//!
//! Each pattern of `programs/error_bars.c` (`malloc`, `calloc`, `memalign`, blocks near the
//! interval, realloc growth and shrink, anonymous mappings) runs under the shim at a 64 KiB
//! interval and a 64 KiB limit (a draw is capped with probability 1/e), over `SEEDS` seeds: the
//! mean of `sampled / exact`, for retained and allocated bytes, must be 1 within four standard
//! errors. With the bug, `malloc`'s read about 1.5.

use preload_tests::{TestDir, mean_and_stderr, seeded_run};

const SEEDS: u64 = 200;

#[test]
fn estimates_are_unbiased_with_the_interval_at_the_giant_limit() {
    let dir = TestDir::new("giant-limit-estimates");
    let exe = dir.compile_c("error_bars.c", &[]);
    let mut failures = Vec::new();
    for mode in ["small", "calloc", "memalign", "large", "realloc", "mmap"] {
        let mut ratios: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for seed in 0..SEEDS {
            let reports = dir.reports(&format!("{mode}-{seed}"));
            let limit = [("YING_MAX_ALLOC_BYTES", "65536")];
            let m = seeded_run(&exe, &[mode], 65536, 3000 + seed, &reports, &limit).manifest();
            assert_eq!(m.stacks.giant_refused, 0, "{mode}: a block was refused as giant");
            let (t, e) = (&m.totals, &m.estimated);
            ratios[0].push(e.retained_bytes as f64 / t.retained_bytes as f64);
            ratios[1].push(e.allocated_bytes as f64 / t.allocated_bytes as f64);
        }
        for (xs, what) in ratios.iter().zip(["retained", "allocated"]) {
            let (mean, se) = mean_and_stderr(xs);
            eprintln!("{mode}: {what} sampled / exact: mean {mean:.4}, standard error {se:.4}");
            if (mean - 1.0).abs() > 4.0 * se + 1e-3 {
                failures.push(format!("{mode} {what}: mean {mean:.4}, standard error {se:.4}"));
            }
        }
    }
    assert!(failures.is_empty(), "biased estimates at the giant limit: {failures:?}");
}
