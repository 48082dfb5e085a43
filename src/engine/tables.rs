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
mod index;
mod live;
mod open;

use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::histogram::MillisHistogram;
use crate::engine::peak::Retained;
use crate::engine::sampler::Weight;
use crate::spans::SpanPath;
use crate::sys::leb128;
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

/// Running estimates of one stack, with where its frames, span path and lifetimes are kept in
/// its stripe (see [`StackTable`]): 168 bytes.
#[derive(Debug, Clone)]
pub(crate) struct StackEntry {
    /// Where its frames are in the stripe's frame codes.
    frames: Frames,
    /// Its span path in the stripe's span paths (0: none).
    spans: u32,
    /// Its lifetimes histogram in the stripe's histograms (0: nothing freed yet).
    lifetimes: u32,
    /// The next entry whose key has the same index hash (0: none; id 0 is never chained).
    next_same_hash: u32,
    /// The second half of the key's 128-bit hash (see [`StackTable`]).
    check: u64,
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
    /// The retained figures at the kept peak (see `peak`).
    pub(crate) peak: crate::engine::peak::PeakSlot,
}

/// Where an entry's frames are: `len` frames coded from byte `at` of the stripe's frame codes.
#[derive(Debug, Clone, Copy, Default)]
struct Frames {
    at: u32,
    len: u8,
}

impl StackEntry {
    /// Its number of frames.
    pub(crate) fn depth(&self) -> usize {
        usize::from(self.frames.len)
    }

    pub(crate) fn new() -> Self {
        Self {
            frames: Frames::default(),
            spans: 0,
            lifetimes: 0,
            next_same_hash: 0,
            check: 0,
            alloc_count: 0.0,
            alloc_bytes: 0.0,
            alloc_var: [0.0; 2],
            live: Retained::default(),
            freed_count: 0.0,
            freed_bytes: 0.0,
            samples: 0,
            live_samples: 0,
            peak: crate::engine::peak::PeakSlot::default(),
        }
    }
}

/// Items kept in arrays of `N` that never move: an array that doubles takes up to twice its
/// items in mapped memory (profiler memory, as reports count it), and a million stacks are
/// hundreds of megabytes. Only the first array grows, up to `N`, so that a table of a few
/// stacks stays small.
#[derive(Debug)]
struct Chunked<T, const N: usize> {
    chunks: ArenaVec<ArenaVec<T>>,
    len: usize,
}

impl<T, const N: usize> Chunked<T, N> {
    const fn new() -> Self {
        Self { chunks: ArenaVec::new_in(Arena), len: 0 }
    }

    /// Makes room for one more item: the next push allocates nothing. False, nothing
    /// changed that a push would see, when the memory could not be had.
    fn try_room(&mut self) -> bool {
        if self.len % N == 0 && self.len / N == self.chunks.len() {
            // A new array: the first grows as it fills, the others are made at their size.
            let mut c = ArenaVec::new_in(Arena);
            let want = if self.chunks.is_empty() { 1 } else { N };
            if self.chunks.try_reserve(1).is_err() || c.try_reserve_exact(want).is_err() {
                return false;
            }
            self.chunks.push(c);
            return true;
        }
        self.chunks.last_mut().is_some_and(|c| c.len() < c.capacity() || c.try_reserve(1).is_ok())
    }

    /// Appends `v`; returns its index.
    fn push(&mut self, v: T) -> usize {
        if self.len % N == 0 && self.len / N == self.chunks.len() {
            self.chunks.push(new_chunk(self.chunks.is_empty(), N));
        }
        if let Some(c) = self.chunks.last_mut() {
            c.push(v);
        }
        self.len += 1;
        self.len - 1
    }

    fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / N)?.get(i % N)
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks.get_mut(i / N)?.get_mut(i % N)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Bytes its arrays take (their capacity).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<ArenaVec<T>>()
            + self.chunks.iter().map(|c| c.capacity() * std::mem::size_of::<T>()).sum::<usize>()
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

/// Deepest stack kept (frames beyond it are cut off): the captures' size, and so the most
/// frames a stack of the table has.
pub const MAX_FRAMES: usize = 64;

/// The next array of `n` items of a chunked table (see [`Chunked`]): the first grows as it
/// fills, the others are allocated at their size.
fn new_chunk<T>(first: bool, n: usize) -> ArenaVec<T> {
    if first { ArenaVec::new_in(Arena) } else { ArenaVec::with_capacity_in(n, Arena) }
}

/// Entries per array of a stripe's entries (2.6 MiB). Each array past the first is a mapping
/// of its own (`arena`'s big blocks), and the profiler lists its mappings in 4,096 slots (see
/// `arena::OWN_SLOTS`): at `YING_MAX_STACKS`' highest, 10 million stacks, this is 611 arrays,
/// with 1,221 of histograms and about 880 of codes.
const ENTRY_CHUNK: usize = 16_384;
/// Bytes per array of a stripe's frame codes.
const CODE_CHUNK: usize = 1 << 20;
/// The longest code of one stack: 5 bytes a frame at most.
const MAX_CODE: usize = MAX_FRAMES * leb128::MAX_BYTES;
/// Lifetime histograms per array (a histogram is 88 bytes).
const HISTOGRAM_CHUNK: usize = 8192;

/// Interned (stack, span path) pairs with their running estimates: one stripe of the table.
/// Id 0 is the overflow bucket used once `max_stacks` distinct pairs exist.
///
/// # Layout: a million stacks in a few hundred megabytes
///
/// * **Identity by a 128-bit hash.** A key (frames and span path) is hashed once, in two
///   independent 64-bit lanes: the first indexes the entries (`index`, equal hashes chained
///   through `next_same_hash`), the second is kept in the entry (`check`) and compared on a
///   lookup instead of the frames. Two different keys are taken for one only when both lanes
///   collide: for a million stacks about 10^12 pairs against 2^128 values, below 10^-26. A
///   lookup reads 8 bytes of the entry, not its frames, and so the frames can be stored coded.
/// * **Frames coded.** Each distinct address of the stripe gets a small number (`ips`,
///   `ip_ids`), and a stack is its numbers in LEB128, one byte a frame while a stripe has
///   fewer than 128 distinct addresses, two below 16,384: a stack of 46 frames takes 46 to 92
///   bytes instead of 368. Coding takes a lookup per frame, only when a stack is new.
/// * **What few stacks use is apart.** The span path is a 4-byte number into the stripe's
///   distinct paths (32 bytes inline before), and the lifetimes histogram (88 bytes) is made
///   at the entry's first free: a stack whose blocks are all alive has none.
/// * **Arrays that do not move** ([`Chunked`]) for the entries, the codes and the
///   histograms, so what is mapped is what is used.
///
/// An entry takes 168 bytes; with its code and its share of the index, a stack of 46 frames
/// takes about 240 to 290 bytes (BENCHMARKS.md, "A million stacks").
#[derive(Debug)]
pub(crate) struct StackTable {
    index: index::StackIndex,
    entries: Chunked<StackEntry, ENTRY_CHUNK>,
    /// Frame codes, arrays of [`CODE_CHUNK`] bytes; a stack's code never spans two.
    codes: ArenaVec<ArenaVec<u8>>,
    /// Distinct addresses by number, and their numbers.
    ips: ArenaVec<usize>,
    ip_ids: ArenaMap<usize, u32>,
    /// Distinct span paths by number (0: the empty path), and their numbers.
    span_paths: ArenaVec<SpanPath>,
    span_ids: ArenaMap<SpanPath, u32>,
    /// Lifetime histograms of the entries with a freed sample; number 0 is unused.
    lifetimes: Chunked<MillisHistogram, HISTOGRAM_CHUNK>,
    /// The stripe's share of the estimated retained total (see `peak`).
    pub(crate) tally: crate::engine::peak::StripeTally,
}

/// Stack entries kept (all stripes together) before new stacks go to the overflow entries.
pub(crate) static MAX_STACKS: AtomicU64 = AtomicU64::new(400_000);
/// Stack entries in all stripes (each stripe's overflow entry not counted).
static STACK_ENTRIES: AtomicU64 = AtomicU64::new(0);

/// Stack entries in all stripes now (a report's memory grows with them).
pub(crate) fn stack_entries() -> u64 {
    STACK_ENTRIES.load(Ordering::Relaxed)
}

/// Two independent 64-bit hashes in one pass (see [`StackTable`]): [`AddrHasher`]'s lane and
/// a second with another multiplier and rotation, finished by the same avalanche.
/// [`Hasher::finish`] is the first; [`Hash128::finish128`] both.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hash128 {
    /// The first lane: [`AddrHasher`].
    a: AddrHasher,
    b: u64,
}

impl Default for Hash128 {
    fn default() -> Self {
        Self { a: AddrHasher::default(), b: 0x243f_6a88_85a3_08d3 }
    }
}

impl Hash128 {
    /// Both hashes.
    pub(crate) fn finish128(&self) -> (u64, u64) {
        (self.a.finish(), AddrHasher(self.b).finish())
    }
}

impl Hasher for Hash128 {
    fn finish(&self) -> u64 {
        self.a.finish()
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.a.write_u64(v);
        self.b = (self.b ^ v).wrapping_mul(0xd6e8_feb8_6659_fd93).rotate_left(29);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// The key's two 64-bit hashes (see [`StackTable`]). The span path is hashed only when there
/// is one (most programs enter no span): four words fewer to mix a sample. The frames' count
/// comes first, so a key with a path and one without never feed the same words.
fn key_hash(ips: &[usize], spans: &SpanPath) -> (u64, u64) {
    let mut h = Hash128::default();
    h.write_usize(ips.len());
    for &v in ips {
        h.write_usize(v);
    }
    if *spans != [0; crate::spans::SPAN_DEPTH] {
        for &v in spans {
            h.write_usize(v);
        }
    }
    h.finish128()
}

impl StackTable {
    const fn new() -> Self {
        Self {
            index: index::StackIndex::new(),
            entries: Chunked::new(),
            codes: ArenaVec::new_in(Arena),
            ips: ArenaVec::new_in(Arena),
            ip_ids: ArenaMap::with_hasher_in(BuildHasherDefault::new(), Arena),
            span_paths: ArenaVec::new_in(Arena),
            span_ids: ArenaMap::with_hasher_in(BuildHasherDefault::new(), Arena),
            lifetimes: Chunked::new(),
            tally: crate::engine::peak::StripeTally::new(),
        }
    }

    /// Decodes the frames of `e`, an entry of this table, into `out`; returns how many.
    #[cfg(test)]
    fn frames_of(&self, e: &StackEntry, out: &mut [usize; MAX_FRAMES]) -> usize {
        let mut ids = [0; MAX_FRAMES];
        let n = self.frame_ids_of(e, &mut ids);
        for (o, &id) in out.iter_mut().zip(&ids[..n]) {
            *o = self.ips.get(id as usize).copied().unwrap_or(0);
        }
        n
    }

    /// Decodes the frames of `e`, an entry of this table, into `out` as numbers into the
    /// stripe's distinct addresses; returns how many.
    fn frame_ids_of(&self, e: &StackEntry, out: &mut [u32; MAX_FRAMES]) -> usize {
        let at = e.frames.at as usize;
        let Some(code) = self.codes.get(at / CODE_CHUNK).and_then(|c| c.get(at % CODE_CHUNK..))
        else {
            return 0;
        };
        let mut n = 0;
        for (o, id) in out.iter_mut().zip(leb128::Numbers::new(code)).take(e.frames.len.into()) {
            *o = id;
            n += 1;
        }
        n
    }

    /// Bytes the table's collections take (their capacity).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.index.capacity_and_bytes().1
            + self.entries.heap_bytes()
            + self.codes.iter().map(|c| c.capacity()).sum::<usize>()
            + self.ips.capacity() * std::mem::size_of::<usize>()
            + self.ip_ids.allocation_size()
            + self.span_paths.capacity() * std::mem::size_of::<SpanPath>()
            + self.span_ids.allocation_size()
            + self.lifetimes.heap_bytes()
    }

    /// The span path of `e`, an entry of this table.
    fn spans_of(&self, e: &StackEntry) -> SpanPath {
        self.span_paths.get(e.spans as usize).copied().unwrap_or_default()
    }

    /// The lifetimes of `e`'s freed samples.
    fn lifetimes_of(&self, e: &StackEntry) -> &MillisHistogram {
        const NONE: MillisHistogram = MillisHistogram::new();
        match e.lifetimes {
            0 => &NONE,
            i => self.lifetimes.get(i as usize).unwrap_or(&NONE),
        }
    }

    /// Codes `ips` at the end of the frame codes (room made first, see
    /// [`StackTable::room_for_new_stack`]); None when the codes' 4 GiB are used up.
    fn code(&mut self, ips: &[usize]) -> Option<Frames> {
        let full = self.codes.last().is_none_or(|c| c.len() + MAX_CODE > CODE_CHUNK);
        if full {
            self.codes.push(new_chunk(self.codes.is_empty(), CODE_CHUNK));
        }
        let chunk = self.codes.len() - 1;
        let at = u32::try_from(chunk * CODE_CHUNK + self.codes[chunk].len()).ok()?;
        for &ip in ips.iter().take(MAX_FRAMES) {
            let id = match self.ip_ids.get(&ip) {
                Some(&id) => id,
                None => {
                    let id = self.ips.len() as u32;
                    self.ips.push(ip);
                    self.ip_ids.insert(ip, id);
                    id
                }
            };
            leb128::push(&mut self.codes[chunk], id);
        }
        Some(Frames { at, len: ips.len().min(MAX_FRAMES) as u8 })
    }

    /// The number of the span path `spans`.
    fn span_id(&mut self, spans: SpanPath) -> u32 {
        if spans == SpanPath::default() {
            return 0;
        }
        if let Some(&i) = self.span_ids.get(&spans) {
            return i;
        }
        if self.span_paths.is_empty() {
            self.span_paths.push(SpanPath::default());
        }
        let i = self.span_paths.len() as u32;
        self.span_paths.push(spans);
        self.span_ids.insert(spans, i);
        i
    }

    /// Makes room for one more stack of `frames` frames: its entry, index slot, codes, new
    /// distinct addresses and span path; after it, [`StackTable::intern`] of a new key allocates
    /// nothing. False when the memory could not be had (a memory limit): the sample then goes
    /// to the overflow entry.
    fn room_for_new_stack(&mut self, frames: usize) -> bool {
        let frames = frames.min(MAX_FRAMES);
        let codes = match self.codes.last_mut() {
            Some(c) if c.len() + MAX_CODE <= CODE_CHUNK => {
                c.len() + MAX_CODE <= c.capacity() || c.try_reserve(MAX_CODE).is_ok()
            }
            // A new array of codes: the first grows as it fills (see `code`).
            last => {
                let first = last.is_none();
                let mut c = ArenaVec::new_in(Arena);
                let want = if first { MAX_CODE } else { CODE_CHUNK };
                let ok = self.codes.try_reserve(1).is_ok() && c.try_reserve(want).is_ok();
                if ok {
                    self.codes.push(c);
                }
                ok
            }
        };
        codes
            && self.ips.try_reserve(frames).is_ok()
            && self.ip_ids.try_reserve(frames).is_ok()
            && self.span_paths.try_reserve(2).is_ok()
            && self.span_ids.try_reserve(1).is_ok()
            && self.entries.try_room()
            && self.index.try_room(1)
    }

    /// The id of the key (`ips`, `spans`); a new key gets an entry when `admit()` says one
    /// more fits (see [`admit_stack`]) and the table can get the memory for it, else it is
    /// folded into the overflow entry, id 0 (none at all when even that could not be made).
    fn intern(&mut self, ips: &[usize], spans: SpanPath, admit: impl FnOnce() -> bool) -> u32 {
        if self.entries.len() == 0 {
            if !(self.entries.try_room() && self.lifetimes.try_room()) {
                LOST_FOR_MEMORY.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
            self.entries.push(StackEntry::new());
            self.lifetimes.push(MillisHistogram::new());
        }
        let (hash, check) = key_hash(ips, &spans);
        let first = self.index.get(index::key(hash)).unwrap_or(0);
        let mut id = first;
        while id != 0 {
            let Some(e) = self.entries.get(id as usize) else { break };
            if e.check == check {
                return id;
            }
            id = e.next_same_hash;
        }
        if !self.room_for_new_stack(ips.len()) {
            LOST_FOR_MEMORY.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if !admit() {
            return 0;
        }
        let Some(frames) = self.code(ips) else {
            DROPPED_SAMPLES.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        let mut entry = StackEntry::new();
        entry.frames = frames;
        entry.spans = self.span_id(spans);
        entry.check = check;
        entry.next_same_hash = first;
        let id = self.entries.push(entry) as u32;
        self.index.insert(index::key(hash), id);
        id
    }

    /// Records a new sample of weight `w` at `ips` under `spans`; returns the stack id.
    /// `admit` says whether a new stack fits (see [`StackTable::intern`]).
    pub(crate) fn add_sample(
        &mut self,
        ips: &[usize],
        spans: SpanPath,
        w: Weight,
        admit: impl FnOnce() -> bool,
    ) -> u32 {
        let id = self.intern(ips, spans, admit);
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
        let Self { entries, lifetimes, tally, .. } = self;
        if let Some(e) = entries.get_mut(id as usize) {
            e.peak.before_change(e.live);
            let var = w.variance();
            e.live.count -= w.count;
            e.live.bytes -= w.bytes;
            e.live.var[0] -= var.0;
            e.live.var[1] -= var.1;
            e.freed_count += w.count;
            e.freed_bytes += w.bytes;
            e.live_samples = e.live_samples.saturating_sub(1);
            // The stack's first free gets it a histogram, when the memory is there (at a
            // memory limit its lifetimes go unrecorded).
            if e.lifetimes == 0 && lifetimes.try_room() {
                e.lifetimes = lifetimes.push(MillisHistogram::new()) as u32;
            }
            if let Some(h) = lifetimes.get_mut(e.lifetimes as usize) {
                h.add_weighted(lifetime_ms, w.count);
            }
            tally.change(-w.bytes, 0.0);
            if tally.take_capture() {
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Record {
    pub(crate) stack: u32,
    /// The block's counted bytes (what its weight was computed from).
    pub(crate) size: u64,
    pub(crate) weight: Weight,
    pub(crate) born_ns: u64,
}

impl Record {
    /// What an empty slot of the live table holds.
    const EMPTY: Record =
        Record { stack: 0, size: 0, weight: Weight { count: 0.0, bytes: 0.0 }, born_ns: 0 };
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

type LiveShard = SpinMutex<live::LiveMap>;

pub(crate) use crate::engine::peak::STACK_STRIPES;
/// A stack id is its stripe in the top bits and its index in the stripe below.
const STRIPE_SHIFT: u32 = 28;
pub(crate) static STACKS: [Padded<SpinMutex<StackTable>>; STACK_STRIPES] =
    [const { Padded(SpinMutex::new(StackTable::new())) }; STACK_STRIPES];

/// Records a new sample of weight `w` at `ips` under `spans` in the stripe of the thread with
/// ordinal `ordinal`; returns the stack id.
pub(crate) fn add_sample(ordinal: u64, ips: &[usize], spans: SpanPath, w: Weight) -> u32 {
    let stripe = (ordinal % STACK_STRIPES as u64) as usize;
    stack_id(stripe, STACKS[stripe].lock().add_sample(ips, spans, w, admit_stack))
}

/// Whether one more stack entry fits under `YING_MAX_STACKS` (all stripes together): counts
/// it if so; if not, counts the sample as dropped (folded into the overflow entry: its stack
/// is lost, its bytes are not).
fn admit_stack() -> bool {
    if STACK_ENTRIES.load(Ordering::Relaxed) >= MAX_STACKS.load(Ordering::Relaxed) {
        DROPPED_SAMPLES.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    STACK_ENTRIES.fetch_add(1, Ordering::Relaxed);
    true
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

/// The frames of one stack as [`for_each_stack`] gives them: numbers into its stripe's
/// distinct addresses, innermost first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryFrames<'a> {
    /// The frames' numbers.
    pub(crate) ids: &'a [u32],
    /// The stripe's distinct addresses, by number.
    pub(crate) ips: &'a [usize],
}

impl EntryFrames<'_> {
    /// The address of number `id`.
    pub(crate) fn ip(&self, id: u32) -> usize {
        self.ips.get(id as usize).copied().unwrap_or(0)
    }
}

/// Entries a report reads under one hold of a stripe's lock: the lock is released between
/// slices, so that a sample waiting for it (every sample takes its stripe's) waits for one
/// slice, about a tenth of a millisecond, not for the whole stripe: with 65,000 stacks an
/// endpoint's request held each stripe for about 60 ms, and the program's sampled allocations
/// behind it (the slowest `malloc` under a scrape loop: 33 ms, now 3 to 6 ms on a busy
/// two-core machine, 99.9 % of them under 15 µs; BENCHMARKS.md).
const SLICE: usize = 16;

/// Calls `visit(stripe, table, range)` for every entry index of every stripe, [`SLICE`]
/// entries at a time under the stripe's lock. Entries are only ever appended, so an index
/// keeps its entry across slices; entries appended while a stripe is read are read too.
/// Between slices the samples waiting for the stripe get it first ([`SpinMutex::hand_over`]):
/// the spin lock is not fair, and a reader that takes it again at once leaves them spinning
/// until the whole stripe is read.
fn for_each_slice(mut visit: impl FnMut(usize, &StackTable, std::ops::Range<usize>)) {
    for (stripe, t) in STACKS.iter().enumerate() {
        let mut from = 0;
        loop {
            {
                let t = t.lock();
                let to = t.entries.len().min(from + SLICE);
                if from >= to {
                    break;
                }
                visit(stripe, &t, from..to);
                from = to;
            }
            t.hand_over(20_000);
        }
    }
}

/// Calls `f(stripe, index, entry, frames, spans)` for every entry of the stack table, one
/// slice of a stripe at a time under its lock (see [`SLICE`]), copying nothing but each
/// entry's frame numbers, decoded into a buffer on the stack (reports build their stack table
/// from it: the numbers let them name each distinct address of a stripe once). `f` must not
/// take a profiler lock. Index 0 of a stripe is its overflow entry.
pub(crate) fn for_each_stack(
    mut f: impl FnMut(usize, u32, &StackEntry, EntryFrames<'_>, &SpanPath),
) {
    let mut ids = [0u32; MAX_FRAMES];
    for_each_slice(|stripe, t, range| {
        for i in range {
            let Some(e) = t.entries.get(i) else { break };
            let n = t.frame_ids_of(e, &mut ids);
            let frames = EntryFrames { ids: &ids[..n], ips: &t.ips };
            f(stripe, i as u32, e, frames, &t.spans_of(e));
        }
    });
}

/// Calls `f(stripe, index, entry, lifetimes)` for every entry of the stack table, as
/// [`for_each_stack`] does but without its frames.
pub(crate) fn for_each_entry(mut f: impl FnMut(usize, u32, &StackEntry, &MillisHistogram)) {
    for_each_slice(|stripe, t, range| {
        for i in range {
            let Some(e) = t.entries.get(i) else { break };
            f(stripe, i as u32, e, t.lifetimes_of(e));
        }
    });
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
        out.extend(g.iter().map(|(p, r)| (p, *r)));
    }
}

/// Estimated allocated and retained bytes summed over every stack.
pub(crate) fn estimated_bytes() -> (f64, f64) {
    STACKS.iter().fold((0.0, 0.0), |(a, r), t| {
        t.lock().entries.iter().fold((a, r), |(a, r), e| (a + e.alloc_bytes, r + e.live.bytes))
    })
}

static LIVE: [Padded<LiveShard>; SHARDS] =
    [const { Padded(SpinMutex::new(live::LiveMap::new())) }; SHARDS];

/// Samples whose address was already in the live table (a free we never saw).
pub(crate) static ADDRESS_CONFLICTS: AtomicU64 = AtomicU64::new(0);
/// Samples whose stack could not be kept (table full: attributed to the overflow entry).
pub(crate) static DROPPED_SAMPLES: AtomicU64 = AtomicU64::new(0);
/// Samples the tables could not get the memory for (a memory limit): a new stack's went to
/// the overflow entry, a block whose record could not be kept was taken as freed at once.
pub(crate) static LOST_FOR_MEMORY: AtomicU64 = AtomicU64::new(0);
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

/// Inserts a live record for `ptr`. When the live table cannot grow (a memory limit), the
/// block is taken as freed at once: its stack keeps it as allocated, not as retained, and the
/// sample is counted as lost.
pub(crate) fn insert_live(ptr: usize, rec: Record) {
    let old = {
        let mut live = shard(ptr).lock();
        let Ok(old) = live.try_insert(ptr, rec) else {
            drop(live);
            LOST_FOR_MEMORY.fetch_add(1, Ordering::Relaxed);
            free_sample(rec.stack, rec.weight, 0.0);
            return;
        };
        crate::engine::filter::insert(ptr);
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
    let rec = live.remove(ptr);
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
        for (p, _) in g.iter() {
            crate::engine::filter::remove(p);
        }
        g.clear();
    }
    for st in stripes.iter_mut() {
        **st = StackTable::new();
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
    use crate::spans::SPAN_DEPTH;

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
        let a = t.intern(&[1, 2, 3], [0; SPAN_DEPTH], || true);
        let b = t.intern(&[1, 2, 3, 4], [0; SPAN_DEPTH], || true);
        let mut span = [0; SPAN_DEPTH];
        span[0] = 77;
        let c = t.intern(&[1, 2, 3], span, || true);
        assert!(a != 0 && b != 0 && c != 0, "id 0 is the overflow bucket");
        assert!(a != b && a != c && b != c, "frames and spans both distinguish keys");
        assert_eq!(t.intern(&[1, 2, 3], [0; SPAN_DEPTH], || true), a);
        assert_eq!(t.intern(&[1, 2, 3, 4], [0; SPAN_DEPTH], || true), b);
        assert_eq!(t.intern(&[1, 2, 3], span, || true), c);
        assert_eq!(t.intern(&[7], span, || false), 0, "a new stack not admitted: overflow");
        assert_eq!(t.intern(&[1, 2, 3], span, || false), c, "a known stack needs no room");

        // Force a collision of the index hash: the key [9, 9] indexed in the slot whose chain
        // starts at `a`.
        let (h, _) = key_hash(&[9, 9], &[0; SPAN_DEPTH]);
        t.index.insert(index::key(h), a);
        let d = t.intern(&[9, 9], [0; SPAN_DEPTH], || true);
        assert!(d != a && d != 0, "a colliding key gets its own entry");
        assert_eq!(t.entries.get(d as usize).unwrap().next_same_hash, a, "chained before it");
        assert_eq!(t.intern(&[9, 9], [0; SPAN_DEPTH], || true), d);
        // Make the chain d -> a the one for `a`'s own hash too, as a real collision would:
        // finding `a` now means walking past `d`.
        t.index.insert(index::key(key_hash(&[1, 2, 3], &[0; SPAN_DEPTH]).0), d);
        assert_eq!(
            t.intern(&[1, 2, 3], [0; SPAN_DEPTH], || true),
            a,
            "found behind a colliding entry"
        );
        assert_eq!(frames(&t, d), [9, 9]);
        assert_eq!(t.spans_of(t.entries.get(c as usize).unwrap()), span);
        assert_eq!(t.entries.len(), 5, "overflow bucket + four distinct keys");
    }

    fn frames(t: &StackTable, id: u32) -> Vec<usize> {
        let mut out = [0; MAX_FRAMES];
        let n = t.frames_of(t.entries.get(id as usize).unwrap(), &mut out);
        out[..n].to_vec()
    }

    /// Frames come back as they went in, whatever the number of their address (one, two or
    /// three bytes of code) and wherever their code falls (across arrays of codes and of
    /// entries), and no more than `MAX_FRAMES` of them are kept.
    #[test]
    fn coded_frames_decode_to_the_stack_for_every_address_number() {
        let mut t = StackTable::new();
        let stack = |i: usize| -> Vec<usize> {
            (0..1 + i % MAX_FRAMES)
                .map(|k| 0x5555_0000_0000 + ((i * 7 + k * 131) % 40_000) * 16)
                .collect()
        };
        // 40,000 distinct addresses: numbers past 16,383 take three bytes; this many stacks
        // fill more than two arrays of entries and more than one of codes.
        let n = 2 * ENTRY_CHUNK + 1_000;
        let ids: Vec<u32> = (0..n).map(|i| t.intern(&stack(i), [0; SPAN_DEPTH], || true)).collect();
        assert!(t.ips.len() > 16_384, "{} distinct addresses", t.ips.len());
        assert!(t.codes.len() > 1 && t.entries.chunks.len() > 2);
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(frames(&t, id), stack(i), "stack {i}");
            assert_eq!(t.intern(&stack(i), [0; SPAN_DEPTH], || true), id, "stack {i} found again");
        }
        let deep: Vec<usize> = (1..=MAX_FRAMES + 10).collect();
        let id = t.intern(&deep, [0; SPAN_DEPTH], || true);
        assert_eq!(frames(&t, id), deep[..MAX_FRAMES]);
    }

    /// A stack gets its lifetimes histogram at its first free; the others have none.
    #[test]
    fn lifetimes_are_kept_for_stacks_with_a_free() {
        let mut t = StackTable::new();
        let w = Weight { count: 1.0, bytes: 64.0 };
        let a = t.add_sample(&[1], [0; SPAN_DEPTH], w, || true);
        let b = t.add_sample(&[2], [0; SPAN_DEPTH], w, || true);
        t.free_sample(b, w, 5.0);
        t.free_sample(b, w, 5.0);
        let e = |id: u32| t.entries.get(id as usize).unwrap();
        assert_eq!(t.lifetimes_of(e(a)).counts(), MillisHistogram::new().counts());
        assert_eq!(t.lifetimes.len(), 2, "number 0 and b's");
        assert!((t.lifetimes_of(e(b)).average_millis() - 5.0).abs() < 1e-9);
    }

    /// What the README and the docs of `StackTable` say a stack costs: at most 300 bytes for
    /// a stack of 46 frames on average (depths 1 to 91) through 2,000 distinct addresses
    /// (numbers of two bytes past the first 128), 200,000 stacks of which are in one stripe.
    #[test]
    fn a_stack_of_46_frames_takes_at_most_300_bytes() {
        let mut t = StackTable::new();
        let n = 200_000usize;
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut ips = Vec::with_capacity(91);
        for i in 0..n {
            ips.clear();
            for _ in 0..1 + i % 91 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ips.push(0x5555_0000_0000 + (x % 2_000) as usize * 16);
            }
            t.add_sample(&ips, [0; SPAN_DEPTH], Weight { count: 1.0, bytes: 64.0 }, || true);
        }
        let per_stack = t.heap_bytes() as f64 / n as f64;
        eprintln!("{per_stack:.1} bytes a stack ({} bytes in all)", t.heap_bytes());
        assert!(per_stack <= 300.0, "{per_stack:.1} bytes a stack of 46 frames");
    }

    #[test]
    fn an_entry_is_the_size_the_docs_say() {
        assert_eq!(std::mem::size_of::<StackEntry>(), 168, "update StackTable's docs");
    }
}
