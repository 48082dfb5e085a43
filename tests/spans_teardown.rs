//! With `profile_spans`, threads that exit and a process that exits while spans are entered
//! (and allocations keep happening in thread-local destructors) neither panic nor abort.
#![cfg(feature = "profile_spans")]

mod common;

use std::hint::black_box;
use tracing_subscriber::prelude::*;
use ying_profiler::{YingProfiler, spans::YingSpanLayer};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

/// Allocates (and is sampled, R = 1) while the thread's thread-locals are torn down.
/// It creates no span: tracing-subscriber's registry itself panics when a span is created in a
/// TLS destructor, with or without Ying.
struct AllocOnDrop;
impl Drop for AllocOnDrop {
    fn drop(&mut self) {
        black_box(vec![1u8; 4096]);
    }
}
thread_local!(static TLS: AllocOnDrop = const { AllocOnDrop });

fn churn_in_spans() {
    TLS.with(|_| {});
    let outer = tracing::info_span!("worker").entered();
    for i in 0..200 {
        let _inner = tracing::info_span!("job", i).entered();
        black_box(vec![0u8; 64 + i]);
    }
    // Leave a span entered while the thread ends.
    std::mem::forget(outer);
}

#[test]
fn exits_with_spans_alive_do_not_panic() {
    if std::env::var_os("YING_TEST_SPANS_CHILD").is_some() {
        tracing_subscriber::registry().with(YingSpanLayer).init();
        let hs: Vec<_> = (0..8).map(|_| std::thread::spawn(churn_in_spans)).collect();
        for h in hs {
            h.join().unwrap();
        }
        let _alive = tracing::info_span!("main_exit").entered();
        black_box(vec![2u8; 1000]);
        println!("stacks={}", A.snapshot().stacks.len());
        std::process::exit(0); // Exit with a span entered.
    }
    let out = common::this_test_binary()
        .args(["--exact", "exits_with_spans_alive_do_not_panic", "--nocapture"])
        .env("YING_TEST_SPANS_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed ({:?}): {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("stacks="));
}
