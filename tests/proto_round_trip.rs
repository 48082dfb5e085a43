//! `report::proto` against real profiles: a report set's `.pb.gz` written by this library and
//! a Go heap profile written by `runtime/pprof` (cli/tests/data/goheap.go, built with `go
//! build`) decode, and encode back to profiles that `go tool pprof -raw` prints exactly as it
//! prints the originals. Needs Go (`scripts/test.sh` installs golang-go when missing).

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

use ying_profiler::YingProfiler;
use ying_profiler::report::ReportOptions;
use ying_profiler::report::proto::{Profile, encode_gzip, read_profile};
use ying_profiler::utils::write_report_now;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_proto_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..30 {
        out.push(black_box(vec![7u8; 33_333].into_boxed_slice()));
    }
}

fn go(args: &[&str], dir: &Path) -> String {
    let out = Command::new("go").args(args).current_dir(dir).output();
    let out = out.expect("go is required: run scripts/test.sh (installs golang-go)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go {args:?}: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Decodes `original`, writes it back with prost next to it, and checks that pprof prints
/// both alike; returns the decoded profile.
fn round_trip(original: &Path) -> Profile {
    let p = read_profile(&std::fs::read(original).unwrap()).unwrap();
    let copy = original.with_extension("copy.pb.gz");
    std::fs::write(&copy, encode_gzip(&p).unwrap()).unwrap();
    let dir = original.parent().unwrap();
    let raw = |f: &Path| go(&["tool", "pprof", "-raw", f.to_str().unwrap()], dir);
    let (a, b) = (raw(original), raw(&copy));
    assert!(a.contains("Samples:"), "{a}");
    assert_eq!(a, b, "pprof prints the re-encoded profile differently");
    assert_eq!(read_profile(&std::fs::read(&copy).unwrap()).unwrap(), p);
    p
}

fn names(p: &Profile) -> Vec<&str> {
    p.function.iter().map(|f| p.string(f.name)).collect()
}

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("proto-{name}"))
}

#[test]
fn report_set_and_go_heap_profiles_round_trip() {
    // A report set of this process (exact mode: every allocation sampled).
    // The vector's own buffer is allocated here, outside the marker.
    let mut keep = Vec::with_capacity(30);
    marker_proto_keep(&mut keep);
    let dir = scratch("ying");
    let paths = write_report_now(&A, &ReportOptions::default(), &dir).unwrap();
    let p = round_trip(&paths.pprof.expect("a .pb.gz was written"));
    assert_eq!(
        p.sample_type_names(),
        [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space",
            "resident_space",
            "swapped_space",
            "alloc_objects_stderr",
            "alloc_space_stderr",
            "inuse_objects_stderr",
            "inuse_space_stderr"
        ]
    );
    assert_eq!(p.default_sample_index(), Some(3));
    assert!(p.string(p.drop_frames).contains("malloc"), "allocator frames are dropped");
    // The marker's blocks are all retained, in samples whose stacks pass through it.
    let marker = p.function.iter().find(|f| p.string(f.name).contains("marker_proto_keep"));
    let marker = marker.unwrap_or_else(|| panic!("no marker in {:?}", names(&p))).id;
    let through_marker = |s: &&ying_profiler::report::proto::Sample| {
        s.location_id.iter().any(|id| {
            let loc = p.location.iter().find(|l| l.id == *id).unwrap();
            loc.line.iter().any(|l| l.function_id == marker)
        })
    };
    let retained: i64 = p.sample.iter().filter(through_marker).map(|s| s.value[3]).sum();
    assert_eq!(retained, 30 * 33_333);
    drop(keep);
    std::fs::remove_dir_all(&dir).unwrap();

    // Two Go heap profiles.
    let dir = scratch("go");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("cli/tests/data/goheap.go");
    go(&["build", "-o", "goheap", src.to_str().unwrap()], &dir);
    let status =
        Command::new(dir.join("goheap")).args(["a.pb.gz", "b.pb.gz"]).current_dir(&dir).status();
    assert!(status.unwrap().success());
    for f in ["a.pb.gz", "b.pb.gz"] {
        let p = round_trip(&dir.join(f));
        assert_eq!(
            p.sample_type_names(),
            ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]
        );
        let period = p.period_type.unwrap();
        assert_eq!((p.string(period.r#type), p.string(period.unit)), ("space", "bytes"));
        assert!(names(&p).contains(&"main.growLeak"), "{:?}", names(&p));
        assert!(p.mapping.iter().any(|m| p.string(m.filename).ends_with("goheap")));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
