//! Quick-reject filter in front of the sampled-pointer table.
//!
//! Almost every `free` is of an unsampled block. Probing a locked table on each would put a lock
//! and a hash probe on the hottest path there is, so `free` first reads one byte of a 512 KiB
//! map: zero means "certainly not sampled". The byte is the number of live samples in the
//! block's cell: its address in 256-byte units, modulo 2^19 (a 128 MiB window), so blocks that
//! are close in memory share cache lines of the map (the part a program's frees touch is its
//! heap size / 256).
//!
//! The cell size is a measured compromise. A hashed index was a cache miss on nearly every free
//! (80 % of the hook's time). 16-byte cells still left the map load the hook's main cost in the
//! Rust cache benchmark (dealloc 2.7 % of the run, 1.1 % with 256-byte cells). 4 KiB cells made
//! the frees of a live sample's page neighbours probe the table: 2.8 % of all frees in the churn
//! benchmark, against 0.09 % with 256-byte cells. A byte per cell rather than a bit: the test
//! is a shift, a mask and a compare with the byte (a bit needs a second shift for the word and a
//! bit test), three instructions fewer on every free, for a map that is 8 times larger (a bitmap
//! with the same cells was tried first; see bench/README.md).
//!
//! A cell's count is guarded by the live-table shard that every pointer of the cell maps to
//! (`tables::shard` is a function of [`cell`]), so updating the filter costs no lock of its own.
//! A sample increments its count before the pointer is returned to the program; a count only
//! means "look in the table" (false positives cost a probe, false negatives cannot happen). A
//! count that reaches 255 stays saturated.
//!
//! The null pointer's cell starts saturated, so `may_contain(0)` is always true: the hooks
//! send null to the slow path without a test of their own.
//!
//! Each thread's frees read the map through a pointer in its own state (`ThreadState::filter`).
//! Until the thread is set up, and while it runs profiler code or after its exit handler ran,
//! that pointer names a map of all ones ([`REJECT_NONE`] in the Rust front end, one of its own
//! in the shim): every free takes the slow path, with no test of its own on the hot path.

use std::sync::atomic::{AtomicU8, Ordering};

/// log2 of the bytes of address space one cell covers (see the module docs).
pub const CELL_SHIFT: u32 = 8;
/// log2 of the number of cells (bytes of the map).
pub const CELL_BITS: u32 = 19;
const MASK: usize = (1 << CELL_BITS) - 1;

/// Live samples per cell (saturating at 255): the map the hot path reads.
static COUNTS: [AtomicU8; 1 << CELL_BITS] = {
    let mut c = [const { AtomicU8::new(0) }; 1 << CELL_BITS];
    c[0] = AtomicU8::new(u8::MAX); // saturated: null's cell is never cleared
    c
};

/// A map with every byte non-zero: a thread whose frees read it sends every free to the slow
/// path (read-only memory).
pub(crate) static REJECT_NONE: [u8; 1 << CELL_BITS] = [u8::MAX; 1 << CELL_BITS];

/// [`REJECT_NONE`] as a `ThreadState::filter` value.
pub(crate) const fn reject_none() -> *const AtomicU8 {
    REJECT_NONE.as_ptr().cast()
}

/// The real map, for `ThreadState::filter`.
pub(crate) fn real_map() -> *const AtomicU8 {
    COUNTS.as_ptr()
}

/// The filter cell of `ptr`.
#[inline(always)]
pub(crate) fn cell(ptr: usize) -> usize {
    (ptr >> CELL_SHIFT) & MASK
}

/// Whether `ptr` may be a sampled block.
#[inline(always)]
pub(crate) fn may_contain(ptr: usize) -> bool {
    may_contain_in(COUNTS.as_ptr(), ptr)
}

/// Whether `ptr` may be a sampled block, according to the map at `map` (the real one or a map
/// of all ones, as a thread's `filter` names).
#[inline(always)]
pub(crate) fn may_contain_in(map: *const AtomicU8, ptr: usize) -> bool {
    // SAFETY: `map` is COUNTS or a map of all ones, both 2^CELL_BITS bytes, and the cell is
    // masked to CELL_BITS bits. A map of all ones is read-only memory, which atomic loads may
    // read.
    unsafe { &*map.add(cell(ptr)) }.load(Ordering::Acquire) != 0
}

/// Marks `ptr` as (possibly) sampled. The caller holds `ptr`'s live-table shard lock.
pub(crate) fn insert(ptr: usize) {
    let c = &COUNTS[cell(ptr)];
    let v = c.load(Ordering::Relaxed);
    if v < u8::MAX {
        c.store(v + 1, Ordering::Release);
    }
}

/// Undoes one [`insert`] of `ptr`. The caller holds `ptr`'s live-table shard lock.
pub(crate) fn remove(ptr: usize) {
    let c = &COUNTS[cell(ptr)];
    match c.load(Ordering::Relaxed) {
        0 | u8::MAX => {}
        v => c.store(v - 1, Ordering::Release),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The filter's contract: the caller holds the pointer's live-table shard lock.
    fn ins(p: usize) {
        let _g = crate::tables::shard(p).lock();
        insert(p);
    }
    fn rem(p: usize) {
        let _g = crate::tables::shard(p).lock();
        remove(p);
    }

    #[test]
    fn counts_without_false_negatives() {
        let base = 0x7f12_3400_1000usize; // not in null's cell
        let ptrs: Vec<usize> = (0..1000).map(|i| base + i * 3 * (1 << CELL_SHIFT)).collect();
        for &p in &ptrs {
            ins(p);
        }
        assert!(ptrs.iter().all(|&p| may_contain(p)));
        // Two samples in one cell: the cell stays marked until both are gone.
        let twin = base + (1 << (CELL_BITS + CELL_SHIFT)); // same index as `base`
        ins(twin);
        rem(base);
        assert!(may_contain(twin));
        rem(twin);
        for &p in &ptrs[1..] {
            rem(p);
        }
        assert!(ptrs.iter().all(|&p| !may_contain(p)), "all cells cleared");
        assert!(may_contain(0), "null always goes to the slow path");
        ins(1 << (CELL_BITS + CELL_SHIFT)); // shares null's cell
        rem(1 << (CELL_BITS + CELL_SHIFT));
        assert!(may_contain(0), "null's cell stays set");
        // Neighbouring blocks map to neighbouring cells.
        assert_eq!(cell(base + (1 << CELL_SHIFT)), cell(base) + 1);
    }

    #[test]
    fn reject_none_rejects_nothing() {
        for p in [0usize, 16, 0x7f12_3400_1010, usize::MAX - 15] {
            assert!(may_contain_in(reject_none(), p));
        }
    }
}
