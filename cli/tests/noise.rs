//! Change told apart from sampling noise, on a real program under the shim
//! (preload-tests/programs/noise.c) sampled every 64 KiB: `ying diff` of two dumps of an
//! unchanged program marks nothing beyond noise, of a program that leaks at one site marks
//! that site alone; and `ying leaks` (and the HTML pages' panel) lists the leak alone, not the
//! working set that churns nor the cache that filled and stopped.
//!
//! Needs the shim, found like the preload tests find it (`YING_TEST_PRELOAD`, or the
//! workspace's target/release/libying.so).

mod common;

use std::path::{Path, PathBuf};

use common::{success, top_rows, ying};
use preload_tests::{TestDir, report_sets};

/// Runs `noise ARGS` under the shim, a check (and a set) every second, a sample per 64 KiB on
/// average; returns the reporting directory.
fn run_noise(dir: &TestDir, name: &str, args: &[&str]) -> PathBuf {
    let exe = dir.compile_c("noise.c", &[]);
    let reports = dir.reports(name);
    let o = common::every_second(&exe, &reports).args(args).run();
    o.assert_success("noise.c under the shim");
    reports
}

/// `ying diff --sample inuse_space` of the first and last sets in `reports`: its output.
fn diff_first_last(dir: &TestDir, reports: &Path) -> String {
    let sets = report_sets(reports);
    assert!(sets.len() >= 3, "a set a second: {sets:?}");
    diff_sets(dir, reports, 0, sets.len() - 1)
}

/// `ying diff --sample inuse_space` of sets `a` and `b` (indices) in `reports`: its output.
fn diff_sets(dir: &TestDir, reports: &Path, a: usize, b: usize) -> String {
    let sets = report_sets(reports);
    let (a, b) = (reports.join(&sets[a].stem), reports.join(&sets[b].stem));
    let out = dir.join("d");
    let d = ying()
        .args(&["diff", "--sample", "inuse_space", "-o", out.to_str().unwrap()])
        .arg(&a)
        .arg(&b)
        .run();
    let text = success(d, "ying diff").stdout_str();
    eprintln!("{text}");
    // The file says the same, in the same words, with every row listed.
    let txt = std::fs::read_to_string(dir.join("d.txt")).expect("the .txt");
    let first_line =
        |t: &str| t.lines().find(|l| l.starts_with("Showing")).unwrap_or("").to_string();
    let (printed, written) = (first_line(&text), first_line(&txt));
    assert!(printed.starts_with("Showing ") && written.starts_with("Showing "), "{text}\n{txt}");
    text
}

#[test]
fn a_diff_of_an_unchanged_program_has_nothing_beyond_noise() {
    let dir = TestDir::new("noise-steady");
    let reports = run_noise(&dir, "steady", &["steady", "4"]);
    let n = report_sets(&reports).len();
    assert!(n >= 3, "a set a second");
    // Nothing beyond noise. The working set's bytes are sampled afresh between dumps, so a
    // pair of dumps usually differs there, within noise, folded; but two dumps can hold the
    // same number of its equal-weight samples (a few per cent of pairs), so the pair looked at
    // for the fold is the first that changed at all.
    let mut changed = None;
    for (a, b) in [(0, n - 1), (0, n - 2), (1, n - 1), (1, n - 2)] {
        let text = diff_sets(&dir, &reports, a, b);
        assert!(text.contains(": 0 beyond sampling noise"), "{text}");
        assert!(top_rows(&text).is_empty(), "no row listed: {text}");
        if text.contains("functions within noise, flat change") {
            changed = Some((a, b));
            break;
        }
    }
    let (a, b) = changed.expect("some pair of dumps differs within noise");
    // --all lists it, marked within.
    let all = ying()
        .args(&["diff", "--all", "--sample", "inuse_space", "-o"])
        .arg(dir.join("all"))
        .arg(reports.join(&report_sets(&reports)[a].stem))
        .arg(reports.join(&report_sets(&reports)[b].stem))
        .run();
    let all = success(all, "ying diff --all").stdout_str();
    let line = all.lines().find(|l| l.ends_with(" keep_working_set")).unwrap_or_else(|| {
        panic!("--all lists the working set: {all}");
    });
    assert!(line.contains(" within "), "{line}");
}

#[test]
fn a_diff_of_a_leaking_program_marks_the_leak_alone() {
    let dir = TestDir::new("noise-leak");
    let reports = run_noise(&dir, "leak", &["leak", "5"]);
    let text = diff_first_last(&dir, &reports);
    let rows = top_rows(&text);
    let names: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(names, ["leak_slowly"], "{text}");
    assert!(text.contains(": 1 beyond sampling noise"), "{text}");
    let line = text.lines().find(|l| l.ends_with(" leak_slowly")).expect("the leak's row");
    assert!(line.contains(" beyond "), "{line}");
    // About 8 MiB grew (2 MiB a second for the four seconds between the first set, at the
    // first check, and the exit report's).
    let grew: f64 = line
        .split_whitespace()
        .next()
        .and_then(|v| v.strip_suffix("MiB"))
        .map_or(0.0, |v| v.parse().unwrap_or(0.0));
    assert!((5.0..=11.0).contains(&grew), "{line}");
}

#[test]
fn leak_suspects_are_the_leak_alone_not_the_churn_nor_the_filled_cache() {
    let dir = TestDir::new("noise-suspects");
    // The cache fills over the first 3 s of 9, then stays: it grew and its blocks are old,
    // but not in the later half.
    let reports = run_noise(&dir, "suspects", &["leak", "9", "3"]);
    let o = success(ying().arg("leaks").arg(&reports).run(), "ying leaks");
    let text = o.stdout_str();
    eprintln!("{text}");
    assert!(text.starts_with("LEAK SUSPECTS of noise (pid "), "{text}");
    let suspects: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with('#')).collect();
    assert_eq!(suspects.len(), 1, "{text}");
    assert!(suspects[0].contains("leak_slowly"), "{text}");
    for other in ["keep_working_set", "fill_cache", "churn_temporaries"] {
        assert!(!text.contains(other), "{other} is no suspect: {text}");
    }
    // 2 MiB a second is 7.0 GiB an hour.
    let rate = suspects[0].split_whitespace().nth(1).expect("a rate");
    assert!(rate.parse::<f64>().is_ok_and(|r| (5.0..=9.0).contains(&r)), "{rate}: {text}");
    assert!(suspects[0].contains(" GiB/h "), "{text}");

    // The process's own page and `ying view`'s page list it in their panel.
    let own = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("ying.noise.") && n.ends_with(".html")
        })
        .map(|p| std::fs::read_to_string(p).unwrap());
    let v = success(ying().arg("view").arg(&reports).run(), "ying view");
    let view = std::fs::read_to_string(v.stdout_str().trim()).expect("the view");
    for page in own.iter().chain([&view]) {
        let panel = page.split("<h3>Leak suspects</h3>").nth(1).expect("the panel");
        let panel = panel.split("</table>").next().unwrap();
        assert_eq!(panel.matches("class=\"suspect\"").count(), 1, "{panel}");
        assert!(panel.contains("leak_slowly") && !panel.contains("fill_cache"), "{panel}");
    }
}

#[test]
fn a_stack_that_grew_all_run_and_was_freed_before_exit_is_no_suspect() {
    let dir = TestDir::new("noise-freed");
    // Leaks for 6 s (a suspect at every dump), then frees every block before it exits: the
    // exit set lists every stack that still retains bytes, and the leak is not among them.
    let reports = run_noise(&dir, "freed", &["leak-freed", "6"]);
    let sets = report_sets(&reports);
    let exit = sets.last().expect("an exit set");
    let manifest = std::fs::read_to_string(exit.path("json")).unwrap();
    assert!(manifest.contains("\"entries_complete\":true"), "{manifest}");
    let o = success(ying().arg("leaks").arg(&reports).run(), "ying leaks");
    let text = o.stdout_str();
    eprintln!("{text}");
    assert!(text.starts_with("LEAK SUSPECTS of noise (pid "), "{text}");
    assert!(text.contains("\n  none\n"), "a stack at 0 B is no suspect: {text}");
    assert!(!text.contains("leak_slowly"), "{text}");
    // Control: the dumps that held the leak, without the exit's, list it. They are those taken
    // at least half a second before the exit set: the program holds the leak 1.5 s and then
    // frees it right before it exits, so a periodic dump that falls on the frees (taken
    // within milliseconds of the exit's) is left out.
    let taken = |s: &preload_tests::ReportSet| -> u64 {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(s.path("json")).unwrap()).unwrap();
        m["taken_at_ms"].as_u64().expect("taken_at_ms")
    };
    let exit_ms = taken(exit);
    let held: Vec<&preload_tests::ReportSet> =
        sets.iter().filter(|s| taken(s) + 500 < exit_ms).collect();
    assert!(held.len() >= 3, "{sets:?}");
    let before: Vec<PathBuf> = held.iter().map(|s| s.path("json")).collect();
    let o = success(ying().arg("leaks").args(&before).run(), "ying leaks (before the exit)");
    assert!(o.stdout_str().contains("leak_slowly"), "{}", o.stdout_str());
    // `ying top` of the exit set's profile points at its peak; of a set that held its peak,
    // it does not.
    let top = success(ying().arg("top").arg(exit.path("pb.gz")).run(), "ying top").stdout_str();
    let first = top.lines().next().unwrap_or_default();
    assert!(first.starts_with("First read: retained at exit is "), "{top}");
    assert!(first.contains(".peak.pb.gz` shows the peak's functions"), "{top}");
    let top = success(ying().arg("top").arg(held[held.len() - 1].path("pb.gz")).run(), "ying top")
        .stdout_str();
    assert!(top.starts_with("File: "), "{top}");
    // The process's own page, written at exit from its timeline, agrees.
    let own = std::fs::read_dir(&reports).unwrap().map(|e| e.unwrap().path()).find(|p| {
        let n = p.file_name().unwrap().to_str().unwrap();
        n.starts_with("ying.noise.") && n.ends_with(".html")
    });
    let page = std::fs::read_to_string(own.expect("the process's page")).unwrap();
    let panel = page.split("<h3>Leak suspects</h3>").nth(1).expect("the panel");
    let panel = panel.split("</table>").next().unwrap();
    assert!(!panel.contains("class=\"suspect\""), "{panel}");
}

#[test]
fn one_exit_report_says_which_stacks_never_freed_anything() {
    let dir = TestDir::new("noise-one-dump");
    let exe = dir.compile_c("noise.c", &[]);
    // Reports at exit only: one dump, too few for the trend test. Written in the process, and
    // as the raw exit of a short process that `ying report` renders (the process's life then
    // comes from the file).
    for (name, short_secs) in [("in-process", "0"), ("raw", "60")] {
        let reports = dir.reports(name);
        let o = common::every_second(&exe, &reports)
            .env("YING_CHECK_INTERVAL_SECS", "0")
            .env("YING_SHORT_PROCESS_SECS", short_secs)
            .args(&["leak", "4"])
            .run();
        o.assert_success("noise.c under the shim");
        if short_secs != "0" {
            success(ying().arg("report").arg(&reports).run(), "ying report");
        }
        let sets = report_sets(&reports);
        assert_eq!(sets.len(), 1, "{name}: {sets:?}");
        let text = sets[0].text();
        let block = |f: &str| -> String {
            text.split("\n#")
                .find(|b| b.contains(&format!("     {f} (")))
                .unwrap_or_else(|| panic!("{name}: no entry for {f}:\n{text}"))
                .to_string()
        };
        // The leak: all its sampled blocks live, half the run old on average.
        let leak = block("leak_slowly");
        assert!(leak.contains("   never freed: none of its "), "{name}: {leak}");
        assert!(leak.contains("a leak, or a cache that never evicts"), "{name}: {leak}");
        // The working set replaces its blocks: some were freed.
        let working = block("keep_working_set");
        assert!(!working.contains("never freed"), "{name}: {working}");
        // `ying leaks` says why it has no trend to test.
        let l = success(ying().arg("leaks").arg(&reports).run(), "ying leaks").stdout_str();
        assert!(
            l.contains("none: the trend test needs at least 3 dumps of the process and has 1"),
            "{name}: {l}"
        );
    }
}
