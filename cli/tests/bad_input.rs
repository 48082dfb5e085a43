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

/// Files planted to make a reader take memory out of proportion to their size (a gzip bomb, a
/// protobuf of millions of empty elements, as a profile and as a live file) are refused with one
/// line naming the file and the setting, before the memory is taken: `ying` runs under a 512 MiB
/// address-space limit with the decoding limit set to 256 MiB (the default, 1 GiB, is the same
/// code; a debug build inflates a bigger bomb too slowly for a test), and reading any of them
/// whole would break it (before the bound: "corrupt gzip data: out of memory").
#[test]
fn planted_bombs_are_refused_within_the_decoding_limit() {
    use std::io::Write;
    let dir = TestDir::new("cli-bombs");
    // 8 gzip members of 64 MiB of zeros each (concatenated members are one gzip stream):
    // 512 MiB inflated from about 0.5 MB.
    let mut member = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    member.write_all(&vec![0u8; 64 << 20]).unwrap();
    let member = member.finish().unwrap();
    let bomb: Vec<u8> = std::iter::repeat_n(member.as_slice(), 8).flatten().copied().collect();
    // 4 million empty `sample`s (field 2), and as a live file 4 million empty rows (field 11):
    // 8 MB each, 290 MB and more once decoded.
    let samples: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 4_000_000).flatten().collect();
    let rows: Vec<u8> = std::iter::repeat_n([0x5au8, 0x00], 4_000_000).flatten().collect();
    let limited = |args: &[&str]| {
        let mut all =
            vec!["-c", "ulimit -v 524288 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_ying")];
        all.extend_from_slice(args);
        preload_tests::Run::new("/bin/sh")
            .args(&all)
            .env("YING_MAX_DECODED_BYTES", "256MiB")
            .timeout(std::time::Duration::from_secs(120))
            .run()
    };
    for (name, bytes, cmd) in [
        ("bomb.pb.gz", &bomb, "top"),
        ("samples.pb", &samples, "top"),
        ("ying.x.7.live", &rows, "report"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let p = path.to_str().unwrap();
        let o = limited(&[cmd, p]);
        assert_one_error_line(&o, p, "YING_MAX_DECODED_BYTES raises it");
    }
    let bomb_path = dir.join("bomb.pb.gz");
    let b = bomb_path.to_str().unwrap();
    assert_one_error_line(&limited(&["diff", b, b]), b, "YING_MAX_DECODED_BYTES raises it");
    // A manifest of ten million zeros (20 MB, over 300 MiB parsed): `ying leaks` leaves it out
    // in one line before reading it.
    let sets = dir.join("sets");
    std::fs::create_dir(&sets).unwrap();
    let zeros = format!("[{}0]", "0,".repeat(10_000_000));
    std::fs::write(sets.join("ying.x.7.0.20261207T120000Z.json"), zeros).unwrap();
    let o = limited(&["leaks", sets.to_str().unwrap()]);
    let err = o.stderr_str();
    assert!(
        err.contains("the manifest may take up to") && err.lines().count() == 1,
        "{}",
        o.describe()
    );
    // Under a raised limit, the element bomb is read (and found to be no profile).
    let samples = dir.join("samples.pb");
    let s = samples.to_str().unwrap();
    let o = preload_tests::Run::new(env!("CARGO_BIN_EXE_ying"))
        .args(&["top", s])
        .env("YING_MAX_DECODED_BYTES", "2GiB")
        .run();
    assert_one_error_line(&o, s, "no string table");
}
