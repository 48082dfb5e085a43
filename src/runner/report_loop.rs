//! The report thread's loop: wakes at each periodic check (and every `triggers::TICK`, or `IDLE_TICK`, while a
//! trigger is armed), serves the dumps asked through the handles (`handle`), and ends the
//! process when the program's threads have all ended (`lifecycle`). Also the thread that only
//! waits for that end when there is no report thread but the endpoint or pushes run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::handle::Shared;
use super::lifecycle::{END_FAST_POLL, END_SLOW_POLL, EXIT_WAIT, LIFE};
use super::{ProfileSource, ProfilerRunner};
use crate::source::Error;
use crate::source::turn::{Turn, lock};
use crate::sys::gettid;

/// The `reason:` of an exit report asked by a thread a seccomp filter covers (see
/// `Lifecycle::at_exit`).
const FOR_EXIT: &str =
    "exit (written by the report thread: a seccomp filter covers the exiting thread)";

impl ProfilerRunner {
    /// The report thread's body: the report loop, then the hand-over of requests still
    /// waiting (their callers write their dumps themselves). Runs as profiler code with every
    /// signal blocked.
    pub(super) fn run(&self, source: &dyn ProfileSource, shared: &Shared) {
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
        let mut live = self.live_writer();
        loop {
            let mut wait_for = triggers.wait(next_check);
            if let Some(at) = self.live_next(&live) {
                wait_for = wait_for.min(at.saturating_duration_since(Instant::now()));
            }
            if slow_end && LIFE.program_ended() {
                wait_for = wait_for.min(END_SLOW_POLL);
            }
            // The number of the dump asked for, if one was.
            let forced = {
                let c = lock(&shared.state);
                let (mut c, _) = shared
                    .wake
                    .wait_timeout_while(c, wait_for, |c| {
                        !c.stop && c.requested <= c.started && (slow_end || !LIFE.program_ended())
                    })
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if c.stop {
                    return;
                }
                if LIFE.program_ended() {
                    drop(c);
                    // Returns only while a thread Ying did not see start is still running.
                    end_process_if_alone(if slow_end { Duration::ZERO } else { END_FAST_POLL });
                    slow_end = true;
                    continue;
                }
                slow_end = false;
                c.begin()
            };
            // The live file, when due, announced as a dump in flight so that an exit waits
            // for it (and only then: an exit that meets a dump in flight sleeps until it ends).
            let due = self.live_due(&mut live);
            if due != crate::report::live::write::Due::No {
                if !LIFE.begin_dump() {
                    return;
                }
                self.live_update(&mut live, due, source);
                LIFE.end_dump();
            }
            let (forced, for_exit) = match forced {
                Some((n, for_exit)) => (Some(n), for_exit),
                None => (None, false),
            };
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
            if !LIFE.begin_dump() {
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
            LIFE.end_dump();
            if let Some(n) = forced {
                let outcome = match written {
                    Some(Ok(paths)) => Ok(paths),
                    Some(Err(e)) => Err(Error::from_io(&e)),
                    None => Err(Error::new(std::io::ErrorKind::Other, "no report written")),
                };
                let previous = lock(&shared.state).finish(n, outcome);
                drop(previous);
            }
            shared.wake.notify_all();
        }
    }
}

/// The body of the thread that, without a report thread (`check_interval_secs` 0) but with the
/// endpoint or pushes, waits for the program's threads to end and then ends the process (see
/// [`end_process_if_alone`]). Blocks on the state's condition variable meanwhile: no wake-up
/// until then.
pub(super) fn wait_for_program_end(shared: &Shared) {
    let mut slow = false;
    loop {
        {
            let c = lock(&shared.state);
            let timeout = if slow { END_SLOW_POLL } else { Duration::from_secs(3600) };
            let (c, _) = shared
                .wake
                .wait_timeout_while(c, timeout, |c| !c.stop && (slow || !LIFE.program_ended()))
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if c.stop {
                return;
            }
        }
        if LIFE.program_ended() {
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
pub(super) fn watch_main_thread() {
    static WATCHED: AtomicBool = AtomicBool::new(false);
    extern "C" fn main_thread_ended(_: *mut libc::c_void) {
        super::program_threads_ended(true);
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
        if !LIFE.program_ended() {
            return;
        }
        if crate::sys::only_profiler_threads_left() {
            // This thread holds no lock (the report loop released its state) and is not in a
            // dump; the keeper, in the program's descriptor table, calls `exit`.
            super::keeper::end_process();
        }
        if start.elapsed() >= fast {
            return;
        }
        super::lifecycle::sleep_raw(1_000_000);
    }
}
