//! The shim's own Rust allocator: straight to glibc, never through the exported hooks, so the
//! profiler's tables, caches and report buffers are never sampled and can never recurse.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
}

/// glibc's malloc guarantees this alignment.
const MIN_ALIGN: usize = 16;

/// `GlobalAlloc` over glibc's `__libc_*` entry points, counted as profiler memory.
#[derive(Debug)]
pub(crate) struct LibcAlloc;

// SAFETY: every method returns memory from glibc with at least `layout.align()` alignment
// (memalign above 16 bytes) and frees it with glibc's free; sizes are passed through unchanged.
unsafe impl GlobalAlloc for LibcAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ying_profiler::front_end::hooks::internal_alloc(layout.size());
        // SAFETY: plain glibc allocation calls with valid arguments.
        unsafe {
            if layout.align() <= MIN_ALIGN {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            ying_profiler::front_end::hooks::internal_alloc(layout.size());
            // SAFETY: plain glibc allocation call.
            unsafe { __libc_calloc(1, layout.size()).cast() }
        } else {
            // SAFETY: `alloc` returns a block of `layout.size()` bytes or null.
            let p = unsafe { self.alloc(layout) };
            if !p.is_null() {
                // SAFETY: `p` is valid for `layout.size()` bytes.
                unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ying_profiler::front_end::hooks::internal_free(layout.size());
        // SAFETY: `ptr` came from glibc through this allocator.
        unsafe { __libc_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MIN_ALIGN {
            // SAFETY: `ptr` came from glibc's malloc family through this allocator.
            let p: *mut u8 = unsafe { __libc_realloc(ptr.cast(), new_size).cast() };
            if !p.is_null() {
                ying_profiler::front_end::hooks::internal_free(layout.size());
                ying_profiler::front_end::hooks::internal_alloc(new_size);
            }
            return p;
        }
        // SAFETY: the new layout is valid (same alignment, non-zero size by contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: see `alloc`.
        let p = unsafe { self.alloc(new_layout) };
        if !p.is_null() {
            // SAFETY: both blocks are valid for the copied length and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        p
    }
}
