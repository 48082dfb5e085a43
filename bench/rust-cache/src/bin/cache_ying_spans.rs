//! The cache workload with one `tracing` span entered per operation and this repository's
//! `YingProfiler` as the global allocator. Built with `--features spans`, Ying's `YingSpanLayer`
//! is installed and every sample records its span path; built without, the same spans are
//! entered with no Ying layer. `scripts/bench.sh` times one against the other.

use ying_bench_rust_cache as workload;

use tracing_subscriber::prelude::*;
use ying_profiler::YingProfiler;

#[global_allocator]
static YING: YingProfiler = YingProfiler::default();

fn main() {
    // The same subscriber shape in both builds: a registry with one layer, Ying's or a no-op
    // (a bare registry with no layer at all was measured to grow to 840 MB on this workload).
    let registry = tracing_subscriber::registry();
    #[cfg(feature = "spans")]
    let registry = registry.with(ying_profiler::spans::YingSpanLayer);
    #[cfg(not(feature = "spans"))]
    let registry = registry.with(tracing_subscriber::layer::Identity::new());
    registry.init();
    let ops = workload::ops_from_args(workload::DEFAULT_OPS);
    let sum = workload::run_spanned(ops);
    let top = YING.top_k_stacks_by_allocated(5);
    let spans = top.first().map_or(0, |s| s.spans.len());
    println!(
        "cache-ying-spans ({}): {ops} ops x {} threads, checksum {sum:016x}; {} stacks, top allocating stack has {spans} span(s)",
        if cfg!(feature = "spans") { "spans on" } else { "spans off" },
        workload::THREADS,
        YING.num_stack_traces()
    );
}
