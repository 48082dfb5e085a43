//! CPython's own test suites for the parts of the system a profiler can disturb, run under the
//! shim beside the plain run: `test_subprocess` (descriptors passed to children, `fork` and
//! `exec`, `vfork`), `test_threading` (thread start and exit, `fork` from threads, shutdown),
//! `test_os` (descriptors, `fork`, environment), `test_posix` and `test_pty` (descriptors,
//! terminals), `test_signal` (handlers, waits interrupted by signals, `sigwait`) and
//! `test_mmap`. The suites of descriptors run with the live file, the endpoint and reports all
//! busy (see `EVERYTHING_SHIM`).
//!
//! Each suite runs twice at once with the interpreter on `PATH`, plain and with the shim, periodic
//! reports every second (`YING_CHECK_INTERVAL_SECS=1`, so the report thread is running in every
//! interpreter that lives that long, the suite's many child interpreters included). Every test
//! case that passed in the plain run must pass under the shim; a case that fails only under
//! the shim is run again alone, plain and with the shim, before the test fails, so that a case
//! that is merely slow on a loaded machine does not fail the suite (a failure that repeats
//! alone is the shim's). A case that hangs is ended by the suite's own per-case timeout
//! (`--timeout`, which prints every thread's Python stack) and fails the test.
//!
//! The suites of the states of Python's frames (`test_sys_setprofile`, `test_generators`,
//! `test_coroutines`, `test_gc`, `test_sys`, `test_traceback`) run together in one
//! `python -m test`, under a shim that samples every allocation: each sample reads the thread's
//! frame chain (`engine/python/`), so the reader meets tracing hooks, suspended generators and
//! coroutines, collector callbacks and frames torn down by exceptions hundreds of thousands of
//! times; besides the cases, the shim's text reports must show Python frames, frames of the
//! suites' own files among them. Each run prints its wall time, plain and under the shim.
//!
//! Skipped (with a `SKIPPED:` line) where the interpreter lacks its test package (Debian's
//! `python3` without `libpython3-testsuite`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use preload_tests::{Outcome, Run, TestDir, list_dir, require_tool};

/// The longest one test case may take before the suite ends it (and the run fails).
const CASE_TIMEOUT_SECS: &str = "120";
/// The longest a whole suite may take.
const SUITE_TIMEOUT: Duration = Duration::from_secs(900);

/// Turns a JUnit XML file written by `python -m test --junit-xml` into `case id -> outcome`
/// (`ok`, `failure`, `error`, `skipped`), using the interpreter under test to read the XML.
const READ_JUNIT: &str = r#"
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter('testcase'):
    name = (tc.get('classname') or '') + '.' + (tc.get('name') or '')
    state = 'ok'
    for child in tc:
        if child.tag in ('failure', 'error'):
            state = child.tag
        elif child.tag == 'skipped' and state == 'ok':
            state = 'skipped'
    print(name.strip('.'), state, sep='\t')
"#;

/// Prints the names of the suites among its arguments that the test package does not have.
const MISSING_SUITES: &str = r#"
import importlib.util, sys
print(*[s for s in sys.argv[1:] if importlib.util.find_spec("test." + s) is None])
"#;

/// Whether the `python3` on `PATH` has CPython's test package, with `suites` in it (Debian's
/// `python3.11` has `test.support` and `test.libregrtest` but none of the suites, without
/// `libpython3-testsuite`: they would fail to import in both runs and compare nothing).
fn has_test_package(suites: &[&str]) -> bool {
    let Some(py) = require_tool("python3") else { return false };
    let o = Run::new(&py).args(&["-c", "import test.support, test.libregrtest"]).run();
    if !o.success() {
        eprintln!("SKIPPED: this python3 has no test package (`import test.support` failed)");
        return false;
    }
    let o = Run::new(&py).args(&["-c", MISSING_SUITES]).args(suites).run();
    o.assert_success("looking for the suites in the test package");
    let missing = o.stdout_str().trim().to_string();
    if !missing.is_empty() {
        eprintln!("SKIPPED: this python3's test package has no {missing}");
    }
    missing.is_empty()
}

/// How the shim runs a group of suites: its settings beyond the periodic reports, and whether
/// its reports must show Python frames.
#[derive(Clone, Copy)]
struct Shim {
    settings: &'static [(&'static str, &'static str)],
    python_frames: bool,
}

/// The shim as the suites of the system run under it: default settings.
const DEFAULT_SHIM: Shim = Shim { settings: &[], python_frames: false };

/// The shim with everything that opens descriptors busy: the live file rewritten every 50 ms,
/// the endpoint listening (on a port of the kernel's choosing in each interpreter), reports
/// every second and a sample every 64 KiB so that they all have work. The suites of descriptors
/// (`test_subprocess`, `test_os`, `test_posix`, `test_pty`) run under it: Ying's threads work in
/// a descriptor table of their own, so the numbers these suites expect are the program's.
const EVERYTHING_SHIM: Shim = Shim {
    settings: &[
        ("YING_LIVE_FILE", "on"),
        ("YING_LIVE_INTERVAL_MS", "50"),
        ("YING_HTTP_ADDR", "127.0.0.1:0"),
        ("YING_SAMPLE_INTERVAL_BYTES", "64KiB"),
    ],
    python_frames: false,
};

/// The shim sampling every allocation (`YING_SAMPLE_INTERVAL_BYTES=1`), each sample reading the
/// thread's Python frames: hundreds of thousands of reads of the frame chain in every state
/// the suites put it in. The text reports list 200 stacks, so that frames of the suites' own
/// files are among them.
const FRAMES_SHIM: Shim = Shim {
    settings: &[("YING_SAMPLE_INTERVAL_BYTES", "1"), ("YING_TOP_K", "200")],
    python_frames: true,
};

/// One run of `suites` (optionally only the cases matching `only`), plain or under the shim.
fn run_suite(
    dir: &TestDir,
    suites: &[&str],
    tag: &str,
    shim: Option<Shim>,
    only: Option<&str>,
) -> SuiteRun {
    let xml = dir.join(&format!("{}-{tag}.xml", suites.join("+")));
    let work = dir.join(&format!("work-{tag}"));
    std::fs::create_dir_all(&work).expect("work dir");
    let mut run = Run::new("python3")
        .args(&["-m", "test"])
        .args(suites)
        .args(&["-v", "--timeout", CASE_TIMEOUT_SECS, "--junit-xml"])
        .arg(&xml)
        .cwd(&work)
        .timeout(SUITE_TIMEOUT);
    if let Some(case) = only {
        run = run.args(&["-m", case]);
    }
    if let Some(shim) = shim {
        run = run
            .with_preload()
            .envs(&[
                ("YING_CHECK_INTERVAL_SECS", "1"),
                ("YING_REPORTING_PATH", &reports_of(dir, tag).display().to_string()),
            ])
            .envs(shim.settings);
    }
    let outcome = run.run();
    let cases = read_cases(&xml);
    SuiteRun {
        command: format!("{}{}", if shim.is_some() { "[shim] " } else { "" }, run.command_line()),
        outcome,
        cases,
    }
}

/// The reporting directory of the run tagged `tag`.
fn reports_of(dir: &TestDir, tag: &str) -> std::path::PathBuf {
    dir.join(&format!("reports-{tag}"))
}

/// The suite of a case id (`test.test_gc.GCTests.test_bug1055820b`: `test_gc`), when it is one
/// of `suites`.
fn suite_of<'a>(case: &str, suites: &[&'a str]) -> Option<&'a str> {
    let module = case.split('.').nth(1)?;
    suites.iter().copied().find(|s| *s == module)
}

/// Checks that the shim's text reports in `reports` show Python frames: a frame line with a
/// `.py:` location, and among them frames of the suites' own files (`test_gc.py:`), so that
/// frames were read while the suites ran, not only while the interpreter started. Returns the
/// count of frame lines per suite file, or what is missing.
fn python_frames_in(reports: &Path, suites: &[&str]) -> Result<BTreeMap<String, usize>, String> {
    let mut texts = 0;
    let mut python = 0;
    let mut per_suite: BTreeMap<String, usize> =
        suites.iter().map(|s| (format!("{s}.py:"), 0)).collect();
    for e in std::fs::read_dir(reports).map_err(|e| format!("{}: {e}", reports.display()))? {
        let path = e.map_err(|e| e.to_string())?.path();
        if path.extension().is_none_or(|x| x != "txt") {
            continue;
        }
        texts += 1;
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // A frame line: `     function (file:line)`.
        for line in text.lines().filter(|l| l.starts_with("     ") && l.ends_with(')')) {
            let Some((_, location)) = line.rsplit_once(" (") else { continue };
            let is_python = location
                .trim_end_matches(')')
                .rsplit_once(':')
                .is_some_and(|(file, l)| file.ends_with(".py") && l.parse::<u32>().is_ok());
            if !is_python {
                continue;
            }
            python += 1;
            for (file, n) in per_suite.iter_mut() {
                if location.contains(&format!("/{file}")) {
                    *n += 1;
                }
            }
        }
    }
    if python == 0 {
        return Err(format!("none of the {texts} text reports has a frame with a `.py:` location"));
    }
    if per_suite.values().all(|n| *n == 0) {
        return Err(format!(
            "{python} Python frame lines in {texts} text reports, none in the suites' files"
        ));
    }
    Ok(per_suite)
}

fn read_cases(xml: &Path) -> BTreeMap<String, String> {
    if !xml.exists() {
        return BTreeMap::new();
    }
    let o = Run::new("python3").args(&["-c", READ_JUNIT]).arg(xml).run();
    o.assert_success("reading the suite's JUnit XML");
    o.stdout_str()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct SuiteRun {
    command: String,
    outcome: Outcome,
    cases: BTreeMap<String, String>,
}

impl SuiteRun {
    /// Each suite's wall time in whole seconds, from the progress lines `python -m test` prints
    /// as each suite starts (`0:00:07 load avg: 3.80 [5/6] test_sys`); the last one ends with
    /// the run.
    fn suite_times(&self) -> BTreeMap<String, u64> {
        let mut starts: Vec<(String, u64)> = Vec::new();
        for line in self.outcome.stdout_str().lines() {
            let mut words = line.split_whitespace();
            let Some(clock) = words.next() else { continue };
            let hms: Vec<u64> = clock.split(':').filter_map(|x| x.parse().ok()).collect();
            let (Some(progress), Some(suite)) = (words.nth(3), words.next()) else { continue };
            if hms.len() != 3 || !progress.starts_with('[') || !suite.starts_with("test_") {
                continue;
            }
            if starts.iter().all(|(s, _)| s != suite) {
                starts.push((suite.to_string(), hms[0] * 3600 + hms[1] * 60 + hms[2]));
            }
        }
        let end = self.outcome.elapsed.as_secs();
        let ends: Vec<u64> = starts.iter().skip(1).map(|(_, t)| *t).chain([end]).collect();
        starts.iter().zip(ends).map(|((s, t), e)| (s.clone(), e.saturating_sub(*t))).collect()
    }

    fn describe(&self) -> String {
        let out = self.outcome.stdout_str();
        let err = self.outcome.stderr_str();
        let tail = |s: &str| {
            s.lines()
                .rev()
                .take(60)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "{}\nstatus: {}\n--- stdout (last 60 lines) ---\n{}\n--- stderr (last 60 lines) ---\n{}",
            self.command,
            self.outcome.status_text(),
            tail(&out),
            tail(&err)
        )
    }
}

/// Runs `suite` plain and under the shim and fails if a case that passed plain does not pass
/// under the shim, also when run again alone.
fn compare_suite(suite: &str) {
    compare_suites(suite, &[suite], DEFAULT_SHIM);
}

/// Runs `suites` in one `python -m test` plain and under `shim`, and fails if a case that
/// passed plain does not pass under the shim, also when run again alone; with
/// `shim.python_frames`, also if the shim's reports show no Python frame.
fn compare_suites(name: &str, suites: &[&str], shim_settings: Shim) {
    if !has_test_package(suites) {
        return;
    }
    let dir = TestDir::new(&format!("cpython-{name}"));
    // Both runs at once: the suites mostly wait (on children, timers, signals), and each run
    // has its own working directory, results file and reporting directory.
    let (plain, shim) = std::thread::scope(|s| {
        let plain = s.spawn(|| run_suite(&dir, suites, "plain", None, None));
        let shim = run_suite(&dir, suites, "shim", Some(shim_settings), None);
        (plain.join().expect("the plain run's thread"), shim)
    });
    eprintln!(
        "{name}: wall time {:.1} s plain, {:.1} s under the shim (run at the same time)",
        plain.outcome.elapsed.as_secs_f64(),
        shim.outcome.elapsed.as_secs_f64()
    );
    if suites.len() > 1 {
        let (p, s) = (plain.suite_times(), shim.suite_times());
        for suite in suites {
            let time = |t: &BTreeMap<String, u64>| {
                t.get(*suite).map_or("?".to_string(), |s| format!("{s} s"))
            };
            eprintln!("  {suite}: {} plain, {} under the shim", time(&p), time(&s));
        }
    }
    assert!(
        !plain.cases.is_empty(),
        "the plain run of {name} reported no test case:\n{}",
        plain.describe()
    );
    assert!(
        shim.outcome.code().is_some(),
        "{name} under the shim did not end by itself (killed or timed out):\n{}",
        shim.describe()
    );
    assert!(
        !shim.cases.is_empty(),
        "{name} under the shim wrote no results (a case hung or the interpreter died):\n{}",
        shim.describe()
    );
    let mut lost = Vec::new();
    for (case, state) in &plain.cases {
        if state != "ok" {
            continue;
        }
        match shim.cases.get(case).map(String::as_str) {
            Some("ok") | Some("skipped") => {}
            other => lost.push((case.clone(), other.unwrap_or("missing").to_string())),
        }
    }
    let mut confirmed = Vec::new();
    for (i, (case, state)) in lost.iter().enumerate() {
        // The last part of the id is the method name: `-m` matches it as a pattern.
        let method = case.rsplit('.').next().unwrap_or(case);
        let alone = suite_of(case, suites).map_or(suites.to_vec(), |s| vec![s]);
        let again_plain = run_suite(&dir, &alone, &format!("plain-again-{i}"), None, Some(method));
        let again_shim =
            run_suite(&dir, &alone, &format!("shim-again-{i}"), Some(shim_settings), Some(method));
        let passed = |r: &SuiteRun| r.cases.get(case).is_some_and(|s| s == "ok" || s == "skipped");
        if passed(&again_plain) && !passed(&again_shim) {
            confirmed.push(format!(
                "{case}: {state} under the shim in the suite, and again alone:\n{}",
                again_shim.describe()
            ));
        } else {
            eprintln!(
                "{name}: {case} was {state} under the shim in the whole suite but not when run again alone (plain again: {:?}, shim again: {:?}); taken as load",
                again_plain.cases.get(case),
                again_shim.cases.get(case)
            );
        }
    }
    assert!(
        confirmed.is_empty(),
        "{} case(s) of {name} pass plain and fail under the shim:\n{}\n\nwhole-suite run under the shim:\n{}",
        confirmed.len(),
        confirmed.join("\n\n"),
        shim.describe()
    );
    let passed = plain.cases.values().filter(|s| *s == "ok").count();
    eprintln!(
        "{name}: {passed} cases passed plain, {} of them under the shim on the first run",
        passed - lost.len()
    );
    if shim_settings.python_frames {
        match python_frames_in(&reports_of(&dir, "shim"), suites) {
            Ok(per_suite) => eprintln!("{name}: Python frame lines per suite file: {per_suite:?}"),
            Err(why) => panic!(
                "{name}: the shim read no Python frames: {why}\n{}\nreports:\n{}",
                shim.describe(),
                list_dir(&reports_of(&dir, "shim"))
            ),
        }
    }
}

#[test]
fn cpython_suite_test_subprocess() {
    compare_suites("test_subprocess", &["test_subprocess"], EVERYTHING_SHIM);
}

#[test]
fn cpython_suite_test_threading() {
    compare_suite("test_threading");
}

#[test]
fn cpython_suite_test_os() {
    compare_suites("test_os", &["test_os"], EVERYTHING_SHIM);
}

#[test]
fn cpython_suite_test_posix_and_test_pty() {
    compare_suites("test_posix+test_pty", &["test_posix", "test_pty"], EVERYTHING_SHIM);
}

#[test]
fn cpython_suite_test_signal() {
    compare_suite("test_signal");
}

#[test]
fn cpython_suite_test_mmap() {
    compare_suite("test_mmap");
}

/// CPython's suites of the states the Python frame reader meets, in one run, every allocation
/// sampled (see [`FRAMES_SHIM`]): profiling and tracing hooks (`test_sys_setprofile`),
/// generators suspended, resumed, closed and thrown into (`test_generators`), coroutines and
/// async generators (`test_coroutines`), collections with callbacks and finalizers that run
/// Python code while frames are torn down (`test_gc`), frame introspection, recursion limits
/// and other threads' frames (`sys._getframe`, `setrecursionlimit`, `sys._current_frames`:
/// `test_sys`), and frames unwound by exceptions and formatted into tracebacks
/// (`test_traceback`).
#[test]
fn cpython_suite_with_python_frames() {
    compare_suites(
        "python-frames",
        &[
            "test_sys_setprofile",
            "test_generators",
            "test_coroutines",
            "test_gc",
            "test_sys",
            "test_traceback",
        ],
        FRAMES_SHIM,
    );
}
