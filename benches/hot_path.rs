//! Allocate+free pairs of 16 B..4 KiB through `System` and through `YingProfiler` at the default
//! interval and at R = 1 (every allocation sampled), single- and multi-threaded. Prints ns per
//! pair and the ratio to `System`. Run by hand: `cargo bench --bench hot_path`.
//!
//! The profilers are called directly (not installed as the global allocator), so the numbers
//! are the hooks' own cost on top of the same `System` calls.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::time::Instant;

use ying_profiler::YingProfiler;

static DEFAULT_R: YingProfiler = YingProfiler::default();

/// `System` behind a non-inlined call, as every `#[global_allocator]` is reached through
/// `__rust_alloc`: the fair baseline for the front end's own cost.
struct Wrapped;

// SAFETY: forwards every call to `System` unchanged.
unsafe impl GlobalAlloc for Wrapped {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}
static EVERY: YingProfiler = YingProfiler::new(1, 64 << 30);

fn pairs<A: GlobalAlloc>(a: &A, size: usize, n: usize) -> f64 {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let start = Instant::now();
    for _ in 0..n {
        // SAFETY: a valid non-zero layout; each block is freed with the same layout.
        unsafe {
            let p = black_box(a.alloc(layout));
            a.dealloc(p, layout);
        }
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn threaded<A: GlobalAlloc + Sync>(a: &'static A, size: usize, n: usize, threads: usize) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads).map(|_| std::thread::spawn(move || pairs(a, size, n))).collect();
    for h in hs {
        h.join().unwrap();
    }
    start.elapsed().as_nanos() as f64 / (n * threads) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let n = 2_000_000;
    let threads = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(2).max(2);
    println!("allocate+free pairs; ns per pair (median of 5); ratio to System");
    println!(
        "{:>6} {:>10} {:>10} {:>7} {:>10} {:>9}",
        "size", "System", "Ying", "ratio", "Ying R=1", "ratio"
    );
    for size in [16usize, 64, 256, 1024, 4096] {
        let ying = std::thread::spawn(move || {
            median((0..5).map(|_| pairs(&DEFAULT_R, size, n)).collect())
        })
        .join()
        .unwrap();
        let raw = median((0..5).map(|_| pairs(&System, size, n)).collect());
        let sys = median((0..5).map(|_| pairs(&Wrapped, size, n)).collect());
        // On a fresh thread: the countdown is per thread, drawn from the profiler that set it up.
        let every = std::thread::spawn(move || {
            median((0..3).map(|_| pairs(&EVERY, size, 20_000)).collect())
        })
        .join()
        .unwrap();
        println!(
            "{size:>6} {raw:>8.1} {sys:>10.1} {ying:>8.1} {:>7.3} {every:>10.1} {:>9.1}",
            ying / sys,
            every / sys
        );
    }
    println!("\n{threads} threads, 64 B pairs");
    static WRAPPED: Wrapped = Wrapped;
    let sys = median((0..5).map(|_| threaded(&WRAPPED, 64, n, threads)).collect());
    let ying = median((0..5).map(|_| threaded(&DEFAULT_R, 64, n, threads)).collect());
    println!("System {sys:.1} ns  Ying {ying:.1} ns  ratio {:.3}", ying / sys);
}
