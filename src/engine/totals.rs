//! Exact totals of the program's allocated and freed bytes, without a shared atomic written by
//! every thread on every call.
//!
//! Each thread counts in its own [`ThreadState`] and is its only writer, so the hot paths update
//! it with plain loads and stores (no `lock` prefix, no contended line). A thread is registered
//! here once it is set up, which only happens once its exit handler is in place: readers sum
//! every registered thread under [`REGISTRY`]'s lock, and the exit handler folds the thread's
//! counters into [`RETIRED`] and leaves the registry under the same lock, before its storage can
//! go away. Threads that are not registered (the registry is full, no exit handler could be set,
//! or their exit handler already ran) take the slow paths, which count in [`SHARED`] with atomic
//! adds.
//!
//! Bytes are counted as the front end sees them: `Layout::size()` in the Rust front end, glibc's
//! chunk size in the shim (where `free` carries no size): the usable size plus glibc's 8-byte
//! header word, 16 bytes for mmapped blocks. That is what the heap spends on the block, and the
//! shim reads it from the chunk header with one load and a mask at both ends.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::engine::thread_state::ThreadState;
use crate::sys::spin::SpinMutex;

/// Threads at once with counters of their own.
pub(crate) const MAX_THREADS: usize = 4096;

/// Registered threads' states (null = free entry). Entries change under [`REGISTRY`].
static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Serialises registering, leaving and reading; the value is the number of entries in use,
/// so a reader stops at the last one.
static REGISTRY: SpinMutex<usize> = SpinMutex::new(0);

/// A pair of counters updated with atomic adds.
#[derive(Debug)]
struct Shared {
    allocated: AtomicU64,
    freed: AtomicU64,
}

impl Shared {
    const fn new() -> Self {
        Self { allocated: AtomicU64::new(0), freed: AtomicU64::new(0) }
    }
}

/// Counters of threads that left the registry.
static RETIRED: Shared = Shared::new();
/// Counters of calls on threads without counters of their own.
static SHARED: Shared = Shared::new();
/// Bytes the profiler holds for itself (symbol caches, tables), reported separately.
static INTERNAL: AtomicU64 = AtomicU64::new(0);
static INTERNAL_FREED: AtomicU64 = AtomicU64::new(0);
/// The highest `INTERNAL - INTERNAL_FREED` seen after an allocation of the profiler's own: its
/// high-water mark, which a report's peak shows up in (reports allocate and free within one
/// call, so the current figure alone never shows what a report cost).
static INTERNAL_PEAK: AtomicU64 = AtomicU64::new(0);

/// Registers the calling thread's state; false when the registry is full.
pub(crate) fn register(ts: &ThreadState) -> bool {
    let mut used = REGISTRY.lock();
    let me = ts as *const ThreadState as *mut ThreadState;
    for (i, e) in THREADS.iter().enumerate() {
        if e.load(Ordering::Relaxed).is_null() {
            e.store(me, Ordering::Relaxed);
            *used = (*used).max(i + 1);
            return true;
        }
    }
    false
}

/// Folds a registered thread's counters into the retired totals and removes it (thread exit).
pub(crate) fn unregister(ts: &ThreadState) {
    let _used = REGISTRY.lock();
    retire(ts);
}

/// Moves `ts`'s counters to [`RETIRED`] and frees its entry; the caller holds [`REGISTRY`].
fn retire(ts: &ThreadState) {
    let me = ts as *const ThreadState as *mut ThreadState;
    if let Some(e) = THREADS.iter().find(|e| e.load(Ordering::Relaxed) == me) {
        let (a, f) = ts.counters();
        RETIRED.allocated.fetch_add(a, Ordering::Relaxed);
        RETIRED.freed.fetch_add(f, Ordering::Relaxed);
        ts.clear_counters();
        e.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

/// Adds an allocation from a thread without counters of its own.
pub(crate) fn add_alloc_shared(bytes: usize) {
    SHARED.allocated.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Adds a free from a thread without counters of its own.
pub(crate) fn add_free_shared(bytes: usize) {
    SHARED.freed.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Counts memory the profiler allocated for itself.
pub(crate) fn add_internal(bytes: usize) {
    let held = (INTERNAL.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64)
        .saturating_sub(INTERNAL_FREED.load(Ordering::Relaxed));
    // A load first: the peak moves rarely, and a read-modify-write on every allocation would
    // pull its line into each allocating core.
    if held > INTERNAL_PEAK.load(Ordering::Relaxed) {
        INTERNAL_PEAK.fetch_max(held, Ordering::Relaxed);
    }
}

/// Counts memory the profiler released.
pub(crate) fn sub_internal(bytes: usize) {
    INTERNAL_FREED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// `fork` prepare: no thread may be registering, leaving or reading while the process forks.
pub(crate) fn lock_for_fork() {
    REGISTRY.lock_for_fork();
}

/// `fork` parent: releases what [`lock_for_fork`] took.
pub(crate) fn unlock_after_fork() {
    REGISTRY.force_unlock();
}

/// `fork` child: only the calling thread (`keep`, when registered) survives. The others'
/// counters are taken over as they stood (their blocks live on in the child's heap) and their
/// entries freed; then the lock [`lock_for_fork`] took is released.
pub(crate) fn after_fork_child(keep: Option<&ThreadState>) {
    let keep = keep.map_or(std::ptr::null(), |k| k as *const ThreadState);
    for e in THREADS.iter() {
        let p = e.load(Ordering::Relaxed);
        if !p.is_null() && !std::ptr::eq(p, keep) {
            // SAFETY: a registered entry points to a thread's state, which the child's copy of
            // the address space still holds (the thread is gone, its memory is not reused
            // before this handler returns).
            retire(unsafe { &*p });
        }
    }
    REGISTRY.force_unlock();
}

/// A snapshot of the exact totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Bytes allocated by the program since start.
    pub allocated_bytes: u64,
    /// Bytes freed by the program since start.
    pub freed_bytes: u64,
    /// Bytes the profiler itself currently holds (not part of the program's totals).
    pub profiler_bytes: u64,
    /// The most bytes the profiler held at any moment since the process started (its high-water
    /// mark, reports included).
    pub profiler_peak_bytes: u64,
}

impl Totals {
    /// Bytes the program currently retains (allocated minus freed).
    pub fn retained_bytes(&self) -> u64 {
        self.allocated_bytes.saturating_sub(self.freed_bytes)
    }
}

/// Sums every registered thread and the retired and shared counters.
pub(crate) fn read() -> Totals {
    sum(REGISTRY.lock())
}

/// [`read`], unless the registry's lock is held (a peak capture, which never waits).
pub(crate) fn try_read() -> Option<Totals> {
    REGISTRY.try_lock().map(sum)
}

/// [`read`] with the registry's lock held as `used`.
fn sum(used: crate::sys::spin::SpinGuard<'_, usize>) -> Totals {
    let (mut a, mut f) = (0u64, 0u64);
    {
        for e in THREADS.iter().take(*used) {
            let p = e.load(Ordering::Relaxed);
            // SAFETY: a registered entry points to a live thread's state: the thread leaves the
            // registry under this lock before its storage goes away.
            if let Some(ts) = unsafe { p.as_ref() } {
                let (ta, tf) = ts.counters();
                a = a.wrapping_add(ta);
                f = f.wrapping_add(tf);
            }
        }
    }
    drop(used);
    for s in [&RETIRED, &SHARED] {
        a = a.wrapping_add(s.allocated.load(Ordering::Relaxed));
        f = f.wrapping_add(s.freed.load(Ordering::Relaxed));
    }
    Totals {
        allocated_bytes: a,
        freed_bytes: f,
        profiler_bytes: INTERNAL
            .load(Ordering::Relaxed)
            .saturating_sub(INTERNAL_FREED.load(Ordering::Relaxed)),
        profiler_peak_bytes: INTERNAL_PEAK.load(Ordering::Relaxed),
    }
}
