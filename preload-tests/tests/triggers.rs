//! Dump triggers under the shim (`programs/triggers.c`): a signal (`YING_DUMP_SIGNAL`), the
//! control files `<reporting path>/dump.<pid>` and `dump`, the near-limit dump
//! (`YING_MEMORY_LIMIT_PCT` against `YING_MEMORY_LIMIT_BYTES`, and against a real cgroup where
//! the machine lets the test create one), and new-peak dumps (`YING_PEAK_DUMP_PCT`).
//!
//! Each program runs without the shim first (the control: same output, same exit) and every
//! wait is bounded, so a hang is a failure. The runs with the shim write no periodic and no
//! exit report (`YING_CHECK_INTERVAL_SECS=3600`, `YING_REPORT_AT_EXIT=false`) unless a test says
//! otherwise, so every set in the reporting directory is a trigger's.
//!
//! "Within a second": the report thread looks at the triggers every 100 ms; the tests check
//! that the set's snapshot (the `time:` line of its text report, one-second resolution) was
//! taken at most one second after the trigger (rounded to the second), and wait up to 30 s for
//! the files themselves, which a loaded machine may take a while to write.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use preload_tests::{ReportSet, TestDir, list_dir, preload_lib, report_sets};

/// Longest wait for anything: a line of the program, a report set, the program's exit.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The settings every run with the shim has: only triggers write sets.
const QUIET: &[(&str, &str)] =
    &[("YING_CHECK_INTERVAL_SECS", "3600"), ("YING_REPORT_AT_EXIT", "false")];

/// A program running in the background, its stdout read line by line.
struct Live {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

/// Starts `exe args` with `vars` (inherited `YING_*` and `LD_PRELOAD` removed), with the shim
/// if `preload`.
fn start(exe: &Path, args: &[String], vars: &[(String, String)], preload: bool) -> Live {
    start_cmd(Command::new(exe), args, vars, preload)
}

fn start_cmd(mut cmd: Command, args: &[String], vars: &[(String, String)], preload: bool) -> Live {
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("YING_") || k == "LD_PRELOAD" {
            cmd.env_remove(&k);
        }
    }
    // Exit reports in full, as the tests read them (see the harness's `Run::vars`).
    cmd.env("YING_SHORT_PROCESS_SECS", "0");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    if preload {
        cmd.env("LD_PRELOAD", preload_lib());
    }
    let mut child = cmd.spawn().expect("spawn the program");
    let out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Live { child, lines, seen: Vec::new(), stderr }
}

/// What a finished program did.
struct Done {
    status: std::process::ExitStatus,
    stdout: Vec<String>,
    stderr: String,
}

impl Live {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most [`TIMEOUT`]) for the line `want`; kills the program and panics if it
    /// does not come.
    fn wait_line(&mut self, want: &str) {
        let end = Instant::now() + TIMEOUT;
        while Instant::now() < end {
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => {
                    let hit = l == want;
                    self.seen.push(l);
                    if hit {
                        return;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("the program did not print {want:?} in time (printed {:?})", self.seen);
    }

    /// Waits (at most [`TIMEOUT`]) for the program to exit; kills it and panics on a hang.
    fn finish(mut self) -> Done {
        let end = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the program did not exit in time (a hang); printed {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = self.stderr.join().unwrap_or_default();
        let mut stdout = self.seen;
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(2)) {
            stdout.push(l);
        }
        Done { status, stdout, stderr }
    }
}

/// Sends `sig` (a `kill` name such as `USR2`) to `pid`.
fn send(sig: &str, pid: u32) {
    let st = Command::new("sh")
        .args(["-c", &format!("kill -{sig} {pid}")])
        .env_remove("LD_PRELOAD")
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{sig} {pid} failed");
}

/// The complete sets of `pid` in `dir` (the manifest is written last).
fn sets_of(dir: &Path, pid: u32) -> Vec<ReportSet> {
    report_sets(dir).into_iter().filter(|s| s.pid == pid && s.has("json")).collect()
}

/// Waits (at most [`TIMEOUT`]) until `pid` has `n` complete sets in `dir`.
fn wait_sets(dir: &Path, pid: u32, n: usize) -> Vec<ReportSet> {
    let end = Instant::now() + TIMEOUT;
    loop {
        let s = sets_of(dir, pid);
        if s.len() >= n || Instant::now() >= end {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why the set was written (the manifest's `reason`), None for the exit report.
fn reason(set: &ReportSet) -> Option<String> {
    set.manifest().reason
}

/// Seconds since the epoch of a `taken_at` value such as `2026-12-02T11:30:11Z`.
fn epoch_secs(t: &str) -> u64 {
    let b = t.as_bytes();
    let num = |r: std::ops::Range<usize>| -> i64 { t[r].parse().expect("time field") };
    assert!(b.len() == 20 && b[19] == b'Z', "unexpected time {t:?}");
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + num(11..13) * 3600 + num(14..16) * 60 + num(17..19)) as u64
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Asserts that `set`'s snapshot was taken at most a second after `asked` (epoch seconds).
fn assert_prompt(set: &ReportSet, asked: u64) {
    let taken = epoch_secs(&set.manifest().taken_at);
    assert!(
        taken <= asked + 1,
        "the set {} was taken at {taken}, more than a second after the trigger at {asked}",
        set.stem
    );
}

fn args(stop: &Path, cmds: &[&str]) -> Vec<String> {
    std::iter::once(stop.display().to_string()).chain(cmds.iter().map(|s| s.to_string())).collect()
}

fn vars(reports: &Path, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v = vec![("YING_REPORTING_PATH".to_string(), reports.display().to_string())];
    for (k, val) in QUIET.iter().chain(extra) {
        v.retain(|(n, _)| n != k);
        v.push((k.to_string(), val.to_string()));
    }
    v
}

/// Runs the program without the shim (the control): waits for `ready` (and `grown` if the
/// commands print it), creates the stop file, and returns its output.
fn control(exe: &Path, dir: &TestDir, cmds: &[&str]) -> Done {
    let stop = dir.join("stop-control");
    let mut live = start(exe, &args(&stop, cmds), &[], false);
    live.wait_line("ready");
    if cmds.contains(&"g") {
        live.wait_line("grown");
    }
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "control run failed: {:?}\n{}", d.status, d.stderr);
    d
}

/// The `ying:` lines of a run's stderr.
fn ying_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("ying:")).collect()
}

const WAITING: &[&str] = &["a8", "s50", "r", "w"];

#[test]
fn a_signal_writes_one_report_set_within_a_second() {
    let dir = TestDir::new("trigger-signal");
    let exe = dir.compile_c("triggers.c", &[]);
    let plain = control(&exe, &dir, WAITING);
    let reports = dir.reports("signal");
    let stop = dir.join("stop");
    let v = vars(&reports, &[("YING_DUMP_SIGNAL", "SIGUSR2")]);
    let mut live = start(&exe, &args(&stop, WAITING), &v, true);
    live.wait_line("ready");
    let pid = live.pid();
    let asked = now_secs();
    send("USR2", pid);
    let sets = wait_sets(&reports, pid, 1);
    // Anything more than one set would have been written by now as well.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout, "stdout differs from the control run");
    assert_eq!(ying_lines(&d.stderr), Vec::<&str>::new());
    assert_eq!(sets.len(), 1, "no set after the signal:\n{}", list_dir(&reports));
    let all = sets_of(&reports, pid);
    assert_eq!(all.len(), 1, "one signal, one set:\n{}", list_dir(&reports));
    assert_eq!(reason(&all[0]).as_deref(), Some("signal SIGUSR2"));
    assert_prompt(&all[0], asked);
}

#[test]
fn control_files_write_one_report_set_each_within_a_second() {
    let dir = TestDir::new("trigger-file");
    let exe = dir.compile_c("triggers.c", &[]);
    let plain = control(&exe, &dir, WAITING);
    let reports = dir.reports("file");
    let stop = dir.join("stop");
    let mut live = start(&exe, &args(&stop, WAITING), &vars(&reports, &[]), true);
    live.wait_line("ready");
    let pid = live.pid();
    // A `dump` left from before the process started is ignored.
    let own = reports.join(format!("dump.{pid}"));
    let asked = now_secs();
    std::fs::write(&own, b"").unwrap();
    let first = wait_sets(&reports, pid, 1);
    assert_eq!(first.len(), 1, "no set after touching {}:\n{}", own.display(), list_dir(&reports));
    assert_prompt(&first[0], asked);
    assert!(!own.exists(), "{} was not removed after its set", own.display());
    let asked = now_secs();
    std::fs::write(reports.join("dump"), b"").unwrap();
    let second = wait_sets(&reports, pid, 2);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout, "stdout differs from the control run");
    assert_eq!(ying_lines(&d.stderr), Vec::<&str>::new());
    assert_eq!(second.len(), 2, "no set after touching dump:\n{}", list_dir(&reports));
    let all = sets_of(&reports, pid);
    assert_eq!(all.len(), 2, "two touches, two sets:\n{}", list_dir(&reports));
    let reasons: Vec<String> = all.iter().map(|s| reason(s).unwrap()).collect();
    assert!(reasons[0].ends_with(&format!("/dump.{pid}")), "{reasons:?}");
    assert!(reasons[1].starts_with("control file ") && reasons[1].ends_with("/dump"));
    assert_prompt(&all[1], asked);
    assert!(reports.join("dump").exists(), "the shared `dump` is left for other processes");
}

#[test]
fn a_handler_the_program_installs_later_wins() {
    let dir = TestDir::new("trigger-host-handler");
    let exe = dir.compile_c("triggers.c", &[]);
    let cmds = &["a8", "s50", "r", "h", "s300", "w", "c"];
    // The control: the program's handler counts the signal.
    let stop = dir.join("stop-control");
    let mut live = start(&exe, &args(&stop, cmds), &[], false);
    live.wait_line("handler installed");
    send("USR2", live.pid());
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(&stop, b"").unwrap();
    let plain = live.finish();
    assert!(plain.status.success(), "{:?}", plain.status);
    assert!(plain.stdout.contains(&"host handler ran at least once".to_string()));
    // With the shim and YING_DUMP_SIGNAL=SIGUSR2: the program's handler still gets it.
    let reports = dir.reports("host");
    let stop = dir.join("stop");
    let v = vars(&reports, &[("YING_DUMP_SIGNAL", "USR2")]);
    let mut live = start(&exe, &args(&stop, cmds), &v, true);
    live.wait_line("handler installed");
    let pid = live.pid();
    send("USR2", pid);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout, "the program's handler must behave as without the shim");
    let lines = ying_lines(&d.stderr);
    assert_eq!(lines.len(), 1, "one line saying the program's handler wins: {lines:?}");
    assert!(lines[0].contains("installed its own handler for SIGUSR2"), "{lines:?}");
    assert_eq!(sets_of(&reports, pid).len(), 0, "no set:\n{}", list_dir(&reports));
}

/// A program that never reaches a safe point has no report thread: the signal's handler is
/// installed at start (so the signal does not kill it), but nothing serves the request; the
/// program runs on, and its exit report is the only set.
#[test]
fn without_a_safe_point_the_signal_is_held_and_the_exit_report_is_the_only_set() {
    let dir = TestDir::new("trigger-no-safe-point");
    let exe = dir.compile_c("triggers.c", &[]);
    let cmds = &["a8", "r", "W"];
    let plain = control(&exe, &dir, cmds);
    let reports = dir.reports("nosafe");
    let stop = dir.join("stop");
    let v = vars(&reports, &[("YING_DUMP_SIGNAL", "SIGUSR2"), ("YING_REPORT_AT_EXIT", "true")]);
    let mut live = start(&exe, &args(&stop, cmds), &v, true);
    live.wait_line("ready");
    let pid = live.pid();
    send("USR2", pid);
    std::fs::write(reports.join(format!("dump.{pid}")), b"").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(sets_of(&reports, pid).len(), 0, "no report thread, no set yet");
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout);
    let all = sets_of(&reports, pid);
    assert_eq!(all.len(), 1, "the exit report only:\n{}", list_dir(&reports));
    assert_eq!(reason(&all[0]), None, "the exit report names no trigger");
}

/// The commands of a program that grows to about 232 MiB in 8 MiB steps, falls back to about
/// 72 MiB and grows to 232 MiB again, pausing at each step, then prints `grown` and waits.
fn grow_shrink_grow() -> Vec<String> {
    let mut c: Vec<String> = vec!["a16".into(), "s50".into(), "r".into()];
    for _ in 0..27 {
        c.extend(["a8".into(), "s100".into()]);
    }
    c.push("s500".into());
    for _ in 0..20 {
        c.extend(["f".into(), "s20".into()]);
    }
    c.push("s500".into());
    for _ in 0..20 {
        c.extend(["a8".into(), "s100".into()]);
    }
    c.extend(["s500".into(), "g".into(), "w".into()]);
    c
}

/// The figure after `word ` in a reason, e.g. `rss 123 bytes`.
fn reason_figure(reason: &str, word: &str) -> u64 {
    let rest = reason.split(&format!("{word} ")).nth(1).expect("figure in the reason");
    rest.split(' ').next().unwrap().parse().expect("a number")
}

const MIB: u64 = 1 << 20;

/// The fake limit (`YING_MEMORY_LIMIT_BYTES=200MiB`, threshold 90 %, i.e. 180 MiB of resident
/// set): the program passes 180 MiB, goes on to about 232 MiB (still one set), falls back far
/// below, and passes it again (re-armed: a second set). This test needs no cgroup; the next one
/// uses a real cgroup where the machine lets the test create one.
#[test]
fn passing_ninety_percent_of_the_fake_limit_writes_one_set_per_crossing() {
    let dir = TestDir::new("trigger-fake-limit");
    let exe = dir.compile_c("triggers.c", &[]);
    let cmds = grow_shrink_grow();
    let refs: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let plain = control(&exe, &dir, &refs);
    let reports = dir.reports("limit");
    let stop = dir.join("stop");
    let v = vars(&reports, &[("YING_MEMORY_LIMIT_BYTES", "200MiB")]);
    let mut live = start(&exe, &args(&stop, &refs), &v, true);
    live.wait_line("ready");
    let pid = live.pid();
    live.wait_line("grown");
    wait_sets(&reports, pid, 2);
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout, "stdout differs from the control run");
    assert_eq!(ying_lines(&d.stderr), Vec::<&str>::new());
    let all = sets_of(&reports, pid);
    assert_eq!(all.len(), 2, "one set per crossing of 180 MiB:\n{}", list_dir(&reports));
    for s in &all {
        let r = reason(s).expect("a reason line");
        assert!(r.starts_with("near memory limit: "), "{r}");
        let rss = reason_figure(&r, "rss");
        assert!((180 * MIB..200 * MIB).contains(&rss), "crossed at {rss} bytes: {r}");
        assert!(r.contains("limit 209715200 bytes"), "{r}");
    }
}

/// The memory cgroup the test process is in, and the file that limits it, when the machine
/// lets this process create a child cgroup there (root, a writable cgroupfs): cgroup v2's
/// `memory.max` or v1's `memory.limit_in_bytes`.
fn cgroup_parent() -> Option<(PathBuf, &'static str)> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in cg.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctrl, path) = (it.next()?, it.next()?, it.next()?);
        if ctrl.split(',').any(|c| c == "memory") {
            let dir = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            if dir.join("memory.limit_in_bytes").exists() {
                return Some((dir, "memory.limit_in_bytes"));
            }
        }
    }
    for line in cg.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let controllers = std::fs::read_to_string(dir.join("cgroup.subtree_control")).ok()?;
            if controllers.split_whitespace().any(|c| c == "memory") {
                return Some((dir, "memory.max"));
            }
        }
    }
    None
}

/// Runs `exe args` inside a new child cgroup of `parent` limited to `limit` bytes (the shell
/// moves itself there, then becomes the program), waits for its end and removes the cgroup.
/// `None` if the cgroup cannot be created or limited.
fn run_in_cgroup(
    (parent, limit_file): &(PathBuf, &'static str),
    name: &str,
    limit: u64,
    exe: &Path,
    args: &[String],
    vars: &[(String, String)],
    preload: bool,
) -> Option<(Done, u32)> {
    let cg = parent.join(format!("ying-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir(&cg);
    if let Err(e) = std::fs::create_dir(&cg) {
        eprintln!("cannot create {}: {e}", cg.display());
        return None;
    }
    if let Err(e) = std::fs::write(cg.join(limit_file), limit.to_string()) {
        eprintln!("cannot limit {}: {e}", cg.display());
        let _ = std::fs::remove_dir(&cg);
        return None;
    }
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(r#"echo $$ > "$0" && exec "$@""#).arg(cg.join("cgroup.procs")).arg(exe);
    let mut live = start_cmd(sh, args, vars, preload);
    let pid = live.pid();
    live.wait_line("ready");
    let d = live.finish();
    // The cgroup can be removed once its last process is gone (shortly after the kill).
    for _ in 0..100 {
        if std::fs::remove_dir(&cg).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((d, pid))
}

/// A real cgroup with a 160 MiB limit: the program grows in 4 MiB steps until the kernel kills
/// it (as it does without the shim, the control); before that it writes exactly one
/// near-limit set. Where no cgroup can be created (not root, no writable memory controller) or
/// the limit kills nothing, the test says so on stderr and checks nothing more: the fake-limit
/// test above covers the trigger then.
#[test]
fn in_a_real_cgroup_one_near_limit_set_before_the_kill() {
    let Some(parent) = cgroup_parent() else {
        eprintln!("skipped: no memory cgroup this process can create a child in");
        return;
    };
    let dir = TestDir::new("trigger-cgroup");
    let exe = dir.compile_c("triggers.c", &[]);
    let mut cmds: Vec<String> = vec![dir.join("unused-stop").display().to_string()];
    cmds.extend(["s50".into(), "r".into()]);
    for _ in 0..100 {
        cmds.extend(["a4".into(), "s150".into()]);
    }
    cmds.push("g".into());
    let limit = 160 * MIB;
    let Some((plain, _)) = run_in_cgroup(&parent, "control", limit, &exe, &cmds, &[], false) else {
        eprintln!("skipped: cannot create a memory cgroup here");
        return;
    };
    use std::os::unix::process::ExitStatusExt;
    if plain.status.signal() != Some(9) {
        eprintln!("skipped: the cgroup's limit did not kill the program ({:?})", plain.status);
        return;
    }
    let reports = dir.reports("cgroup");
    let v = vars(&reports, &[]);
    let (d, pid) = run_in_cgroup(&parent, "shim", limit, &exe, &cmds, &v, true)
        .expect("the cgroup was created for the control run");
    assert_eq!(d.status.signal(), Some(9), "killed by the limit as without the shim");
    assert_eq!(d.stdout, plain.stdout);
    let all = sets_of(&reports, pid);
    assert_eq!(all.len(), 1, "one near-limit set before the kill:\n{}", list_dir(&reports));
    let r = reason(&all[0]).expect("a reason line");
    assert!(r.starts_with("near memory limit: "), "{r}");
    assert!(r.contains(&format!("limit {limit} bytes")), "the cgroup's limit: {r}");
    let rss = reason_figure(&r, "rss");
    assert!((144 * MIB..160 * MIB).contains(&rss), "crossed at {rss} bytes: {r}");
}

/// `YING_PEAK_DUMP_PCT=100`: the program grows from about 1 MiB in 10 MiB steps to about
/// 101 MiB. A set is due each time the retained total is more than twice the last high dumped
/// (at first, the total at the report thread's first tick): at about 11, 31 and 71 MiB. The
/// test checks the rule on the figures the reasons name, so that a slow tick that saw a level
/// late still passes if the rule held; and that no set was missed at the end.
#[test]
fn new_peak_dumps_fire_each_time_the_total_doubles() {
    let dir = TestDir::new("trigger-peak");
    let exe = dir.compile_c("triggers.c", &[]);
    let mut cmds: Vec<&str> = vec!["a1", "s300", "r"];
    for _ in 0..10 {
        cmds.extend(["a10", "s500"]);
    }
    cmds.extend(["g", "w"]);
    let plain = control(&exe, &dir, &cmds);
    let reports = dir.reports("peak");
    let stop = dir.join("stop");
    let v = vars(&reports, &[("YING_PEAK_DUMP_PCT", "100"), ("YING_MEMORY_LIMIT_PCT", "0")]);
    let mut live = start(&exe, &args(&stop, &cmds), &v, true);
    live.wait_line("ready");
    let pid = live.pid();
    live.wait_line("grown");
    std::fs::write(&stop, b"").unwrap();
    let d = live.finish();
    assert!(d.status.success(), "{:?}\n{}", d.status, d.stderr);
    assert_eq!(d.stdout, plain.stdout);
    assert_eq!(ying_lines(&d.stderr), Vec::<&str>::new());
    let all = sets_of(&reports, pid);
    let figures: Vec<(u64, u64)> = all
        .iter()
        .map(|s| {
            let r = reason(s).expect("a reason line");
            assert!(r.starts_with("new peak: "), "{r}");
            (reason_figure(&r, "retained"), reason_figure(&r, "high"))
        })
        .collect();
    assert!(!figures.is_empty(), "no new-peak set:\n{}", list_dir(&reports));
    for (i, &(now, last)) in figures.iter().enumerate() {
        assert!(now > 2 * last, "set {i} at {now} bytes is not twice {last}: {figures:?}");
        if i > 0 {
            assert_eq!(last, figures[i - 1].0, "the high is the last dumped: {figures:?}");
        }
    }
    let (top, _) = *figures.last().unwrap();
    assert!(top > 50 * MIB, "101 MiB is more than twice {top}: a set was missed: {figures:?}");
    assert!(figures.len() <= 4, "{figures:?}");
}

/// Bad trigger settings: one `ying: warning:` line naming the variable each, and the program
/// runs as without the shim.
#[test]
fn bad_trigger_settings_warn_once_and_harm_nothing() {
    let dir = TestDir::new("trigger-bad");
    let exe = dir.compile_c("triggers.c", &[]);
    let run = preload_tests::Run::new(&exe).args(&["/nonexistent", "a1", "s20"]);
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("YING_DUMP_SIGNAL", "KILL")],
            "YING_DUMP_SIGNAL=KILL is invalid (SIGKILL cannot be used)",
        ),
        (&[("YING_DUMP_SIGNAL", "USR9")], "YING_DUMP_SIGNAL=USR9 is invalid"),
        (&[("YING_MEMORY_LIMIT_PCT", "150")], "YING_MEMORY_LIMIT_PCT=150 is invalid"),
        (&[("YING_PEAK_DUMP_PCT", "-1")], "YING_PEAK_DUMP_PCT=-1 is invalid"),
        (&[("YING_MEMORY_LIMIT_BYTES", "lots")], "YING_MEMORY_LIMIT_BYTES=lots is invalid"),
        (
            &[("YING_DUMP_SIGNAL", "USR2"), ("YING_CHECK_INTERVAL_SECS", "0")],
            "YING_DUMP_SIGNAL=SIGUSR2 needs the report thread",
        ),
        (
            &[
                ("YING_DUMP_SIGNAL", "USR2"),
                ("YING_CHECK_INTERVAL_SECS", "0"),
                ("YING_REPORT_AT_EXIT", "false"),
            ],
            "YING_DUMP_SIGNAL needs the report thread",
        ),
    ];
    for (i, (vars, want)) in cases.iter().enumerate() {
        let reports = dir.reports(&format!("bad-{i}"));
        let c = preload_tests::compare(&run, vars, &reports);
        let lines = c.with.ying_lines();
        c.check(
            lines.len() == 1 && lines[0].starts_with("ying: warning: ") && lines[0].contains(want),
            format!("{vars:?}: expected one warning containing {want:?}, got {lines:#?}"),
        );
    }
}
