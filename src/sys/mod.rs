//! Primitives every other folder may use: the few raw system calls the profiler makes outside
//! the `libc` crate's safe-ish surface (here), the spin lock ([`spin`]) and the clock
//! ([`clock`]).
//!
//! Code here may be called from anywhere, inside `malloc` too, so each function says what it
//! does: the spin lock and the clock never allocate, lock (beyond the spin lock itself) or block;
//! [`write_stderr`] is one raw `write`. It imports nothing from the rest of the crate.

pub(crate) mod clock;
pub mod seccomp;
pub(crate) mod spin;

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Where Ying's own messages go: -1 before [`save_stderr`] ran (fd 2 as it is), -2 when fd 2
/// was closed at start (messages are dropped), otherwise the duplicate of fd 2 taken at start.
static SAVED_STDERR: AtomicI32 = AtomicI32::new(-1);
/// Device and inode of the saved duplicate, to notice that the program closed it and reused
/// its number for a file of its own.
static SAVED_DEV: AtomicU64 = AtomicU64::new(0);
static SAVED_INO: AtomicU64 = AtomicU64::new(0);

/// The lowest descriptor number tried for descriptors Ying keeps open (the saved stderr, the
/// reporting directory): far above the ones a program opens first and may expect to get.
const HIGH_FD: i32 = 1000;

/// The page size, read once (a power of two; 4096 if `sysconf` says otherwise). Lock-free and
/// allocation-free: the allocation path may call it.
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `sysconf` reads a constant of the process (from the auxiliary vector); it takes
    // no lock and does not allocate.
    let p = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    PAGE.store(p, Ordering::Relaxed);
    p
}

/// Device and inode of `fd`, or `None` if it is not open.
pub(crate) fn fd_id(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: all-zero is a valid `stat`, which fstat fills; a bad `fd` only makes it fail.
    // fstat is not a cancellation point.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

/// A close-on-exec duplicate of `fd` numbered [`HIGH_FD`] or above (or the lowest free number
/// when the descriptor limit is lower), or -1.
pub(crate) fn dup_high(fd: i32) -> i32 {
    // SAFETY: F_DUPFD_CLOEXEC only creates a descriptor; a closed `fd` makes it fail (EBADF).
    unsafe {
        let d = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD);
        if d >= 0 { d } else { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) }
    }
}

/// Saves a duplicate of standard error (once per process; later calls do nothing), so that
/// Ying's messages keep going where stderr pointed at start even if the program later closes
/// fd 2 or reopens it onto a file of its own. Called at start by both front ends.
pub fn save_stderr() {
    if SAVED_STDERR.load(Ordering::Acquire) != -1 {
        return;
    }
    let _errno = ErrnoGuard::save();
    let fd = dup_high(2);
    let id = if fd >= 0 { fd_id(fd) } else { None };
    let Some((dev, ino)) = id else {
        SAVED_STDERR.store(-2, Ordering::Release);
        return;
    };
    SAVED_DEV.store(dev, Ordering::Relaxed);
    SAVED_INO.store(ino, Ordering::Relaxed);
    if SAVED_STDERR.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire).is_err() {
        // SAFETY: `fd` is the duplicate made above, not published; another thread saved first.
        unsafe { libc::close(fd) };
    }
}

/// The descriptor Ying's messages go to now, or `None` to drop them: the duplicate saved at
/// start if it still is that file, fd 2 if nothing was saved.
fn message_fd() -> Option<i32> {
    match SAVED_STDERR.load(Ordering::Acquire) {
        -1 => Some(2),
        -2 => None,
        fd => {
            let saved = (SAVED_DEV.load(Ordering::Relaxed), SAVED_INO.load(Ordering::Relaxed));
            (fd_id(fd) == Some(saved)).then_some(fd)
        }
    }
}

/// Writes all of `bytes` to Ying's standard error: the duplicate of fd 2 saved at start by
/// [`save_stderr`] (never a file the program opened later as fd 2), or fd 2 before that. Uses
/// the raw `write` system call: glibc's `write()` is a cancellation point, and these messages
/// are written from inside allocation functions, which must never be one. No locks, no
/// allocation, `errno` preserved; usable inside allocation hooks and at exit. Errors are
/// ignored (there is nowhere to report them).
pub fn write_stderr(mut bytes: &[u8]) {
    if seccomp::restricted_here() {
        return; // A seccomp filter may punish the `write` (or the `fstat` before it).
    }
    let _errno = ErrnoGuard::save();
    let Some(fd) = message_fd() else { return };
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable slice for its length; a closed `fd` makes the
        // call fail with EBADF and we stop.
        let n = unsafe {
            libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) as libc::ssize_t
        };
        if n <= 0 {
            // SAFETY: `__errno_location` returns the calling thread's errno slot.
            if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
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

/// The thread ids of Ying's own threads (0: a free slot), so that the shim can wait until
/// they have ended before a seccomp filter covering them is installed
/// ([`wait_profiler_threads_gone`]).
struct ProfilerTids([AtomicI32; 16]);

static PROFILER_TIDS: ProfilerTids = ProfilerTids([const { AtomicI32::new(0) }; 16]);

impl ProfilerTids {
    /// Records the calling thread (a slot of a thread that has ended is reused).
    fn record(&self) {
        // SAFETY: gettid takes no arguments and cannot fail.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        for slot in &self.0 {
            let tid = slot.load(Ordering::SeqCst);
            if (tid == 0 || !thread_alive(tid))
                && slot.compare_exchange(tid, me, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            {
                return;
            }
        }
    }
}

/// Whether thread `tid` of this process still exists (signal 0 checks without sending).
fn thread_alive(tid: i32) -> bool {
    let _errno = ErrnoGuard::save();
    // SAFETY: tgkill with signal 0 sends nothing; a thread id of another process or of an
    // ended thread makes it fail with ESRCH.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    rc == 0 || unsafe { *libc::__errno_location() } != libc::ESRCH
}

/// Waits (polling every millisecond, at most `timeout`) until every thread started by
/// [`spawn_profiler_thread`] in this process has ended; false if one is still running. For a
/// program thread that is about to install a seccomp filter: until the filter is in, any
/// system call is allowed.
pub fn wait_profiler_threads_gone(timeout: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let mut running = false;
        for slot in &PROFILER_TIDS.0 {
            let tid = slot.load(Ordering::SeqCst);
            if tid != 0 && thread_alive(tid) {
                running = true;
            }
        }
        if !running {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        let ts = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
        // SAFETY: `ts` is a valid timespec; a null remainder pointer is allowed. The raw call:
        // the shim's `nanosleep` is a safe point.
        unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<libc::timespec>()) };
    }
}

/// What a profiler thread runs.
type ThreadBody = Box<dyn FnOnce() + Send>;

extern "C" fn profiler_thread_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<ThreadBody>` leaked by `spawn_profiler_thread`, handed to
    // exactly this thread.
    let body = unsafe { Box::from_raw(arg.cast::<ThreadBody>()) };
    seccomp::mark_profiler_thread();
    PROFILER_TIDS.record();
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
