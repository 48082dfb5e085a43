//! The service with `YingProfiler<System>` (default settings) as the global allocator.
use ying_profiler::YingProfiler;
#[global_allocator]
static ALLOC: YingProfiler = YingProfiler::default();
fn main() {
    ying_bench_rust_service::serve_main("ying-system");
    eprintln!("ying: {} stacks sampled", ALLOC.num_stack_traces());
}
