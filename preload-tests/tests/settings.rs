//! The settings that decide whether, when and what to report, seen from outside: disabled
//! profiling and disabled reports write nothing, a periodic check writes a baseline report
//! before the final one, flamegraphs can be turned off, a relative reporting path is relative
//! to the program's working directory, and a process's oldest sets beyond
//! `YING_MAX_REPORT_SETS` are removed (nothing else is). Output and status never change.

use preload_tests::{Comparison, Run, TestDir, compare, report_sets};

fn hello(dir: &TestDir, args: &[&str], vars: &[(&str, &str)], name: &str) -> Comparison {
    let exe = dir.join("hello");
    let exe = if exe.exists() { exe } else { dir.compile_c("hello.c", &[]) };
    let c = compare(&Run::new(&exe).args(args).cwd(dir.path()), vars, &dir.reports(name));
    c.check(c.with.success(), "hello.c failed");
    c.check(c.with.stdout_str() == "hello 21828\n", "unexpected output");
    c.assert_no_ying_lines();
    c
}

#[test]
fn nothing_is_written_when_profiling_or_reporting_is_off() {
    let dir = TestDir::new("off");
    let c = hello(&dir, &[], &[("YING_ENABLED", "false")], "disabled");
    c.check(!c.reports.exists(), "YING_ENABLED=false created the reporting directory");
    let vars = [("YING_REPORT_AT_EXIT", "false"), ("YING_CHECK_INTERVAL_SECS", "0")];
    let c = hello(&dir, &[], &vars, "no-reports");
    c.check(c.report_sets().is_empty(), "reports written with reporting off");
}

#[test]
fn periodic_check_writes_a_baseline_then_the_final_report() {
    let dir = TestDir::new("periodic");
    // Runs 1.9 s with a check every second.
    let c = hello(&dir, &["0", "1900"], &[("YING_CHECK_INTERVAL_SECS", "1")], "periodic");
    let sets = c.main_reports();
    let seqs: Vec<u64> = sets.iter().map(|s| s.seq).collect();
    c.check(seqs == [0, 1], format!("report sequence numbers {seqs:?}, expected [0, 1]"));
}

#[test]
fn flamegraphs_can_be_turned_off() {
    let dir = TestDir::new("no-svg");
    let c = hello(&dir, &[], &[("YING_GEN_FLAMEGRAPHS", "false")], "no-svg");
    let r = c.main_report();
    c.check(r.has("txt") && r.has("folded") && !r.has("svg"), "expected .txt and .folded only");
}

#[test]
fn relative_reporting_path_is_relative_to_the_working_directory() {
    let dir = TestDir::new("relative");
    let c = hello(&dir, &[], &[("YING_REPORTING_PATH", "rel/reports")], "unused");
    let sets = report_sets(&dir.join("rel/reports"));
    c.check(
        sets.iter().any(|s| s.pid == c.with.pid),
        "no report in <cwd>/rel/reports for a relative YING_REPORTING_PATH",
    );
}

#[test]
fn old_report_sets_of_the_process_are_removed_beyond_the_limit() {
    let dir = TestDir::new("retention");
    let exe = dir.compile_c("hello.c", &[]);
    let reports = dir.reports("retention");
    // Another process's set and unrelated files, which must stay.
    std::fs::create_dir_all(&reports).unwrap();
    let planted =
        ["ying.hello.1.0.20261203T181500Z.txt", "ying.hello.1.0.20261203T181500Z.svg", "notes"];
    for n in planted {
        std::fs::write(reports.join(n), b"keep").unwrap();
    }
    // Runs 4.5 s with a report at every check (every second) and at exit, keeping 2 sets.
    let vars = [
        ("YING_CHECK_INTERVAL_SECS", "1"),
        ("YING_REPORT_PCT_CHANGE_TRIGGER", "0"),
        ("YING_MAX_REPORT_SETS", "2"),
    ];
    let c = compare(&Run::new(&exe).args(&["0", "4500"]).cwd(dir.path()), &vars, &reports);
    c.check(c.with.success(), "hello.c failed");
    c.assert_no_ying_lines();
    let seqs: Vec<u64> = c.main_reports().iter().map(|s| s.seq).collect();
    // Sequence numbers count every set the process wrote: at least 3 (more than the limit).
    c.check(
        seqs.len() == 2 && seqs[0] + 1 == seqs[1] && seqs[1] >= 2,
        format!("kept sets {seqs:?}, expected the 2 newest of at least 3"),
    );
    for s in c.main_reports() {
        c.check(s.has("txt") && s.has("pb.gz") && s.has("folded"), "a kept set is not whole");
    }
    for n in planted {
        c.check(std::fs::read(reports.join(n)).ok().as_deref() == Some(b"keep"), n);
    }
}
