//! A `fork` child samples with a countdown of its own (`hooks::restart_after_fork`), so the
//! estimates of many children are independent draws of an unbiased estimator
//! (`programs/fork_children.c`: children that each keep 8 blocks of 10,007 bytes under
//! `marker_child`). Before, every child went on with its parent's countdown: all children of
//! one parent sampled the same blocks or none, so their estimates were one draw repeated (the
//! mean of 100 children was one child's estimate, and their variance zero).

use preload_tests::{EXACT, Run, TestDir, compare, mean_and_stderr, report_sets, seeded};

// Mirrors fork_children.c: 8 blocks of 10007 bytes, counted as glibc chunks (the request plus
// the 8-byte header, rounded up to 16).
const CHILD: f64 = 8.0 * 10016.0;
const CHILDREN: usize = 100;
/// Parent seeds: each run forks `CHILDREN` children.
const SEEDS: [u64; 3] = [11, 12, 13];
const INTERVAL: u64 = 64 * 1024;

#[test]
fn fork_children_estimate_independently_and_without_bias() {
    let dir = TestDir::new("fork-estimates");
    let exe = dir.compile_c("fork_children.c", &[]);
    // The truth, to the byte, from three children in exact mode.
    let exact = compare(&Run::new(&exe).arg("3"), EXACT, &dir.reports("exact"));
    exact.check(exact.with.success(), "fork_children failed under the shim");
    let children: Vec<_> =
        exact.report_sets().into_iter().filter(|s| s.pid != exact.with.pid).collect();
    exact.check(children.len() == 3, "expected a report from each of 3 children");
    for s in &children {
        let bytes = s.folded().bytes_through("marker_child") as f64;
        exact.check(bytes == CHILD, format!("exact mode: marker_child {bytes}, expected {CHILD}"));
    }
    // Sampled: each child's retained estimate of marker_child; a child that took no sample
    // writes no report and estimates 0.
    let mut estimates = Vec::new();
    for seed in SEEDS {
        let reports = dir.reports(&format!("seed-{seed}"));
        let children = CHILDREN.to_string();
        let out = seeded(&exe, &[&children], INTERVAL, seed, &reports, &[]).run();
        out.assert_success(&format!("fork_children under the shim (seed {seed})"));
        let sets: Vec<_> = report_sets(&reports).into_iter().filter(|s| s.pid != out.pid).collect();
        assert!(sets.len() <= CHILDREN, "seed {seed}: {} reports of children", sets.len());
        let mut own: Vec<f64> =
            sets.iter().map(|s| s.folded().bytes_through("marker_child") as f64).collect();
        own.resize(CHILDREN, 0.0);
        estimates.extend(own);
    }
    let (mean, se) = mean_and_stderr(&estimates);
    let n = estimates.len() as f64;
    let var = se * se * n;
    // Each block of s bytes is sampled with p = 1 - exp(-s / interval) and then weighs s / p:
    // the variance of one child's estimate is about 8 s^2 (1 - p) / p.
    let s = CHILD / 8.0;
    let p = 1.0 - (-s / INTERVAL as f64).exp();
    let expected_var = 8.0 * s * s * (1.0 - p) / p;
    let distinct = {
        let mut v: Vec<u64> = estimates.iter().map(|e| *e as u64).collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    println!(
        "{} children: mean {mean:.0} (truth {CHILD}), standard error {se:.0}, variance {:.3} of the expected, {distinct} distinct estimates",
        estimates.len(),
        var / expected_var
    );
    assert!(
        (mean - CHILD).abs() <= 4.0 * se,
        "the children's mean {mean:.0} is {:.1} standard errors from the truth {CHILD}",
        (mean - CHILD) / se
    );
    assert!(
        (0.3..3.0).contains(&(var / expected_var)),
        "the children's estimates vary {:.3} times as much as independent draws would: not independent",
        var / expected_var
    );
    // Equal blocks make estimates whole multiples of one weight; one draw repeated is one value.
    assert!(distinct >= 3, "only {distinct} distinct estimates among {} children", estimates.len());
}
