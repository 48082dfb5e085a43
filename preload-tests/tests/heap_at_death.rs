//! The heap at death: a process that dies without its exit report (killed by `SIGKILL` at any
//! moment, by the OOM killer under a cgroup limit, by a crash, `abort`, `_exit` or an
//! unhandled `SIGTERM`) leaves its live file, `ying.<exe>.<pid>.live`, from which a report set
//! naming what held the memory is written afterwards, outside the process
//! (`programs/heap_at_death.c`; `ying_profiler::report::live`, as `ying report` does it).
//!
//! Each death is compared with the plain run (same output, same end), and every wait has a
//! timeout.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use preload_tests::{Run, TestDir, preload_lib, report_sets, workspace_root, ying_bin};
use ying_profiler::report::live::LiveProfile;

/// The block size the tests grow by: below glibc's mmap threshold, so one heap chunk each.
const BLOCK: u64 = 48 * 1024;
/// Its chunk: the request plus the 8-byte header, rounded up to 16 (mirrors what the program
/// prints, `malloc_usable_size + 8`).
const CHUNK: u64 = BLOCK + 16;

/// A program under the shim whose stdout is read as it comes.
struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    /// Its stderr, for a test that fails.
    errors: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(exe: &Path, args: &[&str], reports: &Path, vars: &[(&str, &str)]) -> Self {
        Self::spawn(exe, args, reports, vars, true)
    }

    /// The tests' settings: the live file every 50 ms, exit reports in full (see the
    /// harness's `Run::vars`).
    const SETTINGS: [(&str, &str); 3] = [
        ("YING_LIVE_INTERVAL_MS", "50"),
        ("YING_LIVE_FILE", "on"),
        ("YING_SHORT_PROCESS_SECS", "0"),
    ];

    /// [`Running::start`], under the shim when `preload` (else the program profiles itself:
    /// the Rust front end).
    fn spawn(
        exe: &Path,
        args: &[&str],
        reports: &Path,
        vars: &[(&str, &str)],
        preload: bool,
    ) -> Self {
        Self::spawn_with(exe, args, reports, &[Self::SETTINGS.as_slice(), vars].concat(), preload)
    }

    /// The program under the shim (when `preload`) with nothing set but the reporting path
    /// and `vars`.
    fn spawn_with(
        exe: &Path,
        args: &[&str],
        reports: &Path,
        vars: &[(&str, &str)],
        preload: bool,
    ) -> Self {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("YING_") || k == "LD_PRELOAD" {
                cmd.env_remove(k);
            }
        }
        if preload {
            cmd.env("LD_PRELOAD", preload_lib());
        }
        cmd.env("YING_REPORTING_PATH", reports)
            .envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push((Instant::now(), line));
            }
        });
        let err = child.stderr.take().unwrap();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let e = Arc::clone(&errors);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                e.lock().unwrap().push(line);
            }
        });
        Self { child, lines, errors }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most 20 s) for a line starting with `prefix`.
    fn wait_line(&self, prefix: &str) -> String {
        let start = Instant::now();
        loop {
            if let Some((_, l)) =
                self.lines.lock().unwrap().iter().find(|(_, l)| l.starts_with(prefix))
            {
                return l.clone();
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no line {prefix:?} in 20 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The last "held N" printed before `at`.
    fn held_before(&self, at: Instant) -> u64 {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, l)| *t <= at && l.starts_with("held "))
            .filter_map(|(_, l)| l[5..].parse().ok())
            .next_back()
            .unwrap_or(0)
    }

    /// Whether the program has ended (not reaped yet: [`Running::wait`] reaps it).
    fn ended(&self) -> bool {
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only `info`; WNOWAIT leaves the child to be reaped by `wait`.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled `info` (si_pid is 0 when the child has not changed state).
        r == 0 && unsafe { info.si_pid() } != 0
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill touches no memory; the child is not reaped yet.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }

    /// What the program is doing now, for a test that timed out: its last lines, its state and
    /// every thread's kernel wait channel, and its memory cgroup's usage.
    fn describe(&self) -> String {
        let pid = self.pid();
        let read = |p: String| std::fs::read_to_string(&p).unwrap_or_else(|e| format!("{p}: {e}"));
        let lines = self.lines.lock().unwrap();
        let mut out = format!("{} lines printed, the last: {:?}\n", lines.len(), lines.last());
        drop(lines);
        for l in self.errors.lock().unwrap().iter().take(20) {
            out += &format!("stderr: {l}\n");
        }
        for l in read(format!("/proc/{pid}/status")).lines() {
            if ["State", "VmRSS", "Threads"].iter().any(|k| l.starts_with(k)) {
                out += &format!("{l}\n");
            }
        }
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in tasks.flatten() {
                let tid = t.file_name().to_string_lossy().into_owned();
                let stat = read(format!("/proc/{pid}/task/{tid}/stat"));
                let state = stat.rsplit_once(") ").map_or("?", |(_, r)| &r[..1]).to_string();
                let wchan = read(format!("/proc/{pid}/task/{tid}/wchan"));
                out += &format!("thread {tid}: state {state}, waiting in {wchan}\n");
            }
        }
        let cgroup = read(format!("/proc/{pid}/cgroup"));
        if let Some(path) =
            cgroup.lines().find_map(|l| l.split(':').nth(2).filter(|_| l.contains(":memory:")))
        {
            for f in ["memory.usage_in_bytes", "memory.failcnt", "memory.oom_control"] {
                out +=
                    &format!("{f}: {}\n", read(format!("/sys/fs/cgroup/memory{path}/{f}")).trim());
            }
        }
        out
    }

    /// Waits (at most 60 s: an OOM kill on two loaded cores is slow) for the end, killing the
    /// child when time runs out.
    fn wait(mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let state = self.describe();
                let _ = self.child.kill();
                panic!("the program did not end within 60 s\n{state}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Waits (at most 10 s) until `pid` has ended: gone, or a zombie.
fn wait_dead(pid: u32) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return,
            Ok(stat) if stat.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with(['Z', 'X'])) => {
                return;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    panic!("pid {pid} still runs 10 s after SIGKILL");
}

/// The live file of `pid` in `dir`.
fn live_file(dir: &Path, pid: u32) -> Option<PathBuf> {
    preload_tests::live_file_of(dir, pid)
}

/// Everything the report set of a live file shows that the tests check.
struct Death {
    /// Estimated retained bytes through `func`.
    through: u64,
    /// Exact retained bytes as of the version read.
    exact: u64,
    /// Whether `func` is the first frame of the program's own code in the top entry.
    on_top: bool,
    /// The manifest's `ended`.
    ended: Option<String>,
    /// The set's manifest.
    manifest: preload_tests::Manifest,
    /// Its text report.
    text: String,
}

/// Reads the live file of `pid` in `dir`, writes its report set into `out`, and reads that.
fn heap_at_death(dir: &Path, pid: u32, out: &Path, ended: Option<&str>, func: &str) -> Death {
    let file = live_file(dir, pid).unwrap_or_else(|| {
        panic!("no live file of pid {pid} in {}: {}", dir.display(), preload_tests::list_dir(dir))
    });
    let live = LiveProfile::read(&file).unwrap_or_else(|e| panic!("unreadable live file: {e}"));
    assert_eq!(live.pid(), pid);
    assert!(!live.is_running(), "pid {pid} is dead but its file says it runs");
    let before: Vec<String> = report_sets(out).into_iter().map(|s| s.stem).collect();
    let written = live.write_report_set(out, ended).unwrap_or_else(|e| panic!("{e}"));
    assert!(written.warnings.is_empty(), "{:?}", written.warnings);
    let sets = report_sets(out);
    // The new set (`out` may hold sets the process wrote itself).
    let set =
        sets.iter().find(|s| s.pid == pid && !before.contains(&s.stem)).expect("the set written");
    for ext in ["txt", "folded", "pb.gz", "peak.pb.gz", "json"] {
        assert!(set.has(ext), "no .{ext} in {}", preload_tests::list_dir(out));
    }
    assert!(preload_tests::process_file(out, pid, "html").is_some(), "no HTML page");
    let m = set.manifest();
    let on_top = m
        .entries
        .first()
        .is_some_and(|e| e.frames.iter().any(|f| preload_tests::frame_is(&f.function, func)));
    Death {
        through: set.folded().bytes_through(func),
        exact: m.totals.retained_bytes,
        on_top,
        ended: m.ended.clone(),
        manifest: m,
        text: set.text(),
    }
}

/// The probability that a block of `size` bytes is sampled at mean interval `interval`, and
/// the variance of its Horvitz-Thompson estimate.
fn block_variance(size: f64, interval: f64) -> f64 {
    let p = 1.0 - (-size / interval).exp();
    size * size * (1.0 - p) / p
}

#[test]
fn sigkill_at_random_moments_leaves_a_readable_heap_with_the_grower_on_top() {
    let dir = TestDir::new("death-sigkill");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let interval = 256.0 * 1024.0;
    let (mut diff, mut var, mut runs) = (0.0f64, 0.0f64, 0);
    // Seeds from the clock: a different sampling in every run. Half the runs also write a
    // periodic report every second, so some kills land while one is being written.
    let base =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
            as u64;
    for i in 0..24u64 {
        let reports = dir.reports(&format!("run-{i}"));
        let seed = (base
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i.wrapping_mul(1442695040888963407)))
            >> 1;
        let seed_s = seed.to_string();
        let mut vars = vec![("YING_SAMPLE_INTERVAL_BYTES", "256KiB"), ("YING_SEED", &seed_s[..])];
        if i % 2 == 1 {
            vars.extend([
                ("YING_CHECK_INTERVAL_SECS", "1"),
                ("YING_REPORT_PCT_CHANGE_TRIGGER", "0"),
            ]);
        }
        let r = Running::start(
            &exe,
            &["pause", "60", "8", &BLOCK.to_string(), "20000"],
            &reports,
            &vars,
        );
        r.wait_line("held ");
        let wait_ms = 200 + (seed % 1000);
        std::thread::sleep(Duration::from_millis(wait_ms));
        let at = Instant::now();
        r.signal(libc::SIGKILL);
        let printed = r.held_before(at);
        let pid = r.pid();
        let status = r.wait();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        let d = heap_at_death(&reports, pid, &dir.reports(&format!("out-{i}")), None, "death_grow");
        // The version read is one the process wrote whole: never more than it held when
        // killed (plus what the C runtime holds), at most a few steps behind it.
        assert!(
            d.exact <= printed + 64 * 1024,
            "run {i}: file says {} held, program {printed}",
            d.exact
        );
        assert!(
            d.ended.as_deref().is_some_and(|e| e.starts_with("not running; last seen alive at")),
            "{:?}",
            d.ended
        );
        if d.exact >= 4 * CHUNK {
            assert!(d.on_top, "run {i}: death_grow is not in the top entry");
        }
        let blocks = d.exact / CHUNK;
        diff += d.through as f64 - (blocks * CHUNK) as f64;
        var += blocks as f64 * block_variance(CHUNK as f64, interval);
        runs += 1;
    }
    let z = diff / var.sqrt();
    eprintln!("{runs} kills: estimate minus truth {diff:.0} bytes, z = {z:.2}");
    assert!(z.abs() < 4.0, "retained estimates through death_grow are biased: z = {z:.2}");
}

/// With every setting at its default, a program that holds 24 MiB within its first
/// milliseconds and is killed 150 ms after it started leaves a live file that `ying report`
/// reads, its grower on top: the first version follows the first sample within 100 ms, not
/// one interval after the report thread started (which left nothing).
#[test]
fn a_sigkill_150_ms_after_the_start_leaves_its_heap_with_every_setting_at_its_default() {
    let dir = TestDir::new("death-early");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let mut read = 0;
    for i in 0..5 {
        let reports = dir.reports(&format!("run-{i}"));
        let started = Instant::now();
        let r =
            Running::spawn_with(&exe, &["pause", "1", "24", "1048576", "0"], &reports, &[], true);
        std::thread::sleep(Duration::from_millis(150).saturating_sub(started.elapsed()));
        r.signal(libc::SIGKILL);
        let pid = r.pid();
        let printed = r.held_before(Instant::now());
        let status = r.wait();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        if printed == 0 {
            continue; // Killed before it held its 24 MiB (a loaded machine): nothing to read.
        }
        let d = heap_at_death(&reports, pid, &dir.reports(&format!("out-{i}")), None, "death_grow");
        assert!(d.on_top, "run {i}: death_grow is not in the top entry");
        assert!(d.exact >= 24 << 20, "run {i}: the file holds {} bytes of {printed}", d.exact);
        read += 1;
    }
    assert!(read >= 3, "only {read} of 5 runs held their 24 MiB within 150 ms");
}

/// Freshness at death during fast growth: a program growing at about 200 MB/s (40 blocks of
/// 48 KiB every 10 ms) is killed at a random moment 0.3 to 1.3 s after its first step, eight
/// times; the file must be readable and never claim more than was held, and the share of what
/// the program held at the kill that the file holds is printed (the issue's target: 97 %).
#[test]
fn fast_growth_killed_at_random_prints_how_fresh_the_heap_at_death_is() {
    let dir = TestDir::new("death-fresh");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let base =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
            as u64;
    let mut shares = Vec::new();
    for i in 0..8u64 {
        let reports = dir.reports(&format!("run-{i}"));
        let r = Running::spawn_with(
            &exe,
            &["pause", "200", "40", &BLOCK.to_string(), "10000"],
            &reports,
            &[],
            true,
        );
        r.wait_line("held ");
        let wait_ms = 300 + (base.wrapping_mul(i + 1).wrapping_mul(2654435761) >> 7) % 1000;
        std::thread::sleep(Duration::from_millis(wait_ms));
        let at = Instant::now();
        r.signal(libc::SIGKILL);
        let printed = r.held_before(at);
        let pid = r.pid();
        r.wait();
        let d = heap_at_death(&reports, pid, &dir.reports(&format!("out-{i}")), None, "death_grow");
        assert!(d.exact <= printed + 64 * 1024, "run {i}: file {} > held {printed}", d.exact);
        shares.push(d.exact as f64 / printed.max(1) as f64);
    }
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "freshness at death, ~200 MB/s: mean {:.1} %, worst {:.1} % of what was held at the kill",
        mean * 100.0,
        min * 100.0
    );
}

/// The live files of `exe`'s processes with pid `pid` in `dir`.
fn live_files_of(dir: &Path, exe: &str, pid: u32) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    v.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.strip_prefix(&format!("ying.{exe}."))
            .and_then(|r| r.strip_suffix(".live"))
            .and_then(|r| r.parse::<ying_profiler::report::ProcessId>().ok())
            .is_some_and(|p| p.pid == pid && p.instance.is_some())
    });
    v.sort();
    v
}

/// `heap_at_death` holding 9.6 MB (sampled for sure) as pid 1 of a new pid namespace
/// (`unshare -p -f`, killed with `unshare`),
/// every setting at its default but the live file's interval; `None` when this machine cannot
/// make pid namespaces (not root).
fn in_pid_namespace(exe: &Path, mode: &str, reports: &Path) -> Option<Running> {
    let ok = Command::new("unshare").args(["-p", "-f", "--mount-proc", "true"]).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: no pid namespaces here (unshare -p needs root)");
        return None;
    }
    let exe = exe.to_str().unwrap();
    let args =
        ["-p", "-f", "--mount-proc", "--kill-child=SIGKILL", exe, mode, "1", "200", "49152", "0"];
    let unshare = preload_tests::find_in_path("unshare").expect("unshare");
    let r = Running::spawn_with(&unshare, &args, reports, &[("YING_LIVE_INTERVAL_MS", "50")], true);
    Some(r)
}

/// Waits (at most 20 s) until `dir` holds `n` live files of pid 1.
fn wait_live_files(dir: &Path, n: usize) -> Vec<PathBuf> {
    let start = Instant::now();
    loop {
        let files = live_files_of(dir, "heap_at_death", 1);
        if files.len() >= n || start.elapsed() > Duration::from_secs(20) {
            return files;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two processes that are both pid 1, each in a pid namespace of its own, sharing one
/// reporting directory (two containers on one volume): at once, each keeps a live file of its
/// own; in sequence (a crash, then a restart under the same pid), the restarted process's
/// normal exit removes its own live file and never the crashed one's, which `ying report`
/// still reads. Names carry the process's instance beside its pid; with names of pid alone the
/// second process overwrote the first's file, then removed it at its exit.
#[test]
fn two_processes_with_the_same_pid_in_two_pid_namespaces_keep_their_own_files() {
    let dir = TestDir::new("death-pidns");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    // At once.
    let both = dir.reports("both");
    let Some(a) = in_pid_namespace(&exe, "pause", &both) else { return };
    let b = in_pid_namespace(&exe, "pause", &both).expect("a second namespace");
    a.wait_line("held ");
    b.wait_line("held ");
    let files = wait_live_files(&both, 2);
    a.signal(libc::SIGKILL);
    b.signal(libc::SIGKILL);
    a.wait();
    b.wait();
    assert_eq!(files.len(), 2, "two live files of pid 1: {}", preload_tests::list_dir(&both));
    for f in &files {
        let live = LiveProfile::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(live.pid(), 1);
    }
    // In sequence: a crash, then a restart under the same pid that exits normally.
    let seq = dir.reports("sequence");
    let crashed = in_pid_namespace(&exe, "pause", &seq).expect("a namespace");
    crashed.wait_line("held ");
    let first = wait_live_files(&seq, 1);
    crashed.signal(libc::SIGKILL);
    crashed.wait();
    assert_eq!(
        first.len(),
        1,
        "the crashed process's live file: {}",
        preload_tests::list_dir(&seq)
    );
    let restarted = in_pid_namespace(&exe, "exit", &seq).expect("a namespace");
    let status = restarted.wait();
    assert!(status.success(), "the restarted process exits 0: {status:?}");
    let left = live_files_of(&seq, "heap_at_death", 1);
    assert_eq!(
        left,
        first,
        "only the crashed process's live file is left: {}",
        preload_tests::list_dir(&seq)
    );
    let out = dir.reports("read");
    let live = LiveProfile::read(&left[0]).unwrap_or_else(|e| panic!("{e}"));
    live.write_report_set(&out, None).unwrap_or_else(|e| panic!("{e}"));
    let sets = report_sets(&seq);
    assert!(
        sets.iter().any(|s| s.exe == "heap_at_death" && s.pid == 1),
        "the restarted process's exit report: {}",
        preload_tests::list_dir(&seq)
    );
}

/// Runs `mode` plainly and under `scripts/run-with-ying.sh` (which is `ying run`): same
/// output and end; the run's summary says how the program died and where its heap at death
/// is; that set names `death_grow` on top and says how it ended.
fn dies_like_plain(mode: &str, how: &str) {
    let dir = TestDir::new(&format!("death-{mode}"));
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let args = [mode, "30", "8", &BLOCK.to_string(), "2000"];
    let plain = Run::new(&exe).args(&args).without_preload().run();
    let reports = dir.reports("ying");
    let o = Run::new("bash")
        .arg(workspace_root().join("scripts/run-with-ying.sh"))
        .arg(&exe)
        .args(&args)
        .env("YING_LIB", preload_lib().display().to_string())
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .env("YING_LIVE_INTERVAL_MS", "50")
        .run();
    assert!(!o.timed_out, "{}", o.describe());
    assert_eq!(o.stdout_str(), plain.stdout_str(), "{}", o.describe());
    // `ying run` exits with 128 + N where the plain child was killed by signal N.
    use std::os::unix::process::ExitStatusExt;
    let expected = plain.code().or_else(|| plain.status.and_then(|s| s.signal()).map(|s| 128 + s));
    assert_eq!(o.code(), expected, "{}\nplain: {}", o.describe(), plain.describe());
    let line = o
        .ying_lines()
        .into_iter()
        .find(|l| l.contains(how) && l.contains("its heap at death is in"))
        .unwrap_or_else(|| panic!("no summary line {how:?}\n{}", o.describe()));
    let sets = report_sets(&reports);
    let set = sets.iter().find(|s| s.manifest().ended.is_some()).unwrap_or_else(|| {
        panic!("no heap-at-death set: {line}\n{}", preload_tests::list_dir(&reports))
    });
    assert!(line.contains(&set.path("txt").display().to_string()), "{line}");
    let m = set.manifest();
    assert!(m.ended.as_deref().is_some_and(|e| e.contains(how)), "{:?}", m.ended);
    assert!(
        m.entries.first().is_some_and(|e| e
            .frames
            .iter()
            .any(|f| preload_tests::frame_is(&f.function, "death_grow"))),
        "death_grow is not on top\n{}",
        set.text()
    );
    // 240 blocks were held: the file is at most one version behind the end of the growth.
    let held = 240 * CHUNK;
    assert!(m.totals.retained_bytes >= held, "exact retained {} < {held}", m.totals.retained_bytes);
    assert!(set.text().contains(&format!("process ended:      {}", m.ended.as_deref().unwrap())));
}

#[test]
fn sigsegv_leaves_its_heap() {
    dies_like_plain("segv", "killed by SIGSEGV");
}

#[test]
fn abort_leaves_its_heap() {
    dies_like_plain("abort", "killed by SIGABRT");
}

#[test]
fn underscore_exit_leaves_its_heap() {
    dies_like_plain("_exit", "exited with status 7 without its exit report");
}

#[test]
fn unhandled_sigterm_leaves_its_heap() {
    dies_like_plain("sigterm", "killed by SIGTERM");
}

#[test]
fn raised_sigkill_leaves_its_heap() {
    dies_like_plain("sigkill", "killed by SIGKILL");
}

#[test]
fn a_normal_exit_removes_the_live_file_unless_kept() {
    let dir = TestDir::new("death-exit");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let args = ["exit", "10", "8", &BLOCK.to_string(), "2000"];
    for (i, keep) in [false, true].into_iter().enumerate() {
        let reports = dir.reports(&format!("r{i}"));
        let r = Running::start(
            &exe,
            &args,
            &reports,
            &[("YING_KEEP_LIVE_FILE", if keep { "1" } else { "0" })],
        );
        r.wait_line("done");
        // The live file exists while the program runs.
        let pid = r.pid();
        std::thread::sleep(Duration::from_millis(200));
        assert!(live_file(&reports, pid).is_some(), "no live file while running");
        let status = r.wait();
        assert!(status.success());
        assert_eq!(
            live_file(&reports, pid).is_some(),
            keep,
            "{}",
            preload_tests::list_dir(&reports)
        );
        assert!(report_sets(&reports).iter().any(|s| s.manifest().exiting), "no exit report");
    }
}

#[test]
fn the_live_file_goes_where_ying_live_file_says() {
    let dir = TestDir::new("death-where");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let args = ["pause", "10", "8", &BLOCK.to_string(), "2000"];
    let elsewhere = dir.join("tmpfs-like");
    for (i, setting) in ["off", elsewhere.to_str().unwrap()].into_iter().enumerate() {
        let reports = dir.reports(&format!("r{i}"));
        let r = Running::start(&exe, &args, &reports, &[("YING_LIVE_FILE", setting)]);
        r.wait_line("done");
        std::thread::sleep(Duration::from_millis(300));
        let pid = r.pid();
        r.signal(libc::SIGKILL);
        r.wait();
        assert!(
            live_file(&reports, pid).is_none(),
            "{setting}: a live file in the reporting directory"
        );
        if setting != "off" {
            let d = heap_at_death(
                &elsewhere,
                pid,
                &dir.reports("out"),
                Some("killed by SIGKILL"),
                "death_grow",
            );
            assert!(d.on_top && d.ended.as_deref() == Some("killed by SIGKILL"));
        }
    }
}

#[test]
fn a_fork_child_keeps_its_own_file() {
    let dir = TestDir::new("death-fork");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("r");
    // A fine interval: the child's 80 blocks are estimated within a few per cent.
    let vars = [("YING_SAMPLE_INTERVAL_BYTES", "64KiB")];
    let r = Running::start(&exe, &["fork", "10", "8", &BLOCK.to_string(), "2000"], &reports, &vars);
    let child: u32 = r.wait_line("child ")[6..].parse().unwrap();
    r.wait_line("child done");
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: kill touches no memory.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    let parent = r.pid();
    r.signal(libc::SIGKILL);
    r.wait();
    // The child is not ours to reap: wait until it is dead (a zombie, or reaped by init) before
    // its file is read, since SIGKILL ends a process a little after `kill` returns.
    wait_dead(child);
    // The child holds its parent's 80 blocks (inherited) and its own 80: both are in its file.
    let c = heap_at_death(&reports, child, &dir.reports("child"), None, "death_grow_child");
    assert!(c.through >= 40 * CHUNK, "the child's file holds {} in death_grow_child", c.through);
    let p = heap_at_death(&reports, parent, &dir.reports("parent"), None, "death_grow");
    assert_eq!(
        heap_at_death(&reports, parent, &dir.reports("parent2"), None, "death_grow_child").through,
        0,
        "the parent's file shows the child's allocations"
    );
    assert!(p.on_top && p.exact >= 80 * CHUNK);
}

/// A cgroup with a memory limit that the test makes itself (v2 or v1), removed on drop.
struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// A cgroup named after the test process and `test` (tests run in parallel).
    fn new(limit: u64, test: &str) -> Result<Self, String> {
        let name = format!("ying-test-{}-{test}", std::process::id());
        for (root, file) in [
            ("/sys/fs/cgroup", "memory.max"),
            ("/sys/fs/cgroup/unified", "memory.max"),
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        ] {
            let path = Path::new(root).join(&name);
            if std::fs::create_dir(&path).is_err() {
                continue;
            }
            // A plain directory (a tmpfs where the hierarchy would be) is no cgroup.
            if !path.join("cgroup.procs").exists() {
                let _ = std::fs::remove_dir(&path);
                continue;
            }
            let cg = Self { path: path.clone() };
            if std::fs::write(path.join(file), limit.to_string()).is_ok() {
                let _ = std::fs::write(path.join("memory.swap.max"), "0");
                let _ = std::fs::write(path.join("memory.memsw.limit_in_bytes"), limit.to_string());
                let _ = std::fs::write(path.join("memory.swappiness"), "0");
                return Ok(cg);
            }
        }
        Err("no cgroup with a memory controller could be made (needs root and cgroup v1 or v2)"
            .into())
    }
}

impl Cgroup {
    /// The memory the cgroup is charged for now (v2 or v1).
    fn usage(&self) -> Option<u64> {
        ["memory.current", "memory.usage_in_bytes"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.path.join(f)).ok()?.trim().parse().ok())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[test]
fn an_oom_kill_under_a_cgroup_limit_leaves_its_heap() {
    let dir = TestDir::new("death-oom");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("r");
    let args = ["pause", "100000", "8", &BLOCK.to_string(), "5000"];
    oom_kill(&dir, &exe, &args, &reports, true, "death_grow");
}

#[test]
fn an_oom_kill_of_a_rust_program_profiling_itself_leaves_its_heap() {
    let dir = TestDir::new("death-oom-rust");
    let Some(exe) = rust_example() else { return };
    // The example writes its reports (and its live file) in its first argument.
    let reports = dir.reports("r");
    let args = [reports.to_str().unwrap(), "pause", "100000"];
    oom_kill(&dir, &exe, &args, &reports, false, "heap_at_death::rust_grow");
}

/// With the near-limit report at its default (90 % of the cgroup's limit) the process writes a
/// set as it nears the limit, then the OOM killer ends it: `ying report`'s heap at death goes
/// beside that set in the same directory under the next free number, the process's set left
/// as it was, and says how close to the limit the process was and since when.
#[test]
fn an_oom_kill_after_a_near_limit_set_replaces_no_file_of_the_process() {
    let dir = TestDir::new("death-oom-near");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("r");
    let args = ["pause", "100000", "8", &BLOCK.to_string(), "5000"];
    let Some((pid, death)) = oom_kill_in(&exe, &args, &reports, true, &[], &reports, "death_grow")
    else {
        return;
    };
    let sets: Vec<_> = report_sets(&reports).into_iter().filter(|s| s.pid == pid).collect();
    let near = sets
        .iter()
        .find(|s| s.manifest().reason.is_some_and(|r| r.contains("near memory limit")))
        .unwrap_or_else(|| panic!("no near-limit set\n{}", preload_tests::list_dir(&reports)));
    let at_death = sets.iter().find(|s| s.manifest().ended.is_some()).expect("the heap at death");
    assert!(at_death.seq > near.seq, "the heap at death took number {}", at_death.seq);
    // The near-limit set is still the process's own: its text says so, and it is complete.
    let text = near.text();
    assert!(text.contains("reason:") && !text.contains("process ended:"), "{text}");
    for ext in ["txt", "folded", "pb.gz", "json"] {
        assert!(near.has(ext), "the near-limit set lost .{ext}");
    }
    let limit = death.manifest.memory_limit.as_ref().expect("no memory limit at death");
    assert_eq!(
        (limit.bytes, limit.source.as_str(), limit.near_limit_pct),
        (OOM_LIMIT, "cgroup", 90)
    );
    assert!(limit.near_limit_since.is_some(), "the near-limit state is lost: {limit:?}");
    assert!(death.text.contains("above the near-limit level (90 %) since"), "{}", death.text);
}

/// `examples/heap_at_death.rs` (the `#[global_allocator]` front end), built by cargo now;
/// None (with a line saying why) when it cannot be built.
fn rust_example() -> Option<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let o = Run::new(cargo)
        .args(&["build", "--quiet", "--example", "heap_at_death", "-p", "ying_profiler"])
        .args(&["--message-format=json"])
        .cwd(workspace_root())
        .timeout(Duration::from_secs(600))
        .run();
    let exe = o.stdout_str().lines().filter(|l| l.contains("\"executable\":\"")).find_map(|l| {
        let start = l.find("\"executable\":\"")? + "\"executable\":\"".len();
        Some(PathBuf::from(&l[start..start + l[start..].find('"')?]))
    });
    if exe.is_none() {
        eprintln!("SKIPPED: examples/heap_at_death could not be built\n{}", o.describe());
    }
    exe
}

/// The cgroup limit of the OOM tests.
const OOM_LIMIT: u64 = 96 << 20;

/// Runs `exe args` (under the shim when `preload`, the near-limit report off) in a cgroup of
/// [`OOM_LIMIT`] until the OOM killer ends it, then checks its heap at death: `func` on top,
/// most of the limit there, most of it resident, the resident set explained and the limit
/// shown. Skips with one line when no cgroup can be made.
fn oom_kill(dir: &TestDir, exe: &Path, args: &[&str], reports: &Path, preload: bool, func: &str) {
    let vars = [("YING_MEMORY_LIMIT_PCT", "0")];
    let out = dir.reports("out");
    let Some((_, d)) = oom_kill_in(exe, args, reports, preload, &vars, &out, func) else {
        return;
    };
    assert!(d.on_top, "{func} is not on top");
    // The file is a version or two behind the kill: most of the limit is there.
    let limit = OOM_LIMIT;
    assert!(d.exact >= limit / 2, "the heap at death holds {} of a {limit}-byte limit", d.exact);
    // The blocks are written as they are made: most of what the top stack holds is resident.
    let top = &d.manifest.entries[0];
    let resident = top.resident_bytes.unwrap_or_else(|| panic!("no residency\n{}", d.text));
    assert!(resident >= top.retained_bytes / 2, "{resident} of {} resident", top.retained_bytes);
    let parts = d.manifest.rss_breakdown.as_ref().expect("no RSS breakdown at death");
    assert_eq!(parts.values().sum::<u64>(), d.manifest.rss_bytes.unwrap());
    assert!(parts["heap_in_use"] >= limit / 4, "{parts:?}");
    let l = d.manifest.memory_limit.as_ref().expect("no memory limit at death");
    assert_eq!((l.bytes, l.source.as_str()), (limit, "cgroup"));
    // The shim's near-limit report is off (YING_MEMORY_LIMIT_PCT=0); the Rust example's
    // runner keeps its default.
    assert_eq!(l.near_limit_pct, if preload { 0 } else { 90 });
    assert!(d.text.contains("memory limit:       96.0 MiB (the cgroup's)"), "{}", d.text);
}

/// [`oom_kill`]'s run: `exe args` with `vars` in a cgroup of [`OOM_LIMIT`] until it is killed,
/// its heap at death written into `out` (`func` the grower); None (with one line) when no
/// cgroup can be made.
fn oom_kill_in(
    exe: &Path,
    args: &[&str],
    reports: &Path,
    preload: bool,
    vars: &[(&str, &str)],
    out: &Path,
    func: &str,
) -> Option<(u32, Death)> {
    let limit = OOM_LIMIT;
    let name = exe.file_name().unwrap().to_string_lossy().to_string() + &vars.len().to_string();
    let cg = match Cgroup::new(limit, &name) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return None;
        }
    };
    // The program joins the cgroup before it execs (the shell's own pid is the program's).
    let script = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.path.display());
    let mut sh_args = vec!["-c", &script, "sh", exe.to_str().unwrap()];
    sh_args.extend_from_slice(args);
    let r = Running::spawn(Path::new("/bin/sh"), &sh_args, reports, vars, preload);
    let pid = r.pid();
    // On a loaded machine the kernel can keep reclaiming the program's text and page cache at
    // the limit instead of choosing a victim (usage at the limit, no OOM kill, for minutes): that
    // is the kernel's choice, not Ying's. After 40 s at the limit the test plays the OOM killer,
    // with the same signal, and says so; what is checked after it is the same.
    let started = Instant::now();
    let mut thrashed = false;
    while !r.ended() && started.elapsed() < Duration::from_secs(50) {
        if started.elapsed() > Duration::from_secs(40)
            && cg.usage().is_some_and(|u| u >= limit - (2 << 20))
        {
            eprintln!(
                "NOTE: the kernel reclaimed at the limit for 40 s without an OOM kill\n{}",
                r.describe()
            );
            r.signal(libc::SIGKILL);
            thrashed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = r.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "not killed by the OOM killer: {status:?}"
    );
    let ended =
        if thrashed { "killed by SIGKILL (at its limit)" } else { "killed by SIGKILL (OOM)" };
    let d = heap_at_death(reports, pid, out, Some(ended), func);
    drop(cg);
    Some((pid, d))
}

#[test]
fn a_kill_during_dlopen_and_dlclose_leaves_a_readable_heap() {
    let dir = TestDir::new("death-dlopen");
    let exe = dir.compile_c("heap_at_death.c", &["-ldl"]);
    let lib = dir.compile_c("tlslib.c", &["-shared", "-fPIC"]);
    let args = ["dlopen", "10", "8", &BLOCK.to_string(), "1000", lib.to_str().unwrap()];
    // The loop of dlopen and dlclose runs: the kill lands in one of them, or in a version of
    // the live file being written while the module list changes.
    for i in 0..6u64 {
        let (d, ..) = kill_during_loop(&dir, &exe, &args, i);
        assert!(d.exact >= 80 * CHUNK, "run {i}: {} held", d.exact);
    }
}

#[test]
fn symbolize_offline_names_nothing_in_the_process_and_ying_report_names_it_all() {
    let dir = TestDir::new("death-offline");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("r");
    let args = ["exit", "10", "8", &BLOCK.to_string(), "2000"];
    let r = Running::start(&exe, &args, &reports, &[("YING_SYMBOLIZE", "offline")]);
    assert!(r.wait().success());
    let sets = report_sets(&reports);
    let set = sets.iter().find(|s| s.manifest().exiting).expect("an exit report");
    let m = set.manifest();
    // In the process: raw frames only, the modules' build ids in the pprof profile, and the
    // set's raw profile.
    assert!(m.frames_named("death_grow").next().is_none(), "named in the process\n{}", set.text());
    assert!(set.text().contains("heap_at_death+0x"), "{}", set.text());
    assert!(set.has("live"), "no raw profile: {}", preload_tests::list_dir(&reports));
    // Outside it: the same set, every frame named, written over the raw one.
    let raw = LiveProfile::read(&set.path("live")).unwrap();
    assert!(raw.is_set_profile());
    let named = raw.write_report_set(&reports, None).unwrap();
    assert!(named.warnings.is_empty(), "{:?}", named.warnings);
    assert_eq!(named.paths.text.as_deref(), Some(set.path("txt").as_path()), "not the same set");
    let m = set.manifest();
    assert!(m.ended.is_none(), "a set's raw profile says nothing of an end: {:?}", m.ended);
    assert!(m.exiting, "the named set is still the exit report");
    assert!(
        m.entries.first().is_some_and(|e| e
            .frames
            .iter()
            .any(|f| preload_tests::frame_is(&f.function, "death_grow"))),
        "death_grow is not on top once named\n{}",
        set.text()
    );
}

#[test]
fn a_kill_while_forking_leaves_a_readable_heap() {
    let dir = TestDir::new("death-forkloop");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let args = ["forkloop", "10", "8", &BLOCK.to_string(), "1000"];
    for i in 0..6u64 {
        let (_, reports, pid) = kill_during_loop(&dir, &exe, &args, i);
        // The children took no sample: they left no live file.
        assert_eq!(live_pids(&reports), [pid], "run {i}: live files of other processes");
    }
}

/// Runs `exe args` (a mode that loops after growing) under the shim, kills it with `SIGKILL`
/// a little later each run `i`, and returns its heap at death (with `death_grow` on top), its
/// reporting directory and its pid.
fn kill_during_loop(dir: &TestDir, exe: &Path, args: &[&str], i: u64) -> (Death, PathBuf, u32) {
    let reports = dir.reports(&format!("r{i}"));
    let r = Running::start(exe, args, &reports, &[]);
    r.wait_line("done");
    std::thread::sleep(Duration::from_millis(150 + 97 * i));
    let pid = r.pid();
    r.signal(libc::SIGKILL);
    let status = r.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    let d = heap_at_death(&reports, pid, &dir.reports(&format!("out{i}")), None, "death_grow");
    assert!(d.on_top, "run {i}: death_grow is not on top");
    (d, reports, pid)
}

/// The pids of the live files in `dir`.
fn live_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            let process = n.strip_prefix("ying.")?.strip_suffix(".live")?.rsplit('.').next()?;
            Some(process.parse::<ying_profiler::report::ProcessId>().ok()?.pid)
        })
        .collect()
}

#[test]
fn an_unwritable_live_directory_is_one_warning_and_nothing_else() {
    let dir = TestDir::new("death-unwritable");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    // A regular file where the directory should be: it can be neither created nor used.
    let blocker = dir.join("not-a-dir");
    std::fs::write(&blocker, b"x").unwrap();
    let args = ["exit", "10", "8", &BLOCK.to_string(), "2000"];
    let plain = Run::new(&exe).args(&args).without_preload().run();
    let reports = dir.reports("r");
    let o = Run::new(&exe)
        .args(&args)
        .with_preload()
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .env("YING_LIVE_FILE", blocker.join("live").display().to_string())
        .env("YING_LIVE_INTERVAL_MS", "50")
        .run();
    assert_eq!(o.stdout_str(), plain.stdout_str(), "{}", o.describe());
    assert_eq!(o.code(), plain.code(), "{}", o.describe());
    let lines = o.ying_lines();
    assert_eq!(lines.len(), 1, "{}", o.describe());
    assert!(
        lines[0].contains("live file not written") && lines[0].contains("not-a-dir"),
        "{lines:?}"
    );
    // The profiler ran on: the exit report is there.
    assert!(report_sets(&reports).iter().any(|s| s.manifest().exiting));
}

#[test]
fn ying_report_and_ying_view_read_a_dead_process_and_go_tool_pprof_opens_its_profile() {
    let dir = TestDir::new("death-cli");
    let exe = dir.compile_c("heap_at_death.c", &[]);
    let reports = dir.reports("r");
    let r = Running::start(&exe, &["pause", "20", "8", &BLOCK.to_string(), "1000"], &reports, &[]);
    r.wait_line("done");
    std::thread::sleep(Duration::from_millis(300));
    let pid = r.pid();
    r.signal(libc::SIGKILL);
    r.wait();
    let file = live_file(&reports, pid).expect("a live file");
    let out = dir.join("out");
    let o = Run::new(ying_bin()).arg("report").arg(&file).arg("-o").arg(&out).run();
    o.assert_success("ying report");
    let text = PathBuf::from(o.stdout_str().trim());
    assert!(
        text.starts_with(&out) && text.extension().is_some_and(|e| e == "txt"),
        "{}",
        o.describe()
    );
    let body = std::fs::read_to_string(&text).unwrap();
    assert!(body.contains("process ended:      not running; last seen alive at"), "{body}");
    assert!(body.contains("death_grow"), "{body}");
    // `ying view` of the reporting directory: the dead process is named, its heap in the page.
    let v = Run::new(ying_bin()).arg("view").arg(&reports).run();
    v.assert_success("ying view");
    assert!(
        v.ying_lines().iter().any(|l| l.contains(&format!("(pid {pid}) not running")) && l.contains("heap at death")),
        "{}",
        v.describe()
    );
    let page = std::fs::read_to_string(reports.join("ying.view.html")).unwrap();
    assert!(page.contains("death_grow") && page.contains("not running; last seen alive"));
    if preload_tests::require_tool("go").is_none() {
        return;
    }
    let pb = text.with_extension("pb.gz");
    let top = Run::new("go")
        .args(&["tool", "pprof", "-top", "-sample_index=inuse_space"])
        .arg(&pb)
        .env("PPROF_TMPDIR", dir.path().display().to_string())
        .timeout(Duration::from_secs(60))
        .run();
    top.assert_success("go tool pprof");
    assert!(top.stdout_str().contains("death_grow"), "{}", top.describe());
}
