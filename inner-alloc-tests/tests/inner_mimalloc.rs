//! The shared workload (`common`) under `YingProfiler<MiMalloc>`: the same stacks and exact
//! figures as under `System`.

mod common;

use mimalloc::MiMalloc;
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler<MiMalloc> = YingProfiler::wrapping(MiMalloc)
    .with_sample_interval(1)
    .with_single_alloc_limit(common::GIANT_LIMIT);

#[test]
fn exact_stacks_and_totals_with_mimalloc_inside() {
    common::check(&A);
}
