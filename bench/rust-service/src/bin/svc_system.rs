//! The service with `System` as the global allocator.
#[global_allocator]
static ALLOC: std::alloc::System = std::alloc::System;
fn main() {
    ying_bench_rust_service::serve_main("system");
}
