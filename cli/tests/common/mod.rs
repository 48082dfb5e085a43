//! Helpers of the `ying` command's tests: the command itself, `go tool pprof`, and the rows of
//! their `-top` tables.

#![allow(dead_code)] // Each test file uses its own part.

use std::path::{Path, PathBuf};
use std::time::Duration;

use preload_tests::{Outcome, Run, TestDir, preload_lib, require_tool};

/// A run of the `ying` binary under test.
pub fn ying() -> Run {
    Run::new(env!("CARGO_BIN_EXE_ying"))
}

/// `cli/tests/data/<name>`.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// One row of a `-top` table: flat, cum (as printed, a trailing `B` removed: pprof prints a
/// zero as `0`), the function's name and pprof's mark (`(inline)`, `(partial-inline)` or
/// empty).
pub type TopRow = (String, String, String, String);

/// The rows of a `-top` table printed by `go tool pprof` or by `ying`: lines whose second
/// column is a percentage (`ying diff`'s z and noise columns skipped).
pub fn top_rows(text: &str) -> Vec<TopRow> {
    let value = |v: &str| v.strip_suffix('B').unwrap_or(v).to_string();
    text.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() < 6 || !cols[1].ends_with('%') || cols[0] == "flat" {
                return None;
            }
            // `ying diff` puts its noise columns (z, beyond or within) before the name.
            let noise = cols.len() >= 8 && ["beyond", "within"].contains(&cols[6]);
            // `ying top` of a profile with standard errors puts their interval there.
            let interval = cols.len() >= 7 && cols[5].starts_with('±');
            let mut name: Vec<&str> = cols[if noise {
                7
            } else if interval {
                6
            } else {
                5
            }..]
                .to_vec();
            let mark = match name.last() {
                Some(&m) if m == "(inline)" || m == "(partial-inline)" => name.pop(),
                _ => None,
            };
            Some((value(cols[0]), value(cols[3]), name.join(" "), mark.unwrap_or("").to_string()))
        })
        .collect()
}

/// `go tool pprof ARGS`, which must succeed; None (the test is skipped) without Go.
pub fn go_pprof(args: &[&str]) -> Option<String> {
    let go = require_tool("go")?;
    let o =
        Run::new(go).arg("tool").arg("pprof").args(args).timeout(Duration::from_secs(300)).run();
    o.assert_success("go tool pprof");
    Some(o.stdout_str())
}

/// Asserts that `ying`'s table and pprof's agree on their first `n` rows: the same functions
/// in the same order with equal flat and cum values.
pub fn assert_same_top(ours: &str, theirs: &str, n: usize) {
    let (a, b) = (top_rows(ours), top_rows(theirs));
    assert!(a.len() >= n && b.len() >= n, "fewer than {n} rows:\nying:\n{ours}\npprof:\n{theirs}");
    assert_eq!(a[..n], b[..n], "\nying:\n{ours}\npprof:\n{theirs}");
}

/// The ying run's output, which must succeed.
pub fn success(o: Outcome, what: &str) -> Outcome {
    o.assert_success(what);
    o
}

/// Builds `tests/data/goheap.go` into `dir` and runs it: the two heap profiles it writes,
/// before and after; None (the test is skipped) without Go.
pub fn go_heap_profiles(dir: &TestDir) -> Option<(PathBuf, PathBuf)> {
    let go = require_tool("go")?;
    let exe = dir.join("goheap");
    Run::new(go)
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(data("goheap.go"))
        .cwd(dir.path())
        .timeout(Duration::from_secs(600))
        .run()
        .assert_success("go build goheap.go");
    let (a, b) = (dir.join("before.pb.gz"), dir.join("after.pb.gz"));
    Run::new(&exe).arg(&a).arg(&b).run().assert_success("goheap");
    Some((a, b))
}

/// `exe` under the shim reporting to `reports`: a check (and a set) every second, a sample per
/// 64 KiB on average, no flamegraphs.
pub fn every_second(exe: &Path, reports: &Path) -> Run {
    Run::new(exe)
        .env("LD_PRELOAD", preload_lib().to_str().unwrap())
        .env("YING_REPORTING_PATH", reports.to_str().unwrap())
        .env("YING_SAMPLE_INTERVAL_BYTES", "64KiB")
        .env("YING_CHECK_INTERVAL_SECS", "1")
        .env("YING_REPORT_PCT_CHANGE_TRIGGER", "0")
        .env("YING_GEN_FLAMEGRAPHS", "0")
}
