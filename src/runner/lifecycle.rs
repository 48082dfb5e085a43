//! The process's life as the runner sees it: exit, `fork`, change of user and the end of the
//! program's threads, in one object ([`Lifecycle`], one static) instead of a dozen statics.
//!
//! Three ways the process can end, each with its own entry:
//!
//! - **Exit ownership** ([`before_exit`], the shim's `exit`): glibc (before 2.41) lets several
//!   threads run `exit` at once, and the one that finds the handler list empty calls `_exit`
//!   while another is still writing the exit report. The first thread to exit owns the exit;
//!   every later one waits for the report.
//! - **Program end** ([`program_threads_ended`]): when the program's last thread ends, Ying's
//!   threads would keep the process alive; the report thread (or a watcher) calls `exit(0)`
//!   as glibc would have, once only Ying's threads are left.
//! - **Seccomp stop** (`stop_profiler_threads`, and [`Lifecycle::at_exit`] under a filter): a
//!   filter may punish the exiting thread's report, so the report thread writes it instead.
//!
//! Beside them, the exit report waits for a periodic dump in flight
//! ([`Lifecycle::finish_dumps_in_flight`]), and a `fork` child starts from a clean state
//! ([`Lifecycle::after_fork_child`]). Nothing here takes a lock that a `fork` could copy held,
//! except the list of running report threads, which the exit path only tries.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::handle::Shared;
use super::{ProfileSource, ProfilerRunner};
use crate::engine::SAMPLED;
use crate::report::ReportContext;
use crate::report::files::ReportDir;
use crate::source::guarded;
use crate::source::turn::lock;
use crate::sys::gettid;

/// Longest the exit path waits for a periodic dump in flight to finish its files.
pub(super) const EXIT_WAIT: Duration = Duration::from_secs(30);
/// Longest a thread calling `exit` waits for another thread's exit report: the exit path's own
/// wait for a periodic dump, then the report itself.
const EXIT_FOLLOWER_WAIT: Duration = Duration::from_secs(90);
/// How long the report thread polls, every millisecond, for the last thread to be gone.
pub(super) const END_FAST_POLL: Duration = Duration::from_secs(2);
/// Then, while a thread Ying did not see start still runs, how often it looks again.
pub(super) const END_SLOW_POLL: Duration = Duration::from_millis(200);

/// Everything the runner knows of the process's life.
pub(super) struct Lifecycle {
    /// The runner registered for the exit report (one per process).
    exit_runner: OnceLock<(ProfilerRunner, &'static dyn ProfileSource)>,
    /// The process that registered the exit report (a `fork` child has another pid).
    exit_pid: AtomicU32,
    /// The runner whose report thread keeps a live file, removed at a normal exit.
    live_runner: OnceLock<(ProfilerRunner, &'static dyn ProfileSource)>,
    /// Whether [`at_exit`] is registered in this process.
    exit_handler_registered: AtomicBool,
    /// Periodic dumps being written now (0 or 1 per report thread).
    dumps_in_flight: AtomicU32,
    /// Set by the exit path: no report thread starts a new dump after it.
    exiting: AtomicBool,
    /// Set by the first run of `at_exit`: the exit report is written at most once per process,
    /// even if `exit` is called again (from another atexit handler, or by two threads at once).
    exit_reported: AtomicBool,
    /// Set once `at_exit` has finished (the exit report written, or not due): a thread that
    /// calls `exit` while another one is exiting waits for it.
    exit_done: AtomicBool,
    /// The thread (kernel id) whose `exit` came first, 0 before any.
    exit_owner: AtomicU32,
    /// The thread (kernel id) running `at_exit`, 0 before.
    at_exit_thread: AtomicU32,
    /// Set when every thread of the program has ended while a thread of Ying's still runs.
    program_ended: AtomicBool,
    /// The report thread to wake when the program's threads have ended: the `Shared` of the
    /// last one started, one reference of it leaked so that it stays valid for the process's
    /// life (no lock, so that no `fork` can copy one held).
    end_wake: AtomicPtr<Shared>,
    /// The report threads started in this process, for `stop_profiler_threads`.
    running: Mutex<Vec<Arc<Shared>>>,
    /// Giant refusals counted when this process started or forked (a child inherits the
    /// count).
    giant_refused_at_start: AtomicU64,
    /// The directory this process writes in after it changed user (`uid-<uid>` inside the
    /// reporting directory; see `ProfilerRunner::dir_for_new_user`).
    new_user_dir: OnceLock<ReportDir>,
    /// The effective user id when the runner was prepared: a process whose reports fail with
    /// "permission denied" under another one (a daemon's worker after `setuid`) is told once.
    start_euid: AtomicU32,
}

impl fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lifecycle")
            .field("exiting", &self.exiting)
            .field("dumps_in_flight", &self.dumps_in_flight)
            .field("exit_owner", &self.exit_owner)
            .field("program_ended", &self.program_ended)
            .finish_non_exhaustive()
    }
}

/// Says once on stderr where the exit report went: its text report, and the process's page;
/// or its raw profile, for `ying report` to name.
fn announce(paths: &crate::report::ReportPaths) {
    let Some(first) = paths.text.as_ref().or(paths.manifest.as_ref()).or(paths.pprof.as_ref())
    else {
        if let Some(raw) = &paths.raw {
            crate::sys::write_stderr(
                format!(
                    "ying: exit report: {} (raw: `ying report {}` names it)\n",
                    raw.display(),
                    raw.display()
                )
                .as_bytes(),
            );
        }
        return;
    };
    let page = match &paths.html {
        Some(h) => format!(" (page: {})", h.display()),
        None => String::new(),
    };
    crate::sys::write_stderr(format!("ying: exit report: {}{page}\n", first.display()).as_bytes());
}

/// The process's.
pub(super) static LIFE: Lifecycle = Lifecycle::new();

impl Lifecycle {
    pub(super) const fn new() -> Self {
        Self {
            exit_runner: OnceLock::new(),
            exit_pid: AtomicU32::new(0),
            live_runner: OnceLock::new(),
            exit_handler_registered: AtomicBool::new(false),
            dumps_in_flight: AtomicU32::new(0),
            exiting: AtomicBool::new(false),
            exit_reported: AtomicBool::new(false),
            exit_done: AtomicBool::new(false),
            exit_owner: AtomicU32::new(0),
            at_exit_thread: AtomicU32::new(0),
            program_ended: AtomicBool::new(false),
            end_wake: AtomicPtr::new(std::ptr::null_mut()),
            running: Mutex::new(Vec::new()),
            giant_refused_at_start: AtomicU64::new(0),
            new_user_dir: OnceLock::new(),
            start_euid: AtomicU32::new(0),
        }
    }

    /// Announces a dump about to be written; false (and nothing announced) when the process
    /// is exiting. Announce before looking at the exit flag (both sequentially consistent):
    /// either the exit path sees the dump in flight and waits, or the dump sees the exit.
    pub(super) fn begin_dump(&self) -> bool {
        self.dumps_in_flight.fetch_add(1, Ordering::SeqCst);
        if self.exiting.load(Ordering::SeqCst) {
            self.dumps_in_flight.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// The dump announced by [`begin_dump`](Self::begin_dump) is over.
    pub(super) fn end_dump(&self) {
        self.dumps_in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether the exit path has begun.
    pub(super) fn exiting(&self) -> bool {
        self.exiting.load(Ordering::SeqCst)
    }

    /// Whether the program's threads have all ended (see [`program_threads_ended`]).
    pub(super) fn program_ended(&self) -> bool {
        self.program_ended.load(Ordering::SeqCst)
    }

    /// The report thread (or end watcher) `shared` is the one to wake at the program's end.
    pub(super) fn wake_at_end(&self, shared: &Arc<Shared>) {
        self.end_wake.store(Arc::into_raw(Arc::clone(shared)).cast_mut(), Ordering::SeqCst);
    }

    /// Remembers a started report thread (and forgets those whose thread has ended).
    pub(super) fn add_running(&self, shared: &Arc<Shared>) {
        let mut running = lock(&self.running);
        running.retain(|s| lock(&s.state).thread_pid != 0);
        running.push(Arc::clone(shared));
    }

    /// Asks every report thread of the process to stop.
    pub(super) fn stop_running(&self) {
        for shared in lock(&self.running).iter() {
            lock(&shared.state).stop = true;
            shared.wake.notify_all();
        }
    }

    /// The directory of the new user, once the process changed user.
    pub(super) fn new_user_dir(&self) -> Option<&ReportDir> {
        self.new_user_dir.get()
    }

    /// From now on, reports go to `dir`.
    pub(super) fn set_new_user_dir(&self, dir: ReportDir) {
        let _ = self.new_user_dir.set(dir);
    }

    /// Records the effective user id the runner was prepared under.
    pub(super) fn record_start_euid(&self, euid: u32) {
        self.start_euid.store(euid, Ordering::Relaxed);
    }

    /// Whether the effective user id is no longer the one the runner was prepared under.
    pub(super) fn user_changed(&self, euid: u32) -> bool {
        self.start_euid.load(Ordering::Relaxed) != euid
    }

    /// Whether the process refused a giant allocation since it started or forked.
    pub(super) fn refused_since_start(&self) -> bool {
        crate::engine::tables::GIANT_REFUSED.load(Ordering::Relaxed)
            > self.giant_refused_at_start.load(Ordering::Relaxed)
    }

    /// Registers `runner`, whose report thread keeps the live file, for the file's removal at
    /// a normal exit (the first runner of the process).
    pub(super) fn register_live_file(
        &self,
        runner: &ProfilerRunner,
        source: &'static dyn ProfileSource,
    ) {
        let _ = self.live_runner.set((runner.clone(), source));
    }

    /// Registers `runner` for the exit report, once per process; false if one was already.
    pub(super) fn register_exit_report(
        &self,
        runner: &ProfilerRunner,
        source: &'static dyn ProfileSource,
    ) -> bool {
        if self.exit_runner.set((runner.clone(), source)).is_err() {
            return false;
        }
        self.exit_pid.store(std::process::id(), Ordering::Relaxed);
        true
    }

    /// The runner that writes this process's exit report, if this process writes one.
    fn exit_runner(&self) -> Option<&(ProfilerRunner, &'static dyn ProfileSource)> {
        self.exit_runner.get().filter(|(_, source)| {
            source.reports_in_fork_children()
                || self.exit_pid.load(Ordering::Relaxed) == std::process::id()
        })
    }

    /// The state of a `fork` child: no report thread (yet), nothing of its parent's in flight,
    /// no exit begun, and no sample of its own.
    fn after_fork_child(&self, giant_refused: u64) {
        self.dumps_in_flight.store(0, Ordering::SeqCst);
        self.exit_reported.store(false, Ordering::SeqCst);
        self.exit_done.store(false, Ordering::SeqCst);
        self.exit_owner.store(0, Ordering::SeqCst);
        self.at_exit_thread.store(0, Ordering::SeqCst);
        self.program_ended.store(false, Ordering::SeqCst);
        // The child has no report thread until it starts its own.
        self.end_wake.store(std::ptr::null_mut(), Ordering::SeqCst);
        self.giant_refused_at_start.store(giant_refused, Ordering::Relaxed);
    }

    /// Whether thread `me`, calling `exit`, must wait for another thread's exit report: not
    /// when it is the first to exit (or its own nested `exit`), unless another thread is
    /// already writing the report (its exit did not come through here: a return from `main`).
    fn must_wait_at_exit(&self, me: u32) -> bool {
        if !self.exit_handler_registered.load(Ordering::SeqCst) {
            return false;
        }
        let first =
            match self.exit_owner.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => true,
                Err(owner) => owner == me,
            };
        let writer = self.at_exit_thread.load(Ordering::SeqCst);
        !(first && (writer == 0 || writer == me))
    }

    /// Thread `me` runs the exit handler: it owns the exit (even one that did not pass through
    /// `before_exit`: a return from `main`, glibc's own `exit(0)` after the last thread).
    fn enter_at_exit(&self, me: u32) {
        let _ = self.exit_owner.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst);
        let _ = self.at_exit_thread.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The exit handler is over: threads waiting in `before_exit` go on.
    fn exit_finished(&self) {
        self.exiting.store(true, Ordering::SeqCst);
        self.exit_done.store(true, Ordering::SeqCst);
    }

    /// Tells report threads that the process is exiting and waits (at most [`EXIT_WAIT`])
    /// until no periodic dump is being written: `exit()` ends every other thread at once, and
    /// a dump cut off between its files would leave a report set without its last files (the
    /// `.pb.gz` is written last). Polls with a short sleep instead of waiting on a lock, so
    /// that nothing a `fork` could copy in a locked state is involved. When it gives up, no
    /// other thread creates report files any more and the abandoned dump's temporary files
    /// are removed (see [`ReportDir::abandon_others`]).
    fn finish_dumps_in_flight(&self) {
        self.exiting.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while self.dumps_in_flight.load(Ordering::SeqCst) != 0 {
            if start.elapsed() >= EXIT_WAIT {
                crate::sys::warn(
                    "a periodic report was still being written after 30 s at exit; its set may be incomplete",
                );
                if let Some((runner, source)) = self.exit_runner.get() {
                    let abandon = || {
                        if let Ok(dir) = runner.reporting_dir() {
                            let ctx = ReportContext::current();
                            let _ = dir.abandon_others(&ctx.exe_name(), ctx.process());
                        }
                    };
                    let _ = guarded(*source, abandon, |_| ());
                }
                return;
            }
            sleep_raw(2_000_000);
        }
    }

    /// The exit handler's body (see [`at_exit`]).
    fn at_exit(&self) {
        self.enter_at_exit(gettid());
        if crate::sys::seccomp::level() != crate::sys::seccomp::NONE {
            // A seccomp filter may cover the exiting thread (any thread of the program's is
            // taken as covered): no report here (`openat`, `write`, `renameat`...). A report
            // thread the filter does not cover writes it, if every filter lets this thread
            // wait for it.
            if crate::sys::seccomp::exit_by_report_thread() {
                self.exit_report_by_report_thread();
            }
            // Otherwise a periodic dump of a report thread the filter does not cover is cut
            // off by the exit.
            self.exit_finished();
            return;
        }
        self.finish_dumps_in_flight();
        if self.exit_reported.swap(true, Ordering::SeqCst) {
            return;
        }
        // What there is to do, looked at before a thread is made for it: most processes of a
        // fork storm or a build took no sample and have no live file.
        let exit = self.exit_runner().filter(|(runner, _)| runner.worth_a_report());
        let live = self.live_runner.get().filter(|(runner, _)| runner.has_live_file());
        if let Some(source) = exit.or(live).map(|(_, source)| *source) {
            // Both on one private thread. Whether the heap at exit is on disk as a complete
            // set (or there was nothing to write).
            let work = || {
                let reported = match exit {
                    Some((runner, source)) => match runner.write_now(*source) {
                        Ok(paths) => {
                            if runner.announce_exit_report {
                                announce(&paths);
                            }
                            true
                        }
                        Err(e) => {
                            let kept = live.and_then(|(r, _)| r.live_file_path());
                            let what = match kept {
                                Some(p) => format!(
                                    "final report (the heap at exit stays in {} for `ying report`)",
                                    p.display()
                                ),
                                None => "final report".to_string(),
                            };
                            runner.warn_not_written(&what, &e);
                            false
                        }
                    },
                    None => true,
                };
                // The exit report replaces the live file: a file left is a process that did
                // not exit, or one whose exit report could not be written (the file is then
                // the only copy of its heap at exit).
                if reported && let Some((runner, _)) = live {
                    runner.remove_live_file();
                }
            };
            super::privately(source, work, |_| ());
        }
        self.exit_done.store(true, Ordering::SeqCst);
    }

    /// The exit report under a seccomp filter that covers the exiting thread but not the report
    /// thread (one without `TSYNC`): the report thread writes it while this thread waits (at
    /// most [`EXIT_WAIT`]), making no system call but `futex`, `getpid` and the clock's, which
    /// the shim checked every filter allows (`sys::seccomp::exit_by_report_thread`).
    fn exit_report_by_report_thread(&self) {
        if self.exit_reported.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some((runner, _)) = self.exit_runner() else { return };
        if !runner.worth_a_report() {
            return;
        }
        let me = std::process::id();
        let deadline = Instant::now() + EXIT_WAIT;
        // Nothing here allocates: the list is only read, under its lock (taken before a report
        // thread's state lock, as in `stop_profiler_threads`). Not waited for: a `fork` child
        // may have inherited it held by a thread it does not have.
        let running = match self.running.try_lock() {
            Ok(r) => r,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        for shared in running.iter() {
            let mut c = lock(&shared.state);
            if !c.served_in(me) {
                continue;
            }
            let target = c.request();
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

    /// See [`program_threads_ended`].
    fn set_program_ended(&self, ended: bool) {
        self.program_ended.store(ended, Ordering::SeqCst);
        if !ended {
            return;
        }
        // SAFETY: a non-null pointer is a leaked `Arc<Shared>` reference, valid forever.
        if let Some(shared) = unsafe { self.end_wake.load(Ordering::SeqCst).as_ref() } {
            // Under the state's lock, so that the report thread is either waiting (and woken)
            // or about to look at the flag.
            let _state = lock(&shared.state);
            shared.wake.notify_all();
        }
    }
}

/// Sleeps `ns` nanoseconds with the raw system call: the preload shim exports `nanosleep` (a
/// safe point), and the exit path is no place to go through it.
pub(super) fn sleep_raw(ns: u64) {
    let ts =
        libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ };
    // SAFETY: `ts` is a valid timespec; a null remainder pointer is allowed.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<libc::timespec>()) };
}

/// Stops every thread of Ying's in this process (report threads after the dump they are
/// writing, the endpoint, the pusher) and waits until they have ended, at most `timeout`;
/// false if one is still running then. The preload shim calls it before a seccomp filter that
/// would cover them is installed (see `sys::seccomp`). Later dumps asked of a stopped runner
/// are written by the asking thread.
#[doc(hidden)]
pub fn stop_profiler_threads(timeout: Duration) -> bool {
    LIFE.stop_running();
    super::keeper::stop();
    crate::serve::stop();
    crate::sys::wait_profiler_threads_gone(timeout)
}

/// Whether the process is exiting (the exit path has begun): no report thread should start
/// (the shim's thread-start path).
#[doc(hidden)]
pub fn exiting() -> bool {
    LIFE.exiting()
}

/// Called by the preload shim's `exec` family before the image is replaced: the live file of
/// the image ending is removed (an `exec` is not a death; the new image writes its own). The
/// caller holds the guard, in the process that wrote the file (never a `vfork` child).
#[doc(hidden)]
pub fn before_exec() {
    if let Some((runner, source)) = LIFE.live_runner.get().filter(|(r, _)| r.has_live_file()) {
        super::privately(*source, || runner.remove_live_file(), |_| ());
    }
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
    if !LIFE.must_wait_at_exit(gettid()) {
        return;
    }
    let start = Instant::now();
    while !LIFE.exit_done.load(Ordering::SeqCst) && start.elapsed() < EXIT_FOLLOWER_WAIT {
        sleep_raw(1_000_000);
    }
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
    LIFE.set_program_ended(ended);
}

/// Registered with `atexit` once a report thread or an exit report exists.
extern "C" fn at_exit() {
    LIFE.at_exit();
}

/// A `fork` child has no report thread (yet): nothing of its parent's is in flight; and it has
/// taken no sample of its own (the records it inherited are its parent's samples: a child that
/// samples nothing itself, such as a shell's subshell, writes no report).
extern "C" fn after_fork_child() {
    crate::sys::forget_profiler_threads();
    SAMPLED.store(false, Ordering::Relaxed);
    LIFE.after_fork_child(crate::engine::tables::GIANT_REFUSED.load(Ordering::Relaxed));
}

/// Registers [`at_exit`] and the fork handler once per process.
pub(super) fn register_exit_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` and `after_fork_child` are plain `extern "C" fn()`s with no
        // captured state; they only touch atomics, our own statics and report code.
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(after_fork_child));
        }
        LIFE.exit_handler_registered.store(true, Ordering::SeqCst);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_dump_begins_once_the_exit_has_begun() {
        let l = Lifecycle::new();
        assert!(l.begin_dump());
        assert_eq!(l.dumps_in_flight.load(Ordering::SeqCst), 1);
        l.end_dump();
        l.exit_finished();
        assert!(l.exiting());
        assert!(!l.begin_dump(), "refused at exit");
        assert_eq!(l.dumps_in_flight.load(Ordering::SeqCst), 0, "and not left announced");
    }

    #[test]
    fn the_exit_waits_for_no_dump_when_none_is_in_flight() {
        let l = Lifecycle::new();
        let start = Instant::now();
        l.finish_dumps_in_flight();
        assert!(l.exiting());
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_exit_waits_for_a_dump_in_flight_to_end() {
        let l: &'static Lifecycle = Box::leak(Box::new(Lifecycle::new()));
        assert!(l.begin_dump());
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            l.end_dump();
        });
        let start = Instant::now();
        l.finish_dumps_in_flight();
        assert!(start.elapsed() >= Duration::from_millis(40), "waited for the dump");
        ender.join().unwrap();
    }

    #[test]
    fn the_first_thread_to_exit_owns_the_exit() {
        let l = Lifecycle::new();
        assert!(!l.must_wait_at_exit(10), "no exit handler: nobody waits");
        assert_eq!(l.exit_owner.load(Ordering::SeqCst), 0);
        l.exit_handler_registered.store(true, Ordering::SeqCst);
        assert!(!l.must_wait_at_exit(10), "the first goes on");
        assert!(!l.must_wait_at_exit(10), "so does its nested exit");
        assert!(l.must_wait_at_exit(11), "another thread waits");
    }

    #[test]
    fn a_first_exit_waits_for_a_report_another_thread_is_writing() {
        let l = Lifecycle::new();
        l.exit_handler_registered.store(true, Ordering::SeqCst);
        l.enter_at_exit(20); // `main` returned on thread 20
        assert!(l.must_wait_at_exit(21));
        assert!(!l.must_wait_at_exit(20), "the writer's own nested exit goes on");
    }

    #[test]
    fn a_fork_child_starts_over() {
        let l = Lifecycle::new();
        l.exit_handler_registered.store(true, Ordering::SeqCst);
        l.enter_at_exit(20);
        l.exit_reported.store(true, Ordering::SeqCst);
        l.exit_done.store(true, Ordering::SeqCst);
        l.program_ended.store(true, Ordering::SeqCst);
        assert!(l.begin_dump());
        l.after_fork_child(3);
        assert_eq!(l.dumps_in_flight.load(Ordering::SeqCst), 0);
        assert!(!l.exit_reported.load(Ordering::SeqCst) && !l.exit_done.load(Ordering::SeqCst));
        assert_eq!(l.exit_owner.load(Ordering::SeqCst), 0);
        assert_eq!(l.at_exit_thread.load(Ordering::SeqCst), 0);
        assert!(!l.program_ended());
        assert!(l.end_wake.load(Ordering::SeqCst).is_null());
        assert_eq!(l.giant_refused_at_start.load(Ordering::SeqCst), 3);
        assert!(!l.must_wait_at_exit(30), "the child's first exit owns it");
    }

    #[test]
    fn the_program_end_is_set_and_taken_back() {
        let l = Lifecycle::new();
        l.set_program_ended(true);
        assert!(l.program_ended());
        l.set_program_ended(false);
        assert!(!l.program_ended());
    }

    #[test]
    fn a_user_change_is_seen_against_the_start() {
        let l = Lifecycle::new();
        l.record_start_euid(0);
        assert!(!l.user_changed(0));
        assert!(l.user_changed(1000));
    }
}
