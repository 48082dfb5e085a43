//! [`ProfilerRunner`]: the background thread that decides when collected stats become reports,
//! and [`gen_flamegraph`] for a one-off SVG.
//!
//! # When a report is written
//!
//! The runner wakes every `check_interval_secs`, reads the *exact* total of retained bytes and
//! compares it with the level at the last report it wrote. If it moved (up or down) by at least
//! `report_pct_change_trigger` percent of that level, a report set is written and the level is
//! updated. The first check always writes a baseline report. While a dump trigger is armed (a
//! dump signal, the control files, a memory limit, new-peak dumps: `src/triggers/`), the
//! thread also wakes every 100 ms to look at them, and writes a set when one fires, its reason
//! on the text report's `reason:` line. With `report_at_exit` (the
//! default), a final report set is written when the process exits through `exit()` or by
//! returning from `main`, once, from an `atexit` handler registered when the runner starts;
//! the exit waits (at most 30 s) for a periodic report being written, so that no set is cut off
//! between its files. A `fork` child of a program using the `#[global_allocator]` front end
//! writes no exit report (see [`ProfileSource::reports_in_fork_children`]); under the preload
//! shim, a child that took samples of its own writes its own. Neither a check nor the exit
//! writes anything for a process that took no sample (nor refused a giant allocation) since it
//! started or forked: its report would list no stack of its own.
//! The runner's thread is marked as profiler code, so its own allocations never show up.
//!
//! On demand, [`RunnerHandle::dump_now`] writes a set at once (on the runner's thread, or on
//! the calling thread when the runner has none) and returns its paths. Report sets are written
//! one at a time in the process. After each set, a runner removes its process's oldest sets
//! beyond [`ProfilerRunnerBuilder::max_report_sets`] ([`DEFAULT_MAX_REPORT_SETS`]).
//!
//! # Where reports go
//!
//! The reporting path is resolved once, when the runner starts ([`ProfilerRunner::spawn_for`],
//! or the first report of a runner that was never spawned): a relative path is joined to the
//! working directory of that moment, the directory is created without following any symbolic
//! link and identified by (absolute path, device, inode) (see [`report::files`]); every later
//! report opens that same directory again, checks it is still the one identified, writes and
//! closes it, whatever the program does with its working directory. No descriptor of Ying's
//! stays open between reports, and a report opens nothing while fewer than
//! eight descriptors (`sys::FD_HEADROOM`) are free under `RLIMIT_NOFILE` (it is
//! skipped, with one warning per process). Report files are created with mode 0600 unless
//! [`ProfilerRunnerBuilder::report_file_mode`] widens it.
//!
//! A process about to change user (a daemon's worker calling `setuid`, seen by the shim) that
//! is still root gets `uid-<N>` inside the reporting directory, given to the new user, and
//! writes there from then on ([`ProfilerRunner::dir_for_new_user`]). One that changed user
//! otherwise and may not write in the directory gets one line per process naming its uid, the
//! directory and its owner, and `YING_REPORTING_PATH`, instead of one failure per report.

use std::alloc::GlobalAlloc;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::YingProfiler;
use crate::callstack::Measurement;
use crate::engine::SAMPLED;
use crate::report::files::{DEFAULT_FILE_MODE, ReportDir};
use crate::report::foreign_malloc;
use crate::report::snapshot::Snapshot;
use crate::report::{self, ReportContext, ReportOptions, ReportPaths};
use crate::sys::gettid;

/// Default reporting directory.
pub const DEFAULT_REPORTING_PATH: &str = "ying-profiles";
/// Default seconds between checks.
pub const DEFAULT_CHECK_INTERVAL_SECS: usize = 300;
/// Default percentage change of retained memory that triggers a report.
pub const DEFAULT_PCT_CHANGE_TRIGGER: usize = 10;
/// Default number of stacks in a text report.
pub const DEFAULT_TOP_K: usize = 20;
/// Default number of report sets of one process kept in the reporting directory (0 keeps all).
///
/// A set is a few kilobytes to a few megabytes (the flamegraphs and folded stacks hold at most
/// 2,000 stacks each, twice with the peak's), so 50 sets stay within a few hundred megabytes
/// even for a large program; and as periodic reports are written only when retained memory
/// moved by the trigger (10 %) at a check (every 5 minutes), 50 sets span at least four hours
/// of a program whose memory changes at every check, and usually days. Older sets are what a
/// long-running service no longer needs; the newest ones, and the exit report, are kept.
pub const DEFAULT_MAX_REPORT_SETS: usize = 50;
/// Default longest wait of [`RunnerHandle::dump_now`] for the report thread.
pub const DEFAULT_DUMP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a runner gets its snapshots: the `#[global_allocator]` profiler or the preload shim.
///
/// Both front ends keep their stacks in the same tables, so report sets are written from those
/// tables directly (a compact snapshot, see `src/report/snapshot.rs`); a source supplies the
/// sample interval and the guard its reports run under.
pub trait ProfileSource: Send + Sync + 'static {
    /// Everything known now.
    fn snapshot(&self) -> Snapshot;
    /// Marks the calling thread as profiler code for the rest of its life. Called first thing on
    /// report threads, before any allocation, so it must not allocate.
    fn enter_profiler_thread(&self);
    /// Runs `f` as profiler code (its allocations are the profiler's own).
    fn run_guarded(&self, f: &mut dyn FnMut());
    /// The mean sampling interval in bytes. The default asks [`ProfileSource::snapshot`] for
    /// a snapshot without its stacks, which for this crate's sources costs a few locks and no
    /// copy; a source whose `snapshot` is expensive otherwise should override it.
    fn sample_interval(&self) -> u64 {
        crate::report::snapshot::without_stacks(|| self.snapshot()).sample_interval
    }
    /// Whether a `fork` child that took samples of its own writes the exit report too. The
    /// default is no: only the process that registered the exit report writes it, because a
    /// child may have been forked while another thread held a profiler lock, which nothing
    /// released in the child. A source whose `fork` handlers take and release every profiler
    /// lock around the fork (the preload shim's) may answer yes.
    fn reports_in_fork_children(&self) -> bool {
        false
    }
    /// Whether the front end tells the runner itself when the program's last thread has ended
    /// (the preload shim counts every thread it sees start). The default is no: the runner then
    /// watches the main thread only (see [`ProfilerRunner::spawn_thread_for`]).
    fn counts_program_threads(&self) -> bool {
        false
    }
}

/// Writes a report set of `source`'s stacks into `dir`, from a compact snapshot taken and
/// dropped as profiler code: its memory is bounded by the stacks' count and depth (see the
/// `snapshot` module), not by a copy of every stack with its frames. Only the returned paths
/// are the caller's memory.
fn write_report_from(
    source: &dyn ProfileSource,
    opts: &ReportOptions,
    dir: &ReportDir,
) -> io::Result<ReportPaths> {
    let (interval, unit) = {
        let header = crate::report::snapshot::without_stacks(|| source.snapshot());
        (header.sample_interval, header.unit)
    };
    let ctx = ReportContext::current();
    let mut written = None;
    source.run_guarded(&mut || {
        let snap = crate::report::snapshot::take_compact(interval, unit);
        written = Some(report::write_dump(snap, &ctx, opts, dir));
    });
    // Copies allocated as the caller's, the originals freed as the profiler's.
    let out = match &written {
        Some(Ok(paths)) => Ok(paths.clone()),
        Some(Err(e)) => Err(io::Error::new(e.kind(), e.to_string())),
        None => Err(io::Error::other("report source ran nothing")),
    };
    source.run_guarded(&mut || drop(written.take()));
    out
}

/// Decides how collected stats are reported: how often to look, how much change is worth a
/// report, what to measure, where output goes and in what form.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfilerRunner {
    check_interval_secs: usize,
    report_pct_change_trigger: usize,
    reporting_path: String,
    expand_frames: bool,
    fold_framework_frames: bool,
    gen_flamegraphs: bool,
    measure_allocated_not_retained: bool,
    top_k: usize,
    report_at_exit: bool,
    report_file_mode: u32,
    max_report_sets: usize,
    dir: SharedDir,
    /// The endpoint and pushes (`crate::serve`).
    pub(crate) services: crate::serve::Services,
    /// Dump triggers (signal, control files, memory limit, new highs): `src/triggers/`.
    triggers: crate::triggers::TriggerSettings,
}

/// The reporting directory of a runner, resolved and identified once and shared by all its clones
/// (the copy kept for a `fork` child, the exit report's). Not part of a runner's settings: two
/// runners with the same settings are equal whether or not they have started.
#[derive(Clone, Default)]
struct SharedDir(Arc<DirSlot>);

#[derive(Default)]
struct DirSlot {
    /// The reporting path made absolute, at the first use.
    absolute: OnceLock<PathBuf>,
    /// The directory's identity, once creating or opening it succeeded.
    open: OnceLock<ReportDir>,
}

impl PartialEq for SharedDir {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for SharedDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.open.get() {
            Some(d) => write!(f, "identified({})", d.path().display()),
            None => f.write_str("not open"),
        }
    }
}

impl Default for ProfilerRunner {
    fn default() -> Self {
        Self {
            check_interval_secs: DEFAULT_CHECK_INTERVAL_SECS,
            report_pct_change_trigger: DEFAULT_PCT_CHANGE_TRIGGER,
            reporting_path: DEFAULT_REPORTING_PATH.to_string(),
            expand_frames: false,
            fold_framework_frames: true,
            gen_flamegraphs: true,
            measure_allocated_not_retained: false,
            top_k: DEFAULT_TOP_K,
            report_at_exit: true,
            report_file_mode: DEFAULT_FILE_MODE,
            max_report_sets: DEFAULT_MAX_REPORT_SETS,
            dir: SharedDir::default(),
            services: crate::serve::Services::default(),
            triggers: Default::default(),
        }
    }
}

/// Why [`ProfilerRunnerBuilder::build`] refused a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilerRunnerBuilderError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for ProfilerRunnerBuilderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProfilerRunner: `{}` {}", self.field, self.reason)
    }
}

impl std::error::Error for ProfilerRunnerBuilderError {}

/// Builds a [`ProfilerRunner`]; anything left out takes the default.
#[derive(Clone, Debug, Default)]
pub struct ProfilerRunnerBuilder {
    inner: Option<ProfilerRunner>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        impl ProfilerRunnerBuilder {
            $(
                $(#[$doc])*
                pub fn $name(&mut self, value: $ty) -> &mut Self {
                    self.inner.get_or_insert_with(ProfilerRunner::default).$name = value;
                    self
                }
            )*
        }
    };
}

// Numbers and switches take their own type, so that a plain literal (`.check_interval_secs(60)`,
// `.report_file_mode(0o640)`) compiles; the path takes anything that becomes a `String`.
setters! {
    /// Seconds between checks of retained memory. 0 means no periodic checks and no report
    /// thread, as `YING_CHECK_INTERVAL_SECS=0` does: the exit report (if
    /// [`report_at_exit`](Self::report_at_exit)) and [`RunnerHandle::dump_now`] (written on the
    /// calling thread) still work, the endpoint and pushes still start, and the dump triggers
    /// that need the report thread (signal, control files, memory limit, new highs) are not
    /// installed.
    check_interval_secs: usize,
    /// Percent change of retained memory (since the last report) that triggers a report.
    report_pct_change_trigger: usize,
    /// Rank stacks by total allocated bytes instead of retained bytes.
    measure_allocated_not_retained: bool,
    /// Also write an SVG flamegraph with each report.
    gen_flamegraphs: bool,
    /// List every frame in reports, each inlined frame with its own `file:line`, nothing
    /// collapsed or folded.
    expand_frames: bool,
    /// Fold runs of framework frames (crates from the cargo registry, Rust's standard library)
    /// into one line such as `... 27 frames in tokio, hyper, axum ...` (true by default).
    fold_framework_frames: bool,
    /// Stacks listed in each text report.
    top_k: usize,
    /// Write a final report set when the process exits through `exit()` or a return from
    /// `main` (true by default; only in the process that started the runner, and not when the
    /// process took no sample).
    report_at_exit: bool,
    /// Permission bits of report files (0600 by default; owner read and write are always
    /// kept, execute and special bits never set).
    report_file_mode: u32,
    /// Report sets of this process kept in the reporting directory: after each set the runner
    /// writes, the oldest sets of the same process (same executable and pid) beyond this
    /// number are removed, every file of a set, and nothing else is touched. 0 keeps every
    /// set. Default: [`DEFAULT_MAX_REPORT_SETS`].
    max_report_sets: usize,
}

impl ProfilerRunnerBuilder {
    /// Directory for report sets; created if missing.
    pub fn reporting_path(&mut self, value: impl Into<String>) -> &mut Self {
        self.inner.get_or_insert_with(ProfilerRunner::default).reporting_path = value.into();
        self
    }
}

impl ProfilerRunnerBuilder {
    /// The runner being built (the setters of `crate::serve` write into it).
    pub(crate) fn runner_mut(&mut self) -> &mut ProfilerRunner {
        self.inner.get_or_insert_with(ProfilerRunner::default)
    }

    /// The trigger settings being built (their setters are in `src/triggers/`).
    pub(crate) fn triggers_mut(&mut self) -> &mut crate::triggers::TriggerSettings {
        &mut self.inner.get_or_insert_with(ProfilerRunner::default).triggers
    }

    /// Validates and returns the runner. Errors name the field: a zero top-k, an empty path, or
    /// a path that exists and is not a directory.
    pub fn build(&self) -> Result<ProfilerRunner, ProfilerRunnerBuilderError> {
        let mut r = self.inner.clone().unwrap_or_default();
        r.dir = SharedDir::default();
        r.validate()?;
        Ok(r)
    }
}

/// Handle to a started runner: on-demand report sets ([`dump_now`](Self::dump_now)) and
/// stopping. Cheap to clone and to share between threads (a service keeps one in its state).
#[derive(Debug, Clone)]
pub struct RunnerHandle {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<Control>,
    wake: Condvar,
    /// The runner's settings and reporting directory, for dumps written without the thread.
    runner: ProfilerRunner,
    source: &'static dyn ProfileSource,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("state", &self.state)
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

/// A dump's outcome as the report thread keeps it for its requesters (`io::Error` is not
/// `Clone`).
type Outcome = Result<ReportPaths, (io::ErrorKind, String)>;

/// What the report thread and the requesters of dumps share. Requests are numbered: a request
/// made while dump `started` is being written asks for dump `started + 1`, which begins after
/// it; every request made before that dump begins is served by it (they share its result).
#[derive(Debug, Default)]
struct Control {
    stop: bool,
    /// The process whose report thread serves requests, 0 when there is none (never started,
    /// could not start, stopped, or the process is a `fork` child, which has no threads but
    /// the one that forked).
    thread_pid: u32,
    /// The highest dump number asked for.
    requested: u64,
    /// Whether the dump asked for is the exit report, written by the report thread because a
    /// seccomp filter covers the exiting thread (its `reason:` says so).
    for_exit: bool,
    /// The number of the dump being written, or of the last one written.
    started: u64,
    /// The number of the last dump written, and its outcome (the report thread's memory:
    /// replaced and dropped only by that thread).
    done: u64,
    outcome: Option<Outcome>,
}

/// Locks `m`, ignoring poisoning: the state is plain data that no panic leaves half-changed.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RunnerHandle {
    /// Writes a report set now (regardless of the trigger) and returns the paths of its files.
    ///
    /// **Blocks** until the set is written: tens to hundreds of milliseconds for a typical
    /// program, longer for one with very many stacks or a large first symbolization. With a
    /// report thread (`check_interval_secs` above 0), the thread writes it and this waits at most
    /// [`DEFAULT_DUMP_TIMEOUT`] (see [`dump_now_within`](Self::dump_now_within)); without one
    /// (`YING_CHECK_INTERVAL_SECS=0`, or after [`stop`](Self::stop)), the calling thread
    /// writes it. From async code, call it on a blocking thread:
    ///
    /// ```
    /// use ying_profiler::YingProfiler;
    /// use ying_profiler::utils::{ProfilerRunnerBuilder, RunnerHandle};
    ///
    /// #[global_allocator]
    /// static YING_ALLOC: YingProfiler = YingProfiler::default();
    ///
    /// // A handler of an HTTP server (axum, hyper...) would look the same.
    /// async fn dump_handler(ying: RunnerHandle) -> Result<String, String> {
    ///     let paths = tokio::task::spawn_blocking(move || ying.dump_now())
    ///         .await
    ///         .map_err(|e| format!("dump task failed: {e}"))?
    ///         .map_err(|e| format!("report not written: {e}"))?;
    ///     Ok(format!("{}", paths.text.unwrap_or_default().display()))
    /// }
    ///
    /// #[tokio::main]
    /// async fn main() {
    ///     let dir = std::env::temp_dir().join(format!("ying-doc-dump-{}", std::process::id()));
    ///     let ying = ProfilerRunnerBuilder::default()
    ///         .reporting_path(dir.to_str().unwrap())
    ///         .report_at_exit(false)
    ///         .build()
    ///         .unwrap()
    ///         .spawn(&YING_ALLOC);
    ///     let kept: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 << 10]).collect();
    ///     let text = dump_handler(ying.clone()).await.unwrap();
    ///     assert!(std::path::Path::new(&text).exists(), "{text}");
    ///     ying.stop();
    ///     drop(kept);
    ///     std::fs::remove_dir_all(&dir).unwrap();
    /// }
    /// ```
    ///
    /// Dumps are written one at a time in the process: a request made while another dump is
    /// being written waits for it, then for (or shares) the next one, so a burst of requests
    /// costs one or two report sets, written on one thread. Errors: the files could not be
    /// written (the first error, naming the path), the report thread did not finish in time
    /// ([`io::ErrorKind::TimedOut`]; the set is still written, later), or the process is
    /// exiting.
    pub fn dump_now(&self) -> io::Result<ReportPaths> {
        self.dump_now_within(DEFAULT_DUMP_TIMEOUT)
    }

    /// [`dump_now`](Self::dump_now) waiting at most `timeout` for the report thread or for a
    /// dump of another thread in progress (a dump the calling thread writes itself is not cut
    /// short). **Blocks.**
    pub fn dump_now_within(&self, timeout: Duration) -> io::Result<ReportPaths> {
        let deadline = Instant::now() + timeout;
        let me = std::process::id();
        {
            let mut c = lock(&self.shared.state);
            if c.thread_pid == me && !c.stop {
                let target = c.started + 1;
                c.requested = c.requested.max(target);
                self.shared.wake.notify_all();
                loop {
                    if c.done >= target {
                        return match &c.outcome {
                            Some(Ok(paths)) => Ok(paths.clone()),
                            Some(Err((kind, msg))) => Err(io::Error::new(*kind, msg.clone())),
                            None => Err(io::Error::other("report thread kept no outcome")),
                        };
                    }
                    if c.thread_pid != me {
                        break; // The thread stopped without writing it: write it here.
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "the report thread did not finish a report set within {timeout:?}"
                            ),
                        ));
                    }
                    c = match self.shared.wake.wait_timeout(c, deadline - now) {
                        Ok((c, _)) => c,
                        Err(p) => p.into_inner().0,
                    };
                }
            }
        }
        self.shared.runner.dump_inline(self.shared.source, deadline)
    }

    /// The runner this handle belongs to (its settings).
    pub fn runner(&self) -> &ProfilerRunner {
        &self.shared.runner
    }

    /// Whether a report thread of this process serves this handle's dumps (false when
    /// `check_interval_secs` is 0, the thread could not start or was stopped, and in a `fork`
    /// child).
    pub fn has_thread(&self) -> bool {
        let c = lock(&self.shared.state);
        c.thread_pid == std::process::id() && !c.stop
    }

    /// Stops the runner thread (after any report in progress). Later dumps are written by the
    /// calling thread.
    pub fn stop(&self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
    }
}

/// Whose turn it is to write a report set: dumps are written one at a time in the process
/// (the report thread's, [`RunnerHandle::dump_now`]'s on a calling thread,
/// [`write_report_now`]'s), so that a burst of requests does not run many report builds at
/// once, each growing its own thread's malloc arena. Holds the pid of the holder (0: free); a
/// `fork` child does not wait for a dump of its parent's.
static TURN: Mutex<u32> = Mutex::new(0);
static TURN_FREED: Condvar = Condvar::new();

/// The right to write a report set, until dropped.
struct Turn;

impl Turn {
    /// Waits for the turn until `deadline`.
    fn take(deadline: Instant) -> io::Result<Turn> {
        let me = std::process::id();
        let mut holder = lock(&TURN);
        loop {
            if *holder == 0 || *holder != me {
                *holder = me;
                return Ok(Turn);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "another report set was still being written",
                ));
            }
            holder = match TURN_FREED.wait_timeout(holder, deadline - now) {
                Ok((h, _)) => h,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        *lock(&TURN) = 0;
        TURN_FREED.notify_one();
    }
}

/// Runs `f` in the process's turn for report builds (one at a time, see `Turn`), waiting at
/// most `timeout` for a build of another thread, then gives the memory it freed back: the
/// in-memory profiles (`crate::profiles`) are built like report sets.
pub(crate) fn in_report_turn<T>(timeout: Duration, f: impl FnOnce() -> T) -> io::Result<T> {
    let turn = Turn::take(Instant::now() + timeout)?;
    let out = f();
    trim_after_dump();
    drop(turn);
    Ok(out)
}

/// Gives the memory a report build freed back to the system (glibc's `malloc_trim`): the
/// build allocates tens of megabytes for a large profile and frees them all, and glibc keeps
/// freed memory of a thread's arena (other than at its top) until that arena is trimmed.
fn trim_after_dump() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists; it is called outside
    // every allocation hook and holds no lock of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The report threads started in this process (their control), for
/// [`stop_profiler_threads`].
static RUNNING: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());

/// Stops every thread of Ying's in this process (report threads after the dump they are
/// writing, the endpoint, the pusher) and waits until they have ended, at most `timeout`;
/// false if one is still running then. The preload shim calls it before a seccomp filter that
/// would cover them is installed (see `sys::seccomp`). Later dumps asked of a stopped runner
/// are written by the asking thread.
#[doc(hidden)]
pub fn stop_profiler_threads(timeout: Duration) -> bool {
    for shared in lock(&RUNNING).iter() {
        lock(&shared.state).stop = true;
        shared.wake.notify_all();
    }
    crate::serve::stop();
    crate::sys::wait_profiler_threads_gone(timeout)
}

/// The runner registered for the exit report (one per process).
static EXIT_RUNNER: OnceLock<(ProfilerRunner, &'static dyn ProfileSource)> = OnceLock::new();

/// Periodic dumps being written now (0 or 1 per report thread).
static DUMPS_IN_FLIGHT: AtomicU32 = AtomicU32::new(0);
/// Set by the exit path: no report thread starts a new dump after it.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Longest the exit path waits for a periodic dump in flight to finish its files.
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// Tells report threads that the process is exiting and waits (at most [`EXIT_WAIT`]) until no
/// periodic dump is being written: `exit()` ends every other thread at once, and a dump cut
/// off between its files would leave a report set without its last files (the `.pb.gz` is
/// written last). Polls with a short sleep instead of waiting on a lock, so that nothing a
/// `fork` could copy in a locked state is involved.
/// When it gives up, no other thread creates report files any more and the abandoned dump's
/// temporary files are removed (see [`ReportDir::abandon_others`]).
fn finish_dumps_in_flight() {
    EXITING.store(true, Ordering::SeqCst);
    let start = std::time::Instant::now();
    while DUMPS_IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        if start.elapsed() >= EXIT_WAIT {
            crate::sys::warn(
                "a periodic report was still being written after 30 s at exit; its set may be incomplete",
            );
            if let Some((runner, source)) = EXIT_RUNNER.get() {
                source.run_guarded(&mut || {
                    if let Ok(dir) = runner.reporting_dir() {
                        let ctx = ReportContext::current();
                        let _ = dir.abandon_others(&ctx.exe_name(), ctx.pid);
                    }
                });
            }
            return;
        }
        sleep_raw(2_000_000);
    }
}

/// Whether the process is exiting (the exit path has begun): no report thread should start
/// (the shim's thread-start path).
#[doc(hidden)]
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Giant refusals counted when this process started or forked (a child inherits the count).
static GIANT_REFUSED_AT_START: AtomicU64 = AtomicU64::new(0);

/// A `fork` child has no report thread (yet): nothing of its parent's is in flight; and it has
/// taken no sample of its own (the records it inherited are its parent's samples: a child that
/// samples nothing itself, such as a shell's subshell, writes no report).
extern "C" fn dumps_after_fork_child() {
    DUMPS_IN_FLIGHT.store(0, Ordering::SeqCst);
    EXIT_REPORTED.store(false, Ordering::SeqCst);
    EXIT_DONE.store(false, Ordering::SeqCst);
    EXIT_OWNER.store(0, Ordering::SeqCst);
    AT_EXIT_THREAD.store(0, Ordering::SeqCst);
    PROGRAM_ENDED.store(false, Ordering::SeqCst);
    // The child has no report thread until it starts its own.
    END_WAKE.store(std::ptr::null_mut(), Ordering::SeqCst);
    crate::sys::forget_profiler_threads();
    SAMPLED.store(false, Ordering::Relaxed);
    let refused = crate::engine::tables::GIANT_REFUSED.load(Ordering::Relaxed);
    GIANT_REFUSED_AT_START.store(refused, Ordering::Relaxed);
}

/// The process that registered the exit report (a `fork` child has another pid).
static EXIT_PID: AtomicU32 = AtomicU32::new(0);
/// Set by the first run of [`at_exit`]: the exit report is written at most once per process,
/// even if `exit` is called again (from another atexit handler, or by two threads at once).
static EXIT_REPORTED: AtomicBool = AtomicBool::new(false);

/// The directory this process writes in after it changed user (`uid-<uid>` inside the
/// reporting directory; see [`ProfilerRunner::dir_for_new_user`]).
static NEW_USER_DIR: OnceLock<ReportDir> = OnceLock::new();
/// The effective user id when the runner was prepared: a process whose reports fail with
/// "permission denied" under another one (a daemon's worker after `setuid`) is told once.
static START_EUID: AtomicU32 = AtomicU32::new(0);

/// The error of a report skipped because fewer than [`crate::sys::FD_HEADROOM`] descriptors
/// were free (already warned about, once per process).
#[derive(Debug)]
struct Skipped;

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "skipped: fewer than {} descriptors free under RLIMIT_NOFILE",
            crate::sys::FD_HEADROOM
        )
    }
}

impl std::error::Error for Skipped {}

/// Set once [`at_exit`] has finished (the exit report written, or not due): a thread that
/// calls `exit` while another one is exiting waits for it (see [`before_exit`]).
static EXIT_DONE: AtomicBool = AtomicBool::new(false);
/// The thread (kernel id) whose `exit` came first, 0 before any.
static EXIT_OWNER: AtomicU32 = AtomicU32::new(0);
/// The thread (kernel id) running [`at_exit`], 0 before.
static AT_EXIT_THREAD: AtomicU32 = AtomicU32::new(0);
/// Longest a thread calling `exit` waits for another thread's exit report: the exit path's own
/// wait for a periodic dump, then the report itself.
const EXIT_FOLLOWER_WAIT: Duration = Duration::from_secs(90);

/// Sleeps `ns` nanoseconds with the raw system call: the preload shim exports `nanosleep` (a
/// safe point), and the exit path is no place to go through it.
fn sleep_raw(ns: u64) {
    let ts =
        libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ };
    // SAFETY: `ts` is a valid timespec; a null remainder pointer is allowed.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<libc::timespec>()) };
}

/// Called by the preload shim's `exit` before glibc's. glibc (before 2.41) lets several
/// threads run `exit` at once: each pops handlers from the same list, and the thread that
/// finds it empty calls `_exit` even while another thread is still in a handler, which cut off
/// the exit report (a set without its last files, a temporary file left behind). So the first
/// thread to exit goes on, and every later one (another thread) waits, at most
/// [`EXIT_FOLLOWER_WAIT`], until the exit report is finished, then exits as it would have: by
/// then the process is usually gone. The first thread's own nested `exit` (from an `atexit`
/// handler) goes on at once, as does every `exit` of a process without an exit handler.
#[doc(hidden)]
pub fn before_exit() {
    if !EXIT_HANDLER_REGISTERED.load(Ordering::SeqCst) {
        return;
    }
    let me = gettid();
    let first = match EXIT_OWNER.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => true,
        Err(owner) => owner == me,
    };
    // Even the first `exit` call waits when the exit report is already being written by
    // another thread, whose exit did not come through here (a return from `main`).
    let writer = AT_EXIT_THREAD.load(Ordering::SeqCst);
    if first && (writer == 0 || writer == me) {
        return;
    }
    let start = Instant::now();
    while !EXIT_DONE.load(Ordering::SeqCst) && start.elapsed() < EXIT_FOLLOWER_WAIT {
        sleep_raw(1_000_000);
    }
}

/// Registered with `atexit` once a report thread or an exit report exists.
extern "C" fn at_exit() {
    // An exit that did not pass through `before_exit` (a return from `main`, glibc's own
    // `exit(0)` after the last thread) owns the exit too.
    let me = gettid();
    let _ = EXIT_OWNER.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst);
    let _ = AT_EXIT_THREAD.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst);
    if crate::sys::seccomp::level() != crate::sys::seccomp::NONE {
        // A seccomp filter may cover the exiting thread (any thread of the program's is taken
        // as covered): no report here (`openat`, `write`, `renameat`...). A report thread the
        // filter does not cover writes it, if every filter lets this thread wait for it.
        if crate::sys::seccomp::exit_by_report_thread() {
            exit_report_by_report_thread();
        }
        // Otherwise a periodic dump of a report thread the filter does not cover is cut off
        // by the exit.
        EXITING.store(true, Ordering::SeqCst);
        EXIT_DONE.store(true, Ordering::SeqCst);
        return;
    }
    finish_dumps_in_flight();
    if EXIT_REPORTED.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Some((runner, source)) = EXIT_RUNNER.get()
        && (source.reports_in_fork_children()
            || EXIT_PID.load(Ordering::Relaxed) == std::process::id())
    {
        let mut f = || {
            if !runner.worth_a_report() {
                return;
            }
            if let Err(e) = runner.write_now(*source) {
                runner.warn_not_written("final report", &e);
            }
        };
        source.run_guarded(&mut f);
    }
    EXIT_DONE.store(true, Ordering::SeqCst);
}

/// Whether [`at_exit`] is registered in this process.
static EXIT_HANDLER_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Set when every thread of the program has ended while a report thread (or another thread
/// of Ying's) still runs: see [`program_threads_ended`].
static PROGRAM_ENDED: AtomicBool = AtomicBool::new(false);
/// The report thread to wake when the program's threads have ended: the `Shared` of the
/// last one started, one reference of it leaked so that it stays valid for the process's life
/// (no lock, so that no `fork` can copy one held).
static END_WAKE: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());
/// How long the report thread polls, every millisecond, for the last thread to be gone.
const END_FAST_POLL: Duration = Duration::from_secs(2);
/// Then, while a thread Ying did not see start still runs, how often it looks again.
const END_SLOW_POLL: Duration = Duration::from_millis(200);

fn program_ended() -> bool {
    PROGRAM_ENDED.load(Ordering::SeqCst)
}

/// Called by a front end when the last of the program's threads it saw start has ended (its
/// exit handler ran; the main thread counts from the start), with `true`, or when a thread
/// it never saw start created a new one after that, with `false`. glibc ends a process when
/// its last thread ends (that thread calls `exit(0)`), and Ying's own threads count among
/// them, so without this a program whose `main` calls `pthread_exit` would never end. The
/// report thread is woken at once and ends the process as glibc would have, with `exit(0)`
/// (the exit report runs), as soon as only Ying's threads are left.
#[doc(hidden)]
pub fn program_threads_ended(ended: bool) {
    PROGRAM_ENDED.store(ended, Ordering::SeqCst);
    if !ended {
        return;
    }
    // SAFETY: a non-null pointer is a leaked `Arc<Shared>` reference, valid forever.
    if let Some(shared) = unsafe { END_WAKE.load(Ordering::SeqCst).as_ref() } {
        // Under the state's lock, so that the report thread is either waiting (and woken) or
        // about to look at the flag.
        let _state = lock(&shared.state);
        shared.wake.notify_all();
    }
}

/// The body of the thread that, without a report thread (`check_interval_secs` 0) but with the
/// endpoint or pushes, waits for the program's threads to end and then ends the process (see
/// [`end_process_if_alone`]). Blocks on the state's condition variable meanwhile: no wake-up
/// until then.
fn wait_for_program_end(shared: &Shared) {
    let mut slow = false;
    loop {
        {
            let c = lock(&shared.state);
            let timeout = if slow { END_SLOW_POLL } else { Duration::from_secs(3600) };
            let (c, _) = shared
                .wake
                .wait_timeout_while(c, timeout, |c| !c.stop && (slow || !program_ended()))
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if c.stop {
                return;
            }
        }
        if program_ended() {
            end_process_if_alone(if slow { Duration::ZERO } else { END_FAST_POLL });
            slow = true;
        } else {
            slow = false;
        }
    }
}

/// For a front end that does not count the program's threads (the `#[global_allocator]`
/// one): when the main thread ends with `pthread_exit` (its key destructors run then, never on
/// `exit`), the report thread is told, and ends the process once every other thread but Ying's
/// has ended too, polling for that ([`END_SLOW_POLL`]). Only when called on the main thread;
/// once per process.
fn watch_main_thread() {
    static WATCHED: AtomicBool = AtomicBool::new(false);
    extern "C" fn main_thread_ended(_: *mut libc::c_void) {
        program_threads_ended(true);
    }
    if gettid() != std::process::id() || WATCHED.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer and the destructor an extern "C" fn; the value set
    // (any non-null pointer) is only tested by glibc before it calls the destructor.
    unsafe {
        if libc::pthread_key_create(&mut key, Some(main_thread_ended)) == 0 {
            libc::pthread_setspecific(key, std::ptr::NonNull::<u8>::dangling().as_ptr().cast());
        }
    }
}

/// The report thread, once the program's threads ended: polls (every millisecond for at most
/// `fast`, or once) for every thread but Ying's own to be gone (the last one is still
/// finishing its exit when it wakes this thread; a thread the front end did not see start may
/// still be running), then calls `exit(0)`, as glibc does when a process's last thread ends.
/// Returns while some other thread still runs.
fn end_process_if_alone(fast: Duration) {
    let start = Instant::now();
    loop {
        if !program_ended() {
            return;
        }
        if crate::sys::only_profiler_threads_left() {
            // SAFETY: `exit` is what glibc itself calls when a process's last thread ends; this
            // thread holds no lock (the report loop released its state) and is not in a dump.
            unsafe { libc::exit(0) };
        }
        if start.elapsed() >= fast {
            return;
        }
        sleep_raw(1_000_000);
    }
}

/// The exit report under a seccomp filter that covers the exiting thread but not the report
/// thread (one without `TSYNC`): the report thread writes it while this thread waits (at most
/// [`EXIT_WAIT`]), making no system call but `futex`, `getpid` and the clock's, which the
/// shim checked every filter allows (`sys::seccomp::exit_by_report_thread`).
fn exit_report_by_report_thread() {
    if EXIT_REPORTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let Some((runner, source)) = EXIT_RUNNER.get() else { return };
    if !source.reports_in_fork_children() && EXIT_PID.load(Ordering::Relaxed) != std::process::id()
    {
        return;
    }
    if !runner.worth_a_report() {
        return;
    }
    let me = std::process::id();
    let deadline = Instant::now() + EXIT_WAIT;
    // Nothing here allocates: the list is only read, under its lock (taken before a report
    // thread's state lock, as in `stop_profiler_threads`). Not waited for: a `fork` child may
    // have inherited it held by a thread it does not have.
    let running = match RUNNING.try_lock() {
        Ok(r) => r,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    for shared in running.iter() {
        let mut c = lock(&shared.state);
        if c.thread_pid != me || c.stop {
            continue;
        }
        let target = c.started + 1;
        c.requested = c.requested.max(target);
        c.for_exit = true;
        shared.wake.notify_all();
        while c.done < target && c.thread_pid == me {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            c = match shared.wake.wait_timeout(c, deadline - now) {
                Ok((c, _)) => c,
                Err(p) => p.into_inner().0,
            };
        }
        return;
    }
}

/// Registers [`at_exit`] and the fork handler once per process.
fn register_exit_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` and `dumps_after_fork_child` are plain `extern "C" fn()`s with no
        // captured state; they only touch atomics, our own statics and report code.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(dumps_after_fork_child));
        }
        EXIT_HANDLER_REGISTERED.store(true, Ordering::SeqCst);
    });
}

impl ProfilerRunner {
    /// A runner from explicit settings (0.3.0 signature).
    pub fn new(
        check_interval_secs: usize,
        report_pct_change_trigger: usize,
        reporting_path: &str,
        expand_frames: bool,
        gen_flamegraphs: bool,
        measure_allocated_not_retained: bool,
    ) -> Self {
        Self {
            check_interval_secs,
            report_pct_change_trigger,
            reporting_path: reporting_path.to_string(),
            expand_frames,
            gen_flamegraphs,
            measure_allocated_not_retained,
            ..Self::default()
        }
    }

    /// The seed's `start_profiling` values: 300 s, 10 %, flamegraphs, retained, `ying-profiles`,
    /// and a report at exit.
    pub fn seed_defaults() -> Self {
        Self::new(300, 10, DEFAULT_REPORTING_PATH, false, true, false)
    }

    /// A runner configured from `YING_*` variables (the same ones as the preload shim). Bad
    /// values print one warning each and fall back to their defaults. The sampling variables
    /// are applied to `profiler` (interval, giant limit, seed, enabled).
    pub fn from_env<A: GlobalAlloc>(profiler: &YingProfiler<A>) -> Self {
        crate::sys::save_stderr();
        let (cfg, warnings) = crate::config::Config::from_env();
        for w in warnings {
            crate::sys::write_stderr(format!("{w}\n").as_bytes());
        }
        let set = profiler.settings();
        set.set_sample_interval(cfg.sample_interval_bytes);
        set.set_max_alloc_bytes(cfg.max_alloc_bytes);
        set.set_enabled(cfg.enabled);
        set.set_max_stacks(cfg.max_stacks);
        if let Some(seed) = cfg.seed {
            set.set_seed(seed);
        }
        Self::from_config(&cfg)
    }

    /// A runner from a parsed [`crate::config::Config`].
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            check_interval_secs: cfg.check_interval_secs as usize,
            report_pct_change_trigger: cfg.report_pct_change_trigger as usize,
            reporting_path: cfg.reporting_path.display().to_string(),
            expand_frames: cfg.expand_frames,
            fold_framework_frames: cfg.fold_framework_frames,
            gen_flamegraphs: cfg.gen_flamegraphs,
            measure_allocated_not_retained: cfg.measure_allocated_not_retained,
            top_k: cfg.top_k,
            report_at_exit: cfg.report_at_exit,
            report_file_mode: cfg.report_file_mode,
            max_report_sets: cfg.max_report_sets,
            dir: SharedDir::default(),
            services: crate::serve::Services::from_config(cfg),
            triggers: crate::triggers::TriggerSettings::from_config(cfg),
        }
    }

    fn validate(&self) -> Result<(), ProfilerRunnerBuilderError> {
        let err = |field, reason: &str| {
            Err(ProfilerRunnerBuilderError { field, reason: reason.to_string() })
        };
        if self.top_k == 0 {
            return err("top_k", "must be at least 1");
        }
        self.triggers.validate()?;
        if self.reporting_path.is_empty() {
            return err("reporting_path", "must not be empty");
        }
        if self.report_file_mode & !0o666 != 0 || self.report_file_mode & 0o600 != 0o600 {
            return err(
                "report_file_mode",
                "must be from 0o600 to 0o666 (owner read and write, no execute or special bits)",
            );
        }
        let p = Path::new(&self.reporting_path);
        if p.exists() && !p.is_dir() {
            return Err(ProfilerRunnerBuilderError {
                field: "reporting_path",
                reason: format!("{} exists and is not a directory", p.display()),
            });
        }
        Ok(())
    }

    /// Seconds between checks.
    pub fn check_interval_secs(&self) -> usize {
        self.check_interval_secs
    }
    /// Percent change that triggers a report.
    pub fn report_pct_change_trigger(&self) -> usize {
        self.report_pct_change_trigger
    }
    /// Directory for report sets.
    pub fn reporting_path(&self) -> &str {
        &self.reporting_path
    }
    /// Whether stacks are ranked by allocated bytes.
    pub fn measure_allocated_not_retained(&self) -> bool {
        self.measure_allocated_not_retained
    }
    /// Whether flamegraphs are written.
    pub fn gen_flamegraphs(&self) -> bool {
        self.gen_flamegraphs
    }
    /// Whether every frame is listed (inlined frames with their own `file:line`).
    pub fn expand_frames(&self) -> bool {
        self.expand_frames
    }
    /// Whether runs of framework frames fold into one line.
    pub fn fold_framework_frames(&self) -> bool {
        self.fold_framework_frames
    }
    /// Whether a final report is written at exit.
    pub fn report_at_exit(&self) -> bool {
        self.report_at_exit
    }
    /// Permission bits of report files.
    pub fn report_file_mode(&self) -> u32 {
        self.report_file_mode
    }
    /// Report sets of this process kept in the reporting directory (0: all).
    pub fn max_report_sets(&self) -> usize {
        self.max_report_sets
    }

    /// The reporting path as an absolute path, fixed at the first call on this runner or any
    /// clone of it (a relative path is joined to the working directory of that moment).
    pub fn absolute_reporting_path(&self) -> &Path {
        self.dir.0.absolute.get_or_init(|| {
            let p = Path::new(&self.reporting_path);
            match std::env::current_dir() {
                Ok(cwd) if p.is_relative() => cwd.join(p),
                _ => p.to_path_buf(),
            }
        })
    }

    /// Creates (if missing) and identifies the reporting directory, once for this runner and its
    /// clones, and checks that files can be created in it (no descriptor stays open). The
    /// error says what is wrong, e.g. `cannot be created (/tmp/link is a symbolic link ...)`
    /// or `is not writable (...)`. Starting the runner does this; call it first to fail early.
    pub fn open_reporting_dir(&self) -> Result<(), String> {
        let dir = self.reporting_dir().map_err(|e| format!("cannot be created ({e})"))?;
        dir.writable().map_err(|e| format!("is not writable ({e})"))
    }

    /// The identified reporting directory (created and identified now if it is not yet).
    fn reporting_dir(&self) -> io::Result<&ReportDir> {
        if let Some(d) = NEW_USER_DIR.get() {
            return Ok(d);
        }
        let slot = &self.dir.0;
        if let Some(d) = slot.open.get() {
            return Ok(d);
        }
        let opened = ReportDir::open(self.absolute_reporting_path(), self.report_file_mode)?;
        let _ = slot.open.set(opened);
        slot.open.get().ok_or_else(|| io::Error::other("reporting directory not recorded"))
    }

    /// What to rank by.
    pub fn measurement(&self) -> Measurement {
        if self.measure_allocated_not_retained {
            Measurement::AllocatedBytes
        } else {
            Measurement::RetainedBytes
        }
    }

    /// The report options these settings imply.
    pub fn report_options(&self) -> ReportOptions {
        ReportOptions {
            measurement: self.measurement(),
            top_k: self.top_k.max(1),
            expand_frames: self.expand_frames,
            fold_framework_frames: self.fold_framework_frames,
            gen_flamegraphs: self.gen_flamegraphs,
        }
    }

    /// Whether a change from `last` to `now` retained bytes is worth a report.
    pub fn should_report(&self, last: Option<u64>, now: u64) -> bool {
        match last {
            None => true,
            Some(0) => now > 0,
            Some(l) => {
                let delta = now.abs_diff(l) as u128 * 100;
                delta >= self.report_pct_change_trigger as u128 * l as u128
            }
        }
    }

    /// Whether an automatic report (a periodic check's, the exit report) is worth writing: not
    /// when the process took no sample and refused nothing since it started or forked (its
    /// report would list no stack of its own), unless its `malloc` is another allocator's (the
    /// report then says Ying saw none of it).
    fn worth_a_report(&self) -> bool {
        foreign_malloc().is_some()
            || SAMPLED.load(Ordering::Relaxed)
            || crate::engine::tables::GIANT_REFUSED.load(Ordering::Relaxed)
                > GIANT_REFUSED_AT_START.load(Ordering::Relaxed)
    }

    /// Writes a report set now, from `source`, into the reporting directory (opened at the
    /// runner's start, see the [module documentation](crate::utils)), then removes this
    /// process's oldest sets beyond [`max_report_sets`](Self::max_report_sets). **Blocks**
    /// while it writes, on the calling thread, without waiting for a dump of another thread:
    /// [`RunnerHandle::dump_now`] is the call for a program's threads.
    pub fn write_now(&self, source: &dyn ProfileSource) -> io::Result<ReportPaths> {
        // Nothing is opened while the program is near its descriptor limit (one warning).
        if !crate::sys::fd_headroom_or_warn("report") {
            return Err(io::Error::other(Skipped));
        }
        // Opening the directory (the first time) allocates: profiler memory, never sampled.
        let mut opened: Option<io::Result<&ReportDir>> = None;
        source.run_guarded(&mut || opened = Some(self.reporting_dir()));
        let dir =
            opened.unwrap_or_else(|| Err(io::Error::other("reporting directory not opened")))?;
        let written = write_report_from(source, &self.report_options(), dir);
        if self.max_report_sets > 0 {
            source.run_guarded(&mut || self.remove_old_sets(dir));
        }
        written
    }

    /// Prepares, while the process still has the rights it started with, a directory that the
    /// user `uid` may write in, when it may not write in the reporting directory: a daemon's
    /// worker is about to change user (`setuid` and its relatives, seen by the shim). Only a
    /// process running as root can give a directory away; then `uid-<uid>` inside the reporting
    /// directory is created (mode 0700, no symbolic link followed) and given to `uid`, and
    /// returned identified, to be passed to [`ProfilerRunner::use_dir_of_new_user`] once the
    /// change of user has succeeded. `None` when nothing is needed or possible (the line of
    /// `warn_not_written` then tells the user what to set).
    #[doc(hidden)]
    pub fn dir_for_new_user(&self, uid: u32) -> Option<ReportDir> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        // SAFETY: geteuid and getegid have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if euid != 0 || uid == 0 {
            return None;
        }
        let base = self.reporting_dir().ok()?;
        let meta = std::fs::metadata(base.path()).ok()?;
        let mode = meta.mode();
        let writable = (meta.uid() == uid && mode & 0o300 == 0o300)
            || (meta.gid() == egid && mode & 0o030 == 0o030)
            || mode & 0o003 == 0o003;
        if writable {
            return None;
        }
        let sub = base.path().join(format!("uid-{uid}"));
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&sub)
            && e.kind() != io::ErrorKind::AlreadyExists
        {
            crate::sys::warn(&format!(
                "{}: {e}; a worker running as uid {uid} cannot write its reports",
                sub.display()
            ));
            return None;
        }
        let dir = match ReportDir::open(&sub, self.report_file_mode) {
            Ok(d) => d,
            Err(e) => {
                crate::sys::warn(&format!(
                    "{e}; a worker running as uid {uid} cannot write its reports"
                ));
                return None;
            }
        };
        // The directory was just walked without following a link; lchown never follows one.
        if let Err(e) = std::os::unix::fs::lchown(&sub, Some(uid), None) {
            crate::sys::warn(&format!(
                "{}: {e}; a worker running as uid {uid} cannot write its reports",
                sub.display()
            ));
            return None;
        }
        let given = std::fs::symlink_metadata(&sub).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        given.then_some(dir)
    }

    /// From now on, this process (and the children it forks) writes its reports into `dir`,
    /// prepared by [`ProfilerRunner::dir_for_new_user`] before the change of user.
    #[doc(hidden)]
    pub fn use_dir_of_new_user(dir: ReportDir) {
        let _ = NEW_USER_DIR.set(dir);
    }

    /// Says why a report was not written: nothing when it was skipped for lack of descriptors
    /// (warned once already); one line per process when the process changed user since it
    /// started and may not write in the directory (a daemon's worker after `setuid`: every
    /// report would fail alike); otherwise one line per failure.
    fn warn_not_written(&self, what: &str, e: &io::Error) {
        if e.get_ref().is_some_and(|r| r.is::<Skipped>()) {
            return;
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let changed = START_EUID.load(Ordering::Relaxed) != euid;
        if e.kind() == io::ErrorKind::PermissionDenied && changed {
            static WARNED_PID: AtomicU32 = AtomicU32::new(0);
            if WARNED_PID.swap(std::process::id(), Ordering::Relaxed) == std::process::id() {
                return;
            }
            let path = self.absolute_reporting_path();
            let owner = std::fs::symlink_metadata(path)
                .map(|m| format!("uid {}", std::os::unix::fs::MetadataExt::uid(&m)))
                .unwrap_or_else(|_| "another user".to_string());
            crate::sys::warn(&format!(
                "this process changed user to uid {euid} after it started, and uid {euid} may \
                 not write in the reporting directory {} (owned by {owner}): its reports are \
                 not written; set YING_REPORTING_PATH to a directory uid {euid} can write",
                path.display()
            ));
            return;
        }
        crate::sys::warn(&format!("{what} not written: {e}"));
    }

    /// Removes this process's report sets in `dir` beyond the newest `max_report_sets`; warns
    /// once per process when that fails.
    fn remove_old_sets(&self, dir: &ReportDir) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let ctx = ReportContext::current();
        if let Err(e) = dir.remove_old_sets(&ctx.exe_name(), ctx.pid, self.max_report_sets)
            && !WARNED.swap(true, Ordering::Relaxed)
        {
            crate::sys::warn(&format!("old report sets not removed: {e}"));
        }
    }

    /// Writes a report set on the calling thread in its turn (waiting at most until `deadline`
    /// for a dump of another thread), for [`RunnerHandle::dump_now`] without a report thread.
    fn dump_inline(
        &self,
        source: &'static dyn ProfileSource,
        deadline: Instant,
    ) -> io::Result<ReportPaths> {
        let turn = Turn::take(deadline)?;
        // Announced as a dump in flight, so that an exit waits for its files (see `at_exit`).
        DUMPS_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        let out = if EXITING.load(Ordering::SeqCst) {
            Err(io::Error::other("the process is exiting: its exit report is being written"))
        } else {
            self.write_now(source)
        };
        DUMPS_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        trim_after_dump();
        drop(turn);
        out
    }

    /// Spawns the background thread for the `#[global_allocator]` profiler (over any inner
    /// allocator).
    pub fn spawn<A: GlobalAlloc + Send + Sync + 'static>(
        &self,
        profiler: &'static YingProfiler<A>,
    ) -> RunnerHandle {
        self.spawn_for(profiler)
    }

    /// Spawns the background thread for any [`ProfileSource`]. The reporting directory is
    /// resolved, created and opened first (a failure is reported on stderr; reports are then
    /// skipped until the directory can be created at the same absolute path).
    pub fn spawn_for(&self, source: &'static dyn ProfileSource) -> RunnerHandle {
        self.prepare_for(source);
        self.spawn_thread_for(source)
    }

    /// Everything of [`spawn_for`](Self::spawn_for) but the thread: resolves, creates and opens
    /// the reporting directory and registers the exit report. A caller that starts the report
    /// thread later, with [`spawn_thread_for`](Self::spawn_thread_for), calls this at start.
    pub fn prepare_for(&self, source: &'static dyn ProfileSource) {
        let runner = self.clone();
        let mut start = || {
            crate::sys::save_stderr();
            // SAFETY: geteuid has no preconditions.
            START_EUID.store(unsafe { libc::geteuid() }, Ordering::Relaxed);
            if let Err(e) = runner.open_reporting_dir() {
                crate::sys::warn(&format!(
                    "reporting path {} {e}; reports are skipped",
                    runner.absolute_reporting_path().display()
                ));
            }
            if runner.report_at_exit {
                runner.register_exit_report(source);
            }
            crate::triggers::install(&runner.triggers, runner.check_interval_secs > 0);
        };
        source.run_guarded(&mut start);
    }

    /// Starts the report thread (none when `check_interval_secs` is 0) and the services the
    /// runner asks for (the endpoint and pushes, see [`crate::serve`]), after
    /// [`prepare_for`](Self::prepare_for), and returns the handle for on-demand dumps and
    /// stopping. Never call it from inside an allocation function or a signal handler: creating
    /// a thread allocates and takes glibc's locks.
    pub fn spawn_thread_for(&self, source: &'static dyn ProfileSource) -> RunnerHandle {
        let shared = Arc::new(Shared {
            state: Mutex::new(Control::default()),
            wake: Condvar::new(),
            runner: self.clone(),
            source,
        });
        let handle = RunnerHandle { shared: Arc::clone(&shared) };
        crate::serve::start(self, source, &handle);
        if self.check_interval_secs == 0 {
            if self.services.any() {
                // The endpoint's and pusher's threads would keep a process whose program
                // threads all ended alive: a thread that only waits for that end.
                let sh = Arc::clone(&shared);
                let mut start = || {
                    END_WAKE.store(Arc::into_raw(Arc::clone(&sh)).cast_mut(), Ordering::SeqCst);
                    if !source.counts_program_threads() {
                        watch_main_thread();
                    }
                    let sh = Arc::clone(&sh);
                    let body = Box::new(move || {
                        source.enter_profiler_thread();
                        wait_for_program_end(&sh);
                    });
                    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-end", body) {
                        crate::sys::warn(&format!("could not start the end watcher: {e}"));
                    }
                };
                source.run_guarded(&mut start);
            }
            return handle;
        }
        let runner = self.clone();
        let mut start = || {
            register_exit_handler();
            lock(&shared.state).thread_pid = std::process::id();
            END_WAKE.store(Arc::into_raw(Arc::clone(&shared)).cast_mut(), Ordering::SeqCst);
            if !source.counts_program_threads() {
                watch_main_thread();
            }
            let r = runner.clone();
            let sh = Arc::clone(&shared);
            let body = Box::new(move || {
                source.enter_profiler_thread();
                r.run(source, &sh)
            });
            let spawned = crate::sys::spawn_profiler_thread(c"ying-report", body);
            match spawned {
                Ok(()) => {
                    let mut running = lock(&RUNNING);
                    // Runners whose thread has ended are forgotten.
                    running.retain(|s| lock(&s.state).thread_pid != 0);
                    running.push(Arc::clone(&shared));
                }
                Err(e) => {
                    lock(&shared.state).thread_pid = 0;
                    crate::sys::warn(&format!("could not start the report thread: {e}"));
                }
            }
        };
        source.run_guarded(&mut start);
        handle
    }

    /// The same runner without the exit report (a `fork` child inherits the parent's).
    pub fn without_exit_report(&self) -> Self {
        Self { report_at_exit: false, ..self.clone() }
    }

    /// Arranges for a final report set when the process exits through `exit()` or a return
    /// from `main` (once per process; later calls are ignored).
    pub fn register_exit_report(&self, source: &'static dyn ProfileSource) {
        if EXIT_RUNNER.set((self.clone(), source)).is_ok() {
            EXIT_PID.store(std::process::id(), Ordering::Relaxed);
            register_exit_handler();
        }
    }

    /// The report thread's body: the report loop, then the hand-over of requests still
    /// waiting (their callers write their dumps themselves). Runs as profiler code with every
    /// signal blocked.
    fn run(&self, source: &dyn ProfileSource, shared: &Shared) {
        self.report_loop(source, shared);
        let outcome = {
            let mut c = lock(&shared.state);
            c.thread_pid = 0;
            c.outcome.take()
        };
        // This thread's memory, freed by it.
        drop(outcome);
        shared.wake.notify_all();
    }

    /// Checks every `check_interval_secs` and writes the dumps asked for, until stopped or the
    /// process exits.
    fn report_loop(&self, source: &dyn ProfileSource, shared: &Shared) {
        let mut last: Option<u64> = None;
        let interval = Duration::from_secs(self.check_interval_secs.max(1) as u64);
        let mut triggers =
            crate::triggers::Triggers::new(&self.triggers, self.absolute_reporting_path());
        let mut next_check = Instant::now() + interval;
        // Whether the program's threads ended while a thread Ying did not see start still
        // runs: its end is then polled every `END_SLOW_POLL`.
        let mut slow_end = false;
        loop {
            let mut wait_for = triggers.wait(next_check);
            if slow_end && program_ended() {
                wait_for = wait_for.min(END_SLOW_POLL);
            }
            // The number of the dump asked for, if one was.
            let forced = {
                let c = lock(&shared.state);
                let (mut c, _) = shared
                    .wake
                    .wait_timeout_while(c, wait_for, |c| {
                        !c.stop && c.requested <= c.started && (slow_end || !program_ended())
                    })
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if c.stop {
                    return;
                }
                if program_ended() {
                    drop(c);
                    // Returns only while a thread Ying did not see start is still running.
                    end_process_if_alone(if slow_end { Duration::ZERO } else { END_FAST_POLL });
                    slow_end = true;
                    continue;
                }
                slow_end = false;
                (c.requested > c.started).then(|| {
                    c.started = c.requested;
                    (c.started, std::mem::take(&mut c.for_exit))
                })
            };
            let (forced, for_exit) = match forced {
                Some((n, for_exit)) => (Some(n), for_exit),
                None => (None, false),
            };
            // The exit report asked by a thread a seccomp filter covers (see `at_exit`).
            const FOR_EXIT: &str =
                "exit (written by the report thread: a seccomp filter covers the exiting thread)";
            let exit_reason = for_exit.then_some(FOR_EXIT);
            // A trigger that fired (signal, control file, memory limit, new high), and whether
            // the periodic check is due: a tick with neither and no request writes nothing.
            let fired = triggers.poll();
            let due = Instant::now() >= next_check;
            if due {
                next_check = Instant::now() + interval;
            } else if forced.is_none() && fired.is_none() {
                continue;
            }
            let asked = forced.is_some() || fired.is_some();
            // Announce the dump before looking at the exit flag (both sequentially consistent):
            // either the exit path sees it in flight and waits, or this thread sees the exit.
            DUMPS_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            if EXITING.load(Ordering::SeqCst) {
                DUMPS_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            let now = crate::engine::totals::read().retained_bytes();
            // The timeline's point reads /proc: not while the program is near its descriptor
            // limit (the report is then skipped too, see `write_now`).
            if crate::sys::fd_headroom() {
                crate::report::timeline::tick();
            }
            let worth = asked || self.worth_a_report();
            let mut written = None;
            if worth && (asked || self.should_report(last, now)) {
                let out = Turn::take(Instant::now() + EXIT_WAIT).and_then(|turn| {
                    let reason = exit_reason.or(fired.as_deref());
                    let out =
                        crate::triggers::reason::with_reason(reason, || self.write_now(source));
                    drop(turn);
                    out
                });
                match &out {
                    Ok(_) => last = Some(now),
                    Err(e) if forced.is_none() => self.warn_not_written("report", e),
                    Err(_) => {} // The requester gets the error.
                }
                written = Some(out);
            }
            DUMPS_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            if let Some(n) = forced {
                let outcome = match written {
                    Some(Ok(paths)) => Ok(paths),
                    Some(Err(e)) => Err((e.kind(), e.to_string())),
                    None => Err((io::ErrorKind::Other, "no report written".to_string())),
                };
                let previous = {
                    let mut c = lock(&shared.state);
                    c.done = n;
                    c.outcome.replace(outcome)
                };
                drop(previous);
            }
            shared.wake.notify_all();
        }
    }
}

/// Writes a one-off flamegraph of `profiler`'s stacks ranked by `measurement` to `path`.
/// **Blocks** while it symbolizes and renders every stack (call it in
/// `tokio::task::spawn_blocking` from async code, as shown for [`RunnerHandle::dump_now`]).
#[allow(clippy::ptr_arg)] // `&PathBuf` is the 0.3.0 signature; programs written for it still build.
pub fn gen_flamegraph<A: GlobalAlloc + Send + Sync + 'static>(
    profiler: &YingProfiler<A>,
    measurement: Measurement,
    path: &PathBuf,
) -> Result<(), String> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a file path", path.display()))?;
    let interval = ProfileSource::sample_interval(profiler);
    let mut written = Ok(());
    // Every stack is folded (no cut, as in 0.3.0), from a compact snapshot taken and dropped
    // as profiler code, like a report set's.
    profiler.run_guarded(&mut || {
        let view = crate::callstack::FrameView::DEFAULT;
        let snap = crate::report::snapshot::take_compact(
            interval,
            crate::engine::sampler::ByteUnit::Requested,
        )
        .merge_printed(view);
        let ranked = snap.ranked(measurement);
        let folded = report::folded::render_ranked(&snap, &ranked, measurement, view, usize::MAX);
        written = report::flamegraph::render_svg(&folded, measurement, "").and_then(|svg| {
            report::files::write_atomic(dir, name, &svg).map(drop).map_err(|e| e.to_string())
        });
    });
    let out = written.as_ref().map(|_| ()).map_err(|e| e.clone());
    profiler.run_guarded(&mut || drop(std::mem::replace(&mut written, Ok(()))));
    out
}

/// Writes a full report set for `profiler` into `dir` right now (for an HTTP endpoint or a
/// health check), ranked by `options.measurement`.
///
/// **Blocks** while the set is written on the calling thread (tens to hundreds of
/// milliseconds), after any dump of another thread in progress (at most
/// [`DEFAULT_DUMP_TIMEOUT`]; dumps are written one at a time). From async code call it in
/// `tokio::task::spawn_blocking`, as shown for [`RunnerHandle::dump_now`], which writes into the
/// runner's directory and keeps its number of sets bounded; this function removes no old set.
pub fn write_report_now<A: GlobalAlloc + Send + Sync + 'static>(
    profiler: &YingProfiler<A>,
    options: &ReportOptions,
    dir: &Path,
) -> io::Result<ReportPaths> {
    let turn = Turn::take(Instant::now() + DEFAULT_DUMP_TIMEOUT)?;
    // The directory is the profiler's memory: opened and dropped as profiler code.
    let mut opened: Option<io::Result<ReportDir>> = None;
    profiler.run_guarded(&mut || opened = Some(ReportDir::open(dir, DEFAULT_FILE_MODE)));
    let out = match &opened {
        Some(Ok(d)) => write_report_from(profiler, options, d),
        Some(Err(e)) => Err(io::Error::new(e.kind(), e.to_string())),
        None => Err(io::Error::other("reporting directory not opened")),
    };
    profiler.run_guarded(&mut || drop(opened.take()));
    trim_after_dump();
    drop(turn);
    out
}
