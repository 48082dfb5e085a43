//! The real mapping calls behind the shim's `mmap`, `mmap64`, `munmap` and `mremap` (exported
//! in `lib.rs`, counted by the engine's `mapped`): the system calls themselves, through glibc's
//! `syscall()`, which sets `errno` on failure and leaves it alone on success, as glibc's own
//! wrappers do.
//!
//! Why not glibc's functions found with `dlsym(RTLD_NEXT)`: a mapping call can come before the
//! shim's constructor (another library's constructor), from inside another allocator that
//! holds its own lock (jemalloc or mimalloc built into a program map through these symbols),
//! or from the profiler's own heap; `dlsym` may allocate and takes the loader's lock, and a
//! lazily resolved pointer needs a fallback for the first calls anyway. The system call needs
//! nothing: no lookup, no lock, no allocation, and it cannot reach this library again. On
//! x86_64 and aarch64 glibc 2.36's wrappers add nothing the kernel does not do itself (the
//! offset's page alignment is checked by the kernel too) except `mmap`'s optional
//! `MAP_32BIT` for executable mappings under the `glibc.cpu.prefer_map_32bit_exec` tunable,
//! which these calls do not apply. Another interposer of these symbols loaded after this
//! library is not called (its mappings would be counted as the program's anyway).

use std::ffi::c_void;

/// `mmap(2)`.
///
/// # Safety
/// As for `mmap(2)`: a `MAP_FIXED` mapping replaces whatever was mapped there.
pub(crate) unsafe fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments, passed to the kernel as they are, under the caller's
    // contract. On failure `syscall` returns -1, which is MAP_FAILED, and sets errno.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) as *mut c_void }
}

/// `munmap(2)`.
///
/// # Safety
/// As for `munmap(2)`: nothing in the range may be used afterwards.
pub(crate) unsafe fn munmap(addr: *mut c_void, len: usize) -> libc::c_int {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as libc::c_int }
}

/// `mremap(2)`; `new_addr` is passed only with `MREMAP_FIXED`, as glibc's wrapper does.
///
/// # Safety
/// As for `mremap(2)`: the old range may move, and `MREMAP_FIXED` replaces what was mapped at
/// `new_addr`.
pub(crate) unsafe fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: libc::c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let new_addr = if flags & libc::MREMAP_FIXED != 0 { new_addr } else { std::ptr::null_mut() };
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe {
        libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
    }
}
