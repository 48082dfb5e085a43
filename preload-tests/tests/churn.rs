//! Process churn costs what the work costs: a process that ends within
//! `YING_SHORT_PROCESS_SECS` of its start writes its exit report as a raw profile (no symbol
//! read), which `ying report DIR`, `ying view` and `ying run` turn into the set it would have
//! written. Before, every short process that took a sample symbolized and wrote a whole set
//! inside `exit`: a fork storm ran at 0.43 of its plain rate (`programs/fork_storm.c`).

use std::path::Path;

use preload_tests::{EXACT, Run, TestDir, compare, report_sets, ying_bin};

/// Runs `short_run` (10 blocks of 100,000 bytes under `marker_short`) in exact mode with
/// `YING_SHORT_PROCESS_SECS=secs` into `reports`; returns the run's pid.
fn short_run(exe: &Path, secs: &str, reports: &Path) -> u32 {
    let mut vars: Vec<(&str, &str)> = EXACT.to_vec();
    vars.push(("YING_SHORT_PROCESS_SECS", secs));
    let c = compare(&Run::new(exe), &vars, reports);
    c.check(c.with.success(), "short_run failed under the shim");
    c.assert_no_ying_lines();
    c.with.pid
}

#[test]
fn a_short_process_writes_its_exit_raw_and_ying_report_makes_the_same_set() {
    let dir = TestDir::new("churn-raw");
    let exe = dir.compile_c("short_run.c", &[]);
    // In full: the set as the process writes it.
    let full = dir.reports("full");
    short_run(&exe, "0", &full);
    let full_set = report_sets(&full).pop().expect("the full exit report");
    let expected = full_set.folded().bytes_through("marker_short");
    assert!(expected >= 1_000_000, "marker_short {expected} bytes in full");
    // Raw: one file, the set's raw profile, and nothing else.
    let raw = dir.reports("raw");
    let pid = short_run(&exe, "5", &raw);
    let names: Vec<String> = std::fs::read_dir(&raw)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let raw_set = names.first().and_then(|n| ying_profiler::report::SetName::parse_file(n));
    assert!(
        names.len() == 1
            && raw_set.is_some_and(|(s, ext)| s.pid == pid && s.seq == 0 && ext == "live"),
        "expected the raw exit profile alone: {names:?}"
    );
    // `ying report DIR` makes the set, under the same name, with the same figures.
    let o = Run::new(ying_bin()).arg("report").arg(&raw).run();
    o.assert_success("ying report DIR");
    let made = report_sets(&raw);
    assert_eq!(made.len(), 1, "{}", o.describe());
    let set = &made[0];
    assert!(set.has("txt") && set.has("json") && set.has("pb.gz"), "{:?}", set.extensions);
    assert!(o.stdout_str().contains(&set.stem), "{}", o.describe());
    assert_eq!(set.folded().bytes_through("marker_short"), expected, "the same figures");
    let m = set.manifest();
    assert!(m.exiting, "the set made of the raw profile is the exit report");
    assert!(
        m.frames_named("marker_short")
            .any(|f| f.location.as_deref().is_some_and(|l| l.contains("short_run.c:"))),
        "marker_short named with its file and line"
    );
    // Once made, nothing more to make.
    let again = Run::new(ying_bin()).arg("report").arg(&raw).run();
    assert!(
        !again.success() && again.stderr_str().contains("no raw exit profile"),
        "{}",
        again.describe()
    );
}

#[test]
fn a_fork_storm_keeps_its_pace_and_leaves_a_bounded_directory() {
    let dir = TestDir::new("churn-storm");
    let exe = dir.compile_c("fork_storm.c", &[]);
    let reports = dir.reports("storm");
    // Defaults: each child draws its own countdown and writes its exit report raw when it
    // took a sample (about one in nine at 64 KiB a child).
    let c = compare(&Run::new(&exe).arg("2000"), &[("YING_SHORT_PROCESS_SECS", "5")], &reports);
    c.check(c.with.stdout_str() == "2000 children, 0 failed\n", "children failed");
    c.assert_no_ying_lines();
    let files = std::fs::read_dir(&reports).unwrap().count();
    // The parent's set (and page), at most 100 children's raw profiles beyond the few a pass
    // in eight leaves over (the retention), no temporary file.
    c.check(files <= 130, format!("{files} files after 2,000 children"));
    let raw = ying_profiler::report::live::read::raw_sets(&reports).unwrap();
    c.check(!raw.is_empty(), "no child took a sample: the countdowns are not their own");
    // Every raw profile a child left makes its set.
    let o = Run::new(ying_bin())
        .arg("report")
        .arg(&reports)
        .timeout(std::time::Duration::from_secs(120))
        .run();
    c.check(o.success(), format!("ying report DIR failed\n{}", o.describe()));
    c.check(
        ying_profiler::report::live::read::raw_sets(&reports).unwrap().is_empty(),
        "raw profiles left without their set",
    );
}

#[test]
fn an_exec_is_not_a_death() {
    let dir = TestDir::new("churn-exec");
    let exe = dir.compile_c("exec_chain.c", &[]);
    let reports = dir.reports("exec");
    // `ying run`, which turns leftover live files into heaps at death: the first image's,
    // removed at its exec, must not be one.
    let plain = Run::new(&exe).arg("first").run();
    plain.assert_success("exec_chain first, plain");
    let o = Run::new(ying_bin())
        .args(&["run", "-o"])
        .arg(&reports)
        .arg("--")
        .arg(&exe)
        .arg("first")
        .env("YING_CHECK_INTERVAL_SECS", "1")
        .env("YING_LIVE_INTERVAL_MS", "50")
        .run();
    assert_eq!(o.code(), plain.code(), "{}", o.describe());
    assert_eq!(o.stdout_str(), plain.stdout_str(), "{}", o.describe());
    assert!(
        !o.stderr_str().contains("heap at death")
            && !o.stderr_str().contains("without its exit report"),
        "an exec taken for a death:\n{}",
        o.describe()
    );
    let left: Vec<String> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        !left.iter().any(|n| n.ends_with(".live") && !n.contains(".0.")),
        "a live file was left: {left:?}"
    );
    // The second image, same pid, wrote its own exit report.
    let sets = report_sets(&reports);
    assert!(
        sets.iter().any(|s| s.folded().bytes_through("marker_second") > 0),
        "no set of the second image: {left:?}"
    );
}

#[test]
fn a_failed_exec_keeps_the_heap_at_death() {
    let dir = TestDir::new("churn-exec-fail");
    let exe = dir.compile_c("exec_chain.c", &[]);
    let reports = dir.reports("fail");
    let c = compare(
        &Run::new(&exe).arg("fail"),
        &[
            ("YING_CHECK_INTERVAL_SECS", "1"),
            ("YING_LIVE_FILE", "on"),
            ("YING_LIVE_INTERVAL_MS", "50"),
        ],
        &reports,
    );
    c.check(c.with.stdout_str() == "exec failed as it should\n", "unexpected output");
    c.assert_no_ying_lines();
    let live = preload_tests::live_file_of(&reports, c.with.pid);
    c.check(live.is_some(), "the live file removed at the failed exec was not written again");
}
