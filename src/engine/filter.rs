//! Quick-reject filter in front of the sampled-pointer table.
//!
//! Almost every `free` is of an unsampled block. Probing a locked table on each would put a lock
//! and a hash probe on the hottest path there is, so `free` first looks its address up in a
//! map: "certainly not sampled", or "look in the table". The map has one cell per 256 bytes of
//! address space, modulo 2^19 cells (a 128 MiB window), so blocks that are close in memory
//! share cache lines of the map.
//!
//! The cell size is a measured compromise. A hashed index was a cache miss on nearly every free
//! (80 % of the hook's time). 16-byte cells still left the map load the hook's main cost in the
//! Rust cache benchmark (dealloc 2.7 % of the run, 1.1 % with 256-byte cells). 4 KiB cells made
//! the frees of a live sample's page neighbours probe the table: 2.8 % of all frees in the churn
//! benchmark, against 0.09 % with 256-byte cells.
//!
//! The map comes in two forms, kept in step, for the two front ends' different costs:
//!
//! - `COUNTS`, a byte per cell (512 KiB): the number of live samples in the cell. The shim's
//!   `free` tests it with a shift, a mask and a compare with memory, three instructions fewer
//!   than a bit needs, which its instruction budget counts (see bench/README.md).
//! - `BITS`, a bit per cell (64 KiB): set while the cell's count is non-zero. The Rust front
//!   end tests it: its frees touch heap/2048 bytes of it rather than heap/256, which kept the
//!   Rust cache benchmark 3 % faster than the byte map.
//!
//! The count byte is also the cell's lock: its top bit is set while a sample is being added or
//! removed, so that the count and the cell's bit change together (a cell's pointers, 128 MiB
//! apart, may belong to different live-table shards). A locked byte is non-zero, which the
//! shim's `free` reads as "look in the table". A sample is marked before the pointer is returned
//! to the program; a mark only means "look in the table" (false positives cost a probe, false
//! negatives cannot happen). A count that reaches 127 stays saturated, and its bit set.
//!
//! The null pointer's cell starts saturated, so null is always "maybe": the hooks send it to
//! the slow path without a test of their own.
//!
//! Each thread's frees read the map through a pointer in its own state (`ThreadState::filter`).
//! Until the thread is set up, and while it runs profiler code or after its exit handler ran,
//! that pointer names a map of all ones (`REJECT_NONE_BITS` in the Rust front end, one of its
//! own in the shim): every free takes the slow path, with no test of its own on the hot path.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// log2 of the bytes of address space one cell covers (see the module docs).
pub const CELL_SHIFT: u32 = 8;
/// log2 of the number of cells (bytes of the map).
pub const CELL_BITS: u32 = 19;
const MASK: usize = (1 << CELL_BITS) - 1;

/// Live samples per cell (saturating at [`SATURATED`]), top bit [`LOCKED`]: the byte map.
static COUNTS: [AtomicU8; 1 << CELL_BITS] = {
    let mut c = [const { AtomicU8::new(0) }; 1 << CELL_BITS];
    c[0] = AtomicU8::new(SATURATED); // null's cell is never cleared
    c
};
/// The count's lock bit.
const LOCKED: u8 = 0x80;
/// A count that no longer changes.
const SATURATED: u8 = 0x7f;

/// A bit per cell, set while its count is non-zero: the bitmap.
static BITS: [AtomicU64; 1 << (CELL_BITS - 6)] = {
    let mut b = [const { AtomicU64::new(0) }; 1 << (CELL_BITS - 6)];
    b[0] = AtomicU64::new(1); // null's cell
    b
};

/// A bitmap with every bit set: a thread whose frees read it sends every free to the slow path
/// (read-only memory).
pub(crate) static REJECT_NONE_BITS: [u64; 1 << (CELL_BITS - 6)] = [u64::MAX; 1 << (CELL_BITS - 6)];

/// The byte map, as a `ThreadState::filter` value.
pub fn byte_map() -> *const u8 {
    COUNTS.as_ptr().cast()
}

/// The bitmap, as a `ThreadState::filter` value.
pub(crate) const fn bitmap() -> *const u8 {
    BITS.as_ptr().cast()
}

/// `REJECT_NONE_BITS` as a `ThreadState::filter` value.
pub(crate) const fn reject_none_bits() -> *const u8 {
    REJECT_NONE_BITS.as_ptr().cast()
}

/// The filter cell of `ptr`.
#[inline(always)]
pub(crate) fn cell(ptr: usize) -> usize {
    (ptr >> CELL_SHIFT) & MASK
}

/// Whether `ptr` may be a sampled block.
#[inline(always)]
pub(crate) fn may_contain(ptr: usize) -> bool {
    may_contain_in_bytes(byte_map(), ptr)
}

/// Whether `ptr` may be a sampled block, according to the byte map at `map` (`COUNTS` or a
/// byte map of all ones, as a thread's `filter` names).
#[inline(always)]
pub fn may_contain_in_bytes(map: *const u8, ptr: usize) -> bool {
    // SAFETY: `map` is COUNTS or a map of all ones, both 2^CELL_BITS bytes, and the cell is
    // masked to CELL_BITS bits. A map of all ones is read-only memory, which atomic loads may
    // read.
    unsafe { &*map.cast::<AtomicU8>().add(cell(ptr)) }.load(Ordering::Acquire) != 0
}

/// Whether `ptr` may be a sampled block, according to the bitmap at `map` (`BITS` or
/// `REJECT_NONE_BITS`, as a thread's `filter` names).
#[inline(always)]
pub(crate) fn may_contain_in_bits(map: *const u8, ptr: usize) -> bool {
    let i = cell(ptr);
    // SAFETY: `map` is BITS or REJECT_NONE_BITS, both 2^(CELL_BITS-6) words, and `i >> 6` is
    // below that. REJECT_NONE_BITS is read-only memory, which atomic loads may read.
    let word = unsafe { &*map.cast::<AtomicU64>().add(i >> 6) }.load(Ordering::Acquire);
    word & (1 << (i & 63)) != 0
}

/// Takes cell `i`'s lock bit and returns its count.
fn lock_cell(i: usize) -> u8 {
    let c = &COUNTS[i];
    loop {
        let v = c.load(Ordering::Relaxed);
        if v & LOCKED == 0
            && c.compare_exchange_weak(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return v;
        }
        std::hint::spin_loop();
    }
}

/// Marks `ptr` as (possibly) sampled. Called with `ptr`'s live-table shard lock held (which
/// keeps `fork` from copying a cell lock mid-update: the prepare handler takes every shard).
pub(crate) fn insert(ptr: usize) {
    let i = cell(ptr);
    let v = lock_cell(i);
    if v == 0 {
        BITS[i >> 6].fetch_or(1 << (i & 63), Ordering::Release);
    }
    COUNTS[i].store((v + 1).min(SATURATED), Ordering::Release);
}

/// Undoes one [`insert`] of `ptr`. Called with `ptr`'s live-table shard lock held.
pub(crate) fn remove(ptr: usize) {
    let i = cell(ptr);
    let v = lock_cell(i);
    let after = match v {
        0 | SATURATED => v,
        1 => {
            BITS[i >> 6].fetch_and(!(1 << (i & 63)), Ordering::Release);
            0
        }
        v => v - 1,
    };
    COUNTS[i].store(after, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The filter's callers serialise the updates of one pointer (they hold its live-table
    // shard lock); these tests stand in for the shards with locks of their own.
    static SHARDS: [std::sync::Mutex<()>; 16] = [const { std::sync::Mutex::new(()) }; 16];
    fn shard_of(p: usize) -> &'static std::sync::Mutex<()> {
        &SHARDS[((p >> 20) ^ (p >> 27)) % SHARDS.len()]
    }
    fn ins(p: usize) {
        let _g = shard_of(p).lock().unwrap_or_else(|e| e.into_inner());
        insert(p);
    }
    fn rem(p: usize) {
        let _g = shard_of(p).lock().unwrap_or_else(|e| e.into_inner());
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
            assert!(may_contain_in_bits(reject_none_bits(), p));
        }
    }

    #[test]
    fn aliased_cells_in_different_shards_never_lose_a_mark() {
        // Two pointers 128 MiB apart share a cell but not a shard (the live table's test
        // `pointers_sharing_a_filter_cell_are_in_different_shards`): their updates race on the
        // cell, which its own lock serialises. Each thread's own sample must stay visible in
        // both maps for as long as it is live.
        let a = 0x7f40_0000_0300usize;
        let b = a + (1 << (CELL_BITS + CELL_SHIFT));
        assert_eq!(cell(a), cell(b));
        assert!(!std::ptr::eq(shard_of(a), shard_of(b)));
        let run = |p: usize| {
            move || {
                for _ in 0..200_000 {
                    ins(p);
                    assert!(may_contain_in_bits(bitmap(), p), "bit lost while live");
                    assert!(may_contain_in_bytes(byte_map(), p), "count lost while live");
                    rem(p);
                }
            }
        };
        let t = std::thread::spawn(run(a));
        run(b)();
        t.join().unwrap();
        assert!(!may_contain_in_bits(bitmap(), a) && !may_contain_in_bytes(byte_map(), a));
    }

    #[test]
    fn bits_follow_counts() {
        let a = 0x7f22_0000_0100usize;
        let twin = a + (1 << (CELL_BITS + CELL_SHIFT)); // same cell
        assert!(!may_contain_in_bits(bitmap(), a) && !may_contain_in_bytes(byte_map(), a));
        ins(a);
        ins(twin);
        rem(a);
        assert!(may_contain_in_bits(bitmap(), a) && may_contain_in_bytes(byte_map(), a));
        rem(twin);
        assert!(!may_contain_in_bits(bitmap(), a) && !may_contain_in_bytes(byte_map(), a));
        assert!(may_contain_in_bits(bitmap(), 0), "null's bit stays set");
    }
}
