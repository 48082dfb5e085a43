//! The shim's own Rust allocator: the profiler heap (`ying_profiler::front_end::ProfilerHeap`,
//! mappings of the profiler's own managed like its tables'), never glibc's heap and never
//! through the exported hooks. So the profiler's caches, report buffers and threads' state are
//! never sampled and can never recurse; a program that counts its heap with `mallinfo2`, or
//! lives at its `RLIMIT_AS` or `RLIMIT_DATA`, finds none of the profiler's memory in it; and a
//! report's memory can be reserved before the report starts
//! (`ying_profiler::front_end::reserve`).

use std::alloc::{GlobalAlloc, Layout};

use ying_profiler::front_end::ProfilerHeap;

/// `GlobalAlloc` over the profiler heap, counted as profiler memory (by the mappings it makes).
#[derive(Debug)]
pub(crate) struct OwnHeap;

// SAFETY: every method forwards to the profiler heap, which returns blocks of at least the
// layout's size and alignment (or null), frees them with the layout they were made with, and
// keeps a resized block's first `min(old, new)` bytes.
unsafe impl GlobalAlloc for OwnHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ProfilerHeap::alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = ProfilerHeap::alloc(layout);
        // Blocks of a mapping of their own are fresh pages, zero already (not touched here, so
        // a large zeroed buffer costs no resident memory until written).
        if !p.is_null() && !ProfilerHeap::is_own_mapping(layout) {
            // SAFETY: `p` is valid for `layout.size()` bytes.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator with `layout` (GlobalAlloc's contract).
        unsafe { ProfilerHeap::dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; GlobalAlloc's contract bounds `new_size`.
        unsafe { ProfilerHeap::realloc(ptr, layout, new_size) }
    }
}
