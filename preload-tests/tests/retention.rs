//! The reporting directory stays bounded across processes (`YING_RETAIN_SETS`,
//! `YING_RETAIN_BYTES`): 150 runs of a short program (`programs/short_run.c`: one exit report
//! each) into one directory leave the newest 100 sets with the default
//! retention, and temporary files that a killed writer left are removed by the next process's
//! pass once they are a minute old. Before, `YING_MAX_REPORT_SETS` counted per process only:
//! 300 runs left 300 sets, growing without bound, and a `kill -9` during a set left a `.tmp`
//! that nothing removed.

use std::time::{Duration, SystemTime};

use preload_tests::{Run, TestDir, compare, report_sets};

const RUNS: usize = 150;
/// 10 MB kept: a sample (and so an exit report) in every run, at the default interval.
const ARGS: [&str; 2] = ["10", "1000000"];

/// A temporary file as a writer killed during a set leaves it, `secs` old.
fn plant_temp(dir: &std::path::Path, pid: u32, secs: u64) -> std::path::PathBuf {
    let p =
        dir.join(format!(".ying.short_run.{pid}.0.20261207T101500Z.pb.gz.0123456789abcdef.tmp"));
    std::fs::write(&p, b"").unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
    p
}

#[test]
fn runs_into_one_directory_keep_the_newest_sets_and_no_leftovers() {
    let dir = TestDir::new("retention");
    let exe = dir.compile_c("short_run.c", &[]);
    let reports = dir.reports("shared");
    let run = |r: Run| {
        r.with_preload()
            .env("YING_REPORTING_PATH", reports.display().to_string())
            .env("YING_CHECK_INTERVAL_SECS", "0")
            .env("YING_GEN_FLAMEGRAPHS", "false")
            .run()
    };
    let mut last_pid = 0;
    for i in 0..RUNS {
        let out = run(Run::new(&exe).args(&ARGS));
        out.assert_success(&format!("run {i}"));
        last_pid = out.pid;
    }
    let sets = report_sets(&reports);
    assert_eq!(sets.len(), 100, "{} sets after {RUNS} runs: expected the newest 100", sets.len());
    assert!(sets.iter().any(|s| s.pid == last_pid), "the last run's set is gone");
    // A killed writer's leftovers: a minute old and the writer gone (a pid no process has),
    // removed; a young one and one of a running process (this test's pid), kept.
    let dead = (0..100)
        .map(|i| 4_194_200 + i)
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    let old = plant_temp(&reports, dead, 120);
    let young = plant_temp(&reports, dead + 1, 5);
    let running = plant_temp(&reports, std::process::id(), 120);
    // One more run, beside its plain run.
    let c = compare(
        &Run::new(&exe).args(&ARGS),
        &[("YING_CHECK_INTERVAL_SECS", "0"), ("YING_GEN_FLAMEGRAPHS", "false")],
        &reports,
    );
    c.check(c.with.success(), "the last run failed under the shim");
    c.assert_no_ying_lines();
    c.check(!old.exists(), "a killed writer's temporary file was left");
    c.check(young.exists() && running.exists(), "a temporary file being written was removed");
    c.check(report_sets(&reports).len() == 100, "retention did not hold at 100 sets");
}

#[test]
fn a_byte_limit_keeps_the_newest_sets_within_it() {
    let dir = TestDir::new("retention-bytes");
    let exe = dir.compile_c("short_run.c", &[]);
    let reports = dir.reports("shared");
    for i in 0..12 {
        let out = Run::new(&exe)
            .args(&ARGS)
            .with_preload()
            .env("YING_REPORTING_PATH", reports.display().to_string())
            .env("YING_CHECK_INTERVAL_SECS", "0")
            .env("YING_GEN_FLAMEGRAPHS", "false")
            .env("YING_RETAIN_BYTES", "64KiB")
            .run();
        out.assert_success(&format!("run {i}"));
    }
    let bytes: u64 = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ying."))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let sets = report_sets(&reports).len();
    println!("{sets} sets, {bytes} bytes");
    assert!(bytes <= 64 << 10, "{bytes} bytes of sets kept against a limit of 64 KiB");
    assert!((1..12).contains(&sets), "{sets} sets kept");
}

#[test]
fn ying_view_removes_what_killed_writers_left() {
    let dir = TestDir::new("retention-view");
    let exe = dir.compile_c("short_run.c", &[]);
    let reports = dir.reports("view");
    let out = Run::new(&exe)
        .args(&ARGS)
        .with_preload()
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .env("YING_CHECK_INTERVAL_SECS", "0")
        .run();
    out.assert_success("short_run under the shim");
    let dead = (0..100)
        .map(|i| 4_194_300 + i)
        .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        .expect("a free pid");
    let old = plant_temp(&reports, dead, 120);
    let o = Run::new(preload_tests::ying_bin()).arg("view").arg(&reports).run();
    o.assert_success("ying view");
    assert!(!old.exists(), "ying view left a killed writer's temporary file\n{}", o.describe());
    assert!(
        o.stderr_str().contains("removed 1 temporary file"),
        "ying view did not say what it removed\n{}",
        o.describe()
    );
}
