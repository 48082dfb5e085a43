//! Seccomp filters installed by the program (`programs/seccomp_filter.c`): a filter that kills
//! the process (or raises `SIGSYS`) for a system call the program never makes itself, but
//! Ying does (writing reports, starting its threads, the endpoint, growing its heap), must
//! never kill the program under the shim. Both runs must end alike and print the same; the
//! shim says once on stderr that it stops, and the report sets written before the filter stay.
//!
//! Filters are installed with `prctl(PR_SET_SECCOMP)`, `syscall(SYS_seccomp)` and
//! `syscall(SYS_seccomp)` with `SECCOMP_FILTER_FLAG_TSYNC`; strict mode ends with `SYS_exit`,
//! which must end the process (Ying's threads are stopped before it goes in).

use std::path::Path;
use std::time::Duration;

use preload_tests::{Comparison, Run, TestDir, compare};

/// The calls Ying makes on its paths (measured with `strace -f`; see the README's Limits),
/// each punished in one run.
const CALLS: [&str; 17] = [
    "openat",
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "clone",
    "clone3",
    "socket",
    "write",
    "renameat",
    "futex",
    "rt_sigprocmask",
    "sched_getaffinity",
    "sched_yield",
    "nanosleep",
    "newfstatat",
    "close",
];

/// Every path of Ying's on: exact sampling (so there is something to report), periodic
/// reports every second (the report thread), the exit report and the endpoint.
const ALL_ON: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
    ("YING_CHECK_INTERVAL_SECS", "1"),
    ("YING_SEED", "1"),
    ("YING_HTTP_ADDR", "127.0.0.1:0"),
];

const WARNING: &str = "ying: warning: this program installs ";

/// The `reason:` of an exit report the report thread wrote for a thread under a filter.
const BY_THREAD: &str =
    "exit (written by the report thread: a seccomp filter covers the exiting thread)";

/// What the shim is expected to do about a filter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// It punishes a call of Ying's: one warning, Ying stops where the filter may reach.
    Stops,
    /// It fails a call of Ying's with an errno: Ying goes on, with warnings of what failed.
    Fails,
    /// It leaves Ying's calls alone: no line, samples and reports go on.
    Harmless,
}

type Case = (&'static str, &'static str, &'static str, bool, Expect);

fn run_one(exe: &Path, dir: &TestDir, case: Case) -> Comparison {
    let (how, action, call, sleep, expect) = case;
    let name = format!("{how}-{action}-{call}-{}", sleep as u8);
    // Calls Ying's fork handlers make in the child (`close` of the endpoint's listener, none
    // under a filter): these runs also fork under the filter.
    let fork = sleep && matches!(call, "openat" | "munmap" | "socket" | "close");
    let mode = if fork {
        "2"
    } else if sleep {
        "1"
    } else {
        "0"
    };
    let run = Run::new(exe).args(&[how, action, call, mode]).timeout(Duration::from_secs(40));
    let c = compare(&run, ALL_ON, &dir.reports(&name));
    c.check(c.without.success(), format!("{name}: the program itself failed"));
    let lines = c.with.ying_lines();
    let announced = lines.iter().filter(|l| l.starts_with(WARNING)).count();
    match expect {
        Expect::Stops => c.check(
            lines.len() == 1 && announced == 1,
            format!("{name}: expected one `{WARNING}...` line, got {lines:#?}"),
        ),
        Expect::Fails => c.check(announced == 0, format!("{name}: unexpected {lines:#?}")),
        Expect::Harmless => {
            c.check(lines.is_empty(), format!("{name}: unexpected `ying:` lines {lines:#?}"));
            // Sampled after the filter, and reported (at exit, if not before).
            let after = c.main_report().folded().bytes_through("marker_seccomp_after");
            c.check(after > 0, format!("{name}: no samples from after the filter"));
        }
    }
    let waits = !matches!(call, "futex" | "sched_yield");
    if expect == Expect::Stops && sleep && matches!(how, "prctl" | "seccomp") && waits {
        // The report thread, which a filter without TSYNC does not cover, wrote the exit
        // report while the exiting thread waited for it.
        c.check(
            c.main_reports().iter().any(|r| {
                r.has("json") && r.manifest().reason.is_some_and(|why| why.contains(BY_THREAD))
            }),
            format!("{name}: no exit report written by the report thread"),
        );
    }
    if sleep || expect == Expect::Harmless {
        // The report thread wrote its first set before the filter (after a second of the
        // program's 2.5 s sleep), or the exit report was written.
        c.check(c.main_reports().iter().any(|r| r.has("txt")), format!("{name}: no report set"));
    }
    c
}

/// Runs `cases` on a few threads at once (most of each run is sleeping).
fn run_all(exe: &Path, dir: &TestDir, cases: &[Case]) {
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            s.spawn(move || {
                for &case in chunk {
                    run_one(exe, dir, case);
                }
            });
        }
    });
}

#[test]
fn a_filter_punishing_a_call_of_ying_never_kills_the_program() {
    let dir = TestDir::new("seccomp-filters");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    let hows = ["prctl", "seccomp", "tsync"];
    let actions = ["kill", "trap"];
    // Each call once, with the three ways and both actions taken in turn; the report thread
    // and the endpoint run when the filter goes in.
    let cases: Vec<_> = CALLS
        .iter()
        .enumerate()
        .map(|(i, &call)| (hows[i % 3], actions[i % 2], call, true, Expect::Stops))
        .collect();
    run_all(&exe, &dir, &cases);
}

#[test]
fn a_filter_before_the_first_safe_point_never_kills_the_program() {
    let dir = TestDir::new("seccomp-early");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    // No thread of Ying's runs yet: the sleep under the filter must not start one.
    let cases = [
        ("prctl", "kill", "clone3", false, Expect::Stops),
        ("seccomp", "trap", "mmap", false, Expect::Stops),
        ("tsync", "kill", "openat", false, Expect::Stops),
        ("prctl", "trap", "mprotect", false, Expect::Stops),
        ("seccomp", "kill", "socket", false, Expect::Stops),
        ("tsync", "trap", "rt_sigprocmask", false, Expect::Stops),
        ("prctl", "kill", "write", false, Expect::Stops),
        ("seccomp", "kill", "futex", false, Expect::Stops),
    ];
    run_all(&exe, &dir, &cases);
}

#[test]
fn every_way_and_action_for_the_exit_report_calls() {
    let dir = TestDir::new("seccomp-matrix");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    let mut cases = Vec::new();
    for how in ["prctl", "seccomp", "tsync"] {
        for (action, expect) in
            [("kill", Expect::Stops), ("trap", Expect::Stops), ("errno", Expect::Fails)]
        {
            cases.push((how, action, "openat", true, expect));
            cases.push((how, action, "renameat", true, expect));
        }
    }
    run_all(&exe, &dir, &cases);
}

#[test]
fn a_filter_that_leaves_ying_alone_changes_nothing() {
    let dir = TestDir::new("seccomp-harmless");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    let cases = [
        ("prctl", "kill", "ptrace", true, Expect::Harmless),
        ("seccomp", "trap", "execve", false, Expect::Harmless),
        ("tsync", "kill", "mount", true, Expect::Harmless),
        ("tsync", "kill", "ptrace", false, Expect::Harmless),
        // A failure Ying survives: the endpoint (started after the filter) is not served.
        ("prctl", "errno", "socket", false, Expect::Fails),
        ("tsync", "errno", "socket", true, Expect::Fails),
    ];
    run_all(&exe, &dir, &cases);
}

#[test]
fn syscall_and_prctl_return_what_glibc_returns() {
    let dir = TestDir::new("seccomp-calls");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    let run = Run::new(&exe).args(&["calls", "kill", "openat", "0"]);
    let c = compare(&run, ALL_ON, &dir.reports("calls"));
    c.check(c.with.success(), "the program failed");
    c.check(c.with.stdout_str().contains("name seccomp-calls"), "prctl(PR_SET_NAME) not passed on");
    // `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, NULL)` fails in the kernel: Ying cannot
    // read a filter there, stopped all the same (it cannot know beforehand) and said so.
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].starts_with(WARNING),
        format!("expected one `{WARNING}...` line, got {lines:#?}"),
    );
}

#[test]
fn strict_mode_ends_with_sys_exit() {
    let dir = TestDir::new("seccomp-strict");
    let exe = dir.compile_c("seccomp_filter.c", &[]);
    for sleep in [false, true] {
        let c = run_one(&exe, &dir, ("strict", "kill", "openat", sleep, Expect::Stops));
        c.check(
            c.with.stdout_str().ends_with("strict mode: still alive\n"),
            "the program did not reach its SYS_exit",
        );
        c.check(c.with.code() == Some(0), "expected exit status 0");
    }
}
