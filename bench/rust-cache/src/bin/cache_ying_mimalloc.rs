//! The cache workload with `YingProfiler<MiMalloc>` as the global allocator: default settings
//! (512 KiB mean sampling interval), no reporting thread, stats read once at the end, as
//! `cache-ying`.

use ying_bench_rust_cache as workload;

use mimalloc::MiMalloc;
use ying_profiler::YingProfiler;

#[global_allocator]
static YING: YingProfiler<MiMalloc> = YingProfiler::wrapping(MiMalloc);

fn main() {
    let ops = workload::ops_from_args(workload::DEFAULT_OPS);
    let sum = workload::run(ops);
    let top = YING.top_k_stacks_by_retained(5);
    let top_bytes = top.first().map_or(0, |s| s.allocated_bytes.saturating_sub(s.freed_bytes));
    println!(
        "cache-ying-mimalloc: {ops} ops x {} threads, checksum {sum:016x}; {} stacks, top retained {top_bytes} B",
        workload::THREADS,
        YING.num_stack_traces()
    );
}
