//! The estimates are unbiased for every allocation function and every realloc pattern, in both
//! units, also with the giant limit near the interval, and exact at interval 1. The engine's hooks are driven directly, with glibc as the
//! real allocator and a host of this file's own, so that only the blocks a pattern makes are
//! sampled: each pattern runs once per seed, and the mean over the seeds of every figure
//! (allocated and retained bytes and blocks, freed bytes and frees, summed over the stacks)
//! must lie within four standard errors of the truth, which the pattern counts itself.
//!
//! The truth follows `sampler`'s definitions: a block's counted bytes are its request (the Rust
//! front end's unit) or its glibc chunk, `malloc_usable_size + 8` (the shim's); a realloc is
//! one allocation whose growth counts as allocated bytes and whose shrink counts as freed
//! bytes; `realloc(NULL, n)` is an allocation and `realloc(p, 0)` a free.
//!
//! `STAT_SEEDS=n` changes the number of seeds (150 by default), `STAT_SEED_BASE=n` the first
//! seed (1000), `STAT_PATTERN=name` runs only the patterns whose name contains `name`.

use std::cell::Cell;
use std::sync::Mutex;

use ying_profiler::YingProfiler;
use ying_profiler::front_end::hooks::{self, Host};
use ying_profiler::front_end::snapshot;
use ying_profiler::front_end::thread_state::ThreadState;
use ying_profiler::report::heap_profile;
use ying_profiler::{ByteUnit, Settings, Snapshot};

thread_local! {
    static TS: ThreadState = const { ThreadState::new() };
    static EXIT: ExitHook = const { ExitHook(Cell::new(std::ptr::null())) };
}

/// Runs [`hooks::thread_exit`] when a thread that used the hooks ends.
struct ExitHook(Cell<*const ThreadState>);

impl Drop for ExitHook {
    fn drop(&mut self) {
        // SAFETY: the pointer is this thread's `TS` block, which has no destructor and stays
        // valid until the thread is gone.
        if let Some(ts) = unsafe { self.0.get().as_ref() } {
            hooks::thread_exit(ts);
        }
    }
}

struct TestHost;

impl Host for TestHost {
    fn thread_state() -> &'static ThreadState {
        let p = TS.with(|t| t as *const ThreadState);
        // SAFETY: `TS` is const-initialised with no destructor, so its storage is valid for
        // the whole life of the calling thread; the hooks use it only on this thread.
        unsafe { &*p }
    }
    fn register_thread_exit(ts: &ThreadState) -> bool {
        EXIT.try_with(|e| e.0.set(ts as *const ThreadState)).is_ok()
    }
    fn is_entry_frame(_ip: usize, _function: impl FnOnce() -> usize) -> bool {
        false
    }
}

static SET: Settings = Settings::new(64 * 1024, 64 << 30);
/// The tables and the totals are the process's: one pattern at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The unit of a pattern's counted bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    Requested,
    Chunk,
}

/// A live block: its address and request.
#[derive(Clone, Copy)]
struct Block {
    ptr: usize,
    req: usize,
}

// SAFETY: a `Block` is an address and a size; the patterns hand blocks to other threads, which
// is what the across-threads pattern is about (glibc's allocator is thread-safe).
unsafe impl Send for Block {}

/// What a pattern did, counted in its unit.
#[derive(Default, Clone, Copy, Debug)]
struct Truth {
    allocated: f64,
    allocations: f64,
    freed: f64,
    frees: f64,
}

impl Truth {
    fn add(&mut self, o: Truth) {
        self.allocated += o.allocated;
        self.allocations += o.allocations;
        self.freed += o.freed;
        self.frees += o.frees;
    }
}

/// glibc through the hooks, counting the truth as it goes.
struct Heap {
    unit: Unit,
    truth: Cell<Truth>,
}

fn chunk(p: *mut u8) -> usize {
    // SAFETY: `p` is a live block glibc returned.
    unsafe { libc::malloc_usable_size(p.cast()) + 8 }
}

impl Heap {
    fn new(unit: Unit) -> Self {
        Self { unit, truth: Cell::new(Truth::default()) }
    }

    fn counted(&self, p: *mut u8, req: usize) -> usize {
        match self.unit {
            Unit::Requested => req,
            Unit::Chunk => chunk(p),
        }
    }

    fn note(&self, f: impl FnOnce(&mut Truth)) {
        let mut t = self.truth.get();
        f(&mut t);
        self.truth.set(t);
    }

    fn alloc_with(&self, req: usize, real: impl FnOnce() -> *mut u8 + Copy) -> Block {
        let unit = self.unit;
        let p = hooks::on_alloc::<TestHost>(&SET, req, real, move |p| match unit {
            Unit::Requested => req,
            Unit::Chunk => chunk(p),
        });
        assert!(!p.is_null());
        let c = self.counted(p, req) as f64;
        self.note(|t| {
            t.allocated += c;
            t.allocations += 1.0;
        });
        Block { ptr: p as usize, req }
    }

    fn malloc(&self, req: usize) -> Block {
        // SAFETY: plain glibc calls.
        self.alloc_with(req, move || unsafe { libc::malloc(req) }.cast())
    }

    fn calloc(&self, req: usize) -> Block {
        // SAFETY: plain glibc calls.
        self.alloc_with(req, move || unsafe { libc::calloc(req, 1) }.cast())
    }

    fn memalign(&self, align: usize, req: usize) -> Block {
        // SAFETY: plain glibc calls; `align` is a power of two.
        self.alloc_with(req, move || unsafe { libc::memalign(align, req) }.cast())
    }

    /// `realloc(b, req)`; `None` when it freed the block (`req == 0`). `b` may be null
    /// (`realloc(NULL, req)`, an allocation).
    fn realloc(&self, b: Option<Block>, req: usize) -> Option<Block> {
        let (old, old_req) =
            b.map_or((std::ptr::null_mut::<u8>(), 0), |b| (b.ptr as *mut u8, b.req));
        let old_counted = if old.is_null() { 0 } else { self.counted(old, old_req) };
        let unit = self.unit;
        let p = hooks::on_realloc::<TestHost>(
            &SET,
            old,
            old_counted,
            req,
            // SAFETY: `old` is null or a live glibc block of ours.
            move || unsafe { libc::realloc(old.cast(), req) }.cast(),
            move |p| match unit {
                Unit::Requested => req,
                Unit::Chunk => chunk(p),
            },
        );
        if p.is_null() {
            assert_eq!(req, 0, "realloc failed");
            let o = old_counted as f64;
            self.note(|t| {
                t.freed += o;
                t.frees += 1.0;
            });
            return None;
        }
        let (o, n) = (old_counted as f64, self.counted(p, req) as f64);
        self.note(|t| {
            if old.is_null() {
                t.allocations += 1.0;
            }
            if n > o {
                t.allocated += n - o;
            } else {
                t.freed += o - n;
            }
        });
        Some(Block { ptr: p as usize, req })
    }

    fn free(&self, b: Block) {
        let unit = self.unit;
        let req = b.req;
        let c = self.counted(b.ptr as *mut u8, req) as f64;
        hooks::on_free::<TestHost>(
            b.ptr as *mut u8,
            move |p| match unit {
                Unit::Requested => req,
                Unit::Chunk => chunk(p),
            },
            // SAFETY: a live glibc block of ours, freed once.
            |p| unsafe { libc::free(p.cast()) },
        );
        self.note(|t| {
            t.freed += c;
            t.frees += 1.0;
        });
    }
}

/// A pattern makes blocks, changes and frees some; it returns the ones still live.
type Pattern = fn(&Heap) -> Vec<Block>;

fn pattern_malloc(h: &Heap) -> Vec<Block> {
    let sizes = [16, 100, 1000, 5000, 40_000];
    let mut live = Vec::new();
    for i in 0..2000 {
        let b = h.malloc(sizes[i % sizes.len()]);
        if i % 3 == 0 { h.free(b) } else { live.push(b) }
    }
    live
}

fn pattern_calloc(h: &Heap) -> Vec<Block> {
    let sizes = [24, 700, 3000, 20_000];
    let mut live = Vec::new();
    for i in 0..2000 {
        let b = h.calloc(sizes[i % sizes.len()]);
        if i % 4 == 0 { h.free(b) } else { live.push(b) }
    }
    live
}

fn pattern_memalign(h: &Heap) -> Vec<Block> {
    let mut live = Vec::new();
    for i in 0..1000 {
        let b = if i % 2 == 0 { h.memalign(64, 1000) } else { h.memalign(4096, 5000) };
        if i % 5 == 0 { h.free(b) } else { live.push(b) }
    }
    live
}

/// The first example: `malloc(1000)` then `realloc(p, 50)`, kept.
fn pattern_shrink(h: &Heap) -> Vec<Block> {
    shrink_n(h, 8000)
}

/// The same with more blocks, for the default interval: about 4 of the samples survive the
/// shrink per run (with 1, the mean over the seeds is too skewed for a z-test).
fn pattern_shrink_many(h: &Heap) -> Vec<Block> {
    shrink_n(h, 32_000)
}

fn shrink_n(h: &Heap, n: usize) -> Vec<Block> {
    (0..n).map(|_| h.realloc(Some(h.malloc(1000)), 50).unwrap()).collect()
}

/// The second example: a block grown from 16 to 10,016 bytes in 100 steps, kept.
fn pattern_grow(h: &Heap) -> Vec<Block> {
    (0..200)
        .map(|_| {
            let mut b = h.malloc(16);
            for k in 1..=100 {
                b = h.realloc(Some(b), 16 + 100 * k).unwrap();
            }
            b
        })
        .collect()
}

/// Shrink, then grow past the first size; a third shrink back a little; half freed.
fn pattern_shrink_then_grow(h: &Heap) -> Vec<Block> {
    let mut live = Vec::new();
    for i in 0..2500 {
        let b = h.realloc(Some(h.malloc(1000)), 50).unwrap();
        let b = h.realloc(Some(b), 3000).unwrap();
        let b = if i % 3 == 0 { h.realloc(Some(b), 2500).unwrap() } else { b };
        if i % 2 == 0 { h.free(b) } else { live.push(b) }
    }
    live
}

/// `realloc(NULL, n)` allocates, `realloc(p, 0)` frees.
fn pattern_zero(h: &Heap) -> Vec<Block> {
    let mut live = Vec::new();
    for i in 0..2000 {
        let b = h.realloc(None, 700).unwrap();
        let b = h.realloc(Some(b), 2000).unwrap();
        if i % 2 == 0 {
            assert!(h.realloc(Some(b), 0).is_none());
        } else {
            live.push(b);
        }
    }
    live
}

/// Blocks allocated on one thread, grown or shrunk on a second, some freed on a third.
fn pattern_threads(h: &Heap) -> Vec<Block> {
    let unit = h.unit;
    let (made, t1) = std::thread::spawn(move || {
        let h = Heap::new(unit);
        let v: Vec<Block> =
            (0..3000).map(|i| h.malloc(if i % 2 == 0 { 1000 } else { 4000 })).collect();
        (v, h.truth.get())
    })
    .join()
    .unwrap();
    let (changed, t2) = std::thread::spawn(move || {
        let h = Heap::new(unit);
        let v: Vec<Block> = made
            .into_iter()
            .enumerate()
            .map(|(i, b)| h.realloc(Some(b), if i % 3 == 0 { 9000 } else { 60 }).unwrap())
            .collect();
        (v, h.truth.get())
    })
    .join()
    .unwrap();
    let (kept, t3) = std::thread::spawn(move || {
        let h = Heap::new(unit);
        let mut kept = Vec::new();
        for (i, b) in changed.into_iter().enumerate() {
            if i % 4 == 0 { h.free(b) } else { kept.push(b) }
        }
        (kept, h.truth.get())
    })
    .join()
    .unwrap();
    h.note(|t| {
        t.add(t1);
        t.add(t2);
        t.add(t3);
    });
    kept
}

/// The figures a snapshot estimates, summed over its stacks.
#[derive(Clone, Copy, Debug)]
struct Figures {
    allocated: f64,
    allocations: f64,
    retained: f64,
    retained_count: f64,
    freed: f64,
    frees: f64,
}

const NAMES: [&str; 6] =
    ["allocated bytes", "allocations", "retained bytes", "retained blocks", "freed bytes", "frees"];

impl Figures {
    fn of(snap: &Snapshot) -> Self {
        let sum = |f: fn(&ying_profiler::StackStats) -> u64| {
            snap.stacks.iter().map(|s| f(s) as f64).sum::<f64>()
        };
        Self {
            allocated: sum(|s| s.allocated_bytes),
            allocations: sum(|s| s.num_allocations),
            retained: sum(|s| s.retained_bytes),
            retained_count: sum(|s| s.retained_count),
            freed: sum(|s| s.freed_bytes),
            frees: sum(|s| s.num_frees),
        }
    }
    fn truth(t: Truth, live: &[Block], h: &Heap) -> Self {
        let retained: f64 = live.iter().map(|b| h.counted(b.ptr as *mut u8, b.req) as f64).sum();
        assert_eq!(t.allocated - t.freed, retained, "the pattern's own bookkeeping");
        Self {
            allocated: t.allocated,
            allocations: t.allocations,
            retained,
            retained_count: live.len() as f64,
            freed: t.freed,
            frees: t.frees,
        }
    }
    fn values(&self) -> [f64; 6] {
        [
            self.allocated,
            self.allocations,
            self.retained,
            self.retained_count,
            self.freed,
            self.frees,
        ]
    }
}

/// One run of `pattern` with the sampler seeded by `seed`: the estimates, the truth, and the
/// change of the exact totals (allocated, freed).
fn run_once(pattern: Pattern, unit: Unit, seed: u64) -> (Snapshot, Figures, (u64, u64)) {
    YingProfiler::default().reset_state_for_testing_only();
    SET.set_seed(seed);
    let ts = TestHost::thread_state();
    // Sets the thread up on first use; afterwards reseeds its generator.
    hooks::restart_sampling(ts, &SET);
    let h = Heap::new(unit);
    let before = YingProfiler::totals();
    let live = pattern(&h);
    let after = YingProfiler::totals();
    let snap = snapshot::take::<TestHost>(SET.sample_interval());
    let truth = Figures::truth(h.truth.get(), &live, &h);
    for b in live {
        h.free(b);
    }
    let exact =
        (after.allocated_bytes - before.allocated_bytes, after.freed_bytes - before.freed_bytes);
    (snap, truth, exact)
}

fn seeds() -> u64 {
    std::env::var("STAT_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(150)
}

/// The mean over the seeds of every figure lies within four standard errors of the truth.
fn check_unbiased(name: &str, pattern: Pattern, unit: Unit, interval: u64) {
    if std::env::var("STAT_PATTERN").is_ok_and(|p| !name.contains(&p)) {
        return;
    }
    let base = std::env::var("STAT_SEED_BASE").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    SET.set_sample_interval(interval);
    // Make sure the thread is set up before the first seeded run.
    let _ = TestHost::thread_state();
    let n = seeds();
    let started = std::time::Instant::now();
    let mut diffs: Vec<[f64; 6]> = Vec::new();
    let mut truth0 = None;
    for seed in 0..n {
        let (snap, truth, exact) = run_once(pattern, unit, base + seed);
        assert_eq!(
            (exact.0 as f64, exact.1 as f64),
            (truth.allocated, truth.freed),
            "{name} ({unit:?}): exact totals"
        );
        let est = Figures::of(&snap).values();
        let tv = truth.values();
        // The pattern is deterministic: the truth is the same every time (in the request unit;
        // glibc may place blocks differently, which can change a chunk size by a few bytes).
        if unit == Unit::Requested {
            assert_eq!(*truth0.get_or_insert(tv), tv, "{name}: the pattern is not deterministic");
        }
        diffs.push(std::array::from_fn(|i| (est[i] - tv[i]) / tv[i].max(1.0)));
    }
    eprintln!("{name} ({unit:?}, interval {interval}): {n} seeds in {:?}", started.elapsed());
    for (i, what) in NAMES.iter().enumerate() {
        let xs: Vec<f64> = diffs.iter().map(|d| d[i]).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let se = (var / n as f64).sqrt();
        eprintln!(
            "{name} ({unit:?}, interval {interval}): {what}: mean relative error {mean:+.4} (se {se:.4}, z {:+.2})",
            mean / se.max(1e-12)
        );
        // Rounding each stack's figure to an integer adds a little; allow 0.1 %.
        assert!(
            mean.abs() <= 4.0 * se + 1e-3,
            "{name} ({unit:?}, interval {interval}): {what} is biased: mean relative error {mean:+.4}, standard error {se:.4}"
        );
    }
}

/// At interval 1 every figure equals the truth, the exact totals, and the pprof values.
fn check_exact(name: &str, pattern: Pattern, unit: Unit) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    SET.set_sample_interval(1);
    let (snap, truth, exact) = run_once(pattern, unit, 7);
    let est = Figures::of(&snap);
    assert_eq!(est.values(), truth.values(), "{name} ({unit:?}): estimates at interval 1");
    assert_eq!(
        (exact.0 as f64, exact.1 as f64),
        (est.allocated, est.freed),
        "{name}: exact totals"
    );
    let pprof = heap_profile::build(&snap, "");
    let col = |i: usize| pprof.sample.iter().map(|s| s.value[i] as f64).sum::<f64>();
    assert_eq!(
        [col(0), col(1), col(2), col(3)],
        [est.allocations, est.allocated, est.retained_count, est.retained],
        "{name} ({unit:?}): pprof values at interval 1"
    );
}

const PATTERNS: [(&str, Pattern); 8] = [
    ("malloc", pattern_malloc),
    ("calloc", pattern_calloc),
    ("memalign", pattern_memalign),
    ("shrink", pattern_shrink),
    ("grow", pattern_grow),
    ("shrink then grow", pattern_shrink_then_grow),
    ("realloc to and from 0", pattern_zero),
    ("across threads", pattern_threads),
];

/// The interval of the pattern tests: small enough that the smallest blocks of every pattern
/// are sampled about once per run, so that the mean over the seeds is nearly normal (a count
/// estimate made of a few rare samples of weight thousands is too skewed for a z-test).
const INTERVAL: u64 = 16 * 1024;

/// One test, so that the runs happen in one order: a thread's generator is seeded from the
/// seed and the thread's ordinal, which counts every set-up and restart in the process.
#[test]
fn estimates_are_unbiased_and_exact_at_interval_one() {
    for (name, p) in PATTERNS {
        for unit in [Unit::Chunk, Unit::Requested] {
            check_exact(name, p, unit);
        }
    }
    for unit in [Unit::Chunk, Unit::Requested] {
        for (name, p) in PATTERNS {
            check_unbiased(name, p, unit, INTERVAL);
        }
    }
    // The two examples at the intervals it measured them at.
    check_unbiased("grow", pattern_grow, Unit::Chunk, 64 * 1024);
    check_unbiased("shrink", pattern_shrink, Unit::Chunk, 64 * 1024);
    check_unbiased("grow", pattern_grow, Unit::Chunk, 512 * 1024);
    check_unbiased("shrink", pattern_shrink_many, Unit::Chunk, 512 * 1024);
    // The giant limit near the interval (above every pattern's largest block, 40,000 bytes): a
    // thread's budget is its countdown capped at the limit, and a capped countdown goes on as
    // the next budget when the cap runs out (`sample::ran_out`). Sampling where the cap ran out
    // read every figure high.
    SET.set_max_alloc_bytes(GIANT_NEAR_INTERVAL);
    for unit in [Unit::Chunk, Unit::Requested] {
        for (name, p) in PATTERNS {
            check_unbiased(name, p, unit, INTERVAL);
        }
    }
    SET.set_max_alloc_bytes(64 << 30);
}

/// The giant limit of the last runs: 2.5 intervals, so that about one draw in twelve is capped.
const GIANT_NEAR_INTERVAL: u64 = 40 * 1024;

#[test]
fn host_unit_defaults_to_requests() {
    assert_eq!(<TestHost as Host>::UNIT, ByteUnit::Requested);
}
