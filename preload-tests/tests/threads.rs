//! 16 threads with cross-thread frees (`programs/threads.c`): no crash, the same output with and
//! without the shim, and in exact mode the bytes kept by each thread's marker are exact.

use std::path::{Path, PathBuf};

use preload_tests::{
    Comparison, EXACT, EXACT_ALLOCATED, QUIET, Run, TestDir, chunk_counts, compare,
};

// Mirrors threads.c.
const NTHREADS: u64 = 16;
const ROUNDS: u64 = 40;
const PER_ROUND: u64 = 48;
/// 16 threads keep 10 blocks of 5005 bytes each, at least 5024 bytes as glibc chunks (what the
/// shim counts).
const KEEP: u64 = NTHREADS * 10 * 5024;

/// Where threads.c writes its chunk counts for the runs reporting to `reports`.
fn chunks_file(reports: &Path) -> PathBuf {
    reports.with_extension("chunks")
}

/// threads.c under the shim with `vars`, reporting to `reports`; its chunk counts are in
/// `chunks_file(reports)`.
fn run(exe: &Path, vars: &[(&str, &str)], reports: &Path) -> Comparison {
    let run = Run::new(exe).env("CHUNKS_FILE", chunks_file(reports).display().to_string());
    let c = compare(&run, vars, reports);
    c.check(c.with.success(), "threads.c failed");
    c.assert_no_ying_lines();
    c
}

/// The chunk bytes (allocated, freed) threads.c counted for `marker` in the run with the shim.
fn chunks(c: &Comparison, marker: &str) -> (u64, u64) {
    let got = chunk_counts(&chunks_file(&c.reports), marker);
    c.check(got.is_some(), format!("no `chunks {marker} A F` line from threads.c"));
    got.unwrap_or_default()
}

#[test]
fn sixteen_threads_with_cross_thread_frees_exact_retained() {
    let dir = TestDir::new("threads-exact");
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    let c = run(&exe, EXACT, &dir.reports("exact"));
    c.check(c.with.stdout_str().starts_with("threads 16 rounds 40 checksum "), "unexpected output");
    let f = c.main_report().folded();
    let keep = f.bytes_through("marker_thread_keep");
    let (want, freed) = chunks(&c, "marker_thread_keep");
    c.check(
        keep == want && freed == 0 && want >= KEEP,
        format!("marker_thread_keep retains {keep} bytes, expected {want}"),
    );
    let handoff = f.bytes_through("marker_thread_handoff");
    c.check(handoff == 0, format!("marker_thread_handoff retains {handoff} bytes, all were freed"));
    let m = c.main_report().manifest();
    let live: u64 = m.entries_through("marker_thread_keep").map(|b| b.retained_count).sum();
    c.check(
        live == NTHREADS * 10,
        format!("{live} live blocks under marker_thread_keep, expected 160"),
    );
}

#[test]
fn sixteen_threads_with_cross_thread_frees_exact_allocated() {
    let dir = TestDir::new("threads-allocated");
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    let c = run(&exe, EXACT_ALLOCATED, &dir.reports("allocated"));
    let r = c.main_report();
    let f = r.folded();
    let (want, freed_want) = chunks(&c, "marker_thread_handoff");
    let got = f.bytes_through("marker_thread_handoff");
    c.check(got == want, format!("marker_thread_handoff allocated {got} bytes, expected {want}"));
    let m = r.manifest();
    let blocks: Vec<_> = m.entries_through("marker_thread_handoff").collect();
    let n: u64 = blocks.iter().map(|b| b.allocations).sum();
    let frees: u64 = blocks.iter().map(|b| b.frees).sum();
    let freed: u64 = blocks.iter().map(|b| b.freed_bytes).sum();
    let blocks_made = NTHREADS * ROUNDS * PER_ROUND;
    c.check(
        n == blocks_made && frees == blocks_made && freed == want && freed_want == want,
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
        // Exact totals do not depend on sampling: at least everything still kept.
        let retained = c.main_report().manifest().totals.retained_bytes;
        c.check(retained >= KEEP, format!("exact retained total {retained} < {KEEP} kept"));
    }
}
