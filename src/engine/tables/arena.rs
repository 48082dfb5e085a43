//! The profiler's own heap, where the tables ([`crate::engine::tables`]) keep everything they store.
//!
//! # Why
//!
//! The sampled path runs inside the program's allocation calls, and sometimes inside a signal
//! handler that interrupted the program in the middle of glibc's `malloc`, with glibc's arena
//! lock held (a handler's own small `malloc` is served from the thread's tcache without that
//! lock, so the program itself survives). Had the tables grown on the host's heap (`malloc` in
//! the shim, `System` in the Rust front end), a sample taken there would wait for that lock
//! forever, or, in a single-threaded process where glibc takes no lock, re-enter glibc's
//! allocator and corrupt its heap. So the sampled path, and the free and realloc paths that
//! remove and re-insert live records, allocate only here: memory mapped with `mmap` and managed
//! by this module, behind a [`SpinMutex`] no host code ever takes.
//!
//! # Design
//!
//! * **Small blocks** (below [`BIG`], 64 KiB) come from a TLSF allocator (the `rlsf` crate):
//!   allocation and free in constant time, freed blocks merged with free neighbours and reused;
//!   a block is its request rounded up to 32 bytes plus a 16-byte header, cut from the first
//!   free block of a size class (16 classes per power of two) that certainly fits. Its pools
//!   are mapped
//!   [`POOL`] (256 KiB) at a time when no free block fits, and kept for the life of the
//!   process.
//! * **Big blocks** (the tables' arrays once they grow past [`BIG`]) are each a private
//!   mapping of their own, rounded up to whole pages: a table that doubles moves with
//!   `mremap` (no copy, the old pages go back to the kernel) and a freed one is unmapped. They
//!   take no lock.
//! * One lock, [`HEAP`], guards the TLSF state. It is held only for a TLSF operation and, when
//!   a pool is added, one `mmap` call: never while calling the host's code, never across a
//!   table operation. Lock order: every table lock (stack stripes, live shards) comes before
//!   it; nothing is taken while it is held. The `fork` handlers take it last and release it
//!   first ([`lock_for_fork`], [`unlock_after_fork`]).
//! * Nothing here allocates, blocks (the lock spins, then yields) or does I/O; `mmap`,
//!   `mremap` and `munmap` are plain system calls that take no user-space lock. A failed
//!   mapping is an allocation failure (the tables' collections then abort, as they did when
//!   the host's allocator failed).
//! * Every byte mapped here counts as profiler memory ([`crate::engine::totals`]'s internal bytes, the
//!   "profiler memory" line of reports).
//!
//! # Bounds
//!
//! The memory mapped is at most the peak of the tables' live small blocks with their headers
//! and rounding, plus the free space between them that TLSF keeps for reuse, plus the rest of
//! the pool being carved up (under 256 KiB); plus the big blocks, each under a page over its
//! size. Nothing is mapped before the first sample, which maps one pool. Big mappings number
//! one per table array past 64 KiB: per stack stripe its index, its distinct addresses and
//! span paths, and its entries, frame codes and lifetime histograms in arrays of a fixed size
//! (a few per 10,000 stacks past the first ones: at most about 2,700 at 10 million stacks, see
//! `tables::ENTRY_CHUNK`); at most 256 live-table shards. That is far below the kernel's limit
//! of mappings per process, and within the 4,096 slots that list them ([`OWN_SLOTS`]).
//! Measured: 888,074 stacks of ~46 frames with a million live records map 276 MiB
//! (BENCHMARKS.md, "A million stacks"); 100,000 live records (4.8 MB) map 6.4 MB (the map's
//! buckets at 7/8 load at most).
//!
//! [`Arena`] is the handle the tables' collections take: `hashbrown`'s map and
//! `allocator-api2`'s `Vec` are parameterised by it.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use allocator_api2::alloc::{AllocError, Allocator};
use rlsf::{FlexSource, FlexTlsf};

use crate::sys::spin::SpinMutex;

/// Requests of at least this many bytes get a mapping of their own.
pub(crate) const BIG: usize = 64 * 1024;
/// The smallest pool mapped for small blocks.
pub(crate) const POOL: usize = 256 * 1024;

/// TLSF over pools from [`Pools`]: first-level classes up to 32 << 14 bytes (512 KiB, above any
/// small block's size), 16 second-level classes each.
type Tlsf = FlexTlsf<Pools, u16, u16, 14, 16>;

/// The tables' small-block heap.
static HEAP: SpinMutex<Tlsf> = SpinMutex::new(FlexTlsf::new(Pools { reserved: false }));
/// The small-block heap of the rest of the profiler's memory under the shim (see
/// [`Profiler`]): a lock of its own, so that a report's many allocations never hold up a
/// sample that grows a table.
static PROFILER_HEAP: SpinMutex<Tlsf> = SpinMutex::new(FlexTlsf::new(Pools { reserved: true }));
/// Bytes mapped here (pools and big blocks, both heaps).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// `len` rounded up to whole pages (`None` on overflow).
fn pages(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(crate::sys::page_size())
}

fn counted_map(p: usize, len: usize) {
    MAPPED.fetch_add(len, Ordering::Relaxed);
    crate::engine::totals::add_internal(len);
    note_own_mapping(p, len);
}

fn counted_unmap(p: usize, len: usize) {
    MAPPED.fetch_sub(len, Ordering::Relaxed);
    crate::engine::totals::sub_internal(len);
    forget_own_mapping(p);
}

/// Slots of [`OWN`]: more than the heap's big blocks (one per table array past [`BIG`], see
/// the module docs' bounds) and pools (one per 256 KiB of small blocks at least) of any profile
/// measured.
const OWN_SLOTS: usize = 4096;
/// Where the profiler's own mappings are (start, length; start 0: a free slot), so that a
/// report can tell their resident pages from the program's (`report/model/rss.rs`). Atomics
/// only: a slot is claimed by a compare-and-swap of its start, on the mapping paths that already
/// make a system call. A mapping made when every slot is taken is not listed (its pages then
/// show as memory Ying did not see).
static OWN: [(AtomicUsize, AtomicUsize); OWN_SLOTS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; OWN_SLOTS];

/// Lists a mapping of the profiler's, `p..p + len` (the heap's, or a debug-info file mapped by
/// `symbols/`).
pub(crate) fn note_own_mapping(p: usize, len: usize) {
    for (start, l) in &OWN {
        if start.load(Ordering::Relaxed) == 0
            && start.compare_exchange(0, p, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            l.store(len, Ordering::Release);
            return;
        }
    }
}

/// Takes the mapping that starts at `p` off the list of [`note_own_mapping`].
pub(crate) fn forget_own_mapping(p: usize) {
    for (start, l) in &OWN {
        if start.load(Ordering::Relaxed) == p {
            l.store(0, Ordering::Release);
            start.store(0, Ordering::Release);
            return;
        }
    }
}

/// Calls `f(start, end)` for each of the profiler's own mappings now, in no order.
pub(crate) fn for_each_own_mapping(mut f: impl FnMut(usize, usize)) {
    for (start, l) in &OWN {
        let s = start.load(Ordering::Acquire);
        let len = l.load(Ordering::Acquire);
        if s != 0 && len != 0 {
            f(s, s + len);
        }
    }
}

/// Bytes the profiler's heap has mapped now (pools and big blocks).
pub(crate) fn mapped_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

/// Maps `len` bytes (a multiple of the page size) of fresh zeroed memory, counted: cut from a
/// reservation when `reserved` and one is held ([`reserve`]), else a new mapping.
fn map(len: usize, reserved: bool) -> Option<NonNull<u8>> {
    if reserved && let Some(p) = carve(len) {
        counted_map(p.as_ptr() as usize, len);
        return Some(p);
    }
    let p = map_fresh(len)?;
    counted_map(p.as_ptr() as usize, len);
    Some(p)
}

/// `len` bytes of fresh, zeroed, private anonymous memory (`mmap`), not counted; `None` when
/// the kernel refuses (a memory limit).
fn map_fresh(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(p.cast())
}

/// Unmaps a mapping of `len` bytes made by [`map`] (or resized by `mremap`), counted.
///
/// # Safety
/// `p` and `len` describe a whole mapping made here that nothing uses any more.
unsafe fn unmap(p: NonNull<u8>, len: usize) {
    // SAFETY: the caller guarantees the range is one of our mappings, no longer used.
    unsafe { libc::munmap(p.as_ptr().cast(), len) };
    counted_unmap(p.as_ptr() as usize, len);
}

/// Where a TLSF heap gets its pools: fresh mappings (cut from a reservation when `reserved`
/// and one is held), never returned.
#[derive(Debug)]
struct Pools {
    reserved: bool,
}

// SAFETY: `alloc` returns a fresh mapping of at least `min_size` bytes, page-aligned (at least
// `min_align`), owned by the heap from then on; pools are never deallocated (`supports_dealloc`
// keeps its default, false).
unsafe impl FlexSource for Pools {
    unsafe fn alloc(&mut self, min_size: usize) -> Option<NonNull<[u8]>> {
        let len = pages(min_size.max(POOL))?;
        let p = map(len, self.reserved)?;
        Some(NonNull::slice_from_raw_parts(p, len))
    }

    fn min_align(&self) -> usize {
        crate::sys::page_size()
    }
}

/// Whether a block of this layout is a big block (a mapping of its own).
fn is_big(layout: Layout) -> bool {
    layout.size() >= BIG
}

/// A non-null, well-aligned pointer for a zero-sized block (never dereferenced or freed).
fn dangling(layout: Layout) -> NonNull<u8> {
    // An address equal to the alignment is non-null and aligned; it is never dereferenced.
    NonNull::new(std::ptr::without_provenance_mut(layout.align())).unwrap_or(NonNull::dangling())
}

/// Which of the two heaps a handle names.
trait Which {
    /// Its small-block heap.
    fn heap() -> &'static SpinMutex<Tlsf>;
    /// Whether its mappings may be cut from a reservation ([`reserve`]).
    const RESERVED: bool;
}

/// The allocator handle of the tables' heap (see the module docs). Zero-sized: every handle
/// names the one heap.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Arena;

impl Which for Arena {
    fn heap() -> &'static SpinMutex<Tlsf> {
        &HEAP
    }
    const RESERVED: bool = false;
}

/// The handle of the heap that holds the rest of the profiler's memory under the shim (its
/// Rust allocator: reports, symbols, the endpoint, threads' state), so that none of it is the
/// program's glibc heap: a program at its memory limit or counting its heap with `mallinfo2`
/// sees none of it, and a report's memory can be reserved before the report starts
/// (`reserve`). The same design as the tables' heap, with a lock of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Profiler;

impl Which for Profiler {
    fn heap() -> &'static SpinMutex<Tlsf> {
        &PROFILER_HEAP
    }
    const RESERVED: bool = true;
}

/// A block of `layout` from heap `W` (see [`Allocator::allocate`]).
fn allocate_in<W: Which>(layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
    if layout.size() == 0 {
        return Ok(NonNull::slice_from_raw_parts(dangling(layout), 0));
    }
    let p = if is_big(layout) {
        if layout.align() > crate::sys::page_size() {
            return Err(AllocError);
        }
        map(pages(layout.size()).ok_or(AllocError)?, W::RESERVED)
    } else {
        W::heap().lock().allocate(layout)
    };
    p.map(|p| NonNull::slice_from_raw_parts(p, layout.size())).ok_or(AllocError)
}

/// Frees a block of heap `W`.
///
/// # Safety
/// `ptr` is a block of heap `W` allocated with `layout`, not used afterwards.
unsafe fn deallocate_in<W: Which>(ptr: NonNull<u8>, layout: Layout) {
    if layout.size() == 0 {
        return;
    }
    if is_big(layout) {
        // SAFETY: a big block is a whole mapping of the rounded size (see `allocate_in`,
        // `resize_in`), and the caller no longer uses it.
        unsafe { unmap(ptr, pages(layout.size()).unwrap_or(layout.size())) };
    } else {
        // SAFETY: a small block came from this TLSF heap with this alignment.
        unsafe { W::heap().lock().deallocate(ptr, layout.align()) };
    }
}

// SAFETY: blocks are valid until deallocated through any `Arena` handle (they all name one
// heap); small blocks come from the TLSF heap with the requested layout, big blocks are whole
// page-aligned mappings at least `layout.size()` long, and an alignment a mapping cannot
// give (beyond a page) is refused; `grow` and `shrink` keep the first
// `min(old, new)` bytes; every returned slice is exactly `layout.size()` long, so the layout
// a caller passes back is the one the block was made with.
unsafe impl Allocator for Arena {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        allocate_in::<Arena>(layout)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's guarantees for `deallocate`.
        unsafe { deallocate_in::<Arena>(ptr, layout) }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's guarantees for `grow` are those of `resize_in`.
        unsafe { resize_in::<Arena>(ptr, old, new) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's guarantees for `shrink` are those of `resize_in`.
        unsafe { resize_in::<Arena>(ptr, old, new) }
    }
}

impl Profiler {
    /// Whether a block of `layout` is a mapping of its own (fresh pages when allocated: zero).
    pub fn is_own_mapping(layout: Layout) -> bool {
        is_big(layout)
    }

    /// A block of `layout`, or null (as `GlobalAlloc::alloc`).
    pub fn alloc(layout: Layout) -> *mut u8 {
        allocate_in::<Profiler>(layout).map_or(std::ptr::null_mut(), |p| p.cast::<u8>().as_ptr())
    }

    /// Frees a block (as `GlobalAlloc::dealloc`).
    ///
    /// # Safety
    /// `ptr` came from [`Profiler::alloc`] or [`Profiler::realloc`] with `layout`, and is not
    /// used afterwards.
    pub unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: the caller's contract.
            unsafe { deallocate_in::<Profiler>(p, layout) }
        }
    }

    /// The block `ptr` of `layout` resized to `new_size` bytes, its contents kept, or null
    /// with the old block untouched (as `GlobalAlloc::realloc`).
    ///
    /// # Safety
    /// As for [`Profiler::dealloc`]; `new_size`, rounded up to the alignment, does not
    /// overflow `isize`.
    pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (Some(p), Ok(new)) =
            (NonNull::new(ptr), Layout::from_size_align(new_size, layout.align()))
        else {
            return std::ptr::null_mut();
        };
        // SAFETY: the caller's contract.
        unsafe { resize_in::<Profiler>(p, layout, new) }
            .map_or(std::ptr::null_mut(), |p| p.cast::<u8>().as_ptr())
    }
}

/// Moves the block `ptr` of layout `old` of heap `W` to one of layout `new`, keeping its first
/// `min(old, new)` bytes: big to big with `mremap` (onto pages cut from a reservation when
/// `W` may use one and one is held, so that a growing block needs no memory beyond it),
/// small to small with the TLSF heap (in place when it can), otherwise a new block, a copy
/// and a free.
///
/// # Safety
/// `ptr` is a block of heap `W` allocated with `old`, not used by the caller afterwards
/// unless this fails.
unsafe fn resize_in<W: Which>(
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
) -> Result<NonNull<[u8]>, AllocError> {
    if old.size() != 0 && new.size() != 0 && old.align() == new.align() {
        if is_big(old) && is_big(new) {
            let from = pages(old.size()).ok_or(AllocError)?;
            let to = pages(new.size()).ok_or(AllocError)?;
            let onto = if W::RESERVED && to > from { carve(to) } else { None };
            // SAFETY: `ptr` is a whole mapping of `from` bytes (a big block); the kernel moves
            // or resizes it and keeps its contents. `onto`, when given, is `to` bytes of a
            // reservation of ours that nothing uses, which the move replaces.
            let p = unsafe {
                match onto {
                    Some(at) => libc::mremap(
                        ptr.as_ptr().cast(),
                        from,
                        to,
                        libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                        at.as_ptr().cast::<libc::c_void>(),
                    ),
                    None => libc::mremap(ptr.as_ptr().cast(), from, to, libc::MREMAP_MAYMOVE),
                }
            };
            if p == libc::MAP_FAILED {
                if let Some(at) = onto {
                    // SAFETY: the carved pages are ours and unused.
                    unsafe { libc::munmap(at.as_ptr().cast(), to) };
                }
                return Err(AllocError);
            }
            counted_unmap(ptr.as_ptr() as usize, from);
            counted_map(p as usize, to);
            let p = NonNull::new(p.cast::<u8>()).ok_or(AllocError)?;
            return Ok(NonNull::slice_from_raw_parts(p, new.size()));
        }
        if !is_big(old) && !is_big(new) {
            // SAFETY: `ptr` came from this TLSF heap with the same alignment as `new`.
            let p = unsafe { W::heap().lock().reallocate(ptr, new) }.ok_or(AllocError)?;
            return Ok(NonNull::slice_from_raw_parts(p, new.size()));
        }
    }
    let p = allocate_in::<W>(new)?;
    // SAFETY: both blocks are valid for the copied length, which neither exceeds; they are
    // distinct blocks; the old one is freed with the layout it was made with.
    unsafe {
        std::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            p.cast::<u8>().as_ptr(),
            old.size().min(new.size()),
        );
        deallocate_in::<W>(ptr, old);
    }
    Ok(p)
}

/// `fork` prepare: takes the heaps' locks (after every table lock; the profiler heap's last,
/// as nothing is taken while it is held).
pub(crate) fn lock_for_fork() {
    HEAP.lock_for_fork();
    PROFILER_HEAP.lock_for_fork();
    RESERVATIONS.lock_for_fork();
}

/// `fork` parent and child: releases what [`lock_for_fork`] took.
pub(crate) fn unlock_after_fork() {
    RESERVATIONS.force_unlock();
    PROFILER_HEAP.force_unlock();
    HEAP.force_unlock();
}

/// The reservations held now: (next free page, end) of each, 0 for a free slot. Few pieces of
/// work hold one at a time (a report set, a live-file version, an endpoint's request, a push).
static RESERVATIONS: SpinMutex<[(usize, usize); 8]> = SpinMutex::new([(0, 0); 8]);

/// Memory mapped for a piece of work before it starts, so that what the work allocates from
/// the profiler heap ([`Profiler`]) comes from memory the process already has: a program at its
/// address-space or data limit, or under strict overcommit, cannot make the work fail halfway
/// (where an infallible allocation would abort the program). While any reservation is held,
/// the profiler heap's new pools and big blocks are cut from it; what is left of it is unmapped
/// when it is dropped. The pages are not touched until used: a reservation costs address space
/// and commit charge, no resident memory.
#[derive(Debug)]
pub(crate) struct Reservation {
    start: usize,
    len: usize,
}

/// Maps `bytes` (rounded up to pages) as a reservation; `None` when the mapping fails (the
/// limit is near: the caller skips its work) or every slot is taken.
pub(crate) fn reserve(bytes: usize) -> Option<Reservation> {
    let len = pages(bytes.max(1))?;
    let start = map_fresh(len)?.as_ptr() as usize;
    let mut slots = RESERVATIONS.lock();
    match slots.iter_mut().find(|s| s.0 == 0) {
        Some(slot) => {
            *slot = (start, start + len);
            Some(Reservation { start, len })
        }
        None => {
            drop(slots);
            // SAFETY: just mapped here, used by nothing.
            unsafe { libc::munmap(start as *mut libc::c_void, len) };
            None
        }
    }
}

/// `len` bytes (a multiple of the page size) cut from a reservation held now, if one has them.
fn carve(len: usize) -> Option<NonNull<u8>> {
    let mut slots = RESERVATIONS.lock();
    let slot = slots.iter_mut().find(|s| s.0 != 0 && s.1 - s.0 >= len)?;
    let p = slot.0;
    slot.0 += len;
    NonNull::new(p as *mut u8)
}

impl Reservation {
    /// Bytes of it not used yet.
    pub(crate) fn left(&self) -> usize {
        RESERVATIONS
            .lock()
            .iter()
            .find(|s| s.1 == self.start + self.len && s.0 != 0)
            .map_or(0, |s| s.1 - s.0)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let end = self.start + self.len;
        let mut slots = RESERVATIONS.lock();
        let Some(slot) = slots.iter_mut().find(|s| s.1 == end && s.0 != 0) else { return };
        let next = slot.0;
        *slot = (0, 0);
        drop(slots);
        if next < end {
            // SAFETY: the pages from `next` to `end` were never cut from the reservation: they
            // are ours and unused.
            unsafe { libc::munmap(next as *mut libc::c_void, end - next) };
        }
    }
}

/// A `Vec` in the profiler's heap.
pub(crate) type ArenaVec<T> = allocator_api2::vec::Vec<T, Arena>;

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn small_blocks_are_reused_after_free() {
        // A heap of its own: other tests allocate from the shared one at the same time.
        let mut heap: Tlsf = FlexTlsf::new(Pools { reserved: false });
        let l = layout(200, 8);
        let a = heap.allocate(l).unwrap();
        // SAFETY: `a` was just allocated from `heap` with `l`'s alignment.
        unsafe { heap.deallocate(a, l.align()) };
        let b = heap.allocate(l).unwrap();
        assert_eq!(a, b, "a freed block of the same size is handed out again");
        let c = heap.allocate(layout(40_000, 8)).unwrap();
        assert!(c != b, "a live block is not handed out twice");
    }

    #[test]
    fn blocks_hold_their_contents_across_resizes_and_honour_alignment() {
        let mut l = layout(24, 64);
        let p = Arena.allocate(l).unwrap().cast::<u8>();
        assert_eq!(p.as_ptr() as usize % 64, 0);
        // SAFETY: `p` is valid for 24 bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xAB, 24) };
        let mut p = p;
        // Small to small, small to big, big to bigger, big to small.
        for size in [4000, 100_000, 3 << 20, 1000] {
            let n = layout(size, 64);
            // SAFETY: `p` was allocated with `l`; it is not used again unless this fails.
            p = unsafe {
                if size > l.size() { Arena.grow(p, l, n) } else { Arena.shrink(p, l, n) }
            }
            .unwrap()
            .cast();
            assert_eq!(p.as_ptr() as usize % 64, 0);
            // SAFETY: the block keeps its first 24 bytes.
            let kept = unsafe { std::slice::from_raw_parts(p.as_ptr(), 24) };
            assert!(kept.iter().all(|&b| b == 0xAB), "contents kept at {size} bytes");
            // SAFETY: the block is `size` bytes long.
            unsafe { p.as_ptr().add(size - 1).write(1) };
            l = n;
        }
        // SAFETY: `p` was allocated (last resized) with `l`.
        unsafe { Arena.deallocate(p, l) };
    }

    #[test]
    fn big_blocks_are_mappings_counted_while_they_live() {
        // Other tests share the heap and map or unmap a few MiB at the same time: a 64 MiB
        // block stands out from that by far.
        const SIZE: usize = 64 << 20;
        const SLACK: usize = 16 << 20;
        let l = layout(SIZE, 8);
        let before = mapped_bytes();
        let p = Arena.allocate(l).unwrap().cast::<u8>();
        let during = mapped_bytes();
        assert!(during + SLACK >= before + SIZE, "{before} -> {during}");
        // SAFETY: `p` was just allocated with `l`.
        unsafe { Arena.deallocate(p, l) };
        let after = mapped_bytes();
        assert!(after + SIZE <= during + SLACK, "the mapping is returned: {during} -> {after}");
    }

    #[test]
    fn a_reservation_serves_the_profiler_heap_and_gives_back_the_rest() {
        // Other tests allocate from the profiler heap too: a reservation is cut from by
        // whoever maps while it is held, so only what this test sees of it is checked.
        let r = reserve(8 << 20).expect("8 MiB mapped");
        let (start, end) = (r.start, r.start + r.len);
        let l = layout(1 << 20, 8);
        let p = Profiler::alloc(l);
        assert!(!p.is_null());
        assert!((start..end).contains(&(p as usize)), "a big block cut from the reservation");
        assert!(r.left() <= (8 << 20) - (1 << 20));
        // Grown past its pages: moved onto pages of the reservation, contents kept.
        // SAFETY: `p` is valid for 1 MiB.
        unsafe { p.write(42) };
        // SAFETY: `p` was allocated with `l`.
        let q = unsafe { Profiler::realloc(p, l, 3 << 20) };
        assert!((start..end).contains(&(q as usize)), "grown onto the reservation");
        // SAFETY: `q` keeps the first byte.
        assert_eq!(unsafe { q.read() }, 42);
        drop(r);
        // The rest is unmapped: a byte past the blocks' pages faults no more than the blocks'
        // own pages stay usable.
        // SAFETY: `q` is valid for 3 MiB.
        unsafe { q.add((3 << 20) - 1).write(7) };
        // SAFETY: `q` was resized to 3 MiB with `l`'s alignment.
        unsafe { Profiler::dealloc(q, layout(3 << 20, 8)) };
        assert!(reserve(usize::MAX / 2).is_none(), "an impossible reservation is refused");
    }

    #[test]
    fn collections_live_in_the_arena() {
        let mut v: ArenaVec<usize> = ArenaVec::new_in(Arena);
        let mut m: hashbrown::HashMap<usize, usize, std::hash::RandomState, Arena> =
            hashbrown::HashMap::with_hasher_in(std::hash::RandomState::new(), Arena);
        for i in 0..50_000 {
            v.push(i);
            m.insert(i, i * 2);
        }
        assert_eq!(v.iter().sum::<usize>(), 50_000 * 49_999 / 2);
        assert_eq!(m.get(&777), Some(&1554));
        assert!(mapped_bytes() >= 50_000 * 8);
    }
}
