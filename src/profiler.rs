//! The `#[global_allocator]` front end: [`YingProfiler`] wraps [`System`] with the sampling hooks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::callstack::{Measurement, StackStats};
use crate::engine::hooks::{self, DEFAULT_MAX_ALLOC_BYTES, Host, Settings};
use crate::engine::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
use crate::engine::thread_state::ThreadState;
use crate::report::snapshot::{self, Snapshot};
use crate::runner::{ProfileSource, ProfilerRunner, RunnerHandle};

/// Ying is a memory profiling allocator wrapper. Ying is the Chinese word for an eagle.
///
/// Install it as the global allocator; it samples allocations (on average one per
/// [`sample_interval`](YingProfiler::sample_interval) bytes) and forwards every call to
/// [`System`]. See the [crate documentation](crate) for the whole picture.
///
/// A request of at least the giant limit (64 GiB by default) is refused before anything is
/// allocated: its stack is printed to stderr and `null` is returned. For the infallible std
/// collections a null return means Rust's allocation-error handler aborts the process, with the
/// stack that asked printed just before.
#[derive(Debug)]
pub struct YingProfiler {
    settings: Settings,
}

thread_local! {
    static THREAD: ThreadState = const { ThreadState::new() };
    static EXIT: ExitHook = const { ExitHook(Cell::new(std::ptr::null())) };
}

/// Runs [`hooks::thread_exit`] when the thread's TLS destructors run.
struct ExitHook(Cell<*const ThreadState>);

impl Drop for ExitHook {
    fn drop(&mut self) {
        // SAFETY: the pointer is this thread's `THREAD` block, which has no destructor and
        // stays valid until the thread is gone.
        if let Some(ts) = unsafe { self.0.get().as_ref() } {
            hooks::thread_exit(ts);
        }
    }
}

/// The Rust front end's [`Host`].
#[derive(Debug)]
pub(crate) struct RustHost;

impl Host for RustHost {
    #[inline(always)]
    fn thread_state() -> &'static ThreadState {
        let p = THREAD.with(|t| t as *const ThreadState);
        // SAFETY: `THREAD` is const-initialised with no destructor, so its storage is valid for
        // the whole life of the calling thread; the hooks use it only on this thread.
        unsafe { &*p }
    }

    fn register_thread_exit(ts: &ThreadState) -> bool {
        EXIT.try_with(|e| e.0.set(ts as *const ThreadState)).is_ok()
    }

    fn is_entry_frame(_ip: usize, function: impl FnOnce() -> usize) -> bool {
        let start = function();
        type A = unsafe fn(&YingProfiler, Layout, bool) -> *mut u8;
        type R = unsafe fn(&YingProfiler, *mut u8, Layout, usize) -> *mut u8;
        start == YingProfiler::alloc_slow as A as usize
            || start == YingProfiler::realloc_slow as R as usize
    }
}

impl YingProfiler {
    /// The default profiler: 512 KiB mean sampling interval, 64 GiB giant limit.
    #[allow(clippy::should_implement_trait)]
    pub const fn default() -> Self {
        Self { settings: Settings::new(DEFAULT_SAMPLE_INTERVAL_BYTES, DEFAULT_MAX_ALLOC_BYTES) }
    }

    /// A profiler sampling on average once per `sample_interval_bytes` bytes (1 = every
    /// allocation) and refusing single requests of `single_alloc_limit` bytes or more.
    ///
    /// In 0.3.0 the first argument was "sample one allocation in N"; it is now a byte interval,
    /// which weighs large allocations fairly and makes every figure an unbiased estimate.
    pub const fn new(sample_interval_bytes: u32, single_alloc_limit: usize) -> Self {
        Self { settings: Settings::new(sample_interval_bytes as u64, single_alloc_limit as u64) }
    }

    /// A copy of this profiler with another mean sampling interval in bytes.
    pub const fn with_sample_interval(self, bytes: u64) -> Self {
        let limit = self.settings.max_alloc_bytes.into_inner();
        Self { settings: Settings::new(bytes, limit) }
    }

    /// The sampling settings (interval, giant limit, seed), adjustable at run time.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Mean bytes between samples.
    pub fn sample_interval(&self) -> u64 {
        self.settings.sample_interval()
    }

    /// Starts reporting with the seed's defaults: a check every 5 minutes, a report when
    /// retained memory moved by 10 %, flamegraphs on, ranked by retained bytes, written to
    /// `ying-profiles`, and a final report set when the process exits (if it took a sample).
    /// Returns the handle of the runner it spawned, for on-demand report sets
    /// ([`RunnerHandle::dump_now`]) and its settings ([`RunnerHandle::runner`]); the report
    /// thread and the exit report need nothing kept, so the handle may be dropped.
    pub fn start_profiling(&'static self) -> RunnerHandle {
        ProfilerRunner::seed_defaults().spawn(self)
    }

    /// Exact bytes the program retains right now (the profiler's own memory excluded).
    pub fn total_retained_bytes() -> usize {
        crate::engine::totals::read().retained_bytes() as usize
    }

    /// Exact totals: bytes and counts allocated and freed, and the profiler's own memory.
    pub fn totals() -> crate::Totals {
        crate::engine::totals::read()
    }

    /// Estimated bytes allocated since start, summed over sampled stacks.
    pub fn profiled_bytes_allocated() -> usize {
        Self::estimates().0 as usize
    }

    /// Estimated bytes retained, summed over sampled stacks.
    pub fn profiled_bytes_retained() -> usize {
        Self::estimates().1 as usize
    }

    fn estimates() -> (f64, f64) {
        let _g = RustHost::thread_state().enter();
        crate::engine::tables::estimated_bytes()
    }

    /// Addresses in the symbol cache.
    pub fn symbol_map_size(&self) -> usize {
        self.guarded(crate::symbols::symbolize::cache_len)
    }

    /// Live sampled allocations.
    pub fn num_outstanding_allocs(&self) -> usize {
        self.guarded(crate::engine::tables::live_len)
    }

    /// Distinct stacks seen.
    pub fn num_stack_traces(&self) -> usize {
        self.guarded(crate::engine::tables::distinct_stacks)
    }

    fn guarded<T>(&self, f: impl FnOnce() -> T) -> T {
        let _g = RustHost::thread_state().enter();
        f()
    }

    /// Everything the profiler knows right now.
    pub fn snapshot(&self) -> Snapshot {
        snapshot::take::<RustHost>(self.sample_interval())
    }

    /// The `k` stacks with the most estimated allocated bytes.
    pub fn top_k_stacks_by_allocated(&self, k: usize) -> Vec<StackStats> {
        snapshot::top_k::<RustHost>(self.sample_interval(), k, Measurement::AllocatedBytes)
    }

    /// The `k` stacks with the most estimated retained bytes.
    pub fn top_k_stacks_by_retained(&self, k: usize) -> Vec<StackStats> {
        snapshot::top_k::<RustHost>(self.sample_interval(), k, Measurement::RetainedBytes)
    }

    /// The `k` stacks that retained the most at the kept peak of the retained total: what held
    /// the memory when it was at its highest, even after it was freed. The peak itself (when,
    /// how high, exact and estimated) is [`Snapshot::peak`]; each stack's figure at the peak is
    /// [`StackStats::peak_retained_bytes`]. A peak is kept each time the estimated total
    /// exceeds the last kept one by 5 %, so the kept peak is within 5 % of the high-water mark.
    ///
    /// ```
    /// use ying_profiler::YingProfiler;
    ///
    /// #[global_allocator]
    /// static YING_ALLOC: YingProfiler = YingProfiler::default().with_sample_interval(4096);
    ///
    /// fn build_table() -> Vec<Vec<u64>> {
    ///     (0..512).map(|i| vec![i; 1024]).collect() // 4 MiB
    /// }
    ///
    /// drop(build_table());
    /// let top = YING_ALLOC.top_k_stacks_at_peak(3);
    /// assert!(top[0].peak_retained_bytes >= 2 << 20, "{}", top[0].peak_retained_bytes);
    /// assert_eq!(top[0].retained_bytes, 0, "freed since");
    /// ```
    pub fn top_k_stacks_at_peak(&self, k: usize) -> Vec<StackStats> {
        snapshot::top_k::<RustHost>(self.sample_interval(), k, Measurement::RetainedBytesAtPeak)
    }

    /// Forgets every stack and live sample (exact totals are kept). For tests.
    pub fn reset_state_for_testing_only(&self) {
        self.guarded(crate::engine::tables::clear)
    }

    /// Makes the calling thread's next allocation a sample. For tests.
    pub fn testing_only_guarantee_next_sample(&self) {
        RustHost::thread_state().set_budget(0);
    }
}

impl ProfileSource for YingProfiler {
    fn snapshot(&self) -> Snapshot {
        YingProfiler::snapshot(self)
    }
    fn enter_profiler_thread(&self) {
        RustHost::thread_state().enter_forever();
    }
    fn run_guarded(&self, f: &mut dyn FnMut()) {
        self.guarded(f)
    }
}

/// The alignment glibc's malloc guarantees (`System`'s `MIN_ALIGN` on the 64-bit targets).
const MALLOC_ALIGN: usize = 2 * std::mem::size_of::<usize>();

/// Whether `System` serves a block of `size` bytes aligned to `align` with plain `malloc` or
/// `realloc` (the alignment is at most what malloc guarantees, and at most the size); other
/// layouts take `System`'s aligned path.
#[inline(always)]
fn is_plain(align: usize, size: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

impl YingProfiler {
    /// `alloc` and `alloc_zeroed` beyond the unsampled path of a plain layout: samples, first
    /// calls on a thread, giant requests, over-aligned layouts. Never inlined: its address
    /// identifies the front end's frame in captured stacks (see `RustHost::is_entry_frame`).
    ///
    /// # Safety
    /// As for `GlobalAlloc::alloc` (and `alloc_zeroed` when `zeroed`).
    #[cold]
    #[inline(never)]
    unsafe fn alloc_slow(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        hooks::on_alloc::<RustHost>(
            &self.settings,
            layout.size(),
            // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
            move || unsafe {
                if zeroed { System.alloc_zeroed(layout) } else { System.alloc(layout) }
            },
            move |_| layout.size(),
        )
    }

    /// `realloc` beyond the unsampled path (see `alloc_slow`).
    ///
    /// # Safety
    /// As for `GlobalAlloc::realloc`.
    #[cold]
    #[inline(never)]
    unsafe fn realloc_slow(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        hooks::on_realloc::<RustHost>(
            &self.settings,
            ptr,
            layout.size(),
            new_size,
            // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
            move || unsafe { System.realloc(ptr, layout, new_size) },
            move |_| new_size,
        )
    }
}

// SAFETY: every method forwards to `System` (or to the `malloc` that `System` itself calls for
// that layout) with the caller's layout unchanged; the hooks only observe pointers and sizes and
// never touch the memory, so `System`'s guarantees hold.
unsafe impl GlobalAlloc for YingProfiler {
    // Inlined into the allocator shim `__rust_alloc`: the unsampled path of a plain layout is
    // the whole call. Everything else goes through `alloc_slow`, whose frame marks where a
    // captured stack's own frames end.
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let size = layout.size();
        if is_plain(layout.align(), size) {
            let fast = hooks::alloc_unsampled_sized::<RustHost>(
                size,
                // SAFETY: what `System.alloc` does for a plain layout (see `is_plain`); `size`
                // is non-zero because the alignment is at least 1 and at most `size`.
                move || unsafe { libc::malloc(size) }.cast(),
            );
            if let Some(p) = fast {
                return p;
            }
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { self.alloc_slow(layout, false) }
    }

    // Inlined into `__rust_alloc_zeroed`, as `alloc` is; the rest shares `alloc_slow`.
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let size = layout.size();
        if is_plain(layout.align(), size) {
            let fast = hooks::alloc_unsampled_sized::<RustHost>(
                size,
                // SAFETY: what `System.alloc_zeroed` does for a plain layout (see `is_plain`).
                move || unsafe { libc::calloc(size, 1) }.cast(),
            );
            if let Some(p) = fast {
                return p;
            }
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract for `layout`.
        unsafe { self.alloc_slow(layout, true) }
    }

    // Inlined into the allocator shim `__rust_dealloc` (a free is never an entry frame of a
    // captured stack, unlike the allocating methods, which keep their own addresses).
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        hooks::on_free::<RustHost>(
            ptr,
            move |_| layout.size(),
            // SAFETY: `ptr` was allocated by `System` (through us) with `layout`.
            move |p| unsafe { System.dealloc(p, layout) },
        )
    }

    // Inlined into `__rust_realloc`, as `alloc` is; `realloc_slow` is the frame of its own.
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if is_plain(layout.align(), new_size) {
            let fast = hooks::realloc_unsampled::<RustHost>(
                &self.settings,
                ptr,
                layout.size(),
                new_size,
                // SAFETY: what `System.realloc` does for a plain alignment and new size (see
                // `is_plain`); `ptr` is a live block of ours (caller contract).
                move || unsafe { libc::realloc(ptr.cast(), new_size) }.cast(),
                move |_| new_size,
            );
            if let Some(p) = fast {
                return p;
            }
        }
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { self.realloc_slow(ptr, layout, new_size) }
    }
}
