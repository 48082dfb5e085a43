//! Every subcommand's `--help` works, and a file that is not a profile gives one clear error
//! line naming it, a non-zero status and no panic.

mod common;

use common::ying;
use preload_tests::{Outcome, TestDir};

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["--help"][..],
        &["help"],
        &["run", "--help"],
        &["diff", "--help"],
        &["top", "--help"],
        &["view", "--help"],
    ] {
        let o = ying().args(args).run();
        o.assert_success("--help");
        let text = o.stdout_str();
        assert!(text.contains("Usage: ying"), "{args:?}:\n{text}");
    }
    let run = ying().args(&["run", "--help"]).run().stdout_str();
    assert!(run.contains("--interval <SECS>") && run.contains("LD_PRELOAD"), "{run}");
    let diff = ying().args(&["diff", "--help"]).run().stdout_str();
    assert!(diff.contains("--sample <TYPE>") && diff.contains("-diff_base"), "{diff}");
    let top = ying().args(&["top", "--help"]).run().stdout_str();
    assert!(top.contains("-k <N>") && top.contains("--cum"), "{top}");
    let view = ying().args(&["view", "--help"]).run().stdout_str();
    assert!(view.contains("<DIR>") && view.contains("ying.view.html"), "{view}");
    // No subcommand: usage on stderr, a failure.
    let none = ying().run();
    assert!(!none.success() && none.stderr_str().contains("Usage: ying"), "{}", none.describe());
}

/// Asserts a clean failure: status 1, exactly one stderr line, `ying: error: <path>: ...`.
fn assert_one_error_line(o: &Outcome, path: &str, says: &str) {
    assert_eq!(o.code(), Some(1), "{}", o.describe());
    let err = o.stderr_str();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.describe());
    assert!(lines[0].starts_with(&format!("ying: error: {path}: ")), "{}", o.describe());
    assert!(lines[0].contains(says), "expected {says:?}: {}", o.describe());
    assert!(!err.contains("panicked"), "{}", o.describe());
}

#[test]
fn malformed_files_give_one_error_line_naming_the_path() {
    let dir = TestDir::new("cli-bad-input");
    let good = valid_profile_gz();
    let good_path = dir.join("good.pb.gz");
    std::fs::write(&good_path, &good).unwrap();
    let good_path = good_path.to_str().unwrap().to_string();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("empty.pb.gz", Vec::new(), "empty"),
        ("text.pb.gz", b"this is not a profile\n".to_vec(), "not a pprof profile"),
        ("truncated.pb.gz", good[..good.len() / 2].to_vec(), "corrupt gzip data"),
        ("gzip-garbage.pb.gz", b"\x1f\x8b\x08\x00garbage".to_vec(), "corrupt gzip data"),
        ("no-strings.pb", b"hihi".to_vec(), "no string table"),
    ];
    for (name, bytes, says) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let p = path.to_str().unwrap();
        assert_one_error_line(&ying().args(&["top", p]).run(), p, says);
        assert_one_error_line(&ying().args(&["diff", p, &good_path]).run(), p, says);
        assert_one_error_line(&ying().args(&["diff", &good_path, p]).run(), p, says);
    }
    let missing = dir.join("missing");
    let m = missing.to_str().unwrap();
    assert_one_error_line(&ying().args(&["top", m]).run(), m, "no such file");
    let d = dir.path().to_str().unwrap();
    assert_one_error_line(&ying().args(&["top", d]).run(), d, "is a directory");
    // ying view of a directory without report sets, and of a missing one.
    let empty = dir.join("no-sets");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.to_str().unwrap();
    assert_one_error_line(&ying().args(&["view", e]).run(), e, "no report set");
    assert_one_error_line(&ying().args(&["view", m]).run(), m, "No such file");
    // A sample type the profile lacks.
    let o = ying().args(&["top", "--sample", "cpu", &good_path]).run();
    assert_one_error_line(&o, &good_path, "no sample type \"cpu\"");
    // The good profile itself is fine.
    ying().args(&["top", &good_path]).cwd(dir.path()).run().assert_success("top of a good profile");
}

/// A valid profile, gzipped: Go's four heap sample types, 50 stacks `leaf` < `main`.
fn valid_profile_gz() -> Vec<u8> {
    use ying_profiler::report::proto::{
        Function, Line, Location, Profile, Sample, ValueType, encode_gzip,
    };
    let strings = [
        "",
        "alloc_objects",
        "count",
        "alloc_space",
        "bytes",
        "inuse_objects",
        "inuse_space",
        "leaf",
        "main",
        "x.c",
    ];
    let function = |id: u64, name: i64| Function { id, name, filename: 9, ..Default::default() };
    let location = |id: u64, address: u64, function_id: u64| Location {
        id,
        address,
        line: vec![Line { function_id, line: 1, column: 0 }],
        ..Default::default()
    };
    let p = Profile {
        sample_type: [(1, 2), (3, 4), (5, 2), (6, 4)]
            .map(|(r#type, unit)| ValueType { r#type, unit })
            .to_vec(),
        sample: (0..50)
            .map(|i| Sample {
                location_id: vec![2 + i, 1],
                value: vec![1, 1000, 1, 1000],
                label: vec![],
            })
            .collect(),
        location: std::iter::once(location(1, 0x9000, 2))
            .chain((0..50).map(|i| location(2 + i, 0x1000 + i, 1)))
            .collect(),
        function: vec![function(1, 7), function(2, 8)],
        string_table: strings.map(String::from).to_vec(),
        ..Default::default()
    };
    encode_gzip(&p).unwrap()
}
