//! Ying at the process's memory limits (`programs/limit_fill.c`, a program that handles
//! `ENOMEM`, run under `ulimit -v` and `ulimit -d` beside its plain run): the program ends as
//! plain (same output, same status), its retries at the limit all succeed, and Ying's own
//! memory is never the program's glibc heap. Before, the exit report's gzip state could not get
//! memory and Rust's infallible allocation aborted the program (status 134), a report at the
//! limit took the memory the program's retries waited for, a sample whose stack needed a new
//! table entry at the limit aborted it from inside `malloc`, and the report thread's buffers
//! showed in the program's `mallinfo2` (66 KB in use, 80 KB more arena).

use preload_tests::{Run, TestDir, compare};

/// `limit_fill ARGS` with the limit `ulimit -LIMIT KIB` set by a shell first.
fn limited(exe: &std::path::Path, limit: &str, kib: u32, args: &[&str]) -> Run {
    let cmd = format!("ulimit -{limit} {kib} && exec \"$0\" \"$@\"");
    Run::new("sh").arg("-c").arg(cmd).arg(exe).args(args)
}

/// The `ying:` lines of a run: none, or the one that says a report was not written and
/// names the limit.
fn check_lines(c: &preload_tests::Comparison, limit: &str) {
    let lines = c.with.ying_lines();
    c.check(
        lines.iter().all(|l| l.contains("not written") && l.contains(limit)) && lines.len() <= 2,
        format!("expected at most a line naming {limit} per kind of report: {lines:#?}"),
    );
}

fn fill_under(limit: &str, name: &str, vars: &[(&str, &str)]) {
    let dir = TestDir::new(&format!("limit-fill-{limit}"));
    let exe = dir.compile_c("limit_fill.c", &["-fno-optimize-sibling-calls", "-fno-ipa-icf"]);
    let c = compare(&limited(&exe, limit, 300_000, &["fill"]), vars, &dir.reports(name));
    c.check(c.with.success(), "limit_fill fill failed under the shim");
    check_lines(&c, if limit == "v" { "RLIMIT_AS" } else { "RLIMIT_DATA" });
}

#[test]
fn filling_the_address_space_ends_as_plain() {
    fill_under("v", "defaults", &[]);
    fill_under("v", "no-thread", &[("YING_CHECK_INTERVAL_SECS", "0")]);
}

#[test]
fn filling_the_data_limit_ends_as_plain() {
    fill_under("d", "defaults", &[]);
    fill_under("d", "no-thread", &[("YING_CHECK_INTERVAL_SECS", "0")]);
}

#[test]
fn retries_at_the_limit_all_succeed_while_reports_are_due() {
    let dir = TestDir::new("limit-retry");
    let exe = dir.compile_c("limit_fill.c", &["-fno-optimize-sibling-calls", "-fno-ipa-icf"]);
    for limit in ["v", "d"] {
        let c = compare(
            &limited(&exe, limit, 400_000, &["retry", "3"]),
            &[("YING_CHECK_INTERVAL_SECS", "1"), ("YING_REPORT_PCT_CHANGE_TRIGGER", "0")],
            &dir.reports(limit),
        );
        c.check(
            c.with.stdout_str() == "at the limit: every retry succeeded\n",
            "a retry failed under the shim",
        );
        check_lines(&c, if limit == "v" { "RLIMIT_AS" } else { "RLIMIT_DATA" });
    }
}

#[test]
fn new_stacks_sampled_at_the_limit_lose_samples_not_the_program() {
    let dir = TestDir::new("limit-stacks");
    let exe = dir.compile_c("limit_fill.c", &["-fno-optimize-sibling-calls", "-fno-ipa-icf"]);
    // Every allocation a sample: 20,000 new stacks while the address space is at its limit.
    let c = compare(
        &limited(&exe, "v", 400_000, &["stacks"]),
        &[("YING_SAMPLE_INTERVAL_BYTES", "1")],
        &dir.reports("stacks"),
    );
    c.check(c.with.stdout_str() == "at the limit: every small block made\n", "blocks failed");
    check_lines(&c, "RLIMIT_AS");
}

#[test]
fn reports_take_nothing_of_the_programs_glibc_heap() {
    let dir = TestDir::new("limit-mallinfo");
    let exe = dir.compile_c("limit_fill.c", &["-fno-optimize-sibling-calls", "-fno-ipa-icf"]);
    // Three seconds of reports every second, every allocation sampled one in 4 KiB, measured
    // from 1.5 s after the start: by then the report thread and the keeper have started and
    // written the first set, so that glibc's one-time records of each new thread (the loader's
    // thread-local storage vector, the record of a thread-local destructor first used in a
    // report: 32 bytes a registration, in a chunk of 48) are behind the baseline. The heap in
    // use may still grow by such a record, nothing more.
    let c = compare(
        &Run::new(&exe).args(&["mallinfo", "3", "256", "1.5"]),
        &[
            ("YING_CHECK_INTERVAL_SECS", "1"),
            ("YING_REPORT_PCT_CHANGE_TRIGGER", "0"),
            ("YING_SAMPLE_INTERVAL_BYTES", "4096"),
        ],
        &dir.reports("mallinfo"),
    );
    c.check(c.with.success(), "limit_fill mallinfo failed under the shim");
    c.assert_no_ying_lines();
    let sets = c.main_reports();
    c.check(sets.len() >= 3, format!("{} sets: expected a report each second", sets.len()));
}
