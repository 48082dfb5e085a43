//! Whose turn it is to write a report set: dumps are written one at a time in the process (the
//! report thread's, `RunnerHandle::dump_now`'s on a calling thread, `write_report_now`'s, and
//! the in-memory profiles of `crate::profiles`), so that a burst of requests does not run many
//! report builds at once, each growing its own thread's malloc arena. The turn holds the pid
//! of its holder: a `fork` child does not wait for a dump of its parent's, which no thread of
//! the child will ever finish.

use std::io;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Default longest wait of `RunnerHandle::dump_now` for the report thread.
pub const DEFAULT_DUMP_TIMEOUT: Duration = Duration::from_secs(60);

/// The holder's pid, 0 when the turn is free, and its wake-up.
#[derive(Debug)]
pub(crate) struct TurnLock {
    holder: Mutex<u32>,
    freed: Condvar,
}

/// The process's turn.
static TURN: TurnLock = TurnLock::new();

/// Locks `m`, ignoring poisoning: the state is plain data that no panic leaves half-changed.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl TurnLock {
    pub(crate) const fn new() -> Self {
        Self { holder: Mutex::new(0), freed: Condvar::new() }
    }

    /// Waits for the turn until `deadline`, as process `me`.
    fn take_as(&self, me: u32, deadline: Instant) -> io::Result<Turn<'_>> {
        let mut holder = lock(&self.holder);
        loop {
            if *holder == 0 || *holder != me {
                *holder = me;
                return Ok(Turn(self));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "another report set was still being written",
                ));
            }
            holder = match self.freed.wait_timeout(holder, deadline - now) {
                Ok((h, _)) => h,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

/// The right to write a report set, until dropped.
#[derive(Debug)]
pub(crate) struct Turn<'a>(&'a TurnLock);

impl Turn<'static> {
    /// Waits for the process's turn until `deadline`.
    pub(crate) fn take(deadline: Instant) -> io::Result<Turn<'static>> {
        TURN.take_as(std::process::id(), deadline)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *lock(&self.0.holder) = 0;
        self.0.freed.notify_one();
    }
}

/// Runs `f` in the process's turn for report builds (one at a time), waiting at most
/// `timeout` for a build of another thread, then gives the memory it freed back: the
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
/// freed memory of a thread's arena (other than at its top) until that arena is trimmed. Not
/// where the profiler's memory is its own heap (the shim's): glibc's heap is the program's
/// alone there, and its trimming the program's business.
pub(crate) fn trim_after_dump() {
    if super::budget::own_heap() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and releases glibc's own free lists; it is called outside
    // every allocation hook and holds no lock of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_turn_times_out_a_second_taker_of_the_same_process() {
        let t = TurnLock::new();
        let first = t.take_as(7, Instant::now()).unwrap();
        let start = Instant::now();
        let e = t.take_as(7, Instant::now() + Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(50), "waited until the deadline");
        drop(first);
        let again = t.take_as(7, Instant::now()).expect("free once dropped");
        drop(again);
    }

    #[test]
    fn a_turn_held_by_another_process_is_not_waited_for() {
        // A `fork` child inherits the turn held by a parent's thread it does not have.
        let t = TurnLock::new();
        let parent = t.take_as(7, Instant::now()).unwrap();
        let child = t.take_as(8, Instant::now()).expect("the child takes it at once");
        drop(child);
        std::mem::forget(parent);
    }

    #[test]
    fn a_waiter_gets_the_turn_when_it_is_freed() {
        let t: &'static TurnLock = Box::leak(Box::new(TurnLock::new()));
        let first = t.take_as(7, Instant::now()).unwrap();
        let waiter = std::thread::spawn(move || {
            t.take_as(7, Instant::now() + Duration::from_secs(30)).map(drop).is_ok()
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(first);
        assert!(waiter.join().unwrap());
    }
}
