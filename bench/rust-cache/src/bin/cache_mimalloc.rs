//! The cache workload with mimalloc as the global allocator (the baseline of the mimalloc pair).

use ying_bench_rust_cache as workload;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let ops = workload::ops_from_args(workload::DEFAULT_OPS);
    let sum = workload::run(ops);
    println!("cache-mimalloc: {ops} ops x {} threads, checksum {sum:016x}", workload::THREADS);
}
