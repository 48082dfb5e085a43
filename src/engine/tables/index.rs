//! A stripe's index from a stack's 64-bit index hash to the first entry of its chain.
//!
//! Every sample looks its stack up here. The key is a hash already (the first half of
//! `key_hash`), so its top bits are its home slot as they stand: a general map hashed the key
//! again and went through its group probing, 18 instructions a sample more than this open table
//! (BENCHMARKS.md, "Instructions per sample"). Entries are never removed (a stripe's stacks live
//! as long as the table), so the table needs no deletion scheme.
//!
//! * Capacity a power of two, at most three quarters full (it doubles before), so a probe
//!   sequence is short and always ends at an empty slot.
//! * Key 0 marks an empty slot: a hash of 0 is stored as 1. Two hashes sharing a key share a
//!   chain, which the table's chain walk already handles (it compares each entry's check half).
//! * 12 bytes a slot (the key and the id in two arrays), in the profiler's heap
//!   ([`super::arena`]): growing under the stripe's lock is allowed (the heap's lock comes after
//!   the stripes'). A general map took 16 bytes and a control byte a slot, up to seven eighths
//!   full.

use super::arena::{Arena, ArenaVec};

/// The smallest capacity once the first key arrives.
const MIN_CAPACITY: usize = 16;

/// An empty slot's key.
const EMPTY: u64 = 0;

/// Index hash to entry id, for one stripe.
#[derive(Debug)]
pub(crate) struct StackIndex {
    /// The keys, [`EMPTY`] where no id is.
    keys: ArenaVec<u64>,
    /// The id of the key in the same slot.
    ids: ArenaVec<u32>,
    len: usize,
    /// 64 minus log2 of the capacity: the shift that takes a key to its home slot.
    shift: u32,
}

/// The stored key of `hash` (never [`EMPTY`]).
#[inline(always)]
fn key(hash: u64) -> u64 {
    hash.max(1)
}

impl StackIndex {
    pub(crate) const fn new() -> Self {
        Self { keys: ArenaVec::new_in(Arena), ids: ArenaVec::new_in(Arena), len: 0, shift: 64 }
    }

    /// The slot of key `k`: `Ok` where it is, or `Err` with the empty slot where it would go.
    /// The table must have a capacity.
    #[inline(always)]
    fn find(&self, k: u64) -> Result<usize, usize> {
        let mask = self.keys.len() - 1;
        let mut i = (k >> self.shift) as usize;
        loop {
            match self.keys.get(i) {
                Some(&s) if s == k => return Ok(i),
                Some(&EMPTY) | None => return Err(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// The id stored for `hash`.
    #[inline]
    pub(crate) fn get(&self, hash: u64) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let i = self.find(key(hash)).ok()?;
        self.ids.get(i).copied()
    }

    /// Stores `id` for `hash`, replacing the id it had.
    #[inline]
    pub(crate) fn insert(&mut self, hash: u64, id: u32) {
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            self.grow();
        }
        let k = key(hash);
        match self.find(k) {
            Ok(i) => self.ids[i] = id,
            Err(i) => {
                self.keys[i] = k;
                self.ids[i] = id;
                self.len += 1;
            }
        }
    }

    /// Twice the capacity (or the first), every key placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.keys.len() * 2).max(MIN_CAPACITY);
        let mut keys = ArenaVec::with_capacity_in(capacity, Arena);
        keys.resize(capacity, EMPTY);
        let mut ids = ArenaVec::with_capacity_in(capacity, Arena);
        ids.resize(capacity, 0);
        let old_keys = std::mem::replace(&mut self.keys, keys);
        let old_ids = std::mem::replace(&mut self.ids, ids);
        self.shift = 64 - capacity.trailing_zeros();
        for (&k, &id) in old_keys.iter().zip(old_ids.iter()) {
            if k != EMPTY {
                if let Err(i) = self.find(k) {
                    self.keys[i] = k;
                    self.ids[i] = id;
                }
            }
        }
    }

    /// Bytes the two arrays take (their capacity).
    #[cfg(test)]
    pub(crate) fn allocation_size(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<u64>()
            + self.ids.capacity() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random keys, some repeated (replacements), against `std`'s map: packed into few home
    /// slots (their top bits alike, runs that wrap around the end) and spread over all bits.
    #[test]
    fn agrees_with_a_hash_map() {
        for (packed, seed) in [(true, 1u64), (false, 2)] {
            let mut m = StackIndex::new();
            let mut want: HashMap<u64, u32> = HashMap::new();
            let mut s = seed;
            for step in 0..100_000u32 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                // Packed: eight clusters of 500 keys, each cluster's keys alike in their top
                // bits (one home slot), the last cluster's at the end of the table.
                let hash = if packed {
                    ((s % 8) << 61) | ((s >> 3) % 500)
                } else {
                    s.rotate_left(step % 64)
                };
                if hash == 0 {
                    continue; // shares its key with 1 (the other test)
                }
                assert_eq!(m.get(hash), want.get(&hash).copied(), "step {step}: get {hash:#x}");
                m.insert(hash, step);
                want.insert(hash, step);
                assert_eq!(m.len, want.len());
            }
            for (&h, &id) in &want {
                assert_eq!(m.get(h), Some(id));
            }
            assert!(m.keys.len() >= MIN_CAPACITY && m.len * 4 <= m.keys.len() * 3);
            assert!(m.allocation_size() >= m.keys.len() * 12);
        }
    }

    #[test]
    fn hashes_zero_and_one_share_a_key_and_an_empty_index_finds_nothing() {
        let mut m = StackIndex::new();
        assert_eq!((m.get(0), m.get(1), m.allocation_size()), (None, None, 0));
        m.insert(0, 7);
        assert_eq!((m.get(0), m.get(1)), (Some(7), Some(7)));
        m.insert(1, 9);
        assert_eq!((m.get(0), m.len), (Some(9), 1));
    }
}
