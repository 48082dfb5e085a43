//! The service with tikv-jemallocator as the global allocator (built with `profiling`; the
//! profiler is on only when `_RJEM_MALLOC_CONF` says `prof:true`).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
fn main() {
    ying_bench_rust_service::serve_main("jemalloc");
}
