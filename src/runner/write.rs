//! Writing one report set: into the runner's reporting directory (opened and identified once,
//! or the directory of a new user after a change of user), from a report taken and
//! dropped under the guard; the one-off [`gen_flamegraph`] and [`write_report_now`]; and what
//! is said when a report could not be written.

use std::alloc::GlobalAlloc;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use super::lifecycle::LIFE;
use super::{ProfileSource, ProfilerRunner};
use crate::YingProfiler;
use crate::callstack::Measurement;
use crate::engine::SAMPLED;
use crate::report::files::{DEFAULT_FILE_MODE, ReportDir};
use crate::report::foreign_malloc;
use crate::report::model::{Occasion, Report};
use crate::report::{self, ReportContext, ReportOptions, ReportPaths};
use crate::source::budget::{self, Work};
use crate::source::turn::{Turn, trim_after_dump};
use crate::source::{DEFAULT_DUMP_TIMEOUT, Error, Skipped, guarded, guarded_io};

/// `p` made absolute: a relative path is joined to the working directory of this moment.
pub(super) fn absolute(p: &Path) -> std::path::PathBuf {
    match std::env::current_dir() {
        Ok(cwd) if p.is_relative() => cwd.join(p),
        _ => p.to_path_buf(),
    }
}

/// What the reporting filesystem's floor (`YING_MIN_FREE_SPACE`) is checked for: each kind
/// remembers the size of the last one written (the floor is at least four times that) and
/// whether the last check found too little room (so the warning is said once an episode).
#[derive(Debug, Clone, Copy)]
pub(super) enum Writing {
    /// A report set.
    Set = 0,
    /// A version of the live file.
    LiveVersion = 1,
}

/// Bytes of the last report set and the last live-file version written by this process.
static LAST_BYTES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
/// Whether the last check of each kind found the filesystem below its floor.
static BELOW_FLOOR: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

impl Writing {
    /// What the warning calls it.
    fn name(self) -> &'static str {
        match self {
            Writing::Set => "report set",
            Writing::LiveVersion => "live file",
        }
    }

    /// Records the size of the files just written (a set's, or the live file).
    pub(super) fn wrote<'a>(self, files: impl Iterator<Item = &'a Path>) {
        let bytes = files.filter_map(|p| std::fs::symlink_metadata(p).ok()).map(|m| m.len()).sum();
        LAST_BYTES[self as usize].store(bytes, Ordering::Relaxed);
    }
}

/// Writes a report set of `source`'s stacks into `dir`, from a report taken and dropped as
/// profiler code: its memory is bounded by the stacks' count and depth (see `report::model`),
/// not by a copy of every stack with its frames. Only the returned paths are the caller's
/// memory.
fn write_report_from(
    source: &dyn ProfileSource,
    opts: &ReportOptions,
    dir: &ReportDir,
    raw: bool,
) -> io::Result<ReportPaths> {
    let (interval, unit) = (source.sample_interval(), source.unit());
    let occasion = Occasion {
        reason: crate::triggers::reason::current(),
        exiting: LIFE.exiting(),
        ended: None,
    };
    let write = || {
        // The report's memory, reserved before it is taken (skipped near a memory limit).
        let _memory = budget::grant(Work::Set, occasion.exiting)?;
        if raw {
            let seq = report::take_seq();
            return report::live::write::write_raw_set(dir, interval, unit, opts, occasion, seq);
        }
        let mut r = Report::take(interval, unit, occasion, opts);
        report::write_set(&mut r, dir, true)
    };
    Ok(guarded_io(source, write, ReportPaths::clone)?)
}

impl ProfilerRunner {
    /// The reporting path as an absolute path, fixed at the first call on this runner or any
    /// clone of it (a relative path is joined to the working directory of that moment).
    pub fn absolute_reporting_path(&self) -> &Path {
        self.dir.0.absolute.get_or_init(|| absolute(Path::new(&self.reporting_path)))
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
    pub(super) fn reporting_dir(&self) -> io::Result<&ReportDir> {
        if let Some(d) = LIFE.new_user_dir() {
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

    /// Whether this process is short-lived: it ends (this is its exit) within
    /// `short_process_secs` of its start, or of its fork (see `YING_SHORT_PROCESS_SECS`), and
    /// wrote no set before (one that did writes its exit report as it wrote the others).
    fn short_lived(&self) -> bool {
        if self.short_process_secs == 0 || crate::report::next_seq() != 0 {
            return false;
        }
        let Some(start) = crate::engine::peak::process_start_boot_ns() else { return false };
        let age = crate::sys::clock::boot_ns().saturating_sub(start);
        age < self.short_process_secs.saturating_mul(1_000_000_000)
    }

    /// Whether an automatic report (a periodic check's, the exit report) is worth writing: not
    /// when the process took no sample and refused nothing since it started or forked (its
    /// report would list no stack of its own), unless its `malloc` is another allocator's (the
    /// report then says Ying saw none of it).
    pub(super) fn worth_a_report(&self) -> bool {
        foreign_malloc().is_some() || SAMPLED.load(Ordering::Relaxed) || LIFE.refused_since_start()
    }

    /// Writes a report set now, from `source`, into the reporting directory (opened at the
    /// runner's start, see the [module documentation](crate::utils)), then removes this
    /// process's oldest sets beyond [`max_report_sets`](Self::max_report_sets). **Blocks**
    /// while it writes, on the calling thread, without waiting for a dump of another thread:
    /// [`RunnerHandle::dump_now`](super::RunnerHandle::dump_now) is the call for a program's
    /// threads.
    pub fn write_now(&self, source: &dyn ProfileSource) -> io::Result<ReportPaths> {
        // Nothing is opened while the program is near its descriptor limit (one warning).
        if !crate::sys::fd_headroom_or_warn("report") {
            return Err(Skipped::error(format!(
                "fewer than {} descriptors free under RLIMIT_NOFILE",
                crate::sys::FD_HEADROOM
            )));
        }
        // Opening the directory (the first time) allocates: profiler memory, never sampled.
        let dir = guarded_io(source, || self.reporting_dir(), |d| *d)?;
        // Nothing is written below the filesystem's free-space floor (one warning an episode).
        if let Err(why) = guarded(source, || self.keeps_floor(dir, Writing::Set), Clone::clone)? {
            return Err(Skipped::error(why));
        }
        // A short process's exit report is its raw profile (`YING_SHORT_PROCESS_SECS`).
        let raw = LIFE.exiting() && guarded(source, || self.short_lived(), |s| *s).unwrap_or(false);
        let written = write_report_from(source, &self.report_options(), dir, raw);
        if let Ok(paths) = &written {
            Writing::Set.wrote(paths.set_files().map(|p| p.as_path()));
        }
        // The retention pass lists and measures the directory: a short process runs it one
        // time in eight (at random), so that a storm of them keeps the directory bounded
        // without each paying for it.
        if !raw || crate::report::files::random_u64() % 8 == 0 {
            let _ = guarded(source, || self.remove_old_sets(dir), |_| ());
        }
        written
    }

    /// Whether `dir`'s filesystem has the free space its floor asks (`YING_MIN_FREE_SPACE`,
    /// and four times the last `what` written) before `what` is written: `Err` with the reason
    /// otherwise, said on stderr the first time of an episode below the floor. A filesystem
    /// whose space cannot be read is taken to have room (a write error then says what is
    /// wrong).
    pub(super) fn keeps_floor(&self, dir: &ReportDir, what: Writing) -> Result<(), String> {
        let floor = self.min_free_space;
        let below = &BELOW_FLOOR[what as usize];
        // One line an episode for the process's output as a whole (sets and live file): a
        // kind that goes below, or back above, while the other is below says nothing.
        let other_below = BELOW_FLOOR
            .iter()
            .enumerate()
            .any(|(i, b)| i != what as usize && b.load(Ordering::Relaxed));
        let Ok((free, total)) = dir.space() else { return Ok(()) };
        let need = floor.need(total, LAST_BYTES[what as usize].load(Ordering::Relaxed));
        if free >= need {
            if below.swap(false, Ordering::Relaxed) && !other_below {
                crate::sys::warn(&format!(
                    "{} has {} free again: writing resumes",
                    dir.path().display(),
                    crate::report::human_bytes(free),
                ));
            }
            return Ok(());
        }
        let why = format!(
            "{} has {} free, below its floor of {} (YING_MIN_FREE_SPACE={}, or four times the \
             last {} written)",
            dir.path().display(),
            crate::report::human_bytes(free),
            crate::report::human_bytes(need),
            crate::config::shown(&floor),
            what.name()
        );
        if !below.swap(true, Ordering::Relaxed) && !other_below {
            crate::sys::warn(&format!(
                "{} not written: {why}; profiling goes on in memory until there is room (no \
                 report set or live file is written below the floor)",
                what.name()
            ));
        }
        Err(why)
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
        let sub = base.path().join(crate::report::set_name::uid_dir_name(uid));
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
        LIFE.set_new_user_dir(dir);
    }

    /// Says why a report was not written: nothing when it was skipped for lack of descriptors
    /// (warned once already); one line per process when the process changed user since it
    /// started and may not write in the directory (a daemon's worker after `setuid`: every
    /// report would fail alike); otherwise one line per failure.
    pub(super) fn warn_not_written(&self, what: &str, e: &io::Error) {
        if Skipped::is(e) {
            return;
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let changed = LIFE.user_changed(euid);
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

    /// Removes this process's report sets in `dir` beyond the newest `max_report_sets`, then
    /// keeps the executable's output across its processes within the retention
    /// (`YING_RETAIN_SETS`, `YING_RETAIN_BYTES`) in the reporting directory and the live
    /// file's; warns once per process when that fails.
    fn remove_old_sets(&self, dir: &ReportDir) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let ctx = ReportContext::current();
        let exe = ctx.exe_name();
        let mut result = Ok(());
        if self.max_report_sets > 0 {
            result = dir.remove_old_sets(&exe, ctx.process(), self.max_report_sets).map(drop);
        }
        result = result.and(dir.retain(&exe, ctx.process(), self.retention).map(drop));
        if let Some(Ok(live)) = self.live_dir()
            && live.path() != dir.path()
        {
            result = result.and(live.retain(&exe, ctx.process(), self.retention).map(drop));
        }
        if let Err(e) = result
            && !WARNED.swap(true, Ordering::Relaxed)
        {
            crate::sys::warn(&format!("old report sets not removed: {e}"));
        }
    }

    /// Writes a report set on the calling thread in its turn (waiting at most until `deadline`
    /// for a dump of another thread), for [`RunnerHandle::dump_now`] without a report thread.
    pub(super) fn dump_inline(
        &self,
        source: &'static dyn ProfileSource,
        deadline: Instant,
    ) -> io::Result<ReportPaths> {
        let turn = Turn::take(deadline)?;
        // Announced as a dump in flight, so that an exit waits for its files (see `lifecycle`).
        let out = if LIFE.begin_dump() {
            let write = || self.write_now(source);
            let copy = |r: &io::Result<ReportPaths>| match r {
                Ok(paths) => Ok(paths.clone()),
                Err(e) => Err(io::Error::from(crate::source::Error::from_io(e))),
            };
            let out = super::privately(source, write, copy)
                .unwrap_or_else(|| Err(io::Error::other("the report set's writer panicked")));
            LIFE.end_dump();
            out
        } else {
            Err(io::Error::other("the process is exiting: its exit report is being written"))
        };
        trim_after_dump();
        drop(turn);
        out
    }
}

/// Writes a one-off flamegraph of `profiler`'s stacks ranked by `measurement` to `path`.
/// **Blocks** while it symbolizes and renders every stack (call it in
/// `tokio::task::spawn_blocking` from async code, as shown for
/// [`RunnerHandle::dump_now`](super::RunnerHandle::dump_now)).
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
    // Every stack is folded (no cut, as in 0.3.0), from a report taken and dropped
    // as profiler code, like a report set's.
    let write = || {
        let opts = ReportOptions { measurement, ..ReportOptions::default() };
        let unit = ProfileSource::unit(profiler);
        let mut r = Report::take(interval, unit, Occasion::default(), &opts);
        r.rank_all();
        let folded = report::folded::render_report(&r, measurement, usize::MAX);
        report::flamegraph::render_svg(&folded, measurement, "").and_then(|svg| {
            report::files::write_atomic(dir, name, &svg).map(drop).map_err(|e| e.to_string())
        })
    };
    guarded(profiler, write, Clone::clone).unwrap_or_else(|e| Err(e.to_string()))
}

/// Writes a full report set for `profiler` into `dir` right now (for an HTTP endpoint or a
/// health check), ranked by `options.measurement`.
///
/// **Blocks** while the set is written on the calling thread (tens to hundreds of
/// milliseconds), after any dump of another thread in progress (at most
/// [`DEFAULT_DUMP_TIMEOUT`]; dumps are written one at a time). From async code call it in
/// `tokio::task::spawn_blocking`, as shown for
/// [`RunnerHandle::dump_now`](super::RunnerHandle::dump_now), which writes into the runner's
/// directory and keeps its number of sets bounded; this function removes no old set.
pub fn write_report_now<A: GlobalAlloc + Send + Sync + 'static>(
    profiler: &YingProfiler<A>,
    options: &ReportOptions,
    dir: &Path,
) -> io::Result<ReportPaths> {
    let turn = Turn::take(Instant::now() + DEFAULT_DUMP_TIMEOUT)?;
    // The directory is the profiler's memory: opened and dropped as profiler code; the set is
    // written while it is open.
    let out = guarded(
        profiler,
        || ReportDir::open(dir, DEFAULT_FILE_MODE),
        |opened| match opened {
            Ok(d) => write_report_from(profiler, options, d, false),
            Err(e) => Err(Error::from_io(e).into()),
        },
    );
    trim_after_dump();
    drop(turn);
    out?
}
