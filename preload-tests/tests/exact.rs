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
    Comparison, EXACT, EXACT_ALLOCATED, EXACT_PROGRAM, Manifest, Run, TestDir, check_entries,
    check_folded_bytes, chunk_counts, chunks_file, compare, report_sets, tagged_line,
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

/// exact.c's exact totals (retained, allocated bytes) under the shim at sampling interval
/// `interval`, with its markers or without them (`EXACT_SKIP_MARKERS=1`), and, with them, the
/// chunk bytes (allocated, freed) the program counted across its markers, then the estimate of
/// allocated bytes (0 when nothing was sampled). The program first asks for a block above the
/// giant limit (the default 64 GiB), refused, so that the shim writes its exit report even when
/// nothing was sampled. (A lower limit would cap the countdown: see the note on #30's stop 42,
/// a budget capped at the limit samples when the cap runs out.)
fn totals_at(dir: &TestDir, exe: &std::path::Path, interval: &str, markers: bool) -> [u64; 5] {
    let name = format!("totals-{interval}-{}", if markers { "markers" } else { "baseline" });
    let reports = dir.reports(&name);
    let out = EXACT_PROGRAM
        .run(exe, &reports)
        .with_preload()
        .envs(&[
            ("YING_SAMPLE_INTERVAL_BYTES", interval),
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_SEED", "7"),
            ("YING_GEN_FLAMEGRAPHS", "false"),
            ("EXACT_REFUSE_FIRST", "137438953472"),
            ("EXACT_SKIP_MARKERS", if markers { "0" } else { "1" }),
        ])
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .run();
    out.assert_success("exact.c under the shim");
    let sets = report_sets(&reports);
    let m: Manifest = sets.last().expect("no report").manifest();
    let (mut alloc, mut freed) = (0, 0);
    for marker in EXACT_PROGRAM.markers {
        let (a, f) = chunk_counts(&chunks_file(&reports), marker.name).expect("no chunks line");
        alloc += a;
        freed += f;
    }
    [m.totals.retained_bytes, m.totals.allocated_bytes, alloc, freed, m.estimated.allocated_bytes]
}

/// The exact totals count every chunk the markers allocate and free, through the unsampled
/// fast paths as through the sampled ones: at a 1 TiB interval (no sample: every `malloc`,
/// `calloc`, `realloc` growth and shrink, `memalign` and `aligned_alloc` on its fast path) and
/// at 64 KiB (some samples), the totals of a run with the markers exceed the baseline run's by
/// the bytes the program counted, to the byte. (The growths that use the budget up, on
/// `realloc`'s fast path, are the statistical `realloc_estimates` tests' grow pattern.)
#[test]
fn unsampled_fast_paths_count_every_chunk() {
    let dir = TestDir::new("exact-fast-paths");
    let exe = EXACT_PROGRAM.compile(&dir);
    for interval in ["1099511627776", "65536"] {
        let base = totals_at(&dir, &exe, interval, false);
        let with = totals_at(&dir, &exe, interval, true);
        let (alloc, freed) = (with[2], with[3]);
        assert!(alloc > 1_000_000 && freed > 100_000, "the markers counted {alloc} and {freed}");
        let sampled = with[4] > 0;
        assert_eq!(
            sampled,
            interval == "65536",
            "interval {interval}: {} bytes estimated (the 1 TiB run must sample nothing, the \
             64 KiB one something)",
            with[4]
        );
        assert_eq!(
            with[0] - base[0],
            alloc - freed,
            "interval {interval}: the markers added {} retained bytes to the totals, the program \
             counted {}",
            with[0] - base[0],
            alloc - freed
        );
        assert_eq!(
            with[1] - base[1],
            alloc,
            "interval {interval}: the markers added {} allocated bytes to the totals, the program \
             counted {alloc}",
            with[1] - base[1]
        );
    }
}
