//! Safe points: functions the shim exports (in `lib.rs`, with the [`safe_point`] macro defined
//! here) only to learn that the program reached a place where the report thread can be started
//! (`start::safe_point`), then passes on to glibc's.
//!
//! A safe point is a call the program makes itself, outside every allocation function (so no
//! glibc lock of an allocation is held) and outside signal handlers. They are where a
//! long-running program spends its time, of two kinds (`start::Wait`):
//!
//! - **`Always`**: functions that are *not* async-signal-safe, so a handler may not call them:
//!   creating a thread (`pthread_create`, in `thread_start`), sleeping (`nanosleep`,
//!   `clock_nanosleep`, `usleep`, `thrd_sleep`: glibc's reach the kernel without passing through
//!   the `nanosleep` export), waiting for events (`epoll_wait`, `epoll_pwait`, `epoll_pwait2`)
//!   and on a condition (`pthread_cond_wait`, `pthread_cond_timedwait`).
//! - **`OutsideHandlers`**: async-signal-safe waits (`sleep`, `poll`, `ppoll`, `select`,
//!   `pselect`, `read`, `sigwait`, `sigwaitinfo`, `sigtimedwait`, `sigsuspend`, `pause`,
//!   `wait`, `waitpid`, `wait4`, `waitid`, `accept`, `accept4`): safe points only while the
//!   thread is in none of the program's signal handlers (`signals`, which wraps `sigaction` and
//!   the `signal` family to count the handler depth).
//!
//! Each export's usual path (the thread started, or none due) is two loads (the thread's
//! state, relaxed, and glibc's function, found by the constructor: [`next`], from `lib.rs`'s
//! `warm_lookups`, since a first call from a signal handler must not need `dlsym`), two
//! compares and a tail jump: 7 instructions, and no frame of ours below glibc's function, so a
//! cancellation unwinds straight through (BENCHMARKS.md). The kind, the handler depth, the exit
//! flag and the pid are only looked at, out of line, while the thread is due, so `read`, `poll`
//! or `waitpid` in a hot loop pay nothing more.
//!
//! # Hazards of starting the thread lazily
//!
//! - Creating a thread allocates (its TLS, our start record) and takes glibc's locks (the stack
//!   cache, the loader's TLS lock). From inside an allocation function, those locks or the
//!   arena's may already be held by the same thread (glibc allocates while holding them), and
//!   from a signal handler by the interrupted code: a deadlock or a half-updated loader state.
//!   Hence only these exports, never the hooks, ever start it.
//! - Our own `pthread_create` is both a safe point and the way the thread is created: the state
//!   moves to "started" before the creation, so the nested call does nothing.
//! - At exit (`exit` sleeping while it waits for a dump in flight calls `nanosleep`) no thread
//!   may start: the safe point checks the exit flag first.
//! - A `fork` child inherits "started" from a parent whose thread did not survive the fork: the
//!   child handler sets it back to "due".
//! - A `vfork` child (or `posix_spawn`'s `CLONE_VM` child) shares the parent's memory and TLS
//!   (and so the "due" state): a thread started there would run in the wrong process and leave
//!   the parent believing it has one. Before starting, the raw `getpid` system call is compared
//!   with the pid the constructor (or the `fork` child handler) recorded; on a mismatch nothing
//!   starts and the state stays "due" for the parent. A child made by a raw `clone` or `_Fork`
//!   (no `fork` handlers) is treated the same way.
//! - A signal handler that leaves by `siglongjmp` leaves its thread's depth raised: that thread's
//!   `OutsideHandlers` waits stop being safe points (see `signals`).
//! - A program that calls `unshare(CLONE_NEWUSER)` after a safe point is multi-threaded by then
//!   (see the README's Limits); one that never reaches a safe point gets no periodic reports,
//!   and, when it ran long enough to miss something it asked for, one `ying:` line at exit
//!   (`start::warn_if_never_started`).

macro_rules! safe_point {
    ($(#[$doc:meta])* $kind:ident $real:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        /// glibc's function of the same name (see `glibc_next::next`).
        static $real: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        $(#[$doc])*
        ///
        /// # Safety
        /// As for glibc's function of the same name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            /// glibc's function.
            type Real = unsafe extern "C" fn($($ty),*) -> $ret;
            // The usual path, kept free of saved registers: no thread due, glibc's function
            // known, a tail jump to it.
            let f = $real.load(std::sync::atomic::Ordering::Acquire);
            if !crate::start::thread_due() && f > 1 {
                // SAFETY: `f` is the address of glibc's function of this name (a value above 1
                // is a dlsym result), whose signature this is.
                let real: Real = unsafe { std::mem::transmute(f) };
                // SAFETY: the caller's arguments, passed on under the same contract.
                return unsafe { real($($arg),*) };
            }
            #[cold]
            #[inline(never)]
            unsafe fn slow($($arg: $ty),*) -> $ret {
                crate::start::safe_point(crate::start::Wait::$kind);
                // Checked at compile time (a per-call check would scan the name each time).
                const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
                    concat!(stringify!($name), "\0").as_bytes(),
                ) {
                    Ok(n) => n,
                    Err(_) => panic!("a function name has no NUL inside"),
                };
                // SAFETY: `Real` is the signature of glibc's function of this name, called
                // with the caller's arguments under the same contract.
                unsafe {
                    crate::glibc_next::forward(&$real, NAME, (-1i64) as $ret, |real: Real| {
                        real($($arg),*)
                    })
                }
            }
            // SAFETY: the caller's arguments, under the caller's contract.
            unsafe { slow($($arg),*) }
        }
    };
}

/// Defines an exported safe point (used in `lib.rs`, where every export lives).
pub(crate) use safe_point;
