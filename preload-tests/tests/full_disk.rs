//! Ying on a full disk (`programs/heap_at_death.c` in mode `exit`, reports on a small tmpfs
//! mounted for the test; root only, `SKIPPED` elsewhere): a report set is complete or absent,
//! never half-written, and the live file, the one complete copy of the heap, is kept when the
//! exit report could not be written (and the warning says where it is). Before, the exit set
//! stopped half-written (`.pb.gz`, `.folded`, `.svg` present; no `.txt` or `.json`) and the live
//! file was removed anyway.

use preload_tests::{Run, TestDir, Tmpfs, compare, list_dir};

/// Files of report sets (anything named `ying.*`), temporary files too, in `dir`.
fn ying_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("ying.") || n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_full_disk_at_exit_leaves_no_half_set_and_keeps_the_live_file() {
    let dir = TestDir::new("full-disk-exit");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("tmpfs");
    let fs = match Tmpfs::mount(&reports, 4 << 20) {
        Ok(fs) => fs,
        Err(e) => return println!("SKIPPED: {e}"),
    };
    // Room for the first files of the set (its pprof profiles), not for the rest.
    fs.fill_to("filler", 24 << 10);
    let live = dir.join("live");
    // Three steps of 300 blocks of 4000 bytes, 30 ms apart (the report thread starts at the
    // first sleep and writes the live file every 50 ms), then exit(0).
    let run = Run::new(&exe).args(&["exit", "3", "300", "4000", "30000"]);
    let live_dir = live.display().to_string();
    let vars = [
        ("YING_CHECK_INTERVAL_SECS", "300"),
        ("YING_LIVE_FILE", live_dir.as_str()),
        ("YING_LIVE_INTERVAL_MS", "50"),
        ("YING_SAMPLE_INTERVAL_BYTES", "4096"),
    ];
    let c = compare(&run, &vars, &reports);
    c.check(c.with.success(), "heap_at_death exit failed under the shim");
    let left = ying_files(fs.path());
    c.check(
        left.is_empty(),
        format!("a half-written set (or a temporary file) was left: {left:?}"),
    );
    let kept = ying_files(&live);
    c.check(
        kept.iter().any(|n| n == &format!("ying.heap_at_death.{}.live", c.with.pid)),
        format!("the live file was not kept: {}", list_dir(&live)),
    );
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].contains("final report")
            && lines[0].contains("stays in")
            && lines[0].contains(".live"),
        format!("expected one line saying the heap at exit stays in the live file: {lines:#?}"),
    );
}
