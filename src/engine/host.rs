//! What a front end gives the engine: a [`Host`] (where the calling thread's state lives, how
//! its exit is seen, which frames are the front end's own) and the [`Settings`] the slow paths
//! read. Both sit below every engine module that takes a `Host` (the stack capture, the
//! sampling step, the mapping table, the hooks), so that those import this file and never each
//! other upward: the hooks re-export both for the front ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::engine::sampler;
use crate::engine::tables;
use crate::engine::thread_state::ThreadState;

/// What a front end provides to the hooks.
pub trait Host: 'static {
    /// What the front end's `counted` sizes count (the unit of every figure it reports).
    const UNIT: sampler::ByteUnit = sampler::ByteUnit::Requested;
    /// The calling thread's state. Both front ends keep it in storage that has no destructor
    /// and lives as long as the thread, so it is always reachable; the reference is used only on
    /// the calling thread and never kept past the current call.
    fn thread_state() -> &'static ThreadState;
    /// Arranges for [`thread_exit`](crate::engine::hooks::thread_exit) to run with this state when the calling thread ends;
    /// false when it cannot (the thread then never registers its counters, see `totals`).
    fn register_thread_exit(ts: &ThreadState) -> bool;
    /// Whether the frame at instruction pointer `ip`, in the function starting at `function()`,
    /// is the front end's own code (its allocation entry points); captured stacks drop
    /// everything up to the last such frame near the top.
    fn is_entry_frame(ip: usize, function: impl FnOnce() -> usize) -> bool;
    /// Whether a thread may set itself up with counters of its own (join the totals' registry)
    /// at its first allocation. The registry keeps a pointer to the thread's state until its
    /// exit handler runs, so a front end answers true only when that handler is certain to run
    /// for a thread first seen allocating. The shim answers false: it sets threads up when they
    /// start (its `pthread_create`) and the main thread from its constructor, because a thread
    /// it did not see start may be one that is already past its key destructors (a detached
    /// thread's first hooked call is glibc freeing its TLS, after every destructor ran).
    const SET_UP_AT_FIRST_ALLOCATION: bool = true;
    /// Whether the sampled path may look the thread's stack bounds up itself (see
    /// `sys::stack_bounds`). The shim answers false: glibc's `pthread_getattr_np` allocates
    /// while holding the thread's own lock, so asking it from a sample taken inside it waits
    /// forever; the shim records the bounds when a thread starts instead. The Rust front end
    /// never sees glibc's internal allocations, so it may ask.
    const LOOKS_UP_STACK_BOUNDS: bool = true;
    /// The front end's own code (the shim: all of `libying.so`, which includes the frame that
    /// starts every thread it saw created); empty by default. Such frames below the program's
    /// are not the program's and are left out of captured stacks.
    #[inline(always)]
    fn own_code() -> std::ops::Range<usize> {
        0..0
    }

    /// The calling thread's `budget`, read by the unsampled paths. A front end may reach it
    /// without forming the state's address: the shim reads it %fs-relative, one instruction
    /// instead of two.
    #[inline(always)]
    fn budget() -> u64 {
        Self::thread_state().budget.load(Ordering::Relaxed)
    }
    /// The address filter the calling thread's frees consult.
    #[inline(always)]
    fn filter() -> *const u8 {
        Self::thread_state().filter.get()
    }
    /// The front end's filter map once a thread is set up: the bitmap (the default), or the
    /// byte map (see `filter`). A thread's `reject` map must be of the same kind.
    fn real_filter() -> *const u8 {
        crate::engine::filter::bitmap()
    }
    /// Whether `ptr` may be sampled according to `map`, a filter of this front end's kind.
    #[inline(always)]
    fn may_be_sampled(map: *const u8, ptr: usize) -> bool {
        crate::engine::filter::may_contain_in_bits(map, ptr)
    }
}

/// Sampling settings read by the slow paths. Atomics so the shim can set them at start-up and
/// `const` so the `#[global_allocator]` static can embed them.
#[derive(Debug)]
pub struct Settings {
    /// Mean bytes between samples (`R`); 1 samples every allocation.
    pub(crate) sample_interval: AtomicU64,
    /// Requests of at least this many bytes are refused.
    pub(crate) max_alloc_bytes: AtomicU64,
    /// Seed for the per-thread generators (used when `seeded`).
    pub(crate) seed: AtomicU64,
    /// Whether `seed` was set; otherwise each thread seeds from the clock.
    pub(crate) seeded: AtomicBool,
    /// When false, nothing is sampled (totals are still exact).
    pub(crate) enabled: AtomicBool,
    /// The bits of `sampler::ln_unmarked(sample_interval)`, kept beside it so that a sample
    /// does not recompute it; 0 (a value the log never takes) until computed, for intervals
    /// below 1 KiB given to the `const` constructor.
    ln_unmarked: AtomicU64,
}

/// Byte offset of the giant limit in [`Settings`] (an 8-byte atomic), for a front end that
/// compares a request with it in its own code (the shim's `malloc`).
pub const MAX_ALLOC_BYTES_OFFSET: usize = std::mem::offset_of!(Settings, max_alloc_bytes);

/// Default refusal limit for a single request: 64 GiB.
pub const DEFAULT_MAX_ALLOC_BYTES: u64 = 64 * 1024 * 1024 * 1024;

impl Settings {
    /// Settings with the given interval and limit, sampling enabled, clock-seeded.
    pub const fn new(sample_interval: u64, max_alloc_bytes: u64) -> Self {
        let ln = if sample_interval >= 1024 {
            sampler::ln_unmarked_series(sample_interval).to_bits()
        } else {
            0
        };
        Self {
            sample_interval: AtomicU64::new(if sample_interval == 0 { 1 } else { sample_interval }),
            ln_unmarked: AtomicU64::new(ln),
            // At least 1, as `set_max_alloc_bytes` keeps it: the sampled path caps a thread's
            // budget at the limit, and a budget of 0 means "not sampling". (A limit of 0, which
            // would refuse zero-byte requests too, refuses every request but those.)
            max_alloc_bytes: AtomicU64::new(if max_alloc_bytes == 0 { 1 } else { max_alloc_bytes }),
            seed: AtomicU64::new(0),
            seeded: AtomicBool::new(false),
            enabled: AtomicBool::new(true),
        }
    }
    /// The same settings, with sampling on or off from the start.
    pub const fn enabled_at_start(self, on: bool) -> Self {
        Self { enabled: AtomicBool::new(on), ..self }
    }
    /// The mean sampling interval, for the `const` builders of `YingProfiler`, which own the
    /// settings they read (they take the profiler by value). Never call it on shared settings:
    /// a plain read racing with a store is a data race.
    pub(crate) const fn sample_interval_const(&self) -> u64 {
        // SAFETY: the atomic's own storage, read through the pointer it hands out, by the owner
        // of the settings (see above): no other thread can store to it meanwhile.
        unsafe { *self.sample_interval.as_ptr() }
    }
    /// The giant limit, for the `const` builders (see `sample_interval_const`).
    pub(crate) const fn max_alloc_bytes_const(&self) -> u64 {
        // SAFETY: as in `sample_interval_const`.
        unsafe { *self.max_alloc_bytes.as_ptr() }
    }
    /// Mean sampling interval in bytes.
    #[inline]
    pub fn sample_interval(&self) -> u64 {
        self.sample_interval.load(Ordering::Relaxed).max(1)
    }
    /// Sets the mean sampling interval (threads pick it up at their next sample).
    pub fn set_sample_interval(&self, bytes: u64) {
        let bytes = bytes.max(1);
        self.sample_interval.store(bytes, Ordering::Relaxed);
        self.ln_unmarked.store(sampler::ln_unmarked(bytes).to_bits(), Ordering::Relaxed);
    }
    /// `ln(1 - 1/interval)` for the current interval (see `sampler`). A thread that reads it
    /// while another changes the interval may pair the new interval with the old log for one
    /// sample, as a countdown drawn before the change is spent after it.
    #[inline]
    pub(crate) fn ln_unmarked(&self) -> f64 {
        let bits = self.ln_unmarked.load(Ordering::Relaxed);
        if bits != 0 { f64::from_bits(bits) } else { sampler::ln_unmarked(self.sample_interval()) }
    }
    /// The giant-allocation limit (at least 1).
    #[inline]
    pub fn max_alloc_bytes(&self) -> u64 {
        self.max_alloc_bytes.load(Ordering::Relaxed)
    }
    /// Sets the giant-allocation limit.
    pub fn set_max_alloc_bytes(&self, bytes: u64) {
        self.max_alloc_bytes.store(bytes.max(1), Ordering::Relaxed);
    }
    /// Sets the seed of the per-thread generators (threads set up afterwards use it).
    pub fn set_seed(&self, seed: u64) {
        self.seed.store(seed, Ordering::Relaxed);
        self.seeded.store(true, Ordering::Relaxed);
    }
    /// Stack entries kept (all stripes together) before new stacks are folded into one overflow
    /// entry (process-wide).
    pub fn set_max_stacks(&self, n: usize) {
        tables::MAX_STACKS.store(n.max(16) as u64, Ordering::Relaxed);
    }
    /// Turns sampling on or off.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }
    /// Whether sampling is on.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampler::{Weight, draw_countdown_at, weight_at};

    #[test]
    fn settings_keep_the_log_of_their_interval() {
        for r in [1u64, 2, 1000, 1024, 4096, 524_288] {
            let exact = if r == 1 { f64::NEG_INFINITY } else { (-(1.0 / r as f64)).ln_1p() };
            let built = Settings::new(r, 1 << 40);
            let set = Settings::new(1 << 20, 1 << 40);
            set.set_sample_interval(r);
            for (how, got) in [("new", built.ln_unmarked()), ("set", set.ln_unmarked())] {
                let close = got == exact || ((got - exact) / exact).abs() < 1e-14;
                assert!(close, "interval {r} ({how}): {got:e} vs {exact:e}");
            }
        }
        // Interval 1 carries to the surely-sampled figures through the log alone.
        let ln1 = Settings::new(1, 1 << 40).ln_unmarked();
        assert_eq!(draw_countdown_at(&mut 7, ln1), 1);
        assert_eq!(weight_at(100, ln1), Weight { count: 1.0, bytes: 100.0 });
        assert_eq!(weight_at(0, ln1), Weight { count: 1.0, bytes: 0.0 });
    }
}
