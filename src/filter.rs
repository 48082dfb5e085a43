//! Quick-reject filter in front of the sampled-pointer table.
//!
//! Almost every `free` is of an unsampled block. Probing a locked table on each would put a lock
//! and a hash probe on the hottest path there is, so `free` first reads one byte of a count map:
//! zero means "certainly not sampled". The byte index is the low 32 bits of the block's address
//! in 256-byte units (2^24 cells, a 4 GiB window), so the test is five instructions: copy the
//! low half of the address, shift, load the map's base, compare the byte, branch. No mask is
//! needed because the 32-bit copy already bounds the index.
//!
//! The map is 16 MiB of zero-initialized address space, but only the pages covering addresses
//! the program frees are ever touched: one 4 KiB page of map per MiB of heap (the map costs
//! 0.4 % of the heap it watches). Blocks that are close in memory share map lines. The cell size
//! is a measured compromise. A hashed index was a cache miss on nearly every free (80 % of the
//! hook's time). 16-byte cells made the map load the hook's main cost in the Rust cache
//! benchmark. 4 KiB cells made the frees of a live sample's page neighbours probe the table: 2.8 %
//! of all frees in the churn benchmark, against 0.09 % with 256-byte cells. An earlier bitmap
//! (one bit per cell, a 64 KiB window of 2^19 cells) was denser but took nine instructions.
//!
//! Each byte is the number of live samples mapped to its cell: a sample increments it before the
//! pointer is returned to the program, removing a sample decrements it. A cell's count is guarded
//! by the live-table shard that every pointer of the cell maps to (`tables::shard` is a function
//! of [`cell`]), so updating the filter costs no lock of its own. A non-zero count only means
//! "look in the table" (false positives cost a probe, false negatives cannot happen). A count
//! that reaches 255 stays saturated.
//!
//! The null pointer's cell is saturated by [`init`], which every thread runs before its first
//! fast-path call, so `may_contain(0)` is true: the hooks send null to the slow path without a
//! test of their own. (It is set at run time so that the map stays in `.bss`: one non-zero
//! byte in a static initializer would put all 16 MiB in the file.)

use std::sync::atomic::{AtomicU8, Ordering};

/// log2 of the bytes of address space one cell covers (see the module docs).
const SHIFT: u32 = 8;
/// Cells: every value of a 32-bit address shifted right by `SHIFT`.
const CELLS: usize = 1 << (32 - SHIFT);
static COUNTS: [AtomicU8; CELLS] = [const { AtomicU8::new(0) }; CELLS];

/// The filter cell of `ptr`.
#[inline(always)]
pub(crate) fn cell(ptr: usize) -> usize {
    ((ptr as u32) >> SHIFT) as usize
}

/// Saturates the null pointer's cell. Idempotent; the hooks run it when they set up a thread,
/// before that thread can take a fast path.
pub(crate) fn init() {
    COUNTS[0].store(u8::MAX, Ordering::Relaxed);
}

/// Whether `ptr` may be a sampled block.
#[inline(always)]
pub(crate) fn may_contain(ptr: usize) -> bool {
    // SAFETY: `cell` is a 32-bit value shifted right by SHIFT, so it is below CELLS.
    unsafe { COUNTS.get_unchecked(cell(ptr)) }.load(Ordering::Relaxed) != 0
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
    fn bits_follow_counts_without_false_negatives() {
        init();
        let base = 0x7f12_3400_1000usize; // not in null's cell
        let ptrs: Vec<usize> = (0..1000).map(|i| base + i * 3 * (1 << SHIFT)).collect();
        for &p in &ptrs {
            ins(p);
        }
        assert!(ptrs.iter().all(|&p| may_contain(p)));
        // Two samples in one cell: the bit stays until both are gone.
        let twin = base + (1 << 32); // same index as `base`
        ins(twin);
        rem(base);
        assert!(may_contain(twin));
        rem(twin);
        for &p in &ptrs[1..] {
            rem(p);
        }
        assert!(ptrs.iter().all(|&p| !may_contain(p)), "all counts back to zero");
        assert!(may_contain(0), "null always goes to the slow path");
        ins(1 << 32); // shares null's cell
        rem(1 << 32);
        assert!(may_contain(0), "null's cell stays set");
        // Neighbouring blocks map to neighbouring bits.
        assert_eq!(cell(base + (1 << SHIFT)), cell(base) + 1);
    }
}
