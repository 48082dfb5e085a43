//! The shared workload (`common`) under `YingProfiler<Jemalloc>`: the same stacks and exact
//! figures as under `System`.

mod common;

use tikv_jemallocator::Jemalloc;
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler<Jemalloc> = YingProfiler::wrapping(Jemalloc)
    .with_sample_interval(1)
    .with_single_alloc_limit(common::GIANT_LIMIT);

#[test]
fn exact_stacks_and_totals_with_jemalloc_inside() {
    common::check(&A);
}
