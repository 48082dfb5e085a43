//! A reporting directory every user can write (mode 1777) with files another user planted: a
//! forged heap at death, a forged set and a `dump` control file, all owned by `nobody`. A root
//! program under the shim writing there takes none of them for its own (the planted `dump` asks
//! for no set; root's own `dump` does, the control), and `ying view` and `ying report` leave
//! the planted files out with one line each instead of showing a death that never happened.
//! Needs root (to own files as another user); skips with one line without it.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use preload_tests::{Run, TestDir, preload_lib, ying_bin};

const NOBODY: u32 = 65534;

/// Creates `path` with `bytes`, owned by `nobody`.
fn plant(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// The names in `dir` that end with `suffix`.
fn named(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// A program that waits to be killed, killed on drop (a failing assertion must not leave it
/// running).
struct Killed(std::process::Child);

impl Killed {
    fn id(&self) -> u32 {
        self.0.id()
    }

    /// Kills and reaps it.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `heap_at_death.c` in `pause` mode under the shim writing into `reports`, after it printed
/// `done`.
fn start(exe: &Path, reports: &Path, vars: &[(&str, &str)]) -> Killed {
    let mut c = Command::new(exe)
        .args(["pause", "10", "8", "49152", "2000"])
        .env("LD_PRELOAD", preload_lib())
        .env("YING_REPORTING_PATH", reports)
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    let c = Killed(c);
    let done = BufReader::new(out).lines().map_while(Result::ok).any(|l| l == "done");
    assert!(done, "the program did not grow");
    c
}

#[test]
fn files_planted_by_another_user_are_not_taken_for_the_process_s() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root (to own files as another user)");
        return;
    }
    let dir = TestDir::new("shared-dir");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.join("shared");
    std::fs::create_dir(&reports).unwrap();
    std::fs::set_permissions(&reports, std::fs::Permissions::from_mode(0o1777)).unwrap();

    // A real heap at death (root's), and the same bytes planted by `nobody` under another pid.
    let mut a = start(&exe, &reports, &[]);
    let start_wait = Instant::now();
    let real = loop {
        if let Some(n) = named(&reports, ".live").into_iter().next() {
            break reports.join(n);
        }
        assert!(start_wait.elapsed() < Duration::from_secs(10), "no live file");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300));
    a.kill();
    let forged = reports.join("ying.heap_at_death.4194001-0123abcd.live");
    plant(&forged, &std::fs::read(&real).unwrap());
    // A forged set: a manifest and a profile of a process that never ran.
    let stem = "ying.heap_at_death.4194002-0123abcd.0.20261207T120000Z";
    plant(&reports.join(format!("{stem}.pb.gz")), b"\x1f\x8bnot really");
    plant(&reports.join(format!("{stem}.json")), b"{}");

    // A running process sees a `dump` planted by nobody and writes nothing; root's `dump` makes
    // it write a set (the control: the control file works).
    let vars = [("YING_CHECK_INTERVAL_SECS", "3600"), ("YING_REPORT_AT_EXIT", "false")];
    let mut b = start(&exe, &reports, &vars);
    let pid = b.id();
    let sets_of_b =
        || named(&reports, ".json").into_iter().filter(|n| n.contains(&format!(".{pid}-"))).count();
    std::thread::sleep(Duration::from_millis(300));
    plant(&reports.join("dump"), b"");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(sets_of_b(), 0, "a dump planted by nobody made a set");
    std::fs::remove_file(reports.join("dump")).unwrap();
    std::fs::write(reports.join("dump"), b"").unwrap();
    let asked = Instant::now();
    while sets_of_b() == 0 {
        assert!(asked.elapsed() < Duration::from_secs(10), "root's dump made no set");
        std::thread::sleep(Duration::from_millis(50));
    }
    b.kill();

    // `ying report` of the forged file: one line, nothing written.
    let f = forged.to_str().unwrap();
    let o = Run::new(ying_bin()).args(&["report", f]).run();
    assert!(!o.success(), "{}", o.describe());
    let err = o.stderr_str();
    assert_eq!(err.lines().count(), 1, "{}", o.describe());
    assert!(err.contains("owned by user 65534") && err.contains(f), "{err}");
    // `ying view`: the real heap at death shown, the forged one and the forged set left out,
    // one line each.
    let o = Run::new(ying_bin()).args(&["view", reports.to_str().unwrap()]).run();
    o.assert_success("ying view");
    let err = o.stderr_str();
    let planted: Vec<&str> = err.lines().filter(|l| l.contains("owned by user 65534")).collect();
    // The forged live file, the forged set's profile (the view) and its manifest (the leak
    // test).
    assert_eq!(planted.len(), 3, "one line for each planted file read:\n{err}");
    let page = std::fs::read_to_string(reports.join("ying.view.html")).unwrap();
    assert!(page.contains(&a.id().to_string()), "the real death is not on the page");
    assert!(!page.contains("4194001") && !page.contains("4194002"), "a forged process is shown");
}
