//! The engine: everything on the allocation path.
//!
//! Code here runs inside `malloc`, `free` and `realloc`, on any thread of the host program, at
//! any moment (also in signal handlers and under locks the caller holds). It may call [`crate::sys`]
//! (raw system calls, the spin lock, the clock), the caching unwinder in [`crate::stack`], and
//! the span path kept by [`crate::spans`]. It never allocates on the host's heap (the tables use
//! the profiler's own heap, [`tables::arena`]), never does I/O or anything that may block or be
//! a cancellation point, never calls a glibc function that may take a lock the caller holds,
//! and on the unsampled paths takes no lock, makes no system call and leaves `errno` alone. It
//! never imports report-side code ([`crate::report`], [`crate::symbols`], the runner): a refused
//! giant request names its frames `module+offset` with [`crate::stack`]'s lock-free lookup, and
//! the fork handlers that also take the symbol cache's lock live above both sides
//! (`front_end.rs`).
//!
//! # Layering
//!
//! Imports inside the engine go down this list, never up (a file may use any file below it):
//!
//! 1. `hooks` — the front ends' entry points (allocation, free, realloc, thread start and exit,
//!    `fork`); re-exports [`host`]'s `Host` and `Settings` for them.
//! 2. `mapped` — the shim's `mmap`, `munmap` and `mremap` (the region table and its lock).
//! 3. `sample` — the one sampling step both of them call: draw the next countdown, weigh the
//!    block, capture the stack, record it.
//! 4. `giant` — refused giant requests (their raw stacks, kept for report time).
//! 5. `capture` — the calling stack's instruction pointers.
//! 6. `python` — CPython's frames, read from the interpreter's thread state and spliced into
//!    a captured stack (its code objects kept in the tables' arena).
//! 7. `host` — what a front end provides (`Host`) and the sampling `Settings`.
//! 8. `tables` (stacks and live records, `tables::arena` the profiler's heap), then `peak`
//!    (each stripe of the tables carries its peak slot and tally, declared there with the
//!    stripe count; a `fork` child's flush of every stripe is handed to the peak by `hooks`),
//!    `histogram`, `sampler` (the statistics), `totals`, `thread_state`, `filter`.
//!
//! `tests/module_graph.rs` fails on any import cycle between these files.
//!
//! `hooks` and `mapped` both sample through `sample`, which is why neither imports the other
//! for it: `hooks` calls `mapped` only for the `fork` handlers' lock.
//!
//! The report side reads what the engine kept: [`tables`] (stacks and live records),
//! [`totals`] (exact totals), [`mapped`] (anonymous mappings), [`giant`] (refused giant requests).

pub(crate) mod capture;
pub(crate) mod filter;
pub(crate) mod giant;
pub mod histogram;
pub(crate) mod hooks;
pub(crate) mod host;
pub(crate) mod mapped;
pub(crate) mod peak;
pub(crate) mod python;
pub(crate) mod sample;
pub(crate) mod sampler;
pub(crate) mod tables;
pub(crate) mod thread_state;
pub(crate) mod totals;

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this process took a sample since it started or forked (the runner writes no report
/// for a process that took none).
pub(crate) static SAMPLED: AtomicBool = AtomicBool::new(false);

/// Notes that this process took a sample (the sample path; a load, no allocation).
pub(crate) fn note_sample() {
    // A load first: every sampling thread would otherwise write this shared line on every
    // sample and pull it back and forth between cores; it changes once.
    if !SAMPLED.load(Ordering::Relaxed) {
        SAMPLED.store(true, Ordering::Relaxed);
    }
}
