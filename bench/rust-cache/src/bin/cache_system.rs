//! The cache workload with `System` as the global allocator (the baseline).

use ying_bench_rust_cache as workload;

#[global_allocator]
static ALLOC: std::alloc::System = std::alloc::System;

fn main() {
    let ops = workload::ops_from_args(workload::DEFAULT_OPS);
    let sum = workload::run(ops);
    println!("cache-system: {ops} ops x {} threads, checksum {sum:016x}", workload::THREADS);
}
