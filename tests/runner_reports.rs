//! The runner writes a baseline at its first check, then a report only when exact retained
//! memory moved by the trigger percentage since the last report; `dump_now` writes at once;
//! every report set has the documented stem and files; the builder names bad fields.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use ying_profiler::YingProfiler;
use ying_profiler::utils::{ProfilerRunner, ProfilerRunnerBuilder};

#[global_allocator]
static A: YingProfiler = YingProfiler::new(64 * 1024, 64 << 30);

fn txt_reports(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.retain(|n| n.ends_with(".txt"));
    v.sort();
    v
}

fn wait_for(dir: &Path, n: usize, timeout: Duration) -> usize {
    let start = Instant::now();
    loop {
        let c = txt_reports(dir).len();
        if c >= n || start.elapsed() > timeout {
            return c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[inline(never)]
fn marker_ballast(mib: usize) -> Vec<u8> {
    black_box(vec![1u8; mib << 20])
}

#[test]
fn runner_reports_on_change_and_on_demand() {
    // Interval 0 means what YING_CHECK_INTERVAL_SECS=0 means: no periodic checks.
    let r = ProfilerRunnerBuilder::default().check_interval_secs(0usize).build().unwrap();
    assert_eq!(r.check_interval_secs(), 0);
    // Builder errors name the field.
    let e = ProfilerRunnerBuilder::default().top_k(0usize).build().unwrap_err();
    assert_eq!(e.field, "top_k");
    let file = std::env::temp_dir().join(format!("ying-runner-file-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let e = ProfilerRunnerBuilder::default()
        .reporting_path(file.to_str().unwrap())
        .build()
        .unwrap_err();
    assert_eq!(e.field, "reporting_path");
    assert!(e.to_string().contains("is not a directory"), "{e}");
    std::fs::remove_file(&file).unwrap();

    // The seed's defaults.
    let seed = ProfilerRunner::seed_defaults();
    assert_eq!(seed.check_interval_secs(), 300);
    assert_eq!(seed.report_pct_change_trigger(), 10);
    assert_eq!(seed.reporting_path(), "ying-profiles");
    assert!(seed.gen_flamegraphs() && !seed.measure_allocated_not_retained());

    // The trigger rule itself.
    let r = ProfilerRunnerBuilder::default().report_pct_change_trigger(10usize).build().unwrap();
    assert!(r.should_report(None, 5));
    assert!(!r.should_report(Some(1000), 1099));
    assert!(r.should_report(Some(1000), 1100));
    assert!(r.should_report(Some(1000), 900));

    let dir = common::fresh_dir("runner");
    let ballast = marker_ballast(32);
    let runner = ProfilerRunnerBuilder::default()
        .check_interval_secs(1usize)
        .report_pct_change_trigger(25usize)
        .reporting_path(dir.to_str().unwrap())
        .gen_flamegraphs(true)
        // This test removes the directory when done: no report at the harness's exit.
        .report_at_exit(false)
        .build()
        .unwrap();
    let handle = runner.spawn(&A);
    assert_eq!(wait_for(&dir, 1, Duration::from_secs(10)), 1, "baseline at the first check");
    // Steady memory: checks pass without reports.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(txt_reports(&dir).len(), 1, "no report without a 25% change");
    // +100%: the next check reports.
    let more = marker_ballast(32);
    assert_eq!(wait_for(&dir, 2, Duration::from_secs(10)), 2, "report after the change");
    let paths = handle.dump_now().expect("dump_now");
    assert_eq!(txt_reports(&dir).len(), 3, "dump_now writes at once");
    assert!(paths.text.as_ref().is_some_and(|p| p.exists()), "{paths:?}");
    handle.stop();

    let names = txt_reports(&dir);
    let exe = std::env::current_exe().unwrap();
    let exe_name = exe.file_name().unwrap().to_string_lossy().into_owned();
    for (seq, n) in names.iter().enumerate() {
        let stem = n.strip_suffix(".txt").unwrap();
        let parts: Vec<&str> = stem.split('.').collect();
        assert_eq!(parts[0], "ying");
        assert_eq!(
            parts[1],
            exe_name.replace(|c: char| !c.is_ascii_alphanumeric() && !".-_".contains(c), "_")
        );
        let process: ying_profiler::report::ProcessId = parts[2].parse().expect(n);
        assert_eq!(process.pid, std::process::id(), "{n}");
        assert!(process.instance.is_some(), "the name carries the process's instance: {n}");
        assert!(parts[3].parse::<u64>().is_ok(), "{n}");
        assert!(parts[4].len() == 16 && parts[4].ends_with('Z') && !n.contains(':'), "{n}");
        let _ = seq;
        for ext in ["folded", "svg", "pb.gz"] {
            assert!(dir.join(format!("{stem}.{ext}")).exists(), "{stem}.{ext} missing");
        }
    }
    let last = std::fs::read_to_string(dir.join(names.last().unwrap())).unwrap();
    assert!(last.contains("marker_ballast"), "{last}");
    // The runner's own work (snapshots, rendering, file writes) is never sampled.
    for s in A.snapshot().stacks {
        for f in &s.frames {
            // (Building a runner and its handle on this thread allocates the program's memory:
            // `ProfilerRunnerBuilder::build` may be sampled. Its work may not.)
            for own in [
                "write_report_set",
                "write_compact",
                "ProfilerRunner::run",
                "ProfilerRunner::write_now",
                "render_svg",
                "snapshot::take",
            ] {
                assert!(!f.function.contains(own), "runner work was profiled: {}", f.function);
            }
        }
    }
    drop((ballast, more));
    std::fs::remove_dir_all(&dir).unwrap();
}
