//! The service with `YingProfiler<MiMalloc>` (default settings) as the global allocator.
use ying_profiler::YingProfiler;
#[global_allocator]
static ALLOC: YingProfiler<mimalloc::MiMalloc> = YingProfiler::wrapping(mimalloc::MiMalloc);
fn main() {
    ying_bench_rust_service::serve_main("ying-mimalloc");
    eprintln!("ying: {} stacks sampled", ALLOC.num_stack_traces());
}
