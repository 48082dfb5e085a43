//! glibc's own definition of a function the shim exports: the next one after this library in
//! the lookup order (`dlsym(RTLD_NEXT)`), looked up once into a slot and called from there.
//! The safe points, the signal and user-change wrappers, `exit` and `exec` forward this way.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use ying_profiler::front_end::hooks;

use crate::host::thread_state;

/// glibc's definition of `name` (the next after this library), looked up once into `slot`:
/// 0 = not yet, 1 = not found (so a missing function is not looked up again, perhaps from a
/// signal handler). Returns 0 when there is none. The lookup's own allocations are the
/// profiler's.
#[inline(always)]
pub(crate) fn next(slot: &AtomicUsize, name: &CStr) -> usize {
    let f = slot.load(Ordering::Acquire);
    if f > 1 {
        return f;
    }
    look_up(slot, name, f)
}

/// The rare part of [`next`], out of line so that a wrapper's usual path keeps no frame.
#[cold]
#[inline(never)]
fn look_up(slot: &AtomicUsize, name: &CStr, mut f: usize) -> usize {
    if f == 0 {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition after this
        // library in the lookup order. Called in the program's own call, outside every hook.
        f = hooks::run_guarded(thread_state(), || unsafe {
            libc::dlsym(libc::RTLD_NEXT, name.as_ptr())
        }) as usize;
        f = f.max(1);
        slot.store(f, Ordering::Release);
    }
    if f == 1 { 0 } else { f }
}

/// glibc's `name` as a function of type `F`, looked up through `slot` (see [`next`]); `None`
/// when glibc has none.
///
/// # Safety
/// `F` is the `unsafe extern "C" fn` type of glibc's `name` (a pointer-sized function pointer).
#[inline(always)]
pub(crate) unsafe fn real<F: Copy>(slot: &AtomicUsize, name: &CStr) -> Option<F> {
    let f = next(slot, name);
    // SAFETY: `f` is the non-null address of glibc's `name`, whose type is `F` (the caller's
    // contract); a function pointer has the size of a `usize`.
    (f != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&f) })
}

/// Passes a call on to glibc's `name` (found through `slot`, see [`next`]) with `call`; when
/// glibc has none, `errno` is `ENOSYS` and the result `failed`, as a missing system call's.
/// The safe points' slow path and the changes of user forward this way.
///
/// # Safety
/// As for [`real`]: `F` is the function type of glibc's `name`.
pub(crate) unsafe fn forward<F: Copy, R>(
    slot: &AtomicUsize,
    name: &CStr,
    failed: R,
    call: impl FnOnce(F) -> R,
) -> R {
    // SAFETY: the caller's contract.
    match unsafe { real::<F>(slot, name) } {
        Some(f) => call(f),
        None => {
            // SAFETY: `__errno_location` returns the calling thread's errno slot.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            failed
        }
    }
}
