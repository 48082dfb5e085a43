//! Running one program as a child: with a timeout, in its own process group (killed whole when
//! time runs out), its output captured and shown in full on failure; and the comparison every
//! shim test makes, the plain run against the run under the shim.
//!
//! A run may name another allocator to chain the shim to ([`Run::preload_after`]): the run
//! under the shim then preloads `libying.so:<allocator>`, and the plain run preloads the
//! allocator alone, so that the control is the same allocator without Ying.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{ReportSet, list_dir, preload_lib, report_sets};

/// How long any child may run before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of stdout/stderr shown in a failure message (head and tail are kept).
const SHOW_LIMIT: usize = 64 * 1024;

/// One child process to run: program, arguments, variables, working directory, timeout,
/// whether to preload the shim, and what to preload after it.
#[derive(Debug, Clone)]
pub struct Run {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    timeout: Duration,
    preload: bool,
    after: Option<PathBuf>,
    before: Option<PathBuf>,
}

impl Run {
    /// A run of `program` (a path, or a name looked up in `PATH`).
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            timeout: DEFAULT_TIMEOUT,
            preload: false,
            after: None,
            before: None,
        }
    }

    /// Appends arguments.
    pub fn args<S: AsRef<std::ffi::OsStr>>(mut self, args: &[S]) -> Self {
        self.args.extend(args.iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Sets a variable (in addition to the inherited environment minus `YING_*`/`LD_PRELOAD`).
    pub fn env(mut self, key: &str, value: impl AsRef<str>) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.as_ref().to_string()));
        self
    }

    /// Sets several variables.
    pub fn envs(mut self, vars: &[(&str, &str)]) -> Self {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Runs in `dir`.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Changes the timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// The same run with `LD_PRELOAD=<libying.so>` (see [`preload_lib`]).
    pub fn with_preload(mut self) -> Self {
        self.preload = true;
        self
    }

    /// The same run without the shim (but with the object of [`Run::preload_after`], if any).
    pub fn without_preload(mut self) -> Self {
        self.preload = false;
        self
    }

    /// Preloads `object` (another allocator, e.g. `libjemalloc.so.2`) after the shim: with the
    /// shim the run sets `LD_PRELOAD=<libying.so>:<object>`, without it
    /// `LD_PRELOAD=<object>`, so that the plain run of [`compare`] is the program under that
    /// allocator alone. Either way it replaces an `LD_PRELOAD` set with [`Run::env`].
    pub fn preload_after(mut self, object: impl Into<PathBuf>) -> Self {
        self.after = Some(object.into());
        self
    }

    /// Preloads `object` before the shim (another library that interposes what the program
    /// calls, found first): with the shim the run sets `LD_PRELOAD=<object>:<libying.so>`,
    /// without it `LD_PRELOAD=<object>`, as [`Run::preload_after`] does for the other order.
    pub fn preload_before(mut self, object: impl Into<PathBuf>) -> Self {
        self.before = Some(object.into());
        self
    }

    /// The object preloaded after the shim ([`Run::preload_after`]), if any.
    pub fn preloaded_after(&self) -> Option<&Path> {
        self.after.as_deref()
    }

    /// The variables this run sets, `LD_PRELOAD` included.
    pub fn vars(&self) -> Vec<(String, String)> {
        let mut v = self.env.clone();
        let shown = |p: &PathBuf| p.display().to_string();
        let mut objects: Vec<String> = self.before.iter().map(shown).collect();
        if self.preload {
            objects.push(preload_lib().display().to_string());
        }
        objects.extend(self.after.iter().map(shown));
        // Exit reports in full unless the test says otherwise: tests read the set a process
        // writes, and a short process writes its raw profile by default (`churn.rs` tests that).
        if self.preload && !v.iter().any(|(k, _)| k == "YING_SHORT_PROCESS_SECS") {
            v.push(("YING_SHORT_PROCESS_SECS".to_string(), "0".to_string()));
        }
        let preload = (!objects.is_empty()).then(|| objects.join(":"));
        if let Some(p) = preload {
            v.retain(|(k, _)| k != "LD_PRELOAD");
            v.push(("LD_PRELOAD".to_string(), p));
        }
        v
    }

    /// The command line, shell-quoted.
    pub fn command_line(&self) -> String {
        std::iter::once(&self.program)
            .chain(&self.args)
            .map(|a| shell_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the program to completion or until the timeout, capturing stdout and stderr.
    pub fn run(&self) -> Outcome {
        let vars = self.vars();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("YING_") || k == "LD_PRELOAD" {
                cmd.env_remove(&*k);
            }
        }
        for (k, v) in &vars {
            cmd.env(k, v);
        }
        if let Some(d) = &self.cwd {
            cmd.current_dir(d);
        }
        // Own process group, so a timeout can kill the whole tree.
        cmd.process_group(0);
        let started = Instant::now();
        let mut outcome = Outcome {
            command: self.command_line(),
            cwd: self.cwd.clone(),
            vars,
            status: None,
            pid: 0,
            stdout: Vec::new(),
            stderr: Vec::new(),
            timed_out: false,
            elapsed: Duration::ZERO,
            spawn_error: None,
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                outcome.spawn_error = Some(e.to_string());
                return outcome;
            }
        };
        outcome.pid = child.id();
        let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
        let mut readers = Vec::new();
        for (is_err, stream) in [
            (false, child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>)),
            (true, child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>)),
        ] {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut s) = stream {
                    let _ = s.read_to_end(&mut buf);
                }
                let _ = tx.send((is_err, buf));
            }));
        }
        drop(tx);
        let deadline = started + self.timeout;
        let kill_group = |pid: u32| {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        // Wait for the child itself.
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) => {}
                Err(_) => break None,
            }
            if Instant::now() >= deadline {
                outcome.timed_out = true;
                kill_group(outcome.pid);
                let _ = child.kill();
                break child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        outcome.status = status;
        // Then for its output; descendants may still hold the pipes open.
        let mut got = 0;
        while got < 2 {
            let now = Instant::now();
            let wait = if now < deadline { deadline - now } else { Duration::from_secs(5) };
            match rx.recv_timeout(wait) {
                Ok((is_err, buf)) => {
                    got += 1;
                    if is_err {
                        outcome.stderr = buf;
                    } else {
                        outcome.stdout = buf;
                    }
                }
                Err(_) => {
                    if outcome.timed_out {
                        break;
                    }
                    outcome.timed_out = true;
                    kill_group(outcome.pid);
                }
            }
        }
        if got == 2 {
            for r in readers {
                let _ = r.join();
            }
        }
        outcome.elapsed = started.elapsed();
        outcome
    }
}

/// Quotes `s` for a POSIX shell when needed.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What a [`Run`] did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The command line, shell-quoted.
    pub command: String,
    /// The working directory, when not inherited.
    pub cwd: Option<PathBuf>,
    /// The variables set for the child.
    pub vars: Vec<(String, String)>,
    /// The exit status (`None` when it could not be collected).
    pub status: Option<ExitStatus>,
    /// The child's pid.
    pub pid: u32,
    /// Captured standard output.
    pub stdout: Vec<u8>,
    /// Captured standard error.
    pub stderr: Vec<u8>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// Why the program could not be started.
    pub spawn_error: Option<String>,
}

impl Outcome {
    /// Exit code, when it exited normally.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Whether it exited with status 0 in time.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// The status as text: `exit 0`, `signal 11 (core dumped)`, `timed out`...
    pub fn status_text(&self) -> String {
        let mut s = match (&self.spawn_error, self.status) {
            (Some(e), _) => format!("not started: {e}"),
            (None, None) => "unknown".to_string(),
            (None, Some(st)) => match (st.code(), st.signal()) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => {
                    format!("signal {sig}{}", if st.core_dumped() { " (core dumped)" } else { "" })
                }
                _ => format!("{st}"),
            },
        };
        if self.timed_out {
            s.push_str(", TIMED OUT and killed");
        }
        s
    }

    /// Stdout as text (lossy).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (lossy).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// The stderr lines the shim wrote (starting with `ying:`).
    pub fn ying_lines(&self) -> Vec<String> {
        self.stderr_str().lines().filter(|l| l.starts_with("ying:")).map(String::from).collect()
    }

    /// Stderr without the shim's lines.
    pub fn stderr_without_ying(&self) -> String {
        let s = self.stderr_str();
        let mut out = String::new();
        for l in s.split_inclusive('\n') {
            if !l.starts_with("ying:") {
                out.push_str(l);
            }
        }
        out
    }

    /// Everything about the run, for failure messages.
    pub fn describe(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "  command: {}", self.command);
        if let Some(d) = &self.cwd {
            let _ = writeln!(o, "  cwd:     {}", d.display());
        }
        let vars: Vec<String> =
            self.vars.iter().map(|(k, v)| format!("{k}={}", shell_quote(v))).collect();
        let _ = writeln!(
            o,
            "  env set: {}",
            if vars.is_empty() { "(none)".into() } else { vars.join(" ") }
        );
        let _ = writeln!(o, "  (inherited YING_* and LD_PRELOAD removed)");
        let _ = writeln!(o, "  pid:     {}", self.pid);
        let _ = writeln!(o, "  status:  {} after {:.2?}", self.status_text(), self.elapsed);
        let _ =
            writeln!(o, "  --- stdout ({} bytes) ---\n{}", self.stdout.len(), shown(&self.stdout));
        let _ =
            writeln!(o, "  --- stderr ({} bytes) ---\n{}", self.stderr.len(), shown(&self.stderr));
        o
    }

    /// Panics with `msg` and [`Outcome::describe`] unless the run exited with 0 in time.
    pub fn assert_success(&self, msg: &str) {
        if !self.success() {
            panic!("{msg}: the program did not exit with 0\n{}", self.describe());
        }
    }
}

fn shown(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if s.len() <= SHOW_LIMIT {
        return s.into_owned();
    }
    let head: String = s.chars().take(SHOW_LIMIT / 2).collect();
    let tail: String = {
        let v: Vec<char> = s.chars().collect();
        v[v.len().saturating_sub(SHOW_LIMIT / 2)..].iter().collect()
    };
    format!("{head}\n[... {} bytes not shown ...]\n{tail}", s.len() - head.len() - tail.len())
}

/// The two runs of one program: without and with the shim (both with the object of
/// [`Run::preload_after`], if any).
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The run without the shim.
    pub without: Outcome,
    /// The run with the shim.
    pub with: Outcome,
    /// The reporting directory of the run with the shim.
    pub reports: PathBuf,
}

impl Comparison {
    /// Both runs and the reports, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "=== run WITHOUT the shim ===\n{}=== run WITH the shim ===\n{}=== reports in {} ===\n{}",
            self.without.describe(),
            self.with.describe(),
            self.reports.display(),
            list_dir(&self.reports)
        )
    }

    /// Panics with `msg` and everything known unless `cond`.
    pub fn check(&self, cond: bool, msg: impl AsRef<str>) {
        if !cond {
            panic!("{}\n{}", msg.as_ref(), self.describe());
        }
    }

    /// Asserts that the shim wrote nothing to stderr.
    pub fn assert_no_ying_lines(&self) {
        let lines = self.with.ying_lines();
        self.check(lines.is_empty(), format!("unexpected `ying:` lines on stderr: {lines:#?}"));
    }

    /// The report sets in the reporting directory.
    pub fn report_sets(&self) -> Vec<ReportSet> {
        report_sets(&self.reports)
    }

    /// The report sets written by the process the test started (its pid).
    pub fn main_reports(&self) -> Vec<ReportSet> {
        self.report_sets().into_iter().filter(|r| r.pid == self.with.pid).collect()
    }

    /// The last report set of the process the test started; panics (with everything known)
    /// when there is none.
    pub fn main_report(&self) -> ReportSet {
        match self.main_reports().pop() {
            Some(r) => r,
            None => panic!("no report set for pid {}\n{}", self.with.pid, self.describe()),
        }
    }
}

/// Runs `run` without the shim, then with it (its `YING_*` settings plus
/// `YING_REPORTING_PATH=<reports>`; an object of [`Run::preload_after`] is preloaded in both),
/// and asserts that both finished in time, exited the same
/// way and printed the same stdout, and that stderr differs only by `ying:` lines. The `ying:`
/// lines are not checked here: call [`Comparison::assert_no_ying_lines`] or inspect them.
pub fn compare(run: &Run, ying: &[(&str, &str)], reports: &Path) -> Comparison {
    let without = run.clone().without_preload().run();
    let with = shim_run(run, ying, reports).run();
    checked(Comparison { without, with, reports: reports.to_path_buf() })
}

/// The two runs of [`compare`] without its checks that both print the same and exit the same:
/// for a program whose output differs under the shim by design (a request the shim refuses).
pub fn compare_unchecked(run: &Run, ying: &[(&str, &str)], reports: &Path) -> Comparison {
    let without = run.clone().without_preload().run();
    let with = shim_run(run, ying, reports).run();
    Comparison { without, with, reports: reports.to_path_buf() }
}

/// As [`compare`], with both runs at the same time and the plain one given its own arguments
/// (`plain`, e.g. another notes file): for programs that mostly wait, whose output does not
/// depend on the arguments that differ.
pub fn compare_concurrently(
    plain: &Run,
    run: &Run,
    ying: &[(&str, &str)],
    reports: &Path,
) -> Comparison {
    let with_run = shim_run(run, ying, reports);
    let (without, with) = std::thread::scope(|s| {
        let without = s.spawn(|| plain.clone().without_preload().run());
        let with = with_run.run();
        (without.join().expect("the plain run's thread"), with)
    });
    checked(Comparison { without, with, reports: reports.to_path_buf() })
}

/// `run` with the shim, the `YING_*` settings and the reporting directory.
fn shim_run(run: &Run, ying: &[(&str, &str)], reports: &Path) -> Run {
    let mut with_run = run.clone().with_preload().envs(ying);
    if !ying.iter().any(|(k, _)| *k == "YING_REPORTING_PATH") {
        with_run = with_run.env("YING_REPORTING_PATH", reports.display().to_string());
    }
    with_run
}

/// The checks every comparison makes (see [`compare`]).
fn checked(c: Comparison) -> Comparison {
    c.check(
        c.without.spawn_error.is_none() && !c.without.timed_out,
        "the run WITHOUT the shim failed to run or timed out",
    );
    c.check(!c.with.timed_out, "the run WITH the shim timed out (deadlock or hang?)");
    c.check(c.with.spawn_error.is_none(), "the run WITH the shim could not be started");
    c.check(
        c.with.status == c.without.status,
        format!(
            "exit status differs: without the shim {}, with it {}",
            c.without.status_text(),
            c.with.status_text()
        ),
    );
    c.check(c.with.stdout == c.without.stdout, "stdout differs between the two runs");
    c.check(
        c.with.stderr_without_ying() == c.without.stderr_str(),
        "stderr differs between the two runs (beyond `ying:` lines)",
    );
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hanging_process_tree_is_killed_at_the_timeout() {
        // The shell and its background child both hold the pipes; both must go.
        let t = Instant::now();
        let o = Run::new("sh")
            .args(&["-c", "sleep 30 & sleep 30; echo never"])
            .timeout(Duration::from_millis(300))
            .run();
        assert!(o.timed_out, "{}", o.describe());
        assert!(!o.success());
        assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
        assert!(o.describe().contains("TIMED OUT"), "{}", o.describe());
    }

    #[test]
    fn the_plain_run_preloads_the_chained_object_alone() {
        let run = Run::new("true").env("LD_PRELOAD", "/other.so").preload_after("/x/liba.so");
        assert_eq!(run.preloaded_after(), Some(Path::new("/x/liba.so")));
        let vars = run.without_preload().vars();
        assert_eq!(vars, vec![("LD_PRELOAD".to_string(), "/x/liba.so".to_string())]);
        assert!(Run::new("true").vars().is_empty());
        let before = Run::new("true").preload_before("/y/libb.so");
        assert_eq!(before.clone().without_preload().vars()[0].1, "/y/libb.so");
        let with = before.with_preload().vars();
        let preload = with.iter().find(|(k, _)| k == "LD_PRELOAD").map(|(_, v)| v.as_str());
        assert_eq!(preload, Some(format!("/y/libb.so:{}", preload_lib().display()).as_str()));
    }

    #[test]
    fn outcome_reports_status_output_and_vars() {
        let o = Run::new("sh")
            .args(&["-c", "echo out; echo ying: x >&2; echo err >&2; exit 3"])
            .env("FOO", "a b")
            .run();
        assert_eq!(o.code(), Some(3));
        assert_eq!(o.stdout_str(), "out\n");
        assert_eq!(o.ying_lines(), vec!["ying: x".to_string()]);
        assert_eq!(o.stderr_without_ying(), "err\n");
        let d = o.describe();
        assert!(d.contains("FOO='a b'") && d.contains("exit 3") && d.contains("sh -c"), "{d}");
    }
}
