//! Quick-reject filter in front of the sampled-pointer table.
//!
//! Almost every `free` is of an unsampled block. Probing a locked table on each would put a lock
//! and a hash probe on the hottest path there is, so a 1 MiB array of 8-bit counters indexed by a
//! hash of the address answers "certainly not sampled" with one load. A sample increments its
//! cell before the pointer is returned to the program and decrements it when the record is
//! removed; a non-zero cell only means "look in the table" (false positives cost a probe, false
//! negatives cannot happen). A cell that ever reaches 255 stays saturated.

use std::sync::atomic::{AtomicU8, Ordering};

const BITS: u32 = 20;
static CELLS: [AtomicU8; 1 << BITS] = [const { AtomicU8::new(0) }; 1 << BITS];

#[inline(always)]
fn index(ptr: usize) -> usize {
    // Blocks are at least 16-byte aligned: drop those bits, then mix (Fibonacci hashing).
    (ptr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - BITS)
}

/// Whether `ptr` may be a sampled block.
#[inline(always)]
pub(crate) fn may_contain(ptr: usize) -> bool {
    // SAFETY: `index` shifts a 64-bit value right by 64 - BITS, so it is below 1 << BITS.
    unsafe { CELLS.get_unchecked(index(ptr)) }.load(Ordering::Acquire) != 0
}

/// Marks `ptr` as (possibly) sampled.
pub(crate) fn insert(ptr: usize) {
    if let Some(c) = CELLS.get(index(ptr)) {
        let _ = c.fetch_update(Ordering::Release, Ordering::Relaxed, |v| {
            if v == u8::MAX { None } else { Some(v + 1) }
        });
    }
}

/// Undoes one [`insert`] of `ptr`.
pub(crate) fn remove(ptr: usize) {
    if let Some(c) = CELLS.get(index(ptr)) {
        let _ = c.fetch_update(Ordering::Release, Ordering::Relaxed, |v| {
            if v == u8::MAX || v == 0 { None } else { Some(v - 1) }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_then_remove_round_trips_without_false_negatives() {
        let ptrs: Vec<usize> = (0..1000).map(|i| 0x7f00_0000_0000 + i * 48).collect();
        for &p in &ptrs {
            insert(p);
        }
        assert!(ptrs.iter().all(|&p| may_contain(p)));
        for &p in &ptrs {
            remove(p);
        }
        // Other tests may share cells, but ours are all gone.
        let still = ptrs.iter().filter(|&&p| may_contain(p)).count();
        assert!(still < 5, "{still} cells still set");
    }
}
