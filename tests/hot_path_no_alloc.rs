//! The unsampled allocate/free path allocates nothing: with sampling effectively off, a million
//! allocate/free pairs of 8 bytes move the exact allocated and freed bytes by exactly 8 million
//! each and the profiler's own memory by nothing.
//!
//! The totals are process-wide, so this test runs without libtest's harness (`harness = false`
//! in Cargo.toml): the harness's own thread allocated now and then while the loop ran, and the
//! count came out a few over a million in about one run in ten.

use std::hint::black_box;
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::default();

fn main() {
    unsampled_path_makes_no_allocation_of_its_own();
    println!("unsampled_path_makes_no_allocation_of_its_own: ok");
}

fn unsampled_path_makes_no_allocation_of_its_own() {
    // A huge interval: no sample in this test (the first draw happens at the first allocation).
    A.settings().set_sample_interval(1 << 60);
    A.testing_only_guarantee_next_sample();
    drop(black_box(vec![0u8; 8]));
    let before = YingProfiler::totals();
    const N: u64 = 1_000_000;
    for i in 0..N {
        let b = black_box(Box::new(i));
        drop(b);
    }
    let after = YingProfiler::totals();
    assert_eq!(after.profiler_bytes, before.profiler_bytes);
    assert_eq!(after.allocated_bytes - before.allocated_bytes, N * 8);
    assert_eq!(after.freed_bytes - before.freed_bytes, N * 8);
}
