//! Exact mode (`YING_SAMPLE_INTERVAL_BYTES=1`): the bytes the profile attributes to each marker
//! function of `programs/exact.c` equal what the program allocated, to the byte, for retained
//! and for allocated bytes, and the text report names the markers with their `file:line`.
//!
//! The shim counts glibc chunks (usable size plus the 8-byte header) in every figure, so the
//! program counts its blocks' chunks itself and writes them to `$CHUNKS_FILE` (see
//! `chunk_counts`): a realloc's growth is allocated bytes, its shrink freed bytes.

use std::path::{Path, PathBuf};

use preload_tests::{
    Comparison, EXACT, EXACT_ALLOCATED, Run, TestDir, chunk_counts, compare, tagged_line,
};

/// (marker, live allocations, allocations) as exact.c makes them; see the comments there.
const MARKERS: &[(&str, u64, u64)] = &[
    ("marker_keep", 100, 100),
    ("marker_churn", 0, 50),
    // Each calloc follows a malloc + free of the same size (to dirty the memory it reuses).
    ("marker_calloc", 10, 20),
    ("marker_posix_memalign", 20, 20),
    // malloc(1000) -> realloc 30000 -> realloc 2000: one allocation that grew, then shrank.
    ("marker_realloc_chain", 5, 5),
    ("marker_aligned_alloc", 0, 4),
    ("marker_valloc", 6, 6),
    ("marker_realloc_zero", 0, 3),
    ("marker_realloc_null", 12, 12),
];

/// Where exact.c writes its chunk counts for the runs reporting to `reports`.
fn chunks_file(reports: &Path) -> PathBuf {
    reports.with_extension("chunks")
}

/// The chunk bytes (allocated, freed) exact.c counted for `marker` in the run with the shim
/// (the second run, so the file holds its figures).
fn chunks(c: &Comparison, marker: &str) -> (u64, u64) {
    let got = chunk_counts(&chunks_file(&c.reports), marker);
    c.check(got.is_some(), format!("no `chunks {marker} A F` line from exact.c"));
    got.unwrap_or_default()
}

/// Markers whose allocation call site is tagged `TAG:<marker>` in exact.c.
const TAGGED: &[&str] = &[
    "marker_keep",
    "marker_churn",
    "marker_calloc",
    "marker_posix_memalign",
    "marker_realloc_chain",
];

fn run_exact(name: &str, vars: &[(&str, &str)]) -> (TestDir, Comparison) {
    let dir = TestDir::new(name);
    let exe = dir.compile_c("exact.c", &[]);
    let reports = dir.reports(name);
    let run = Run::new(&exe).env("CHUNKS_FILE", chunks_file(&reports).display().to_string());
    let c = compare(&run, vars, &reports);
    c.check(c.with.success(), "exact.c failed");
    c.check(c.with.stdout_str().starts_with("kept 153 blocks, checksum "), "unexpected output");
    c.assert_no_ying_lines();
    (dir, c)
}

/// The text report names each tagged marker that `listed` selects as `marker (/.../exact.c:N)`,
/// N being the tagged line. (A report lists only stacks with a non-zero figure of its measure.)
fn check_locations(c: &Comparison, listed: impl Fn(&str) -> bool) {
    let m = c.main_report().manifest();
    for marker in TAGGED.iter().filter(|m| listed(m)) {
        let line = tagged_line("exact.c", &format!("TAG:{marker} "));
        let want = format!("exact.c:{line}");
        let frames: Vec<_> = m.frames_named(marker).collect();
        c.check(!frames.is_empty(), format!("the text report does not name {marker}"));
        c.check(
            frames.iter().any(|f| {
                f.location.as_deref().is_some_and(|l| l.ends_with(&want) && l.starts_with('/'))
            }),
            format!("no frame `{marker} (/.../{want})` in the text report; found {frames:#?}"),
        );
    }
}

#[test]
fn exact_mode_retained_bytes_match_per_marker() {
    let (_dir, c) = run_exact("exact-retained", EXACT);
    let r = c.main_report();
    c.check(r.has("txt") && r.has("folded") && r.has("svg"), "incomplete report set");
    let folded = r.folded();
    let m = r.manifest();
    c.check(m.sample_interval_bytes == 1, "the report does not show exact mode");
    for &(marker, live, _) in MARKERS {
        let (allocated, freed) = chunks(&c, marker);
        let retained = allocated - freed;
        let got = folded.bytes_through(marker);
        c.check(
            got == retained,
            format!("{marker}: folded retained {got} bytes, expected {retained}"),
        );
        let blocks: Vec<_> = m.entries_through(marker).collect();
        let bytes: u64 = blocks.iter().map(|b| b.retained_bytes).sum();
        let count: u64 = blocks.iter().map(|b| b.retained_count).sum();
        c.check(
            bytes == retained && count == live,
            format!("{marker}: text report retains {bytes} bytes in {count} allocations, expected {retained} in {live}"),
        );
    }
    check_locations(&c, |m| MARKERS.iter().any(|x| x.0 == m && x.1 > 0));
    // Summed over every stack, the estimates are the exact totals (the shim's start-up
    // allocations, made before sampling is switched on, aside).
    let (exact, sampled) = (m.totals.retained_bytes, m.estimated.retained_bytes);
    c.check(
        exact >= sampled && exact - sampled < 64 * 1024,
        format!("retained: exact {exact} bytes, sampled {sampled}"),
    );
}

#[test]
fn exact_mode_allocated_bytes_match_per_marker() {
    let (_dir, c) = run_exact("exact-allocated", EXACT_ALLOCATED);
    let r = c.main_report();
    let folded = r.folded();
    let m = r.manifest();
    c.check(m.ranked_by == "allocated", "the report is not ranked by allocated bytes");
    // Each entry leads with the figure it is ranked by (marker_churn retains nothing: its
    // entry must not open with "retained 0 B").
    let raw = r.text();
    let entries: Vec<&str> = raw.lines().filter(|l| l.starts_with('#')).collect();
    c.check(!entries.is_empty(), "the allocated-ranked text report lists no stack");
    for line in &entries {
        let led = line.split_once(' ').is_some_and(|(_, rest)| rest.starts_with("allocated "));
        c.check(led, format!("entry not led by its allocated figure: {line}"));
    }
    for &(marker, live, allocations) in MARKERS {
        let (allocated, freed) = chunks(&c, marker);
        let got = folded.bytes_through(marker);
        c.check(
            got == allocated,
            format!("{marker}: folded allocated {got} bytes, expected {allocated}"),
        );
        let blocks: Vec<_> = m.entries_through(marker).collect();
        let sum = |f: fn(&preload_tests::Entry) -> u64| blocks.iter().map(|b| f(b)).sum::<u64>();
        let (a, n, fb, nf) = (
            sum(|b| b.allocated_bytes),
            sum(|b| b.allocations),
            sum(|b| b.freed_bytes),
            sum(|b| b.frees),
        );
        c.check(
            a == allocated && n == allocations,
            format!("{marker}: text report allocated {a} bytes in {n}, expected {allocated} in {allocations}"),
        );
        // What is not retained was freed, by free(), realloc(p, 0) or a shrinking realloc.
        c.check(fb == freed, format!("{marker}: freed {fb} bytes, expected {freed}"));
        let frees = allocations - live;
        c.check(nf == frees, format!("{marker}: {nf} frees, expected {frees}"));
    }
    check_locations(&c, |_| true);
}

#[test]
fn report_thread_allocations_stay_out_of_the_profile() {
    // utils.rs: "The runner's thread is marked as profiler code, so its own allocations never
    // show up." hello.c is single-threaded, so every allocation of the program itself has main
    // on its stack; it sleeps 300 ms so that the report thread (default interval) has started.
    let dir = TestDir::new("report-thread");
    let exe = dir.compile_c("hello.c", &[]);
    let vars: Vec<(&str, &str)> =
        EXACT.iter().copied().filter(|(k, _)| *k != "YING_CHECK_INTERVAL_SECS").collect();
    let c = compare(&Run::new(&exe).args(&["0", "300"]), &vars, &dir.reports("hello"));
    c.check(c.with.success(), "hello.c failed");
    c.assert_no_ying_lines();
    let f = c.main_report().folded();
    for s in &f.stacks {
        c.check(
            s.frames.iter().any(|fr| fr == "main"),
            format!(
                "{} bytes retained by a stack that is not the program's: {:?}",
                s.bytes, s.frames
            ),
        );
    }
}
