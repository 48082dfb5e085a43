//! A library unloaded with `dlclose` and another loaded at the same base: the addresses are
//! reused, so what the profiler cached per address (the symbol of each address, the unwind rule
//! of each return address) must not outlive the library. `programs/dlclose_same_base.c` keeps a
//! block from library A's `a_keep`, waits until a periodic report has symbolized A's addresses
//! (and A's unwind rules are cached), closes A, loads B (same layout, different frame size) at
//! A's base and keeps a block from B's `b_keep`. The final report must name `b_keep` for B's
//! block, called from `main`.

use preload_tests::{Run, TestDir, compare};

/// `A_SIZE` and `B_SIZE` in programs/dlclose_same_base.c.
const A_SIZE: u64 = 40_000;
const B_SIZE: u64 = 70_000;

#[test]
fn a_library_loaded_where_a_closed_one_was_is_named_and_unwound_as_itself() {
    let dir = TestDir::new("dlclose");
    let lib_a = dir.compile_c("same_base_a.c", &["-shared", "-fPIC"]);
    let lib_b = dir.compile_c("same_base_b.c", &["-shared", "-fPIC"]);
    let exe = dir.compile_c("dlclose_same_base.c", &["-ldl"]);
    let reports = dir.reports("dlclose");
    let base_file = dir.join("bases.txt");
    let run = Run::new(&exe).arg(&lib_a).arg(&lib_b).arg(&reports).arg(&base_file);
    let vars = [
        ("YING_SAMPLE_INTERVAL_BYTES", "1"),
        ("YING_CHECK_INTERVAL_SECS", "1"),
        ("YING_REPORT_PCT_CHANGE_TRIGGER", "0"),
        ("YING_SEED", "1"),
        ("YING_TOP_K", "1000"),
    ];
    let c = compare(&run, &vars, &reports);
    c.check(c.with.success(), "dlclose_same_base.c failed");
    c.assert_no_ying_lines();
    let bases = std::fs::read_to_string(&base_file).unwrap_or_default();
    eprintln!("under the shim: {}", bases.trim());
    if c.with.stdout_str() != "same base\n" {
        eprintln!("SKIPPED: the loader mapped library B at another base than A ({})", bases.trim());
        return;
    }
    let sets = c.main_reports();
    c.check(sets.len() >= 2, "expected a periodic report before the final one");
    let m = c.main_report().manifest();
    let chunk = |size: u64| size..size + 32; // glibc's chunk: the request, its header, rounding
    let b_blocks: Vec<_> =
        m.entries.iter().filter(|b| chunk(B_SIZE).contains(&b.retained_bytes)).collect();
    c.check(b_blocks.len() == 1, format!("expected one stack retaining B's block: {b_blocks:#?}"));
    let b = b_blocks[0];
    c.check(
        b.frames.first().is_some_and(|f| f.function == "b_keep"),
        format!("B's block is not attributed to b_keep: {:#?}", b.frames),
    );
    c.check(
        b.goes_through("main"),
        format!("B's stack does not reach main (a stale unwind rule?): {:#?}", b.frames),
    );
    c.check(
        m.entries.iter().any(|b| chunk(A_SIZE).contains(&b.retained_bytes)),
        "A's block is missing from the report",
    );
}
