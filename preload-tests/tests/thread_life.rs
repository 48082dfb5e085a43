//! Threads in every state the hooks can meet them in, each pattern once crashed or hung a
//! program under the shim (see ARCHITECTURE.md, "Thread states"). Every test runs the real
//! program with and without the shim: same output, same exit status, and a timeout that turns a
//! hang into a failure.
//!
//! - Detached threads that never allocate: their first hooked call is glibc freeing their TLS
//!   after their key destructors ran (`programs/detached_exit.c detached`).
//! - A thread whose first `malloc` happens in the last round of key destructors, on a stack the
//!   program makes inaccessible after joining it (`detached_exit.c late`).
//! - Threads calling `pthread_getattr_np`, which allocates while holding the thread's own
//!   lock (`getattr_threads.c`), and a plain Rust program spawning 20,000 threads (Rust's std
//!   calls it at every thread start; `spawn_threads.rs`).
//! - Sampled allocations on threads with glibc's minimum stack (16 KiB), and the stack a
//!   sampled `malloc` uses (`small_stack.c`).

use std::time::Duration;

use preload_tests::{QUIET, Run, TestDir, compare};

/// Every allocation sampled: any sample-path hazard is met at the first allocation.
const EVERY: &[(&str, &str)] = &[("YING_SAMPLE_INTERVAL_BYTES", "1")];

#[test]
fn detached_threads_that_never_allocate_end_safely() {
    let dir = TestDir::new("detached-exit");
    let exe = dir.compile_c("detached_exit.c", &["-pthread"]);
    for i in 0..3 {
        let c = compare(&Run::new(&exe).arg("detached"), QUIET, &dir.reports(&format!("d{i}")));
        c.check(c.with.success(), "detached_exit.c failed under the shim");
        c.check(c.with.stdout_str() == "detached 16, checksum 124716\n", "unexpected output");
        c.assert_no_ying_lines();
        // The exit handlers ran (the status says so); a report set only if a sample was taken.
        c.check(c.main_reports().iter().all(|r| r.has("txt")), "incomplete exit report");
    }
}

#[test]
fn first_malloc_in_the_last_destructor_round_on_a_vanished_stack() {
    let dir = TestDir::new("late-exit");
    let exe = dir.compile_c("detached_exit.c", &["-pthread"]);
    for (i, vars) in [QUIET, EVERY].iter().enumerate() {
        let c = compare(&Run::new(&exe).arg("late"), vars, &dir.reports(&format!("l{i}")));
        c.check(c.with.success(), "detached_exit.c late failed under the shim");
        c.check(c.with.stdout_str() == "detached 0, checksum 124716\n", "unexpected output");
        // Every allocation sampled: an exit report (with default sampling, one only if a
        // sample was taken).
        c.check(i == 0 || !c.main_reports().is_empty(), "no exit report");
    }
}

#[test]
fn pthread_getattr_np_in_every_thread_does_not_hang() {
    let dir = TestDir::new("getattr");
    let exe = dir.compile_c("getattr_threads.c", &["-pthread"]);
    for (i, vars) in [EVERY, QUIET].iter().enumerate() {
        let run = Run::new(&exe).arg("2000").timeout(Duration::from_secs(60));
        let c = compare(&run, vars, &dir.reports(&format!("g{i}")));
        c.check(c.with.success(), "getattr_threads.c failed under the shim");
        c.check(c.with.stdout_str() == "threads 2000, attributes read 2000\n", "unexpected output");
    }
}

#[test]
fn rust_program_spawning_twenty_thousand_threads() {
    let dir = TestDir::new("rust-spawn");
    let exe = dir.compile_rust("spawn_threads.rs");
    let run = Run::new(&exe).arg("20000").timeout(Duration::from_secs(120));
    let c = compare(&run, QUIET, &dir.reports("default"));
    c.check(c.with.success(), "spawn_threads failed under the shim");
    c.check(c.with.stdout_str() == "threads 20000, sum 599970000\n", "unexpected output");
    let run = Run::new(&exe).arg("4000").timeout(Duration::from_secs(120));
    let c = compare(&run, EVERY, &dir.reports("every"));
    c.check(c.with.success(), "spawn_threads failed under the shim, every allocation sampled");
}

#[test]
fn sampled_allocations_on_sixteen_kib_stacks() {
    let dir = TestDir::new("small-stack");
    let exe = dir.compile_c("small_stack.c", &["-pthread"]);
    for i in 0..5 {
        let vars = if i % 2 == 0 { EVERY } else { QUIET };
        let c = compare(&Run::new(&exe).arg("run"), vars, &dir.reports(&format!("s{i}")));
        c.check(c.with.success(), "small_stack.c run failed under the shim");
    }
}

/// The stack the measuring thread's `malloc(1 MiB)` wrote below its caller's frame.
fn stack_used(o: &preload_tests::Outcome) -> u64 {
    let out = o.stdout_str();
    out.strip_prefix("malloc used ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no measurement\n{}", o.describe()))
}

#[test]
fn a_sample_at_uncached_return_addresses_uses_under_4_kib_of_stack() {
    let dir = TestDir::new("stack-budget");
    let exe = dir.compile_c("small_stack.c", &["-pthread"]);
    let plain = Run::new(&exe).arg("measure").without_preload().run();
    plain.assert_success("small_stack measure without the shim");
    let reports = dir.reports("measure");
    let with = Run::new(&exe)
        .arg("measure")
        .with_preload()
        .envs(EVERY)
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .run();
    with.assert_success("small_stack measure with the shim");
    let (p, w) = (stack_used(&plain), stack_used(&with));
    println!("malloc(1 MiB) used {p} bytes of stack without the shim, {w} with it (sampled)");
    assert!(
        w < p + 4096,
        "a sampled malloc used {w} bytes of stack, glibc alone {p}: over the 4 KiB budget"
    );
}
