//! Thread start: every thread the program creates with `pthread_create` (the export in
//! `lib.rs`) first runs [`trampoline`], which sets the thread up before any of the program's
//! code: its counters join the totals, its exit handler is registered, and its stack bounds are
//! recorded for the unwinder. Doing this at the start, not at the thread's first allocation,
//! is what makes thread exit safe:
//!
//! - A thread is set up only where its exit handler is certain to run later. A thread whose
//!   first hooked call comes after its key destructors (a detached thread that never
//!   allocated: glibc frees its TLS last) would otherwise register a pointer into a stack that
//!   is about to be unmapped. Threads this shim did not see start (glibc's internal helper
//!   threads) are never registered: they count in the shared counters (see `hooks`).
//! - `pthread_getattr_np`, the only source of a thread's stack bounds, allocates while holding
//!   the thread's own lock. Asked from a sample taken inside it, it would wait for itself
//!   forever. Here nothing of the program's is running yet, so asking is safe.
//!
//! The trampoline is C (src/thread_start.c), so `pthread_exit` and cancellation (a forced
//! unwind through its frame) pass through it whatever Rust's panic strategy, and it tail-calls
//! the program's start routine. Should a compiler keep its frame anyway, the capture leaves
//! frames of this library below the program's out (`Host::is_own_code`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use ying_profiler::__private::hooks;

use crate::host::{SETTINGS, ShimHost, thread_state};

/// A thread's start routine, as `pthread_create` receives it.
pub(crate) type StartRoutine = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// glibc's `pthread_create`.
type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> libc::c_int;

unsafe extern "C" {
    /// The trampoline (src/thread_start.c): copies the [`Start`] record, calls its `begin`,
    /// then the program's routine.
    fn ying_thread_trampoline(p: *mut c_void) -> *mut c_void;
}

/// The next `pthread_create` after ours (glibc's), looked up once: 0 = not yet.
static REAL_CREATE: AtomicUsize = AtomicUsize::new(0);

fn real_create() -> Option<CreateFn> {
    let mut f = REAL_CREATE.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: dlsym with a valid NUL-terminated name. It runs in the creating thread,
        // outside every allocation hook; its own allocations are the profiler's (guarded).
        let p = hooks::run_guarded(thread_state(), || unsafe {
            libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr())
        });
        f = p as usize;
        REAL_CREATE.store(f, Ordering::Release);
    }
    // SAFETY: a non-zero value is the address of the next `pthread_create` in lookup order,
    // whose signature is `CreateFn`.
    (f != 0).then(|| unsafe { std::mem::transmute::<usize, CreateFn>(f) })
}

/// The trampoline's record (`struct ying_start` in src/thread_start.c).
#[repr(C)]
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    begin: extern "C" fn(*mut c_void),
}

/// `pthread_create` through the trampoline.
///
/// # Safety
/// As for `pthread_create`.
pub(crate) unsafe fn create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> libc::c_int {
    // The program is becoming multi-threaded: a safe point to start the report thread too.
    crate::start::safe_point();
    let Some(real) = real_create() else {
        return libc::EAGAIN;
    };
    // The record is the profiler's own memory (the library's allocator goes straight to
    // glibc), freed by the new thread.
    let start = Box::into_raw(Box::new(Start { routine, arg, begin }));
    // SAFETY: the caller's arguments are passed on unchanged; the trampoline takes ownership of
    // `start` only if the thread is created.
    let rc = unsafe { real(thread, attr, ying_thread_trampoline, start.cast()) };
    if rc != 0 {
        // SAFETY: no thread was created, so `start` is still ours.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// Called by the trampoline on the new thread, before the program's routine: frees the record
/// (the trampoline copied it) and sets the thread up.
extern "C" fn begin(p: *mut c_void) {
    // SAFETY: `p` is the `Start` that `create` leaked for exactly this thread; the trampoline
    // no longer reads it.
    drop(unsafe { Box::from_raw(p.cast::<Start>()) });
    started();
}

/// Sets the calling thread up as a started thread (see the module docs). Also the main
/// thread's set-up, from the constructor.
pub(crate) fn started() {
    let ts = thread_state();
    // Profiler code: `pthread_getattr_np`'s allocations are ours. Not under a seccomp filter:
    // it asks the kernel (`sched_getaffinity`); the unwinder then falls back to libgcc's.
    let stack = if ying_profiler::__private::seccomp::restricted_here() {
        None
    } else {
        hooks::run_guarded(ts, ying_profiler::__private::stack_bounds)
    };
    hooks::thread_started::<ShimHost>(ts, &SETTINGS, stack);
}
