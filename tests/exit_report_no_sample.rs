//! A process that took no sample writes no report set at exit, although `start_profiling()`
//! asked for one: its report would list no stack of its own. The allocator samples on average
//! once per TiB here, so the few KiB this program allocates are (all but certainly) never
//! sampled; the child prints whether it took a sample, and the parent checks the files against
//! that.
//!
//! Runs without libtest's harness (`harness = false`): the exit report is written by the
//! process's `atexit` handler, so the case runs this executable again as a child process.

mod common;

use std::process::Stdio;
use std::time::Duration;

use ying_profiler::YingProfiler;

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default().with_sample_interval(1 << 40);

const CASE_VAR: &str = "YING_TEST_EXIT_CASE";

fn main() {
    if std::env::var_os(CASE_VAR).is_some() {
        YING_ALLOC.start_profiling();
        let small: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        println!("stacks sampled: {} ({} strings)", YING_ALLOC.num_stack_traces(), small.len());
        return;
    }
    let dir = common::scratch("exit-no-sample");
    let mut cmd = common::this_test_binary();
    common::without_ying_vars(&mut cmd);
    let child = cmd
        .env(CASE_VAR, "1")
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_or_kill(child, Duration::from_secs(60), "the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(stderr.is_empty(), "{stderr}");
    let reports = dir.join("ying-profiles");
    let written: Vec<String> = std::fs::read_dir(&reports)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    // The reporting directory is created when the runner starts; it stays empty.
    assert!(reports.is_dir(), "{}", reports.display());
    assert!(stdout.starts_with("stacks sampled: 0 "), "the child took a sample: {stdout}");
    assert_eq!(written, Vec::<String>::new(), "no report set without a sample");
    std::fs::remove_dir_all(&dir).unwrap();
    println!("no sample, no report set at exit: ok");
}
