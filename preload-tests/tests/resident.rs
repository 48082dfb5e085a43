//! Resident bytes per stack (`YING_RESIDENT`): `programs/resident.c` keeps a 40 MiB `calloc`
//! it never touches and a 24 MiB block it fills. In exact mode the report names the untouched
//! one's resident bytes about 0 and the filled one's about its size, and an 8 MiB anonymous
//! mapping half written half its size, in the manifest and in the text; with
//! `YING_RESIDENT=off` no residency is shown.

use preload_tests::{Comparison, EXACT, Run, TestDir, compare};

/// resident.c's sizes.
const UNTOUCHED: u64 = 40 << 20;
const TOUCHED: u64 = 24 << 20;
const MAPPED: u64 = 8 << 20;

fn run(name: &str, vars: &[(&str, &str)]) -> (TestDir, Comparison) {
    let dir = TestDir::new(name);
    let exe = dir.compile_c("resident.c", &[]);
    let reports = dir.reports(name);
    let c = compare(&Run::new(&exe), vars, &reports);
    c.check(c.with.success(), "resident.c failed");
    c.assert_no_ying_lines();
    (dir, c)
}

#[test]
fn untouched_calloc_is_not_resident_and_a_filled_block_is() {
    let (_dir, c) = run("resident-on", EXACT);
    let r = c.main_report();
    let m = r.manifest();
    let one = |marker: &str| {
        let e: Vec<_> = m.entries_through(marker).collect();
        c.check(e.len() == 1, format!("{marker}: {} entries listed, expected 1", e.len()));
        e[0].clone()
    };
    let (cold, hot) = (one("marker_untouched"), one("marker_touched"));
    c.check(
        cold.retained_bytes >= UNTOUCHED && hot.retained_bytes >= TOUCHED,
        format!("retained: untouched {}, touched {}", cold.retained_bytes, hot.retained_bytes),
    );
    let (cold_res, hot_res) = (cold.resident_bytes, hot.resident_bytes);
    // The untouched block's chunk header is written: one page of 10,240.
    c.check(
        cold_res.is_some_and(|b| b <= 16 << 10),
        format!("untouched calloc: resident {cold_res:?}, expected at most a page or so"),
    );
    c.check(
        hot_res.is_some_and(|b| b >= TOUCHED && b <= hot.retained_bytes),
        format!("filled block: resident {hot_res:?}, expected {TOUCHED} to {}", hot.retained_bytes),
    );
    c.check(cold.swapped_bytes.is_some(), "swapped bytes not measured");
    // A sampled mapping half written: its record is in the mapping table, not the live table.
    let mapped = one("marker_mapped");
    c.check(
        mapped.resident_bytes.is_some_and(|b| (MAPPED / 2..=MAPPED / 2 + (64 << 10)).contains(&b)),
        format!(
            "half-written mapping: resident {:?}, expected {}",
            mapped.resident_bytes,
            MAPPED / 2
        ),
    );
    // `retained 40.0 MiB (... bytes, ...) in 1 allocations, 4.0 KiB resident`.
    let text = r.text();
    let line = |size: &str| {
        text.lines().find(|l| l.contains(&format!("retained {size} ("))).unwrap_or("").to_string()
    };
    let (cold_line, hot_line) = (line("40.0 MiB"), line("24.0 MiB"));
    c.check(
        cold_line.ends_with(" KiB resident") || cold_line.ends_with(" B resident"),
        format!("untouched calloc's text line: {cold_line:?}"),
    );
    c.check(
        hot_line.ends_with(", 24.0 MiB resident"),
        format!("filled block's line: {hot_line:?}"),
    );
}

#[test]
fn resident_off_shows_no_residency() {
    let vars: Vec<_> = EXACT.iter().copied().chain([("YING_RESIDENT", "off")]).collect();
    let (_dir, c) = run("resident-off", &vars);
    let r = c.main_report();
    let m = r.manifest();
    let hot: Vec<_> = m.entries_through("marker_touched").collect();
    c.check(hot.len() == 1, "the filled block is listed");
    c.check(hot.iter().all(|e| e.resident_bytes.is_none()), "residency shown although off");
    // (The header's resident-set lines are not per stack.)
    let text = r.text();
    let entries: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
    c.check(!entries.is_empty(), "no entry in the text");
    c.check(
        entries.iter().all(|l| !l.contains(" resident")),
        format!("the text report names residency although off: {entries:?}"),
    );
}
