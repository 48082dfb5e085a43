//! The peak view in the Rust front end at the default interval: a program whose ~30 MiB index
//! is built in `build_index` and dropped before the report still shows it, through the API
//! (`top_k_stacks_at_peak`, `Snapshot::peak`) and in a report set written by
//! `utils::write_report_now` (the PEAK section, `.peak.folded`, `.peak.svg`, `.peak.pb.gz`).

mod common;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::Command;

use ying_profiler::YingProfiler;
use ying_profiler::report::ReportOptions;

#[global_allocator]
static A: YingProfiler = YingProfiler::default();

/// About 30 MiB: 60,000 entries of a 512-byte value.
#[inline(never)]
fn build_index() -> BTreeMap<u64, Vec<u8>> {
    (0..60_000u64).map(|i| (i * 7919 % 1_000_003, black_box(vec![i as u8; 512]))).collect()
}

fn sigma(total: f64) -> f64 {
    (total * A.sample_interval() as f64).sqrt()
}

#[test]
fn a_dropped_index_shows_at_the_peak_through_the_api_and_in_report_sets() {
    let index = build_index();
    let full = (index.len() * 512) as f64;
    drop(black_box(index));

    // The API: the top stack at the peak is build_index's values, within 4 sigma of the truth
    // at the kept moment (between 95 % of the full index and all of it).
    let top = A.top_k_stacks_at_peak(3);
    let names =
        |s: &ying_profiler::StackStats| s.frames.iter().any(|f| f.function.contains("build_index"));
    assert!(!top.is_empty() && names(&top[0]), "top stack at the peak: {:#?}", top.first());
    let held: u64 = top.iter().filter(|s| names(s)).map(|s| s.peak_retained_bytes).sum();
    let s4 = 4.0 * sigma(full);
    assert!(
        (0.95 * full - s4..=full + 4.0 * sigma(full) + 2.0 * (1 << 20) as f64)
            .contains(&(held as f64)),
        "build_index held {held} at the peak, full index {full}, 4 sigma {s4:.0}"
    );
    assert!(top[0].retained_bytes < top[0].peak_retained_bytes, "freed since: {:?}", top[0]);
    let peak = A.snapshot().peak.expect("a peak was kept");
    assert!(peak.high_water_bytes >= peak.estimated_bytes);
    assert!(peak.since_start.is_some() && peak.exact_bytes.is_some(), "{peak:?}");

    // A report set: every peak file, and the PEAK section names build_index.
    let dir = common::fresh_dir("peak-rust");
    let paths = ying_profiler::utils::write_report_now(&A, &ReportOptions::default(), &dir)
        .expect("report set written");
    for p in [&paths.peak_folded, &paths.peak_svg, &paths.peak_pprof, &paths.text] {
        let p = p.as_ref().expect("a peak file missing from the report set");
        assert!(std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false), "{}", p.display());
    }
    let text = std::fs::read_to_string(paths.text.as_ref().unwrap()).unwrap();
    let section = &text[text.find("\nPEAK\n").expect("a PEAK section")..];
    let first = section.find("peak #1:").expect("a stack at the peak");
    let first_block =
        &section[first..section[first..].find("\n\n").map_or(section.len(), |e| first + e)];
    assert!(first_block.contains("build_index"), "{section}");
    let folded = std::fs::read_to_string(paths.peak_folded.as_ref().unwrap()).unwrap();
    assert!(folded.contains("build_index"), "{folded}");

    // go tool pprof opens the peak profile as a heap profile, build_index under nearly all of
    // it. (Its flat cost goes to the standard library's allocation frames inlined into the
    // leaf, `alloc::alloc::alloc`: pprof keeps every frame, and dropping the standard
    // library's frames with their callees would cut user closures called from its iterators.)
    if Command::new("go").arg("version").output().is_ok() {
        let out = Command::new("go")
            .args(["tool", "pprof", "-top", "-cum", "-sample_index=inuse_space"])
            .arg(paths.peak_pprof.as_ref().unwrap())
            .output()
            .unwrap();
        let top = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(top.contains("Type: inuse_space"), "{top}");
        let cum = top
            .lines()
            .find(|l| l.contains("build_index"))
            .and_then(|l| l.split_whitespace().nth(4))
            .and_then(|p| p.trim_end_matches('%').parse::<f64>().ok());
        assert!(cum.is_some_and(|c| c >= 80.0), "build_index not under 80 % of the peak:\n{top}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
