//! 16 threads with cross-thread frees (`programs/threads.c`): no crash, the same output with and
//! without the shim, and in exact mode the bytes kept by each thread's marker are exact.

use preload_tests::{EXACT, EXACT_ALLOCATED, QUIET, Run, TestDir, compare};

// Mirrors threads.c.
const NTHREADS: u64 = 16;
const ROUNDS: u64 = 40;
const PER_ROUND: u64 = 48;
const KEEP: u64 = NTHREADS * 10 * 5005;

fn size_for(t: u64, r: u64, i: u64) -> u64 {
    (t * 131 + r * 17 + i * 29) % 4000 + 1
}

/// Bytes allocated under marker_thread_handoff: every block, plus 100 bytes of growth for the
/// half that the receiving thread reallocates before freeing (the block keeps its stack).
fn handoff_allocated() -> u64 {
    let mut sum = 0;
    for t in 0..NTHREADS {
        for r in 0..ROUNDS {
            for i in 0..PER_ROUND {
                sum += size_for(t, r, i) + if i % 2 == 1 { 100 } else { 0 };
            }
        }
    }
    sum
}

#[test]
fn sixteen_threads_with_cross_thread_frees_exact_retained() {
    let dir = TestDir::new("threads-exact");
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    let c = compare(&Run::new(&exe), EXACT, &dir.reports("exact"));
    c.check(c.with.success(), "threads.c failed");
    c.assert_no_ying_lines();
    c.check(c.with.stdout_str().starts_with("threads 16 rounds 40 checksum "), "unexpected output");
    let f = c.main_report().folded();
    let keep = f.bytes_through("marker_thread_keep");
    c.check(keep == KEEP, format!("marker_thread_keep retains {keep} bytes, expected {KEEP}"));
    let handoff = f.bytes_through("marker_thread_handoff");
    c.check(handoff == 0, format!("marker_thread_handoff retains {handoff} bytes, all were freed"));
    let text = c.main_report().text_report();
    let live: u64 = text.blocks_through("marker_thread_keep").map(|b| b.retained_count).sum();
    c.check(
        live == NTHREADS * 10,
        format!("{live} live blocks under marker_thread_keep, expected 160"),
    );
}

#[test]
fn sixteen_threads_with_cross_thread_frees_exact_allocated() {
    let dir = TestDir::new("threads-allocated");
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    let c = compare(&Run::new(&exe), EXACT_ALLOCATED, &dir.reports("allocated"));
    c.check(c.with.success(), "threads.c failed");
    c.assert_no_ying_lines();
    let r = c.main_report();
    let f = r.folded();
    let want = handoff_allocated();
    let got = f.bytes_through("marker_thread_handoff");
    c.check(got == want, format!("marker_thread_handoff allocated {got} bytes, expected {want}"));
    let text = r.text_report();
    let blocks: Vec<_> = text.blocks_through("marker_thread_handoff").collect();
    let n: u64 = blocks.iter().map(|b| b.allocations).sum();
    let frees: u64 = blocks.iter().map(|b| b.frees).sum();
    let freed: u64 = blocks.iter().map(|b| b.freed_bytes).sum();
    let blocks_made = NTHREADS * ROUNDS * PER_ROUND;
    c.check(
        n == blocks_made && frees == blocks_made && freed == want,
        format!("marker_thread_handoff: {n} allocations, {frees} frees of {freed} bytes; expected {blocks_made}, {blocks_made}, {want}"),
    );
}

#[test]
fn sixteen_threads_with_default_sampling() {
    let dir = TestDir::new("threads-default");
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    for i in 0..3 {
        let c = compare(&Run::new(&exe), QUIET, &dir.reports(&format!("default-{i}")));
        c.check(c.with.success(), "threads.c failed");
        c.assert_no_ying_lines();
        let text = c.main_report().text_report();
        // Exact totals do not depend on sampling: at least everything still kept.
        let retained = text.header_bytes("retained (exact)").unwrap_or(0);
        c.check(retained >= KEEP, format!("exact retained total {retained} < {KEEP} kept"));
    }
}
