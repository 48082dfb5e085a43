//! Per-thread state of the allocation hooks: the re-entrancy guard, the sampling countdown, the
//! random generator and this thread's slot of exact counters.
//!
//! The block is plain data (all-zero is its valid initial state, no destructor), because the
//! shim keeps it in an initial-exec TLS block compiled from C (a Rust `thread_local!` in a shared
//! object goes through `__tls_get_addr`, which may call `malloc`), while the `#[global_allocator]`
//! front end keeps it in an ordinary const `thread_local!`.
//!
//! The hot paths test one field: `slot`. Zero means "take the slow path": the thread has not been
//! set up yet, is inside the profiler (the guard parks the real slot in `parked_slot`), or its
//! thread-exit handler has run. Folding all three conditions into one compare keeps the
//! unsampled path short.

use std::cell::Cell;

/// Lifecycle of a thread as seen by the hooks.
pub(crate) const STATUS_NEW: u32 = 0;
/// The thread owns a counter slot and samples normally.
pub(crate) const STATUS_LIVE: u32 = 1;
/// The thread's exit handler ran; later calls on it use the shared counters and never sample.
pub(crate) const STATUS_DEAD: u32 = 2;

/// The per-thread block. `repr(C)` and at most 64 bytes so the shim's C TLS block can hold it.
#[repr(C)]
#[derive(Debug)]
pub struct ThreadState {
    /// Address of the thread's counter slot used by the hot paths; 0 sends every call to the
    /// slow path.
    pub(crate) slot: Cell<usize>,
    /// The real slot while the guard is held (or 0).
    pub(crate) parked_slot: Cell<usize>,
    /// Re-entrancy depth: non-zero while the thread runs profiler code.
    pub(crate) guard_depth: Cell<u32>,
    /// One of the `STATUS_*` values.
    pub(crate) status: Cell<u32>,
    /// Bytes left before the next sample, minus one (see `sampler`).
    pub(crate) budget: Cell<u64>,
    /// xorshift64* state; 0 until seeded.
    pub(crate) rng: Cell<u64>,
}

const _: () = assert!(std::mem::size_of::<ThreadState>() <= 64);

impl ThreadState {
    /// The all-zero initial state.
    pub const fn new() -> Self {
        Self {
            slot: Cell::new(0),
            parked_slot: Cell::new(0),
            guard_depth: Cell::new(0),
            status: Cell::new(STATUS_NEW),
            budget: Cell::new(0),
            rng: Cell::new(0),
        }
    }

    /// Enters profiler code: allocations made until the matching [`Guard`] drops are the
    /// profiler's own and are neither sampled nor counted as the program's.
    pub(crate) fn enter(&self) -> Guard<'_> {
        let depth = self.guard_depth.get();
        if depth == 0 {
            self.parked_slot.set(self.slot.get());
            self.slot.set(0);
        }
        self.guard_depth.set(depth + 1);
        Guard { ts: self }
    }

    /// Leaves one level of profiler code; the outermost restores the slot.
    pub(crate) fn leave(&self) {
        let depth = self.guard_depth.get().saturating_sub(1);
        self.guard_depth.set(depth);
        if depth == 0 {
            self.slot.set(self.parked_slot.get());
            self.parked_slot.set(0);
        }
    }

    /// Whether the thread is inside profiler code.
    pub(crate) fn guarded(&self) -> bool {
        self.guard_depth.get() != 0
    }

    /// Enters profiler code for the rest of the thread's life (reporter threads).
    pub(crate) fn enter_forever(&self) {
        std::mem::forget(self.enter());
    }
}

impl Default for ThreadState {
    fn default() -> Self {
        Self::new()
    }
}

/// RAII re-entrancy guard; restores the thread's slot when the outermost guard drops, even on
/// unwinding.
#[derive(Debug)]
pub(crate) struct Guard<'a> {
    ts: &'a ThreadState,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.ts.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_parks_and_restores_slot_with_nesting() {
        let ts = ThreadState::new();
        ts.slot.set(7);
        {
            let _g = ts.enter();
            assert_eq!(ts.slot.get(), 0);
            assert!(ts.guarded());
            {
                let _g2 = ts.enter();
                assert_eq!(ts.slot.get(), 0);
            }
            assert_eq!(ts.slot.get(), 0, "inner guard must not restore early");
        }
        assert_eq!(ts.slot.get(), 7);
        assert!(!ts.guarded());
    }
}
