//! CPython's own test suites for the parts of the system a profiler can disturb, run under the
//! shim beside the plain run: `test_subprocess` (descriptors passed to children, `fork` and
//! `exec`, `vfork`), `test_threading` (thread start and exit, `fork` from threads, shutdown),
//! `test_os` (descriptors, `fork`, environment), `test_signal` (handlers, waits interrupted by
//! signals, `sigwait`) and `test_mmap`.
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
//! Skipped (with a `SKIPPED:` line) where the interpreter lacks its test package (Debian's
//! `python3` without `libpython3-testsuite`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use preload_tests::{Outcome, Run, TestDir, require_tool};

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

/// Whether the `python3` on `PATH` has CPython's test package.
fn has_test_package() -> bool {
    let Some(py) = require_tool("python3") else { return false };
    let o = Run::new(&py).args(&["-c", "import test.support, test.libregrtest"]).run();
    if !o.success() {
        eprintln!("SKIPPED: this python3 has no test package (`import test.support` failed)");
    }
    o.success()
}

/// One run of `suite` (optionally only the cases matching `only`), plain or under the shim.
fn run_suite(dir: &TestDir, suite: &str, tag: &str, shim: bool, only: Option<&str>) -> SuiteRun {
    let xml = dir.join(&format!("{suite}-{tag}.xml"));
    let work = dir.join(&format!("work-{tag}"));
    std::fs::create_dir_all(&work).expect("work dir");
    let mut run = Run::new("python3")
        .args(&["-m", "test", suite, "-v", "--timeout", CASE_TIMEOUT_SECS, "--junit-xml"])
        .arg(&xml)
        .cwd(&work)
        .timeout(SUITE_TIMEOUT);
    if let Some(case) = only {
        run = run.args(&["-m", case]);
    }
    if shim {
        run = run.with_preload().envs(&[
            ("YING_CHECK_INTERVAL_SECS", "1"),
            ("YING_REPORTING_PATH", &dir.join(&format!("reports-{tag}")).display().to_string()),
        ]);
    }
    let outcome = run.run();
    let cases = read_cases(&xml);
    SuiteRun {
        command: format!("{}{}", if shim { "[shim] " } else { "" }, run.command_line()),
        outcome,
        cases,
    }
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
    if !has_test_package() {
        return;
    }
    let dir = TestDir::new(&format!("cpython-{suite}"));
    // Both runs at once: the suites mostly wait (on children, timers, signals), and each run
    // has its own working directory, results file and reporting directory.
    let (plain, shim) = std::thread::scope(|s| {
        let plain = s.spawn(|| run_suite(&dir, suite, "plain", false, None));
        let shim = run_suite(&dir, suite, "shim", true, None);
        (plain.join().expect("the plain run's thread"), shim)
    });
    assert!(
        !plain.cases.is_empty(),
        "the plain run of {suite} reported no test case:\n{}",
        plain.describe()
    );
    assert!(
        shim.outcome.code().is_some(),
        "{suite} under the shim did not end by itself (killed or timed out):\n{}",
        shim.describe()
    );
    assert!(
        !shim.cases.is_empty(),
        "{suite} under the shim wrote no results (a case hung or the interpreter died):\n{}",
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
        let again_plain = run_suite(&dir, suite, &format!("plain-again-{i}"), false, Some(method));
        let again_shim = run_suite(&dir, suite, &format!("shim-again-{i}"), true, Some(method));
        let passed = |r: &SuiteRun| r.cases.get(case).is_some_and(|s| s == "ok" || s == "skipped");
        if passed(&again_plain) && !passed(&again_shim) {
            confirmed.push(format!(
                "{case}: {state} under the shim in the suite, and again alone:\n{}",
                again_shim.describe()
            ));
        } else {
            eprintln!(
                "{suite}: {case} was {state} under the shim in the whole suite but not when run again alone (plain again: {:?}, shim again: {:?}); taken as load",
                again_plain.cases.get(case),
                again_shim.cases.get(case)
            );
        }
    }
    assert!(
        confirmed.is_empty(),
        "{} case(s) of {suite} pass plain and fail under the shim:\n{}\n\nwhole-suite run under the shim:\n{}",
        confirmed.len(),
        confirmed.join("\n\n"),
        shim.describe()
    );
    let passed = plain.cases.values().filter(|s| *s == "ok").count();
    eprintln!(
        "{suite}: {passed} cases passed plain, {} of them under the shim on the first run",
        passed - lost.len()
    );
}

#[test]
fn cpython_suite_test_subprocess() {
    compare_suite("test_subprocess");
}

#[test]
fn cpython_suite_test_threading() {
    compare_suite("test_threading");
}

#[test]
fn cpython_suite_test_os() {
    compare_suite("test_os");
}

#[test]
fn cpython_suite_test_signal() {
    compare_suite("test_signal");
}

#[test]
fn cpython_suite_test_mmap() {
    compare_suite("test_mmap");
}
