//! Ying on a full disk, with its reports on a small tmpfs mounted for the test (root only,
//! `SKIPPED` elsewhere), the plain run as control:
//!
//! - a report set is complete or absent, never half-written, and the live file, the one
//!   complete copy of the heap, is kept when the exit report could not be written (and the
//!   warning says where it is) (`programs/heap_at_death.c` in mode `exit`). Before, the exit
//!   set stopped half-written (`.pb.gz`, `.folded`, `.svg` present; no `.txt` or `.json`) and
//!   the live file was removed anyway;
//! - a program that fills the filesystem its reports share never loses a write to Ying
//!   (`programs/disk_writer.c`, 8 KiB records to within 128 KiB of full, reports every
//!   second): Ying writes nothing below its free-space floor (`YING_MIN_FREE_SPACE`) and says
//!   so once. With the floor off it took 4 of the program's 1,008 writes;
//! - above the floor, sets are written whole while the program writes.

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
        // No floor: the write itself must meet the full disk.
        ("YING_MIN_FREE_SPACE", "0"),
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
    c.check(
        preload_tests::live_file_of(&live, c.with.pid).is_some(),
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

/// Runs `disk_writer` writing `records` records into a tmpfs of 8 MiB that also holds the
/// reports (checked every second, a set at each check), with `vars`; returns the comparison
/// and the tmpfs, or `None` when no tmpfs can be mounted (`SKIPPED`).
fn writer_on_tmpfs(
    dir: &TestDir,
    name: &str,
    records: u32,
    vars: &[(&str, &str)],
) -> Option<(preload_tests::Comparison, Tmpfs)> {
    let exe = dir.compile_c("disk_writer.c", &[]);
    let fs = match Tmpfs::mount(&dir.join(&format!("fs-{name}")), 8 << 20) {
        Ok(fs) => fs,
        Err(e) => {
            println!("SKIPPED: {e}");
            return None;
        }
    };
    let data = fs.path().join("data");
    let reports = fs.path().join("reports");
    let mut all = vec![("YING_CHECK_INTERVAL_SECS", "1"), ("YING_REPORT_PCT_CHANGE_TRIGGER", "0")];
    all.extend_from_slice(vars);
    let run = Run::new(&exe).arg(&data).arg(records.to_string());
    let c = compare(&run, &all, &reports);
    Some((c, fs))
}

#[test]
fn a_program_filling_the_disk_its_reports_share_loses_no_write() {
    let dir = TestDir::new("full-disk-writer");
    // 1,008 records of 8 KiB: all but 128 KiB of the 8 MiB.
    let Some((c, _fs)) = writer_on_tmpfs(&dir, "default", 1008, &[]) else { return };
    c.check(
        c.with.success() && c.with.stdout_str() == "wrote 1008 of 1008 records\n",
        "the program lost writes under the shim",
    );
    let sets = c.report_sets();
    c.check(sets.is_empty(), "a set was written below the default floor of 64 MiB");
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].contains("below its floor")
            && lines[0].contains("YING_MIN_FREE_SPACE"),
        format!("expected one line about the floor: {lines:#?}"),
    );
}

#[test]
fn above_the_floor_sets_are_written_whole_while_the_program_writes() {
    let dir = TestDir::new("full-disk-above");
    // 640 records: 5 MiB of the 8, leaving 3 MiB against a floor of 2 MiB.
    let Some((c, _fs)) = writer_on_tmpfs(&dir, "above", 640, &[("YING_MIN_FREE_SPACE", "2MiB")])
    else {
        return;
    };
    c.check(c.with.success(), "the program lost writes under the shim");
    c.assert_no_ying_lines();
    let sets = c.main_reports();
    c.check(
        sets.len() >= 2,
        format!("{} sets: expected periodic ones and the exit report", sets.len()),
    );
    for s in &sets {
        let m = s.manifest();
        c.check(
            m.set == s.stem && s.has("txt") && s.has("pb.gz"),
            format!("set {} is not whole", s.stem),
        );
    }
}
