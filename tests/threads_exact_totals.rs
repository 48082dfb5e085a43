//! Sixteen threads allocate and free each other's blocks; the exact total of retained bytes
//! must move by exactly what stays allocated, with no shared counter written on every call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::default();

const THREADS: usize = 16;
const PER_THREAD: usize = 2000;

#[test]
fn cross_thread_frees_keep_total_exact() {
    // Pointer slots are allocated up front so the measured phase allocates only blocks.
    let slots: Arc<Vec<AtomicUsize>> =
        Arc::new((0..THREADS * PER_THREAD).map(|_| AtomicUsize::new(0)).collect());
    // `ready`: every thread has finished starting (std frees the boxed spawn closure on the new
    // thread), so nothing but the measured work happens between the two readings.
    let ready = Arc::new(Barrier::new(THREADS + 1));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let allocated = Arc::new(Barrier::new(THREADS + 1));
    let freed = Arc::new(Barrier::new(THREADS + 1));
    // `measured`: threads stay alive until both readings are taken (a thread's exit frees what
    // std allocated when it started).
    let measured = Arc::new(Barrier::new(THREADS + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (slots, ready, start, allocated, freed, measured) = (
                Arc::clone(&slots),
                Arc::clone(&ready),
                Arc::clone(&start),
                Arc::clone(&allocated),
                Arc::clone(&freed),
                Arc::clone(&measured),
            );
            std::thread::spawn(move || {
                ready.wait();
                start.wait();
                for i in 0..PER_THREAD {
                    let size = 16 + (i * 37 + t * 101) % 4000;
                    let b: Box<[u8]> = vec![t as u8; size].into_boxed_slice();
                    slots[t * PER_THREAD + i]
                        .store(Box::into_raw(b) as *mut u8 as usize, Ordering::Release);
                }
                allocated.wait();
                // Free the blocks of the next thread, except every 10th, which stays.
                let victim = (t + 1) % THREADS;
                for i in (0..PER_THREAD).filter(|i| i % 10 != 0) {
                    let p = slots[victim * PER_THREAD + i].swap(0, Ordering::AcqRel) as *mut u8;
                    let size = 16 + (i * 37 + victim * 101) % 4000;
                    // SAFETY: the pointer came from `Box::into_raw` of a boxed slice of `size`.
                    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, size)) });
                }
                freed.wait();
                measured.wait();
            })
        })
        .collect();
    ready.wait();
    let before = YingProfiler::total_retained_bytes();
    start.wait();
    allocated.wait();
    freed.wait();
    let after = YingProfiler::total_retained_bytes();
    measured.wait();
    let kept: usize = (0..THREADS)
        .flat_map(|t| {
            (0..PER_THREAD).filter(|i| i % 10 == 0).map(move |i| 16 + (i * 37 + t * 101) % 4000)
        })
        .sum();
    assert_eq!(
        after - before,
        kept,
        "exact total moved by {} not {kept}",
        after as i64 - before as i64
    );
    for h in handles {
        h.join().unwrap();
    }
    // Free what was kept; the total comes back down by exactly that.
    let mid = YingProfiler::total_retained_bytes();
    for t in 0..THREADS {
        for i in (0..PER_THREAD).filter(|i| i % 10 == 0) {
            let p = slots[t * PER_THREAD + i].swap(0, Ordering::AcqRel) as *mut u8;
            let size = 16 + (i * 37 + t * 101) % 4000;
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, size)) });
        }
    }
    assert_eq!(mid - YingProfiler::total_retained_bytes(), kept);
}
