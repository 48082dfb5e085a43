//! Anonymous memory mappings as allocations: what the shim's `mmap`, `mmap64`, `munmap` and
//! `mremap` hand to the engine.
//!
//! Allocators that carve objects out of arenas they map themselves (Python's pymalloc, gcc's
//! `ggc` pages, jemalloc or mimalloc built into a program) hide that memory from a `malloc`
//! hook. The shim therefore counts the program's anonymous mappings too: a mapping of `N`
//! bytes is an allocation of `N` bytes, counted in the exact totals and charged to the same
//! byte sampler as `malloc` (so every estimate stays unbiased, see `sampler`), its stack
//! captured when it is sampled.
//!
//! # What counts
//!
//! * Anonymous mappings (`MAP_ANONYMOUS`, private or shared) whose protection is not
//!   `PROT_NONE`, from their length rounded up to whole pages (what the kernel maps). A
//!   file-backed mapping is the file's memory, not the program's heap, and is not counted.
//! * A `PROT_NONE` mapping is a reservation of address space (a JVM's heap reserve, a V8 or Go
//!   cage, a guard region), not memory: not counted. Memory committed into a reservation by
//!   `mmap(MAP_FIXED)` is counted like any mapping; committed by `mprotect` it is not (the shim
//!   does not export `mprotect`, see the README's known limits), and a counted region later
//!   made `PROT_NONE` by `mprotect` stays counted until it is unmapped.
//! * Not glibc's own mappings: its `malloc` maps big blocks and heaps through its internal
//!   `__mmap`, which does not go through the dynamic symbol table (those blocks are counted as
//!   `malloc`'d chunks already), nor the loader's, nor thread stacks made by `pthread_create`.
//! * Not the profiler's own: its heap (`tables::arena`) and DWARF files are mapped by profiler
//!   code, with the thread's guard held, and a call under the guard only forwards.
//! * Mappings made before the shim's constructor ran, and by a thread inside a signal handler
//!   that interrupted profiler code, are not seen; their unmapping is then ignored too.
//!
//! # The region table
//!
//! Every counted mapping is a `Region` of a table sorted by start address, sampled or not
//! (the exact totals need to know which bytes they counted), in the profiler's own heap under
//! its own lock (`REGIONS`). The lock is held across the system call, so that the table
//! follows the kernel's order of events (another thread may be handed an address the moment it
//! is unmapped); the kernel serialises these calls on the process's memory map anyway. A table
//! of `n` regions costs `O(log n)` to find a region and `O(n)` to insert one (a shift of the
//! sorted array): a process has at most `vm.max_map_count` (65,530) mappings, and an `mmap`
//! call costs a system call and page faults. Lock order: this lock comes before every other
//! profiler lock (it is never taken by profiler code, only by the program's calls, which take
//! the stack table's and the heap's locks under it); the `fork` handlers take it first.
//!
//! # Changes of a region, kept unbiased
//!
//! A region of `N` bytes is sampled with probability `p(N)` and then weighs `1/p(N)` (see
//! `sampler`). Every change keeps a region of `c` bytes sampled with probability `p(c)`:
//!
//! * **`munmap` of part of a region** leaves up to two pieces. A sampled region's piece of `a`
//!   bytes stays sampled with probability `p(a)/p(N)` (the thinning of a shrinking `realloc`)
//!   and then weighs `1/p(a)`; the bytes unmapped are freed bytes (estimated `cut/p(N)` at the
//!   stack). An unsampled region's pieces are unsampled. At interval 1 every piece is kept.
//! * **`mremap`** is a `realloc`: the remapped part keeps its stack and birth time, a shrink is
//!   thinned as above, a growth of an unsampled region is charged to the sampler (sampled, it
//!   carries the `mremap`'s stack), a growth of a sampled one is counted and re-weighed.
//! * **`mmap(MAP_FIXED)`** (and `mremap(MREMAP_FIXED)`) over counted regions unmaps them first,
//!   as the kernel does.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::engine::host::{Host, Settings};
use crate::engine::sample::{self, Sample};
use crate::engine::sampler::{self, Weight};
use crate::engine::tables::{
    self,
    arena::{Arena, ArenaVec},
};
use crate::engine::thread_state::ThreadState;
use crate::sys::spin::SpinMutex;

/// One counted mapping, `start..end` (page-aligned).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Region {
    start: usize,
    end: usize,
    sample: Option<Sample>,
}

impl Region {
    fn len(&self) -> u64 {
        (self.end - self.start) as u64
    }
}

/// Where the table's events are counted: the exact totals, the sampler and the stack table in
/// the shim ([`Live`]), a recording double in the unit tests.
trait Books {
    /// `charged` bytes were newly mapped (a whole region, or a growth of an unsampled one that
    /// is `size` bytes now): counts them, charges them to the sampler, and returns the sample
    /// (the calling stack, weighed for `size` bytes) when they used the countdown up.
    fn mapped(&mut self, charged: u64, size: u64) -> Option<Sample>;
    /// `bytes` more for a sampled region (counted, not charged: see `sampler`).
    fn grown(&mut self, bytes: u64);
    /// `bytes` unmapped.
    fn unmapped(&mut self, bytes: u64);
    /// Whether a sample of weight `w` stays sampled for a piece of `size` bytes of its region.
    fn keeps(&mut self, w: Weight, size: u64) -> bool;
    /// The weight of a sampled region of `size` bytes.
    fn weight(&self, size: u64) -> Weight;
    /// The sample at `stack` changed from weight `old` to `new` (`None`: forgotten), giving back
    /// an estimated `freed` bytes.
    fn resized(&mut self, stack: u32, old: Weight, new: Option<Weight>, freed: f64);
    /// A split gave the sample at `stack` one more piece, of weight `w`.
    fn split_off(&mut self, stack: u32, w: Weight);
    /// A sampled region was unmapped whole.
    fn freed(&mut self, s: Sample);
}

/// The counted regions, sorted by start, not overlapping.
#[derive(Debug)]
struct Regions {
    list: ArenaVec<Region>,
    bytes: u64,
}

impl Regions {
    const fn new() -> Self {
        Self { list: ArenaVec::new_in(Arena), bytes: 0 }
    }

    /// Index of the first region that ends after `addr`.
    fn first_ending_after(&self, addr: usize) -> usize {
        self.list.partition_point(|r| r.end <= addr)
    }

    /// Inserts `r`, which overlaps no region of the table.
    fn insert(&mut self, r: Region, books: &mut impl Books) {
        let i = self.first_ending_after(r.start);
        self.insert_at(i, r, books);
    }

    /// Inserts `r` at index `i`. When the table cannot grow (a memory limit), the region is
    /// no longer counted instead: its bytes are taken as unmapped and its sample as freed
    /// (exact totals then miss it, and the sample is counted as lost), never an abort.
    fn insert_at(&mut self, i: usize, r: Region, books: &mut impl Books) {
        if self.list.try_reserve(1).is_ok() {
            self.list.insert(i, r);
            return;
        }
        crate::engine::tables::LOST_FOR_MEMORY.fetch_add(1, Ordering::Relaxed);
        books.unmapped(r.len());
        self.bytes -= r.len();
        if let Some(s) = r.sample {
            books.freed(s);
        }
    }

    /// A new counted mapping `start..start + len` (whatever was counted there is replaced).
    fn map(&mut self, start: usize, len: u64, books: &mut impl Books) {
        self.unmap(start, start + len as usize, books);
        let sample = books.mapped(len, len);
        self.bytes += len;
        self.insert(Region { start, end: start + len as usize, sample }, books);
    }

    /// `lo..hi` was unmapped (or replaced by a mapping that is not counted).
    fn unmap(&mut self, lo: usize, hi: usize, books: &mut impl Books) {
        let i = self.first_ending_after(lo);
        let mut j = i;
        while self.list.get(j).is_some_and(|r| r.start < hi) {
            j += 1;
        }
        if i == j {
            return;
        }
        let mut kept: [Option<Region>; 2] = [None, None];
        for k in i..j {
            let r = self.list[k];
            let left = (r.start < lo).then_some((r.start, lo));
            let right = (hi < r.end).then_some((hi, r.end));
            let pieces: ArrayOf2 = [left, right];
            let samples = carve(&r, &pieces, books);
            let cut = r.len() - pieces.iter().flatten().map(|&(a, b)| (b - a) as u64).sum::<u64>();
            books.unmapped(cut);
            self.bytes -= cut;
            for (slot, (piece, sample)) in kept.iter_mut().zip(pieces.iter().zip(samples)) {
                if let Some((start, end)) = *piece {
                    *slot = Some(Region { start, end, sample });
                }
            }
        }
        self.list.drain(i..j);
        for r in kept.into_iter().flatten().rev() {
            self.insert_at(i, r, books);
        }
    }

    /// `old..old + old_len` was remapped to `new..new + new_len` (`new == old`: in place).
    fn remap(
        &mut self,
        old: usize,
        old_len: u64,
        new: usize,
        new_len: u64,
        books: &mut impl Books,
    ) {
        let old_end = old + old_len as usize;
        let i = self.first_ending_after(old);
        let within = self.list.get(i).is_some_and(|r| r.start <= old && old_end <= r.end);
        if !within {
            // Untracked, or across regions the kernel had merged into one mapping (rare): the
            // counted part is unmapped and the result is a new mapping if any part was counted.
            let counted: u64 = self
                .list
                .iter()
                .skip(i)
                .take_while(|r| r.start < old_end)
                .map(|r| (r.end.min(old_end) - r.start.max(old)) as u64)
                .sum();
            self.unmap(old, old_end, books);
            if counted > 0 {
                self.map(new, new_len, books);
            } else {
                self.unmap(new, new + new_len as usize, books);
            }
            return;
        }
        let r = self.list.remove(i);
        let left = (r.start < old).then_some((r.start, old));
        let right = (old_end < r.end).then_some((old_end, r.end));
        let pieces: [Option<(usize, usize)>; 3] = [left, Some((old, old_end)), right];
        let [ls, mut moved, rs] = carve(&r, &pieces, books);
        for (piece, sample) in [(left, ls), (right, rs)] {
            if let Some((start, end)) = piece {
                self.insert(Region { start, end, sample }, books);
            }
        }
        if new_len < old_len {
            let cut = old_len - new_len;
            books.unmapped(cut);
            self.bytes -= cut;
            if let Some(s) = moved {
                let kept = books.keeps(s.weight, new_len).then(|| books.weight(new_len));
                books.resized(s.stack, s.weight, kept, cut as f64 * s.weight.count);
                moved = kept.map(|weight| Sample { weight, ..s });
            }
        } else if new_len > old_len {
            let growth = new_len - old_len;
            self.bytes += growth;
            moved = match moved {
                Some(s) => {
                    books.grown(growth);
                    let weight = books.weight(new_len);
                    books.resized(s.stack, s.weight, Some(weight), 0.0);
                    Some(Sample { weight, ..s })
                }
                None => books.mapped(growth, new_len),
            };
        }
        // Whatever was counted at the destination was replaced (`MREMAP_FIXED`).
        self.unmap(new, new + new_len as usize, books);
        self.insert(Region { start: new, end: new + new_len as usize, sample: moved }, books);
    }
}

type ArrayOf2 = [Option<(usize, usize)>; 2];

/// The samples of the pieces `pieces` (each `Some(start..end)` inside `r`, or `None`) that
/// remain of region `r`, the rest of which is being unmapped or remapped, with the stack
/// table told (see the module docs).
fn carve<const N: usize>(
    r: &Region,
    pieces: &[Option<(usize, usize)>; N],
    books: &mut impl Books,
) -> [Option<Sample>; N] {
    let mut out = [None; N];
    let Some(s) = r.sample else { return out };
    let sizes = pieces.map(|p| p.map(|(a, b)| (b - a) as u64));
    let kept_bytes: u64 = sizes.iter().flatten().sum();
    if kept_bytes == 0 {
        books.freed(s);
        return out;
    }
    let freed = (r.len() - kept_bytes) as f64 * s.weight.count;
    let mut first = true;
    for (slot, size) in out.iter_mut().zip(sizes) {
        let Some(size) = size else { continue };
        let kept = books.keeps(s.weight, size).then(|| books.weight(size));
        if first {
            books.resized(s.stack, s.weight, kept, freed);
            first = false;
        } else if let Some(w) = kept {
            books.split_off(s.stack, w);
        }
        *slot = kept.map(|weight| Sample { weight, ..s });
    }
    out
}

/// The counted regions.
static REGIONS: SpinMutex<Regions> = SpinMutex::new(Regions::new());
/// Bytes and regions counted now (read by reports without the lock).
static MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);
static MAPPED_REGIONS: AtomicU64 = AtomicU64::new(0);

/// No front end hooks mappings (the Rust front end).
const TRACKING_UNAVAILABLE: u8 = 0;
/// The shim hooks them, and `YING_TRACK_MMAP=false` (or the process is not profiled).
const TRACKING_OFF: u8 = 1;
/// The shim counts them.
const TRACKING_ON: u8 = 2;
static TRACKING: AtomicU8 = AtomicU8::new(TRACKING_UNAVAILABLE);

/// Turns the counting of anonymous mappings on or off (the shim, once its configuration is
/// read; until then nothing is counted).
pub fn set_tracking(on: bool) {
    TRACKING.store(if on { TRACKING_ON } else { TRACKING_OFF }, Ordering::Relaxed);
}

fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed) == TRACKING_ON
}

/// `len` rounded up to whole pages, as the kernel maps and unmaps it (saturating: a length
/// that large fails in the kernel anyway).
fn pages(len: usize) -> u64 {
    len.checked_next_multiple_of(crate::sys::page_size())
        .unwrap_or(usize::MAX & !(crate::sys::page_size() - 1)) as u64
}

/// The books of a program thread (guarded for the whole call, so its budget is parked).
struct Live<'a, H> {
    ts: &'a ThreadState,
    set: &'a Settings,
    host: std::marker::PhantomData<H>,
}

impl<H: Host> Books for Live<'_, H> {
    fn mapped(&mut self, charged: u64, size: u64) -> Option<Sample> {
        let ts = self.ts;
        if !ts.sampling() {
            crate::engine::totals::add_alloc_shared(charged as usize);
            return None;
        }
        ts.add_allocated(charged);
        // The countdown, parked while the guard is held, is charged as `malloc` charges it,
        // and a mapping that uses it up is sampled by the same step as a `malloc`'d block.
        let b = ts.parked_budget.get();
        ts.parked_budget.set(b.wrapping_sub(charged));
        if b > charged {
            return None;
        }
        let mut taken = None;
        sample::take::<H>(ts, self.set, size, None, |s| taken = Some(s));
        taken
    }

    fn grown(&mut self, bytes: u64) {
        if self.ts.sampling() {
            self.ts.add_allocated(bytes);
        } else {
            crate::engine::totals::add_alloc_shared(bytes as usize);
        }
    }

    fn unmapped(&mut self, bytes: u64) {
        if self.ts.sampling() {
            self.ts.add_freed(bytes);
        } else {
            crate::engine::totals::add_free_shared(bytes as usize);
        }
    }

    fn keeps(&mut self, w: Weight, size: u64) -> bool {
        let mut rng = self.ts.rng.get();
        let keep = sampler::keep_after_shrink(&mut rng, w, size, self.set.sample_interval());
        self.ts.rng.set(rng);
        keep
    }

    fn weight(&self, size: u64) -> Weight {
        sampler::weight_at(size, self.set.ln_unmarked())
    }

    fn resized(&mut self, stack: u32, old: Weight, new: Option<Weight>, freed: f64) {
        tables::resize_sample(stack, old, new, freed);
    }

    fn split_off(&mut self, stack: u32, w: Weight) {
        tables::split_sample(stack, w);
    }

    fn freed(&mut self, s: Sample) {
        sample::retire(s);
    }
}

/// Runs `real` (the system call) with the region table locked and, when it succeeds (`ok`),
/// updates the table with `update`; `errno` is left as the call left it. Not counted (the call
/// only forwards) when tracking is off, or the thread runs profiler code (the profiler's own
/// mappings, or a signal handler that interrupted it).
fn tracked<H: Host, T: Copy>(
    set: &Settings,
    real: impl FnOnce() -> T,
    ok: impl FnOnce(T) -> bool,
    update: impl FnOnce(T, &mut Regions, &mut Live<'_, H>),
) -> T {
    let ts = H::thread_state();
    if !tracking() || ts.guarded() {
        return real();
    }
    let _g = ts.enter();
    let mut regions = REGIONS.lock();
    let r = real();
    if !ok(r) {
        return r;
    }
    let _e = crate::sys::ErrnoGuard::save();
    let mut books = Live::<H> { ts, set, host: std::marker::PhantomData };
    update(r, &mut regions, &mut books);
    MAPPED_BYTES.store(regions.bytes, Ordering::Relaxed);
    MAPPED_REGIONS.store(regions.list.len() as u64, Ordering::Relaxed);
    r
}

/// The `mmap` hook: `real` maps (`len`, `prot` and `flags` are the caller's arguments) and
/// returns the address or `MAP_FAILED`.
pub fn on_mmap<H: Host>(
    set: &Settings,
    len: usize,
    prot: i32,
    flags: i32,
    real: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let counted = flags & libc::MAP_ANONYMOUS != 0 && prot != libc::PROT_NONE;
    // A mapping that is not counted touches the table only when it replaces what was there
    // (MAP_FIXED; MAP_FIXED_NOREPLACE never replaces).
    if !counted && flags & libc::MAP_FIXED == 0 {
        return real();
    }
    tracked::<H, _>(
        set,
        real,
        |p| p != libc::MAP_FAILED,
        |p, regions, books| {
            let start = p as usize;
            if counted {
                regions.map(start, pages(len), books);
            } else {
                regions.unmap(start, start.saturating_add(pages(len) as usize), books);
            }
        },
    )
}

/// The `munmap` hook: `real` unmaps `addr..addr + len` and returns 0 or -1.
pub fn on_munmap<H: Host>(
    set: &Settings,
    addr: *mut c_void,
    len: usize,
    real: impl FnOnce() -> i32,
) -> i32 {
    tracked::<H, _>(
        set,
        real,
        |rc| rc == 0,
        |_, regions, books| {
            let lo = addr as usize;
            regions.unmap(lo, lo.saturating_add(pages(len) as usize), books);
        },
    )
}

/// The `mremap` hook: `real` remaps `old..old + old_len` to `new_len` bytes (with the caller's
/// `flags`) and returns the new address or `MAP_FAILED`. An `old_len` of 0 (a second mapping of
/// shared pages) maps no new memory and is not counted.
pub fn on_mremap<H: Host>(
    set: &Settings,
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    real: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    tracked::<H, _>(
        set,
        real,
        |p| p != libc::MAP_FAILED,
        |p, regions, books| {
            let (new, new_len) = (p as usize, pages(new_len));
            if old_len == 0 {
                regions.unmap(new, new.saturating_add(new_len as usize), books);
            } else {
                regions.remap(old as usize, pages(old_len), new, new_len, books);
            }
        },
    )
}

/// `fork` prepare: no thread may be inside a mapping call while the process forks (taken
/// before every other profiler lock).
pub(crate) fn lock_for_fork() {
    REGIONS.lock_for_fork();
}

/// `fork` parent and child: releases what [`lock_for_fork`] took. The child's mappings are
/// copies of the parent's, so the table stays right.
pub(crate) fn unlock_after_fork() {
    REGIONS.force_unlock();
}

/// The counted regions now, `(start, end)` sorted by start, into `out` (cleared first; the
/// caller's vector, reserved before the lock is taken: nothing is allocated under it). For
/// report time (`report/model/rss.rs`).
pub(crate) fn regions_into(out: &mut Vec<(usize, usize)>) {
    let mut want = MAPPED_REGIONS.load(Ordering::Relaxed) as usize + 16;
    loop {
        out.clear();
        out.reserve(want);
        let regions = REGIONS.lock();
        if regions.list.len() <= out.capacity() {
            out.extend(regions.list.iter().map(|r| (r.start, r.end)));
            return;
        }
        want = regions.list.len() + 16;
    }
}

/// Appends `(start, bytes, stack, weight)` for every sampled counted region to `out` (the
/// report's residency reads their pages, `report/model/resident.rs`): a sampled mapping is a
/// live sample like a `malloc`'d block, but its record is here, not in the live table. `out` is
/// in the profiler's own heap, whose lock comes after this table's; the caller reserves room
/// first (see [`region_count`]), so it rarely grows under the lock.
pub(crate) fn sampled_into(out: &mut ArenaVec<(usize, u64, u32, Weight)>) {
    let regions = REGIONS.lock();
    out.extend(
        regions.list.iter().filter_map(|r| r.sample.map(|s| (r.start, r.len(), s.stack, s.weight))),
    );
}

/// The counted regions now (to reserve room for [`sampled_into`]).
pub(crate) fn region_count() -> usize {
    MAPPED_REGIONS.load(Ordering::Relaxed) as usize
}

/// What reports say about mappings (the engine keeps the figures; `report/text.rs` words them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MappedState {
    /// The Rust front end, which sees no mappings.
    NotSeen,
    /// `YING_TRACK_MMAP=false`.
    Off,
    /// Bytes and regions counted now.
    Counted { bytes: u64, regions: u64 },
}

/// The mapping figures for a report header.
pub(crate) fn state() -> MappedState {
    match TRACKING.load(Ordering::Relaxed) {
        TRACKING_ON => MappedState::Counted {
            bytes: MAPPED_BYTES.load(Ordering::Relaxed),
            regions: MAPPED_REGIONS.load(Ordering::Relaxed),
        },
        TRACKING_OFF => MappedState::Off,
        _ => MappedState::NotSeen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 4096;

    /// Books that record what the table tells them: exact bytes, and per stack the live weight
    /// (interval 1 by default: every region sampled, weights are bytes).
    #[derive(Default)]
    struct Ledger {
        allocated: u64,
        freed: u64,
        next_stack: u32,
        /// Per stack: live bytes estimated, freed bytes estimated, live pieces.
        stacks: std::collections::BTreeMap<u32, (f64, f64, i64)>,
        /// Interval: 1 keeps everything; otherwise `keeps` answers from `keep`.
        interval: u64,
        keep: bool,
        sample: bool,
        /// When non-zero, sampling and thinning are drawn from this generator.
        rng: u64,
    }

    impl Ledger {
        fn exact() -> Self {
            Self { interval: 1, keep: true, sample: true, ..Self::default() }
        }
        fn live(&self, stack: u32) -> f64 {
            self.stacks.get(&stack).map_or(0.0, |s| s.0)
        }
    }

    impl Books for Ledger {
        fn mapped(&mut self, charged: u64, size: u64) -> Option<Sample> {
            self.allocated += charged;
            if self.rng != 0 {
                // The byte sampler gives `charged` bytes a chance of p(charged).
                let u = (sampler::next_u64(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64;
                self.sample = u < sampler::sample_probability(charged, self.interval);
            }
            if !self.sample {
                return None;
            }
            self.next_stack += 1;
            let weight = self.weight(size);
            let e = self.stacks.entry(self.next_stack).or_default();
            e.0 += weight.bytes;
            e.2 += 1;
            Some(Sample { stack: self.next_stack, weight, born_ns: 0 })
        }
        fn grown(&mut self, bytes: u64) {
            self.allocated += bytes;
        }
        fn unmapped(&mut self, bytes: u64) {
            self.freed += bytes;
        }
        fn keeps(&mut self, w: Weight, size: u64) -> bool {
            if self.rng != 0 {
                return sampler::keep_after_shrink(&mut self.rng, w, size, self.interval);
            }
            self.interval == 1 || self.keep
        }
        fn weight(&self, size: u64) -> Weight {
            sampler::weight(size, self.interval)
        }
        fn resized(&mut self, stack: u32, old: Weight, new: Option<Weight>, freed: f64) {
            let e = self.stacks.entry(stack).or_default();
            e.0 += new.map_or(0.0, |w| w.bytes) - old.bytes;
            e.1 += freed;
            if new.is_none() {
                e.2 -= 1;
            }
        }
        fn split_off(&mut self, stack: u32, w: Weight) {
            let e = self.stacks.entry(stack).or_default();
            e.0 += w.bytes;
            e.2 += 1;
        }
        fn freed(&mut self, s: Sample) {
            let e = self.stacks.entry(s.stack).or_default();
            e.0 -= s.weight.bytes;
            e.1 += s.weight.bytes;
            e.2 -= 1;
        }
    }

    fn spans(t: &Regions) -> Vec<(usize, usize)> {
        t.list.iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn partial_unmaps_leave_pieces_at_the_same_stack() {
        let (mut t, mut b) = (Regions::new(), Ledger::exact());
        t.map(100 * P, 10 * P as u64, &mut b);
        t.map(200 * P, 4 * P as u64, &mut b);
        // A hole in the middle of the first, the tail of the second.
        t.unmap(103 * P, 105 * P, &mut b);
        t.unmap(203 * P, 300 * P, &mut b);
        assert_eq!(spans(&t), [(100 * P, 103 * P), (105 * P, 110 * P), (200 * P, 203 * P)]);
        assert_eq!(t.bytes, 11 * P as u64);
        assert_eq!((b.allocated - b.freed), t.bytes);
        assert_eq!(b.live(1), 8.0 * P as f64);
        assert_eq!(b.live(2), 3.0 * P as f64);
        assert_eq!(b.stacks[&1].2, 2, "two live pieces");
        // One call across both pieces of the first and the rest of the second.
        t.unmap(101 * P, 202 * P, &mut b);
        assert_eq!(spans(&t), [(100 * P, 101 * P), (202 * P, 203 * P)]);
        assert_eq!((b.live(1), b.live(2)), (P as f64, P as f64));
        assert_eq!(b.stacks[&1].2, 1);
        t.unmap(0, usize::MAX, &mut b);
        assert!(t.list.is_empty());
        assert_eq!((t.bytes, b.allocated - b.freed, b.live(1), b.live(2)), (0, 0, 0.0, 0.0));
        assert_eq!(b.stacks[&1].1 + b.stacks[&2].1, 14.0 * P as f64, "every byte freed once");
    }

    #[test]
    fn a_fixed_mapping_replaces_what_it_covers() {
        let (mut t, mut b) = (Regions::new(), Ledger::exact());
        t.map(10 * P, 8 * P as u64, &mut b);
        t.map(12 * P, 2 * P as u64, &mut b);
        assert_eq!(spans(&t), [(10 * P, 12 * P), (12 * P, 14 * P), (14 * P, 18 * P)]);
        assert_eq!((b.live(1), b.live(2)), (6.0 * P as f64, 2.0 * P as f64));
        assert_eq!(t.bytes, 8 * P as u64);
        assert_eq!(b.allocated - b.freed, t.bytes);
    }

    #[test]
    fn remaps_resize_and_move_a_region_with_its_stack() {
        let (mut t, mut b) = (Regions::new(), Ledger::exact());
        t.map(10 * P, 4 * P as u64, &mut b);
        // Grow in place, shrink in place, move and grow.
        t.remap(10 * P, 4 * P as u64, 10 * P, 6 * P as u64, &mut b);
        assert_eq!(b.live(1), 6.0 * P as f64);
        t.remap(10 * P, 6 * P as u64, 10 * P, 3 * P as u64, &mut b);
        assert_eq!(b.live(1), 3.0 * P as f64);
        t.remap(10 * P, 3 * P as u64, 50 * P, 9 * P as u64, &mut b);
        assert_eq!(spans(&t), [(50 * P, 59 * P)]);
        assert_eq!((b.live(1), b.next_stack), (9.0 * P as f64, 1), "one stack throughout");
        // The middle of a region moved away: three pieces, one stack.
        t.remap(52 * P, 2 * P as u64, 80 * P, P as u64, &mut b);
        assert_eq!(spans(&t), [(50 * P, 52 * P), (54 * P, 59 * P), (80 * P, 81 * P)]);
        assert_eq!(b.live(1), 8.0 * P as f64);
        assert_eq!(t.bytes, 8 * P as u64);
        assert_eq!(b.allocated - b.freed, t.bytes);
        // Untracked ranges stay untracked; a remap across two regions is a new mapping.
        t.remap(200 * P, P as u64, 300 * P, 2 * P as u64, &mut b);
        assert_eq!(t.list.len(), 3);
        t.remap(51 * P, 4 * P as u64, 90 * P, 5 * P as u64, &mut b);
        assert_eq!(
            spans(&t),
            [(50 * P, 51 * P), (55 * P, 59 * P), (80 * P, 81 * P), (90 * P, 95 * P)]
        );
        assert_eq!(t.bytes, 11 * P as u64);
        assert_eq!(b.allocated - b.freed, t.bytes);
        assert_eq!(b.live(1) + b.live(2), 11.0 * P as f64);
    }

    #[test]
    fn unsampled_regions_count_exactly_and_grow_into_samples() {
        let mut b = Ledger { interval: 1 << 20, ..Ledger::default() };
        let mut t = Regions::new();
        t.map(10 * P, 4 * P as u64, &mut b);
        assert_eq!(t.list[0].sample, None);
        b.sample = true;
        t.remap(10 * P, 4 * P as u64, 10 * P, 8 * P as u64, &mut b);
        let w = sampler::weight(8 * P as u64, 1 << 20);
        assert_eq!(t.list[0].sample.map(|s| s.weight), Some(w), "weighed for its new size");
        // A thinning that drops the sample forgets it; the bytes stay counted.
        b.keep = false;
        t.unmap(10 * P, 11 * P, &mut b);
        assert_eq!(t.list[0].sample, None);
        assert_eq!((b.live(1), b.stacks[&1].2), (0.0, 0));
        assert_eq!((t.bytes, b.allocated - b.freed), (7 * P as u64, 7 * P as u64));
    }

    #[test]
    fn estimates_stay_unbiased_through_splits_and_remaps() {
        // Each run maps regions of 8 and 20 pages at a 64 KiB interval (sampled with
        // probability 0.39 and 0.71), cuts a hole in each, moves the first's middle and grows
        // it, shrinks the second's tail: 20 pages live at the end. Over many seeds the mean
        // estimate of the live bytes is within 4 standard errors of the truth.
        let interval = 64 * 1024;
        let runs = 20_000;
        let mut sums = (0.0, 0.0);
        for seed in 0..runs {
            let mut b = Ledger { interval, rng: sampler::seed_for(seed, 7), ..Ledger::default() };
            let mut t = Regions::new();
            t.map(100 * P, 8 * P as u64, &mut b);
            t.map(200 * P, 20 * P as u64, &mut b);
            t.unmap(102 * P, 103 * P, &mut b);
            t.unmap(205 * P, 209 * P, &mut b);
            t.remap(104 * P, 2 * P as u64, 300 * P, 6 * P as u64, &mut b);
            t.remap(209 * P, 11 * P as u64, 209 * P, 4 * P as u64, &mut b);
            assert_eq!(t.bytes, 20 * P as u64);
            assert_eq!(b.allocated - b.freed, t.bytes);
            let live: f64 = b.stacks.values().map(|s| s.0).sum();
            sums = (sums.0 + live, sums.1 + live * live);
        }
        let n = runs as f64;
        let mean = sums.0 / n;
        let se = ((sums.1 / n - mean * mean) / n).sqrt();
        let truth = 20.0 * P as f64;
        assert!(se > 0.0, "the estimate never varied: nothing was sampled at random");
        assert!((mean - truth).abs() < 4.0 * se, "mean {mean} vs {truth} (se {se})");
    }

    #[test]
    fn lengths_round_up_to_pages() {
        let p = crate::sys::page_size() as u64;
        assert_eq!((pages(1), pages(p as usize), pages(p as usize + 1)), (p, p, 2 * p));
        assert!(pages(usize::MAX) >= pages(usize::MAX - p as usize));
    }
}
