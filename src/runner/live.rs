//! Keeping the live file (`report/live/`) on the report thread: where it goes, a version when
//! one is due, the heartbeat otherwise, one warning when it cannot be written, and its removal
//! at a normal exit.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::write::Writing;
use super::{LiveFile, ProfileSource, ProfilerRunner};
use crate::report::ReportContext;
use crate::report::files::ReportDir;
use crate::report::live::write::{Due, LiveWriter};
use crate::source::budget::{self, Work};

impl ProfilerRunner {
    /// The live file's directory (opened and identified now the first time: the runner's
    /// start, so that a relative `YING_LIVE_FILE` is the working directory's of then, as the
    /// reporting path is), None when the live file is off.
    pub(super) fn live_dir(&self) -> Option<io::Result<&ReportDir>> {
        match &self.live.file {
            LiveFile::Off => None,
            LiveFile::ReportingDir => Some(self.reporting_dir()),
            LiveFile::Dir(path) => {
                let slot = &self.dir.0.live;
                if let Some(d) = slot.get() {
                    return Some(Ok(d));
                }
                let abs = super::write::absolute(path);
                Some(ReportDir::open(&abs, self.report_file_mode).map(|d| {
                    let _ = slot.set(d);
                    slot.get().expect("just set")
                }))
            }
        }
    }

    /// The live file's writer for a report thread starting now: its first version is due
    /// [`FIRST_LOOK`] from now (or one interval, when that is shorter), so that a process killed
    /// soon after its start (a crash at start-up, an OOM kill at its first big request) leaves
    /// its heap, while one that lives less than that (a shell's subshell, a short compiler
    /// pass) writes none.
    pub(super) fn live_writer(&self) -> LiveWriter {
        LiveWriter::starting(Instant::now() + self.first_look())
    }

    /// How long the report thread waits before it looks for the first sample, and between looks
    /// until there is one during [`FIRST_LOOKS_FOR`] (then one interval).
    fn first_look(&self) -> Duration {
        FIRST_LOOK.min(Duration::from_millis(self.live.interval_ms))
    }

    /// When the report thread should next wake for the live file (None: it is off).
    pub(super) fn live_next(&self, writer: &LiveWriter) -> Option<Instant> {
        (self.live.file != LiveFile::Off).then(|| writer.next())
    }

    /// What the live file needs now: nothing when it is off, when the process took no sample
    /// (it writes no live file, as it writes no report: a shell's helper that ends with
    /// `_exit` leaves nothing behind), or before its time. Costs a clock read and, when due,
    /// the exact totals' sum; the report thread calls it at every wake-up and announces a dump
    /// in flight only when something is due.
    pub(super) fn live_due(&self, writer: &mut LiveWriter) -> Due {
        let now = Instant::now();
        if self.live.file == LiveFile::Off || now < writer.next() {
            return Due::No;
        }
        let interval = Duration::from_millis(self.live.interval_ms);
        if !self.worth_a_report() {
            // Looked at again soon while the process is young (its first version follows its
            // first sample closely), then one interval later (the thread does not spin).
            let young = writer.age() < FIRST_LOOKS_FOR;
            let again = if young { self.first_look() } else { interval };
            writer.done(now, Due::No, again, Duration::ZERO);
            return Due::No;
        }
        writer.due(now, &crate::engine::totals::read(), interval)
    }

    /// Writes a version of the live file (`due` is [`Due::Write`]) or sets its heartbeat
    /// ([`Due::Touch`]). The report thread (profiler code), between its dumps, announced as a
    /// dump in flight.
    pub(super) fn live_update(
        &self,
        writer: &mut LiveWriter,
        due: Due,
        source: &dyn ProfileSource,
    ) {
        let now = Instant::now();
        let interval = Duration::from_millis(self.live.interval_ms);
        // Nothing opened near the descriptor limit, nor the first time a standard descriptor is
        // seen closed (the program may be rearranging them and expect the number; one closed
        // at two looks in a row is closed for good, as in some daemons): tried again an interval
        // later.
        let std_open = crate::sys::std_fds_open();
        let std_just_closed = !std_open && STD_OPEN.swap(false, Ordering::Relaxed);
        if std_open {
            STD_OPEN.store(true, Ordering::Relaxed);
        }
        if due == Due::No || !crate::sys::fd_headroom() || std_just_closed {
            writer.done(now, Due::No, interval, Duration::ZERO);
            return;
        }
        let out = self.live_dir().map(|dir| {
            let dir = dir?;
            let name = live_name();
            match due {
                // Below the filesystem's floor (said once an episode), tried again an interval
                // later; the heartbeat takes no space.
                Due::Write if self.keeps_floor(dir, Writing::LiveVersion).is_err() => Ok(()),
                Due::Write => {
                    // Its memory reserved first; near a memory limit (said once) not written.
                    let Ok(_memory) = budget::grant(Work::LiveVersion, false) else {
                        return Ok(());
                    };
                    let (interval, unit) = (source.sample_interval(), source.unit());
                    let opts = self.report_options();
                    let seq = crate::report::next_seq();
                    let written = dir.rewrite_atomic_with(&name, |w| {
                        writer.encode(interval, unit, &opts, seq, w)
                    });
                    if let Ok(path) = &written {
                        WROTE.store(std::process::id(), Ordering::Relaxed);
                        Writing::LiveVersion.wrote(std::iter::once(path.as_path()));
                    }
                    written.map(drop)
                }
                // A file removed under the heartbeat (at an `exec` that then failed) is
                // written again at the next look.
                _ => match dir.touch(&name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        writer.rewrite();
                        Ok(())
                    }
                    other => other,
                },
            }
        });
        writer.done(now, due, interval, now.elapsed());
        if let Some(Err(e)) = out {
            warn_once(&e);
        }
    }

    /// The path of this process's live file, when it wrote one.
    pub(super) fn live_file_path(&self) -> Option<std::path::PathBuf> {
        if WROTE.load(Ordering::Relaxed) != std::process::id() {
            return None;
        }
        match self.live_dir()? {
            Ok(dir) => Some(dir.path().join(live_name())),
            Err(_) => None,
        }
    }

    /// Whether this process wrote a live file that a normal exit removes (not one to be kept,
    /// nor a parent's that a `fork` child inherited the record of).
    pub(super) fn has_live_file(&self) -> bool {
        !self.live.keep && WROTE.load(Ordering::Relaxed) == std::process::id()
    }

    /// Removes this process's live file (a normal exit, after the exit report), unless it is to
    /// be kept.
    pub(super) fn remove_live_file(&self) {
        // Only a process that wrote one (not each of a shell's forked subshells).
        if !self.has_live_file() {
            return;
        }
        if let Some(Ok(dir)) = self.live_dir() {
            let _ = dir.remove(&live_name());
        }
    }
}

/// How soon after the report thread starts it looks for the first sample, and how often
/// while the process is young and has none: a process killed 150 ms after its start with its
/// heap sampled leaves a live file.
const FIRST_LOOK: Duration = Duration::from_millis(100);

/// How long after the report thread's start a process with no sample is looked at every
/// [`FIRST_LOOK`].
const FIRST_LOOKS_FOR: Duration = Duration::from_secs(10);

/// Whether the standard descriptors were all open at the last look.
static STD_OPEN: AtomicBool = AtomicBool::new(true);

/// The process that last wrote a live file (a `fork` child inherits its parent's value).
static WROTE: AtomicU32 = AtomicU32::new(0);

/// This process's live file name.
fn live_name() -> String {
    let ctx = ReportContext::current();
    crate::report::live::file_name(&ctx.exe_name(), ctx.process())
}

/// One line per process when the live file cannot be written: the profiler goes on in memory.
fn warn_once(e: &io::Error) {
    static WARNED: AtomicU32 = AtomicU32::new(0);
    let pid = std::process::id();
    if WARNED.swap(pid, Ordering::Relaxed) != pid {
        crate::sys::warn(&format!(
            "live file not written: {e}; profiling goes on in memory, but this process's heap \
             at death will not be on disk"
        ));
    }
}
