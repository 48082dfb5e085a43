//! The report thread starts at whatever wait a program uses (`programs/wait_points.c`, one kind
//! of call per mode), never inside a signal handler or a `vfork` child, and a program that
//! never waits is told so once at exit; the program's signal dispositions read back exactly as
//! it installed them.
//!
//! Each mode runs without the shim and with it (`compare`: same stdout, same exit status,
//! each run with a timeout). With the shim, `YING_CHECK_INTERVAL_SECS=1` and no exit report
//! (`YING_REPORT_AT_EXIT=false`), so a report set of the program's pid can only come from the
//! report thread's periodic check, which proves the thread started. The program waits about
//! 3 s (`WAIT_MS` in the program), in exact mode so that its marker block is a sample.
//! Where the program notes its thread count (`/proc/self/task`, its second argument), the
//! notes tell when the thread started: it starts with the keeper (`runner/keeper.rs`), so the
//! count goes from 1 to 3.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use preload_tests::{
    Comparison, Run, TestDir, compare, compare_concurrently, preload_lib, report_sets,
};

/// Each run's limit (the program itself waits about 3 s).
const TIMEOUT: Duration = Duration::from_secs(40);

/// Periodic checks every second, exact sampling, no exit report.
const PERIODIC: &[(&str, &str)] = &[
    ("YING_CHECK_INTERVAL_SECS", "1"),
    ("YING_REPORT_AT_EXIT", "false"),
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
];

/// Runs `mode` without and with the shim; the notes file's path is the second argument.
fn run_mode(mode: &str) -> (TestDir, Comparison, String) {
    let dir = TestDir::new(&format!("wait_points_{mode}"));
    let exe = dir.compile_c("wait_points.c", &["-lpthread"]);
    let notes = dir.join("notes");
    let run = Run::new(&exe).arg(mode).arg(&notes).timeout(TIMEOUT);
    // The plain run at the same time, noting into a file of its own (the program only waits).
    let plain = Run::new(&exe).arg(mode).arg(dir.join("notes-plain")).timeout(TIMEOUT);
    let c = compare_concurrently(&plain, &run, PERIODIC, &dir.reports(mode));
    let text = std::fs::read_to_string(&notes).unwrap_or_default();
    (dir, c, text)
}

/// Asserts that the report thread wrote a periodic set for the program's own pid, and that the
/// shim printed nothing.
fn assert_started(c: &Comparison) {
    c.assert_no_ying_lines();
    c.check(
        !c.main_reports().is_empty(),
        "no periodic report set: the report thread never started",
    );
}

fn started_at(mode: &str) {
    let (_dir, c, _) = run_mode(mode);
    assert_started(&c);
}

#[test]
fn sleep_once() {
    started_at("sleep");
}

#[test]
fn sleep_loop() {
    started_at("sleep_loop");
}

#[test]
fn usleep_loop() {
    started_at("usleep_loop");
}

#[test]
fn thrd_sleep_loop() {
    started_at("thrd_sleep");
}

#[test]
fn poll_once() {
    started_at("poll");
}

#[test]
fn poll_loop() {
    started_at("poll_loop");
}

#[test]
fn ppoll_loop() {
    started_at("ppoll");
}

#[test]
fn select_loop() {
    started_at("select");
}

#[test]
fn pselect_loop() {
    started_at("pselect");
}

#[test]
fn epoll_pwait2_loop() {
    started_at("epoll_pwait2");
}

#[test]
fn read_from_a_pipe() {
    started_at("read_pipe");
}

#[test]
fn read_from_a_timerfd() {
    started_at("read_timerfd");
}

#[test]
fn cond_timedwait_loop() {
    started_at("cond_timedwait");
}

#[test]
fn cond_wait_on_a_process_shared_condition() {
    started_at("cond_wait");
}

#[test]
fn sigwait_loop() {
    started_at("sigwait");
}

#[test]
fn sigwaitinfo_loop() {
    started_at("sigwaitinfo");
}

#[test]
fn sigtimedwait_loop() {
    started_at("sigtimedwait");
}

#[test]
fn sigsuspend_loop() {
    started_at("sigsuspend");
}

#[test]
fn pause_loop() {
    started_at("pause");
}

#[test]
fn waitpid_once() {
    started_at("waitpid");
}

#[test]
fn wait_once() {
    started_at("wait");
}

#[test]
fn wait4_once() {
    started_at("wait4");
}

#[test]
fn waitid_once() {
    started_at("waitid");
}

#[test]
fn accept_once() {
    started_at("accept");
}

#[test]
fn accept4_once() {
    started_at("accept4");
}

/// A SIGALRM handler calls `poll`, `read` and `waitpid` about 60 times while `main` spins: the
/// thread does not start there (one thread after the handlers), but at `main`'s own `poll`.
#[test]
fn waits_inside_a_signal_handler_are_not_safe_points() {
    let (_dir, c, notes) = run_mode("handler_waits");
    c.check(
        notes == "after_handlers=1\nafter_poll=3\n",
        format!("thread counts noted by the program: {notes:?} (want 1 after the handlers, 3 after main's poll: the report thread and the keeper)"),
    );
    assert_started(&c);
}

/// A handler that leaves by `siglongjmp` leaves its thread's depth raised: the program behaves
/// as without the shim, its later `poll` is (conservatively) no safe point, and `nanosleep`,
/// which no handler may call, still is.
#[test]
fn a_handler_left_by_siglongjmp() {
    let (_dir, c, notes) = run_mode("longjmp");
    c.check(
        notes == "after_poll=1\nafter_nanosleep=3\n",
        format!("thread counts noted by the program: {notes:?}"),
    );
    assert_started(&c);
}

/// `sigaction` queries, `SA_RESETHAND` (reset to `SIG_DFL` after one delivery), `SA_SIGINFO`
/// handlers called with their `siginfo_t`, flags and masks, `signal`, `sysv_signal` and
/// `sigset` old values: stdout (which prints them all) is the same with the shim.
#[test]
fn dispositions_read_back_as_installed() {
    let (_dir, c, _) = run_mode("dispositions");
    c.check(
        c.with.stdout_str().contains("usr1 after one delivery (SA_RESETHAND): SIG_DFL"),
        "SA_RESETHAND did not reset the disposition",
    );
    c.assert_no_ying_lines();
}

/// A `vfork` child calls `read`, `waitpid` and `poll` before `_exit`: it starts nothing (it
/// shares the parent's memory), and the parent's own `poll` then starts the parent's thread.
#[test]
fn a_vfork_child_never_starts_the_thread() {
    let (_dir, c, notes) = run_mode("vfork");
    c.check(
        notes == "after_vfork=1\nafter_poll=3\n",
        format!("thread counts noted by the program: {notes:?}"),
    );
    assert_started(&c);
}

/// A thread blocked in `read` is cancelled: the forced unwind passes through the shim's `read`
/// (a tail jump, no frame of ours) and the program prints the same.
#[test]
fn a_thread_cancelled_in_read() {
    let (_dir, c, _) = run_mode("cancel_read");
    c.check(c.with.stdout_str().contains("done 1"), "the thread was not cancelled");
    assert_started(&c);
}

/// A program that only computes (3 s, more than one check interval) gets one `ying:` line at
/// exit naming what was not served.
#[test]
fn a_program_that_never_waits_is_told_once() {
    let dir = TestDir::new("wait_points_spin");
    let exe = dir.compile_c("wait_points.c", &["-lpthread"]);
    let run = Run::new(&exe).arg("spin").timeout(TIMEOUT);
    let vars: Vec<(&str, &str)> =
        PERIODIC.iter().copied().chain([("YING_DUMP_SIGNAL", "USR2")]).collect();
    let c = compare(&run, &vars, &dir.reports("spin"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].contains("never started")
            && lines[0].contains("YING_CHECK_INTERVAL_SECS=1")
            && lines[0].contains("YING_DUMP_SIGNAL"),
        format!("want one line naming periodic checks and the dump signal: {lines:#?}"),
    );
    c.check(c.main_reports().is_empty(), "a report set without a report thread");
}

/// The dump signal works in a program whose only wait is `poll`: its handler is installed
/// when the thread starts there, and a dump is written on the signal.
#[test]
fn dump_signal_served_at_poll() {
    let dir = TestDir::new("wait_points_dump");
    let exe = dir.compile_c("wait_points.c", &["-lpthread"]);
    let reports = dir.reports("dump");
    std::fs::create_dir_all(&reports).expect("reports dir");
    let mut cmd = Command::new(&exe);
    cmd.arg("poll_loop").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("YING_") || k == "LD_PRELOAD" {
            cmd.env_remove(&k);
        }
    }
    cmd.env("LD_PRELOAD", preload_lib())
        .env("YING_CHECK_INTERVAL_SECS", "3600")
        .env("YING_REPORT_AT_EXIT", "false")
        .env("YING_SAMPLE_INTERVAL_BYTES", "1")
        .env("YING_DUMP_SIGNAL", "USR2")
        .env("YING_REPORTING_PATH", &reports);
    let mut child = cmd.spawn().expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("first line");
    assert_eq!(first, "mode poll_loop\n");
    // The program is in its 3 s of polls now; give the thread a moment to install the handler.
    std::thread::sleep(Duration::from_millis(700));
    let sent = Command::new("kill").args(["-USR2", &child.id().to_string()]).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -USR2 failed");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("the program did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("stdout");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(status.success(), "killed by the dump signal? {status:?}\nstderr: {err}");
    // The handled signal interrupts one poll (EINTR, -1), as any handler would; the loop goes on
    // long enough for the dump.
    assert!(rest == "done 0\n" || rest == "done -1\n", "unexpected stdout: {rest:?}");
    let sets: Vec<_> = report_sets(&reports).into_iter().filter(|r| r.pid == child.id()).collect();
    assert!(!sets.is_empty(), "no dump set written on SIGUSR2; stderr: {err}");
}
