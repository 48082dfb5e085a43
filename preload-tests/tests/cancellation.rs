//! `malloc` is never a cancellation point under the shim, and a thread cancelled while it
//! allocates leaves no profiler lock behind (`programs/cancel_alloc.c`): a thread with deferred
//! cancellation allocates in a loop whose only cancellation point is `pthread_testcancel`, and
//! a cleanup handler records where the cancellation struck. Refused giant requests (whose
//! message is written from inside `malloc`) and sampled ones, with the plain run as control.

use preload_tests::{Run, TestDir, compare};

const EXPECTED: &str = "5 cancellations, all at pthread_testcancel; checksum 124716\n";

/// Runs `cancel_alloc MODE` with and without the shim (`vars` set for the shim).
fn cancel_during(mode: &str, vars: &[(&str, &str)]) {
    let dir = TestDir::new(&format!("cancel-{mode}"));
    let exe = dir.compile_c("cancel_alloc.c", &["-pthread"]);
    let c = compare(&Run::new(&exe).arg(mode), vars, &dir.reports(mode));
    c.check(c.with.success(), format!("cancel_alloc {mode} failed under the shim"));
    c.check(c.with.stdout_str() == EXPECTED, "a cancellation struck inside malloc");
    c.check(!c.main_reports().is_empty(), "no exit report (a profiler lock left taken?)");
}

#[test]
fn cancelling_a_thread_during_refused_giant_requests() {
    cancel_during("giant", &[("YING_MAX_ALLOC_BYTES", "1GiB")]);
}

#[test]
fn cancelling_a_thread_during_sampled_allocations() {
    cancel_during("sampled", &[("YING_SAMPLE_INTERVAL_BYTES", "1")]);
}
