//! The program's signal handlers, seen through `sigaction`, `signal`, `bsd_signal`,
//! `sysv_signal` and `sigset` (the exports in `lib.rs`), so that a safe point can tell whether
//! its thread is inside a handler.
//!
//! A handler may call the async-signal-safe waits (`read`, `poll`, `waitpid`, `sleep`, ...),
//! and starting the report thread there could deadlock on a glibc lock the interrupted code
//! holds. So every real handler the program installs (anything but `SIG_DFL`, `SIG_IGN`,
//! `SIG_HOLD`) is recorded per signal and the kernel is given a trampoline instead
//! (src/signals.c) that raises the thread's handler depth around the program's handler; those
//! waits are safe points only at depth 0 ([`in_handler`]).
//!
//! - **What the program sees is what it installed.** The kernel's disposition stays the source
//!   of truth: the trampoline is installed with the program's own flags (`SA_RESTART`,
//!   `SA_NODEFER`, `SA_ONSTACK`, `SA_RESETHAND`, `SA_SIGINFO`) and mask, and an old or queried
//!   disposition that is one of our trampolines is given back as the program's handler, its
//!   flags and mask as the kernel reports them. `SA_RESETHAND` needs nothing more: the kernel
//!   resets the disposition to `SIG_DFL`, and a query then reads `SIG_DFL`.
//! - **Two trampolines, two tables.** One for `SA_SIGINFO` handlers, one for plain ones. The
//!   trampoline the kernel holds picks the table, so a handler is always called with the
//!   signature it was installed with, even while another thread replaces it.
//! - **glibc's `signal` calls glibc's internal `sigaction`**, not this export, so `signal` and
//!   its relatives are wrapped themselves: the handler is recorded and glibc's function installs
//!   the plain trampoline with the flags and mask it would have given the handler (`signal`'s
//!   `SA_RESTART` unless `siginterrupt` said otherwise, `sysv_signal`'s one-shot flags).
//!   `siginterrupt` (also internal) only changes the flags of whatever is installed, which keeps
//!   the trampoline.
//! - **Ying's own calls go through the same wrapper**: `libc::sigaction` in the profiler crate
//!   binds to this library's export. That is deliberate: the dump-signal handler
//!   (`triggers/signal.rs`) is recorded and runs in the trampoline like any other, and its
//!   "is the handler still ours" check each tick reads the translated disposition, so a handler
//!   the program installs later is still noticed.
//! - **A handler that leaves by `siglongjmp`** (or `longjmp`) skips the decrement: that thread's
//!   depth stays raised, so its async-signal-safe waits stop being safe points (conservative;
//!   other threads and the other waits are unaffected). Resetting the depth in `siglongjmp`
//!   would need the depth at the matching `sigsetjmp`, which cannot be wrapped (it returns
//!   twice).
//! - A `vfork` child that installs a handler writes the parent's tables (shared memory); a
//!   `vfork` child may only call `_exit` and the `exec` family, so this is the program's
//!   undefined behaviour already.
//!
//! glibc's functions are found with `dlsym(RTLD_NEXT)` from the constructor ([`warm`]), not
//! at a first call that a handler might make.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::glibc_next::next;

/// Signals 1 to 64 (`_NSIG` is 65 on Linux).
const NSIG: usize = 65;

unsafe extern "C" {
    /// The program's plain handlers, per signal (src/signals.c; `void *` there, written only here).
    static ying_plain_handlers: [AtomicUsize; NSIG];
    /// The program's `SA_SIGINFO` handlers, per signal.
    static ying_info_handlers: [AtomicUsize; NSIG];
    fn ying_plain_trampoline(sig: libc::c_int);
    fn ying_info_trampoline(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void);
    fn ying_signal_depth_now() -> libc::c_uint;
}

/// Whether the calling thread is inside a handler the program installed (or left one by
/// `siglongjmp`).
pub(crate) fn in_handler() -> bool {
    // SAFETY: reads the calling thread's initial-exec TLS word; no allocation, no lock.
    unsafe { ying_signal_depth_now() != 0 }
}

fn plain_trampoline() -> usize {
    ying_plain_trampoline as unsafe extern "C" fn(libc::c_int) as usize
}

fn info_trampoline() -> usize {
    ying_info_trampoline
        as unsafe extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize
}

fn plain_table() -> &'static [AtomicUsize; NSIG] {
    // SAFETY: a hidden C array of NSIG pointer-sized words, written only through these atomics
    // and read atomically by the trampolines; it lives as long as the library.
    unsafe { &*std::ptr::addr_of!(ying_plain_handlers) }
}

fn info_table() -> &'static [AtomicUsize; NSIG] {
    // SAFETY: as in `plain_table`.
    unsafe { &*std::ptr::addr_of!(ying_info_handlers) }
}

/// `SIG_HOLD` (for `sigset`), not in the libc crate.
const SIG_HOLD: usize = 2;

/// Whether installing `handler` for `sig` goes through a trampoline: a real handler (not
/// `SIG_DFL`, `SIG_IGN`, `SIG_HOLD`, `SIG_ERR`) of a signal the tables hold.
fn wraps(sig: libc::c_int, handler: usize) -> bool {
    (1..NSIG as libc::c_int).contains(&sig) && handler > SIG_HOLD && handler != usize::MAX
}

/// The program's view of a disposition the kernel reports as `handler`: one of our trampolines
/// becomes the handler recorded for it before this call (`plain`, `info`).
fn translate(handler: usize, plain: usize, info: usize) -> usize {
    if handler == plain_trampoline() {
        plain
    } else if handler == info_trampoline() {
        info
    } else {
        handler
    }
}

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_BSD_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SYSV_SIGNAL: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGSET: AtomicUsize = AtomicUsize::new(0);

const LOOKUPS: [(&AtomicUsize, &CStr); 5] = [
    (&REAL_SIGACTION, c"sigaction"),
    (&REAL_SIGNAL, c"signal"),
    (&REAL_BSD_SIGNAL, c"bsd_signal"),
    (&REAL_SYSV_SIGNAL, c"sysv_signal"),
    (&REAL_SIGSET, c"sigset"),
];

/// Finds glibc's functions now (from the constructor), so no first call from a handler needs
/// `dlsym`.
pub(crate) fn warm() {
    for (slot, name) in LOOKUPS {
        next(slot, name);
    }
}

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;
type SignalFn = unsafe extern "C" fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t;

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

/// `sigaction` as the program sees it (see the module docs).
///
/// # Safety
/// As for glibc's `sigaction`.
pub(crate) unsafe fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    let f = next(&REAL_SIGACTION, c"sigaction");
    if f == 0 {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: `f` is glibc's `sigaction`, of this signature.
    let real: SigactionFn = unsafe { std::mem::transmute(f) };
    let i = if (1..NSIG as libc::c_int).contains(&sig) { sig as usize } else { 0 };
    // The records an old trampoline stands for, taken before this call replaces them.
    let (plain, info) =
        (plain_table()[i].load(Ordering::Acquire), info_table()[i].load(Ordering::Acquire));
    // SAFETY: a non-null `act` points at a valid sigaction (the caller's contract).
    let new = unsafe { act.as_ref() };
    let mut ours: libc::sigaction;
    // The table written (to put back if glibc refuses the new action).
    let mut wrote: Option<(&AtomicUsize, usize)> = None;
    let act = match new {
        Some(a) if wraps(sig, a.sa_sigaction) => {
            ours = *a;
            if a.sa_flags & libc::SA_SIGINFO != 0 {
                info_table()[i].store(a.sa_sigaction, Ordering::Release);
                wrote = Some((&info_table()[i], info));
                ours.sa_sigaction = info_trampoline();
            } else {
                plain_table()[i].store(a.sa_sigaction, Ordering::Release);
                wrote = Some((&plain_table()[i], plain));
                ours.sa_sigaction = plain_trampoline();
            }
            &ours as *const libc::sigaction
        }
        _ => act,
    };
    // SAFETY: `act` is the caller's or our copy of it with the trampoline; `old` is the caller's.
    let rc = unsafe { real(sig, act, old) };
    if let (true, Some((slot, before))) = (rc != 0, wrote) {
        slot.store(before, Ordering::Release);
    }
    // SAFETY: a non-null `old` was just filled by glibc (the caller's contract: writable).
    if let (0, Some(o)) = (rc, unsafe { old.as_mut() }) {
        o.sa_sigaction = translate(o.sa_sigaction, plain, info);
    }
    rc
}

/// `signal` and its relatives: glibc's function `slot` installs the plain trampoline for a
/// real handler, recorded first.
///
/// # Safety
/// As for glibc's `signal`.
pub(crate) unsafe fn signal_like(
    which: Which,
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    let (slot, name) = LOOKUPS[which as usize];
    let f = next(slot, name);
    if f == 0 {
        set_errno(libc::ENOSYS);
        return libc::SIG_ERR;
    }
    // SAFETY: `f` is glibc's function of this name, of this signature.
    let real: SignalFn = unsafe { std::mem::transmute(f) };
    let i = if (1..NSIG as libc::c_int).contains(&sig) { sig as usize } else { 0 };
    let (plain, info) =
        (plain_table()[i].load(Ordering::Acquire), info_table()[i].load(Ordering::Acquire));
    let wrapped = wraps(sig, handler);
    let handler = if wrapped {
        plain_table()[i].store(handler, Ordering::Release);
        plain_trampoline()
    } else {
        handler
    };
    // SAFETY: the caller's signal and its handler, or the trampoline standing for it.
    let old = unsafe { real(sig, handler) };
    if wrapped && old == libc::SIG_ERR {
        plain_table()[i].store(plain, Ordering::Release);
    }
    translate(old, plain, info)
}

/// Which of glibc's `signal` functions (an index into the lookups).
#[derive(Clone, Copy)]
pub(crate) enum Which {
    Signal = 1,
    BsdSignal = 2,
    SysvSignal = 3,
    Sigset = 4,
}
