//! The cache workload shared by the binaries: 2 threads (one per core of the benchmark machine,
//! so that run-to-run noise stays low), each running a bounded cache
//! (`HashMap` + `VecDeque` for FIFO eviction) of 1-4 KiB string values under string keys, with
//! lookups, inserts, evictions and a small steady leak. Deterministic: fixed seeds, no clock.
//!
//! It is a library, compiled once and linked into every binary, so that the workload's machine
//! code is the same in all of them. As a module compiled into each binary, LLVM inlined it
//! differently next to each global allocator (`HashMap::remove` out of line in one binary, the
//! key formatting in the other), which moved the times by several percent in either direction:
//! that measured codegen, not the allocator.

use std::collections::{HashMap, VecDeque};

/// Threads running a cache each.
pub const THREADS: u64 = 2;
/// Entries a cache holds before it evicts the oldest.
const CAPACITY: usize = 2048;
/// Distinct keys; with `CAPACITY` entries kept, about a quarter of the lookups hit.
const KEYSPACE: u64 = 4 * CAPACITY as u64;
/// One 256 B block is leaked every this many operations.
const LEAK_EVERY: u64 = 1000;

/// Operations per thread: the first command-line argument, or `default`.
pub fn ops_from_args(default: u64) -> u64 {
    std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn next(s: &mut u64) -> u64 {
    let mut x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

fn run_thread(seed: u64, ops: u64, spanned: bool) -> u64 {
    let mut s = seed;
    let mut map: HashMap<String, String> = HashMap::new();
    let mut order: VecDeque<String> = VecDeque::new();
    let mut checksum = 0u64;
    for i in 0..ops {
        // One span per operation, as a request handler instrumented with tracing would have.
        let _span = spanned.then(|| tracing::info_span!("cache_op", thread = seed % 8).entered());
        let r = next(&mut s);
        let key = format!("key-{:08}", r % KEYSPACE);
        if let Some(v) = map.get(&key) {
            checksum = checksum.wrapping_add(v.len() as u64 + u64::from(v.as_bytes()[v.len() / 2]));
        } else {
            let len = 1024 + (next(&mut s) % 3073) as usize;
            let fill = char::from(b'a' + (r % 26) as u8);
            // `str::repeat` (a sized allocation and bulk copies), not a char-by-char collect:
            // whether that loop was inlined differed between the binaries with and without a
            // profiler and moved their times by 10 %, which measured codegen, not allocation.
            let value = fill.to_string().repeat(len);
            order.push_back(key.clone());
            map.insert(key, value);
            if order.len() > CAPACITY
                && let Some(old) = order.pop_front()
            {
                map.remove(&old);
            }
        }
        if i % LEAK_EVERY == 0 {
            std::mem::forget(vec![i as u8; 256]);
        }
    }
    checksum.wrapping_add(map.len() as u64)
}

/// Runs the workload and returns a checksum (printed, so that nothing is optimized away).
pub fn run(ops_per_thread: u64) -> u64 {
    run_impl(ops_per_thread, false)
}

/// The same workload with one `tracing` span entered per operation.
pub fn run_spanned(ops_per_thread: u64) -> u64 {
    run_impl(ops_per_thread, true)
}

fn run_impl(ops_per_thread: u64, spanned: bool) -> u64 {
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let seed = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t + 1);
            std::thread::spawn(move || run_thread(seed, ops_per_thread, spanned))
        })
        .collect();
    handles.into_iter().fold(0, |acc, h| acc ^ h.join().expect("worker thread panicked"))
}

/// Default operations per thread (about 2-3 s with `System` on the reference machine).
pub const DEFAULT_OPS: u64 = 6_000_000;
