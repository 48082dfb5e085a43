//! The open table both hot tables are made of: the live table's shards (`live`: block address
//! to record) and each stripe's stack index (`index`: stack hash to entry id).
//!
//! Each is looked up on every sample, under a lock, with keys that are already well spread (an
//! address, a hash) and small values. A general map hashes the key again and probes in groups
//! of control bytes; this table places a key with its own `home` and compares a key a probe
//! (BENCHMARKS.md, "Instructions per sample").
//!
//! * Capacity a power of two, at most three quarters full (it doubles before), so a probe
//!   sequence is short and always ends at an empty slot. Filling it further would lengthen the
//!   probes for an empty slot, which every insert makes (about 30 at seven eighths).
//! * Keys and values in two arrays; a key equal to [`Key::EMPTY`] marks an empty slot, whose
//!   value is stale.
//! * A removal leaves no tombstone: the entries after it that may move back to their home do
//!   (backward shift), so lookups never walk over deleted slots and the table does not fill
//!   with them under churn.
//! * Both arrays live in the profiler's heap ([`super::arena`]): growing one under the caller's
//!   lock is allowed (the heap's lock comes after the tables'). The sampled path makes room
//!   first ([`OpenTable::try_room`], or [`OpenTable::try_insert`]), so that at a memory limit a
//!   table that cannot grow loses a sample instead of aborting the program.

use super::arena::{Arena, ArenaVec};

/// The smallest capacity once the first key arrives.
const MIN_CAPACITY: usize = 16;

/// A key of an [`OpenTable`].
pub(crate) trait Key: Copy + Eq {
    /// The key of an empty slot, never stored as a real key.
    const EMPTY: Self;
    /// The key's home slot in a table of `2^(64 - shift)` slots (`shift` < 64).
    fn home(self, shift: u32) -> usize;
}

/// A value of an [`OpenTable`].
pub(crate) trait Value: Copy {
    /// What an empty slot holds.
    const EMPTY: Self;
}

/// Keys to values, open addressing with linear probing (see the module docs).
#[derive(Debug)]
pub(crate) struct OpenTable<K, V> {
    keys: ArenaVec<K>,
    vals: ArenaVec<V>,
    len: usize,
    /// 64 minus log2 of the capacity: what [`Key::home`] takes.
    shift: u32,
}

impl<K: Key, V: Value> OpenTable<K, V> {
    pub(crate) const fn new() -> Self {
        Self { keys: ArenaVec::new_in(Arena), vals: ArenaVec::new_in(Arena), len: 0, shift: 64 }
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot of `k`: `Ok` where it is, or `Err` with the empty slot where it would go. The
    /// table must have room (a capacity, and an empty slot).
    #[inline(always)]
    fn find(&self, k: K) -> Result<usize, usize> {
        let mask = self.keys.len() - 1;
        let mut i = k.home(self.shift);
        loop {
            match self.keys.get(i) {
                Some(&s) if s == k => return Ok(i),
                Some(&s) if s == K::EMPTY => return Err(i),
                None => return Err(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// The value of `k`.
    #[inline]
    pub(crate) fn get(&self, k: K) -> Option<V> {
        if self.len == 0 || k == K::EMPTY {
            return None;
        }
        let i = self.find(k).ok()?;
        self.vals.get(i).copied()
    }

    /// Makes room for `n` more keys: the next `n` inserts grow nothing. False, the table
    /// unchanged, when its arrays could not get the memory.
    #[inline]
    pub(crate) fn try_room(&mut self, n: usize) -> bool {
        let mut capacity = self.keys.len().max(MIN_CAPACITY / 2);
        while (self.len + n) * 4 > capacity * 3 {
            capacity *= 2;
        }
        capacity == self.keys.len() || self.try_grow(capacity)
    }

    /// Stores `v` for `k` (not [`Key::EMPTY`]); returns the value it replaces, if any. `Err`,
    /// the table unchanged, when it had to grow and could not get the memory.
    #[inline]
    pub(crate) fn try_insert(&mut self, k: K, v: V) -> Result<Option<V>, ()> {
        if !self.try_room(1) {
            return Err(());
        }
        Ok(self.insert(k, v))
    }

    /// Stores `v` for `k` (not [`Key::EMPTY`]); returns the value it replaces, if any. Grows
    /// when full, aborting if that fails: the sampled path makes room first.
    #[inline]
    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        debug_assert!(k != K::EMPTY);
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            self.grow();
        }
        match self.find(k) {
            Ok(i) => Some(std::mem::replace(&mut self.vals[i], v)),
            Err(i) => {
                self.keys[i] = k;
                self.vals[i] = v;
                self.len += 1;
                None
            }
        }
    }

    /// Removes `k` and returns its value, if it has one.
    #[inline]
    pub(crate) fn remove(&mut self, k: K) -> Option<V> {
        if self.len == 0 || k == K::EMPTY {
            return None;
        }
        let i = self.find(k).ok()?;
        let v = self.vals[i];
        // Backward shift: each entry after the hole that may sit in it (the hole lies between
        // its home and its slot) moves back, until an empty slot ends the run.
        let mask = self.keys.len() - 1;
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while let Some(&k) = self.keys.get(j).filter(|&&k| k != K::EMPTY) {
            if j.wrapping_sub(k.home(self.shift)) & mask >= j.wrapping_sub(hole) & mask {
                self.keys[hole] = k;
                self.vals[hole] = self.vals[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.keys[hole] = K::EMPTY;
        self.len -= 1;
        Some(v)
    }

    /// Twice the capacity (or the first), every key placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let capacity = (self.keys.len() * 2).max(MIN_CAPACITY);
        if !self.try_grow(capacity) {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<K>(capacity).unwrap_or(std::alloc::Layout::new::<K>()),
            );
        }
    }

    /// `capacity` slots (a power of two, above the present), every key placed again; false,
    /// the table unchanged, when the arrays could not be had.
    #[cold]
    #[inline(never)]
    fn try_grow(&mut self, capacity: usize) -> bool {
        let capacity = capacity.max(MIN_CAPACITY);
        let mut keys = ArenaVec::new_in(Arena);
        let mut vals = ArenaVec::new_in(Arena);
        if keys.try_reserve_exact(capacity).is_err() || vals.try_reserve_exact(capacity).is_err() {
            return false;
        }
        keys.resize(capacity, K::EMPTY);
        vals.resize(capacity, V::EMPTY);
        let old_keys = std::mem::replace(&mut self.keys, keys);
        let old_vals = std::mem::replace(&mut self.vals, vals);
        self.shift = 64 - capacity.trailing_zeros();
        for (&k, v) in old_keys.iter().zip(old_vals.iter()) {
            if k != K::EMPTY {
                if let Err(i) = self.find(k) {
                    self.keys[i] = k;
                    self.vals[i] = *v;
                }
            }
        }
        true
    }

    /// Every key with its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &V)> {
        self.keys.iter().zip(self.vals.iter()).filter(|e| *e.0 != K::EMPTY).map(|(&k, v)| (k, v))
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Drops every key and gives the arrays back.
    pub(crate) fn clear(&mut self) {
        *self = Self::new();
    }

    /// Slots and bytes the two arrays take (their capacity), for tests.
    #[cfg(test)]
    pub(crate) fn capacity_and_bytes(&self) -> (usize, usize) {
        (
            self.keys.len(),
            self.keys.capacity() * std::mem::size_of::<K>()
                + self.vals.capacity() * std::mem::size_of::<V>(),
        )
    }
}
