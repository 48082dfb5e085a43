//! The front-end contract: what a front end other than [`crate::YingProfiler`] (the preload
//! shim, `libying.so`, in `preload/`) calls to drive the engine. Not a public API: hidden from
//! the documentation, changed with the shim, and named by nothing outside this repository.
//!
//! A front end owns the allocation entry points (`malloc` and its family, `mmap`), where each
//! thread's [`ThreadState`](thread_state::ThreadState) lives, and how it learns of thread
//! starts, exits, forks and the process's end. It implements [`hooks::Host`] for its own heap
//! and calls, in this order of a process's life:
//!
//! 1. **Start-up, on the thread that loads it**: [`save_stderr`] (the profiler's messages keep
//!    going to the program's stderr even when the program closes it), [`apply_sampling_config`]
//!    on its [`crate::Settings`], [`warm_unwinder`] and one [`backtrace::trace`] (so that the
//!    first sample does not load the unwinder's data inside `malloc`), [`code_range_of`] its
//!    own code (its frames are dropped from stacks), [`modules`] and [`module_of`] to learn who
//!    owns the program's `malloc` ([`set_foreign_malloc`] when it is not the shim),
//!    [`set_allocator`] for the allocator the shim forwards to, and
//!    [`mapped::set_tracking`] for `YING_TRACK_MMAP`. Reports are taken from the engine's
//!    tables through a [`crate::utils::ProfileSource`] of its own (its interval and guard);
//!    [`snapshot::take`] copies them out for the front end's host.
//! 2. **Each thread**: [`hooks::thread_started`] with the thread's stack ([`stack_bounds`], or
//!    none under seccomp: [`seccomp::restricted_here`]), [`hooks::thread_exit`] when it ends,
//!    [`hooks::restart_sampling`] once the settings are final.
//! 3. **Each allocation**: [`hooks::on_alloc`], [`hooks::on_realloc`], [`hooks::on_free`]
//!    (its slow path [`hooks::free_slow`]), [`hooks::charge_missed`] when its own fast path
//!    used up the sampling budget ([`hooks::growth_missed`] when a reallocation's growth did; with the program's [`hooks::CallerFrame`] when the fast path
//!    knows it, so that a sample's unwind starts there); [`mapped::on_mmap`], [`mapped::on_munmap`],
//!    [`mapped::on_mremap`]. A fast path written outside Rust reads the thread state and the
//!    settings at fixed offsets ([`thread_state::BUDGET_OFFSET`] and the others,
//!    [`hooks::MAX_ALLOC_BYTES_OFFSET`]) and the free filter's layout ([`filter::CELL_BITS`],
//!    [`filter::CELL_SHIFT`]); its filter is the byte map ([`filter::byte_map`],
//!    [`filter::may_contain_in_bytes`]).
//! 4. **The profiler's own heap**: code that allocates for the profiler runs under
//!    [`hooks::run_guarded`] (or [`hooks::enter_guard`] / [`hooks::leave_guard`];
//!    [`hooks::is_guarded`] to ask; [`hooks::enter_forever`] for the report thread), and a
//!    front end whose Rust heap is separate counts it with [`hooks::internal_alloc`] and
//!    [`hooks::internal_free`] (the profiler's memory is not the program's).
//! 5. **`fork`**: [`fork_prepare`], then [`fork_parent`] or [`fork_child`] (from
//!    `pthread_atfork` handlers): every profiler lock is taken and released around the fork.
//! 6. **`dlclose`**: [`flush_unwind_cache`], after an object was closed.
//! 7. **seccomp**: before the program installs a filter, [`seccomp::harmless`] and
//!    [`seccomp::allows`] judge it ([`seccomp::Insn`], [`seccomp::EXIT_WAIT_CALLS`],
//!    [`seccomp::set_exit_by_report_thread`]), [`stop_profiler_threads`] ends the profiler's
//!    threads when the filter covers them, and [`seccomp::restrict`] records the level
//!    ([`seccomp::level`]: [`seccomp::NONE`], [`seccomp::PROGRAM_THREADS`],
//!    [`seccomp::ALL_THREADS`]).
//! 8. **The end**: [`program_threads_ended`] when the program's last thread ends by
//!    `pthread_exit`, [`exiting`] to know the process is exiting, and [`before_exit`] from the
//!    front end's `exit`/`_exit` wrappers (the exit report is written there, before the
//!    process can end under it).
//!
//! Messages go to stderr through [`write_stderr`] and [`warn`] (no allocation, no buffering).
//! [`ReportDir`] is the report directory [`crate::utils::ProfilerRunner::dir_for_new_user`]
//! opens before the program drops privileges.
//!
//! The sampler's arithmetic ([`sampler::sample_probability`], [`sampler::weight`]) is here for
//! this crate's tests and benchmarks, which check and time it.

/// Allocation hooks, the [`Host`](hooks::Host) a front end implements, and the profiler's guard.
pub mod hooks {
    pub use crate::engine::hooks::{
        alloc_failed, charge_missed, enter_forever, enter_guard, free_slow, growth_missed,
        internal_alloc, internal_free, is_guarded, leave_guard, on_alloc, on_free, on_realloc,
        restart_after_fork, restart_sampling, run_guarded, thread_exit, thread_started,
    };
    pub use crate::engine::host::{DEFAULT_MAX_ALLOC_BYTES, Host, MAX_ALLOC_BYTES_OFFSET};
    pub use crate::stack::unwind::CallerFrame;
}

/// Per-thread state, and the offsets of its fields a fast path outside Rust reads.
pub mod thread_state {
    pub use crate::engine::thread_state::{
        BUDGET_OFFSET, FILTER_OFFSET, FREED_OFFSET, REJECT_OFFSET, ThreadState,
    };
}

/// The free path's filter of possibly sampled addresses, in its byte-map form.
pub mod filter {
    pub use crate::engine::filter::{CELL_BITS, CELL_SHIFT, byte_map, may_contain_in_bytes};
}

/// The default interval, and the sampler's arithmetic (tests and benchmarks).
pub mod sampler {
    pub use crate::engine::sampler::{
        DEFAULT_SAMPLE_INTERVAL_BYTES, Weight, sample_probability, weight,
    };
}

/// `mmap`, `munmap` and `mremap` hooks (`YING_TRACK_MMAP`).
pub mod mapped {
    pub use crate::engine::mapped::{on_mmap, on_mremap, on_munmap, set_tracking};
}

/// Taking a snapshot of the engine's tables for a front end's [`crate::utils::ProfileSource`].
pub mod snapshot {
    pub use crate::report::snapshot::take;
}

/// Python frames (`engine/python/`): the shim's constructor looks for an interpreter.
pub mod python {
    pub use crate::engine::python::detect;
}

/// The program's seccomp filters: judging them, and the level the profiler works under.
pub mod seccomp {
    pub use crate::sys::seccomp::{
        ALL_THREADS, EXIT_WAIT_CALLS, Insn, NONE, PROGRAM_THREADS, allows, harmless, level,
        restrict, restricted_here, set_exit_by_report_thread,
    };
}

pub use crate::engine::tables::arena::Profiler as ProfilerHeap;

/// The profiler's own memory comes from [`ProfilerHeap`] (the shim's allocator): report work
/// allocates from memory reserved before it starts (`source::budget`).
pub fn use_profiler_heap() {
    crate::source::budget::use_own_heap()
}
pub use crate::report::files::ReportDir;
pub use crate::runner::lifecycle::{
    before_exec, before_exit, exiting, program_threads_ended, stop_profiler_threads,
};
pub use crate::runner::settings::apply_sampling_config;
pub use crate::symbols::symbolize::{Module, code_range_of, module_of, modules};
pub use crate::sys::{save_stderr, stack_bounds, warn, write_stderr};
/// The unwinder the engine captures stacks with (start-up calls `backtrace::trace` once).
pub use backtrace;

/// `fork` prepare: takes every profiler lock, the symbol cache's first (report side), then
/// the engine's and the unwinder's. Here, above both sides, so that the engine never calls
/// into the report side.
pub fn fork_prepare() {
    crate::symbols::lock_for_fork();
    crate::engine::hooks::fork_prepare();
}

/// `fork` parent: releases what [`fork_prepare`] took, in reverse order.
pub fn fork_parent() {
    crate::engine::hooks::fork_parent();
    crate::symbols::unlock_after_fork();
}

/// `fork` child: the engine's child handler (`ts`: the surviving thread's state), then
/// releases the symbol cache's lock.
pub fn fork_child(ts: Option<&thread_state::ThreadState>) {
    crate::engine::hooks::fork_child(ts);
    crate::symbols::unlock_after_fork();
}

/// Records that the program's `malloc` is defined by `owner` (an object's path), not by the
/// shim: reports then say that the profiler saw nothing of that heap.
pub fn set_foreign_malloc(owner: String) {
    crate::report::set_foreign_malloc(owner)
}

/// Records which allocator the shim forwards to, as reports name it (`glibc (<path>)`, or a
/// chained allocator's `<path>, under Ying`), and whether it is glibc's (the resident-set
/// breakdown then looks for glibc's heap regions).
pub fn set_allocator(description: String, glibc: bool) {
    crate::report::set_allocator(description, glibc)
}

/// The path of the loaded object that holds `addr` (the loader's own record, found without a
/// lock or an allocation: `_dl_find_object`), when there is one.
pub fn object_path_of(addr: usize) -> Option<String> {
    let (_, name) = crate::stack::unwind::object_of(addr)?;
    if name.is_null() {
        return None;
    }
    // SAFETY: a non-null `l_name` is the object's NUL-terminated path, kept by the loader while
    // the object is loaded.
    let name = unsafe { std::ffi::CStr::from_ptr(name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

/// Looks up what the caching unwinder needs from glibc, at start-up.
pub fn warm_unwinder() {
    crate::stack::unwind::warm()
}

/// Forgets the unwinder's cached rules (the shim's `dlclose`, after an object was closed).
pub fn flush_unwind_cache() {
    crate::stack::unwind::flush()
}
