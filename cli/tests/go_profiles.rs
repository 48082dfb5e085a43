//! `ying top` and `ying diff` on Go heap profiles (tests/data/goheap.go, built with `go build`)
//! agree with `go tool pprof -top` and `go tool pprof -top -diff_base`.

mod common;

use common::{assert_same_top, go_heap_profiles, go_pprof, success, top_rows, ying};
use preload_tests::TestDir;

#[test]
fn top_matches_go_tool_pprof_top_for_each_sample_type() {
    let dir = TestDir::new("cli-go-top");
    let Some((before, after)) = go_heap_profiles(&dir) else { return };
    for file in [&before, &after] {
        let f = file.to_str().unwrap();
        // Without --sample: the profile's default, as pprof chooses it.
        let ours = success(ying().args(&["top", "--unit", "B", f]).run(), "ying top");
        let Some(theirs) = go_pprof(&["-top", "-unit=B", f]) else { return };
        assert!(ours.stdout_str().contains("Type: inuse_space"), "{}", ours.stdout_str());
        assert_same_top(&ours.stdout_str(), &theirs, 5);
        for sample in ["alloc_space", "inuse_objects", "alloc_objects"] {
            let ours =
                success(ying().args(&["top", "--unit", "B", "--sample", sample, f]).run(), sample);
            let theirs = go_pprof(&["-top", "-unit=B", &format!("-sample_index={sample}"), f])
                .expect("go was there a moment ago");
            assert_same_top(&ours.stdout_str(), &theirs, 5);
        }
        let ours = success(ying().args(&["top", "--unit", "B", "--cum", f]).run(), "--cum");
        let theirs = go_pprof(&["-top", "-cum", "-unit=B", f]).expect("go");
        assert_same_top(&ours.stdout_str(), &theirs, 5);
    }
    // The leak is the largest flat entry of the later profile.
    let ours = success(ying().args(&["top", after.to_str().unwrap()]).run(), "ying top");
    assert_eq!(top_rows(&ours.stdout_str())[0].2, "main.growLeak", "{}", ours.stdout_str());
}

#[test]
fn diff_matches_go_tool_pprof_diff_base() {
    let dir = TestDir::new("cli-go-diff");
    let Some((before, after)) = go_heap_profiles(&dir) else { return };
    let (a, b) = (before.to_str().unwrap(), after.to_str().unwrap());
    let prefix = dir.join("diff");
    let o =
        ying().args(&["diff", "--all", "--unit", "B", "-o", prefix.to_str().unwrap(), a, b]).run();
    let o = success(o, "ying diff");
    let Some(theirs) = go_pprof(&["-top", "-unit=B", "-diff_base", a, b]) else { return };
    let ours = o.stdout_str();
    assert_same_top(&ours, &theirs, 4);
    // What the program did between the profiles: growLeak kept 6 MiB more, fillCache dropped
    // 1 MiB, steady did nothing.
    let rows = top_rows(&ours);
    assert_eq!(rows[0].2, "main.growLeak", "{ours}");
    let fill = rows.iter().find(|r| r.2 == "main.fillCache").expect("fillCache changed");
    assert!(fill.0.starts_with('-'), "fillCache shrank: {fill:?}\n{ours}");
    assert!(!rows.iter().any(|r| r.2 == "main.steady"), "steady did not change\n{ours}");

    // The three files, named on stderr.
    let files = ["txt", "svg", "pb.gz"].map(|ext| format!("{}.{ext}", prefix.display()));
    for f in &files {
        assert!(o.stderr_str().contains(&format!("ying: wrote {f}")), "{}", o.stderr_str());
    }
    let svg = std::fs::read_to_string(&files[1]).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("main.growLeak"), "{}", &svg[..200]);
    let txt = std::fs::read_to_string(&files[0]).unwrap();
    assert_same_top(&txt, &theirs, 4);
    // The profile is -diff_base's: pprof reads the same diff from it alone.
    let from_file = go_pprof(&["-top", "-unit=B", &files[2]]).expect("go");
    assert_eq!(top_rows(&from_file), top_rows(&theirs), "\n{from_file}\n{theirs}");
    // And so does `ying top`, percentages of the base's total included.
    let top = success(ying().args(&["top", "--unit", "B", &files[2]]).run(), "top of the diff");
    let (ours, pprofs) = (top.stdout_str(), from_file);
    assert_same_top(&ours, &pprofs, 4);
    let pct = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("main.growLeak"))
            .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
            .collect()
    };
    assert_eq!(pct(&ours), pct(&pprofs), "growLeak's flat%\n{ours}\n{pprofs}");
}
