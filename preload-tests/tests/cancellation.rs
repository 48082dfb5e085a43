//! `malloc` is never a cancellation point under the shim, and a thread cancelled while it
//! allocates leaves no profiler lock behind (`programs/cancel_alloc.c`): a thread with deferred
//! cancellation allocates in a loop whose only cancellation point is `pthread_testcancel`, and
//! a cleanup handler records where the cancellation struck. Refused giant requests (whose
//! message is written from inside `malloc`) and sampled ones, with the plain run as control.

use preload_tests::{Run, TestDir, compare};

const EXPECTED: &str = "5 cancellations, all at pthread_testcancel; checksum 124716\n";

#[test]
fn cancelling_a_thread_during_refused_giant_requests() {
    let dir = TestDir::new("cancel-giant");
    let exe = dir.compile_c("cancel_alloc.c", &["-pthread"]);
    let vars = [("YING_MAX_ALLOC_BYTES", "1GiB")];
    let c = compare(&Run::new(&exe).arg("giant"), &vars, &dir.reports("giant"));
    c.check(c.with.success(), "cancel_alloc giant failed under the shim");
    c.check(c.with.stdout_str() == EXPECTED, "a cancellation struck inside malloc");
    c.check(!c.main_reports().is_empty(), "no exit report (a profiler lock left taken?)");
}

#[test]
fn cancelling_a_thread_during_sampled_allocations() {
    let dir = TestDir::new("cancel-sampled");
    let exe = dir.compile_c("cancel_alloc.c", &["-pthread"]);
    let vars = [("YING_SAMPLE_INTERVAL_BYTES", "1")];
    let c = compare(&Run::new(&exe).arg("sampled"), &vars, &dir.reports("sampled"));
    c.check(c.with.success(), "cancel_alloc sampled failed under the shim");
    c.check(c.with.stdout_str() == EXPECTED, "a cancellation struck inside malloc");
    c.check(!c.main_reports().is_empty(), "no exit report (a profiler lock left taken?)");
}
