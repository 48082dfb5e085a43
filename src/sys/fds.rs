//! A descriptor table of Ying's own, so that nothing Ying opens ever takes a number of the
//! program's, and nothing of the program's is ever held open by Ying.
//!
//! The kernel hands out the lowest free descriptor number, and programs rely on it: a shell or
//! `subprocess` closes 0, 1 or 2 and expects its next `open`, `dup` or `pipe` to land there;
//! CPython's `test_subprocess` checks exactly that. Every descriptor a report opens (a `/proc`
//! file, the reporting directory, a temporary file) would take such a number for a moment if
//! it came from the program's table. So every thread of Ying's leaves that table first thing:
//! [`enter_private_table`] gives the thread a new, empty table (`close_range` with
//! `CLOSE_RANGE_UNSHARE` over every number: the kernel copies nothing), in which its own
//! files live. The private table holds none of the program's descriptors either, so a pipe the
//! program closes reaches end-of-file whatever Ying does. Numbers 0, 1 and 2 of the private
//! table are `/dev/null`, so that nothing of Ying's that writes to a standard descriptor can
//! write into one of its own files.
//!
//! Work that starts on a program's thread (the exit report, an on-demand dump with no report
//! thread, the live file's removal before an `exec`, a change of user) runs on a short-lived
//! thread of Ying's with such a table ([`on_private_thread`]), joined before the caller goes
//! on. Ying's messages still go to the program's standard error: a private thread borrows the
//! program's fd 2 for the length of one message (`pidfd_getfd` on its own process, see
//! [`program_stderr`]).
//!
//! Kernels before 5.9 have no `close_range`: the thread unshares its table
//! (`unshare(CLONE_FILES)`) and closes each number the copy holds. Where even that fails, the
//! thread stays in the program's table, and the old protections apply there (descriptor
//! headroom, high numbers for the endpoint's sockets, no report while a standard descriptor is
//! closed: see `sys`).

use std::cell::Cell;

thread_local! {
    /// Whether the calling thread works in a descriptor table of its own.
    static PRIVATE: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread has a descriptor table of its own ([`enter_private_table`]).
pub(crate) fn private_here() -> bool {
    PRIVATE.with(Cell::get)
}

/// Gives the calling thread (one of Ying's, before it opens anything) an empty descriptor table
/// of its own, with `/dev/null` at 0, 1 and 2; true when it has one. Makes no allocation
/// (called before a thread is marked as the profiler's), and preserves `errno`.
pub(crate) fn enter_private_table() -> bool {
    if private_here() {
        return true;
    }
    let _errno = super::ErrnoGuard::save();
    // SAFETY: close_range over every number with CLOSE_RANGE_UNSHARE gives the calling thread
    // a new table and closes everything in it; the program's table is untouched.
    let rc =
        unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, libc::CLOSE_RANGE_UNSHARE) };
    if rc != 0 && !unshare_and_close() {
        return false;
    }
    for fd in 0..3 {
        // SAFETY: a NUL-terminated path; the lowest free number of the new table is `fd`.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if got != fd {
            break; // No /dev/null (a bare sandbox): the numbers stay free.
        }
    }
    PRIVATE.with(|p| p.set(true));
    true
}

/// The fallback for kernels without `close_range`: a copy of the table, each of its numbers
/// closed (up to 65536, beyond any program's first numbers; a copy of a higher one stays open
/// in the thread, the one trace left).
fn unshare_and_close() -> bool {
    // SAFETY: unshare(CLONE_FILES) gives the calling thread its own copy of the table.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return false;
    }
    let limit = super::nofile_limit().min(1 << 16);
    for fd in 0..limit {
        // SAFETY: closes the thread's own copy of `fd` (the program's stays open); a free
        // number fails with EBADF.
        unsafe { libc::close(fd) };
    }
    true
}

/// The program's fd 2, duplicated into the calling thread's private table for one message
/// (close it after), or -1 (the kernel has no `pidfd_getfd`, before 5.6, or fd 2 is closed).
pub(crate) fn program_stderr() -> i32 {
    // SAFETY: pidfd_open on our own process id (no flags) returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0u32) } as i32;
    if pidfd < 0 {
        return -1;
    }
    // SAFETY: pidfd_getfd duplicates fd 2 of our own process (always allowed within one
    // thread group) into the calling thread's table; `pidfd` is ours and closed right after.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, 2, 0u32) } as i32;
    // SAFETY: `pidfd` was opened above and is not used again.
    unsafe { libc::close(pidfd) };
    fd
}

/// Runs `f` on a new thread of Ying's with a descriptor table of its own, and waits for it: the
/// way work that starts on a program's thread opens files without taking a number of the
/// program's. `f` starts with every signal blocked, and is told `true` there (a new thread, to
/// be marked as the profiler's before it allocates). When the calling thread has a private
/// table already, when a seccomp filter may cover the calling thread (creating a thread is a
/// system call the filter may punish), or when no thread can be created (then the old
/// protections apply), `f` runs here and is told `false`. `None` when `f` panicked on the new
/// thread.
pub(crate) fn on_private_thread<R: Send, F: FnOnce(bool) -> R + Send>(
    name: &std::ffi::CStr,
    f: F,
) -> Option<R> {
    if private_here() || super::seccomp::restricted_here() {
        return Some(f(false));
    }
    struct Job<F, R> {
        f: Option<F>,
        out: Option<R>,
    }
    extern "C" fn main<F: FnOnce(bool) -> R, R>(arg: *mut libc::c_void) -> *mut libc::c_void {
        super::seccomp::mark_profiler_thread();
        enter_private_table();
        // SAFETY: `arg` is the creator's `Job`, which outlives this thread (the creator joins
        // it before the job goes out of scope) and which only this thread touches until then.
        let job = unsafe { &mut *arg.cast::<Job<F, R>>() };
        if let Some(f) = job.f.take() {
            let run = std::panic::AssertUnwindSafe(|| f(true));
            job.out = std::panic::catch_unwind(run).ok();
        }
        std::ptr::null_mut()
    }
    let mut job: Job<F, R> = Job { f: Some(f), out: None };
    let arg: *mut Job<F, R> = &mut job;
    // SAFETY: `arg` points to `job`, alive until the join below (a failed create leaves it
    // untouched); the thread is joined exactly once.
    let created = match unsafe { super::create_blocked(name, main::<F, R>, arg.cast()) } {
        Ok(tid) => {
            // SAFETY: `tid` was just created and is joined once, here.
            unsafe { libc::pthread_join(tid, std::ptr::null_mut()) };
            true
        }
        Err(_) => false,
    };
    if !created {
        let f = job.f.take()?;
        return Some(f(false));
    }
    job.out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lowest free number of the calling thread's table (opens and closes one).
    fn lowest_free() -> i32 {
        // SAFETY: a NUL-terminated path; the descriptor is closed at once.
        unsafe {
            let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            libc::close(fd);
            fd
        }
    }

    #[test]
    fn a_private_thread_takes_no_number_of_the_callers() {
        let before = lowest_free();
        let (theirs, held) = on_private_thread(c"ying-test", |_| {
            // SAFETY: opens files in the thread's own table; they stay open until the thread
            // ends (and its table with it).
            let fds: Vec<i32> = (0..4)
                .map(|_| unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) })
                .collect();
            (fds, private_here())
        })
        .expect("ran");
        assert!(held, "the thread has a table of its own");
        assert_eq!(theirs, vec![3, 4, 5, 6], "0, 1 and 2 hold /dev/null, nothing else is there");
        assert_eq!(lowest_free(), before, "the caller's lowest free number did not move");
        assert!(!private_here(), "the caller stays in its table");
    }

    #[test]
    fn a_private_thread_sees_the_programs_stderr_when_it_borrows_it() {
        let ours = super::super::fd_id(2);
        let theirs = on_private_thread(c"ying-test", |_| {
            let fd = program_stderr();
            let id = super::super::fd_id(fd);
            // SAFETY: `fd` is this thread's own duplicate (or -1: close fails harmlessly).
            unsafe { libc::close(fd) };
            id
        })
        .expect("ran");
        assert_eq!(theirs, ours);
    }

    #[test]
    fn a_panic_on_the_private_thread_comes_back_as_none() {
        assert!(on_private_thread(c"ying-test", |_| -> u8 { panic!("on purpose") }).is_none());
    }
}
