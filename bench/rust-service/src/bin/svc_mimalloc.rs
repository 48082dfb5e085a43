//! The service with mimalloc as the global allocator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
fn main() {
    ying_bench_rust_service::serve_main("mimalloc");
}
