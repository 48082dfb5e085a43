//! The `.pb.gz` heap profile read by the real client, `go tool pprof`: in exact mode its
//! `inuse_space` and `alloc_space` tops name the marker functions with the exact byte totals,
//! and its `resident_space` top (`YING_RESIDENT`, on by default) the bytes in memory: all of
//! the filled blocks, about none of a zeroed block never touched; pprof still opens it on
//! `inuse_space`.
//! Needs Go (`scripts/test.sh` installs Debian's golang-go when missing).

mod common;

use std::hint::black_box;
use std::process::Command;
use ying_profiler::YingProfiler;
use ying_profiler::report::ReportOptions;
use ying_profiler::utils::write_report_now;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_pprof_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..40 {
        out.push(black_box(vec![5u8; 25_000].into_boxed_slice()));
    }
}

/// A zeroed block never touched: `calloc`'s fresh pages, not in memory.
#[inline(never)]
fn marker_pprof_untouched() -> Vec<u8> {
    black_box(vec![0u8; 16 << 20])
}

#[inline(never)]
fn marker_pprof_churn() {
    for _ in 0..30 {
        drop(black_box(vec![6u8; 100_000]));
    }
}

/// A trait method: its name, `<alloc::vec::Vec<...> as pprof_go_tool::Grow>::...`, starts with
/// `<`, which pprof would take for C++ template arguments to cut.
trait Grow {
    fn marker_pprof_grow(&mut self);
}

impl Grow for Vec<Box<[u8]>> {
    #[inline(never)]
    fn marker_pprof_grow(&mut self) {
        for _ in 0..10 {
            self.push(black_box(vec![7u8; 30_000].into_boxed_slice()));
        }
    }
}

#[test]
fn go_tool_pprof_reads_our_profile() {
    let mut keep = Vec::with_capacity(40);
    marker_pprof_keep(&mut keep);
    let mut grown = Vec::with_capacity(10);
    grown.marker_pprof_grow();
    let untouched = marker_pprof_untouched();
    marker_pprof_churn();
    let dir = common::fresh_dir("pprof");
    let paths = write_report_now(&A, &ReportOptions::default(), &dir).unwrap();
    let pb = paths.pprof.expect("a .pb.gz was written");
    assert!(pb.to_string_lossy().ends_with(".pb.gz"));
    let go = Command::new("go").arg("version").output();
    assert!(
        go.is_ok_and(|o| o.status.success()),
        "go is required: run scripts/test.sh (installs golang-go)"
    );
    let run = |index: &str| {
        let out = Command::new("go")
            .args([
                "tool",
                "pprof",
                "-top",
                "-unit=B",
                "-nodecount=200",
                &format!("-sample_index={index}"),
            ])
            .arg(&pb)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "go tool pprof failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let inuse = run("inuse_space");
    assert!(inuse.contains("Type: inuse_space"), "{inuse}");
    assert_eq!(common::cum_bytes(&inuse, "marker_pprof_keep"), Some(40 * 25_000), "{inuse}");
    assert_eq!(common::cum_bytes(&inuse, "marker_pprof_churn"), None, "nothing retained: {inuse}");
    let alloc = run("alloc_space");
    assert_eq!(common::cum_bytes(&alloc, "marker_pprof_keep"), Some(40 * 25_000), "{alloc}");
    assert_eq!(common::cum_bytes(&alloc, "marker_pprof_churn"), Some(30 * 100_000), "{alloc}");
    // The flat view's first row is the function that asked for the memory, not the allocator
    // (`alloc::alloc::alloc`, `RawVec`'s growth): the profile's drop_frames prune them.
    let first_flat = |top: &str| {
        top.lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .and_then(|l| l.split_whitespace().nth(5).map(str::to_string))
            .unwrap_or_default()
    };
    assert!(first_flat(&alloc).starts_with("pprof_go_tool::marker_pprof_"), "{alloc}");
    assert!(first_flat(&inuse).starts_with("pprof_go_tool::marker_pprof_"), "{inuse}");
    // A trait method keeps its type and trait in pprof's view, not a bare `::marker_pprof_grow`.
    let grow = inuse.lines().find(|l| l.contains("marker_pprof_grow")).unwrap_or_default();
    assert!(grow.contains(" as pprof_go_tool::Grow>::marker_pprof_grow"), "{inuse}");
    let objects = run("alloc_objects");
    assert!(objects.contains("marker_pprof_churn"), "{objects}");
    let resident = run("resident_space");
    assert!(resident.contains("Type: resident_space"), "{resident}");
    assert_eq!(common::cum_bytes(&resident, "marker_pprof_keep"), Some(40 * 25_000), "{resident}");
    // Its chunk header's page at most.
    let cold = common::cum_bytes(&resident, "marker_pprof_untouched").unwrap_or(0);
    assert!(cold <= 8192, "{resident}");
    assert_eq!(common::cum_bytes(&inuse, "marker_pprof_untouched"), Some(16 << 20), "{inuse}");
    // Without -sample_index, pprof opens the default, inuse_space.
    let out = Command::new("go").args(["tool", "pprof", "-top"]).arg(&pb).output().unwrap();
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("Type: inuse_space"), "{top}");
    // The default sample type is inuse_space.
    let out = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pb).output().unwrap();
    let raw = String::from_utf8_lossy(&out.stdout);
    assert!(raw.contains("inuse_space/bytes[dflt]"), "{raw}");
    assert!(raw.contains("resident_space/bytes swapped_space/bytes"), "{raw}");
    drop(keep);
    drop(grown);
    drop(untouched);
    std::fs::remove_dir_all(&dir).unwrap();
}
