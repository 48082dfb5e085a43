//! A stripe's index from a stack's 64-bit index hash to the first entry of its chain.
//!
//! Every sample looks its stack up here. The key is a hash already (the first half of
//! `key_hash`), so its top bits are its home slot as they stand: a general map hashed the key
//! again and went through its group probing, 22 instructions a sample more than this table,
//! [`super::open`]'s (BENCHMARKS.md, "Instructions per sample"). Entries are never removed (a
//! stripe's stacks live as long as the table).
//!
//! Key 0 marks an empty slot, so a hash of 0 is stored as 1 ([`key`]). Two hashes sharing a key
//! share a chain, which the table's chain walk already handles (it compares each entry's check
//! half). A slot is 12 bytes (the key and the id in two arrays), filled to at most three
//! quarters; a general map took 16 bytes and a control byte a slot, up to seven eighths full.

use super::open::{Key, OpenTable, Value};

/// A stored index hash: never 0 (see [`key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexKey(u64);

/// The stored key of `hash`.
#[inline(always)]
pub(crate) fn key(hash: u64) -> IndexKey {
    IndexKey(hash.max(1))
}

impl Key for IndexKey {
    const EMPTY: Self = IndexKey(0);

    #[inline(always)]
    fn home(self, shift: u32) -> usize {
        (self.0 >> shift) as usize
    }
}

impl Value for u32 {
    const EMPTY: Self = 0;
}

/// Index hash to entry id, for one stripe.
pub(crate) type StackIndex = OpenTable<IndexKey, u32>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampler::next_u64;
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
                let r = next_u64(&mut s);
                // Packed: eight clusters of 500 keys, each cluster's keys alike in their top
                // bits (one home slot), the last cluster's at the end of the table.
                let hash = if packed {
                    ((r % 8) << 61) | ((r >> 3) % 500)
                } else {
                    r.rotate_left(step % 64)
                };
                if hash == 0 {
                    continue; // shares its key with 1 (the other test)
                }
                assert_eq!(
                    m.get(key(hash)),
                    want.get(&hash).copied(),
                    "step {step}: get {hash:#x}"
                );
                assert_eq!(m.insert(key(hash), step), want.insert(hash, step));
                assert_eq!(m.len(), want.len());
            }
            for (&h, &id) in &want {
                assert_eq!(m.get(key(h)), Some(id));
            }
            let (capacity, bytes) = m.capacity_and_bytes();
            assert!(capacity >= 16 && m.len() * 4 <= capacity * 3);
            assert_eq!(bytes, capacity * 12);
        }
    }

    #[test]
    fn hashes_zero_and_one_share_a_key_and_an_empty_index_finds_nothing() {
        let mut m = StackIndex::new();
        assert_eq!((m.get(key(0)), m.get(key(1)), m.capacity_and_bytes()), (None, None, (0, 0)));
        m.insert(key(0), 7);
        assert_eq!((m.get(key(0)), m.get(key(1))), (Some(7), Some(7)));
        m.insert(key(1), 9);
        assert_eq!((m.get(key(0)), m.len()), (Some(9), 1));
    }
}
