//! The profiler's own memory is flat over hundreds of report sets: a process that writes 400
//! sets (`RunnerHandle::dump_now`, in this process, on the `#[global_allocator]` front end,
//! whose profiler memory is counted to the byte) holds no more after the 400th than after the
//! 150th, but for the timeline's points (40 bytes a set). Before, each set left about 1.7 KB
//! behind for the page's chart until a thousand dumps (1.7 MB): a service reporting every few
//! minutes grew for days.
//!
//! Runs without libtest's harness (`harness = false`): the profiler's memory is the whole
//! process's, so nothing else may run in it. Optimized only (`scripts/test.sh` runs it with
//! `--release`): 400 sets unoptimized take minutes.

use std::hint::black_box;
use std::time::Duration;

use ying_profiler::YingProfiler;
use ying_profiler::utils::ProfilerRunnerBuilder;

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default().with_sample_interval(4096);

/// Sets written.
const SETS: usize = 400;
/// The set after which memory is compared with the last.
const SETTLED: usize = 150;
/// Bytes the timeline's points may add between the two (40 a set), with room.
const POINTS: u64 = 32 << 10;

#[inline(never)]
fn soak_leaf(i: usize) -> Vec<u8> {
    black_box(vec![i as u8; 5000 + (i & 7)])
}

#[inline(never)]
fn soak_a(d: u32, i: usize) -> Vec<u8> {
    black_box(soak(d, i))
}

#[inline(never)]
fn soak_b(d: u32, i: usize) -> Vec<u8> {
    black_box(soak(d, i))
}

/// A block allocated at one of 2^`d` distinct stacks, chosen by the bits of `i`.
#[inline(never)]
fn soak(d: u32, i: usize) -> Vec<u8> {
    let v = if d == 0 {
        soak_leaf(i)
    } else if (i >> (d - 1)) & 1 == 1 {
        soak_b(d - 1, i)
    } else {
        soak_a(d - 1, i)
    };
    black_box(v)
}

fn main() {
    if cfg!(debug_assertions) {
        // Minutes unoptimized: scripts/test.sh runs it with --release.
        println!("report_soak: SKIPPED in a debug build (cargo test --release --test report_soak)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ying-report-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let kept: Vec<Vec<u8>> = (0..1024).map(|i| soak(10, i)).collect();
    let runner = ProfilerRunnerBuilder::default()
        .reporting_path(dir.display().to_string())
        .check_interval_secs(0)
        .gen_flamegraphs(false)
        .max_report_sets(4)
        .report_at_exit(false)
        .build()
        .expect("a runner");
    let handle = runner.spawn(&YING_ALLOC);
    let mut settled = 0;
    for n in 1..=SETS {
        // The program moves a little between sets, so that each dump is a new one.
        let churn: Vec<Vec<u8>> = (0..(n % 7) * 16).map(|i| soak(10, i * 3)).collect();
        handle.dump_now().unwrap_or_else(|e| panic!("set {n}: {e}"));
        drop(churn);
        if n == SETTLED {
            settled = YingProfiler::totals().profiler_bytes;
        }
    }
    let last = YingProfiler::totals().profiler_bytes;
    println!(
        "profiler memory after set {SETTLED}: {settled} bytes; after set {SETS}: {last} bytes ({:+})",
        last as i64 - settled as i64
    );
    black_box(&kept);
    let _ = std::fs::remove_dir_all(&dir);
    std::thread::sleep(Duration::from_millis(10));
    assert!(
        last <= settled + POINTS,
        "the profiler's memory grew by {} bytes between set {SETTLED} and set {SETS}",
        last - settled
    );
    println!("report_soak: ok");
}
