//! Dumps from a service's threads: `RunnerHandle::dump_now` returns the written set's paths,
//! with a report thread and without one (`YING_CHECK_INTERVAL_SECS=0`: the calling thread
//! writes it), and a burst of 12 concurrent dumps (`dump_now` with and without the thread,
//! `utils::write_report_now`) leaves the resident memory within 5 MiB of what one dump left.
//!
//! Runs without libtest's harness (`harness = false`): resident memory is the whole process's,
//! so each case runs this same executable again as a child process (selected by
//! `YING_TEST_DUMP_CASE`) with nothing else running in it, with a timeout that turns a hang into
//! a failure; the child prints its measurements and the parent judges them.

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ying_profiler::YingProfiler;
use ying_profiler::report::ReportOptions;
use ying_profiler::utils::{ProfilerRunner, ProfilerRunnerBuilder, RunnerHandle};

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default().with_sample_interval(4096);

/// Selects the child's case; unset in the parent.
const CASE_VAR: &str = "YING_TEST_DUMP_CASE";
/// The child's reporting directory.
const DIR_VAR: &str = "YING_TEST_DUMP_DIR";
/// Longest a child may run before it is killed and the case fails (a hang, not a slow dump:
/// a dump of this program takes well under a second).
const TIMEOUT: Duration = Duration::from_secs(180);
/// Concurrent dumps in a burst.
const BURST: usize = 12;
/// Depth of the recursion that makes 2^DEPTH distinct stacks.
const DEPTH: u32 = 13;

fn main() {
    match std::env::var(CASE_VAR) {
        Ok(case) => child(&case),
        Err(_) => parent(),
    }
}

// ---------------------------------------------------------------------------------------------
// The children.

#[inline(never)]
fn dump_memory_leaf(path: u32) -> Vec<u8> {
    black_box(vec![path as u8; 4096 + (path as usize & 7)])
}

#[inline(never)]
fn go_a(d: u32, path: u32) -> Vec<u8> {
    black_box(go(d, path))
}

#[inline(never)]
fn go_b(d: u32, path: u32) -> Vec<u8> {
    black_box(go(d, path))
}

/// A block allocated at one of 2^`d` distinct stacks, chosen by the bits of `path`.
#[inline(never)]
fn go(d: u32, path: u32) -> Vec<u8> {
    let v = if d == 0 {
        dump_memory_leaf(path)
    } else if (path >> (d - 1)) & 1 == 1 {
        go_b(d - 1, path)
    } else {
        go_a(d - 1, path)
    };
    black_box(v)
}

/// Makes 1 MiB of the calling thread's stack resident.
#[inline(never)]
fn touch_stack() {
    let mut buf = [0u8; 1 << 20];
    black_box(&mut buf);
    for i in (0..buf.len()).step_by(4096) {
        buf[i] = 1;
    }
    black_box(&buf);
}

/// Resident memory of this process in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One dump of the case's kind; returns the text report's path.
fn dump(case: &str, handle: Option<&RunnerHandle>, dir: &Path) -> PathBuf {
    let paths = match case {
        "report_now" => {
            let options = ReportOptions { gen_flamegraphs: false, ..ReportOptions::default() };
            ying_profiler::utils::write_report_now(&YING_ALLOC, &options, dir)
        }
        _ => handle.unwrap().dump_now(),
    };
    let paths = paths.unwrap_or_else(|e| panic!("{case}: dump failed: {e}"));
    paths.text.unwrap_or_else(|| panic!("{case}: no text report"))
}

fn child(case: &str) {
    let dir = PathBuf::from(std::env::var(DIR_VAR).unwrap());
    let kept: Vec<Vec<u8>> = (0..1u32 << DEPTH).map(|p| go(DEPTH, p)).collect();
    let handle = match case {
        "thread" => Some(
            ProfilerRunnerBuilder::default()
                .check_interval_secs(3600usize)
                .reporting_path(dir.to_str().unwrap())
                .report_at_exit(false)
                .max_report_sets(0usize)
                .gen_flamegraphs(false)
                .build()
                .unwrap()
                .spawn(&YING_ALLOC),
        ),
        // The parent set YING_CHECK_INTERVAL_SECS=0 and the directory.
        "inline" => Some(ProfilerRunner::from_env(&YING_ALLOC).spawn(&YING_ALLOC)),
        "report_now" => None,
        _ => panic!("unknown case {case}"),
    };
    if let Some(h) = &handle {
        assert_eq!(h.has_thread(), case == "thread", "{case}");
    }
    let t0 = Instant::now();
    // The burst's threads exist before the first dump, their stacks already resident (as a
    // service's worker threads are): what the burst adds is then the dumps' own memory.
    let phase = Arc::new(Barrier::new(BURST + 1));
    let threads: Vec<_> = (0..BURST)
        .map(|_| {
            let (phase, handle, dir) = (Arc::clone(&phase), handle.clone(), dir.clone());
            let case = case.to_string();
            std::thread::spawn(move || {
                touch_stack();
                phase.wait();
                phase.wait();
                let text = dump(&case, handle.as_ref(), &dir);
                // Alive until measured: a thread's exit releases its stack.
                phase.wait();
                phase.wait();
                text
            })
        })
        .collect();
    phase.wait();
    let before = rss_kib();
    let first = dump(case, handle.as_ref(), &dir);
    assert!(first.exists(), "{}", first.display());
    let text = std::fs::read_to_string(&first).unwrap();
    assert!(text.contains("dump_memory_leaf"), "{text}");
    let one = rss_kib();
    phase.wait();
    phase.wait();
    let burst = rss_kib();
    phase.wait();
    for t in threads {
        let text = t.join().unwrap();
        assert!(text.exists(), "{}", text.display());
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("case={case} before_kib={before} one_kib={one} burst_kib={burst} secs={secs:.1}");
    drop(kept);
}

// ---------------------------------------------------------------------------------------------
// The parent.

struct Measured {
    one: u64,
    burst: u64,
}

fn run_case(case: &str) -> Measured {
    let dir = common::fresh_dir(&format!("dump-memory-{case}"));
    let mut cmd = common::this_test_binary();
    cmd.env(CASE_VAR, case)
        .env(DIR_VAR, &dir)
        .env("YING_REPORTING_PATH", &dir)
        .env("YING_CHECK_INTERVAL_SECS", "0")
        .env("YING_REPORT_AT_EXIT", "false")
        .env("YING_MAX_REPORT_SETS", "0")
        // Flamegraphs off: the dumps of this unoptimized test build take half the time.
        .env("YING_GEN_FLAMEGRAPHS", "false")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let out = common::wait_or_kill(child, TIMEOUT, &format!("case {case} (a dump hung)"));
    let status = out.status;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(status.success(), "case {case} failed: {status}\n{stdout}\n{stderr}");
    let sets = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".txt"))
        .count();
    // One set for the first dump, then one to BURST for the burst (requests to the report
    // thread share dumps).
    assert!((2..=1 + BURST).contains(&sets), "case {case}: {sets} sets\n{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
    let field = |name: &str| -> u64 {
        let v = stdout.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('='));
        v.unwrap_or_else(|| panic!("case {case}: no {name} in {stdout}\n{stderr}")).parse().unwrap()
    };
    eprintln!("{}", stdout.trim());
    Measured { one: field("one_kib"), burst: field("burst_kib") }
}

fn parent() {
    let mut failures = Vec::new();
    for case in ["thread", "inline", "report_now"] {
        let m = run_case(case);
        let grown = m.burst.saturating_sub(m.one);
        eprintln!("{case}: one dump {} KiB, after {BURST} concurrent dumps {} KiB", m.one, m.burst);
        if grown > 5 << 10 {
            failures.push(format!(
                "{case}: {BURST} concurrent dumps grew RSS by {grown} KiB over one dump's ({} -> {})",
                m.one, m.burst
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("dump_memory: ok");
}
