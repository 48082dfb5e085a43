//! The Rust front end writes a report set when the process exits: the README's quick start
//! (`YING_ALLOC.start_profiling()`) and a default `ProfilerRunnerBuilder` each leave exactly one
//! set for a program that runs a few seconds, far shorter than the first periodic check (300 s);
//! `YING_REPORT_AT_EXIT=false` read by `ProfilerRunner::from_env` leaves none, and a malformed
//! value warns once and keeps the default; a `fork` child that allocates and calls `exit` writes
//! none of its own; an allocated-ranked exit report leads each entry with the allocated figure;
//! threads still allocating while `main` returns do not stop the exit report. The exit report
//! says once on stderr where it went (its text report and the process's page), unless the
//! builder's `announce_exit_report(false)` asked for silence; the quick start reads the `YING_*`
//! variables set (its reporting path, its top K) over its own values. The quick start killed by
//! `SIGKILL` leaves its heap at death (the live file, on by default) naming what it kept.
//! (`exit_report_no_sample.rs` checks that a process that took no sample writes nothing.)
//!
//! Runs without libtest's harness (`harness = false`): the exit report is written by the
//! process's `atexit` handler, so each case runs this same executable again as a child process
//! (selected by `YING_TEST_EXIT_CASE`), in a fresh working directory, with a timeout, and the
//! parent looks at the files the child left.

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use ying_profiler::YingProfiler;
use ying_profiler::utils::{ProfilerRunner, ProfilerRunnerBuilder};

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default();

/// Selects the child's case; unset in the parent.
const CASE_VAR: &str = "YING_TEST_EXIT_CASE";
/// Longest a child may run before it is killed and the case fails.
const TIMEOUT: Duration = Duration::from_secs(120);

fn main() {
    match std::env::var(CASE_VAR) {
        Ok(case) => child(&case),
        Err(_) => parent(),
    }
}

// ---------------------------------------------------------------------------------------------
// The children.

/// 32 MiB kept until exit, allocated in a function the report must name.
#[inline(never)]
fn exit_report_marker_kept() -> Vec<Vec<u8>> {
    (0..32).map(|_| black_box(vec![7u8; 1 << 20])).collect()
}

/// 64 MiB allocated and freed again: churn that retains nothing.
#[inline(never)]
fn exit_report_marker_churn() -> usize {
    (0..64).map(|i| black_box(vec![i as u8; 1 << 20]).len()).sum()
}

/// What every child does after starting its runner: some work, then a normal return from
/// `main` (the exit report's path), after `secs` seconds. The kept memory stays allocated to
/// the end (like a cache or a leak): what a program frees before it exits is not retained at
/// exit.
fn work(secs: u64) {
    let kept = exit_report_marker_kept();
    black_box(exit_report_marker_churn());
    std::thread::sleep(Duration::from_secs(secs));
    println!("kept {} MiB", kept.len());
    std::mem::forget(kept);
}

fn child(case: &str) {
    match case {
        // The README's quick start, exactly, in a program that runs about two seconds.
        "quick_start" => {
            YING_ALLOC.start_profiling(); // reports at exit, and every 5 min if retained memory moved by 10 %
            work(2);
        }
        "builder_default" => {
            ProfilerRunnerBuilder::default().build().unwrap().spawn(&YING_ALLOC);
            work(0);
        }
        "builder_quiet" => {
            ProfilerRunnerBuilder::default()
                .announce_exit_report(false)
                .build()
                .unwrap()
                .spawn(&YING_ALLOC);
            work(0);
        }
        "from_env" => {
            ProfilerRunner::from_env(&YING_ALLOC).spawn(&YING_ALLOC);
            work(0);
        }
        "allocated" => {
            ProfilerRunnerBuilder::default()
                .measure_allocated_not_retained(true)
                .build()
                .unwrap()
                .spawn(&YING_ALLOC);
            black_box(exit_report_marker_churn());
        }
        "fork" => {
            YING_ALLOC.start_profiling();
            let kept = exit_report_marker_kept();
            // SAFETY: the child only allocates (through this allocator, whose hooks are safe in
            // a fork child of a process whose other threads are idle) and calls `exit`.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                // Samples of its own, then `exit` (which runs the atexit handlers), not `_exit`.
                black_box(exit_report_marker_churn());
                black_box(exit_report_marker_kept());
                std::process::exit(0);
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked; `status` is a valid out pointer.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(waited, pid);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{status}");
            println!("forked {pid}, kept {} MiB", kept.len());
            std::mem::forget(kept);
        }
        "busy_threads" => {
            // Four threads allocate (and take samples) without pause while `main` returns: the
            // exit report is written while they run, and must neither wait for them nor stop.
            YING_ALLOC.start_profiling();
            for _ in 0..4 {
                std::thread::spawn(|| {
                    loop {
                        black_box(exit_report_marker_churn());
                    }
                });
            }
            work(0);
        }
        // The quick start in a program killed with its memory held: its heap at death.
        "quick_start_killed" => {
            YING_ALLOC.start_profiling();
            let kept = exit_report_marker_kept();
            println!("kept {} MiB", kept.len());
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        other => panic!("unknown case {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// One finished child: its pid, output and working directory (reports in `ying-profiles/`).
struct Child {
    case: String,
    pid: u32,
    out: Output,
    dir: PathBuf,
}

impl Child {
    fn describe(&self) -> String {
        format!(
            "case {} (pid {}): {}\nstdout:\n{}\nstderr:\n{}\nfiles: {:?}",
            self.case,
            self.pid,
            self.out.status,
            String::from_utf8_lossy(&self.out.stdout),
            String::from_utf8_lossy(&self.out.stderr),
            files(&self.dir.join("ying-profiles"))
        )
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// Asserts that stderr is the one line saying where the exit report went: the text report
    /// of the set `stem` (a file that exists), and the process's page.
    fn assert_announced(&self, stem: &str) {
        let err = self.stderr();
        let lines: Vec<&str> =
            err.lines().filter(|l| l.starts_with("ying: exit report: ")).collect();
        assert_eq!(lines.len(), 1, "one line saying where the report went\n{}", self.describe());
        let rest = &lines[0]["ying: exit report: ".len()..];
        let (txt, page) = rest.split_once(" (page: ").expect("the page is named");
        let want = format!("/ying-profiles/{stem}.txt");
        assert!(txt.starts_with('/') && txt.ends_with(&want), "{txt}\n{}", self.describe());
        assert!(Path::new(txt).is_file(), "{txt}");
        let page = page.strip_suffix(')').unwrap_or(page);
        assert!(Path::new(page).is_file() && page.ends_with(".html"), "{page}");
    }
    /// The stems (`ying.<exe>.<pid>.<seq>.<time>`) of the report sets written (complete: their
    /// manifest, written last, is there).
    fn sets(&self) -> Vec<String> {
        let mut v: Vec<String> = files(&self.dir.join("ying-profiles"))
            .into_iter()
            .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
            .collect();
        v.sort();
        v
    }
    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join("ying-profiles").join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", self.describe()))
    }
    /// Asserts exactly one complete report set, written by the child itself, and returns its
    /// text report and its manifest.
    fn only_set(&self) -> (String, Value) {
        let sets = self.sets();
        assert_eq!(sets.len(), 1, "exactly one report set expected\n{}", self.describe());
        let stem = &sets[0];
        let set: ying_profiler::report::SetName = stem.parse().expect("a set's name");
        assert_eq!(set.pid, self.pid, "{stem}");
        assert!(set.instance.is_some(), "the name carries the process's instance: {stem}");
        for ext in ["txt", "svg", "folded", "pb.gz"] {
            let p = self.dir.join("ying-profiles").join(format!("{stem}.{ext}"));
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{} missing or empty\n{}", p.display(), self.describe());
        }
        let manifest = serde_json::from_str(&self.read(&format!("{stem}.json")))
            .unwrap_or_else(|e| panic!("{stem}.json: {e}\n{}", self.describe()));
        (self.read(&format!("{stem}.txt")), manifest)
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs this executable as the child of `case` in a fresh directory, with `vars` set and every
/// other `YING_*` variable removed; kills it after [`TIMEOUT`].
fn run(n: usize, case: &str, vars: &[(&str, &str)]) -> Child {
    let dir = std::env::temp_dir()
        .join(format!("ying-exit-report-{}", std::process::id()))
        .join(format!("{n}-{case}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = common::this_test_binary();
    common::without_ying_vars(&mut cmd);
    // Exit reports in full, as the cases read them, unless a case says otherwise (a short
    // process writes its exit report raw by default through `from_env`).
    if !vars.iter().any(|(k, _)| *k == "YING_SHORT_PROCESS_SECS") {
        cmd.env("YING_SHORT_PROCESS_SECS", "0");
    }
    cmd.env(CASE_VAR, case).envs(vars.iter().copied()).current_dir(&dir);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let out = common::wait_or_kill(child, TIMEOUT, &format!("case {case}"));
    Child { case: case.to_string(), pid, out, dir }
}

/// The lines of a text report that start a ranked entry (`#1 ...`).
fn entries(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with('#')).collect()
}

/// Whether a frame of `entry` (a manifest entry) names `func`.
fn entry_names(entry: &Value, func: &str) -> bool {
    entry["frames"]
        .as_array()
        .is_some_and(|fs| fs.iter().any(|f| f.as_str().is_some_and(|f| f.contains(func))))
}

/// Whether a listed entry of manifest `m` (now or at the peak) names `func`.
fn names(m: &Value, func: &str) -> bool {
    ["entries", "peak_entries"]
        .iter()
        .filter_map(|k| m[k].as_array())
        .flatten()
        .any(|e| entry_names(e, func))
}

fn parent() {
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("quick_start", vec![]),
        ("builder_default", vec![]),
        ("builder_quiet", vec![]),
        ("from_env", vec![("YING_REPORT_AT_EXIT", "false")]),
        ("from_env", vec![("YING_REPORT_AT_EXIT", "maybe")]),
        ("allocated", vec![]),
        ("fork", vec![]),
        ("busy_threads", vec![]),
        // The quick start reads the YING_* variables set over its own values.
        ("quick_start", vec![("YING_REPORTING_PATH", "elsewhere"), ("YING_TOP_K", "1")]),
    ];
    // The children run at the same time (each mostly sleeps).
    let runs: Vec<_> = cases
        .into_iter()
        .enumerate()
        .map(|(i, (case, vars))| {
            std::thread::spawn(move || {
                let mut c = run(i, case, &vars);
                c.case = format!("{case} #{i} {vars:?}");
                c
            })
        })
        .collect();
    let children: Vec<Child> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    for c in &children {
        assert!(c.out.status.success(), "{}", c.describe());
    }

    // The quick start, with nothing configured: one set, naming what the program kept.
    let quick = &children[0];
    let (_, m) = quick.only_set();
    assert!(names(&m, "exit_report_marker_kept"), "{m:#}");
    quick.assert_announced(m["set"].as_str().unwrap());
    assert_eq!(quick.stderr().lines().count(), 1, "{}", quick.describe());
    println!("quick start: one report set at exit, said where: ok");
    // The resident set explained over `System` (glibc): the parts sum to it, and the 32 blocks
    // of 1 MiB kept (glibc's mmapped chunks, told by their headers) are the heap in use.
    let rss = m["rss_bytes"].as_u64().expect("rss_bytes");
    let parts = m["rss_breakdown"].as_object().expect("rss_breakdown");
    let sum: u64 = parts.values().filter_map(|v| v.as_u64()).sum();
    assert_eq!(sum, rss, "{m:#}");
    let in_use = parts["heap_in_use"].as_u64().unwrap_or(0);
    assert!(in_use >= 32 << 20, "heap in use {in_use} bytes, 32 MiB kept: {parts:?}");
    assert!(parts["unseen_anonymous"].as_u64().unwrap_or(0) < 8 << 20, "{parts:?}");
    println!("quick start: resident set explained: {parts:?}");

    // A default builder: the same.
    let (_, m) = children[1].only_set();
    assert!(names(&m, "exit_report_marker_kept"), "{m:#}");
    children[1].assert_announced(m["set"].as_str().unwrap());
    println!("default builder: one report set at exit: ok");

    // Asked for silence: the same set, nothing said.
    let quiet = &children[2];
    let (_, m) = quiet.only_set();
    assert!(names(&m, "exit_report_marker_kept"), "{m:#}");
    assert!(quiet.stderr().is_empty(), "{}", quiet.describe());
    println!("announce_exit_report(false): written silently: ok");

    // YING_REPORT_AT_EXIT=false: nothing (the first check, at 300 s, never comes).
    let off = &children[3];
    assert_eq!(off.sets(), Vec::<String>::new(), "{}", off.describe());
    assert!(off.stderr().is_empty(), "{}", off.describe());
    println!("YING_REPORT_AT_EXIT=false: no report set: ok");

    // A malformed value: one warning, and the default (report at exit).
    let bad = &children[4];
    let err = bad.stderr();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0],
        "ying: warning: YING_REPORT_AT_EXIT=maybe is invalid (expected true/false/1/0); using true",
        "{}",
        bad.describe()
    );
    assert_eq!(lines.len(), 2, "the warning, then where the report went\n{}", bad.describe());
    let (_, m) = bad.only_set();
    bad.assert_announced(m["set"].as_str().unwrap());
    println!("YING_REPORT_AT_EXIT=maybe: one warning, report at exit: ok");

    // Ranked by allocated bytes: every entry leads with its allocated figure, and the churn
    // (which retains nothing) is listed first.
    let (text, m) = children[5].only_set();
    assert_eq!(m["ranked_by"], "allocated", "{m:#}");
    // The leading figure is the human wording: read in the text.
    let tops = entries(&text);
    assert!(!tops.is_empty(), "{text}");
    for line in &tops {
        let figure = line.split_once(' ').map(|(_, rest)| rest).unwrap_or("");
        assert!(figure.starts_with("allocated "), "entry not led by allocated bytes: {line}");
    }
    let first = &m["entries"][0];
    assert!(entry_names(first, "exit_report_marker_churn"), "{m:#}");
    assert_eq!(first["retained_bytes"], 0, "{m:#}");
    println!("allocated-ranked exit report leads with allocated bytes: ok");

    // A fork child that sampled and called `exit` writes nothing; the parent its one set.
    let fork = &children[6];
    let (_, m) = fork.only_set();
    assert!(names(&m, "exit_report_marker_kept"), "{m:#}");
    // Said once, by the parent: the child wrote nothing, so said nothing.
    fork.assert_announced(m["set"].as_str().unwrap());
    println!("fork child writes no exit report of its own: ok");

    // Other threads still allocating at exit: the report is written all the same, once.
    let (_, m) = children[7].only_set();
    assert!(names(&m, "exit_report_marker_kept"), "{m:#}");
    println!("exit report while other threads allocate: ok");

    // The quick start with YING_REPORTING_PATH and YING_TOP_K set: its set where the variable
    // says, one entry listed; nothing in the seed's ying-profiles.
    let env = &children[8];
    let there = files(&env.dir.join("elsewhere"));
    let text = there.iter().find(|n| n.ends_with(".txt")).unwrap_or_else(|| {
        panic!("no set in YING_REPORTING_PATH\n{}", env.describe());
    });
    let text = std::fs::read_to_string(env.dir.join("elsewhere").join(text)).unwrap();
    assert_eq!(entries(&text).len(), 1, "YING_TOP_K=1 lists one entry\n{text}");
    assert!(files(&env.dir.join("ying-profiles")).is_empty(), "{}", env.describe());
    println!("quick start reads the YING_* variables set: ok");

    killed_with_defaults();

    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("ying-exit-report-{}", std::process::id())),
    );
}

/// The quick start with nothing configured, in a program killed by `SIGKILL` while it holds
/// its memory: its live file is there within a second of its first sample, and the report of
/// it names what the program kept.
fn killed_with_defaults() {
    let dir = std::env::temp_dir()
        .join(format!("ying-exit-report-{}", std::process::id()))
        .join("killed");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = common::this_test_binary();
    common::without_ying_vars(&mut cmd);
    cmd.env(CASE_VAR, "quick_start_killed").current_dir(&dir);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("kept "), "{line:?}");
    let reports = dir.join("ying-profiles");
    let start = std::time::Instant::now();
    let live = loop {
        let found = files(&reports).into_iter().find(|n| n.ends_with(".live"));
        if let Some(name) = found {
            break reports.join(name);
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("no live file within 10 s: {:?}", files(&reports));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A version written after the kept memory was: the file is at least as new as the line.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    let profile = ying_profiler::report::live::LiveProfile::read(&live).unwrap();
    assert_eq!(profile.pid(), child.id());
    let out = dir.join("out");
    let set = profile.write_report_set(&out, Some("killed by SIGKILL")).unwrap();
    let text = std::fs::read_to_string(set.paths.text.as_ref().unwrap()).unwrap();
    assert!(text.contains("process ended:      killed by SIGKILL"), "{text}");
    let first = entries(&text);
    assert!(!first.is_empty(), "{text}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(set.paths.manifest.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    assert!(entry_names(&manifest["entries"][0], "exit_report_marker_kept"), "{manifest:#}");
    println!("quick start killed by SIGKILL: its heap at death, written by default: ok");
}
