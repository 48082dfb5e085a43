//! What a report costs the profiler (`programs/many_stacks.c`): the exit report of 20,000
//! distinct stacks stays within the formula the README gives (about `200 + 2 * frames` bytes a
//! stack plus a few MiB), and the stack table before it within the README's size of a stack
//! (about 170 bytes plus two a frame), read from the report's own header: `profiler memory` (what the
//! profiler held when the report began) and `profiler peak` (its high-water mark, which the
//! report set sets before the text is written).

use preload_tests::{EXACT, Run, TestDir, compare};

// Mirrors many_stacks.c: one block per stack, call depth up to 60.
const STACKS: u64 = 20_000;
/// Frames a stack can have at most (`MAX_FRAMES`); many_stacks.c's have up to 64 with main and
/// libc's start-up frames.
const MAX_FRAMES: u64 = 64;
/// The README's formula: bytes per stack and frame (its larger form, past 128 distinct
/// addresses), and the part that does not grow with the stacks (symbolization, gzip state, the
/// flamegraph of at most 2,000 stacks), with some room.
const PER_STACK: u64 = 200;
const PER_FRAME: u64 = 2;
const FIXED: u64 = 8 << 20;
/// The README's size of a stack in the table: bytes per stack and per frame (at most).
const TABLE_PER_STACK: u64 = 170;
const TABLE_PER_FRAME: u64 = 2;

#[test]
fn a_report_of_many_stacks_stays_within_its_memory_formula() {
    let dir = TestDir::new("report-memory");
    let exe = dir.compile_c("many_stacks.c", &["-fno-optimize-sibling-calls", "-fno-ipa-icf"]);
    let run = Run::new(&exe).arg(STACKS.to_string());
    let c = compare(&run, EXACT, &dir.reports("exact"));
    c.check(c.with.success(), "many_stacks failed under the shim");
    c.assert_no_ying_lines();
    let m = c.main_report().manifest();
    let stacks = m.stacks.sampled;
    // Shallow recursions have few paths, so some i share one (17,594 distinct stacks).
    c.check(stacks > STACKS * 8 / 10, format!("{stacks} stacks in the report"));
    let (before, peak) = (m.totals.profiler_bytes, m.totals.profiler_peak_bytes);
    println!("{stacks} stacks: profiler memory {before} bytes before the report, peak {peak}");
    let bound = stacks * (PER_STACK + PER_FRAME * MAX_FRAMES) + FIXED;
    c.check(
        peak.saturating_sub(before) <= bound,
        format!(
            "the report took {} bytes at its peak ({peak} - {before}), more than {bound} \
             ({stacks} stacks * ({PER_STACK} + {PER_FRAME} * {MAX_FRAMES}) + {FIXED})",
            peak.saturating_sub(before)
        ),
    );
    // What the profiler held before the report is its tables (the README's size of a stack,
    // plus the live table and the parts that do not grow with the stacks), not a copy a report
    // made of them. Measured: 9,257,544 bytes for 17,594 stacks.
    let tables_bound = stacks * (TABLE_PER_STACK + TABLE_PER_FRAME * MAX_FRAMES) + FIXED;
    c.check(
        before <= tables_bound,
        format!("profiler memory before the report: {before} bytes > {tables_bound}"),
    );
}
