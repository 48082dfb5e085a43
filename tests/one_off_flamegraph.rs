//! `utils::gen_flamegraph` (the 0.3.0 one-off SVG) folds every stack, from the same compact
//! snapshot report sets use, and leaves the profiler holding what it held before.

use std::hint::black_box;
use ying_profiler::utils::gen_flamegraph;
use ying_profiler::{Measurement, YingProfiler};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_flame_kept() -> Vec<u8> {
    black_box(vec![7u8; 4321])
}

#[test]
fn one_off_flamegraph_names_the_retaining_function() {
    let kept = marker_flame_kept();
    let path = std::env::temp_dir().join(format!("ying-flame-{}.svg", std::process::id()));
    let before = YingProfiler::totals().profiler_bytes;
    gen_flamegraph(&A, Measurement::RetainedBytes, &path).unwrap();
    let after = YingProfiler::totals().profiler_bytes;
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.contains("marker_flame_kept"), "{}", &svg[..svg.len().min(2000)]);
    assert!(svg.contains("<svg"), "not an SVG");
    // The symbol cache keeps the answers for the new addresses; nothing else stays.
    assert!(after.saturating_sub(before) < 1 << 20, "profiler memory {before} -> {after}");
    drop(kept);
}
