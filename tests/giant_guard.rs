//! A single request at or above the limit is refused before anything is allocated (nothing
//! leaks), it is counted, and the stack that asked is printed to stderr as `ying:` lines.

mod common;

use std::alloc::{GlobalAlloc, Layout};
use ying_profiler::YingProfiler;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(512 * 1024, 1 << 30);

#[inline(never)]
fn marker_giant_request() -> *mut u8 {
    let layout = Layout::from_size_align(8 << 30, 8).unwrap();
    // SAFETY: a non-zero layout; the result is checked for null. `black_box` keeps this frame
    // on the stack (no tail call into the allocator).
    std::hint::black_box(unsafe { A.alloc(layout) })
}

#[test]
fn giant_request_is_refused_counted_and_reported() {
    if std::env::var_os("YING_TEST_GIANT_CHILD").is_some() {
        let p = marker_giant_request();
        println!("null={}", p.is_null());
        return;
    }
    let before = YingProfiler::totals();
    let p = marker_giant_request();
    assert!(p.is_null());
    let after = YingProfiler::totals();
    // The totals are process-wide and the test harness's main thread may allocate meanwhile (it
    // registers to wait for this test's result), so allow a little; an 8 GiB request that was
    // counted, or allocated, would be far over.
    let grew = after.allocated_bytes - before.allocated_bytes;
    assert!(grew < 64 * 1024, "nothing of the refused request was counted: grew by {grew}");
    assert_eq!(A.snapshot().giant_refused, 1);
    // Realloc to a giant size keeps the old block and refuses too.
    let layout = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: plain allocation, then realloc of that same block.
    unsafe {
        let q = A.alloc(layout);
        assert!(!q.is_null());
        assert!(A.realloc(q, layout, 2 << 30).is_null());
        A.dealloc(q, layout);
    }
    assert_eq!(A.snapshot().giant_refused, 2);

    // The stderr message, from a child process running this same test.
    let out = common::this_test_binary()
        .args(["--exact", "giant_request_is_refused_counted_and_reported", "--nocapture"])
        .env("YING_TEST_GIANT_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("null=true"), "{stdout}");
    assert!(stderr.contains("ying: refused a single allocation of 8589934592 bytes"), "{stderr}");
    // Printed from inside the allocator: raw frames only (no debug info is read there).
    assert!(stderr.lines().any(|l| l.starts_with("ying:   giant_guard-")), "{stderr}");

    // Named at snapshot time.
    let snap = A.snapshot();
    let first = snap.giant_refusals.first().expect("the refusals are kept");
    assert_eq!((first.number, first.size), (1, 8 << 30));
    assert!(
        first.frames.iter().any(|f| f.function.contains("marker_giant_request")),
        "{:?}",
        first.frames
    );
    assert_eq!(snap.giant_refusals[1].size, 2 << 30);
}
