//! The 0.3.0 calls that read the stacks without a report set go through the report model too:
//! `utils::gen_flamegraph` folds every stack and leaves the profiler holding what it held
//! before; `top_k_stacks_by_retained` materialises only the stacks it returns, ranked as a full
//! snapshot ranks them.

use std::hint::black_box;
use ying_profiler::utils::gen_flamegraph;
use ying_profiler::{Measurement, YingProfiler};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

/// The tests take turns: one's samples and symbols would show in the other's profiler memory.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[inline(never)]
fn marker_flame_kept() -> Vec<u8> {
    black_box(vec![7u8; 4321])
}

#[test]
fn one_off_flamegraph_names_the_retaining_function() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kept = marker_flame_kept();
    let path = std::env::temp_dir().join(format!("ying-flame-{}.svg", std::process::id()));
    let before = YingProfiler::totals().profiler_bytes;
    gen_flamegraph(&A, Measurement::RetainedBytes, &path).unwrap();
    let after = YingProfiler::totals().profiler_bytes;
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.contains("marker_flame_kept"), "{}", &svg[..svg.len().min(2000)]);
    assert!(svg.contains("<svg"), "not an SVG");
    println!("profiler memory {before} -> {after}");
    // What stays is the symbol cache's answers for the addresses seen first here (about
    // 500 KB in a debug build of this test), not the snapshot.
    assert!(after.saturating_sub(before) < 2 << 20, "profiler memory {before} -> {after}");
    drop(kept);
}

#[inline(never)]
fn marker_top_kept() -> Vec<u8> {
    black_box(vec![9u8; 1 << 20])
}

/// `top_k_stacks_by_retained` materialises only the stacks it returns, ranked as a full
/// snapshot ranks them.
#[test]
fn top_k_matches_the_full_snapshot_ranking() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let big = marker_top_kept();
    let top = A.top_k_stacks_by_retained(3);
    let full = A.snapshot().top_k(3, Measurement::RetainedBytes);
    assert!(!top.is_empty() && top.len() <= 3);
    // The test harness's threads may allocate meanwhile: compare the first stack only.
    let (a, b) = (&top[0], &full[0]);
    assert!(a.frames.iter().any(|f| f.function.contains("marker_top_kept")), "{a:?}");
    assert_eq!(a.frames, b.frames);
    assert_eq!(a.stack, b.stack);
    assert_eq!(a.retained_bytes, 1 << 20);
    assert_eq!(a.retained_bytes, b.retained_bytes);
    assert_eq!(a.retained_age.total().round() as u64, 1 << 20);
    drop(big);
}
