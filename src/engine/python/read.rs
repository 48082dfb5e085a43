//! Reading the interpreter's memory from inside `malloc`: plain loads where the structure
//! vouches for the address (see the module docs of [`super`]), and a read that fails instead of
//! faulting where it does not (a code object met for the first time, the first walks of a
//! process while the layout is being checked).
//!
//! The faulting-safe read is `process_vm_readv` on the process itself (no lock, no allocation,
//! `EFAULT` for an unmapped address). Where a seccomp filter refuses it (a container's default
//! profile answers `EPERM`), `mincore` on the pages tells whether they are mapped, and the
//! plain load follows: the objects read this way are the interpreter's heap objects, never in
//! `PROT_NONE` memory.

use std::sync::atomic::{AtomicBool, Ordering};

/// Lowest and (exclusive) highest address a user-space object of the interpreter's can have.
const LOW: usize = 4096;
const HIGH: usize = 1 << 47;

/// `process_vm_readv` was refused once: `mincore` and plain loads from then on.
static VM_READ_REFUSED: AtomicBool = AtomicBool::new(false);

/// How one walk reads memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    /// Every read checked (`process_vm_readv` or `mincore`), or plain loads.
    pub(crate) checked: bool,
}

impl Reader {
    /// Copies `out.len()` bytes from `addr`; false when the address is implausible or, for a
    /// checked reader, not mapped.
    pub(crate) fn bytes(self, addr: usize, out: &mut [u8]) -> bool {
        let Some(end) = addr.checked_add(out.len()) else { return false };
        if addr < LOW || end > HIGH {
            return false;
        }
        if self.checked {
            safe_read(addr, out)
        } else {
            // SAFETY: the caller vouches that `addr..end` is mapped and readable (the module
            // docs of `super` say why for each kind of read); it does not overlap `out`, a
            // buffer of the profiler's.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len())
            };
            true
        }
    }

    /// The machine word at `addr` (8-aligned).
    pub(crate) fn word(self, addr: usize) -> Option<usize> {
        if addr % 8 != 0 {
            return None;
        }
        let mut b = [0u8; 8];
        self.bytes(addr, &mut b).then(|| usize::from_ne_bytes(b))
    }

    /// The 4-byte integer at `addr`.
    pub(crate) fn i32(self, addr: usize) -> Option<i32> {
        let mut b = [0u8; 4];
        self.bytes(addr, &mut b).then(|| i32::from_ne_bytes(b))
    }

    /// The byte at `addr`.
    pub(crate) fn byte(self, addr: usize) -> Option<u8> {
        let mut b = [0u8; 1];
        self.bytes(addr, &mut b).then_some(b[0])
    }
}

/// Reads `out.len()` bytes at `addr` of this process without faulting.
fn safe_read(addr: usize, out: &mut [u8]) -> bool {
    if !VM_READ_REFUSED.load(Ordering::Relaxed) {
        let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: out.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: out.len() };
        let _e = crate::sys::ErrnoGuard::save();
        // SAFETY: `local` describes `out`, which is writable for its length; the kernel checks
        // `remote` and fails with EFAULT instead of faulting. No lock, no allocation.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n == out.len() as isize {
            return true;
        }
        let err = std::io::Error::last_os_error().raw_os_error();
        if n >= 0 || err == Some(libc::EFAULT) || err == Some(libc::ESRCH) {
            return false;
        }
        VM_READ_REFUSED.store(true, Ordering::Relaxed);
    }
    if !mapped(addr, out.len()) {
        return false;
    }
    // SAFETY: every page of `addr..addr + len` is mapped (`mincore` said so just now), and the
    // interpreter's objects are never in `PROT_NONE` memory (see the module docs).
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
    true
}

/// Whether every page of `addr..addr + len` is mapped (`mincore` fails with `ENOMEM` otherwise).
fn mapped(addr: usize, len: usize) -> bool {
    let page = crate::sys::page_size();
    let start = addr & !(page - 1);
    let end = (addr + len.max(1)).next_multiple_of(page);
    let mut vec = [0u8; 4];
    if (end - start) / page > vec.len() {
        return false;
    }
    let _e = crate::sys::ErrnoGuard::save();
    // SAFETY: `start` is page-aligned, `vec` has room for one byte per page of the range.
    unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) == 0 }
}
