//! The shared workload (`common`) under `YingProfiler<System>`, in the seed's form.

mod common;

use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, common::GIANT_LIMIT as usize);

#[test]
fn exact_stacks_and_totals_with_system_inside() {
    common::check(&A);
}
