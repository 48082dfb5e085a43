//! Dump triggers in the Rust front end (builder settings): a signal, a control file and the
//! near-limit dump against a fake limit (`memory_limit_bytes`) each write exactly one report
//! set, named by its reason, promptly; a signal the builder refuses is an error naming the
//! field.
//!
//! Each case runs this executable again as a child process (`--exact <case>`), because a
//! signal handler and the report thread belong to a process; the parent bounds the child's
//! time (a hang is a failure) and checks what it printed. The real-cgroup case is in
//! `preload-tests/tests/triggers.rs`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use ying_profiler::YingProfiler;
use ying_profiler::utils::{ProfilerRunnerBuilder, RunnerHandle};

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default();

const CASE_VAR: &str = "YING_TEST_TRIGGER_CASE";
const DIR_VAR: &str = "YING_TEST_TRIGGER_DIR";

/// The manifests (`<set>.json`, written last of a set) in `dir`.
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "json"));
    v.sort();
    v
}

/// Seconds since the epoch of a `taken_at` value such as `2026-12-02T11:30:11Z`.
fn epoch_secs(t: &str) -> u64 {
    let num = |r: std::ops::Range<usize>| -> i64 { t[r].parse().expect("time field") };
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    (days * 86_400 + num(11..13) * 3600 + num(14..16) * 60 + num(17..19)) as u64
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// In the child: waits (at most 30 s) for a set, then half a second more, and prints how many
/// sets there are, their manifests' reasons (`reason: ...` lines), and how many seconds after
/// the request (`asked`, epoch seconds) the first set's snapshot was taken (its manifest's
/// `taken_at`, one-second resolution).
fn report_sets_after(dir: &Path, asked: u64) {
    let end = Instant::now() + Duration::from_secs(30);
    while manifests(dir).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    let all = manifests(dir);
    println!("sets {}", all.len());
    for (i, p) in all.iter().enumerate() {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).expect("a manifest");
        if let Some(why) = m["reason"].as_str() {
            println!("reason: {why}");
        }
        if i == 0 {
            let t = m["taken_at"].as_str().expect("taken_at");
            println!("taken after {} s", epoch_secs(t).saturating_sub(asked));
        }
    }
}

fn runner(dir: &str) -> ProfilerRunnerBuilder {
    let mut b = ProfilerRunnerBuilder::default();
    b.reporting_path(dir).check_interval_secs(3600).report_at_exit(false);
    b
}

/// Runs `case` in a child process; returns its stdout after checking it succeeded in time.
fn child(case: &str) -> String {
    let dir = common::fresh_dir(&format!("triggers-{case}"));
    let mut cmd = common::this_test_binary();
    common::without_ying_vars(&mut cmd);
    let c = cmd
        .args(["--exact", case, "--nocapture", "--test-threads=1"])
        .env(CASE_VAR, case)
        .env(DIR_VAR, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::wait_or_kill(c, Duration::from_secs(60), &format!("the child of {case}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{case}: {:?}\n{stdout}\n{stderr}", out.status);
    assert!(!stderr.contains("ying: warning"), "{case}: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    stdout
}

/// Whether this process is the child running `case`; then returns its reporting directory.
fn as_child(case: &str) -> Option<String> {
    (std::env::var(CASE_VAR).ok()? == case).then(|| std::env::var(DIR_VAR).unwrap())
}

/// Checks the child's output: exactly one set, the given reason, and its snapshot taken within
/// a second of the request (the report thread looks every 100 ms), at `taken_at`'s one-second
/// resolution.
fn check_one_set(out: &str, reason_start: &str) {
    let sets: Option<u64> = out.split("sets ").nth(1).and_then(|r| r.lines().next()?.parse().ok());
    assert_eq!(sets, Some(1), "{out}");
    let reasons: Vec<&str> = out.lines().filter(|l| l.starts_with("reason:")).collect();
    assert_eq!(reasons.len(), 1, "{out}");
    let r = reasons[0].trim_start_matches("reason:").trim();
    assert!(r.starts_with(reason_start), "{r}");
    let secs: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("taken after ")?.strip_suffix(" s")?.parse().ok())
        .unwrap();
    assert!(secs <= 1, "the set was taken {secs} s after the request: {out}");
}

fn start(b: &ProfilerRunnerBuilder) -> (RunnerHandle, Vec<Vec<u8>>) {
    let h = b.build().unwrap().spawn(&YING_ALLOC);
    // Memory to report: a few samples at least.
    let kept: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 << 10]).collect();
    (h, kept)
}

#[test]
fn signal_dump() {
    if let Some(dir) = as_child("signal_dump") {
        let (h, kept) = start(runner(&dir).dump_signal(libc::SIGUSR2));
        // Let the report thread start before the signal (it would serve it later otherwise).
        std::thread::sleep(Duration::from_millis(200));
        let asked = now_secs();
        // SAFETY: raise sends SIGUSR2 to this thread, whose handler is the runner's.
        unsafe { libc::raise(libc::SIGUSR2) };
        report_sets_after(Path::new(&dir), asked);
        h.stop();
        drop(kept);
        return;
    }
    check_one_set(&child("signal_dump"), "signal SIGUSR2");
}

#[test]
fn control_file_dump() {
    if let Some(dir) = as_child("control_file_dump") {
        let (h, kept) = start(&runner(&dir));
        std::thread::sleep(Duration::from_millis(200));
        let own = Path::new(&dir).join(format!("dump.{}", std::process::id()));
        let asked = now_secs();
        std::fs::write(&own, b"").unwrap();
        report_sets_after(Path::new(&dir), asked);
        println!("removed {}", !own.exists());
        h.stop();
        drop(kept);
        return;
    }
    let out = child("control_file_dump");
    check_one_set(&out, "control file ");
    assert!(out.contains("removed true"), "{out}");
}

/// The resident set size of this process, from `/proc/self/statm`.
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split(' ').nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn near_limit_dump_with_a_fake_limit() {
    if let Some(dir) = as_child("near_limit_dump_with_a_fake_limit") {
        // A limit 100 MiB above the resident set now; 90 % of it is reached by touching 100
        // MiB more, and only once.
        let limit = rss() + (100 << 20);
        let (h, kept) = start(runner(&dir).memory_limit_bytes(limit));
        std::thread::sleep(Duration::from_millis(200));
        assert!(manifests(Path::new(&dir)).is_empty(), "no set before the growth");
        let asked = now_secs();
        let big: Vec<Vec<u8>> = (0..10).map(|_| vec![1u8; 10 << 20]).collect();
        report_sets_after(Path::new(&dir), asked);
        h.stop();
        drop((kept, big));
        return;
    }
    check_one_set(&child("near_limit_dump_with_a_fake_limit"), "near memory limit: rss ");
}

#[test]
fn the_builder_refuses_signals_that_cannot_serve() {
    for sig in [libc::SIGKILL, libc::SIGSEGV, libc::SIGCHLD, 32, 99] {
        let err = ProfilerRunnerBuilder::default().dump_signal(sig).build().unwrap_err();
        assert_eq!(err.field, "dump_signal", "{sig}: {err}");
    }
    let err = ProfilerRunnerBuilder::default().memory_limit_pct(101).build().unwrap_err();
    assert_eq!(err.field, "memory_limit_pct");
    assert!(ProfilerRunnerBuilder::default().dump_signal(libc::SIGUSR2).build().is_ok());
}
