//! How a process ends under the shim: Ying never keeps it alive (a `main` that ends with
//! `pthread_exit`, `programs/lifecycle_pthread_exit.c`; CPython's
//! `test_3_join_in_forked_from_thread`), and every way of reaching `exit` leaves exactly one
//! complete final report set and no temporary file (three threads calling `exit` at once,
//! `programs/lifecycle_exit_race.c`; `exit` from an `atexit` handler,
//! `programs/lifecycle_atexit_exit.c`; `exit` during a periodic dump, `programs/dump_race.c`).

use std::path::Path;
use std::time::{Duration, Instant};

use preload_tests::{Comparison, Run, TestDir, compare, list_dir, python3};

/// Every file of a default report set (flamegraphs on, the peak's files beside the current
/// ones).
const SET_FILES: [&str; 8] =
    ["txt", "folded", "svg", "pb.gz", "peak.folded", "peak.svg", "peak.pb.gz", "json"];

/// Checks that the run with the shim wrote exactly one report set, complete (every file of
/// [`SET_FILES`], the `.pb.gz` a gzip stream), and left no temporary file.
fn exactly_one_complete_set(c: &Comparison) {
    let sets = c.main_reports();
    c.check(sets.len() == 1, format!("expected exactly one report set, found {}", sets.len()));
    let s = &sets[0];
    for ext in SET_FILES {
        c.check(s.has(ext), format!("report set {} has no .{ext}", s.stem));
    }
    let pb = std::fs::read(s.path("pb.gz")).unwrap_or_default();
    c.check(pb.len() > 20 && pb[..2] == [0x1f, 0x8b], "the .pb.gz is not a gzip stream");
    no_temporary_files(c, &c.reports);
}

fn no_temporary_files(c: &Comparison, dir: &Path) {
    let tmp: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default();
    c.check(tmp.is_empty(), format!("temporary files left behind: {tmp:?}"));
}

/// `main` ends with `pthread_exit` while a worker runs; the worker then returns, calls
/// `pthread_exit` too, or cancels the last other thread and returns. Without Ying glibc ends the process with the worker (its `exit(0)` runs
/// the atexit handler); under the shim the report thread must not keep it alive.
#[test]
fn a_main_that_calls_pthread_exit_ends_when_its_last_thread_does() {
    let dir = TestDir::new("lifecycle-pthread-exit");
    let exe = dir.compile_c("lifecycle_pthread_exit.c", &["-pthread"]);
    let expected = "main exits\nworker done\natexit handler ran\n";
    for worker in ["return", "exit", "cancel"] {
        // The default interval, a short one, and none but with the endpoint's thread.
        for (interval, http) in [("1", ""), ("300", ""), ("0", "127.0.0.1:0")] {
            let mut vars = vec![
                ("YING_SAMPLE_INTERVAL_BYTES", "1"),
                ("YING_SEED", "1"),
                ("YING_CHECK_INTERVAL_SECS", interval),
            ];
            if !http.is_empty() {
                vars.push(("YING_HTTP_ADDR", http));
            }
            let run = Run::new(&exe).arg(worker).timeout(Duration::from_secs(20));
            let started = Instant::now();
            let c = compare(&run, &vars, &dir.reports(&format!("{worker}-{interval}")));
            let took = started.elapsed();
            c.check(c.with.success(), "expected exit status 0");
            c.check(c.with.stdout_str() == expected, "unexpected output");
            c.check(took < Duration::from_secs(8), format!("both runs took {took:?}"));
            c.assert_no_ying_lines();
            exactly_one_complete_set(&c);
            // Named and symbolized although the main thread (whose /proc entries name the
            // executable) has ended.
            let r = c.main_report();
            c.check(r.exe == "lifecycle_pthread_exit", format!("set named {}", r.stem));
            let kept = r.folded().bytes_through("marker_lifecycle_keep");
            c.check(kept > 0, "marker_lifecycle_keep is not in the folded stacks");
        }
    }
}

/// Three threads call `exit(7)` at the same moment, 20 times: every run writes exactly one
/// complete set (glibc 2.36 lets a second exiting thread `_exit` while the first one is still
/// writing the exit report).
#[test]
fn exit_from_three_threads_at_once_writes_one_complete_set() {
    let dir = TestDir::new("lifecycle-exit-race");
    let exe = dir.compile_c("lifecycle_exit_race.c", &["-pthread"]);
    for i in 0..20 {
        for interval in ["0", "1"] {
            let vars = [
                ("YING_SAMPLE_INTERVAL_BYTES", "1"),
                ("YING_SEED", "1"),
                ("YING_CHECK_INTERVAL_SECS", interval),
            ];
            let c = compare(&Run::new(&exe), &vars, &dir.reports(&format!("{i}-{interval}")));
            c.check(c.with.code() == Some(7), "expected exit status 7");
            c.assert_no_ying_lines();
            exactly_one_complete_set(&c);
        }
    }
}

/// `exit(5)` from an `atexit` handler after `main` returned 0: one set, status 5.
#[test]
fn exit_from_an_atexit_handler_writes_one_complete_set() {
    let dir = TestDir::new("lifecycle-atexit-exit");
    let exe = dir.compile_c("lifecycle_atexit_exit.c", &[]);
    for interval in ["0", "1"] {
        let vars = [
            ("YING_SAMPLE_INTERVAL_BYTES", "1"),
            ("YING_SEED", "1"),
            ("YING_CHECK_INTERVAL_SECS", interval),
        ];
        let c = compare(&Run::new(&exe), &vars, &dir.reports(interval));
        c.check(c.with.code() == Some(5), "expected exit status 5");
        c.check(c.with.stdout_str() == "handler calls exit(5)\n", "unexpected output");
        c.assert_no_ying_lines();
        exactly_one_complete_set(&c);
    }
}

/// The exit follows the first file of a periodic dump of 65,536 stacks at once: the periodic
/// set and the exit report are both complete, and no temporary file is left.
#[test]
fn exit_during_a_periodic_dump_leaves_two_complete_sets_and_no_temporary_file() {
    let dir = TestDir::new("lifecycle-dump-exit");
    let exe = dir.compile_c("dump_race.c", &[]);
    let reports = dir.reports("dump");
    let vars = [
        ("YING_SAMPLE_INTERVAL_BYTES", "1"),
        ("YING_SEED", "1"),
        ("YING_CHECK_INTERVAL_SECS", "1"),
    ];
    let c = compare(&Run::new(&exe).arg(&reports), &vars, &reports);
    c.check(c.with.success(), "dump_race failed");
    let sets = c.main_reports();
    c.check(sets.len() == 2, format!("expected the periodic set and the exit set, {}", sets.len()));
    for s in &sets {
        for ext in SET_FILES {
            c.check(s.has(ext), format!("report set {} has no .{ext}", s.stem));
        }
    }
    no_temporary_files(&c, &reports);
}

/// CPython's `ThreadJoinOnShutdown.test_3_join_in_forked_from_thread`: a child forked from a
/// thread whose main thread is gone must still end (it hung under the shim).
#[test]
fn cpython_join_in_forked_from_thread_ends() {
    let Some((python, _)) = python3() else { return };
    let probe = Run::new(&python).args(&["-c", "import test.support"]).run();
    if !probe.success() {
        eprintln!("SKIPPED: python3 has no `test` package");
        return;
    }
    let dir = TestDir::new("lifecycle-cpython");
    let run = Run::new(&python)
        .args(&["-m", "test", "test_threading", "-m", "test_3_join_in_forked_from_thread"])
        .cwd(dir.path())
        .timeout(Duration::from_secs(120));
    let reports = dir.reports("py");
    let without = run.clone().without_preload().run();
    let with =
        run.clone().with_preload().env("YING_REPORTING_PATH", reports.display().to_string()).run();
    let both = format!(
        "=== WITHOUT ===\n{}=== WITH ===\n{}reports:\n{}",
        without.describe(),
        with.describe(),
        list_dir(&reports)
    );
    assert!(without.success(), "the plain run failed\n{both}");
    assert!(!with.timed_out, "the run with the shim hung\n{both}");
    assert_eq!(with.status, without.status, "exit status differs\n{both}");
    assert!(with.stdout_str().contains("SUCCESS"), "the test did not pass under the shim\n{both}");
}
