//! The `#[global_allocator]` front end: [`YingProfiler`] wraps an inner allocator ([`System`]
//! unless another is given) with the sampling hooks.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use crate::callstack::{Measurement, StackStats};
use crate::engine::hooks::{self, DEFAULT_MAX_ALLOC_BYTES, Host, Settings};
use crate::engine::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
use crate::engine::thread_state::ThreadState;
use crate::report::snapshot::{self, Snapshot};
use crate::source::ProfileSource;

/// Ying is a memory profiling allocator wrapper. Ying is the Chinese word for an eagle.
///
/// Install it as the global allocator; it samples allocations (on average one per
/// [`sample_interval`](YingProfiler::sample_interval) bytes) and forwards every call to its
/// inner allocator `A`: [`System`] for [`YingProfiler::default`] and [`YingProfiler::new`],
/// any other [`GlobalAlloc`] (mimalloc, jemalloc, ...) with [`YingProfiler::wrapping`]. See the
/// [crate documentation](crate) for the whole picture.
///
/// Every figure counts the sizes the program asked for (its `Layout`s), never what the inner
/// allocator made of them, so the numbers, the exact totals, the giant guard and every report
/// are the same whichever allocator is inside.
///
/// A request of at least the giant limit (64 GiB by default) is refused before anything is
/// allocated: its stack is printed to stderr and `null` is returned. For the infallible std
/// collections a null return means Rust's allocation-error handler aborts the process, with the
/// stack that asked printed just before.
pub struct YingProfiler<A: GlobalAlloc = System> {
    settings: Settings,
    inner: A,
}

impl<A: GlobalAlloc> std::fmt::Debug for YingProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The inner allocator by type name: allocator crates rarely implement `Debug`.
        f.debug_struct("YingProfiler")
            .field("settings", &self.settings)
            .field("inner", &std::any::type_name::<A>())
            .finish()
    }
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
        // The slow paths are not generic over the inner allocator (it is called through a
        // `&dyn Fn`), so that one address per entry point stands for every `YingProfiler<A>`.
        let start = function();
        type A = fn(&Settings, Layout, &dyn Fn() -> *mut u8) -> *mut u8;
        type R = fn(&Settings, *mut u8, Layout, usize, &dyn Fn() -> *mut u8) -> *mut u8;
        start == alloc_slow as A as usize || start == realloc_slow as R as usize
    }
}

/// The profiler over [`System`]: its constructors, and the figures that are process-wide (one
/// set of tables and totals serves every `YingProfiler`, whatever its inner allocator).
impl YingProfiler {
    /// The default profiler over [`System`]: 512 KiB mean sampling interval, 64 GiB giant
    /// limit.
    #[allow(clippy::should_implement_trait)]
    pub const fn default() -> Self {
        Self::wrapping(System)
    }

    /// A profiler over [`System`] sampling on average once per `sample_interval_bytes` bytes
    /// (1 = every allocation) and refusing single requests of `single_alloc_limit` bytes or
    /// more.
    ///
    /// In 0.3.0 the first argument was "sample one allocation in N"; it is now a byte interval,
    /// which weighs large allocations fairly and makes every figure an unbiased estimate.
    pub const fn new(sample_interval_bytes: u32, single_alloc_limit: usize) -> Self {
        Self {
            settings: Settings::new(sample_interval_bytes as u64, single_alloc_limit as u64),
            inner: System,
        }
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
}

impl<A: GlobalAlloc> YingProfiler<A> {
    /// A profiler with the default settings (512 KiB mean sampling interval, 64 GiB giant
    /// limit) that forwards every call to `inner`, for a program that keeps its allocator:
    ///
    /// ```
    /// use ying_profiler::YingProfiler;
    ///
    /// #[global_allocator]
    /// static YING_ALLOC: YingProfiler<mimalloc::MiMalloc> =
    ///     YingProfiler::wrapping(mimalloc::MiMalloc).with_sample_interval(1);
    ///
    /// #[inline(never)]
    /// fn build_index() -> Vec<Box<[u8]>> {
    ///     (0..100).map(|_| vec![1u8; 1000].into_boxed_slice()).collect()
    /// }
    ///
    /// let index = build_index();
    /// // Sizes are the program's requests, not mimalloc's size classes: with an interval of
    /// // one byte every allocation is a sample, and the figures are exact.
    /// let top = YING_ALLOC.top_k_stacks_by_retained(20);
    /// let boxes = top
    ///     .iter()
    ///     .find(|s| s.num_allocations == 100 && s.frames.iter().any(|f| f.function.contains("build_index")))
    ///     .expect("build_index's stack");
    /// assert_eq!(boxes.retained_bytes, 100_000);
    /// assert!(YingProfiler::total_retained_bytes() >= 100_000);
    /// drop(index);
    /// ```
    ///
    /// The figures that are process-wide ([`YingProfiler::total_retained_bytes`],
    /// [`YingProfiler::totals`]) are called on `YingProfiler` whatever the inner allocator.
    pub const fn wrapping(inner: A) -> Self {
        Self {
            settings: Settings::new(DEFAULT_SAMPLE_INTERVAL_BYTES, DEFAULT_MAX_ALLOC_BYTES),
            inner,
        }
    }

    /// A copy of this profiler with another mean sampling interval in bytes.
    pub const fn with_sample_interval(self, bytes: u64) -> Self {
        let limit = self.settings.max_alloc_bytes_const();
        self.with_settings(Settings::new(bytes, limit))
    }

    /// A copy of this profiler refusing single requests of `bytes` or more (the giant guard).
    pub const fn with_single_alloc_limit(self, bytes: u64) -> Self {
        let interval = self.settings.sample_interval_const();
        self.with_settings(Settings::new(interval, bytes))
    }

    /// The allocator every call is forwarded to.
    pub const fn inner(&self) -> &A {
        &self.inner
    }

    /// The same profiler with other settings (for the `const` builders: a `const fn` may
    /// neither drop nor move a field out of a `Self` that is generic, so `self` is taken apart
    /// by hand).
    const fn with_settings(self, settings: Settings) -> Self {
        // SAFETY: `inner` is read out once and `self` is forgotten right after, so the
        // allocator value is moved, not duplicated; the old `Settings` (atomics) has no
        // destructor to miss.
        let inner = unsafe { std::ptr::read(&self.inner) };
        std::mem::forget(self);
        Self { settings, inner }
    }

    /// The sampling settings (interval, giant limit, seed), adjustable at run time.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Mean bytes between samples.
    pub fn sample_interval(&self) -> u64 {
        self.settings.sample_interval()
    }

    // `start_profiling` is in `src/runner/mod.rs`: the runner imports this front end, not
    // the other way round.

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
        self.guarded(crate::report::model::table::distinct_stacks)
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
        let ts = RustHost::thread_state();
        ts.beyond.set(0);
        ts.set_budget(0);
    }
}

impl<A: GlobalAlloc + Send + Sync + 'static> ProfileSource for YingProfiler<A> {
    fn enter_profiler_thread(&self) {
        RustHost::thread_state().enter_forever();
        // Whether the heap's regions are glibc's, for the resident set's breakdown.
        crate::report::model::rss::set_inner_allocator_is_system(
            std::any::TypeId::of::<A>() == std::any::TypeId::of::<System>(),
        );
    }
    fn run_guarded(&self, f: &mut dyn FnMut()) {
        self.guarded(f)
    }
    fn sample_interval(&self) -> u64 {
        YingProfiler::sample_interval(self)
    }
    fn unit(&self) -> crate::ByteUnit {
        RustHost::UNIT
    }
}

/// `alloc` and `alloc_zeroed` beyond the unsampled path: samples, first calls on a thread,
/// giant requests. `real` is the inner allocator's call. Never inlined and not generic: its
/// one address identifies the front end's frame in captured stacks for every inner allocator
/// (see `RustHost::is_entry_frame`); the inner call through `&dyn Fn` costs an indirect call on
/// this path only.
#[cold]
#[inline(never)]
fn alloc_slow(settings: &Settings, layout: Layout, real: &dyn Fn() -> *mut u8) -> *mut u8 {
    hooks::on_alloc::<RustHost>(settings, layout.size(), real, move |_| layout.size())
}

/// `realloc` beyond the unsampled path (see `alloc_slow`).
#[cold]
#[inline(never)]
fn realloc_slow(
    settings: &Settings,
    ptr: *mut u8,
    layout: Layout,
    new_size: usize,
    real: &dyn Fn() -> *mut u8,
) -> *mut u8 {
    hooks::on_realloc::<RustHost>(settings, ptr, layout.size(), new_size, real, move |_| new_size)
}

// SAFETY: every method forwards to the inner allocator `A` with the caller's layout, pointer and
// size unchanged (one call per call, or none for a refused giant request, which returns null);
// the hooks only observe pointers and sizes and never touch the memory, so `A`'s guarantees
// hold, and every block is returned to the allocator that made it.
unsafe impl<A: GlobalAlloc> GlobalAlloc for YingProfiler<A> {
    // Inlined into the allocator shim `__rust_alloc`: the unsampled path is the whole call (the
    // inner allocator's own, inlined where it can be: `System`'s is `malloc`). Everything else
    // goes through `alloc_slow`, whose frame marks where a captured stack's own frames end.
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`, which is
        // passed on unchanged.
        let real = move || unsafe { self.inner.alloc(layout) };
        match hooks::alloc_unsampled_sized::<RustHost>(layout.size(), real) {
            Some(p) => p,
            None => alloc_slow(&self.settings, layout, &real),
        }
    }

    // Inlined into `__rust_alloc_zeroed`, as `alloc` is; the rest shares `alloc_slow`.
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract for `layout`, which
        // is passed on unchanged.
        let real = move || unsafe { self.inner.alloc_zeroed(layout) };
        match hooks::alloc_unsampled_sized::<RustHost>(layout.size(), real) {
            Some(p) => p,
            None => alloc_slow(&self.settings, layout, &real),
        }
    }

    // Inlined into the allocator shim `__rust_dealloc` (a free is never an entry frame of a
    // captured stack, unlike the allocating methods, which keep their own addresses).
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        hooks::on_free::<RustHost>(
            ptr,
            move |_| layout.size(),
            // SAFETY: `ptr` was allocated by the inner allocator (through us) with `layout`.
            move |p| unsafe { self.inner.dealloc(p, layout) },
        )
    }

    // Inlined into `__rust_realloc`, as `alloc` is; `realloc_slow` is the frame of its own.
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract (`ptr` is a live block
        // of the inner allocator's, through us, with `layout`), passed on unchanged.
        let real = move || unsafe { self.inner.realloc(ptr, layout, new_size) };
        let fast = hooks::realloc_unsampled::<RustHost>(
            &self.settings,
            ptr,
            layout.size(),
            new_size,
            real,
            move |_| new_size,
        );
        match fast {
            Some(p) => p,
            None => realloc_slow(&self.settings, ptr, layout, new_size, &real),
        }
    }
}

/// The 0.3.0 report methods of one stack's statistics. They take the profiler they do not use
/// (programs written for 0.3.0 pass it); they live beside it so that the report module, which
/// formats them, never names the profiler.
impl crate::StackStats {
    /// A human-readable block (0.3.0 signature): figures, histogram and frames.
    pub fn rich_report<A: GlobalAlloc>(
        &self,
        _profiler: &YingProfiler<A>,
        with_filenames: bool,
        expand_frame: bool,
    ) -> String {
        let mut s = crate::report::text::stack_block(self, None, with_filenames, expand_frame);
        if s.ends_with('\n') {
            s.pop();
        }
        s
    }

    /// One folded-stack line (`root;...;leaf value`) weighted by `measurement` (0.3.0 name).
    pub fn dtrace_report<A: GlobalAlloc>(
        &self,
        _profiler: &YingProfiler<A>,
        measurement: Measurement,
    ) -> String {
        crate::report::folded::line(self, measurement, false)
    }
}
