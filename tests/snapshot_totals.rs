//! Taking snapshots leaves the program's exact totals alone: what the profiler allocates for a
//! snapshot (addresses to symbolize, per-stack ages, the internal copies of the tables) is
//! allocated and freed as profiler memory, and what it hands to the caller (the snapshot's
//! stacks) is allocated and freed as the program's. Before the fix, a vector allocated inside
//! the profiler guard was freed outside it, so every snapshot moved bytes from the program's
//! retained total to the profiler's; after 1,000 snapshots the program's total went negative.
//!
//! One test in this binary: the totals are process-wide, and the harness's main thread only
//! waits while it runs.

use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::default().with_sample_interval(4096);

/// Allocated minus freed by the program, without the clamp at zero of `retained_bytes`.
fn program_retained() -> i128 {
    let t = YingProfiler::totals();
    t.allocated_bytes as i128 - t.freed_bytes as i128
}

#[inline(never)]
fn keep_some(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i as u8; 1000 + i * 7]).collect()
}

#[test]
fn a_thousand_snapshots_leave_the_program_totals_unchanged() {
    let kept = keep_some(2000);
    // Warm up: the first snapshot fills the symbol cache (profiler memory) and any lazily
    // initialised state of the standard library.
    let first = A.snapshot();
    assert!(!first.stacks.is_empty(), "no sampled stacks: the test would prove nothing");
    let stacks = first.stacks.len();
    drop(first);
    let before = program_retained();
    for _ in 0..1000 {
        let snap = A.snapshot();
        assert!(snap.stacks.len() >= stacks);
        drop(snap);
        // The other ways stats leave the profiler.
        drop(A.top_k_stacks_by_retained(5));
        assert!(A.num_stack_traces() > 0 && A.symbol_map_size() > 0);
    }
    let after = program_retained();
    assert_eq!(
        after - before,
        0,
        "1,000 snapshots changed the program's retained total by {} bytes",
        after - before
    );
    assert!(after > 0, "the program's retained total is {after}");
    drop(kept);
}
