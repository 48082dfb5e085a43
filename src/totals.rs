//! Exact totals of the program's allocated and freed bytes, without a shared atomic written by
//! every thread on every call.
//!
//! Each live thread owns one cache-line-sized slot of a static array and is its only writer, so
//! the hot path updates it with a plain load and store (no `lock` prefix, no contended line).
//! Readers sum all slots. When a thread exits its slot goes back to the pool *with its values*;
//! the next owner keeps adding to them, so the sums stay exact. Threads without a slot (the pool
//! is exhausted, or their exit handler already ran) use the shared slot with atomic adds.
//!
//! Bytes are counted as the front end sees them: `Layout::size()` in the Rust front end, the
//! usable size of the block in the shim (where `free` carries no size). The shim reads glibc's
//! chunk size, which is the usable size plus one header word; rather than subtract the word on
//! every call it declares it once ([`set_block_overhead`]) and readers subtract it per block.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Number of slots (threads at once with their own slot).
pub(crate) const SLOTS: usize = 1024;
const _: () = assert!(SLOTS.is_power_of_two());

#[repr(align(64))]
#[derive(Debug)]
pub(crate) struct Slot {
    allocated: AtomicU64,
    freed: AtomicU64,
    allocs: AtomicU64,
    frees: AtomicU64,
    owned: AtomicBool,
}

impl Slot {
    const fn new() -> Self {
        Self {
            allocated: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            owned: AtomicBool::new(false),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static SHARED: Slot = Slot::new();
/// Bytes the profiler holds for itself (symbol caches, tables), reported separately.
static INTERNAL: AtomicU64 = AtomicU64::new(0);
static INTERNAL_FREED: AtomicU64 = AtomicU64::new(0);

/// A thread's slot handle is the address of its `Slot` (0 = none), so the hot paths reach it
/// without index arithmetic.
#[inline(always)]
fn owned(slot: usize) -> &'static Slot {
    debug_assert!(TABLE.iter().any(|s| std::ptr::eq(s, slot as *const Slot)));
    // SAFETY: every non-zero handle a thread holds was returned by `claim`, i.e. is the address
    // of an element of the static TABLE.
    unsafe { &*(slot as *const Slot) }
}

/// Adds an allocation to the slot owned by the calling thread.
#[inline(always)]
pub(crate) fn add_alloc(slot: usize, bytes: usize) {
    let s = owned(slot);
    // Single writer: a relaxed load + store is exact and compiles to plain moves.
    s.allocated.store(s.allocated.load(Ordering::Relaxed) + bytes as u64, Ordering::Relaxed);
    s.allocs.store(s.allocs.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Adds a free to the slot owned by the calling thread.
#[inline(always)]
pub(crate) fn add_free(slot: usize, bytes: usize) {
    let s = owned(slot);
    s.freed.store(s.freed.load(Ordering::Relaxed) + bytes as u64, Ordering::Relaxed);
    s.frees.store(s.frees.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Adds an allocation from a thread without a slot.
pub(crate) fn add_alloc_shared(bytes: usize) {
    SHARED.allocated.fetch_add(bytes as u64, Ordering::Relaxed);
    SHARED.allocs.fetch_add(1, Ordering::Relaxed);
}

/// Adds a free from a thread without a slot.
pub(crate) fn add_free_shared(bytes: usize) {
    SHARED.freed.fetch_add(bytes as u64, Ordering::Relaxed);
    SHARED.frees.fetch_add(1, Ordering::Relaxed);
}

/// Counts memory the profiler allocated for itself.
pub(crate) fn add_internal(bytes: usize) {
    INTERNAL.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Counts memory the profiler released.
pub(crate) fn sub_internal(bytes: usize) {
    INTERNAL_FREED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Claims a free slot for the calling thread (its handle), or 0 when the pool is exhausted.
pub(crate) fn claim() -> usize {
    for s in TABLE.iter() {
        if !s.owned.load(Ordering::Relaxed)
            && s.owned.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return s as *const Slot as usize;
        }
    }
    0
}

/// Returns a slot to the pool (its values stay and keep counting for the next owner).
pub(crate) fn release(slot: usize) {
    if let Some(s) = TABLE.iter().find(|s| std::ptr::eq(*s, slot as *const Slot)) {
        s.owned.store(false, Ordering::Release);
    }
}

/// After `fork` only the forking thread exists: every other slot is free again.
pub(crate) fn release_all_but(slot: usize) {
    for s in TABLE.iter().filter(|s| !std::ptr::eq(*s, slot as *const Slot)) {
        s.owned.store(false, Ordering::Release);
    }
}

/// Bytes every counted block carries beyond what the totals report (see the module docs).
static BLOCK_OVERHEAD: AtomicU64 = AtomicU64::new(0);

/// Declares that each counted block's bytes include `bytes` of allocator overhead, which
/// [`read`] subtracts per allocation and per free.
pub(crate) fn set_block_overhead(bytes: u64) {
    BLOCK_OVERHEAD.store(bytes, Ordering::Relaxed);
}

/// A snapshot of the exact totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Bytes allocated by the program since start.
    pub allocated_bytes: u64,
    /// Bytes freed by the program since start.
    pub freed_bytes: u64,
    /// Number of allocations since start.
    pub allocations: u64,
    /// Number of frees since start.
    pub frees: u64,
    /// Bytes the profiler itself currently holds (not part of the program's totals).
    pub profiler_bytes: u64,
}

impl Totals {
    /// Bytes the program currently retains (allocated minus freed).
    pub fn retained_bytes(&self) -> u64 {
        self.allocated_bytes.saturating_sub(self.freed_bytes)
    }
}

/// Sums every slot.
pub(crate) fn read() -> Totals {
    let mut t = Totals::default();
    for s in TABLE.iter().chain(std::iter::once(&SHARED)) {
        t.allocated_bytes += s.allocated.load(Ordering::Relaxed);
        t.freed_bytes += s.freed.load(Ordering::Relaxed);
        t.allocations += s.allocs.load(Ordering::Relaxed);
        t.frees += s.frees.load(Ordering::Relaxed);
    }
    let overhead = BLOCK_OVERHEAD.load(Ordering::Relaxed);
    t.allocated_bytes = t.allocated_bytes.saturating_sub(overhead.wrapping_mul(t.allocations));
    t.freed_bytes = t.freed_bytes.saturating_sub(overhead.wrapping_mul(t.frees));
    t.profiler_bytes =
        INTERNAL.load(Ordering::Relaxed).saturating_sub(INTERNAL_FREED.load(Ordering::Relaxed));
    t
}
