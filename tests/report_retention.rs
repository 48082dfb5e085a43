//! A runner keeps at most `max_report_sets` report sets of its own process in the reporting
//! directory: after 7 dumps with a limit of 3, exactly the 3 newest sets remain, each with all
//! of its files, while another process's sets, temporary files and unrelated files stay; with
//! a limit of 0 every set is kept. `dump_now` without a report thread (the handle of a runner
//! configured with `YING_CHECK_INTERVAL_SECS=0`) writes on the calling thread, and a wait for
//! the report thread that outlasts its bound is a `TimedOut` error, not a hang.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use ying_profiler::YingProfiler;
use ying_profiler::report::ReportContext;
use ying_profiler::utils::{ProfilerRunner, ProfilerRunnerBuilder};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(4096, 64 << 30);

/// Report sets in `dir` by (pid, seq), each with its extensions.
fn sets(dir: &Path) -> BTreeMap<(String, u64), Vec<String>> {
    let mut out: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let Some(rest) = name.strip_prefix("ying.") else { continue };
        let parts: Vec<&str> = rest.splitn(5, '.').collect();
        if parts.len() < 5 || parts[2].parse::<u64>().is_err() {
            continue;
        }
        let ext = parts[4].to_string();
        let exts =
            ["txt", "svg", "folded", "pb.gz", "peak.svg", "peak.folded", "peak.pb.gz", "json"];
        if !exts.contains(&ext.as_str()) {
            continue;
        }
        out.entry((parts[1].to_string(), parts[2].parse().unwrap())).or_default().push(ext);
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn a_runner_keeps_its_newest_sets_and_touches_nothing_else() {
    let dir = common::scratch("retention");
    let ctx = ReportContext::current();
    let exe = ctx.exe_name();
    let ts = "20261203T181500Z";
    // Another process of the same program, a temporary file, unrelated files.
    let other_pid = if ctx.pid == 1 { 2 } else { ctx.pid - 1 };
    let planted = [
        format!("ying.{exe}.{other_pid}.0.{ts}.txt"),
        format!("ying.{exe}.{other_pid}.0.{ts}.pb.gz"),
        format!(".ying.{exe}.{}.0.{ts}.txt.0123456789abcdef.tmp", ctx.pid),
        format!("ying.{exe}.{}.0.{ts}.txt.orig", ctx.pid),
        "notes.txt".to_string(),
    ];
    for n in &planted {
        std::fs::write(dir.join(n), b"keep").unwrap();
    }
    let kept: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 << 10]).collect();
    let runner = ProfilerRunnerBuilder::default()
        .check_interval_secs(3600usize)
        .reporting_path(dir.to_str().unwrap())
        .report_at_exit(false)
        .max_report_sets(3usize)
        .build()
        .unwrap();
    assert_eq!(runner.max_report_sets(), 3);
    assert_eq!(ProfilerRunnerBuilder::default().build().unwrap().max_report_sets(), 50);
    let handle = runner.spawn(&A);
    assert!(handle.has_thread());
    let mut seqs = Vec::new();
    for _ in 0..7 {
        let paths = handle.dump_now().expect("dump_now");
        let text = paths.text.expect("text report");
        let name = text.file_name().unwrap().to_str().unwrap().to_string();
        seqs.push(name.split('.').nth(3).unwrap().parse::<u64>().unwrap());
    }
    handle.stop();
    let own = ctx.process().to_string();
    let all = sets(&dir);
    let mine: Vec<u64> = all.keys().filter(|(p, _)| *p == own).map(|(_, s)| *s).collect();
    assert_eq!(mine, seqs[4..], "the 3 newest sets remain: {:#?}", names(&dir));
    for ((pid, seq), exts) in &all {
        if *pid == own {
            assert_eq!(
                exts,
                &["folded", "json", "pb.gz", "peak.folded", "peak.pb.gz", "peak.svg", "svg", "txt"],
                "set {seq} is whole"
            );
        }
    }
    for n in &planted {
        assert_eq!(std::fs::read(dir.join(n)).unwrap(), b"keep", "{n} was touched");
    }
    // The process's HTML report is no file of a set: it stays, with every dump in its timeline.
    let html = dir.join(format!("ying.{exe}.{}.html", ctx.process()));
    let page = std::fs::read_to_string(&html).expect("the HTML report stays");
    for seq in &seqs {
        assert!(page.contains(&format!("{{\"seq\":{seq},")), "dump {seq} in the page");
    }
    // After `stop`, the calling thread writes the dump; the limit still holds.
    assert!(!handle.has_thread());
    let paths = handle.dump_now().expect("dump_now after stop");
    assert!(paths.text.unwrap().exists());
    let mine = sets(&dir).keys().filter(|(p, _)| *p == own).count();
    assert_eq!(mine, 3, "{:#?}", names(&dir));
    drop(kept);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_limit_of_zero_keeps_every_set_and_a_handle_without_thread_writes_inline() {
    let dir = common::fresh_dir("retention-all");
    // The runner of `YING_CHECK_INTERVAL_SECS=0 YING_MAX_REPORT_SETS=0`: no report thread.
    let cfg = ying_profiler::config::Config {
        check_interval_secs: 0,
        max_report_sets: 0,
        report_at_exit: false,
        reporting_path: dir.clone(),
        ..Default::default()
    };
    let runner = ProfilerRunner::from_config(&cfg);
    assert_eq!(runner.max_report_sets(), 0);
    let handle = runner.spawn(&A);
    assert!(!handle.has_thread());
    let kept: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 << 10]).collect();
    for _ in 0..4 {
        let paths = handle.dump_now().expect("dump_now without a report thread");
        assert!(paths.text.unwrap().exists());
    }
    let own = ReportContext::current().process().to_string();
    assert_eq!(sets(&dir).keys().filter(|(p, _)| *p == own).count(), 4);
    drop(kept);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dump_that_outlasts_its_wait_is_an_error_not_a_hang() {
    let dir = common::fresh_dir("dump-timeout");
    // No live file: `stop` does not wait for the thread, which could be writing a version into
    // the directory while it is removed below (seen in CI: "Directory not empty").
    let handle = ProfilerRunnerBuilder::default()
        .check_interval_secs(3600usize)
        .reporting_path(dir.to_str().unwrap())
        .report_at_exit(false)
        .live_file(ying_profiler::utils::LiveFile::Off)
        .build()
        .unwrap()
        .spawn(&A);
    // No report thread finishes a set in no time: the request is made, the wait ends at once.
    let e = handle.dump_now_within(std::time::Duration::ZERO).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    // The thread still writes it; the next request is served (by that set or a later one).
    let paths = handle.dump_now().expect("dump_now after a timed-out one");
    assert!(paths.text.unwrap().exists());
    handle.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}
