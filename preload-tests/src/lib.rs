//! Black-box tests of `libying.so`, the `LD_PRELOAD` shim of the Ying memory profiler.
//!
//! # Approach
//!
//! Every test runs real programs twice: once as they are and once with
//! `LD_PRELOAD=<libying.so>` and `YING_*` settings. A profiler must be invisible to the program
//! it profiles, so the two runs must print the same standard output and end with the same exit
//! status; standard error may differ only by lines starting with `ying:` (the shim's own
//! messages), and a test says which of those it expects (usually none). The programs are small C
//! and C++ files in `programs/`, compiled by the system `cc`/`c++` with `-g -O1` into a fresh
//! temporary directory per test, plus installed tools (python3, perl, gcc, a shell pipeline).
//!
//! Where the test knows what the program allocated, it runs in *exact mode*
//! (`YING_SAMPLE_INTERVAL_BYTES=1`: every allocation is sampled with weight one) and compares
//! the report with the program's own arithmetic, to the byte. Allocations happen in
//! `__attribute__((noinline))` marker functions with distinctive sizes, and
//! [`Folded::bytes_through`] sums the bytes of every stack that passes through a marker. The
//! `.folded` file is the easiest report to parse (`root;...;leaf <bytes>`, retained bytes by
//! default, allocated bytes with `YING_MEASURE_ALLOCATED_NOT_RETAINED=true`); the text report
//! is parsed by [`TextReport`] to check counts and that frames name `file:line`.
//!
//! # Rules every test follows
//!
//! * The shim is not built here: [`preload_lib`] finds `YING_TEST_PRELOAD` or
//!   `<workspace>/target/release/libying.so` and fails with a message to run
//!   `cargo build --release` when it is missing.
//! * Every child runs with a timeout ([`DEFAULT_TIMEOUT`]) in its own process group, which is
//!   killed (`kill -KILL -- -<pgid>`) when time runs out, so a deadlock fails a test instead of
//!   hanging the suite.
//! * Every failure message shows the full command line, the variables set, the exit status,
//!   stdout and stderr ([`Outcome::describe`]) and the report files found.
//! * Each test has its own [`TestDir`] (compiled programs, reporting directories), removed when
//!   the test passes and kept (its path printed) when it fails. Tests can run in parallel.
//! * Inherited `YING_*` and `LD_PRELOAD` variables are removed from every child's environment,
//!   so a developer's settings cannot change the results.
//! * `cc`, `c++` and `nm` are required. A test that needs an optional tool (python3, perl, gcc,
//!   the coreutils of the pipeline) prints `SKIPPED: ...` and passes when it is not installed.
//!
//! # Writing test programs
//!
//! Compilers delete a `malloc` whose block is never observably used (even at `-O1`), which
//! silently removes the very allocation a test counts. Programs therefore keep blocks in
//! non-static globals, read them back into a printed checksum, or store them into a
//! `volatile` sink before `free`. Marker sizes are odd numbers unlikely to occur elsewhere, and
//! each test file mirrors its program's constants with a comment saying so.
//!
//! # The test files
//!
//! | file | what it covers |
//! |---|---|
//! | `exports.rs` | every exported function against glibc (`programs/exports.c`); `nm -D` symbol set |
//! | `exact.rs` | exact-mode bytes and counts per marker, retained and allocated; `file:line` |
//! | `threads.rs` | 16 threads with cross-thread frees and reallocs |
//! | `fork.rs` | fork, fork + exec, forks while other threads allocate |
//! | `exit.rs` | `exit()` from a non-main thread while others allocate |
//! | `cxx.rs` | new/delete, new[]/delete[], aligned new; demangled names |
//! | `real_programs.rs` | python3 (threads, multiprocessing), perl, gcc, a shell pipeline, `YING_ONLY_EXE` |
//! | `dlopen.rs` | dlopen and dynamic TLS from 8 threads (C and python3 imports) |
//! | `bad_config.rs` | invalid values, unusable reporting paths, giant allocations |
//! | `settings.rs` | reporting switched off, periodic reports, no flamegraphs, relative paths, old sets removed beyond `YING_MAX_REPORT_SETS` |
//! | `thread_life.rs` | threads that end unseen, `pthread_getattr_np` at thread start, small stacks |
//! | `cancellation.rs` | `malloc` is never a cancellation point (giant refusals, samples) |
//! | `signal_alloc.rs` | samples in a signal handler that interrupted `calloc` (glibc's arena lock held) |
//! | `stress.rs` | the thread, cancellation and fork patterns looped over seeds and intervals |
//! | `report_files.rs` | file modes, symbolic links on the path, planted names, `chdir`, reopened stderr |
//! | `dlclose.rs` | a library closed and another loaded at its base: named and unwound as itself |
//! | `aligned.rs` | the aligned allocation family against glibc for impossible alignments and sizes |
//! | `report_memory.rs` | the profiler memory a 20,000-stack exit report takes, against the README's formula |
//! | `mmap.rs` | anonymous mappings per marker in exact mode, `YING_TRACK_MMAP=false`, Python's arenas, threads and forks mapping at once |
//! | `process.rs` | single-threaded start, `unshare --user`, no report without a sample, exit during a dump, foreign `malloc` |
//! | `run_script.rs` | `scripts/run-with-ying.sh`: a shell wrapper's helpers write no set, the summary for static binaries, unwritable and stale directories |
//! | `cpython_suites.rs` | CPython's `test_subprocess`, `test_threading`, `test_os`, `test_signal`, `test_mmap`: every case that passes plain passes under the shim |
//! | `wait_points.rs` | the report thread starts at each kind of wait (sleep, poll, select, read, condition, signal and child waits, accept), never in a signal handler or a `vfork` child; dispositions read back as installed; one line at exit when it never started |
//! | `descriptors.rs` | no descriptor of Ying's in `/proc/self/fd` between reports, a program at its `RLIMIT_NOFILE` keeps every slot, low descriptors closed under the endpoint, a worker that changed user is told once |
//! | `lifecycle.rs` | a `main` that ends with `pthread_exit` ends with its last thread, `exit` from three threads at once, from an `atexit` handler and during a dump: one complete set, no temporary file; CPython's `test_3_join_in_forked_from_thread` |
//! | `seccomp.rs` | filters installed with `prctl` and `syscall(SYS_seccomp)`, with and without `TSYNC`, that kill, trap or fail each call Ying makes: the program lives as in the plain run; harmless filters change nothing; strict mode |
//!
//! Tests of known shim/engine bugs are `#[ignore = "bug: ..."]`; run them with
//! `cargo test -p preload-tests -- --ignored`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long any child may run before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of stdout/stderr shown in a failure message (head and tail are kept).
const SHOW_LIMIT: usize = 64 * 1024;

/// The workspace root (the parent of this package).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// This package's directory.
pub fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of the C/C++ test programs.
pub fn programs_dir() -> PathBuf {
    package_dir().join("programs")
}

/// The shim under test: `$YING_TEST_PRELOAD`, or `<workspace>/target/release/libying.so`.
///
/// # Panics
/// When the file does not exist, with instructions to build it (tests never build it).
pub fn preload_lib() -> PathBuf {
    let (path, origin) = match std::env::var_os("YING_TEST_PRELOAD") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), "YING_TEST_PRELOAD"),
        _ => (workspace_root().join("target/release/libying.so"), "the default location"),
    };
    let path = if path.is_relative() {
        std::env::current_dir().map(|d| d.join(&path)).unwrap_or(path)
    } else {
        path
    };
    if !path.is_file() {
        let target_dir = match std::env::var("CARGO_TARGET_DIR") {
            Ok(d) if !d.is_empty() => format!(
                " CARGO_TARGET_DIR is set: with it the shim is built as {d}/release/libying.so, \
                 so set YING_TEST_PRELOAD to that path."
            ),
            _ => String::new(),
        };
        panic!(
            "libying.so not found at {} ({origin}).\n\
             Build the shim first: run `cargo build --release` at the workspace root \
             (or `cargo build --release -p ying-preload`), or point YING_TEST_PRELOAD at a \
             built libying.so. The preload tests do not build it themselves.{target_dir}",
            path.display()
        );
    }
    path
}

/// Looks `name` up in `PATH` (like `command -v`), returning the first executable file.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    })
}

/// Like [`find_in_path`], but a missing tool is a reason to skip the calling test: prints a
/// loud notice and returns `None`.
pub fn require_tool(name: &str) -> Option<PathBuf> {
    let found = find_in_path(name);
    if found.is_none() {
        eprintln!("SKIPPED: `{name}` is not installed (not in PATH); this test needs it");
    }
    found
}

/// The real python3 interpreter (`sys.executable` with symlinks resolved, not a wrapper script
/// such as a pyenv shim) and its file name as reports name it; `None` (skip) when not installed.
pub fn python3() -> Option<(PathBuf, String)> {
    let p = require_tool("python3")?;
    let o =
        Run::new(&p).args(&["-c", "import os, sys; print(os.path.realpath(sys.executable))"]).run();
    o.assert_success("asking python3 for its executable");
    let real = PathBuf::from(o.stdout_str().trim());
    let file = real.file_name()?.to_string_lossy().into_owned();
    Some((real, file))
}

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// A per-test scratch directory under [`std::env::temp_dir`], unique per test and process.
/// Removed on drop if the test passed; kept (and its path printed) if the test panicked.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// Creates `<tmp>/ying-preload-tests/<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir()
            .join("ying-preload-tests")
            .join(format!("{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create test dir {}: {e}", path.display()));
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// A fresh, not yet existing reporting directory inside this one.
    pub fn reports(&self, name: &str) -> PathBuf {
        let p = self.path.join(format!("reports-{name}"));
        assert!(!p.exists(), "reporting dir {} used twice", p.display());
        p
    }

    /// Compiles `programs/<source>` with `cc -g -O1` (plus `extra` flags) into this directory
    /// and returns the executable's path (named after the source file, without extension).
    pub fn compile_c(&self, source: &str, extra: &[&str]) -> PathBuf {
        self.compile("cc", &[], source, extra)
    }

    /// Compiles `programs/<source>` with `c++ -std=c++17 -g -O1` (plus `extra`).
    pub fn compile_cxx(&self, source: &str, extra: &[&str]) -> PathBuf {
        self.compile("c++", &["-std=c++17"], source, extra)
    }

    /// Compiles `programs/<source>`, a one-file Rust program, with `rustc -O` (the toolchain
    /// that runs the tests) and returns the executable's path.
    pub fn compile_rust(&self, source: &str) -> PathBuf {
        let src = programs_dir().join(source);
        assert!(src.is_file(), "missing test program {}", src.display());
        let stem = Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
        let out = self.path.join(stem);
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let o = Run::new(rustc)
            .args(&["-O", "--edition", "2021", "-g", "-o"])
            .arg(&out)
            .arg(&src)
            .timeout(Duration::from_secs(300))
            .run();
        if !o.success() {
            panic!("compiling {} failed\n{}", src.display(), o.describe());
        }
        out
    }

    fn compile(&self, compiler: &str, pre: &[&str], source: &str, extra: &[&str]) -> PathBuf {
        let src = programs_dir().join(source);
        assert!(src.is_file(), "missing test program {}", src.display());
        let stem = Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
        let shared = extra.contains(&"-shared");
        let out = self.path.join(if shared { format!("lib{stem}.so") } else { stem.to_string() });
        let mut args: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
        args.extend(["-g", "-O1", "-Wall"].iter().map(|s| s.to_string()));
        args.push(src.display().to_string());
        args.push("-o".into());
        args.push(out.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = Run::new(compiler).args(&args).run();
        if !o.success() {
            panic!("compiling {} failed\n{}", src.display(), o.describe());
        }
        out
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed: its files are kept in {}", self.path.display());
            return;
        }
        // Undo read-only permissions a test may have set, then remove everything.
        make_writable(&self.path);
        let _ = std::fs::remove_dir_all(&self.path);
        // The common parent goes too once the last test is done with it.
        if let Some(parent) = self.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            make_writable(&p);
        }
    }
}

/// One child process to run: program, arguments, variables, working directory, timeout, and
/// whether to preload the shim.
#[derive(Debug, Clone)]
pub struct Run {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    timeout: Duration,
    preload: bool,
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

    /// The same run without the shim.
    pub fn without_preload(mut self) -> Self {
        self.preload = false;
        self
    }

    /// The variables this run sets, `LD_PRELOAD` included.
    pub fn vars(&self) -> Vec<(String, String)> {
        let mut v = self.env.clone();
        if self.preload {
            v.retain(|(k, _)| k != "LD_PRELOAD");
            v.push(("LD_PRELOAD".to_string(), preload_lib().display().to_string()));
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

/// The two runs of one program: without and with the shim.
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
/// `YING_REPORTING_PATH=<reports>`), and asserts that both finished in time, exited the same
/// way and printed the same stdout, and that stderr differs only by `ying:` lines. The `ying:`
/// lines are not checked here: call [`Comparison::assert_no_ying_lines`] or inspect them.
pub fn compare(run: &Run, ying: &[(&str, &str)], reports: &Path) -> Comparison {
    let without = run.clone().without_preload().run();
    let with = shim_run(run, ying, reports).run();
    checked(Comparison { without, with, reports: reports.to_path_buf() })
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

/// Lists a directory (names and sizes), for failure messages.
pub fn list_dir(dir: &Path) -> String {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return format!("  ({} does not exist or cannot be read)\n", dir.display());
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            format!("  {} ({len} bytes)", e.file_name().to_string_lossy())
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return "  (empty)\n".to_string();
    }
    names.join("\n") + "\n"
}

/// One report set: the files `ying.<exe>.<pid>.<seq>.<UTC>.{txt,folded,svg,...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportSet {
    /// The directory.
    pub dir: PathBuf,
    /// The common stem, `ying.<exe>.<pid>.<seq>.<UTC>`.
    pub stem: String,
    /// The executable's file name (as sanitized by the shim).
    pub exe: String,
    /// The pid of the process that wrote it.
    pub pid: u32,
    /// Sequence number within that process.
    pub seq: u64,
    /// The extensions present (`txt`, `folded`, `svg`, ...).
    pub extensions: Vec<String>,
}

impl ReportSet {
    /// Path of the file with extension `ext`.
    pub fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.stem))
    }

    /// Whether a file with `ext` exists.
    pub fn has(&self, ext: &str) -> bool {
        self.extensions.iter().any(|e| e == ext)
    }

    /// The text report.
    pub fn text(&self) -> String {
        std::fs::read_to_string(self.path("txt"))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.path("txt").display()))
    }

    /// The parsed text report.
    pub fn text_report(&self) -> TextReport {
        TextReport::parse(&self.text())
    }

    /// The raw folded file.
    pub fn folded_text(&self) -> String {
        std::fs::read_to_string(self.path("folded"))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.path("folded").display()))
    }

    /// The parsed folded file.
    pub fn folded(&self) -> Folded {
        Folded::parse(&self.folded_text())
    }
}

/// Splits a report file name into (stem, exe, pid, seq, extension); `None` for other files.
pub fn parse_report_name(name: &str) -> Option<(String, String, u32, u64, String)> {
    let rest = name.strip_prefix("ying.")?;
    if name.starts_with(".ying.") || name.ends_with(".tmp") {
        return None;
    }
    // The extension is everything after the timestamp: `txt`, `folded`, `svg`, `pb.gz`...
    // Parse from the right: `<exe>.<pid>.<seq>.<UTC>.<ext>`, where `<exe>` may contain dots.
    let parts: Vec<&str> = rest.split('.').collect();
    let ts_idx = parts.iter().rposition(|p| is_timestamp(p))?;
    if ts_idx < 3 {
        return None;
    }
    let ext = parts[ts_idx + 1..].join(".");
    if ext.is_empty() {
        return None;
    }
    let seq: u64 = parts[ts_idx - 1].parse().ok()?;
    let pid: u32 = parts[ts_idx - 2].parse().ok()?;
    let exe = parts[..ts_idx - 2].join(".");
    let stem = format!("ying.{}", parts[..=ts_idx].join("."));
    Some((stem, exe, pid, seq, ext))
}

fn is_timestamp(s: &str) -> bool {
    // yyyymmddThhmmssZ
    let b = s.as_bytes();
    b.len() == 16
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

/// Every report set in `dir`, ordered by pid then sequence number (empty if `dir` is missing).
pub fn report_sets(dir: &Path) -> Vec<ReportSet> {
    let mut sets: BTreeMap<(u32, u64, String), ReportSet> = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((stem, exe, pid, seq, ext)) = parse_report_name(&name) else { continue };
        sets.entry((pid, seq, stem.clone()))
            .or_insert_with(|| ReportSet {
                dir: dir.to_path_buf(),
                stem,
                exe,
                pid,
                seq,
                extensions: Vec::new(),
            })
            .extensions
            .push(ext);
    }
    let mut v: Vec<ReportSet> = sets.into_values().collect();
    for s in &mut v {
        s.extensions.sort();
    }
    v
}

/// Whether a frame name is the function `name`: equal, or `name(` followed by C++ parameter
/// types (demangled names such as `marker_new(unsigned long)`).
pub fn frame_is(frame: &str, name: &str) -> bool {
    frame == name || frame.strip_prefix(name).is_some_and(|rest| rest.starts_with('('))
}

/// One line of a `.folded` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedStack {
    /// Frames, root first.
    pub frames: Vec<String>,
    /// The weight (bytes).
    pub bytes: u64,
}

/// A parsed `.folded` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    /// Every line.
    pub stacks: Vec<FoldedStack>,
}

impl Folded {
    /// Parses `root;...;leaf <bytes>` lines.
    ///
    /// # Panics
    /// On a line without a numeric weight.
    pub fn parse(text: &str) -> Self {
        let stacks = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (frames, bytes) =
                    l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
                let bytes = bytes.parse().unwrap_or_else(|_| panic!("bad folded weight in {l:?}"));
                FoldedStack { frames: frames.split(';').map(String::from).collect(), bytes }
            })
            .collect();
        Self { stacks }
    }

    /// Sum of the weights of every stack with a frame that is `func` (see [`frame_is`]).
    pub fn bytes_through(&self, func: &str) -> u64 {
        self.stacks_through(func).map(|s| s.bytes).sum()
    }

    /// The stacks with a frame that is `func`.
    pub fn stacks_through<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a FoldedStack> {
        self.stacks.iter().filter(move |s| s.frames.iter().any(|f| frame_is(f, func)))
    }

    /// Sum of all weights.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.bytes).sum()
    }
}

/// One frame line of a text report: `     function (file:line)` with an optional ` [inlined]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFrame {
    /// The function (C++ parameter lists included).
    pub function: String,
    /// `file:line` or `file`, when given.
    pub location: Option<String>,
    /// Whether marked `[inlined]`.
    pub inlined: bool,
}

/// One `#N` block of a text report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackBlock {
    /// Rank (`#N`).
    pub rank: u64,
    /// Retained bytes.
    pub retained_bytes: u64,
    /// Retained allocations.
    pub retained_count: u64,
    /// Allocated bytes.
    pub allocated_bytes: u64,
    /// Allocations.
    pub allocations: u64,
    /// Freed bytes.
    pub freed_bytes: u64,
    /// Frees.
    pub frees: u64,
    /// Frames, innermost first.
    pub frames: Vec<TextFrame>,
}

impl StackBlock {
    /// Whether a frame is `func`.
    pub fn goes_through(&self, func: &str) -> bool {
        self.frames.iter().any(|f| frame_is(&f.function, func))
    }
}

/// One `peak #N` block of a text report's PEAK section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeakBlock {
    /// Rank (`peak #N`).
    pub rank: u64,
    /// Bytes retained at the kept peak.
    pub bytes: u64,
    /// Allocations retained at the kept peak.
    pub count: u64,
    /// Frames, innermost first.
    pub frames: Vec<TextFrame>,
}

impl PeakBlock {
    /// Whether a frame is `func`.
    pub fn goes_through(&self, func: &str) -> bool {
        self.frames.iter().any(|f| frame_is(&f.function, func))
    }
}

/// A text report's PEAK section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeakSection {
    /// The high-water mark of the sampled estimate.
    pub high_water: u64,
    /// The estimated retained bytes at the kept peak.
    pub estimated: u64,
    /// The exact retained bytes at the kept peak, when read.
    pub exact: Option<u64>,
    /// The `peak #N` blocks in order.
    pub blocks: Vec<PeakBlock>,
}

/// A parsed text report: the header lines (`key: value`) and the stack blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextReport {
    /// Header fields before the first blank line, keyed by the text before the first `:`.
    pub header: BTreeMap<String, String>,
    /// The `#N` blocks in order.
    pub blocks: Vec<StackBlock>,
    /// The PEAK section, when there is one with a kept peak.
    pub peak: Option<PeakSection>,
}

/// Parses the lines of a PEAK section (after its `PEAK` line) up to its end.
fn parse_peak<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Option<PeakSection> {
    let mut p = PeakSection::default();
    let mut kept = false;
    let mut cur: Option<PeakBlock> = None;
    let mut in_frames = false;
    for line in lines {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("high-water (sampled):") {
            p.high_water = paren_bytes(rest).unwrap_or_else(|| bad_line(line));
        } else if let Some(rest) = t.strip_prefix("kept peak:") {
            kept = true;
            let (est, exact) = rest.split_once(" estimated, ").unwrap_or_else(|| bad_line(line));
            p.estimated = paren_bytes(est).unwrap_or_else(|| bad_line(line));
            p.exact = paren_bytes(exact);
        } else if let Some(rest) = line.strip_prefix("peak #") {
            if let Some(b) = cur.take() {
                p.blocks.push(b);
            }
            let (rank, rest) = rest.split_once(": ").unwrap_or_else(|| bad_line(line));
            cur = Some(PeakBlock {
                rank: rank.parse().unwrap_or_else(|_| bad_line(line)),
                bytes: paren_bytes(rest).unwrap_or_else(|| bad_line(line)),
                count: number_before(rest, " allocations").unwrap_or_else(|| bad_line(line)),
                frames: Vec::new(),
            });
            in_frames = false;
        } else if t == "frames:" {
            in_frames = true;
        } else if t.is_empty() {
            in_frames = false;
        } else if in_frames && t != "[no frames]" {
            if let Some(b) = cur.as_mut() {
                b.frames.push(parse_frame(t));
            }
        } else if line.starts_with("giant allocation refused") {
            break;
        }
    }
    if let Some(b) = cur.take() {
        p.blocks.push(b);
    }
    kept.then_some(p)
}

fn bad_line<T>(line: &str) -> T {
    panic!("cannot parse text report line {line:?}")
}

/// The first number in parentheses followed by ` bytes`, e.g. `1.0 MiB (1100100 bytes, ...)`.
fn paren_bytes(s: &str) -> Option<u64> {
    let open = s.find('(')?;
    let rest = &s[open + 1..];
    let end = rest.find(" bytes")?;
    rest[..end].trim().parse().ok()
}

/// The number just before `word` (e.g. `in 100 allocations`).
fn number_before(s: &str, word: &str) -> Option<u64> {
    let i = s.find(word)?;
    s[..i].split_whitespace().last()?.parse().ok()
}

/// Splits `function (location)` where the location looks like a path or `file:line`.
fn parse_frame(line: &str) -> TextFrame {
    let mut s = line.trim();
    let mut inlined = false;
    if let Some(x) = s.strip_suffix(" [inlined]") {
        s = x;
        inlined = true;
    }
    if let Some(i) = s.rfind(" (").filter(|_| s.ends_with(')')) {
        let loc = &s[i + 2..s.len() - 1];
        let looks_like_location = loc.contains('/')
            || loc.rsplit_once(':').is_some_and(|(f, l)| {
                !f.is_empty() && !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit())
            });
        if looks_like_location {
            return TextFrame {
                function: s[..i].to_string(),
                location: Some(loc.to_string()),
                inlined,
            };
        }
    }
    TextFrame { function: s.to_string(), location: None, inlined }
}

/// Reads a block's `retained ...` or `allocated ...; freed ...` line (`t`, without its rank or
/// indentation) into `b`; false when `t` is neither.
fn parse_figures(b: &mut StackBlock, t: &str, line: &str) -> bool {
    if let Some(rest) = t.strip_prefix("retained ") {
        b.retained_bytes = paren_bytes(rest).unwrap_or_else(|| bad_line(line));
        b.retained_count = number_before(rest, " allocations").unwrap_or_else(|| bad_line(line));
        true
    } else if let Some(rest) = t.strip_prefix("allocated ") {
        let (alloc, freed) = rest.split_once("; freed ").unwrap_or_else(|| bad_line(line));
        b.allocated_bytes = paren_bytes(alloc).unwrap_or_else(|| bad_line(line));
        b.allocations = number_before(alloc, " allocations").unwrap_or_else(|| bad_line(line));
        b.freed_bytes = number_before(freed, " bytes").unwrap_or_else(|| bad_line(line));
        b.frees = number_before(freed, " frees").unwrap_or_else(|| bad_line(line));
        true
    } else {
        false
    }
}

impl TextReport {
    /// Parses the format written by `src/report/text.rs`: each block leads with the figure the
    /// report ranks by (retained, or allocated with `YING_MEASURE_ALLOCATED_NOT_RETAINED`).
    ///
    /// # Panics
    /// When a `#N` block's figures cannot be read.
    pub fn parse(text: &str) -> Self {
        let mut r = TextReport::default();
        let mut in_header = true;
        let mut cur: Option<StackBlock> = None;
        let mut in_frames = false;
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line == "PEAK" {
                r.peak = parse_peak(&mut lines);
                break;
            }
            if in_header {
                if line.trim().is_empty() {
                    in_header = false;
                } else if let Some((k, v)) = line.split_once(':') {
                    r.header.insert(k.trim().to_string(), v.trim().to_string());
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                if let Some(b) = cur.take() {
                    r.blocks.push(b);
                }
                let (rank, rest) = rest.split_once(' ').unwrap_or_else(|| bad_line(line));
                let mut b = StackBlock {
                    rank: rank.parse().unwrap_or_else(|_| bad_line(line)),
                    ..StackBlock::default()
                };
                // The figure the report ranks by comes first: retained or allocated.
                if !parse_figures(&mut b, rest, line) {
                    bad_line::<()>(line);
                }
                cur = Some(b);
                in_frames = false;
                continue;
            }
            let Some(b) = cur.as_mut() else { continue };
            let t = line.trim_start();
            if !in_frames && parse_figures(b, t, line) {
                continue;
            }
            if t == "frames:" {
                in_frames = true;
            } else if in_frames && !t.is_empty() && t != "[no frames]" {
                b.frames.push(parse_frame(t));
            } else if t.is_empty() {
                in_frames = false;
            }
        }
        if let Some(b) = cur.take() {
            r.blocks.push(b);
        }
        r
    }

    /// A header value's `(N bytes)` figure, e.g. `retained (exact)`.
    pub fn header_bytes(&self, key: &str) -> Option<u64> {
        paren_bytes(self.header.get(key)?)
    }

    /// The blocks whose stack goes through `func`.
    pub fn blocks_through<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a StackBlock> {
        self.blocks.iter().filter(move |b| b.goes_through(func))
    }

    /// The frames named `func` in any block.
    pub fn frames_named<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a TextFrame> {
        self.blocks.iter().flat_map(|b| &b.frames).filter(move |f| frame_is(&f.function, func))
    }
}

/// The 1-based line of `programs/<source>` containing `tag` (a `TAG:<name>` comment).
///
/// # Panics
/// When the tag is missing or appears twice.
pub fn tagged_line(source: &str, tag: &str) -> u32 {
    let path = programs_dir().join(source);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let hits: Vec<usize> =
        text.lines().enumerate().filter(|(_, l)| l.contains(tag)).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1, "tag {tag:?} must appear exactly once in {}", path.display());
    hits[0] as u32
}

/// The `YING_*` settings of a quiet, deterministic profile in exact mode: every allocation
/// sampled, no report thread, a fixed seed, many stacks listed.
pub const EXACT: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
    ("YING_CHECK_INTERVAL_SECS", "0"),
    ("YING_SEED", "1"),
    ("YING_TOP_K", "1000"),
];

/// The `chunks <marker> <allocated> <freed>` line for `marker` in `file`, which a test program
/// writes when `$CHUNKS_FILE` names it: the glibc chunk bytes (what the shim counts) the program
/// allocated and freed under the marker, counted by the program itself.
pub fn chunk_counts(file: &Path, marker: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(marker))?;
    let mut f = line.split_whitespace().skip(2).map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// Exact mode, ranked (and folded) by allocated bytes.
pub const EXACT_ALLOCATED: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
    ("YING_CHECK_INTERVAL_SECS", "0"),
    ("YING_SEED", "1"),
    ("YING_TOP_K", "1000"),
    ("YING_MEASURE_ALLOCATED_NOT_RETAINED", "true"),
];

/// Default sampling, no report thread.
pub const QUIET: &[(&str, &str)] = &[("YING_CHECK_INTERVAL_SECS", "0"), ("YING_SEED", "1")];

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

    #[test]
    fn report_names_parse_from_the_right() {
        let n = "ying.python3.11.1234.0.20261202T115021Z.folded";
        assert_eq!(
            parse_report_name(n),
            Some((
                "ying.python3.11.1234.0.20261202T115021Z".to_string(),
                "python3.11".to_string(),
                1234,
                0,
                "folded".to_string()
            ))
        );
        let n = "ying.x.7.12.20261202T115021Z.pb.gz";
        assert_eq!(parse_report_name(n).map(|p| (p.2, p.3, p.4)), Some((7, 12, "pb.gz".into())));
        assert_eq!(parse_report_name(".ying.x.7.1.20261202T115021Z.txt.7.0.tmp"), None);
        assert_eq!(parse_report_name("other.txt"), None);
    }

    #[test]
    fn folded_and_frames() {
        let f = Folded::parse(
            "a;main;marker_new(unsigned long);operator new(unsigned long) 10\nb;marker_new 5\nmarker_newer 7\n",
        );
        assert_eq!(f.bytes_through("marker_new"), 15);
        assert_eq!(f.bytes_through("operator new"), 10);
        assert_eq!(f.total(), 22);
    }

    #[test]
    fn text_blocks_parse() {
        let t = "Ying memory profile\nretained (exact):   1.1 MiB (1107712 bytes)\n\n\
                 #1 retained 1.0 MiB (1100100 bytes, 99.4% of estimated) in 100 allocations\n   \
                 allocated 1.0 MiB (1100100 bytes, 97.0% of estimated) in 100 allocations; freed 5 bytes in 2 frees\n   \
                 samples: 100 (100 live)\n   frames:\n     marker_keep (/tmp/yt/m.c:5)\n     \
                 marker_new(unsigned long) (/x/cxx.cpp:9) [inlined]\n     operator new(unsigned long)\n     _start\n\n";
        let r = TextReport::parse(t);
        assert_eq!(r.header_bytes("retained (exact)"), Some(1107712));
        let b = &r.blocks[0];
        assert_eq!((b.rank, b.retained_bytes, b.retained_count), (1, 1100100, 100));
        assert_eq!(
            (b.allocated_bytes, b.allocations, b.freed_bytes, b.frees),
            (1100100, 100, 5, 2)
        );
        assert_eq!(b.frames[0].location.as_deref(), Some("/tmp/yt/m.c:5"));
        assert_eq!(b.frames[1].function, "marker_new(unsigned long)");
        assert!(b.frames[1].inlined);
        assert_eq!(b.frames[2].location, None);
        assert_eq!(b.frames[2].function, "operator new(unsigned long)");
        assert!(b.goes_through("marker_new"));
        // Ranked by allocated bytes, the allocated line leads.
        let t = "Ying memory profile\n\n\
                 #1 allocated 2.0 MiB (2097152 bytes, 99.4% of estimated) in 16 allocations; freed 2097152 bytes in 16 frees\n   \
                 retained 0 B (0 bytes, 0.0% of estimated) in 0 allocations\n   \
                 samples: 4 (0 live)\n   frames:\n     marker_churn (/tmp/yt/m.c:7)\n\n";
        let b = &TextReport::parse(t).blocks[0];
        assert_eq!((b.rank, b.retained_bytes, b.retained_count), (1, 0, 0));
        assert_eq!(
            (b.allocated_bytes, b.allocations, b.freed_bytes, b.frees),
            (2097152, 16, 2097152, 16)
        );
        assert!(b.goes_through("marker_churn"));
    }
}
