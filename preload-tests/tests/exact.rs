//! Exact mode (`YING_SAMPLE_INTERVAL_BYTES=1`): the bytes the profile attributes to each marker
//! function of `programs/exact.c` equal what the program allocated, to the byte, for retained
//! and for allocated bytes, and the text report names the markers with their `file:line`.
//!
//! The shim counts glibc chunks (usable size plus the 8-byte header) in every figure, so the
//! program counts its blocks' chunks itself and writes them to `$CHUNKS_FILE` (see
//! `chunk_counts`): a realloc's growth is allocated bytes, its shrink freed bytes. The markers,
//! their allocation counts and the per-marker checks are shared with `chained.rs`
//! (`preload_tests::EXACT_PROGRAM`, `check_folded_bytes`, `check_entries`).

use preload_tests::{
    Comparison, EXACT, EXACT_ALLOCATED, EXACT_PROGRAM, Run, TestDir, check_entries,
    check_folded_bytes, compare, tagged_line,
};

/// Markers whose allocation call site is tagged `TAG:<marker>` in exact.c.
const TAGGED: &[&str] = &[
    "marker_keep",
    "marker_churn",
    "marker_calloc",
    "marker_posix_memalign",
    "marker_realloc_chain",
];

/// exact.c (its markers: [`EXACT_PROGRAM`]) compared under the shim with `vars`.
fn run_exact(name: &str, vars: &[(&str, &str)]) -> (TestDir, Comparison) {
    let dir = TestDir::new(name);
    let exe = EXACT_PROGRAM.compile(&dir);
    let reports = dir.reports(name);
    let c = EXACT_PROGRAM.compare(&EXACT_PROGRAM.run(&exe, &reports), vars, &reports);
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
    let m = r.manifest();
    c.check(m.sample_interval_bytes == 1, "the report does not show exact mode");
    // Per marker: the folded profile, and the entries' retained bytes and live allocations.
    check_folded_bytes(&c, EXACT_PROGRAM.markers);
    check_entries(&c, EXACT_PROGRAM.markers);
    check_locations(&c, |m| EXACT_PROGRAM.keeping().any(|x| x.name == m));
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
    // Per marker: the folded profile, and the entries' allocated and freed bytes,
    // allocations and frees.
    check_folded_bytes(&c, EXACT_PROGRAM.markers);
    check_entries(&c, EXACT_PROGRAM.markers);
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
