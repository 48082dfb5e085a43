//! Primitives every other folder may use: the few raw system calls the profiler makes outside
//! the `libc` crate's safe-ish surface (here), the spin lock ([`spin`]), the clock
//! ([`clock`]) and small numbers in few bytes ([`leb128`]).
//!
//! Code here may be called from anywhere, inside `malloc` too, so each function says what it
//! does: the spin lock and the clock never allocate, lock (beyond the spin lock itself) or block;
//! [`write_stderr`] is one raw `write`. It imports nothing from the rest of the crate.

pub(crate) mod clock;
pub(crate) mod dir;
pub(crate) mod fds;
pub(crate) mod leb128;
pub(crate) mod seccomp;
pub(crate) mod spin;

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What fd 2 was when [`save_stderr`] ran: 0 before it ran (messages go to fd 2 as it is), 1
/// when fd 2 was closed at start (messages are dropped), 2 when its identity is in
/// [`STDERR_DEV`] and [`STDERR_INO`] (messages go to fd 2 while it still is that file).
static STDERR_STATE: AtomicI32 = AtomicI32::new(0);
/// Device and inode of the file fd 2 was at start.
static STDERR_DEV: AtomicU64 = AtomicU64::new(0);
static STDERR_INO: AtomicU64 = AtomicU64::new(0);

/// The lowest descriptor number tried for the descriptors Ying keeps open while a program runs
/// (only the endpoint's listening socket, and a connection or push socket while one is in use):
/// far above the ones a program opens first and may expect to get.
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

/// The soft `RLIMIT_NOFILE` (the number of descriptor slots the process may use), capped at
/// 2^20 (the kernel's default `nr_open`) when it is unlimited or larger.
fn nofile_limit() -> i32 {
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `rl` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1 << 20;
    }
    rl.rlim_cur.min(1 << 20) as i32
}

/// Whether descriptor number `fd` is free (`F_GETFD` fails with EBADF).
fn fd_free(fd: i32) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags; a free number makes it fail.
    unsafe { libc::fcntl(fd, libc::F_GETFD) < 0 && *libc::__errno_location() == libc::EBADF }
}

/// Whether the standard descriptors 0, 1 and 2 are all open. While one is closed, a program is
/// usually about to put something there (a shell or `subprocess` rearranging its standard
/// streams), and a descriptor Ying opened then would take that number.
pub(crate) fn std_fds_open() -> bool {
    fds::private_here() || (0..3).all(|fd| !fd_free(fd))
}

/// How many descriptor slots must be free under `RLIMIT_NOFILE` before Ying opens anything at
/// report time. A report holds at most 3 at once (two while walking the reporting path, then
/// the directory and one file; or an ELF file being symbolized), so the program keeps at least
/// 5 free slots of its own at every instant of a report.
pub(crate) const FD_HEADROOM: usize = 8;

/// Whether at least [`FD_HEADROOM`] descriptor slots are free under the soft `RLIMIT_NOFILE`,
/// so that what a report opens briefly never takes a program's last free slots. Opens nothing:
/// counts free numbers with `F_GETFD` from the limit down and stops at the [`FD_HEADROOM`]th
/// (the kernel hands out the lowest free number, so a program fills its table from the bottom
/// and the top slots are nearly always free: a few calls; only a table full to its limit is
/// scanned whole, once per report).
///
/// The race left: a program thread that opens descriptors between this check and the end of
/// the report can still find the table full one to three descriptors earlier than it would
/// without Ying, but only if it opens at least 5 within that window (tens of milliseconds) and
/// ends at its limit. Closing it would need the kernel to reserve slots; a program that lives
/// at its descriptor limit gets `EMFILE` from its own opens anyway. Accepted and documented.
pub(crate) fn fd_headroom() -> bool {
    if fds::private_here() {
        // Nothing of the program's is used; the private table holds `/dev/null` at 0 to 2,
        // and the limit applies to it too.
        return nofile_limit() >= 3 + FD_HEADROOM as i32;
    }
    let _errno = ErrnoGuard::save();
    let mut free = 0;
    for fd in (0..nofile_limit()).rev() {
        if fd_free(fd) {
            free += 1;
            if free >= FD_HEADROOM {
                return true;
            }
        }
    }
    false
}

/// [`fd_headroom`], with one warning per process (the first time it is false) naming
/// `RLIMIT_NOFILE` and what is skipped.
pub(crate) fn fd_headroom_or_warn(what: &str) -> bool {
    static WARNED_PID: AtomicI32 = AtomicI32::new(0);
    if fd_headroom() {
        return true;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if WARNED_PID.swap(pid, Ordering::Relaxed) != pid {
        warn(&format!(
            "{what} skipped: fewer than {FD_HEADROOM} descriptors free under RLIMIT_NOFILE \
             (soft limit {}); Ying takes none of the program's last descriptors",
            nofile_limit()
        ));
    }
    false
}

/// A close-on-exec duplicate of `fd` numbered [`HIGH_FD`] or above, or, when the descriptor
/// limit is at or below that, at the highest free number below the limit; -1 if none, and on
/// a thread with a private table ([`fds`]), where any number is as good.
pub(crate) fn dup_high(fd: i32) -> i32 {
    if fds::private_here() {
        return -1; // No number of the program's to keep clear of.
    }
    let _errno = ErrnoGuard::save();
    // SAFETY: F_DUPFD_CLOEXEC only creates a descriptor; a closed `fd` makes it fail (EBADF).
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
    if d >= 0 {
        return d;
    }
    let limit = nofile_limit().min(HIGH_FD);
    match (3..limit).rev().find(|&n| fd_free(n)) {
        // SAFETY: as above; `n` is free and below the limit, so the duplicate lands there
        // unless another thread took it meanwhile (then the next free number above, or -1).
        Some(n) => unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, n) },
        None => -1,
    }
}

/// `fd` moved to a high number (see [`dup_high`]), close-on-exec: the duplicate, with `fd`
/// closed, or `fd` itself when no duplicate could be made.
pub(crate) fn move_high(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use std::os::fd::{AsRawFd, FromRawFd};
    let d = dup_high(fd.as_raw_fd());
    if d < 0 {
        return fd;
    }
    // SAFETY: `d` was just created by fcntl and is owned by nobody else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(d) }
}

/// Records which file fd 2 is at start (once per process; later calls do nothing), so that
/// Ying's messages go to the standard error the program had at start and never into a file the
/// program later made its fd 2. No descriptor is kept: a program that redirects fd 2 elsewhere
/// (a daemon onto its log or `/dev/null`) gets no `ying:` lines from then on, and one that puts
/// the same file back gets them again. Called at start by both front ends.
pub fn save_stderr() {
    if STDERR_STATE.load(Ordering::Acquire) != 0 {
        return;
    }
    let _errno = ErrnoGuard::save();
    match fd_id(2) {
        Some((dev, ino)) => {
            STDERR_DEV.store(dev, Ordering::Relaxed);
            STDERR_INO.store(ino, Ordering::Relaxed);
            STDERR_STATE.store(2, Ordering::Release);
        }
        None => STDERR_STATE.store(1, Ordering::Release),
    }
}

/// Whether Ying's messages may go to fd 2 now: before [`save_stderr`] ran, or while fd 2 is the
/// file it was at start.
fn stderr_is_ours(fd: i32) -> bool {
    match STDERR_STATE.load(Ordering::Acquire) {
        0 => true,
        1 => false,
        _ => {
            let saved = (STDERR_DEV.load(Ordering::Relaxed), STDERR_INO.load(Ordering::Relaxed));
            fd_id(fd) == Some(saved)
        }
    }
}

/// Writes all of `bytes` to Ying's standard error: fd 2 while it is the file it was when
/// [`save_stderr`] ran (never a file the program made its fd 2 later: then nothing is
/// written), or fd 2 before that; on a thread with a descriptor table of its own, the
/// program's fd 2 borrowed for the message (`sys::fds::program_stderr`). Uses
/// the raw `write` system call: glibc's `write()` is a cancellation point, and these messages
/// are written from inside allocation functions, which must never be one. No locks, no
/// allocation, `errno` preserved; usable inside allocation hooks and at exit. Errors are
/// ignored (there is nowhere to report them).
pub fn write_stderr(bytes: &[u8]) {
    if seccomp::restricted_here() {
        return; // A seccomp filter may punish the `write` (or the `fstat` before it).
    }
    let _errno = ErrnoGuard::save();
    // A thread with a table of its own borrows the program's fd 2 for this message.
    let private = fds::private_here();
    let fd = if private { fds::program_stderr() } else { 2 };
    if fd >= 0 && stderr_is_ours(fd) {
        write_all(fd, bytes);
    }
    if private && fd >= 0 {
        // SAFETY: the thread's own duplicate, made above.
        unsafe { libc::close(fd) };
    }
}

/// Writes all of `bytes` to `fd` with the raw `write` system call; errors end it.
fn write_all(fd: i32, mut bytes: &[u8]) {
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
/// reads, writes, unwinding) must not change what the program sees. It keeps the slot's address
/// with the value and is inlined: every sample takes two guards, whose calls and second
/// `__errno_location` cost 21 instructions a sample (BENCHMARKS.md, "Instructions per
/// sample"). A guard stays on the thread that made it (it is neither `Send` nor `Sync`).
#[derive(Debug)]
pub(crate) struct ErrnoGuard {
    slot: *mut i32,
    saved: i32,
}

impl ErrnoGuard {
    #[inline]
    pub(crate) fn save() -> Self {
        // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid
        // for the thread's life, which outlasts the guard (it does not leave the thread).
        let slot = unsafe { libc::__errno_location() };
        // SAFETY: as above.
        Self { slot, saved: unsafe { *slot } }
    }
}

impl Drop for ErrnoGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the calling thread's errno slot (see `save`).
        unsafe { *self.slot = self.saved }
    }
}

/// The thread ids of Ying's own threads (0: a free slot), kept until the thread is gone (not
/// only until its body returned), so that the shim can wait until they have ended before a
/// seccomp filter covering them is installed ([`wait_profiler_threads_gone`]).
struct ProfilerTids([AtomicI32; 16]);

static STARTED_TIDS: ProfilerTids = ProfilerTids([const { AtomicI32::new(0) }; 16]);

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
pub(crate) fn wait_profiler_threads_gone(timeout: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let mut running = false;
        for slot in &STARTED_TIDS.0 {
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

/// The kernel ids of the profiler threads running now (0: a free slot), so that the end of
/// a program's threads can be told from the end of the process's (see
/// [`only_profiler_threads_left`]).
static PROFILER_TIDS: [AtomicU32; 8] = [const { AtomicU32::new(0) }; 8];

/// Whether a file owned by `uid` may be trusted as this process's or its user's: owned by the
/// process's effective user, or by root. In a directory other users can write (a 1777
/// reporting directory), a file owned by anyone else was planted: it is never taken for a set,
/// a death, a control-file request or a file to write over.
pub(crate) fn trusted_owner(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// The calling thread's kernel id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Which descriptor table a profiler thread works in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    /// One of its own ([`fds`]): every thread of Ying's that opens anything.
    Own,
    /// The program's: only the thread that ends the process when the program's threads have
    /// all ended (`exit` then runs the program's handlers and flushes its streams, which
    /// write to the program's descriptors). It opens nothing.
    Programs,
}

extern "C" fn profiler_thread_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the `Box<(Table, ThreadBody)>` leaked by `spawn_profiler_thread`, handed
    // to exactly this thread.
    let started = unsafe { Box::from_raw(arg.cast::<(Table, ThreadBody)>()) };
    let (table, body) = *started;
    seccomp::mark_profiler_thread();
    if table == Table::Own {
        fds::enter_private_table();
    }
    STARTED_TIDS.record();
    let me = gettid();
    let slot = PROFILER_TIDS
        .iter()
        .find(|s| s.compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed).is_ok());
    body();
    if let Some(slot) = slot {
        slot.store(0, Ordering::SeqCst);
    }
    std::ptr::null_mut()
}

/// A `fork` child runs none of its parent's profiler threads.
pub(crate) fn forget_profiler_threads() {
    for s in &PROFILER_TIDS {
        s.store(0, Ordering::SeqCst);
    }
}

/// Whether every thread of the process but the caller and the profiler threads has ended
/// (`/proc/self/task` lists nothing else that is not a zombie: a thread group's leader that
/// called `pthread_exit` stays listed as one). False when the list cannot be read. Allocates
/// and reads files: for report threads.
pub(crate) fn only_profiler_threads_left() -> bool {
    let me = gettid();
    let Ok(tasks) = dir::entries(std::path::Path::new("/proc/self/task")) else { return false };
    for task in tasks {
        let Ok(tid) = task.name.parse::<u32>() else {
            continue;
        };
        if tid == me || PROFILER_TIDS.iter().any(|s| s.load(Ordering::SeqCst) == tid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
            continue; // Gone since the listing.
        };
        // `pid (comm) state ...`: the command may hold parentheses, the state follows the last.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if !matches!(state, Some('Z' | 'X')) {
            return false;
        }
    }
    true
}

/// Starts a detached profiler thread named `name` with every signal blocked from its first
/// instruction, in a descriptor table of its own ([`Table::Own`]). Nothing runs on it before
/// `body` but that (unlike `std::thread::spawn`, whose start-up code allocates before the
/// closure runs), so a body that first marks the thread as profiler code makes every
/// allocation of the thread the profiler's own.
pub(crate) fn spawn_profiler_thread(
    name: &std::ffi::CStr,
    body: ThreadBody,
) -> std::io::Result<()> {
    spawn_profiler_thread_in(name, Table::Own, body)
}

/// [`spawn_profiler_thread`] in the descriptor table `table`.
pub(crate) fn spawn_profiler_thread_in(
    name: &std::ffi::CStr,
    table: Table,
    body: ThreadBody,
) -> std::io::Result<()> {
    let arg = Box::into_raw(Box::new((table, body)));
    // SAFETY: the start routine takes ownership of `arg` only if the thread was created,
    // otherwise it is reclaimed here, once.
    let tid = match unsafe { create_blocked(name, profiler_thread_main, arg.cast()) } {
        Ok(tid) => tid,
        Err(e) => {
            // SAFETY: `arg` came from `Box::into_raw` above and no thread took it.
            drop(unsafe { Box::from_raw(arg) });
            return Err(e);
        }
    };
    // SAFETY: `tid` is a thread just created and not yet detached or joined.
    unsafe { libc::pthread_detach(tid) };
    Ok(())
}

/// Creates a thread named `name` running `start(arg)`, with every signal blocked from its first
/// instruction (the caller's mask is restored at once), and returns its id, to be detached or
/// joined by the caller: the one way Ying's threads are made ([`spawn_profiler_thread_in`],
/// `fds::on_private_thread`).
///
/// # Safety
/// `arg` must stay valid for as long as `start` uses it.
pub(crate) unsafe fn create_blocked(
    name: &std::ffi::CStr,
    start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> std::io::Result<libc::pthread_t> {
    // SAFETY: `all` and `old` are valid sigset_t values initialised by sigfillset /
    // pthread_sigmask; `tid` is a valid out-pointer; `arg` is the caller's to vouch for.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut tid: libc::pthread_t = std::mem::zeroed();
        let rc = libc::pthread_create(&mut tid, std::ptr::null(), start, arg);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        libc::pthread_setname_np(tid, name.as_ptr());
        Ok(tid)
    }
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

/// The state (field 3) and start time in clock ticks since boot (field 22) of `/proc/<pid>/stat`.
/// Reads a file: for report threads only.
pub(crate) fn state_and_start(pid: &str) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.to_string();
    Some((state, fields.nth(18)?.parse().ok()?))
}

/// The wall-clock start of a process started `ticks` after boot, ms since the Unix epoch (to the
/// second: the boot time is in seconds). Reads a file: for report threads only.
pub(crate) fn start_ms(ticks: u64) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    Some(btime * 1000 + ticks * 1000 / hz)
}
