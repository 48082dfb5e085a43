//! One shard of the live table: the records of sampled blocks by address.
//!
//! # Why not a general hash map
//!
//! Every sample inserts here and every free of a sampled block removes here, under the shard's
//! lock, so the map's own instructions are paid twice a sample. A general map (`hashbrown`, as
//! this was until #30's cheaper sample) hashes its key through a `Hasher` and probes in groups
//! of control bytes, about 100 instructions for the pair. The keys here are block addresses,
//! never 0, already spread in their middle bits, and the values are small copies: an open
//! table with linear probing over an array of addresses, the records beside it in a second
//! array, takes one multiplication to place a key and a compare a probe: a sample with its
//! free costs 60 instructions fewer (BENCHMARKS.md, "Instructions per sample"). It takes
//! somewhat more memory than the map: 48 bytes a slot, filled to between three eighths and
//! three quarters (the map's 49 to between seven sixteenths and seven eighths; a million live
//! blocks took 25 MiB more, BENCHMARKS.md "A million stacks"). Filling it further would lengthen
//! the probes for an empty slot, which every insert makes (about 30 at seven eighths).
//!
//! # Design
//!
//! * Capacity a power of two, at most three quarters full (it doubles before), so a probe
//!   sequence is short and always ends at an empty slot.
//! * A key's home slot is the top bits of its address (without the 16-byte alignment bits)
//!   times a constant of the golden ratio (Fibonacci hashing).
//! * A removal leaves no tombstone: the entries after it that may move back to their home do
//!   (backward shift), so lookups never walk over deleted slots and the table does not fill
//!   with them under churn.
//! * Both arrays live in the profiler's heap ([`super::arena`]): growing one under the shard's
//!   lock is allowed (the heap's lock comes after the shards'). A failed mapping aborts, as the
//!   tables' other collections do.

use super::Record;
use super::arena::{Arena, ArenaVec};

/// The smallest capacity once the first record arrives.
const MIN_CAPACITY: usize = 16;

/// An empty slot's key (no block is at address 0).
const EMPTY: usize = 0;

/// Block address to record, for one shard.
#[derive(Debug)]
pub(crate) struct LiveMap {
    /// The addresses, [`EMPTY`] where no record is.
    keys: ArenaVec<usize>,
    /// The record of the address in the same slot (stale where the slot is empty).
    recs: ArenaVec<Record>,
    len: usize,
    /// 64 minus log2 of the capacity: the shift that takes a hash to a slot.
    shift: u32,
}

impl LiveMap {
    pub(crate) const fn new() -> Self {
        Self { keys: ArenaVec::new_in(Arena), recs: ArenaVec::new_in(Arena), len: 0, shift: 64 }
    }

    /// Number of records.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The home slot of `ptr`.
    #[inline(always)]
    fn home(&self, ptr: usize) -> usize {
        ((ptr as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot of `ptr`: `Ok` where it is, or `Err` with the empty slot where it would go.
    /// The table must have room (a capacity, and an empty slot).
    #[inline(always)]
    fn find(&self, ptr: usize) -> Result<usize, usize> {
        let mask = self.keys.len() - 1;
        let mut i = self.home(ptr);
        loop {
            match self.keys.get(i) {
                Some(&k) if k == ptr => return Ok(i),
                Some(&EMPTY) | None => return Err(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// Adds the record of `ptr`; returns the record it replaces, if the address had one.
    #[inline]
    pub(crate) fn insert(&mut self, ptr: usize, rec: Record) -> Option<Record> {
        debug_assert_ne!(ptr, EMPTY);
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            self.grow();
        }
        match self.find(ptr) {
            Ok(i) => Some(std::mem::replace(&mut self.recs[i], rec)),
            Err(i) => {
                self.keys[i] = ptr;
                self.recs[i] = rec;
                self.len += 1;
                None
            }
        }
    }

    /// Removes and returns the record of `ptr`, if it has one.
    #[inline]
    pub(crate) fn remove(&mut self, ptr: usize) -> Option<Record> {
        if self.len == 0 || ptr == EMPTY {
            return None;
        }
        let i = self.find(ptr).ok()?;
        let rec = self.recs[i];
        // Backward shift: each entry after the hole that may sit in it (the hole lies between
        // its home and its slot) moves back, until an empty slot ends the run.
        let mask = self.keys.len() - 1;
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while let Some(&k) = self.keys.get(j).filter(|&&k| k != EMPTY) {
            if j.wrapping_sub(self.home(k)) & mask >= j.wrapping_sub(hole) & mask {
                self.keys[hole] = k;
                self.recs[hole] = self.recs[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.keys[hole] = EMPTY;
        self.len -= 1;
        Some(rec)
    }

    /// Twice the capacity (or the first), every record placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.keys.len() * 2).max(MIN_CAPACITY);
        let mut keys = ArenaVec::with_capacity_in(capacity, Arena);
        keys.resize(capacity, EMPTY);
        let mut recs = ArenaVec::with_capacity_in(capacity, Arena);
        recs.resize(capacity, Record::EMPTY);
        let old_keys = std::mem::replace(&mut self.keys, keys);
        let old_recs = std::mem::replace(&mut self.recs, recs);
        self.shift = 64 - capacity.trailing_zeros();
        for (&k, r) in old_keys.iter().zip(old_recs.iter()) {
            if k != EMPTY {
                if let Err(i) = self.find(k) {
                    self.keys[i] = k;
                    self.recs[i] = *r;
                }
            }
        }
    }

    /// Every address with its record, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Record)> {
        self.keys.iter().zip(self.recs.iter()).filter(|e| *e.0 != EMPTY).map(|(&k, r)| (k, r))
    }

    /// Every record, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Record> {
        self.iter().map(|(_, r)| r)
    }

    /// Drops every record and gives the arrays back.
    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampler::Weight;
    use std::collections::HashMap;

    fn rec(n: u64) -> Record {
        Record {
            stack: n as u32,
            size: n,
            weight: Weight { count: 1.0, bytes: n as f64 },
            born_ns: n,
        }
    }

    /// Random inserts, replacements and removals against `std`'s map, with addresses packed
    /// into few home slots (runs that wrap around the end, long shifts) and spread wide.
    #[test]
    fn agrees_with_a_hash_map_through_churn() {
        for (spread, seed) in [(16usize, 1u64), (1 << 20, 2), (16 << 20, 3)] {
            let mut m = LiveMap::new();
            let mut want: HashMap<usize, Record> = HashMap::new();
            let mut s = seed;
            for step in 0..200_000u64 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let ptr = 0x7f00_0000_0000 + (s as usize % 4096) * spread;
                if s >> 62 == 0 {
                    assert_eq!(m.remove(ptr), want.remove(&ptr), "step {step}: remove {ptr:#x}");
                } else {
                    assert_eq!(
                        m.insert(ptr, rec(step)),
                        want.insert(ptr, rec(step)),
                        "step {step}"
                    );
                }
                assert_eq!(m.len(), want.len());
            }
            let mut got: Vec<(usize, Record)> = m.iter().map(|(k, r)| (k, *r)).collect();
            let mut all: Vec<(usize, Record)> = want.into_iter().collect();
            got.sort_by_key(|e| e.0);
            all.sort_by_key(|e| e.0);
            assert_eq!(got, all);
            assert!(m.keys.len() >= MIN_CAPACITY && m.len * 4 <= m.keys.len() * 3);
            for (k, _) in all {
                assert!(m.remove(k).is_some());
            }
            assert_eq!((m.len(), m.iter().count()), (0, 0));
        }
    }

    #[test]
    fn an_empty_map_finds_nothing_and_clear_gives_its_arrays_back() {
        let mut m = LiveMap::new();
        assert_eq!(m.remove(0x1000), None);
        assert_eq!(m.remove(0), None);
        assert_eq!(m.insert(0x1000, rec(1)), None);
        assert_eq!(m.insert(0x1000, rec(2)), Some(rec(1)));
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![rec(2)]);
        m.clear();
        assert_eq!((m.len(), m.keys.capacity(), m.remove(0x1000)), (0, 0, None));
    }
}
