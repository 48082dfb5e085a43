//! Threads that exit keep their place in the exact totals: blocks allocated by a thread that has
//! exited, and frees by threads that only ever free, are all counted, while another thread
//! reads the totals the whole time (a thread leaves the registry of counters as it exits, under
//! the lock readers take).
//!
//! Runs without libtest's harness (`harness = false`): the totals are process-wide, and the
//! harness's own threads would allocate meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::default();

const THREADS: usize = 32;
const GIVEN: usize = 500;
const KEPT: usize = 50;

fn size(t: usize, i: usize) -> usize {
    24 + (t * 131 + i * 29) % 3000
}

fn main() {
    exited_threads_stay_counted();
    println!("exited_threads_stay_counted: ok");
}

fn exited_threads_stay_counted() {
    let before = YingProfiler::total_retained_bytes();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(YingProfiler::total_retained_bytes());
                reads += 1;
            }
            reads
        })
    };
    let mut handles = Vec::with_capacity(THREADS);
    for t in 0..THREADS {
        // Blocks this thread allocates and a new thread frees: that thread never allocates
        // anything of its own before its first free.
        let given: Vec<Box<[u8]>> =
            (0..GIVEN).map(|i| vec![1u8; size(t, i)].into_boxed_slice()).collect();
        handles.push(std::thread::spawn(move || {
            drop(given);
            // Blocks that outlive this thread.
            let mut kept = Vec::with_capacity(KEPT);
            kept.extend((0..KEPT).map(|i| vec![2u8; size(t + 1000, i)].into_boxed_slice()));
            kept
        }));
    }
    let kept: Vec<Vec<Box<[u8]>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let with_kept = YingProfiler::total_retained_bytes();
    // The kept blocks, each thread's vector of them, and the vector of those vectors.
    let kept_bytes: usize = (0..THREADS)
        .map(|t| {
            (0..KEPT).map(|i| size(t + 1000, i)).sum::<usize>()
                + KEPT * std::mem::size_of::<Box<[u8]>>()
        })
        .sum::<usize>()
        + THREADS * std::mem::size_of::<Vec<Box<[u8]>>>();
    drop(kept);
    let without = YingProfiler::total_retained_bytes();
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    let end = YingProfiler::total_retained_bytes();
    assert!(reads > 0);
    // A few hundred bytes of thread bookkeeping (the reader's handle, `stop`) come and go; a
    // thread whose counters were lost at exit would be tens of kilobytes off (its kept blocks),
    // and lost frees of the given blocks megabytes.
    let diff = |a: usize, b: usize| (a as i64 - b as i64).unsigned_abs();
    assert!(
        diff(with_kept - before, kept_bytes) < 4096,
        "exited threads' blocks: total moved by {}, expected about {kept_bytes}",
        with_kept as i64 - before as i64
    );
    assert!(diff(end, before) < 4096, "after freeing everything: {end} retained, {before} before");
    assert_eq!(
        with_kept - without,
        kept_bytes,
        "freeing what exited threads allocated moved the total by {}, not {kept_bytes}",
        with_kept as i64 - without as i64
    );
}
