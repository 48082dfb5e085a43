//! Seccomp filters installed by the program: the shim's `prctl` and `syscall` exports (in
//! `lib.rs`) see `prctl(PR_SET_SECCOMP, ...)` and `syscall(SYS_seccomp, ...)` (glibc has no
//! `seccomp` wrapper; libseccomp and hand-written filters use one of these two), and before
//! the kernel gets the filter, Ying stops making system calls where the filter may reach
//! (`ying_profiler`'s `sys::seccomp` holds the level and says what that means for the
//! engine and the runner).
//!
//! First the filter is read (with `process_vm_readv`, which fails where the pointer is bad
//! instead of faulting) and run for each system call Ying makes
//! (`ying_profiler`'s `sys::seccomp::harmless`: the lists, measured with `strace -f`, are
//! there and in the README's Limits). A filter that lets them all through changes nothing.
//! Otherwise (and for strict mode, and a filter that cannot be read), before the call is
//! passed on, the shim:
//!
//! 1. writes one `ying: warning:` line (while `write` is certainly allowed) if this process
//!    is profiled;
//! 2. stops sampling (a sample may grow the profiler's heap with `mmap`) and the counting of
//!    anonymous mappings, and never starts the report thread from then on;
//! 3. with `SECCOMP_FILTER_FLAG_TSYNC` (the filter covers every thread) or strict mode (the
//!    calling thread only, but its `SYS_exit` must end the process, which a thread of Ying's
//!    still running would prevent), stops Ying's threads (report, endpoint, pusher) and waits
//!    until they have ended (at most 10 s: a report set being written is finished first);
//! 4. raises the level, after which covered threads make no call of Ying's: no exit report,
//!    no message, no yield of the spin lock, no stack-bounds query at thread start.
//!
//! Without `TSYNC`, Ying's threads already running are not covered and go on: periodic
//! reports (of the samples taken before the filter), the endpoint and pushes continue, and
//! the exit report is written by the report thread, while the exiting thread waits for it,
//! if every filter installed lets that thread wait (`futex`, `getpid`, the clock), and is
//! lost otherwise. An attempt that fails (a bad filter, no `PR_SET_NO_NEW_PRIVS`)
//! has the same effect: Ying cannot know beforehand. Filters stack, so once Ying has stopped
//! for one it stays stopped (every filter is kept, for the exit wait's check only).
//!
//! Both exports make the system call themselves (glibc's `prctl` and `syscall` are plain
//! system call wrappers): no lookup with `dlsym`, which a `syscall` made in a signal handler or
//! before the loader is done could not afford; return value and `errno` are the kernel's, as
//! glibc gives them.

use std::ffi::c_long;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ying_profiler::front_end::seccomp::{self, ALL_THREADS, PROGRAM_THREADS};
use ying_profiler::front_end::{hooks, mapped};

use crate::host::{SETTINGS, thread_state};

/// `<linux/prctl.h>`'s `PR_SET_SECCOMP` and `<linux/seccomp.h>`'s modes (prctl) and
/// operations (seccomp(2)).
const PR_SET_SECCOMP: c_long = 22;
const SECCOMP_MODE_STRICT: c_long = 1;
const SECCOMP_MODE_FILTER: c_long = 2;
const SECCOMP_SET_MODE_STRICT: c_long = 0;
const SECCOMP_SET_MODE_FILTER: c_long = 1;
const SECCOMP_FILTER_FLAG_TSYNC: c_long = 1;

/// Longest wait for Ying's threads to end before a filter covering them goes in.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// `prctl(option, arg2, arg3, ...)` is about to be made.
pub(crate) fn before_prctl(option: c_long, arg2: c_long, arg3: c_long) {
    if option != PR_SET_SECCOMP {
        return;
    }
    match arg2 {
        SECCOMP_MODE_STRICT => before_filter(true, "seccomp strict mode"),
        SECCOMP_MODE_FILTER if !harmless_at(arg3) => before_filter(false, "a seccomp filter"),
        _ => {}
    }
}

/// `seccomp(op, flags, args)` is about to be made.
pub(crate) fn before_seccomp(op: c_long, flags: c_long, args: c_long) {
    match op {
        SECCOMP_SET_MODE_STRICT => before_filter(true, "seccomp strict mode"),
        SECCOMP_SET_MODE_FILTER if harmless_at(args) => {}
        SECCOMP_SET_MODE_FILTER if flags & SECCOMP_FILTER_FLAG_TSYNC != 0 => {
            before_filter(true, "a seccomp filter for every thread")
        }
        SECCOMP_SET_MODE_FILTER => before_filter(false, "a seccomp filter"),
        _ => {} // Questions (SECCOMP_GET_ACTION_AVAIL, SECCOMP_GET_NOTIF_SIZES) install nothing.
    }
}

/// The kernel's limit on a filter's length (`BPF_MAXINSNS`).
const MAX_INSNS: usize = 4096;

/// Whether the filter whose `struct sock_fprog` is at `fprog` lets every call of Ying's
/// through (`sys::seccomp::harmless`). The filter is kept (`note_filter`) either way.
fn harmless_at(fprog: c_long) -> bool {
    hooks::run_guarded(thread_state(), || {
        let prog = read_filter(fprog);
        note_filter(prog.as_deref());
        prog.is_some_and(|p| seccomp::harmless(&p))
    })
}

/// The filter whose `struct sock_fprog` is at `fprog`, read with `process_vm_readv`, which
/// fails (as the kernel's own read would, with `EFAULT`) instead of faulting on a bad
/// pointer; `None` if it cannot be read. Profiler code (it allocates).
fn read_filter(fprog: c_long) -> Option<Vec<seccomp::Insn>> {
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const seccomp::Insn,
    }
    let mut head = SockFprog { len: 0, filter: std::ptr::null() };
    let head_len = std::mem::size_of::<SockFprog>();
    if !read_own(fprog as usize, (&raw mut head).cast(), head_len) {
        return None;
    }
    let n = usize::from(head.len);
    if n == 0 || n > MAX_INSNS {
        return None;
    }
    let mut prog = vec![seccomp::Insn { code: 0, jt: 0, jf: 0, k: 0 }; n];
    let bytes = n * std::mem::size_of::<seccomp::Insn>();
    read_own(head.filter as usize, prog.as_mut_ptr().cast(), bytes).then_some(prog)
}

/// Every filter the program installed (attempted) so far: they stack, and the exit report
/// can be left to the report thread only if all of them let the exiting thread wait for it.
static FILTERS: Mutex<Vec<Vec<seccomp::Insn>>> = Mutex::new(Vec::new());
/// Set when a filter could not be read: nothing is known of the stack any more.
static UNREADABLE: AtomicBool = AtomicBool::new(false);

/// Keeps `prog` (`None`: unreadable) and says whether the whole stack still allows the calls
/// of the exiting thread's wait for the report thread (`seccomp::EXIT_WAIT_CALLS`). Profiler
/// code.
fn note_filter(prog: Option<&[seccomp::Insn]>) {
    let mut filters = FILTERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match prog {
        Some(p) => filters.push(p.to_vec()),
        None => UNREADABLE.store(true, Ordering::SeqCst),
    }
    let ok = !UNREADABLE.load(Ordering::SeqCst)
        && filters
            .iter()
            .all(|f| seccomp::EXIT_WAIT_CALLS.iter().all(|&nr| seccomp::allows(f, nr)));
    seccomp::set_exit_by_report_thread(ok);
}

/// Copies `len` bytes at `from` in this process into `to`; false if they cannot be read.
fn read_own(from: usize, to: *mut u8, len: usize) -> bool {
    let _errno = SavedErrno::save();
    let local = libc::iovec { iov_base: to.cast(), iov_len: len };
    let remote = libc::iovec { iov_base: from as *mut libc::c_void, iov_len: len };
    // SAFETY: `to` is valid for `len` bytes (the caller's buffer); the kernel checks `from`
    // and fails with EFAULT where it is not readable.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == len as isize
}

/// Saves `errno` and restores it when dropped: the program's call sees only its own.
struct SavedErrno(i32);

impl SavedErrno {
    fn save() -> Self {
        // SAFETY: `__errno_location` returns the calling thread's errno slot.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for SavedErrno {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 }
    }
}

/// Steps 1 to 4 of the module docs; `all` when Ying's threads must end first.
fn before_filter(all: bool, what: &str) {
    let level = if all { ALL_THREADS } else { PROGRAM_THREADS };
    if seccomp::level() >= level {
        return; // Done for an earlier filter.
    }
    let ts = thread_state();
    hooks::run_guarded(ts, || {
        if SETTINGS.enabled() {
            let then = if all {
                "Ying's threads stop, and it takes no more samples and writes no more reports"
            } else {
                "Ying takes no more samples; its report thread and endpoint, if running, go on with the samples taken so far (the exit report too, if the filter lets the exiting thread wait for them)"
            };
            ying_profiler::front_end::warn(&format!(
                "this program installs {what}, which may kill it for a system call of Ying's: from here on {then}"
            ));
        }
        SETTINGS.set_enabled(false);
        mapped::set_tracking(false);
        crate::start::no_more_threads();
        if all && !ying_profiler::front_end::stop_profiler_threads(STOP_WAIT) {
            ying_profiler::front_end::warn(
                "a thread of Ying's was still running 10 s later; the filter may kill the program when it next makes a system call",
            );
        }
    });
    seccomp::restrict(level);
}

/// The system call `n` with six arguments, as glibc's `syscall` makes it: a result from
/// -4095 to -1 is an error, returned as -1 with `errno` set.
///
/// # Safety
/// The call's own contract (memory its arguments point to).
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn raw_syscall(n: c_long, a: [c_long; 6]) -> c_long {
    let ret: c_long;
    // SAFETY: the `syscall` instruction with the number in rax and the arguments in rdi, rsi,
    // rdx, r10, r8, r9; it clobbers rcx and r11 and returns in rax; the memory it touches is
    // the caller's contract.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    errno_result(ret)
}

/// The system call `n` with six arguments (aarch64: `svc 0`, number in x8).
///
/// # Safety
/// The call's own contract (memory its arguments point to).
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn raw_syscall(n: c_long, a: [c_long; 6]) -> c_long {
    let ret: c_long;
    // SAFETY: `svc 0` with the number in x8 and the arguments in x0 to x5, the result in x0;
    // the memory it touches is the caller's contract.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    errno_result(ret)
}

/// The failure path of x86_64's `syscall`: `ret` (-4095 to -1) into `errno`, -1 returned.
#[cfg(target_arch = "x86_64")]
pub(crate) extern "C" fn syscall_failed(ret: c_long) -> c_long {
    errno_result(ret)
}

/// A raw result as glibc returns it: -4095 to -1 set `errno` and give -1.
#[inline(always)]
fn errno_result(ret: c_long) -> c_long {
    if (-4095..0).contains(&ret) {
        // SAFETY: `__errno_location` returns the calling thread's errno slot.
        unsafe { *libc::__errno_location() = -ret as i32 };
        return -1;
    }
    ret
}
