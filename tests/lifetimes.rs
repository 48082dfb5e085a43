//! Lifetime histograms see real time: a block kept for over a second lands in the `<=10s`
//! bucket, blocks freed at once in `<=1ms`, and retained bytes have an age.

use std::hint::black_box;
use std::time::Duration;
use ying_profiler::YingProfiler;
use ying_profiler::histogram::bucket_of;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_short_lived() {
    for _ in 0..10 {
        drop(black_box(vec![1u8; 100]));
    }
}

#[inline(never)]
fn marker_long_lived() -> Vec<u8> {
    black_box(vec![2u8; 300])
}

#[inline(never)]
fn marker_kept() -> Vec<u8> {
    black_box(vec![3u8; 500])
}

#[test]
fn histograms_use_real_clocks() {
    marker_short_lived();
    let long = marker_long_lived();
    let kept = marker_kept();
    std::thread::sleep(Duration::from_millis(1100));
    drop(long);
    let snap = A.snapshot();
    let find = |n: &str| {
        snap.stacks
            .iter()
            .find(|s| s.frames.iter().any(|f| f.function.contains(n)))
            .unwrap()
            .clone()
    };
    // The compiler may unroll the loop: each copy of the call is a stack of its own.
    let short: u64 = snap
        .stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.function.contains("marker_short_lived")))
        .map(|s| s.lifetimes.counts()[bucket_of(0)])
        .sum();
    assert_eq!(short, 10);
    let long_s = find("marker_long_lived");
    assert_eq!(long_s.lifetimes.counts()[bucket_of(1100)], 1, "{:?}", long_s.lifetimes);
    assert!(long_s.lifetimes.average_millis() >= 1100.0);
    let kept_s = find("marker_kept");
    assert!(kept_s.lifetimes.is_empty());
    assert!(kept_s.retained_age.average_millis() >= 1100.0, "{:?}", kept_s.retained_age);
    assert_eq!(kept_s.retained_age.total().round() as u64, 500, "weighted by retained bytes");
    drop(kept);
}
