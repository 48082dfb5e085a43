//! Other preloaded libraries beside the shim, before and after it in `LD_PRELOAD`: libfaketime
//! in its timestamp-file mode (its `clock_gettime` opens and reads a file, which allocates) and
//! `programs/allocating_preload.c`, which allocates inside every clock, `getpid`, `sysconf`,
//! `sched_yield` and `getrlimit` call. The shim's allocation and sampled paths call none of
//! them (the clock is the vDSO's, `sys/clock.rs`): when they did, a sample's clock read went
//! into `malloc`, whose next sample read the clock again, until the stack overflowed
//! (`SIGSEGV`). Every run samples often (a 4 KiB interval) and compares with the program under
//! the same preload alone.

use std::path::{Path, PathBuf};

use preload_tests::{Run, TestDir, compare};

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const SAMPLING: &[(&str, &str)] = &[("YING_SAMPLE_INTERVAL_BYTES", "4096")];

/// Runs `clock_alloc` with `object` preloaded before and after the shim (and alone as the
/// control), with `vars` in every run; the two runs must agree and the shim must have
/// written its exit report.
fn beside(dir: &TestDir, object: &Path, vars: &[(&str, &str)]) {
    let exe = dir.compile_c("clock_alloc.c", &[]);
    for (order, run) in [
        ("after", Run::new(&exe).preload_after(object)),
        ("before", Run::new(&exe).preload_before(object)),
    ] {
        let c = compare(&run.envs(vars), SAMPLING, &dir.reports(order));
        c.check(c.with.success(), format!("clock_alloc with the shim {order} the preload"));
        c.check(c.with.stdout_str().contains("clock ok"), "the clock did not answer");
        c.check(!c.main_reports().is_empty(), "no exit report");
        c.assert_no_ying_lines();
    }
}

#[test]
fn libfaketime_in_timestamp_file_mode() {
    if !Path::new(FAKETIME).exists() {
        println!("SKIPPED: {FAKETIME} is not installed (Debian's libfaketime)");
        return;
    }
    let dir = TestDir::new("faketime");
    let stamp = dir.join("faketime.txt");
    std::fs::write(&stamp, "+1d\n").expect("write the timestamp file");
    let vars = [
        ("FAKETIME_TIMESTAMP_FILE", stamp.to_str().expect("UTF-8 path")),
        ("FAKETIME_NO_CACHE", "1"),
    ];
    beside(&dir, Path::new(FAKETIME), &vars);
}

#[test]
fn a_preload_that_allocates_in_what_it_interposes() {
    let dir = TestDir::new("allocating-preload");
    let lib: PathBuf = dir.compile_c("allocating_preload.c", &["-shared", "-fPIC", "-ldl"]);
    beside(&dir, &lib, &[]);
}
