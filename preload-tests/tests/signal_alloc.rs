//! Samples taken in a signal handler that interrupted glibc's allocator
//! (`programs/signal_alloc.c`).
//!
//! The program's main loop callocs, mallocs and frees blocks too large for glibc's tcache, so
//! glibc holds its arena lock for much of the time; a timer signal every 100 µs runs a handler
//! that mallocs and frees small blocks (served by the tcache, without that lock) at stacks it
//! has never used before. Plain glibc survives that (the control run). With every handler
//! allocation sampled (`YING_SAMPLE_INTERVAL_BYTES=64`), each sample adds a stack to the
//! profiler's tables; had the tables grown on glibc's heap, the handler would wait for the arena
//! lock the interrupted `calloc` holds, forever; or, in a single-threaded process (where glibc
//! takes no lock), re-enter glibc's allocator and corrupt its heap. Both are tested: an idle
//! second thread keeps glibc locking, `single` leaves it out. The runs are bounded in time; a
//! hang is a timeout, a failure.
//!
//! The handler runs on an alternate signal stack in one test and on the thread's stack in the
//! other; the stack walk differs (libgcc's walk, or the caching unwinder up to the signal
//! frame).

use std::time::Duration;

use preload_tests::{Run, TestDir};

/// Seconds each run lasts (the program's own clock).
const SECONDS: &str = "2";
/// Microseconds between timer signals.
const INTERVAL_US: &str = "100";
/// Longer than a run with the shim needs by far (about `SECONDS` plus start and exit).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Handler runs below which the run did not test what it should (about 20,000 are expected).
const MIN_HANDLER_RUNS: u64 = 200;

/// The figure on the line `<label> N` of the program's output.
fn figure(stdout: &str, label: &str) -> Option<u64> {
    stdout.lines().find_map(|l| l.strip_prefix(label)?.trim().parse().ok())
}

fn check_run(o: &preload_tests::Outcome, what: &str) {
    if !o.success() || !o.stdout_str().ends_with("ok\n") {
        panic!("{what}: the program did not finish with `ok` in time\n{}", o.describe());
    }
    let runs = figure(&o.stdout_str(), "handler runs").unwrap_or(0);
    assert!(
        runs >= MIN_HANDLER_RUNS,
        "{what}: only {runs} timer signals were handled, too few to test anything\n{}",
        o.describe()
    );
}

/// Runs the program without the shim (the control), then with it under four seeds, the last
/// single-threaded; `extra` are more arguments of the program.
fn run_all(name: &str, extra: &[&str]) {
    let dir = TestDir::new(name);
    let exe = dir.compile_c("signal_alloc.c", &["-pthread"]);
    let threaded = Run::new(&exe).args(&[SECONDS, INTERVAL_US]).args(extra).timeout(TIMEOUT);
    let single = threaded.clone().arg("single");
    check_run(&threaded.run(), "the run without the shim (control)");
    check_run(&single.run(), "the single-threaded run without the shim (control)");
    for (run, seed) in [(&threaded, "1"), (&threaded, "2"), (&threaded, "3"), (&single, "4")] {
        let reports = dir.reports(&format!("seed-{seed}"));
        let o = run
            .clone()
            .with_preload()
            .envs(&[
                ("YING_SAMPLE_INTERVAL_BYTES", "64"),
                ("YING_CHECK_INTERVAL_SECS", "0"),
                ("YING_REPORT_AT_EXIT", "false"),
                ("YING_SEED", seed),
            ])
            .env("YING_REPORTING_PATH", reports.display().to_string())
            .run();
        check_run(&o, &format!("the run with the shim, {}, YING_SEED={seed}", o.command));
        assert!(o.ying_lines().is_empty(), "unexpected `ying:` lines\n{}", o.describe());
    }
}

#[test]
fn samples_in_a_handler_on_an_alternate_stack_that_interrupted_calloc_do_not_deadlock() {
    run_all("signal-alloc-altstack", &["altstack"]);
}

#[test]
fn samples_in_a_signal_handler_that_interrupted_calloc_do_not_deadlock() {
    run_all("signal-alloc", &[]);
}
