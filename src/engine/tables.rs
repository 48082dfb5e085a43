//! The profiler's two tables: interned stacks with their running estimates, and the live
//! sampled allocations (address -> record) that let a `free` find its stack.
//!
//! Both are touched only on sampled paths (and on frees the filter could not reject), always with
//! the thread's re-entrancy guard held. Everything they store lives in the profiler's own heap
//! ([`arena`]), never on the host's: a sample may be taken in a signal handler that interrupted
//! the host's allocator with its lock held. Their locks are [`SpinMutex`]es: the host's
//! allocator is never called while one is held (a snapshot copies out into storage reserved
//! before it takes each lock) and the `fork` handlers can take and release them all. Lock order:
//! symbols, then stack stripes, then live shards, each in index order, then the heap's lock.
//!
//! Both are split so that threads that sample at the same time mostly take different locks and
//! write different cache lines: the stack table into [`STACK_STRIPES`] stripes, one per thread
//! (by the thread's ordinal), the live table into shards by address region (see [`shard`]). A
//! stack sampled by several threads has an entry in each of their stripes; a report merges
//! them. A stack id names its stripe (top bits) and its entry there, so a free on any thread
//! updates the entry its sample was counted in.

pub(crate) mod arena;

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::histogram::MillisHistogram;
use crate::engine::peak::Retained;
use crate::engine::sampler::Weight;
use crate::spans::{SPAN_DEPTH, SpanPath};
use crate::sys::spin::SpinMutex;
use arena::{Arena, ArenaVec};

/// A fast, deterministic hasher for addresses and instruction-pointer arrays (no random keys:
/// `RandomState` would touch std's thread-locals inside allocation hooks).
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        z ^ (z >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

pub(crate) type Build = BuildHasherDefault<AddrHasher>;
/// A map in the profiler's heap.
pub(crate) type ArenaMap<K, V> = hashbrown::HashMap<K, V, Build, Arena>;

/// Running estimates of one stack. In a snapshot its frames are a box of their own; in the
/// table, `F` is [`Frames`], their place in the stripe's frame array.
#[derive(Debug, Clone)]
pub(crate) struct StackEntry<F = Box<[usize]>> {
    /// Raw instruction pointers, innermost first.
    pub(crate) ips: F,
    /// Entered `tracing` spans when sampled (feature `profile_spans`), innermost first.
    pub(crate) spans: SpanPath,
    pub(crate) alloc_count: f64,
    pub(crate) alloc_bytes: f64,
    /// The variance estimates of `alloc_bytes` and `alloc_count` (`sampler::Weight::variance`
    /// summed over every sample); the freed figures' are the allocated less the retained.
    pub(crate) alloc_var: [f64; 2],
    /// Retained bytes and count, with their variance estimates.
    pub(crate) live: Retained,
    pub(crate) freed_count: f64,
    pub(crate) freed_bytes: f64,
    /// Raw number of samples taken at this stack, and of those still live.
    pub(crate) samples: u64,
    pub(crate) live_samples: u64,
    pub(crate) lifetimes: MillisHistogram,
    /// The retained figures at the kept peak (see `peak`).
    pub(crate) peak: crate::engine::peak::PeakSlot,
    /// The next entry whose key has the same hash (0: none; id 0 is never chained).
    next_same_hash: u32,
}

/// Where a table entry's frames are in its stripe's frame array.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Frames {
    start: usize,
    len: usize,
}

impl<F> StackEntry<F> {
    pub(crate) fn new(ips: F, spans: SpanPath) -> Self {
        Self {
            ips,
            spans,
            next_same_hash: 0,
            alloc_count: 0.0,
            alloc_bytes: 0.0,
            alloc_var: [0.0; 2],
            live: Retained::default(),
            freed_count: 0.0,
            freed_bytes: 0.0,
            samples: 0,
            live_samples: 0,
            lifetimes: MillisHistogram::new(),
            peak: crate::engine::peak::PeakSlot::default(),
        }
    }
}

/// Interned (stack, span path) pairs. Id 0 is the overflow bucket used once `max_stacks`
/// distinct pairs exist.
///
/// The index maps a key's hash to the first entry with that hash; entries with equal hashes are
/// chained through `next_same_hash`. A lookup therefore hashes the borrowed frames and compares
/// them with the entries' own copies: no key is built (a sample costs no allocation unless its
/// stack is new) and every stack's frames are stored once, one stack after the other in one
/// array (no allocation and no block header per stack).
#[derive(Debug)]
pub(crate) struct StackTable {
    index: ArenaMap<u64, u32>,
    entries: ArenaVec<StackEntry<Frames>>,
    frames: ArenaVec<usize>,
    /// The stripe's share of the estimated retained total (see `peak`).
    pub(crate) tally: crate::engine::peak::StripeTally,
}

/// Stack entries kept (all stripes together) before new stacks go to the overflow entries.
pub(crate) static MAX_STACKS: AtomicU64 = AtomicU64::new(100_000);
/// Stack entries in all stripes (each stripe's overflow entry not counted).
static STACK_ENTRIES: AtomicU64 = AtomicU64::new(0);

fn key_hash(ips: &[usize], spans: &SpanPath) -> u64 {
    let mut h = Build::default().build_hasher();
    ips.hash(&mut h);
    spans.hash(&mut h);
    h.finish()
}

impl StackTable {
    const fn new() -> Self {
        Self {
            index: ArenaMap::with_hasher_in(BuildHasherDefault::new(), Arena),
            entries: ArenaVec::new_in(Arena),
            frames: ArenaVec::new_in(Arena),
            tally: crate::engine::peak::StripeTally::new(),
        }
    }

    /// The frames of `e`, an entry of this table.
    fn frames_of(&self, e: &StackEntry<Frames>) -> &[usize] {
        self.frames.get(e.ips.start..e.ips.start + e.ips.len).unwrap_or(&[])
    }

    fn intern(&mut self, ips: &[usize], spans: SpanPath) -> u32 {
        if self.entries.is_empty() {
            self.entries.push(StackEntry::new(Frames { start: 0, len: 0 }, [0; SPAN_DEPTH]));
        }
        let hash = key_hash(ips, &spans);
        let first = self.index.get(&hash).copied().unwrap_or(0);
        let mut id = first;
        while id != 0 {
            let Some(e) = self.entries.get(id as usize) else { break };
            if self.frames_of(e) == ips && e.spans == spans {
                return id;
            }
            id = e.next_same_hash;
        }
        if STACK_ENTRIES.load(Ordering::Relaxed) >= MAX_STACKS.load(Ordering::Relaxed) {
            // Counted, then folded into the overflow entry: its stack is lost, its bytes are not.
            DROPPED_SAMPLES.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        STACK_ENTRIES.fetch_add(1, Ordering::Relaxed);
        let id = self.entries.len() as u32;
        let mut entry = StackEntry::new(Frames { start: self.frames.len(), len: ips.len() }, spans);
        self.frames.extend_from_slice(ips);
        entry.next_same_hash = first;
        self.entries.push(entry);
        self.index.insert(hash, id);
        id
    }

    /// Records a new sample of weight `w` at `ips` under `spans`; returns the stack id.
    pub(crate) fn add_sample(&mut self, ips: &[usize], spans: SpanPath, w: Weight) -> u32 {
        let id = self.intern(ips, spans);
        if let Some(e) = self.entries.get_mut(id as usize) {
            e.peak.before_change(e.live);
            let before = e.live;
            let var = w.variance();
            e.alloc_count += w.count;
            e.alloc_bytes += w.bytes;
            e.alloc_var[0] += var.0;
            e.alloc_var[1] += var.1;
            e.live.count += w.count;
            e.live.bytes += w.bytes;
            e.live.var[0] += var.0;
            e.live.var[1] += var.1;
            e.samples += 1;
            e.live_samples += 1;
            self.tally.change(w.bytes, w.bytes);
            if self.tally.take_capture() {
                let size = if w.count > 0.0 { w.bytes / w.count } else { 0.0 };
                e.peak.capture_before(before, size);
            }
        }
        id
    }

    /// Records the free of a sample after `lifetime_ms`.
    pub(crate) fn free_sample(&mut self, id: u32, w: Weight, lifetime_ms: f64) {
        if let Some(e) = self.entries.get_mut(id as usize) {
            e.peak.before_change(e.live);
            let var = w.variance();
            e.live.count -= w.count;
            e.live.bytes -= w.bytes;
            e.live.var[0] -= var.0;
            e.live.var[1] -= var.1;
            e.freed_count += w.count;
            e.freed_bytes += w.bytes;
            e.live_samples = e.live_samples.saturating_sub(1);
            e.lifetimes.add_weighted(lifetime_ms, w.count);
            self.tally.change(-w.bytes, 0.0);
            if self.tally.take_capture() {
                e.peak.capture_before(e.live, 0.0);
            }
        }
    }

    /// A sampled block was resized in place or moved: it keeps its stack. Its weight changes
    /// from `old` to `new`, or it is no longer sampled (`None`: a shrink forgot it, see
    /// `sampler`); `freed_bytes` is the weighted estimate of the bytes a shrink gave back.
    /// Allocated figures stay retained plus freed. The variances move with the block's terms:
    /// a growth replaces the old term by the new one (the grown block is sampled with the
    /// probability of its new size), a shrink keeps the old term in the allocated figure's
    /// variance (its freed bytes are counted at the old weight).
    pub(crate) fn resize_sample(
        &mut self,
        id: u32,
        old: Weight,
        new: Option<Weight>,
        freed_bytes: f64,
    ) {
        if let Some(e) = self.entries.get_mut(id as usize) {
            let w = new.unwrap_or(Weight { count: 0.0, bytes: 0.0 });
            e.peak.before_change(e.live);
            let before = e.live;
            let (old_var, new_var) = (old.variance(), w.variance());
            let dvar = [new_var.0 - old_var.0, new_var.1 - old_var.1];
            e.live.count += w.count - old.count;
            e.live.bytes += w.bytes - old.bytes;
            e.live.var[0] += dvar[0];
            e.live.var[1] += dvar[1];
            e.freed_bytes += freed_bytes;
            e.alloc_count += w.count - old.count;
            e.alloc_bytes += w.bytes - old.bytes + freed_bytes;
            if freed_bytes > 0.0 {
                // A shrink: the allocated figure keeps the block's estimate at its old size
                // (what it had freed counted at the old weight) and adds the new one if kept;
                // keeping the old term and adding the new one overstates its variance by their
                // covariance at most (a few per cent for blocks far below the interval).
                e.alloc_var[0] += new_var.0;
                e.alloc_var[1] += new_var.1;
            } else {
                e.alloc_var[0] += dvar[0];
                e.alloc_var[1] += dvar[1];
            }
            if new.is_none() {
                e.live_samples = e.live_samples.saturating_sub(1);
            }
            self.tally.change(w.bytes - old.bytes, w.bytes);
            if self.tally.take_capture() {
                let size = |w: Weight| if w.count > 0.0 { w.bytes / w.count } else { 0.0 };
                e.peak.capture_before(before, size(w) - size(old));
            }
        }
    }
}

impl StackTable {
    /// A sampled mapping was split (see `mapped`): one more live piece of weight `w`, its
    /// allocated figures kept as retained plus freed.
    fn split_sample(&mut self, id: u32, w: Weight) {
        if let Some(e) = self.entries.get_mut(id as usize) {
            let var = w.variance();
            e.live.count += w.count;
            e.live.bytes += w.bytes;
            e.live.var[0] += var.0;
            e.live.var[1] += var.1;
            e.alloc_count += w.count;
            e.alloc_bytes += w.bytes;
            e.alloc_var[0] += var.0;
            e.alloc_var[1] += var.1;
            e.live_samples += 1;
        }
    }
}

/// One live sampled allocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    pub(crate) stack: u32,
    /// The block's counted bytes (what its weight was computed from).
    pub(crate) size: u64,
    pub(crate) weight: Weight,
    pub(crate) born_ns: u64,
}

const SHARDS: usize = 256;

/// A lock on cache lines of its own. Two threads sampling at once touch different shards; when
/// shards shared lines, each lock and map header write pulled the line from the other core.
/// 128 bytes because some cores fetch lines in adjacent pairs.
#[repr(align(128))]
pub(crate) struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

type LiveShard = SpinMutex<ArenaMap<usize, Record>>;

pub(crate) use crate::engine::peak::STACK_STRIPES;
/// A stack id is its stripe in the top bits and its index in the stripe below.
const STRIPE_SHIFT: u32 = 28;
pub(crate) static STACKS: [Padded<SpinMutex<StackTable>>; STACK_STRIPES] =
    [const { Padded(SpinMutex::new(StackTable::new())) }; STACK_STRIPES];

/// Records a new sample of weight `w` at `ips` under `spans` in the stripe of the thread with
/// ordinal `ordinal`; returns the stack id.
pub(crate) fn add_sample(ordinal: u64, ips: &[usize], spans: SpanPath, w: Weight) -> u32 {
    let stripe = (ordinal % STACK_STRIPES as u64) as usize;
    stack_id(stripe, STACKS[stripe].lock().add_sample(ips, spans, w))
}

/// The id of entry `index` of stripe `stripe`.
fn stack_id(stripe: usize, index: u32) -> u32 {
    ((stripe as u32) << STRIPE_SHIFT) | index
}

/// The stripe and the index in it of stack id `id`.
fn split(id: u32) -> (&'static SpinMutex<StackTable>, u32) {
    let stripe = (id >> STRIPE_SHIFT) as usize % STACK_STRIPES;
    (&STACKS[stripe], id & ((1 << STRIPE_SHIFT) - 1))
}

/// Records the free of the sample counted at `id` after `lifetime_ms`.
pub(crate) fn free_sample(id: u32, w: Weight, lifetime_ms: f64) {
    let (stripe, index) = split(id);
    stripe.lock().free_sample(index, w, lifetime_ms);
}

/// A sampled block counted at `id` was resized: see [`StackTable::resize_sample`].
pub(crate) fn resize_sample(id: u32, old: Weight, new: Option<Weight>, freed_bytes: f64) {
    let (stripe, index) = split(id);
    stripe.lock().resize_sample(index, old, new, freed_bytes);
}

/// A sampled mapping counted at `id` was split: see [`StackTable::split_sample`].
pub(crate) fn split_sample(id: u32, w: Weight) {
    let (stripe, index) = split(id);
    stripe.lock().split_sample(index, w);
}

/// Calls `f(stripe, index, entry)` for every entry of the stack table, one stripe at a time
/// under its lock, without copying anything (reports build their stack table from it). `f`
/// must not take a profiler lock. Index 0 of a stripe is its overflow entry.
pub(crate) fn for_each_stack(mut f: impl FnMut(usize, u32, &StackEntry<Frames>, &[usize])) {
    for (stripe, t) in STACKS.iter().enumerate() {
        let t = t.lock();
        for (i, e) in t.entries.iter().enumerate() {
            f(stripe, i as u32, e, t.frames_of(e));
        }
    }
}

/// The stripe and the index in it of stack id `id` (as [`for_each_stack`] names entries).
pub(crate) fn stripe_and_index(id: u32) -> (usize, u32) {
    ((id >> STRIPE_SHIFT) as usize % STACK_STRIPES, id & ((1 << STRIPE_SHIFT) - 1))
}

/// Calls `f` with every live record, one shard at a time under its lock, without copying them.
/// `f` must not take a profiler lock.
pub(crate) fn for_each_live(mut f: impl FnMut(&Record)) {
    for s in LIVE.iter() {
        for r in s.lock().values() {
            f(r);
        }
    }
}

/// Appends `(address, record)` for every live record to `out`, one shard at a time under its
/// lock. `out` is in the profiler's own heap, so growing it under a shard's lock is allowed (the
/// heap's lock comes after the shards'); the caller reserves [`live_len`] first, so it rarely
/// grows. Report-time residency reads the pages of these blocks after the locks are released
/// (`report/model/resident.rs`).
pub(crate) fn copy_live(out: &mut ArenaVec<(usize, Record)>) {
    for s in LIVE.iter() {
        let g = s.lock();
        out.extend(g.iter().map(|(&p, r)| (p, *r)));
    }
}

/// Estimated allocated and retained bytes summed over every stack.
pub(crate) fn estimated_bytes() -> (f64, f64) {
    STACKS.iter().fold((0.0, 0.0), |(a, r), t| {
        t.lock().entries.iter().fold((a, r), |(a, r), e| (a + e.alloc_bytes, r + e.live.bytes))
    })
}

static LIVE: [Padded<LiveShard>; SHARDS] =
    [const { Padded(SpinMutex::new(ArenaMap::with_hasher_in(BuildHasherDefault::new(), Arena))) };
        SHARDS];

/// Samples whose address was already in the live table (a free we never saw).
pub(crate) static ADDRESS_CONFLICTS: AtomicU64 = AtomicU64::new(0);
/// Samples whose stack could not be kept (table full: attributed to the overflow entry).
pub(crate) static DROPPED_SAMPLES: AtomicU64 = AtomicU64::new(0);
/// Giant allocations refused.
pub(crate) static GIANT_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The live-table shard of `ptr`: one of 4 shards (by the MiB the address is in) of a group of
/// 4 chosen by the 64 MiB region the address is in (a hash of it, 64 groups). glibc gives each
/// thread an arena of its own, whose heaps are 64 MiB-aligned regions, so threads that sample
/// and free their own blocks mostly keep to shards no other thread touches: the shards' locks
/// and tables stay in their core's cache (3.6 % of the churn benchmark's time, against shards
/// chosen by the filter cell, 16 alternating pairs).
pub(crate) fn shard(ptr: usize) -> &'static LiveShard {
    let group = ((ptr >> 26) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
    &LIVE[(group as usize * 4 + ((ptr >> 20) & 3)) % SHARDS]
}

/// The `fork` child's flush of every stripe's peak tally (`peak::after_fork_child`).
pub(crate) fn flush_tallies_after_fork() {
    for t in STACKS.iter() {
        t.lock().tally.flush_after_fork();
    }
}

/// Inserts a live record for `ptr`.
pub(crate) fn insert_live(ptr: usize, rec: Record) {
    let old = {
        let mut live = shard(ptr).lock();
        crate::engine::filter::insert(ptr);
        let old = live.insert(ptr, rec);
        if old.is_some() {
            crate::engine::filter::remove(ptr);
        }
        old
    };
    if let Some(old) = old {
        // The block at this address was freed behind our back (a free we could not see):
        // retire its record so it does not count as retained forever.
        ADDRESS_CONFLICTS.fetch_add(1, Ordering::Relaxed);
        free_sample(old.stack, old.weight, 0.0);
    }
}

/// Removes and returns the live record of `ptr`, if it was sampled.
pub(crate) fn take_live(ptr: usize) -> Option<Record> {
    let mut live = shard(ptr).lock();
    let rec = live.remove(&ptr);
    if rec.is_some() {
        crate::engine::filter::remove(ptr);
    }
    rec
}

/// Number of live sampled allocations.
pub(crate) fn live_len() -> usize {
    LIVE.iter().map(|s| s.lock().len()).sum()
}

/// Drops every stack and live record (tests and `reset`). Live blocks become untracked.
pub(crate) fn clear() {
    let mut stripes: Vec<_> = STACKS.iter().map(|t| t.lock()).collect();
    for s in LIVE.iter() {
        let mut g = s.lock();
        for (&p, _) in g.iter() {
            crate::engine::filter::remove(p);
        }
        g.clear();
    }
    for st in stripes.iter_mut() {
        st.entries.clear();
        st.index.clear();
        st.frames.clear();
        st.tally = crate::engine::peak::StripeTally::new();
    }
    crate::engine::peak::clear();
    STACK_ENTRIES.store(0, Ordering::Relaxed);
}

/// `fork` prepare: take every lock so the child inherits consistent, unlocked tables (the
/// symbol cache's, the report side's, is taken first by the crate's fork handlers).
pub(crate) fn lock_all_for_fork() {
    for t in STACKS.iter() {
        t.lock_for_fork();
    }
    for s in LIVE.iter() {
        s.lock_for_fork();
    }
    crate::stack::unwind::lock_for_fork();
    // Last: table locks are held while the heap's is taken, never the other way round.
    arena::lock_for_fork();
}

/// `fork` parent and child: release what [`lock_all_for_fork`] took.
pub(crate) fn unlock_all_after_fork() {
    arena::unlock_after_fork();
    crate::stack::unwind::unlock_after_fork();
    for s in LIVE.iter().rev() {
        s.force_unlock();
    }
    for t in STACKS.iter().rev() {
        t.force_unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_sharing_a_filter_cell_are_in_different_shards() {
        use crate::engine::filter::{CELL_BITS, CELL_SHIFT, cell};
        // Pointers one filter span apart share a filter cell; their live records must not
        // share a shard lock too, or the filter's per-cell lock would never see a race.
        for a in [0x7f40_0000_0300usize, 0x5555_5555_0000, 0x7fff_f000_0040] {
            let b = a + (1 << (CELL_BITS + CELL_SHIFT));
            assert_eq!(cell(a), cell(b));
            assert!(!std::ptr::eq(shard(a), shard(b)), "{a:#x} and {b:#x}");
        }
    }

    #[test]
    fn interned_ids_are_stable_distinct_and_survive_hash_collisions() {
        let mut t = StackTable::new();
        let a = t.intern(&[1, 2, 3], [0; SPAN_DEPTH]);
        let b = t.intern(&[1, 2, 3, 4], [0; SPAN_DEPTH]);
        let mut span = [0; SPAN_DEPTH];
        span[0] = 77;
        let c = t.intern(&[1, 2, 3], span);
        assert!(a != 0 && b != 0 && c != 0, "id 0 is the overflow bucket");
        assert!(a != b && a != c && b != c, "frames and spans both distinguish keys");
        assert_eq!(t.intern(&[1, 2, 3], [0; SPAN_DEPTH]), a);
        assert_eq!(t.intern(&[1, 2, 3, 4], [0; SPAN_DEPTH]), b);
        assert_eq!(t.intern(&[1, 2, 3], span), c);

        // Force a collision: the key [9, 9] hashes to the slot whose chain starts at `a`.
        let h = key_hash(&[9, 9], &[0; SPAN_DEPTH]);
        t.index.insert(h, a);
        let d = t.intern(&[9, 9], [0; SPAN_DEPTH]);
        assert!(d != a && d != 0, "a colliding key gets its own entry");
        assert_eq!(t.entries[d as usize].next_same_hash, a, "and is chained in front of it");
        assert_eq!(t.intern(&[9, 9], [0; SPAN_DEPTH]), d);
        // Make the chain d -> a the one for `a`'s own hash too, as a real collision would:
        // finding `a` now means walking past `d`.
        t.index.insert(key_hash(&[1, 2, 3], &[0; SPAN_DEPTH]), d);
        assert_eq!(t.intern(&[1, 2, 3], [0; SPAN_DEPTH]), a, "found behind a colliding entry");
        assert_eq!(t.frames_of(&t.entries[d as usize]), &[9, 9]);
        assert_eq!(t.entries.len(), 5, "overflow bucket + four distinct keys");
    }
}
