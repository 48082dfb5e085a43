//! The few raw system calls the profiler makes outside the `libc` crate's safe-ish surface.

/// Writes all of `bytes` to standard error with `write(2)`: no locks, no allocation, usable
/// inside allocation hooks and at exit. Errors are ignored (there is nowhere to report them).
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable slice for its length; fd 2 may be closed, in
        // which case write returns -1 and we stop.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            let interrupted =
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if n < 0 && interrupted {
                continue;
            }
            return;
        }
        bytes = bytes.get(n as usize..).unwrap_or(&[]);
    }
}

/// Prints one `ying: warning: ...` line to standard error.
pub fn warn(msg: &str) {
    let line = format!("ying: warning: {msg}\n");
    write_stderr(line.as_bytes());
}

/// Saves `errno` and restores it when dropped: the profiler's own work on slow paths (clock
/// reads, writes, unwinding) must not change what the program sees.
#[derive(Debug)]
pub(crate) struct ErrnoGuard(i32);

impl ErrnoGuard {
    pub(crate) fn save() -> Self {
        // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 }
    }
}

/// What a profiler thread runs.
type ThreadBody = Box<dyn FnOnce() + Send>;

extern "C" fn profiler_thread_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<ThreadBody>` leaked by `spawn_profiler_thread`, handed to
    // exactly this thread.
    let body = unsafe { Box::from_raw(arg.cast::<ThreadBody>()) };
    body();
    std::ptr::null_mut()
}

/// Starts a detached profiler thread named `name` with every signal blocked from its first
/// instruction. Nothing runs on it before `body` (unlike `std::thread::spawn`, whose start-up
/// code allocates before the closure runs), so a body that first marks the thread as profiler
/// code makes every allocation of the thread the profiler's own.
pub(crate) fn spawn_profiler_thread(
    name: &std::ffi::CStr,
    body: ThreadBody,
) -> std::io::Result<()> {
    let arg = Box::into_raw(Box::new(body));
    // SAFETY: `all` and `old` are valid sigset_t values initialised by sigfillset /
    // pthread_sigmask; `tid` is a valid out-pointer; the start routine takes ownership of `arg`
    // only if pthread_create succeeds, otherwise it is reclaimed here.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut tid: libc::pthread_t = std::mem::zeroed();
        let rc = libc::pthread_create(&mut tid, std::ptr::null(), profiler_thread_main, arg.cast());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if rc != 0 {
            drop(Box::from_raw(arg));
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        libc::pthread_setname_np(tid, name.as_ptr());
        libc::pthread_detach(tid);
    }
    Ok(())
}

/// The calling thread's stack as (lowest address, one past the highest), without I/O and
/// without waiting on any lock the caller could hold, except for what `pthread_getattr_np`
/// takes on a thread other than the main one: that thread's own lock, which glibc holds while
/// `pthread_getattr_np` itself allocates (so a front end that sees glibc's allocations must not
/// call this from inside one; see `Host::LOOKS_UP_STACK_BOUNDS`).
///
/// For the main thread glibc's answer comes from reading `/proc/self/maps` (file I/O, a
/// cancellation point, allocations), so it is computed here instead: the top is the page end
/// above `__libc_stack_end` (the stack pointer the process started with; every frame lies
/// below it), the bottom the stack size limit below that, at most 128 MiB (the kernel keeps
/// at least that much address space free below the main stack).
pub fn stack_bounds() -> Option<(usize, usize)> {
    if is_main_thread() {
        return main_stack_bounds();
    }
    // SAFETY: all-zero is a valid initial `pthread_attr_t` for `pthread_getattr_np`, which
    // initialises it; it is destroyed exactly once, after the bounds are read.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0 && !addr.is_null()).then(|| (addr as usize, addr as usize + size))
    }
}

/// Whether the calling thread is the process's main thread (its thread id is the process id).
fn is_main_thread() -> bool {
    // SAFETY: gettid and getpid take no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) == libc::getpid() as libc::c_long }
}

unsafe extern "C" {
    /// The stack pointer the process started with (set by the dynamic linker; glibc exports it).
    static __libc_stack_end: *mut libc::c_void;
}

fn main_stack_bounds() -> Option<(usize, usize)> {
    // SAFETY: a pointer-sized variable glibc writes once, before any code of ours runs.
    let end = unsafe { std::ptr::addr_of!(__libc_stack_end).read_volatile() } as usize;
    if end == 0 {
        return None;
    }
    // The page holding `end` is mapped (it is on the stack), so its end is a safe top.
    let top = (end | 4095) + 1;
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a valid out-pointer.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_STACK, &mut rl) } == 0 {
        rl.rlim_cur
    } else {
        libc::RLIM_INFINITY
    };
    let size = if limit == libc::RLIM_INFINITY {
        128 << 20
    } else {
        (limit as usize).clamp(1 << 20, 128 << 20)
    };
    Some((top.saturating_sub(size), top))
}
