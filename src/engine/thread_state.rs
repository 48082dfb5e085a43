//! Per-thread state of the allocation hooks: the re-entrancy guard, the sampling countdown, the
//! random generator and the thread's own exact byte counters.
//!
//! The block is plain data (no destructor, the initial state of [`ThreadState::new`]), because
//! the shim keeps it in an initial-exec TLS block compiled from C (a Rust `thread_local!` in a
//! shared object goes through `__tls_get_addr`, which may call `malloc`), while the
//! `#[global_allocator]` front end keeps it in an ordinary const `thread_local!`.
//!
//! Each hot path tests one field. An allocation compares its size with `budget`; a free looks
//! up its address in the map `filter` points to (see `filter`: the front end decides whether it
//! is the byte map or the bitmap). The budget is zero and `filter` points to `reject`, a map of
//! all ones, sending every call to the slow path, when the thread has not been set up yet, is inside the profiler (the guard parks the real budget in
//! `parked_budget`), is not registered with the totals, or its thread-exit handler has run.
//! Folding all these conditions into the test the path needs anyway keeps it short.
//!
//! The thread's counters are read by other threads (the totals sum every registered thread):
//! bytes allocated are `drawn - budget` (the hot path charges an allocation by subtracting it
//! from the budget, one instruction that counts it and advances the sampler at once), bytes
//! freed are `freed`. Only the owning thread writes them. When a slow path moves `budget` by a
//! new countdown, it moves `drawn` with it inside a sequence count, so that a reader never sees
//! one without the other.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, compiler_fence};

/// Lifecycle of a thread as seen by the hooks.
pub(crate) const STATUS_NEW: u32 = 0;
/// The thread is set up and samples (when `registered`, on its own counters).
pub(crate) const STATUS_LIVE: u32 = 1;
/// The thread's exit handler ran; later calls on it use the shared counters and never sample.
pub(crate) const STATUS_DEAD: u32 = 2;

/// The per-thread block. `repr(C)` and at most 128 bytes so the shim's C TLS block can hold it.
#[repr(C)]
#[derive(Debug)]
pub struct ThreadState {
    /// Bytes before the next sampled byte (see `sampler`): an allocation of `n` counted bytes
    /// subtracts `n`, and is sampled when that reaches zero or below. Zero sends every
    /// allocation to the slow path (see the module docs).
    pub(crate) budget: AtomicU64,
    /// Bytes allocated by this thread plus `budget` (wrapping): see the module docs.
    pub(crate) drawn: AtomicU64,
    /// Bytes freed by this thread.
    pub(crate) freed: AtomicU64,
    /// The address filter this thread's frees consult: `real`, or `reject`.
    pub(crate) filter: Cell<*const u8>,
    /// A filter map that rejects nothing (every free takes the slow path): the initial value of
    /// `filter`, which each front end's initial block sets (the shim's is its own C array).
    pub(crate) reject: Cell<*const u8>,
    /// The front end's real filter map (set when the thread is set up, see `Host::real_filter`).
    pub(crate) real: Cell<*const u8>,
    /// Odd while a slow path moves `budget` and `drawn` together.
    pub(crate) seq: AtomicU32,
    /// Re-entrancy depth: non-zero while the thread runs profiler code.
    pub(crate) guard_depth: Cell<u32>,
    /// One of the `STATUS_*` values.
    pub(crate) status: Cell<u32>,
    /// Whether the totals read this block (set up with an exit handler, and a registry entry).
    pub(crate) registered: Cell<u32>,
    /// The real budget while the guard is held.
    pub(crate) parked_budget: Cell<u64>,
    /// xorshift64* state; 0 until seeded.
    pub(crate) rng: Cell<u64>,
    /// The thread's number in set-up order (picks its stripe of the stack table).
    pub(crate) ordinal: Cell<u64>,
    /// The thread's stack, for the unwinder's bounds: lowest address, and one past the
    /// highest (0 until the first sample looks them up; an empty range when unknown).
    pub(crate) stack_lo: Cell<usize>,
    pub(crate) stack_top: Cell<usize>,
    /// The drawn countdown's bytes past `budget`, when the draw was longer than the giant limit
    /// that caps the budget (see `sample::redraw`); 0 otherwise.
    pub(crate) beyond: Cell<u64>,
}

const _: () = assert!(std::mem::size_of::<ThreadState>() <= 128);

/// Byte offset of the hot `budget` field, for front ends that address the block directly.
pub const BUDGET_OFFSET: usize = std::mem::offset_of!(ThreadState, budget);
/// Byte offset of the hot `freed` field.
pub const FREED_OFFSET: usize = std::mem::offset_of!(ThreadState, freed);
/// Byte offset of the hot `filter` field (its initial value is a map of all ones).
pub const FILTER_OFFSET: usize = std::mem::offset_of!(ThreadState, filter);
/// Byte offset of the `reject` field (the same initial value as `filter`).
pub const REJECT_OFFSET: usize = std::mem::offset_of!(ThreadState, reject);

impl ThreadState {
    /// The initial state: not set up, every call on the slow path (with the bitmap filter of
    /// the Rust front end; the shim's C block starts the same, with its own byte map).
    pub const fn new() -> Self {
        Self {
            budget: AtomicU64::new(0),
            drawn: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            filter: Cell::new(crate::engine::filter::reject_none_bits()),
            reject: Cell::new(crate::engine::filter::reject_none_bits()),
            real: Cell::new(crate::engine::filter::bitmap()),
            seq: AtomicU32::new(0),
            guard_depth: Cell::new(0),
            status: Cell::new(STATUS_NEW),
            registered: Cell::new(0),
            parked_budget: Cell::new(0),
            rng: Cell::new(0),
            ordinal: Cell::new(0),
            stack_lo: Cell::new(0),
            stack_top: Cell::new(0),
            beyond: Cell::new(0),
        }
    }

    /// Enters profiler code: allocations made until the matching [`Guard`] drops are the
    /// profiler's own and are neither sampled nor counted as the program's.
    #[inline]
    pub(crate) fn enter(&self) -> Guard<'_> {
        let depth = self.guard_depth.get();
        if depth == 0 {
            self.parked_budget.set(self.budget.load(Ordering::Relaxed));
            self.move_budget(0);
            self.filter.set(self.reject.get());
        }
        self.guard_depth.set(depth + 1);
        Guard { ts: self }
    }

    /// Leaves one level of profiler code; the outermost restores the budget and the filter.
    #[inline]
    pub(crate) fn leave(&self) {
        let depth = self.guard_depth.get().saturating_sub(1);
        self.guard_depth.set(depth);
        if depth == 0 {
            self.move_budget(self.parked_budget.get());
            self.parked_budget.set(0);
            self.filter.set(self.own_filter());
        }
    }

    /// The filter for an unguarded thread in its current state.
    pub(crate) fn own_filter(&self) -> *const u8 {
        if self.sampling() { self.real.get() } else { self.reject.get() }
    }

    /// Whether the thread is set up and counts on its own counters.
    pub(crate) fn sampling(&self) -> bool {
        self.status.get() == STATUS_LIVE && self.registered.get() != 0
    }

    /// Sets the sampling budget, or the parked one while the guard is held, so that the budget
    /// stays zero inside profiler code. The thread's allocated bytes do not change.
    pub(crate) fn set_budget(&self, bytes: u64) {
        if self.guarded() { self.parked_budget.set(bytes) } else { self.move_budget(bytes) }
    }

    /// The budget as the sampled path sees it: the parked one while the guard is held.
    pub(crate) fn budget_now(&self) -> u64 {
        if self.guarded() { self.parked_budget.get() } else { self.budget.load(Ordering::Relaxed) }
    }

    /// Replaces `budget` and moves `drawn` by the same amount, inside the sequence count.
    /// Inlined: every sample and every sampled free enter and leave the guard, two calls each.
    #[inline]
    fn move_budget(&self, bytes: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        let old = self.budget.load(Ordering::Relaxed);
        let d = self.drawn.load(Ordering::Relaxed);
        self.drawn.store(d.wrapping_add(bytes).wrapping_sub(old), Ordering::Relaxed);
        self.budget.store(bytes, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Counts an allocation of `bytes` by charging the budget (the unsampled paths): returns
    /// whether the budget still covers the next byte, i.e. false when this allocation is
    /// sampled. Owning thread only.
    #[inline(always)]
    pub(crate) fn charge(&self, bytes: u64) -> bool {
        let b = self.budget.load(Ordering::Relaxed);
        self.budget.store(b.wrapping_sub(bytes), Ordering::Relaxed);
        b > bytes
    }

    /// Counts `bytes` allocated without touching the budget (slow paths). Owning thread only.
    pub(crate) fn add_allocated(&self, bytes: u64) {
        let d = self.drawn.load(Ordering::Relaxed);
        self.drawn.store(d.wrapping_add(bytes), Ordering::Relaxed);
    }

    /// Counts `bytes` freed. Owning thread only.
    #[inline(always)]
    pub(crate) fn add_freed(&self, bytes: u64) {
        let f = self.freed.load(Ordering::Relaxed);
        self.freed.store(f.wrapping_add(bytes), Ordering::Relaxed);
    }

    /// Bytes allocated and freed by the thread, read consistently from any thread. A writer
    /// interrupted forever (a `fork` child's copy of another thread) is read as it stands.
    pub(crate) fn counters(&self) -> (u64, u64) {
        for _ in 0..10_000 {
            let s1 = self.seq.load(Ordering::Acquire);
            let d = self.drawn.load(Ordering::Relaxed);
            let b = self.budget.load(Ordering::Relaxed);
            let f = self.freed.load(Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            if s1 & 1 == 0 && self.seq.load(Ordering::Relaxed) == s1 {
                return (d.wrapping_sub(b), f);
            }
            std::hint::spin_loop();
        }
        let d = self.drawn.load(Ordering::Relaxed);
        (d.wrapping_sub(self.budget.load(Ordering::Relaxed)), self.freed.load(Ordering::Relaxed))
    }

    /// Empties the counters after the totals took them over (thread exit, `fork`).
    pub(crate) fn clear_counters(&self) {
        self.move_budget(0);
        self.drawn.store(0, Ordering::Relaxed);
        self.freed.store(0, Ordering::Relaxed);
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

/// RAII re-entrancy guard; restores the thread's budget when the outermost guard drops, even
/// on unwinding.
#[derive(Debug)]
pub(crate) struct Guard<'a> {
    ts: &'a ThreadState,
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.ts.leave();
    }
}

#[cfg(test)]
impl ThreadState {
    /// A block set up and sampling on its own counters, with a budget of 100 bytes (tests).
    pub(crate) fn live_for_tests() -> ThreadState {
        let ts = ThreadState::new();
        ts.status.set(STATUS_LIVE);
        ts.registered.set(1);
        ts.filter.set(ts.own_filter());
        ts.set_budget(100);
        ts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> ThreadState {
        ThreadState::live_for_tests()
    }

    #[test]
    fn guard_parks_and_restores_budget_and_filter_with_nesting() {
        let ts = live();
        let real = ts.real.get();
        assert_eq!(ts.filter.get(), real);
        {
            let _g = ts.enter();
            assert_eq!(ts.filter.get(), ts.reject.get());
            assert_eq!(ts.budget.load(Ordering::Relaxed), 0, "guarded allocations go slow");
            ts.set_budget(55);
            assert_eq!(ts.budget.load(Ordering::Relaxed), 0);
            assert!(ts.guarded());
            {
                let _g2 = ts.enter();
            }
            assert_eq!(ts.budget.load(Ordering::Relaxed), 0, "inner guard must not restore early");
        }
        assert_eq!(ts.filter.get(), real);
        assert_eq!(ts.budget.load(Ordering::Relaxed), 55, "a budget set under the guard applies");
        assert!(!ts.guarded());
    }

    #[test]
    fn budget_moves_never_change_the_counted_bytes() {
        let ts = live();
        assert_eq!(ts.counters(), (0, 0));
        assert!(ts.charge(30));
        assert_eq!(ts.counters(), (30, 0));
        // Crossing the budget counts the allocation too (the wrapped budget is read as is).
        assert!(!ts.charge(200));
        assert_eq!(ts.counters(), (230, 0));
        ts.set_budget(1000);
        ts.add_allocated(7);
        ts.add_freed(40);
        assert_eq!(ts.counters(), (237, 40));
        {
            let _g = ts.enter();
            assert_eq!(ts.counters(), (237, 40), "parking the budget counts nothing");
        }
        assert_eq!(ts.budget.load(Ordering::Relaxed), 1000);
        ts.clear_counters();
        assert_eq!(ts.counters(), (0, 0));
    }
}
