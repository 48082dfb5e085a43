//! The `exec` family: before a program replaces its image, the live file of the image ending
//! is removed. An `exec` is not a death: left behind, the file outlived the process it
//! described (the new image writes its own, under its own executable's name), and `ying run`
//! reported "exited without its exit report: its heap at death is in ..." for a process that
//! never died. When the `exec` fails, the report thread writes the file again at its next
//! version.
//!
//! glibc's own callers of `execve` (`posix_spawn`, `system`) run it in a child that shares the
//! parent's memory (`CLONE_VM`) and never reach these exports; a program's own `vfork` child
//! does, and is told apart by its pid (see `start`), as is a signal handler's `exec` (an
//! async-signal-safe call, where removing a file is not), and nothing is done there. glibc's
//! functions are looked up at start (`warm`), never in the call: a `vfork` child must not take
//! the loader's lock.
//!
//! `execl`, `execle` and `execlp` take variable arguments, which stable Rust cannot define,
//! and a C definition would not be exported from this Rust library: an image that ends through
//! them leaves its live file, which `ying run` then reads as that image's end (see the
//! README's Limits).

use std::ffi::{CStr, c_char, c_int};
use std::sync::atomic::AtomicUsize;

use crate::glibc_next;

static REAL_EXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECV: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVP: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVPE: AtomicUsize = AtomicUsize::new(0);
static REAL_FEXECVE: AtomicUsize = AtomicUsize::new(0);
static REAL_EXECVEAT: AtomicUsize = AtomicUsize::new(0);

/// Looks glibc's `exec` functions up (the constructor).
pub(crate) fn warm() {
    for (slot, name) in [
        (&REAL_EXECVE, c"execve"),
        (&REAL_EXECV, c"execv"),
        (&REAL_EXECVP, c"execvp"),
        (&REAL_EXECVPE, c"execvpe"),
        (&REAL_FEXECVE, c"fexecve"),
        (&REAL_EXECVEAT, c"execveat"),
    ] {
        glibc_next::next(slot, name);
    }
}

/// The image is about to be replaced: its live file goes (see the module docs). Keeps `errno`.
fn before_exec() {
    if crate::start::in_own_process()
        && !crate::signals::in_handler()
        && ying_profiler::front_end::seccomp::level() == ying_profiler::front_end::seccomp::NONE
    {
        // SAFETY: `__errno_location` returns the calling thread's errno slot.
        let errno = unsafe { libc::__errno_location() };
        // SAFETY: as above.
        let saved = unsafe { *errno };
        ying_profiler::front_end::hooks::run_guarded(
            crate::host::thread_state(),
            ying_profiler::front_end::before_exec,
        );
        // SAFETY: as above.
        unsafe { *errno = saved };
    }
}

type Argv = *const *const c_char;

/// Passes the call on to glibc's `name` (looked up at start; `ENOSYS` and -1 when glibc has
/// none, as a missing system call's).
///
/// # Safety
/// `F` is the function type of glibc's `name`.
unsafe fn forward<F: Copy>(
    slot: &AtomicUsize,
    name: &CStr,
    call: impl FnOnce(F) -> c_int,
) -> c_int {
    before_exec();
    // SAFETY: the caller's contract.
    unsafe { glibc_next::forward(slot, name, -1, call) }
}

/// `execve`.
///
/// # Safety
/// As for glibc's `execve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    // SAFETY: `F` is the type of glibc's `execve`, called with the caller's arguments.
    unsafe { forward(&REAL_EXECVE, c"execve", |f: F| f(path, argv, envp)) }
}

/// `execv`.
///
/// # Safety
/// As for glibc's `execv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    // SAFETY: `F` is the type of glibc's `execv`, called with the caller's arguments.
    unsafe { forward(&REAL_EXECV, c"execv", |f: F| f(path, argv)) }
}

/// `execvp`.
///
/// # Safety
/// As for glibc's `execvp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv) -> c_int;
    // SAFETY: `F` is the type of glibc's `execvp`, called with the caller's arguments.
    unsafe { forward(&REAL_EXECVP, c"execvp", |f: F| f(file, argv)) }
}

/// `execvpe`.
///
/// # Safety
/// As for glibc's `execvpe`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int;
    // SAFETY: `F` is the type of glibc's `execvpe`, called with the caller's arguments.
    unsafe { forward(&REAL_EXECVPE, c"execvpe", |f: F| f(file, argv, envp)) }
}

/// `fexecve`.
///
/// # Safety
/// As for glibc's `fexecve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    type F = unsafe extern "C" fn(c_int, Argv, Argv) -> c_int;
    // SAFETY: `F` is the type of glibc's `fexecve`, called with the caller's arguments.
    unsafe { forward(&REAL_FEXECVE, c"fexecve", |f: F| f(fd, argv, envp)) }
}

/// `execveat`.
///
/// # Safety
/// As for glibc's `execveat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const c_char, Argv, Argv, c_int) -> c_int;
    // SAFETY: `F` is the type of glibc's `execveat`, called with the caller's arguments.
    unsafe { forward(&REAL_EXECVEAT, c"execveat", |f: F| f(dirfd, path, argv, envp, flags)) }
}
