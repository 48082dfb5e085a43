//! Start-up of the shim, outside every hook: read `YING_*` once, decide whether this process is
//! profiled, find our own code range, warm the unwinder, install `fork` handlers, start the
//! report thread and the exit report. Runs from `.init_array`, after libc is ready.

use std::ffi::CStr;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use ying_profiler::config::Config;
use ying_profiler::hooks;
use ying_profiler::snapshot::{self, Snapshot};
use ying_profiler::utils::{ProfileSource, ProfilerRunner};

use crate::host::{OWN_END, OWN_START, SETTINGS, ShimHost, thread_state};

/// The report source of the shim.
#[derive(Debug)]
pub(crate) struct ShimSource;

impl ProfileSource for ShimSource {
    fn snapshot(&self) -> Snapshot {
        snapshot::take::<ShimHost>(SETTINGS.sample_interval())
    }
    fn enter_profiler_thread(&self) {
        hooks::enter_forever(thread_state());
    }
    fn run_guarded(&self, f: &mut dyn FnMut()) {
        hooks::run_guarded(thread_state(), f)
    }
}

static SOURCE: ShimSource = ShimSource;
/// The runner configuration, kept so a `fork` child can restart it.
static RUNNER: OnceLock<ProfilerRunner> = OnceLock::new();

fn warn(msg: &str) {
    ying_profiler::__private::warn(msg);
}

/// The constructor body.
pub(crate) fn init() {
    let ts = thread_state();
    hooks::run_guarded(ts, find_own_code);
    // The main thread lives as long as the process: set it up (until now it counted in the
    // shared counters) and record its stack.
    crate::thread_start::started();
    hooks::run_guarded(ts, init_guarded);
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or_default()
}

fn init_guarded() {
    ying_profiler::__private::save_stderr();
    let (cfg, warnings) = Config::from_env();
    for w in &warnings {
        ying_profiler::__private::write_stderr(format!("{w}\n").as_bytes());
    }
    if !cfg.enabled {
        return;
    }
    let exe = exe_path();
    if let Some(only) = &cfg.only_exe {
        let name = exe.rsplit('/').next().unwrap_or("");
        if name != only {
            return; // Passive: exact counters only, no samples, no reports.
        }
    }
    SETTINGS.set_sample_interval(cfg.sample_interval_bytes);
    SETTINGS.set_max_alloc_bytes(cfg.max_alloc_bytes);
    SETTINGS.set_max_stacks(cfg.max_stacks);
    if let Some(seed) = cfg.seed {
        SETTINGS.set_seed(seed);
    }
    // Warm libgcc's unwinder (the fallback of ours; it initialises state on first use) before
    // any sample needs it.
    ying_profiler::__private::backtrace::trace(|_| true);
    // And ours: its object lookup is found once, here, not inside an allocation.
    ying_profiler::__private::warm_unwinder();
    // SAFETY: the three handlers are plain extern "C" fns that only touch our own locks.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    warn_if_allocator_is_elsewhere();
    SETTINGS.set_enabled(true);
    hooks::restart_sampling(thread_state(), &SETTINGS);
    start_reporting(&cfg);
}

fn find_own_code() {
    let here = find_own_code as *const () as usize;
    if let Some((start, end)) = ying_profiler::__private::code_range_of(here) {
        OWN_START.store(start, Ordering::Relaxed);
        OWN_END.store(end, Ordering::Relaxed);
    }
}

fn warn_if_allocator_is_elsewhere() {
    let lookup = |name: &CStr| {
        // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global scope.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) as usize }
    };
    let ours = crate::malloc as *const () as usize;
    let seen = lookup(c"malloc");
    if seen != 0 && seen != ours {
        warn(
            "this program's malloc is not the one libying.so provides (a statically linked allocator?); Ying sees only allocations that reach glibc's malloc",
        );
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

fn start_reporting(cfg: &Config) {
    if !cfg.report_at_exit && cfg.check_interval_secs == 0 {
        return;
    }
    let runner = ProfilerRunner::from_config(cfg);
    if let Err(e) = runner.open_reporting_dir() {
        let path = cfg.reporting_path.display();
        return warn(&format!("YING_REPORTING_PATH={path} {e}; reporting is skipped"));
    }
    let _ = RUNNER.set(runner.clone());
    runner.spawn_for(&SOURCE);
}

// The guard is held from prepare to the parent/child handler, so the handlers' own
// allocations (the child's new report thread) are the profiler's.
extern "C" fn fork_prepare() {
    hooks::enter_guard(thread_state());
    hooks::fork_prepare();
}

extern "C" fn fork_parent() {
    hooks::fork_parent();
    hooks::leave_guard(thread_state());
}

extern "C" fn fork_child() {
    let ts = thread_state();
    hooks::fork_child(Some(ts));
    // The report thread did not survive the fork: restart it for the child, which writes its
    // own files (its pid is in every name). The exit report is inherited with atexit.
    if let Some(runner) = RUNNER.get().filter(|r| r.check_interval_secs() > 0) {
        runner.without_exit_report().spawn_for(&SOURCE);
    }
    hooks::leave_guard(ts);
}
