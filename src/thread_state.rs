//! Per-thread state of the allocation hooks: the re-entrancy guard, the sampling countdown, the
//! random generator and this thread's slot of exact counters.
//!
//! The block is plain data (all-zero is its valid initial state, no destructor), because the
//! shim keeps it in an initial-exec TLS block compiled from C (a Rust `thread_local!` in a shared
//! object goes through `__tls_get_addr`, which may call `malloc`), while the `#[global_allocator]`
//! front end keeps it in an ordinary const `thread_local!`.
//!
//! Each hot path tests one field. An allocation compares its size with `budget`; a free tests
//! `slot`. Both are zero, sending every call to the slow path, when the thread has not been set
//! up yet, is inside the profiler (the guard parks the real values in `parked_slot` and
//! `parked_budget`), has no counter slot, or its thread-exit handler has run. Folding all these
//! conditions into the one compare the path needs anyway keeps the unsampled path short.

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
    /// Bytes before the next sampled byte (see `sampler`): an allocation of fewer bytes is not
    /// sampled and subtracts its size. Never zero for a set-up, unguarded thread with a slot;
    /// zero otherwise.
    pub(crate) budget: Cell<u64>,
    /// The real budget while the guard is held.
    pub(crate) parked_budget: Cell<u64>,
    /// xorshift64* state; 0 until seeded.
    pub(crate) rng: Cell<u64>,
    /// The thread's stack, for the unwinder's bounds: lowest address, and one past the
    /// highest (0 until the first sample looks them up; an empty range when unknown).
    pub(crate) stack_lo: Cell<usize>,
    pub(crate) stack_top: Cell<usize>,
}

const _: () = assert!(std::mem::size_of::<ThreadState>() <= 64);

/// Byte offset of the hot path's `slot` field, for front ends that address the block directly.
pub const SLOT_OFFSET: usize = std::mem::offset_of!(ThreadState, slot);
/// Byte offset of the hot path's `budget` field.
pub const BUDGET_OFFSET: usize = std::mem::offset_of!(ThreadState, budget);

impl ThreadState {
    /// The all-zero initial state.
    pub const fn new() -> Self {
        Self {
            slot: Cell::new(0),
            parked_slot: Cell::new(0),
            guard_depth: Cell::new(0),
            status: Cell::new(STATUS_NEW),
            budget: Cell::new(0),
            parked_budget: Cell::new(0),
            rng: Cell::new(0),
            stack_lo: Cell::new(0),
            stack_top: Cell::new(0),
        }
    }

    /// Enters profiler code: allocations made until the matching [`Guard`] drops are the
    /// profiler's own and are neither sampled nor counted as the program's.
    pub(crate) fn enter(&self) -> Guard<'_> {
        let depth = self.guard_depth.get();
        if depth == 0 {
            self.parked_slot.set(self.slot.get());
            self.slot.set(0);
            self.parked_budget.set(self.budget.get());
            self.budget.set(0);
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
            self.budget.set(self.parked_budget.get());
            self.parked_budget.set(0);
        }
    }

    /// Sets the sampling budget, or the parked one while the guard is held, so that the budget
    /// stays zero inside profiler code.
    pub(crate) fn set_budget(&self, bytes: u64) {
        if self.guarded() { self.parked_budget.set(bytes) } else { self.budget.set(bytes) }
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
        ts.budget.set(100);
        {
            let _g = ts.enter();
            assert_eq!(ts.slot.get(), 0);
            assert_eq!(ts.budget.get(), 0, "allocations inside the guard take the slow path");
            ts.set_budget(55);
            assert_eq!(ts.budget.get(), 0);
            assert!(ts.guarded());
            {
                let _g2 = ts.enter();
                assert_eq!(ts.slot.get(), 0);
            }
            assert_eq!(ts.slot.get(), 0, "inner guard must not restore early");
        }
        assert_eq!(ts.slot.get(), 7);
        assert_eq!(ts.budget.get(), 55, "a budget set under the guard applies after it");
        assert!(!ts.guarded());
    }
}
