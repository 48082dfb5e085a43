//! The cache workload with tikv-jemallocator as the global allocator (built with `profiling`;
//! jemalloc's profiler is on only when `_RJEM_MALLOC_CONF` says `prof:true`).

use ying_bench_rust_cache as workload;

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let ops = workload::ops_from_args(workload::DEFAULT_OPS);
    let sum = workload::run(ops);
    println!("cache-jemalloc: {ops} ops x {} threads, checksum {sum:016x}", workload::THREADS);
}
