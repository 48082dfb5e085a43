//! At a 64 KiB mean interval, per-stack estimates of allocated and retained bytes and counts
//! must land within 4 standard deviations of the truth, for sizes far below, near and above
//! the interval. The variance of a Horvitz-Thompson sum of `n` blocks of `s` bytes sampled with
//! probability `p` is `n * s^2 * (1 - p) / p` (bytes) and `n * (1 - p) / p` (counts).

use std::hint::black_box;
use ying_profiler::{StackStats, YingProfiler, front_end::sampler::sample_probability};

const R: u64 = 64 * 1024;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(R as u32, 64 << 30);

macro_rules! marker {
    ($name:ident) => {
        #[inline(never)]
        fn $name(out: &mut Vec<Box<[u8]>>, n: usize, size: usize) {
            // Its own name keeps the four bodies distinct, so that the compiler cannot merge
            // them into one function (which would give all four stacks one name).
            black_box(stringify!($name));
            for _ in 0..n {
                out.push(black_box(vec![0u8; size].into_boxed_slice()));
            }
        }
    };
}
type Marker = fn(&mut Vec<Box<[u8]>>, usize, usize);

marker!(marker_tiny);
marker!(marker_small);
marker!(marker_near);
marker!(marker_huge);

/// The reported variances of the stacks through `name`: allocated and retained bytes,
/// allocations and retained allocations.
fn variances(stacks: &[StackStats], name: &str) -> [f64; 4] {
    stacks.iter().filter(|s| s.frames.iter().any(|f| f.function.contains(name))).fold(
        [0.0; 4],
        |a, s| {
            let v = &s.variance;
            [
                a[0] + v.allocated_bytes,
                a[1] + v.retained_bytes,
                a[2] + v.num_allocations,
                a[3] + v.retained_count,
            ]
        },
    )
}

fn sum(stacks: &[StackStats], name: &str) -> (f64, f64, f64, f64) {
    stacks.iter().filter(|s| s.frames.iter().any(|f| f.function.contains(name))).fold(
        (0.0, 0.0, 0.0, 0.0),
        |a, s| {
            (
                a.0 + s.allocated_bytes as f64,
                a.1 + s.retained_bytes as f64,
                a.2 + s.num_allocations as f64,
                a.3 + s.retained_count as f64,
            )
        },
    )
}

#[test]
fn estimates_within_four_sigma() {
    // STAT_SEED=n reruns with another seed (30 seeds gave mean z within noise, rms ~1).
    A.settings()
        .set_seed(std::env::var("STAT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261202));
    let cases: [(&str, Marker, usize, usize); 4] = [
        ("marker_tiny", marker_tiny, 200_000, 16),
        ("marker_small", marker_small, 10_000, 1024),
        ("marker_near", marker_near, 300, 64 * 1024),
        ("marker_huge", marker_huge, 20, 1 << 20),
    ];
    let mut keep: Vec<Vec<Box<[u8]>>> = Vec::new();
    for &(_, f, n, size) in &cases {
        let mut v = Vec::with_capacity(n);
        f(&mut v, n, size);
        keep.push(v);
    }
    let snap = A.snapshot();
    for &(name, _, n, size) in &cases {
        let (alloc, ret, count, ret_count) = sum(&snap.stacks, name);
        let p = sample_probability(size as u64, R);
        let sd_bytes = (n as f64 * (size as f64).powi(2) * (1.0 - p) / p).sqrt();
        let sd_count = (n as f64 * (1.0 - p) / p).sqrt();
        let truth_bytes = (n * size) as f64;
        // Rounding of each stack's estimate adds at most 0.5 per stack.
        let slack = 2.0;
        let reported = variances(&snap.stacks, name).map(f64::sqrt);
        for (i, (what, est, truth, sd)) in [
            ("allocated bytes", alloc, truth_bytes, sd_bytes),
            ("retained bytes", ret, truth_bytes, sd_bytes),
            ("allocations", count, n as f64, sd_count),
            ("retained allocations", ret_count, n as f64, sd_count),
        ]
        .into_iter()
        .enumerate()
        {
            let se = reported[i];
            eprintln!(
                "{name}: {what} estimate {est:.0} truth {truth:.0} sd {sd:.0}, reported standard error {se:.0}"
            );
            assert!(
                (est - truth).abs() <= 4.0 * sd + slack,
                "{name}: {what} estimate {est} vs truth {truth} (sd {sd})"
            );
            // The reported standard error estimates the true one: all of these blocks' estimates
            // are made of at least 20 samples, whose variance estimate is within a factor of
            // 1.6 of the truth (at 4 of its own standard deviations, for 20 samples or more).
            if sd > 1.0 {
                assert!(
                    (se / sd - 1.0).abs() < 0.6,
                    "{name}: {what}: reported standard error {se:.0} vs the true {sd:.0}"
                );
            } else {
                assert!(
                    se < 1.0 + slack,
                    "{name}: {what}: standard error {se} for an exact figure"
                );
            }
        }
    }
    drop(keep);
}
