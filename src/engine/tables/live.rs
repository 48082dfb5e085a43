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
//! blocks took 25 MiB more, BENCHMARKS.md "A million stacks"; why no fuller, see `open`).
//!
//! The table is [`super::open`]'s; this module says how an address finds its home slot: the
//! top bits of the address (without the 16-byte alignment bits) times a constant of the golden
//! ratio (Fibonacci hashing).

use super::Record;
use super::open::{Key, OpenTable, Value};

/// Block address to record, for one shard.
pub(crate) type LiveMap = OpenTable<usize, Record>;

/// No block is at address 0.
impl Key for usize {
    const EMPTY: Self = 0;

    #[inline(always)]
    fn home(self, shift: u32) -> usize {
        ((self as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
    }
}

impl Value for Record {
    const EMPTY: Self = Record::EMPTY;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sampler::{Weight, next_u64};
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
                let r = next_u64(&mut s);
                let ptr = 0x7f00_0000_0000 + (r as usize % 4096) * spread;
                if r >> 62 == 0 {
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
            let (capacity, _) = m.capacity_and_bytes();
            assert!(capacity >= 16 && m.len() * 4 <= capacity * 3);
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
        assert_eq!((m.len(), m.capacity_and_bytes(), m.remove(0x1000)), (0, (0, 0), None));
    }
}
