//! [`RunnerHandle`]: on-demand dumps and stopping, and the request protocol it shares with the
//! report thread (`report_loop`).
//!
//! Requests are numbered: a request made while dump `started` is being written asks for dump
//! `started + 1`, which begins after it; every request made before that dump begins is served
//! by it (they share its result), so a burst of requests costs one or two report sets. The
//! protocol is the [`Control`] state and its methods, testable without a thread.

use std::fmt;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{ProfileSource, ProfilerRunner};
use crate::report::ReportPaths;
use crate::source::turn::lock;
use crate::source::{DEFAULT_DUMP_TIMEOUT, Error};

/// Handle to a started runner: on-demand report sets ([`dump_now`](Self::dump_now)) and
/// stopping. Cheap to clone and to share between threads (a service keeps one in its state).
#[derive(Debug, Clone)]
pub struct RunnerHandle {
    pub(super) shared: Arc<Shared>,
}

/// What a report thread and its handles share.
pub(super) struct Shared {
    pub(super) state: Mutex<Control>,
    pub(super) wake: Condvar,
    /// The runner's settings and reporting directory, for dumps written without the thread.
    pub(super) runner: ProfilerRunner,
    pub(super) source: &'static dyn ProfileSource,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("state", &self.state)
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

/// A dump's outcome as the report thread keeps it for its requesters (an [`Error`] is
/// `Clone`, an `io::Error` is not).
pub(super) type Outcome = Result<ReportPaths, Error>;

/// What the report thread and the requesters of dumps share (see the module documentation).
#[derive(Debug, Default)]
pub(super) struct Control {
    pub(super) stop: bool,
    /// The process whose report thread serves requests, 0 when there is none (never started,
    /// could not start, stopped, or the process is a `fork` child, which has no threads but
    /// the one that forked).
    pub(super) thread_pid: u32,
    /// The highest dump number asked for.
    pub(super) requested: u64,
    /// Whether the dump asked for is the exit report, written by the report thread because a
    /// seccomp filter covers the exiting thread (its `reason:` says so).
    pub(super) for_exit: bool,
    /// The number of the dump being written, or of the last one written.
    pub(super) started: u64,
    /// The number of the last dump written, and its outcome (the report thread's memory:
    /// replaced and dropped only by that thread).
    pub(super) done: u64,
    pub(super) outcome: Option<Outcome>,
}

impl Control {
    /// Whether a report thread of process `me` serves requests.
    pub(super) fn served_in(&self, me: u32) -> bool {
        self.thread_pid == me && !self.stop
    }

    /// Asks for a dump; returns its number (the next dump to begin).
    pub(super) fn request(&mut self) -> u64 {
        let target = self.started + 1;
        self.requested = self.requested.max(target);
        target
    }

    /// The report thread: takes the pending request, if any: its number, and whether it is the
    /// exit report.
    pub(super) fn begin(&mut self) -> Option<(u64, bool)> {
        (self.requested > self.started).then(|| {
            self.started = self.requested;
            (self.started, std::mem::take(&mut self.for_exit))
        })
    }

    /// The report thread: dump `n` is written with `outcome`; returns the previous outcome,
    /// for the thread to drop.
    pub(super) fn finish(&mut self, n: u64, outcome: Outcome) -> Option<Outcome> {
        self.done = n;
        self.outcome.replace(outcome)
    }

    /// A requester of dump `target`: its outcome, copied, once it is done.
    pub(super) fn result_of(&self, target: u64) -> Option<io::Result<ReportPaths>> {
        (self.done >= target).then(|| match &self.outcome {
            Some(Ok(paths)) => Ok(paths.clone()),
            Some(Err(e)) => Err(e.clone().into()),
            None => Err(io::Error::other("report thread kept no outcome")),
        })
    }
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
            if c.served_in(me) {
                let target = c.request();
                self.shared.wake.notify_all();
                loop {
                    if let Some(result) = c.result_of(target) {
                        return result;
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
        lock(&self.shared.state).served_in(std::process::id())
    }

    /// Stops the runner thread (after any report in progress). Later dumps are written by the
    /// calling thread.
    pub fn stop(&self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn paths(name: &str) -> ReportPaths {
        ReportPaths { text: Some(PathBuf::from(name)), ..ReportPaths::default() }
    }

    #[test]
    fn requests_before_a_dump_begins_share_it() {
        let mut c = Control { thread_pid: 5, ..Control::default() };
        assert!(c.served_in(5) && !c.served_in(6), "a fork child is not served");
        let a = c.request();
        let b = c.request();
        assert_eq!((a, b), (1, 1), "one dump for both");
        assert_eq!(c.begin(), Some((1, false)));
        assert_eq!(c.begin(), None, "nothing more asked");
        // A request while dump 1 is being written asks for the next one.
        let late = c.request();
        assert_eq!(late, 2);
        assert!(c.result_of(1).is_none(), "not done yet");
        assert!(c.finish(1, Ok(paths("one"))).is_none());
        assert_eq!(c.result_of(1).unwrap().unwrap().text, Some(PathBuf::from("one")));
        assert!(c.result_of(late).is_none(), "the late request waits for dump 2");
        assert_eq!(c.begin(), Some((2, false)));
        let previous = c.finish(2, Err(Error::new(io::ErrorKind::TimedOut, "slow")));
        assert!(previous.is_some_and(|p| p.is_ok()), "the thread drops the previous outcome");
        let e = c.result_of(2).unwrap().unwrap_err();
        assert_eq!((e.kind(), e.to_string()), (io::ErrorKind::TimedOut, "slow".to_string()));
    }

    #[test]
    fn the_exit_request_is_taken_once() {
        let mut c = Control { thread_pid: 5, ..Control::default() };
        c.request();
        c.for_exit = true;
        assert_eq!(c.begin(), Some((1, true)));
        c.request();
        assert_eq!(c.begin(), Some((2, false)));
    }

    #[test]
    fn a_stopped_runner_serves_nothing() {
        let c = Control { thread_pid: 5, stop: true, ..Control::default() };
        assert!(!c.served_in(5));
    }
}
