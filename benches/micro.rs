//! Micro-benchmarks of the hot-path pieces, through the public API only. Run by hand:
//!
//! ```sh
//! cargo bench --bench micro
//! ```
//!
//! * allocate+free pairs through `YingProfiler` called directly as a `GlobalAlloc` (it is not
//!   installed as this program's allocator), next to the same pairs through `System`:
//!   - the unsampled path: a mean sampling interval of 1 TiB, so nothing is ever sampled;
//!   - the sampled path: interval 1 (every allocation sampled: stack capture, stack table,
//!     live table, and the table lookups of the free), at stack depths 1, 8, 32 and 64 below
//!     the benchmark (a `#[inline(never)]` recursion);
//! * `snapshot()`: the first call (symbol cache cold) against later calls (every address
//!   already in the cache);
//! * `sampler::weight` and `sampler::sample_probability`;
//! * the free path's filter lookup (`filter::may_contain_in_bytes`) over a small and a large
//!   heap.
//!
//! Each figure is the median of several timed runs, in nanoseconds per operation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Instant;

use ying_profiler::YingProfiler;
use ying_profiler::front_end::{filter, sampler};

/// Never samples: every call takes the unsampled path.
static UNSAMPLED: YingProfiler = YingProfiler::default().with_sample_interval(1 << 40);
/// Samples every allocation.
static EVERY: YingProfiler = YingProfiler::default().with_sample_interval(1);

/// Median of `runs` timings of `f`, each returning nanoseconds per operation.
fn median_of(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    let mut v: Vec<f64> = (0..runs).map(|_| f()).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` allocate+free pairs of `size` bytes through `a`; nanoseconds per pair.
fn pairs<A: GlobalAlloc>(a: &A, size: usize, n: usize) -> f64 {
    let layout = Layout::from_size_align(size, 8).expect("valid layout");
    let start = Instant::now();
    for _ in 0..n {
        // SAFETY: `layout` has a non-zero size; the block is freed once, with the same layout.
        unsafe {
            let p = black_box(a.alloc(layout));
            a.dealloc(p, layout);
        }
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Runs `f` at the bottom of `depth` extra frames of an `#[inline(never)]` recursion.
#[inline(never)]
fn at_depth(depth: usize, f: &mut dyn FnMut() -> f64) -> f64 {
    if depth == 0 {
        return f();
    }
    // The addition after the call keeps it from being a tail call, so each level is a frame.
    black_box(at_depth(black_box(depth - 1), f)) + 0.0
}

/// Sampled pairs at `depth`: every allocation is sampled (interval 1).
fn sampled_pairs(depth: usize, size: usize, n: usize) -> f64 {
    // The per-thread countdown is shared by every `YingProfiler` in the process: make the next
    // allocation a sample so that the interval-1 redraw takes over from whatever came before.
    EVERY.testing_only_guarantee_next_sample();
    at_depth(depth, &mut || pairs(&EVERY, size, n))
}

fn main() {
    let n = 2_000_000;
    println!("allocate+free pairs, ns per pair (median of 5)");
    println!("{:>6} {:>10} {:>14} {:>8}", "size", "System", "Ying unsampled", "extra");
    for size in [16usize, 64, 256, 4096] {
        let sys = median_of(5, || pairs(&System, size, n));
        let ying = median_of(5, || pairs(&UNSAMPLED, size, n));
        println!("{size:>6} {sys:>10.1} {ying:>14.1} {:>8.1}", ying - sys);
    }

    println!(
        "\nsampled path (interval 1: every allocation sampled), 64 B, ns per pair (median of 5)"
    );
    println!("{:>6} {:>12}", "depth", "Ying R=1");
    let n_sampled = 20_000;
    for depth in [1usize, 8, 32, 64] {
        let ns = median_of(5, || sampled_pairs(depth, 64, n_sampled));
        println!("{depth:>6} {ns:>12.1}");
    }

    // Leave some live samples at distinct depths so that the snapshot has stacks to symbolize.
    let layout = Layout::from_size_align(256, 8).expect("valid layout");
    let mut live = Vec::new();
    for depth in [1usize, 8, 32, 64] {
        EVERY.testing_only_guarantee_next_sample();
        at_depth(depth, &mut || {
            // SAFETY: a valid non-zero layout; freed below with the same layout.
            live.push(unsafe { EVERY.alloc(layout) });
            0.0
        });
    }
    let start = Instant::now();
    let first = EVERY.snapshot();
    let cold = start.elapsed().as_nanos() as f64;
    let warm = median_of(5, || {
        let start = Instant::now();
        black_box(EVERY.snapshot());
        start.elapsed().as_nanos() as f64
    });
    println!(
        "\nsnapshot() with {} stacks, {} cached addresses: first call {:.0} ns, later calls \
         {:.0} ns (median of 5)",
        first.stacks.len(),
        first.symbol_cache_entries,
        cold,
        warm
    );
    for p in live {
        // SAFETY: allocated above by `EVERY` with `layout`, freed once.
        unsafe { EVERY.dealloc(p, layout) };
    }

    let interval = sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
    let m = 10_000_000u64;
    let w = median_of(5, || {
        let start = Instant::now();
        let mut acc = 0.0;
        for i in 0..m {
            acc += sampler::weight(black_box(16 + (i & 4095)), interval).bytes;
        }
        black_box(acc);
        start.elapsed().as_nanos() as f64 / m as f64
    });
    let p = median_of(5, || {
        let start = Instant::now();
        let mut acc = 0.0;
        for i in 0..m {
            acc += sampler::sample_probability(black_box(16 + (i & 4095)), interval);
        }
        black_box(acc);
        start.elapsed().as_nanos() as f64 / m as f64
    });
    println!("\nsampler::weight {w:.2} ns/op, sampler::sample_probability {p:.2} ns/op");

    // The free-path filter test alone, over heaps of 1 MiB and 256 MiB of 64-byte blocks: the
    // map's cache footprint grows with the heap (one byte per 256 bytes, up to 512 KiB).
    for heap in [1usize << 20, 256 << 20] {
        let base = 0x7f00_0000_0000usize;
        let addrs: Vec<usize> = (0..1 << 16).map(|i| base + (i * 7919 * 64) % heap).collect();
        let t = median_of(5, || {
            let start = Instant::now();
            let mut hits = 0u64;
            for _ in 0..50 {
                for &a in &addrs {
                    hits += filter::may_contain_in_bytes(filter::byte_map(), black_box(a)) as u64;
                }
            }
            black_box(hits);
            start.elapsed().as_nanos() as f64 / (50 * addrs.len()) as f64
        });
        println!("filter lookup (byte map), heap {} MiB: {t:.2} ns/op", heap >> 20);
    }
}
