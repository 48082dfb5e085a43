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
//! link and identified by (absolute path, device, inode) (see `src/report/files.rs`); every later
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
//!
//! # The modules
//!
//! `settings` (the settings, their one builder, the configuration), `handle` (the
//! [`RunnerHandle`] and its request protocol), `report_loop` (the report thread), `lifecycle`
//! (exit, `fork`, change of user and the program's end: one object), `write` (one report set,
//! and the one-off reports). The report source, the guard helper, the error that crosses the
//! guard and the process's report turn are in `crate::source`, below the runner, the services
//! and the in-memory profiles alike.

mod handle;
mod keeper;
// `lifecycle` and `settings` hold the front end's exit and start-up calls too
// (`crate::front_end` re-exports them; they are not the runner's API).
pub(crate) mod lifecycle;
mod live;
mod report_loop;
pub(crate) mod settings;
mod write;

pub use crate::config::{DiskFloor, HttpAddr, HttpToken, LiveFile};
pub use crate::source::{DEFAULT_DUMP_TIMEOUT, Error, ProfileSource};
pub use handle::RunnerHandle;
pub use settings::{
    DEFAULT_CHECK_INTERVAL_SECS, DEFAULT_MAX_REPORT_SETS, DEFAULT_PCT_CHANGE_TRIGGER,
    DEFAULT_REPORTING_PATH, DEFAULT_TOP_K, ProfilerRunner, ProfilerRunnerBuilder,
    ProfilerRunnerBuilderError,
};
pub use write::{gen_flamegraph, write_report_now};

use lifecycle::{exiting, program_threads_ended};
use settings::apply_sampling_config;

use std::alloc::GlobalAlloc;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use crate::YingProfiler;
use crate::report::{ReportOptions, ReportPaths};
use crate::source::guarded;
use crate::source::turn::lock;
use handle::{Control, Shared};
use lifecycle::LIFE;

impl<A: GlobalAlloc + Send + Sync + 'static> YingProfiler<A> {
    /// Starts reporting with the seed's defaults: a check every 5 minutes, a report when
    /// retained memory moved by 10 %, flamegraphs on, ranked by retained bytes, written to
    /// `ying-profiles`, and a final report set when the process exits (if it took a sample).
    /// Returns the handle of the runner it spawned, for on-demand report sets
    /// ([`RunnerHandle::dump_now`]) and its settings ([`RunnerHandle::runner`]); the report
    /// thread and the exit report need nothing kept, so the handle may be dropped.
    ///
    /// `YING_*` variables, where set, replace these values (the README's table: the endpoint,
    /// pushes, triggers, the live file, the reporting path, ...), and replace the sampling
    /// settings given in code (`with_sample_interval`); an invalid value is one warning line and
    /// keeps the value it would have replaced.
    pub fn start_profiling(&'static self) -> RunnerHandle {
        ProfilerRunner::seed_from_env(self).spawn(self)
    }
}

/// Runs `f` for `source` on a short-lived thread of Ying's with a descriptor table of its own
/// (`sys::fds`), waits for it, and returns `copy` of its value: what a program's thread asks of
/// the runner that opens files (the exit report, an on-demand dump without a report thread, the
/// live file's removal) never takes a descriptor number of the program's. As with `guarded`,
/// `f`'s value is the profiler's memory: `copy` makes the caller's copy outside the guard, and
/// the value is dropped inside it. On a thread of Ying's, or when no thread can be created,
/// `f` runs on the calling thread, as profiler code. `None` when `f` panicked.
pub(crate) fn privately<R: Send, O>(
    source: &'static dyn ProfileSource,
    f: impl FnOnce() -> R + Send,
    copy: impl FnOnce(&R) -> O,
) -> Option<O> {
    let mut f = Some(f);
    let mut out: Option<R> = None;
    // The thread is created inside the guard: its creation is the profiler's, and the shim does
    // not count it among the program's threads.
    source.run_guarded(&mut || {
        let Some(f) = f.take() else { return };
        out = crate::sys::fds::on_private_thread(c"ying-io", move |fresh| {
            if fresh {
                source.enter_profiler_thread();
            }
            f()
        });
    });
    let copied = out.as_ref().map(copy);
    source.run_guarded(&mut || drop(out.take()));
    copied
}

/// What the services (`crate::serve`) need of the runner that starts them.
struct Served {
    runner: ProfilerRunner,
    handle: RunnerHandle,
}

impl crate::serve::Runner for Served {
    fn report_options(&self) -> ReportOptions {
        self.runner.report_options()
    }
    fn reporting_path(&self) -> PathBuf {
        self.runner.absolute_reporting_path().to_path_buf()
    }
    fn check_interval_secs(&self) -> usize {
        self.runner.check_interval_secs()
    }
    fn report_pct_change_trigger(&self) -> usize {
        self.runner.report_pct_change_trigger()
    }
    fn dump_now(&self) -> io::Result<ReportPaths> {
        self.handle.dump_now()
    }
    fn exiting(&self) -> bool {
        exiting()
    }
}

impl ProfilerRunner {
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
        apply_sampling_config(&cfg, set);
        set.set_enabled(cfg.enabled);
        Self::from_config(&cfg)
    }

    /// The seed's values ([`ProfilerRunner::seed_defaults`]) with every `YING_*` variable set
    /// in the environment applied over them, and over `profiler`'s sampling settings (only
    /// those whose variable is set): what [`YingProfiler::start_profiling`] runs. Warnings
    /// (an invalid value, an unknown name) go to stderr, one line each.
    pub fn seed_from_env<A: GlobalAlloc>(profiler: &YingProfiler<A>) -> Self {
        crate::sys::save_stderr();
        let set: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| k.starts_with("YING_"))
            .collect();
        let (cfg, warnings) = crate::config::Config::from_env_over(ProfilerRunner::seed_config());
        for w in warnings {
            crate::sys::write_stderr(format!("{w}\n").as_bytes());
        }
        let is_set = |name: &str| set.iter().any(|k| k == name);
        settings::apply_sampling_config_set(&cfg, profiler.settings(), &is_set);
        Self::from_config(&cfg)
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
        let start = || {
            let runner = self;
            crate::sys::save_stderr();
            // SAFETY: geteuid has no preconditions.
            LIFE.record_start_euid(unsafe { libc::geteuid() });
            if let Err(e) = runner.open_reporting_dir() {
                crate::sys::warn(&format!(
                    "reporting path {} {e}; reports are skipped",
                    runner.absolute_reporting_path().display()
                ));
            }
            if runner.report_at_exit {
                runner.register_exit_report(source);
            }
            // A failure here is said when the first version cannot be written.
            let _ = runner.live_dir();
            if runner.live.symbolize_offline {
                crate::symbols::symbolize::set_offline(true);
            }
            crate::triggers::install(&runner.triggers, runner.check_interval_secs > 0);
        };
        let _ = guarded(source, start, |_| ());
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
        if self.services.any() {
            let serve = || {
                let served = Served { runner: self.clone(), handle: handle.clone() };
                crate::serve::start(&self.services, Arc::new(served), source);
            };
            let _ = guarded(source, serve, |_| ());
        }
        if self.check_interval_secs == 0 {
            if self.services.any() {
                // The endpoint's and pusher's threads would keep a process whose program
                // threads all ended alive: a thread that only waits for that end.
                let start = || {
                    LIFE.wake_at_end(&shared);
                    if !source.counts_program_threads() {
                        report_loop::watch_main_thread();
                    }
                    keeper::start(source);
                    let sh = Arc::clone(&shared);
                    let body = Box::new(move || {
                        source.enter_profiler_thread();
                        report_loop::wait_for_program_end(&sh);
                    });
                    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-end", body) {
                        crate::sys::warn(&format!("could not start the end watcher: {e}"));
                    }
                };
                let _ = guarded(source, start, |_| ());
            }
            return handle;
        }
        let start = || {
            lifecycle::register_exit_handler();
            if self.live.file != LiveFile::Off {
                LIFE.register_live_file(self, source);
            }
            lock(&shared.state).thread_pid = std::process::id();
            LIFE.wake_at_end(&shared);
            if !source.counts_program_threads() {
                report_loop::watch_main_thread();
            }
            keeper::start(source);
            let r = self.clone();
            let sh = Arc::clone(&shared);
            let body = Box::new(move || {
                source.enter_profiler_thread();
                r.run(source, &sh)
            });
            match crate::sys::spawn_profiler_thread(c"ying-report", body) {
                // Runners whose thread has ended are forgotten.
                Ok(()) => LIFE.add_running(&shared),
                Err(e) => {
                    lock(&shared.state).thread_pid = 0;
                    crate::sys::warn(&format!("could not start the report thread: {e}"));
                }
            }
        };
        let _ = guarded(source, start, |_| ());
        handle
    }

    /// Arranges for a final report set when the process exits through `exit()` or a return
    /// from `main` (once per process; later calls are ignored).
    pub fn register_exit_report(&self, source: &'static dyn ProfileSource) {
        if LIFE.register_exit_report(self, source) {
            lifecycle::register_exit_handler();
        }
    }
}
