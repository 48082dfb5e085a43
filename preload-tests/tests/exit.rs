//! `exit()` from a thread other than main while other threads allocate
//! (`programs/exit_thread.c`): the final report is still written and the exit status passes
//! through.

use preload_tests::{EXACT, QUIET, Run, TestDir, compare};

// Mirrors exit_thread.c: 9 blocks of 4321 bytes, which the shim counts as glibc chunks of
// 4336 bytes (the request plus the 8-byte header, rounded up to 16).
const KEEP: u64 = 9 * 4336;

#[test]
fn exit_from_a_thread_writes_the_report_exact_mode() {
    let dir = TestDir::new("exit-thread-exact");
    let exe = dir.compile_c("exit_thread.c", &["-pthread"]);
    for i in 0..2 {
        let c = compare(&Run::new(&exe), EXACT, &dir.reports(&format!("exact-{i}")));
        c.check(c.with.code() == Some(3), "expected exit status 3");
        c.check(
            c.with.stdout_str() == "exiting from a thread with status 3\n",
            "unexpected output",
        );
        c.assert_no_ying_lines();
        let r = c.main_report();
        c.check(r.has("txt") && r.has("folded"), "incomplete report set");
        let got = r.folded().bytes_through("marker_exit_keep");
        c.check(got == KEEP, format!("marker_exit_keep retains {got} bytes, expected {KEEP}"));
        let m = r.manifest();
        c.check(
            m.frames_named("marker_exit_keep")
                .any(|f| f.location.as_deref().is_some_and(|l| l.contains("exit_thread.c:"))),
            "the text report does not name marker_exit_keep (exit_thread.c:N)",
        );
    }
}

#[test]
fn exit_from_a_thread_writes_the_report_default_sampling() {
    let dir = TestDir::new("exit-thread-default");
    let exe = dir.compile_c("exit_thread.c", &["-pthread"]);
    // With the report thread running too.
    let vars = [("YING_CHECK_INTERVAL_SECS", "1"), ("YING_SEED", "5")];
    for (i, vars) in [QUIET, &vars[..]].into_iter().enumerate() {
        let c = compare(&Run::new(&exe), vars, &dir.reports(&format!("default-{i}")));
        c.check(c.with.code() == Some(3), "expected exit status 3");
        c.assert_no_ying_lines();
        let r = c.main_report();
        c.check(r.has("txt") && r.has("folded") && r.has("svg"), "incomplete report set");
        let retained = r.manifest().totals.retained_bytes;
        c.check(retained >= KEEP, format!("exact retained total {retained} < {KEEP}"));
    }
}
