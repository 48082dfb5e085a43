//! Quick-reject filter in front of the sampled-pointer table.
//!
//! Almost every `free` is of an unsampled block. Probing a locked table on each would put a lock
//! and a hash probe on the hottest path there is, so `free` first reads one bit of a 64 KiB
//! bitmap: a clear bit means "certainly not sampled". The bit index is the block's address in
//! 256-byte units, modulo 2^19 (a 128 MiB window), so blocks that are close in memory share
//! cache lines of the bitmap: the part a program's frees touch is its heap size / 2048. The cell
//! size is a measured compromise. A hashed index was a cache miss on nearly every free (80 % of
//! the hook's time). 16-byte cells still left the bitmap load the hook's main cost in the Rust
//! cache benchmark (dealloc 2.7 % of the run, 1.1 % with 256-byte cells). 4 KiB cells made the
//! frees of a live sample's page neighbours probe the table: 2.8 % of all frees in the churn
//! benchmark, against 0.09 % with 256-byte cells.
//!
//! Each bit has an 8-bit count of the live samples mapped to it, in a separate array that only
//! the sampled paths touch: a sample increments its count and sets the bit before the pointer is
//! returned to the program; removing the last sample of a cell clears the bit. A cell's count is
//! guarded by the live-table shard that every pointer of the cell maps to (`tables::shard` is a
//! function of [`cell`]), so updating the filter costs no lock of its own; the bits themselves
//! are set and cleared atomically because one bitmap word spans cells of several shards.
//! A set bit only means "look in the table" (false positives cost a probe, false negatives cannot
//! happen). A count that reaches 255 stays saturated and its bit stays set.
//!
//! The null pointer's cell starts saturated, so `may_contain(0)` is always true: the hooks
//! send null to the slow path without a test of their own.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// log2 of the bytes of address space one cell covers (see the module docs).
const SHIFT: u32 = 8;
const BITS: u32 = 19;
const MASK: usize = (1 << BITS) - 1;
static BITMAP: [AtomicU64; 1 << (BITS - 6)] = {
    let mut b = [const { AtomicU64::new(0) }; 1 << (BITS - 6)];
    b[0] = AtomicU64::new(1); // null's cell (index 0)
    b
};
static COUNTS: [AtomicU8; 1 << BITS] = {
    let mut c = [const { AtomicU8::new(0) }; 1 << BITS];
    c[0] = AtomicU8::new(u8::MAX); // saturated: null's bit is never cleared
    c
};
/// The filter cell of `ptr`.
#[inline(always)]
pub(crate) fn cell(ptr: usize) -> usize {
    (ptr >> SHIFT) & MASK
}

/// Whether `ptr` may be a sampled block.
#[inline(always)]
pub(crate) fn may_contain(ptr: usize) -> bool {
    let i = cell(ptr);
    // SAFETY: `i` is masked to BITS bits, so `i >> 6` indexes the 2^(BITS-6) words of BITMAP.
    let word = unsafe { BITMAP.get_unchecked(i >> 6) }.load(Ordering::Acquire);
    word & (1 << (i & 63)) != 0
}

fn word_of(i: usize) -> &'static AtomicU64 {
    &BITMAP[i >> 6]
}

/// Marks `ptr` as (possibly) sampled. The caller holds `ptr`'s live-table shard lock.
pub(crate) fn insert(ptr: usize) {
    let i = cell(ptr);
    let c = &COUNTS[i];
    let v = c.load(Ordering::Relaxed);
    if v < u8::MAX {
        c.store(v + 1, Ordering::Relaxed);
    }
    word_of(i).fetch_or(1 << (i & 63), Ordering::Release);
}

/// Undoes one [`insert`] of `ptr`. The caller holds `ptr`'s live-table shard lock.
pub(crate) fn remove(ptr: usize) {
    let i = cell(ptr);
    let c = &COUNTS[i];
    match c.load(Ordering::Relaxed) {
        0 | u8::MAX => {}
        1 => {
            c.store(0, Ordering::Relaxed);
            word_of(i).fetch_and(!(1 << (i & 63)), Ordering::Release);
        }
        v => c.store(v - 1, Ordering::Relaxed),
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
    fn bits_follow_counts_without_false_negatives() {
        let base = 0x7f12_3400_1000usize; // not in null's cell
        let ptrs: Vec<usize> = (0..1000).map(|i| base + i * 3 * (1 << SHIFT)).collect();
        for &p in &ptrs {
            ins(p);
        }
        assert!(ptrs.iter().all(|&p| may_contain(p)));
        // Two samples in one cell: the bit stays until both are gone.
        let twin = base + (1 << (BITS + SHIFT)); // same index as `base`
        ins(twin);
        rem(base);
        assert!(may_contain(twin));
        rem(twin);
        for &p in &ptrs[1..] {
            rem(p);
        }
        assert!(ptrs.iter().all(|&p| !may_contain(p)), "all bits cleared");
        assert!(may_contain(0), "null always goes to the slow path");
        ins(1 << (BITS + SHIFT)); // shares null's cell
        rem(1 << (BITS + SHIFT));
        assert!(may_contain(0), "null's cell stays set");
        // Neighbouring blocks map to neighbouring bits.
        assert_eq!(cell(base + (1 << SHIFT)), cell(base) + 1);
    }
}
