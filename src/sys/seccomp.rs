//! What a seccomp filter installed by the program leaves Ying free to do.
//!
//! A filter is a program the kernel runs at every system call of the threads it covers; it may
//! kill the process (or the thread, or raise `SIGSYS`) for a call the program itself never
//! makes, and the profiler's calls (`openat`, `mmap`, `clone3`, `socket`, ...) are exactly
//! such calls. The preload shim sees a filter being installed (its `prctl` and `syscall`
//! exports, `preload/src/seccomp.rs`) and, before the kernel gets the filter, moves the level
//! kept here up:
//!
//! * [`NONE`]: no filter; Ying does what it always does.
//! * [`PROGRAM_THREADS`]: a filter without `SECCOMP_FILTER_FLAG_TSYNC` covers the thread that
//!   installed it and the threads it starts later, not the threads already running: Ying's
//!   own threads (the report thread, the endpoint, the pusher) started before it are not
//!   covered and go on; every program thread is treated as covered (Ying does not track which
//!   thread started which).
//! * [`ALL_THREADS`]: a filter with `TSYNC` (every thread of the process), or strict mode
//!   (the calling thread only, but a process whose last program thread ends with `SYS_exit`
//!   must not be kept alive by Ying's threads): the shim stops Ying's threads before the
//!   filter is installed.
//!
//! A covered thread makes no system call of Ying's from then on ([`restricted_here`]): the
//! messages of [`super::write_stderr`] are dropped, the spin lock spins instead of yielding,
//! the shim starts no thread, takes no sample (so the tables grow no more) and writes no exit
//! report. The level never goes down (filters cannot be removed), and a `fork` child inherits
//! it with the filter.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// No filter installed.
pub const NONE: u8 = 0;
/// A filter covers the program's threads, not Ying's threads already running.
pub const PROGRAM_THREADS: u8 = 1;
/// A filter covers every thread (or Ying's threads were stopped for strict mode).
pub const ALL_THREADS: u8 = 2;

static LEVEL: AtomicU8 = AtomicU8::new(NONE);

thread_local! {
    /// Whether the calling thread is one of Ying's own (started by `spawn_profiler_thread`).
    static PROFILER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Raises the level to `level` (never lowers it).
pub fn restrict(level: u8) {
    LEVEL.fetch_max(level, Ordering::SeqCst);
}

/// The level now.
pub fn level() -> u8 {
    LEVEL.load(Ordering::Relaxed)
}

/// Marks the calling thread as one of Ying's own threads (their first instruction).
pub(crate) fn mark_profiler_thread() {
    PROFILER_THREAD.with(|t| t.set(true));
}

/// Whether a filter may cover the calling thread: Ying must make no system call of its own
/// here. One relaxed load when no filter was ever installed.
pub fn restricted_here() -> bool {
    match level() {
        NONE => false,
        PROGRAM_THREADS => !PROFILER_THREAD.with(Cell::get),
        _ => true,
    }
}
