//! C++ under the shim (`programs/cxx.cpp`): new/delete, new[]/delete[] and aligned new in
//! marker functions; exact-mode bytes per marker match, and the report names the markers with
//! demangled names and `file:line`. The shim counts glibc chunks, which cxx.cpp counts itself
//! for each marker and writes to `$CHUNKS_FILE`. The markers and the per-marker check are
//! shared with `chained.rs` (`preload_tests::CXX_PROGRAM`, `check_folded_bytes`).

use preload_tests::{
    CXX_PROGRAM, Comparison, EXACT, EXACT_ALLOCATED, ExactProgram, TestDir, check_folded_bytes,
};

/// cxx.cpp run as `program` says (its arguments, its markers: [`CXX_PROGRAM`]) and compared
/// under the shim with `vars`.
fn run(dir: &TestDir, program: &ExactProgram, vars: &[(&str, &str)], name: &str) -> Comparison {
    let exe = program.compile(dir);
    let reports = dir.reports(name);
    program.compare(&program.run(&exe, &reports), vars, &reports)
}

/// Markers are named demangled, with their `file:line` (a report lists only the stacks with a
/// non-zero figure of its measure, hence `retained`).
fn check_names(c: &Comparison, retained: bool) {
    let m = c.main_report().manifest();
    for marker in CXX_PROGRAM.markers.iter().filter(|m| !retained || m.live > 0).map(|m| m.name) {
        let want = format!("{marker}(unsigned long)");
        c.check(
            m.frames_named(marker).any(|f| {
                f.function == want && f.location.as_deref().is_some_and(|l| l.contains("cxx.cpp:"))
            }),
            format!("no frame `{want} (.../cxx.cpp:N)` in the text report"),
        );
    }
    c.check(
        m.frames_named("operator new")
            .any(|f| f.function.starts_with("operator new(unsigned long")),
        "`operator new(unsigned long...)` is not named (demangled) in the text report",
    );
}

// The `warmup` argument makes main allocate and free 2 MiB first: see the ignored test below
// for why exact mode needs it in a C++ program today.
#[test]
fn cxx_exact_retained_and_allocated_per_marker() {
    let dir = TestDir::new("cxx");
    let c = run(&dir, &CXX_PROGRAM, EXACT, "retained");
    check_folded_bytes(&c, CXX_PROGRAM.markers);
    check_names(&c, true);
    let c = run(&dir, &CXX_PROGRAM, EXACT_ALLOCATED, "allocated");
    check_folded_bytes(&c, CXX_PROGRAM.markers);
    check_names(&c, false);
}

#[test]
fn cxx_exact_mode_without_warmup() {
    // libstdc++'s constructor runs before libying's and allocates (its exception emergency
    // pool); the main thread's state is set up then, while sampling is still off, with a budget
    // of up to 1 MiB that it only redraws after spending it. Exact mode must sample every
    // allocation from the start of main.
    let dir = TestDir::new("cxx-no-warmup");
    let c = run(&dir, &ExactProgram { args: &[], ..CXX_PROGRAM }, EXACT, "retained");
    check_folded_bytes(&c, CXX_PROGRAM.markers);
}
