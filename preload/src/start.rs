//! Start-up of the shim, outside every hook: read `YING_*` once, decide whether this process is
//! profiled, find our own code range, warm the unwinder, install `fork` handlers, create and
//! identify the reporting directory (no descriptor of it, or of stderr, is kept: the program's
//! descriptor table stays its own) and register the exit report. Runs from `.init_array`, after libc is
//! ready. The report thread is not started here but at the program's first safe point
//! ([`safe_point`], see `safe_points`), so the program's `main` starts single-threaded.

use std::ffi::CStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};

use ying_profiler::config::Config;
use ying_profiler::front_end::hooks::{self, Host};
use ying_profiler::utils::{ProfileSource, ProfilerRunner};

use crate::host::{OWN_END, OWN_START, SETTINGS, ShimHost, thread_state};

/// The report source of the shim.
#[derive(Debug)]
pub(crate) struct ShimSource;

impl ProfileSource for ShimSource {
    fn enter_profiler_thread(&self) {
        hooks::enter_forever(thread_state());
    }
    fn run_guarded(&self, f: &mut dyn FnMut()) {
        hooks::run_guarded(thread_state(), f)
    }
    fn sample_interval(&self) -> u64 {
        SETTINGS.sample_interval()
    }
    fn unit(&self) -> ying_profiler::ByteUnit {
        match crate::chain::next() {
            Some(_) => ying_profiler::ByteUnit::Usable,
            None => <ShimHost as Host>::UNIT,
        }
    }
    // The `fork` handlers below hold every profiler lock across the fork, so a child's tables
    // are consistent and it writes its own exit report (if it took samples of its own).
    fn reports_in_fork_children(&self) -> bool {
        true
    }
    // `thread_start` counts every thread it sees start and tells the runner at zero.
    fn counts_program_threads(&self) -> bool {
        true
    }
}

static SOURCE: ShimSource = ShimSource;
/// The runner configuration, kept so a `fork` child can restart it.
static RUNNER: OnceLock<ProfilerRunner> = OnceLock::new();

fn warn(msg: &str) {
    ying_profiler::front_end::warn(msg);
}

/// glibc's `exit`, as the shim's `exit` calls it.
pub(crate) type ExitFn = unsafe extern "C" fn(libc::c_int) -> !;

/// glibc's `exit` (the next one after ours), looked up by the constructor (see
/// `glibc_next::next`).
static REAL_EXIT: AtomicUsize = AtomicUsize::new(0);

/// glibc's `exit`; `_exit` if it cannot be found (no `exit` runs before the constructor but
/// another library's constructor's).
pub(crate) fn real_exit() -> ExitFn {
    // SAFETY: glibc's `exit` has the signature `ExitFn`.
    unsafe { crate::glibc_next::real::<ExitFn>(&REAL_EXIT, c"exit") }.unwrap_or(libc::_exit)
}

/// The constructor body.
pub(crate) fn init() {
    // The library's Rust allocations are the profiler heap's (`heap.rs`): report work reserves
    // its memory there before it starts.
    ying_profiler::front_end::use_profiler_heap();
    // Which allocator is under Ying, before any thread is set up (a thread's free filter
    // depends on it), if no allocation call of the process has asked yet.
    let _ = crate::chain::next();
    let ts = thread_state();
    crate::glibc_next::next(&REAL_EXIT, c"exit");
    hooks::run_guarded(ts, find_own_code);
    // The main thread lives as long as the process: set it up (until now it counted in the
    // shared counters) and record its stack.
    crate::thread_start::started();
    crate::thread_start::count_main_thread();
    hooks::run_guarded(ts, init_guarded);
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or_default()
}

fn init_guarded() {
    OWN_PID.store(raw_pid(), Ordering::Relaxed);
    // glibc's waits and signal functions, found now rather than at a first call a signal
    // handler might make.
    crate::warm_lookups();
    ying_profiler::front_end::save_stderr();
    let (cfg, warnings) = Config::from_env();
    for w in &warnings {
        ying_profiler::front_end::write_stderr(format!("{w}\n").as_bytes());
    }
    if !cfg.enabled {
        return;
    }
    if let Some(only) = &cfg.only_exe {
        let exe = exe_path();
        let name = exe.rsplit('/').next().unwrap_or("");
        if name != only {
            return; // Passive: exact counters only, no samples, no reports.
        }
    }
    ying_profiler::front_end::apply_sampling_config(&cfg, &SETTINGS);
    crate::chain::limit_changed(SETTINGS.max_alloc_bytes());
    describe_allocator();
    // Warm libgcc's unwinder (the fallback of ours; it initialises state on first use) before
    // any sample needs it.
    ying_profiler::front_end::backtrace::trace(|_| true);
    // And ours: its object lookup is found once, here, not inside an allocation.
    ying_profiler::front_end::warm_unwinder();
    // SAFETY: the three handlers are plain extern "C" fns that only touch our own locks.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    warn_if_allocator_is_elsewhere();
    let lookup = |name: &CStr| {
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global scope.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    if let Some(w) = ying_profiler::front_end::python::detect(lookup, cfg.python_frames) {
        warn(&w);
    }
    SETTINGS.set_enabled(true);
    ying_profiler::front_end::mapped::set_tracking(cfg.track_mmap);
    hooks::restart_sampling(thread_state(), &SETTINGS);
    start_reporting(&cfg);
}

fn find_own_code() {
    let here = find_own_code as *const () as usize;
    if let Some((start, end)) = ying_profiler::front_end::code_range_of(here) {
        OWN_START.store(start, Ordering::Relaxed);
        OWN_END.store(end, Ordering::Relaxed);
    }
}

/// Whether the object holding `addr` defines `malloc` there. A position-dependent executable
/// that takes `malloc`'s address (Debian's `python3.11`) makes its PLT entry the function's
/// canonical address: `dlsym` then returns that stub, which jumps to the real `malloc` (ours),
/// although its symbol is undefined in the executable. The loader's symbol lookup by address
/// only matches defined symbols, so a stub finds no `malloc`.
fn defines_malloc_at(addr: usize) -> bool {
    // <dlfcn.h>'s RTLD_DL_SYMENT and <elf.h>'s SHN_UNDEF (not in the libc crate).
    const RTLD_DL_SYMENT: libc::c_int = 1;
    const SHN_UNDEF: u16 = 0;
    let mut info: libc::Dl_info = empty_dl_info();
    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
    // SAFETY: dladdr1 only reads the loader's tables; `info` and `sym` are valid out-parameters
    // of the types RTLD_DL_SYMENT asks for.
    let found = unsafe {
        libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&mut sym as *mut *const libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || sym.is_null() || info.dli_sname.is_null() {
        return false;
    }
    // SAFETY: a non-null `dli_sname` is a NUL-terminated name in the object's string table, and
    // a non-null `sym` points at its symbol-table entry; both live as long as the object.
    let (name, sym) = unsafe { (CStr::from_ptr(info.dli_sname), &*sym) };
    name == c"malloc" && sym.st_shndx != SHN_UNDEF && sym.st_value as usize != 0
}

/// A zeroed `Dl_info` (all of its fields are pointers, for which null is valid).
fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

/// Warns when the program's allocation calls do not reach this library. The check asks the
/// dynamic linker which `malloc` a program's call binds to and compares it with our own code
/// range: comparing with `crate::malloc` would not do, because this library's own reference to
/// its `malloc` symbol is bound by the same lookup, to the program's definition when the program
/// (or a library loaded before this one) exports one (jemalloc or mimalloc built in unprefixed,
/// as in rustc, or a C program defining `malloc` itself). The reports of such a program say
/// that Ying saw none of its heap.
fn warn_if_allocator_is_elsewhere() {
    let lookup = |name: &CStr| {
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global scope.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    let (start, end) = (OWN_START.load(Ordering::Relaxed), OWN_END.load(Ordering::Relaxed));
    let seen = lookup(c"malloc");
    if seen != 0 && start < end && !(start..end).contains(&seen) && defines_malloc_at(seen) {
        let mods = ying_profiler::front_end::modules();
        let owner = ying_profiler::front_end::module_of(&mods, seen)
            .map(|m| m.name.to_string())
            .unwrap_or_else(|| format!("the object at {seen:#x}"));
        warn(&format!(
            "malloc is defined by {owner}, not by libying.so: this program allocates through its own allocator, and Ying sees nothing of its heap (reports will be empty)"
        ));
        ying_profiler::front_end::set_foreign_malloc(owner);
        return;
    }
    if crate::chain::next().is_some() {
        // The chained allocator exports its own names too (tcmalloc's `tc_malloc`, mimalloc's
        // `mi_malloc`): the program's `malloc` calls reach Ying first.
        return;
    }
    for other in [c"_rjem_malloc", c"mi_malloc", c"je_malloc", c"tc_malloc"] {
        if lookup(other) != 0 {
            warn(&format!(
                "this program also uses its own allocator ({}); allocations made through it are invisible to Ying",
                other.to_string_lossy()
            ));
        }
    }
}

/// Tells the reports which allocator is under Ying, and says once when an allocator after
/// libying.so could not be chained.
fn describe_allocator() {
    match crate::chain::chained_path() {
        Some(path) => ying_profiler::front_end::set_allocator(format!("{path}, under Ying"), false),
        None => {
            let libc = glibc_path().unwrap_or_else(|| "libc.so.6".to_string());
            ying_profiler::front_end::set_allocator(format!("glibc ({libc})"), true);
            if let Some(path) = crate::chain::unusable_path() {
                warn(&format!(
                    "{path} defines malloc after libying.so but not malloc_usable_size or an aligned allocation, which Ying needs to count its blocks; Ying forwards to glibc's allocator instead"
                ));
            }
        }
    }
}

/// The path of glibc (the object defining `gnu_get_libc_version`; tcmalloc and mimalloc define
/// `__libc_malloc` too), from the loader's record of the object that holds it: listing every
/// module with its build id for this cost a fifth of the shim's start-up (58,000 instructions),
/// and `dladdr` more (it searches the object's symbols).
fn glibc_path() -> Option<String> {
    unsafe extern "C" {
        fn gnu_get_libc_version() -> *const libc::c_char;
    }
    ying_profiler::front_end::object_path_of(gnu_get_libc_version as *const () as usize)
}

fn start_reporting(cfg: &Config) {
    // The endpoint and pushes (YING_HTTP_ADDR, YING_PUSH_URL, YING_OTLP_URL) start with the
    // report thread.
    let services = cfg.wants_services();
    if !cfg.report_at_exit && cfg.check_interval_secs == 0 && !services {
        if cfg.dump_signal.is_some() {
            warn(
                "YING_DUMP_SIGNAL needs the report thread, which YING_CHECK_INTERVAL_SECS=0 turns off; no handler installed",
            );
        }
        return;
    }
    // Each process's exit report is written silently: `ying run` sums up the sets of all.
    let runner = ProfilerRunner::from_config(cfg).exit_report_unannounced();
    if let Err(e) = runner.open_reporting_dir() {
        let path = cfg.reporting_path.display();
        return warn(&format!("YING_REPORTING_PATH={path} {e}; reporting is skipped"));
    }
    let _ = RUNNER.set(runner.clone());
    runner.prepare_for(&SOURCE);
    if runner.check_interval_secs() > 0 || services {
        let _ = WANTED.set(wanted(cfg));
        // SAFETY: registers a plain extern "C" fn that only reads atomics and writes a line.
        unsafe { libc::atexit(warn_if_never_started) };
        REPORT_THREAD.store(THREAD_DUE, Ordering::SeqCst);
    }
}

/// The report thread of this process: not needed (no periodic checks, or not profiled).
const THREAD_NONE: u8 = 0;
/// Needed, not started yet: the next safe point starts it.
const THREAD_DUE: u8 = 1;
/// Started (or being started).
const THREAD_STARTED: u8 = 2;
static REPORT_THREAD: AtomicU8 = AtomicU8::new(THREAD_NONE);

/// The process the report thread may start in: set by the constructor and by the `fork` child
/// handler. A `vfork` child (or `posix_spawn`'s `CLONE_VM` child), which shares the parent's
/// memory and TLS and runs none of those, has another pid.
static OWN_PID: AtomicI32 = AtomicI32::new(0);

/// Whether the calling process is the one the constructor (or the `fork` child handler) ran
/// in: not a `vfork` child, which shares this one's memory and runs none of those.
pub(crate) fn in_own_process() -> bool {
    raw_pid() == OWN_PID.load(Ordering::Relaxed)
}

/// The process's pid from the kernel (never a cached value).
fn raw_pid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// The kind of wait a safe point is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not async-signal-safe: a signal handler may not call it, so any call is a safe point.
    Always,
    /// Async-signal-safe: a safe point only outside the program's signal handlers.
    OutsideHandlers,
}

/// A seccomp filter is about to be installed (`seccomp`): no report thread starts from now on
/// (one being started by another thread right now is not stopped).
pub(crate) fn no_more_threads() {
    REPORT_THREAD.store(THREAD_NONE, Ordering::SeqCst);
}

/// A safe point: the program called one of the functions after which starting the report
/// thread is safe and costs it nothing it would notice (see `safe_points`), outside every
/// allocation function and signal handler. Starts the report thread the first time.
///
/// The thread is not started at load: a process with a second thread cannot enter a user
/// namespace (`unshare(CLONE_NEWUSER)`, `setns`) and loses glibc's single-threaded fast paths,
/// and most processes (a shell's subshells, compilers, `/bin/true`) end long before their first
/// check. Where the program never reaches a safe point, it gets its exit report only (and a
/// `ying:` line at exit when it asked for more, see [`warn_if_never_started`]).
///
/// Costs one relaxed load once the thread has started (or when none is needed).
#[inline(always)]
pub(crate) fn safe_point(wait: Wait) {
    if REPORT_THREAD.load(Ordering::Relaxed) != THREAD_DUE {
        return;
    }
    start_thread(wait);
}

/// Whether the report thread is due (the next safe point starts it): one relaxed load.
#[inline(always)]
pub(crate) fn thread_due() -> bool {
    REPORT_THREAD.load(Ordering::Relaxed) == THREAD_DUE
}

#[cold]
#[inline(never)]
fn start_thread(wait: Wait) {
    if wait == Wait::OutsideHandlers && crate::signals::in_handler() {
        return;
    }
    // Ying's own code reads files and waits too (`read`, `poll` bind to these exports): never
    // from inside the profiler, e.g. the constructor after the thread became due.
    if hooks::is_guarded(thread_state()) {
        return;
    }
    if ying_profiler::front_end::seccomp::level() != ying_profiler::front_end::seccomp::NONE {
        return; // A seccomp filter may punish `clone3`, `mmap`, `mprotect`...
    }
    if ying_profiler::front_end::exiting() {
        return;
    }
    // A vfork child shares our memory and TLS: a thread started there would be the parent's
    // undoing. Checked here, once per start, not per call.
    if raw_pid() != OWN_PID.load(Ordering::Relaxed) {
        return;
    }
    // Creating the thread goes through our own `pthread_create`, which calls this again: the
    // state is already STARTED then.
    if REPORT_THREAD
        .compare_exchange(THREAD_DUE, THREAD_STARTED, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
        && let Some(runner) = RUNNER.get()
    {
        runner.spawn_thread_for(&SOURCE);
    }
}

/// What the report thread would have served, for the line at exit when it never started.
#[derive(Debug)]
struct Wanted {
    /// `YING_CHECK_INTERVAL_SECS` (0: no periodic checks).
    interval_secs: u64,
    /// The endpoint, dump signal and pushes asked for, as phrases.
    services: Vec<String>,
    /// When the constructor ran.
    since: std::time::Instant,
}

static WANTED: OnceLock<Wanted> = OnceLock::new();

fn wanted(cfg: &Config) -> Wanted {
    let mut services = Vec::new();
    if let Some(addr) = &cfg.http_addr {
        services.push(format!("the endpoint (YING_HTTP_ADDR={addr})"));
    }
    if let Some(sig) = cfg.dump_signal {
        services
            .push(format!("dumps on signal {sig} (YING_DUMP_SIGNAL: no handler was installed)"));
    }
    if cfg.push_url.is_some() {
        services.push("pushes (YING_PUSH_URL)".to_string());
    }
    if cfg.otlp_url.is_some() {
        services.push("OTLP pushes (YING_OTLP_URL)".to_string());
    }
    Wanted { interval_secs: cfg.check_interval_secs, services, since: std::time::Instant::now() }
}

/// Says once, at exit, that the report thread never started in this process (the one that
/// read the configuration; `fork` children stay quiet), naming what that cost: periodic checks
/// if the program ran for at least one interval, the endpoint, dump signal and pushes if it ran
/// for at least a second (shorter programs lose nothing they could have used, and a shell
/// script's helpers stay quiet).
extern "C" fn warn_if_never_started() {
    if REPORT_THREAD.load(Ordering::SeqCst) != THREAD_DUE
        || FORKED.load(Ordering::Relaxed)
        || raw_pid() != OWN_PID.load(Ordering::Relaxed)
    {
        return;
    }
    let Some(w) = WANTED.get() else { return };
    hooks::run_guarded(thread_state(), || {
        let ran = w.since.elapsed().as_secs();
        let mut lost = Vec::new();
        if w.interval_secs > 0 && ran >= w.interval_secs {
            lost.push(format!("periodic checks (YING_CHECK_INTERVAL_SECS={})", w.interval_secs));
        }
        if ran >= 1 {
            lost.extend(w.services.iter().cloned());
        }
        if !lost.is_empty() {
            warn(&format!(
                "the report thread never started: the program reached no safe point (a sleep, wait, poll, read, accept or thread creation outside signal handlers), so {} were not served (see the README's Limits)",
                lost.join(", ")
            ));
        }
    });
}

/// Set in a `fork` child: only the process that read the configuration reports a thread that
/// never started.
static FORKED: AtomicBool = AtomicBool::new(false);

// The guard is held from prepare to the parent/child handler, so the handlers' own
// allocations (the child's new report thread) are the profiler's.
extern "C" fn fork_prepare() {
    hooks::enter_guard(thread_state());
    ying_profiler::front_end::fork_prepare();
}

extern "C" fn fork_parent() {
    ying_profiler::front_end::fork_parent();
    hooks::leave_guard(thread_state());
}

extern "C" fn fork_child() {
    let ts = thread_state();
    OWN_PID.store(raw_pid(), Ordering::Relaxed);
    FORKED.store(true, Ordering::Relaxed);
    ying_profiler::front_end::fork_child(Some(ts));
    // The child's samples are its own draws, independent of its parent's and siblings'.
    hooks::restart_after_fork(ts, &SETTINGS);
    crate::thread_start::count_after_fork_child();
    // The report thread did not survive the fork: the child, which writes its own files (its
    // pid is in every name), starts its own at its first safe point, like a new process (not
    // here: a child may have to stay single-threaded, e.g. to enter a user namespace). The
    // exit report is inherited with atexit.
    // (Never under a seccomp filter, which the child inherits.)
    if RUNNER.get().is_some_and(|r| r.check_interval_secs() > 0)
        && ying_profiler::front_end::seccomp::level() == ying_profiler::front_end::seccomp::NONE
    {
        REPORT_THREAD.store(THREAD_DUE, Ordering::SeqCst);
    }
    hooks::leave_guard(ts);
}

/// A change of user by the program (`setuid` and its relatives, exported in `lib.rs`): when the
/// process runs as root and is about to become `new_euid`, which may not write in the reporting
/// directory (a daemon's worker dropping privileges), prepares a directory that user may write
/// in while the process still can (`ProfilerRunner::dir_for_new_user`), makes the change with
/// `change`, and on success writes there from then on. `errno` is as `change` left it.
pub(crate) fn change_user(
    new_euid: Option<libc::uid_t>,
    change: impl FnOnce() -> libc::c_int,
) -> libc::c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot; geteuid has no
    // preconditions.
    let (errno, euid) = unsafe { (libc::__errno_location(), libc::geteuid()) };
    // SAFETY: `errno` is this thread's errno slot.
    let saved = unsafe { *errno };
    let prepared = match (new_euid, RUNNER.get()) {
        (Some(uid), Some(runner)) if uid != euid && !ying_profiler::front_end::exiting() => {
            hooks::run_guarded(thread_state(), || runner.dir_for_new_user(uid))
        }
        _ => None,
    };
    // SAFETY: as above.
    unsafe { *errno = saved };
    let rc = change();
    if rc == 0
        && let Some(dir) = prepared
    {
        // SAFETY: as above.
        let after = unsafe { *errno };
        hooks::run_guarded(thread_state(), || ProfilerRunner::use_dir_of_new_user(dir));
        // SAFETY: as above.
        unsafe { *errno = after };
    }
    rc
}
