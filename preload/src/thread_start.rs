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
//! Thread start and end also keep the count of the program's live threads (not Ying's own:
//! a thread created by profiler code is not counted), so that a program whose last thread
//! ends while Ying's report thread runs still ends: see [`program_thread_ended`].
//!
//! The trampoline is C (src/thread_start.c), so `pthread_exit` and cancellation (a forced
//! unwind through its frame) pass through it whatever Rust's panic strategy, and it tail-calls
//! the program's start routine. Should a compiler keep its frame anyway, the capture leaves
//! frames of this library below the program's out (`Host::own_code`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use ying_profiler::front_end::hooks;

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

/// The trampoline's record (`struct ying_start` in src/thread_start.c), and whether the
/// thread is one of the program's (counted in [`PROGRAM_THREADS`] by its creator).
#[repr(C)]
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    begin: extern "C" fn(*mut c_void),
    program: bool,
}

/// The program's threads alive now: the main thread, and every thread created through our
/// `pthread_create` outside profiler code, from its creation (counted by its creator, so that
/// a creator that ends at once cannot bring the count to zero before the new thread starts)
/// until its `PROGRAM_KEY` destructor ran. A thread that never passed through our
/// `pthread_create` (created before the constructor, by glibc itself, or with a raw `clone`)
/// is not counted; the report thread looks for such threads before ending the process.
static PROGRAM_THREADS: AtomicU32 = AtomicU32::new(0);

/// The key whose destructor marks the end of a counted thread: 0 = not created, else key + 1.
/// Created by the constructor; its value is non-null on every counted thread.
static PROGRAM_KEY: AtomicU32 = AtomicU32::new(0);

/// glibc runs a thread's key destructors when it returns from its start routine, calls
/// `pthread_exit` (the main thread too) or is cancelled, never on `exit`.
extern "C" fn program_thread_ended(_: *mut c_void) {
    if PROGRAM_THREADS.fetch_sub(1, Ordering::SeqCst) == 1 {
        ying_profiler::front_end::program_threads_ended(true);
    }
}

/// Creates the key and counts the main thread (the constructor, on the main thread).
pub(crate) fn count_main_thread() {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor is an extern "C" fn. Run as profiler
    // code: creating a key may allocate.
    let rc = hooks::run_guarded(thread_state(), || unsafe {
        libc::pthread_key_create(&mut key, Some(program_thread_ended))
    });
    if rc != 0 {
        return; // Nothing counted: the process behaves as before (never ended by Ying).
    }
    PROGRAM_KEY.store(key + 1, Ordering::SeqCst);
    PROGRAM_THREADS.fetch_add(1, Ordering::SeqCst);
    mark_counted();
}

/// Sets the calling (counted) thread's key, so that its end is seen; gives its count back when
/// that fails.
fn mark_counted() {
    let key = PROGRAM_KEY.load(Ordering::SeqCst);
    // SAFETY: `key - 1` is a created key; the value (any non-null pointer) is only tested by
    // glibc before it calls our destructor. Profiler code: the first value set may allocate
    // glibc's second-level key array.
    let rc = hooks::run_guarded(thread_state(), || unsafe {
        libc::pthread_setspecific(key - 1, std::ptr::NonNull::<u8>::dangling().as_ptr().cast())
    });
    if rc != 0 {
        program_thread_ended(std::ptr::null_mut());
    }
}

/// `fork` child: the forking thread is the only one, counted if its key is set.
pub(crate) fn count_after_fork_child() {
    let key = PROGRAM_KEY.load(Ordering::SeqCst);
    // SAFETY: reads the calling thread's value of a created key.
    let counted = key != 0 && !unsafe { libc::pthread_getspecific(key - 1) }.is_null();
    PROGRAM_THREADS.store(counted as u32, Ordering::SeqCst);
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
    let Some(real) = real_create() else {
        return libc::EAGAIN;
    };
    // Profiler code creates Ying's own threads, which are not counted.
    let program = PROGRAM_KEY.load(Ordering::SeqCst) != 0 && !hooks::is_guarded(thread_state());
    if program && PROGRAM_THREADS.fetch_add(1, Ordering::SeqCst) == 0 {
        // Only a thread that is not counted (see PROGRAM_THREADS) creates one after the count
        // reached zero: the program goes on.
        ying_profiler::front_end::program_threads_ended(false);
    }
    // The record is the profiler's own memory (the library's allocator goes straight to
    // glibc), freed by the new thread.
    let start = Box::into_raw(Box::new(Start { routine, arg, begin, program }));
    // SAFETY: the caller's arguments are passed on unchanged; the trampoline takes ownership of
    // `start` only if the thread is created.
    let rc = unsafe { real(thread, attr, ying_thread_trampoline, start.cast()) };
    if rc != 0 {
        // SAFETY: no thread was created, so `start` is still ours.
        drop(unsafe { Box::from_raw(start) });
        if program {
            program_thread_ended(std::ptr::null_mut());
        }
    }
    rc
}

/// Called by the trampoline on the new thread, before the program's routine: frees the record
/// (the trampoline copied it) and sets the thread up.
extern "C" fn begin(p: *mut c_void) {
    // SAFETY: `p` is the `Start` that `create` leaked for exactly this thread; the trampoline
    // no longer reads it.
    let start = unsafe { Box::from_raw(p.cast::<Start>()) };
    let program = start.program;
    drop(start);
    started();
    if program {
        mark_counted();
    }
}

/// Sets the calling thread up as a started thread (see the module docs). Also the main
/// thread's set-up, from the constructor.
pub(crate) fn started() {
    let ts = thread_state();
    // Profiler code: `pthread_getattr_np`'s allocations are ours. Not under a seccomp filter:
    // it asks the kernel (`sched_getaffinity`); the unwinder then falls back to libgcc's.
    let stack = if ying_profiler::front_end::seccomp::restricted_here() {
        None
    } else {
        hooks::run_guarded(ts, ying_profiler::front_end::stack_bounds)
    };
    hooks::thread_started::<ShimHost>(ts, &SETTINGS, stack);
}
