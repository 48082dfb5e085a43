//! The keeper: the one thread of Ying's that stays in the program's descriptor table, so that
//! the process can end as glibc would have ended it.
//!
//! Ying's other threads work in descriptor tables of their own (`sys::fds`). When every thread
//! of the program has ended (a `main` that called `pthread_exit`) the report thread ends the
//! process with `exit(0)`, as glibc does after a process's last thread; `exit` runs the
//! program's `atexit` handlers and flushes its `stdio` streams, which write to the program's
//! descriptors. On a thread with a private table those numbers are Ying's (`/dev/null`), and
//! with no thread left in the program's table the kernel has closed its files already. So a
//! thread that opens nothing keeps the program's table, waits on a futex, and calls `exit(0)`
//! when the report thread (or the end watcher) asks it to ([`end_process`]). One per process,
//! started with the first report thread or end watcher (a `fork` child starts its own).

use std::sync::atomic::{AtomicU32, Ordering};

use super::ProfileSource;

/// What the keeper is to do: wait ([`WAIT`]), end the process ([`EXIT`]) or end itself
/// ([`STOP`]). Its futex word.
static WORD: AtomicU32 = AtomicU32::new(WAIT);
const WAIT: u32 = 0;
const EXIT: u32 = 1;
const STOP: u32 = 2;

/// The process whose keeper is running (a `fork` child has none until it starts its own).
static RUNNING_IN: AtomicU32 = AtomicU32::new(0);

/// Starts this process's keeper unless it runs already. When it cannot be started,
/// [`end_process`] calls `exit` on the calling thread, as before there was a keeper. Called,
/// guarded, where a report thread or end watcher is started.
pub(super) fn start(source: &'static dyn ProfileSource) {
    let me = std::process::id();
    if RUNNING_IN.swap(me, Ordering::SeqCst) == me {
        return;
    }
    WORD.store(WAIT, Ordering::SeqCst);
    let body = Box::new(move || {
        source.enter_profiler_thread();
        run();
    });
    let table = crate::sys::Table::Programs;
    if crate::sys::spawn_profiler_thread_in(c"ying-keeper", table, body).is_err() {
        RUNNING_IN.store(0, Ordering::SeqCst);
    }
}

/// The keeper's body: waits until told to end the process or itself.
fn run() {
    loop {
        match WORD.load(Ordering::SeqCst) {
            WAIT => futex(libc::FUTEX_WAIT, WAIT),
            EXIT => {
                // SAFETY: `exit` is what glibc itself calls when a process's last thread ends;
                // this thread holds no lock and is in the program's descriptor table.
                unsafe { libc::exit(0) }
            }
            _ => return,
        }
    }
}

/// Ends the process with `exit(0)` on the keeper (on the calling thread when this process has
/// none); does not return.
pub(super) fn end_process() -> ! {
    if RUNNING_IN.load(Ordering::SeqCst) == std::process::id() {
        WORD.store(EXIT, Ordering::SeqCst);
        futex(libc::FUTEX_WAKE, 1);
        loop {
            // The keeper's `exit` ends this thread too; till then it waits.
            futex(libc::FUTEX_WAIT, EXIT);
        }
    }
    // SAFETY: as in `run`; a thread in a private table, the only way left.
    unsafe { libc::exit(0) }
}

/// Ends the keeper (before a seccomp filter that would cover it is installed).
pub(super) fn stop() {
    if RUNNING_IN.swap(0, Ordering::SeqCst) == std::process::id() {
        WORD.store(STOP, Ordering::SeqCst);
        futex(libc::FUTEX_WAKE, 1);
    }
}

/// The raw futex call on [`WORD`]: `FUTEX_WAIT` while it is `value`, or `FUTEX_WAKE` of up to
/// `value` waiters (private to the process).
fn futex(op: libc::c_int, value: u32) {
    // SAFETY: `WORD` is a valid, aligned u32 for the life of the process; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WORD.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            value,
            std::ptr::null::<libc::timespec>(),
        );
    }
}
