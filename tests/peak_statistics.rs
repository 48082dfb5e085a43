//! The peak view's figures as statistics: over many seeds, the kept peak's estimated total is
//! an unbiased estimate of the exact retained bytes at the same moment (mean within a few
//! standard errors), and a program that grows in many small steps, or goes up and down many
//! times, keeps a number of peaks logarithmic in its growth, not in its samples.

use std::hint::black_box;
use std::sync::Mutex;

use ying_profiler::YingProfiler;

const R: u64 = 64 * 1024;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(R as u32, 64 << 30);

/// The tests share the allocator's tables: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[inline(never)]
fn grow_and_free(blocks: usize, size: usize) {
    let held: Vec<Box<[u8]>> =
        (0..blocks).map(|_| black_box(vec![1u8; size].into_boxed_slice())).collect();
    drop(black_box(held));
}

#[test]
fn kept_peak_estimate_is_unbiased_over_seeds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (blocks, size) = (2048usize, 4096usize); // 8 MiB held at the top
    let trials = std::env::var("PEAK_TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    let mut diffs = Vec::new();
    let mut exacts = Vec::new();
    for seed in 0..trials {
        A.reset_state_for_testing_only();
        A.settings().set_seed(1000 + seed);
        // The program's memory outside the trial (the harness, the results so far): the exact
        // totals count it, the estimate (reset above) does not.
        let base = YingProfiler::total_retained_bytes() as f64;
        // A thread of its own: a thread's generator is seeded when it is set up.
        std::thread::spawn(move || grow_and_free(blocks, size)).join().unwrap();
        let peak = A.snapshot().peak.expect("a peak was kept");
        let exact = peak.exact_bytes.expect("exact totals read at the peak") as f64 - base;
        diffs.push(peak.estimated_bytes as f64 - exact);
        exacts.push(exact);
    }
    let n = diffs.len() as f64;
    let mean = diffs.iter().sum::<f64>() / n;
    let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let se = sd / n.sqrt();
    let mean_exact = exacts.iter().sum::<f64>() / n;
    println!("mean exact at peak {mean_exact:.0}, mean error {mean:.0}, sd {sd:.0}, se {se:.0}");
    // The kept peak is near the top: within the 5 % margin (and a sample or two) of 8 MiB.
    assert!(mean_exact > 0.9 * (blocks * size) as f64, "kept far below the top: {mean_exact}");
    // Each estimate's spread is about sqrt(total * R) (Horvitz-Thompson), and the mean error
    // within 4 standard errors of zero.
    let expected_sd = (mean_exact * R as f64).sqrt();
    assert!(sd < 2.0 * expected_sd, "spread {sd:.0} against about {expected_sd:.0}");
    assert!(mean.abs() < 4.0 * se, "biased: mean error {mean:.0}, standard error {se:.0}");
}

#[test]
fn small_steps_keep_a_logarithmic_number_of_peaks() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    A.reset_state_for_testing_only();
    let step = 1024usize;
    let steps = 40_000usize; // 40 MiB in 1 KiB steps: about 600 samples
    let mut held: Vec<Box<[u8]>> = Vec::with_capacity(steps);
    for _ in 0..steps {
        held.push(black_box(vec![1u8; step].into_boxed_slice()));
    }
    // Then up and down by a tenth of it many times: no new peak beyond the margin.
    for _ in 0..50 {
        let top = held.split_off(held.len() - steps / 10);
        drop(top);
        for _ in 0..steps / 10 {
            held.push(black_box(vec![1u8; step].into_boxed_slice()));
        }
    }
    let snap = A.snapshot();
    drop(held);
    let peak = snap.peak.expect("a peak was kept");
    let samples: u64 = snap.stacks.iter().map(|s| s.samples).sum();
    // From the first sample (about R) to the top, a peak per 5 % of growth.
    let bound = ((peak.high_water_bytes as f64 / R as f64).ln() / 1.05f64.ln()).ceil() as u64;
    println!("{} peaks kept for {samples} samples (bound {bound})", peak.captures);
    assert!(samples > 5 * bound, "too few samples for the test to mean anything: {samples}");
    assert!(peak.captures <= bound + 2, "{} peaks kept, bound {bound}", peak.captures);
    assert!(peak.captures >= bound / 2, "{} peaks kept, bound {bound}", peak.captures);
}
