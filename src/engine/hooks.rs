//! The allocation hooks shared by both front ends (the `#[global_allocator]` type and the
//! `LD_PRELOAD` shim). A front end supplies a [`Host`] (where its per-thread state lives, how it
//! learns about thread exit, which frames are its own) and the real allocator calls as closures.
//!
//! The unsampled paths are `#[inline(always)]` and do only this. An allocation compares its size
//! with the thread's budget, calls the real allocator and charges the block's counted bytes to
//! the budget, which both counts them and advances the sampler; the one allocation in a while
//! that uses up the budget is sampled. A free reads one byte of the address filter its thread
//! points to and adds to the thread's freed bytes. No lock, no syscall, no allocation, no panic,
//! `errno` untouched. Everything else (first call on a thread, re-entrant calls from profiler
//! code, a sample, a giant request, a free the filter cannot reject, a thread that is exiting)
//! goes to a `#[cold]` slow path.
//!
//! # Thread states
//!
//! Every hook knows which state the calling thread is in (`ThreadState::status`,
//! `registered`, the guard depth), and does only what that state allows. The rule behind the
//! table: a thread registers something that outlives the call (its counters in the totals'
//! registry, which then point into its TLS) only when its exit handler is certain to run and
//! take it back before the thread's stack goes away.
//!
//! | state | how a thread gets there | allocation | free | samples |
//! |---|---|---|---|---|
//! | new | not seen yet (TLS initial image: budget 0, reject-all filter) | sets it up (Rust front end: registered; shim: unregistered, see below) | shared counters; stays new | no |
//! | live, registered | set up where its exit handler will run: the shim's thread start and constructor ([`thread_started`]), the Rust front end's first allocation | own counters, unsampled fast path | own counters, fast path | yes |
//! | live, unregistered | set up where that is not certain (the shim: a thread it did not see start, such as glibc's helper threads), or the registry was full | shared counters, slow path | shared counters, slow path | no |
//! | inside the profiler | guard held (any state): the thread runs profiler code, or a signal handler interrupted it there | profiler memory, never sampled | profiler memory | no |
//! | exiting / past its destructors | its exit handler ran ([`thread_exit`]): counters folded into the totals, registry entry gone | shared counters, slow path | shared counters | no |
//!
//! A free never sets a thread up: a thread's first hooked call may be glibc freeing its TLS
//! after its destructors ran, with its stack about to be unmapped. For the same reason the
//! shim sets threads up only at their start (its `pthread_create`) and the main thread from its
//! constructor. Stack bounds for the caching unwinder are recorded at the same moments in the
//! shim; the sampled path never asks `pthread_getattr_np` there (it allocates while holding the
//! thread's own lock), and a thread without recorded bounds is unwound by libgcc.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::capture::{capture, frame_buf};
pub(crate) use crate::engine::host::{DEFAULT_MAX_ALLOC_BYTES, Host, Settings};
use crate::engine::sample::{self, Sample, redraw};
use crate::engine::sampler;
use crate::engine::tables::{self, Record};
use crate::engine::thread_state::{STATUS_DEAD, STATUS_LIVE, STATUS_NEW, ThreadState};
use crate::engine::totals;
use crate::stack::unwind::CallerFrame;

/// Threads set up so far (gives each a distinct generator stream for a fixed seed).
static THREAD_ORDINAL: AtomicU64 = AtomicU64::new(0);
/// `fork`s of this process so far, counted by [`fork_prepare`]: a child's number, for a
/// generator of its own (see [`restart_after_fork`]).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Mixed into a seed for the streams of `fork` children, apart from the threads' streams.
const FORK_STREAMS: u64 = 0xF0A3_5C1D_27B4_E869;

fn init_thread<H: Host>(ts: &ThreadState, set: &Settings, register: bool) {
    if ts.status.get() == STATUS_NEW {
        let ordinal = THREAD_ORDINAL.fetch_add(1, Ordering::Relaxed);
        let seed = if set.seeded.load(Ordering::Relaxed) {
            set.seed.load(Ordering::Relaxed)
        } else {
            crate::sys::clock::now_ns() ^ (ts as *const ThreadState as u64)
        };
        ts.rng.set(sampler::seed_for(seed, ordinal));
        ts.ordinal.set(ordinal);
        ts.real.set(H::real_filter());
        ts.status.set(STATUS_LIVE);
    }
    if register && ts.status.get() == STATUS_LIVE && ts.registered.get() == 0 {
        let registered = {
            // Registering the exit callback may allocate (TLS destructor lists, pthread keys).
            let _g = ts.enter();
            // The totals read the thread's counters until its exit handler says goodbye, so a
            // thread whose exit cannot be seen must never register.
            H::register_thread_exit(ts) && totals::register(ts)
        };
        // Unregistered, the thread keeps taking the slow paths and counts in the shared
        // counters.
        ts.registered.set(registered as u32);
    }
    if !ts.guarded() {
        ts.filter.set(ts.own_filter());
    }
    redraw(ts, set);
}

/// The thread owning `ts` is starting (or is the main thread, alive for the whole process):
/// sets it up with counters of its own, registered with the totals, and records its stack as
/// `stack` (lowest address, one past the highest; `None` leaves the unwinder to libgcc). A
/// front end calls this where it knows the thread's exit handler will run: before the
/// thread's own code (the shim's thread start), or for the main thread. A thread that already
/// allocated without counters of its own (the main thread before the shim's constructor) is
/// upgraded; a thread whose exit handler already ran is left alone.
pub fn thread_started<H: Host>(ts: &ThreadState, set: &Settings, stack: Option<(usize, usize)>) {
    if ts.status.get() == STATUS_DEAD {
        return;
    }
    let (lo, top) = stack.unwrap_or((1, 1));
    ts.stack_lo.set(lo);
    ts.stack_top.set(top);
    init_thread::<H>(ts, set, true);
}

/// Starts the calling thread's sampling afresh from `set`: a new countdown (and a generator
/// seeded from `set` when it has a seed). The shim calls this once its configuration is read,
/// because threads that allocated before (the main thread, while libraries' constructors ran)
/// hold a countdown drawn while sampling was off.
pub fn restart_sampling(ts: &ThreadState, set: &Settings) {
    if ts.status.get() == STATUS_NEW {
        return; // Its first allocation draws from `set` anyway.
    }
    if set.seeded.load(Ordering::Relaxed) {
        let ordinal = THREAD_ORDINAL.fetch_add(1, Ordering::Relaxed);
        ts.rng.set(sampler::seed_for(set.seed.load(Ordering::Relaxed), ordinal));
    }
    redraw(ts, set);
}

/// Allocations of the program's that failed (a null from the allocator: a memory limit, strict
/// overcommit), counted by the front ends on their failure paths only.
static ALLOC_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Counts an allocation of the program's that failed. Changes nothing else (`errno` included).
#[cold]
pub fn alloc_failed() {
    ALLOC_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Allocations of the program's that failed since the start: report work keeps off the last
/// memory of a program whose allocations fail (see `source::budget`).
pub(crate) fn alloc_failures() -> u64 {
    ALLOC_FAILURES.load(Ordering::Relaxed)
}

/// A `fork` child's surviving thread samples on its own from here on: its generator, a copy of
/// the parent's, is seeded afresh (from the seed and the fork's number when the run has a seed,
/// so that a seeded run is repeatable; otherwise from the kernel's entropy and the child's pid)
/// and its countdown drawn again. Without this every child went on with its parent's countdown
/// and generator: all children of one parent sampled the same allocations (every one or none),
/// and their estimates were one draw repeated, not independent ones. Redrawing at a moment the
/// program's allocations do not choose keeps every estimate unbiased (the countdown is
/// memoryless).
pub fn restart_after_fork(ts: &ThreadState, set: &Settings) {
    if ts.status.get() != STATUS_LIVE {
        return;
    }
    let fork = FORKS.load(Ordering::Relaxed);
    let seed = if set.seeded.load(Ordering::Relaxed) {
        set.seed.load(Ordering::Relaxed) ^ FORK_STREAMS
    } else {
        let mut entropy = 0u64;
        // SAFETY: raw system calls: getrandom writes at most 8 bytes into `entropy` and never
        // waits (GRND_NONBLOCK; a failure leaves 0, and the pid and the clock still differ per
        // child); getpid has no arguments.
        let pid = unsafe {
            libc::syscall(libc::SYS_getrandom, &raw mut entropy, 8usize, libc::GRND_NONBLOCK);
            libc::syscall(libc::SYS_getpid) as u64
        };
        entropy ^ crate::sys::clock::now_ns() ^ pid.rotate_left(32)
    };
    ts.rng.set(sampler::seed_for(seed, fork));
    redraw(ts, set);
}

/// Called by the front end when a thread ends: its counters join the retired totals and later
/// calls on this thread (other destructors, libc's own frees) take the slow paths, which count
/// in the shared counters without sampling.
pub fn thread_exit(ts: &ThreadState) {
    ts.status.set(STATUS_DEAD);
    ts.parked_budget.set(0);
    if ts.registered.get() != 0 {
        totals::unregister(ts);
        ts.registered.set(0);
    }
    ts.set_budget(0);
    if !ts.guarded() {
        ts.filter.set(ts.own_filter());
    }
}

/// `fork` child: only the calling thread survives; the others' counters join the retired
/// totals and the locks taken by [`fork_prepare`] are released.
pub(crate) fn fork_child(ts: Option<&ThreadState>) {
    tables::unlock_all_after_fork();
    crate::engine::python::unlock_after_fork();
    totals::after_fork_child(ts.filter(|t| t.registered.get() != 0));
    crate::engine::mapped::unlock_after_fork();
    crate::engine::peak::after_fork_child(tables::flush_tallies_after_fork);
}

/// `fork` prepare: takes every lock of the engine and the unwinder. The front end's handler
/// takes the symbol cache's first (`front_end::fork_prepare` does both).
pub(crate) fn fork_prepare() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    crate::engine::mapped::lock_for_fork();
    crate::engine::python::lock_for_fork();
    tables::lock_all_for_fork();
    totals::lock_for_fork();
}

/// `fork` parent: releases every lock [`fork_prepare`] took.
pub(crate) fn fork_parent() {
    totals::unlock_after_fork();
    tables::unlock_all_after_fork();
    crate::engine::python::unlock_after_fork();
    crate::engine::mapped::unlock_after_fork();
}

/// Allocation hook. `size` is the request, `real` performs it, `counted` gives the bytes to
/// count for a returned block (its request in Rust, its chunk size in the shim).
#[inline(always)]
pub fn on_alloc<H: Host>(
    set: &Settings,
    size: usize,
    real: impl FnOnce() -> *mut u8 + Copy,
    counted: impl Fn(*mut u8) -> usize + Copy,
) -> *mut u8 {
    match alloc_unsampled::<H>(set, size, real, counted) {
        Some(p) => p,
        None => alloc_slow::<H>(size, set, H::thread_state(), real, counted),
    }
}

/// The unsampled allocation path alone: when the thread's budget is above `size`, performs the
/// allocation with `real` and charges the block's counted bytes to the budget (the allocation
/// that uses it up is sampled, in [`sampled_after`]); otherwise returns `None` without calling
/// `real`, and the caller goes on to [`on_alloc`] (for a front end that keeps its slow path in a
/// frame of its own).
#[inline(always)]
pub(crate) fn alloc_unsampled<H: Host>(
    set: &Settings,
    size: usize,
    real: impl FnOnce() -> *mut u8,
    counted: impl Fn(*mut u8) -> usize,
) -> Option<*mut u8> {
    // A non-zero budget means: set up, unguarded, counting on its own counters.
    if (size as u64) < H::budget() {
        let p = real();
        if !p.is_null() {
            let charged = counted(p) as u64;
            if !H::thread_state().charge(charged) {
                return Some(sampled_after::<H>(set, p, charged, None));
            }
        }
        return Some(p);
    }
    None
}

/// [`alloc_unsampled`] for a front end that counts the requested size (`Layout::size()` in
/// Rust): the charge happens before the call, which cannot use the budget up (the size is below
/// it), and is taken back if the allocation fails; nothing is left to do after the call.
#[inline(always)]
pub(crate) fn alloc_unsampled_sized<H: Host>(
    size: usize,
    real: impl FnOnce() -> *mut u8,
) -> Option<*mut u8> {
    let budget = H::budget();
    // A non-zero budget means: set up, unguarded, counting on its own counters.
    if (size as u64) < budget {
        H::thread_state().budget.store(budget - size as u64, Ordering::Relaxed);
        let p = real();
        if p.is_null() {
            uncharge::<H>(size);
        }
        return Some(p);
    }
    None
}

/// Takes back the charge of a failed allocation (and counts the failure).
#[cold]
#[inline(never)]
fn uncharge<H: Host>(size: usize) {
    alloc_failed();
    let b = &H::thread_state().budget;
    b.store(b.load(Ordering::Relaxed).wrapping_add(size as u64), Ordering::Relaxed);
}

/// The block `p` used up its thread's budget when `charged` bytes
/// were charged for it: draw the next countdown and record the sample. The sample counts the
/// block's `charged` bytes, the unit of the exact totals (see `sampler`). Returns `p`. (Public
/// for a front end whose unsampled path is written out in its own code, the shim's.)
#[cold]
#[inline(never)]
pub(crate) fn sampled_after<H: Host>(
    set: &Settings,
    p: *mut u8,
    charged: u64,
    caller: Option<CallerFrame>,
) -> *mut u8 {
    let ts = H::thread_state();
    sample::take::<H>(ts, set, charged, caller, |s| {
        let Sample { stack, weight, born_ns } = s;
        tables::insert_live(p as usize, Record { stack, size: charged, weight, born_ns });
    });
    p
}

/// The shim's `malloc` charged `charged` bytes for block `p` and the budget
/// did not cover them: either the block is a sample, or the budget was zero because the thread
/// is not sampling (not set up yet, inside profiler code, exiting, without counters of its
/// own), in which case the charge is taken back and the block counted where it belongs.
/// `caller` is the program's frame that called the fast path, when the fast path passes it on:
/// a sample's unwind then starts there. Returns `p`.
#[cold]
#[inline(never)]
pub fn charge_missed<H: Host>(
    set: &Settings,
    p: *mut u8,
    charged: u64,
    caller: Option<CallerFrame>,
) -> *mut u8 {
    let ts = H::thread_state();
    if ts.guarded() || !ts.sampling() {
        // The budget was zero and wrapped: back to zero (the thread's counters are not read,
        // or, under the guard, the wrapped budget was counted for this moment only).
        ts.budget.store(ts.budget.load(Ordering::Relaxed).wrapping_add(charged), Ordering::Relaxed);
        return count_new_block::<H>(ts, set, p, charged);
    }
    sampled_after::<H>(set, p, charged, caller)
}

/// The shim's `realloc` moved or resized an unsampled block to `p` (`new_counted` counted bytes)
/// and charged its growth, `growth` bytes, which the budget did not cover: the grown block is a
/// sample, as in the slow path (an unsampled block's growth takes its chance like fresh bytes).
/// Or the budget was zero because the thread is not sampling, which the fast path's filter test
/// already excludes: the growth is then a block's charge that missed like any other
/// ([`charge_missed`] takes it back and counts it where it belongs). `caller` is the program's
/// frame, as for [`charge_missed`]. Returns `p`.
#[cold]
#[inline(never)]
pub fn growth_missed<H: Host>(
    set: &Settings,
    p: *mut u8,
    new_counted: u64,
    growth: u64,
    caller: Option<CallerFrame>,
) -> *mut u8 {
    let ts = H::thread_state();
    if ts.guarded() || !ts.sampling() {
        return charge_missed::<H>(set, p, growth, caller);
    }
    sampled_after::<H>(set, p, new_counted, caller)
}

/// Counts the new block `p` (`charged` counted bytes) wherever the calling
/// thread's state says (the profiler's own memory, the shared counters, or the thread's own
/// budget, setting the thread up first if need be), and samples it if it uses the budget up.
/// Returns `p`.
fn count_new_block<H: Host>(ts: &ThreadState, set: &Settings, p: *mut u8, charged: u64) -> *mut u8 {
    if ts.guarded() {
        totals::add_internal(charged as usize);
        return p;
    }
    if ts.status.get() == STATUS_NEW {
        init_thread::<H>(ts, set, H::SET_UP_AT_FIRST_ALLOCATION);
    }
    if !ts.sampling() {
        // Exiting thread, or no counters of its own: exact totals only.
        totals::add_alloc_shared(charged as usize);
        return p;
    }
    if ts.charge(charged) {
        return p;
    }
    sampled_after::<H>(set, p, charged, None)
}

/// Counts `bytes` allocated outside the budget: on the thread's own counters, or the shared
/// ones when it has none.
fn count_allocated(ts: &ThreadState, bytes: usize) {
    if ts.sampling() { ts.add_allocated(bytes as u64) } else { totals::add_alloc_shared(bytes) }
}

/// Counts `bytes` freed: on the thread's own counters, or the shared ones when it has none.
/// Inlined: every free on the slow path counts.
#[inline]
fn count_freed(ts: &ThreadState, bytes: usize) {
    if ts.sampling() { ts.add_freed(bytes as u64) } else { totals::add_free_shared(bytes) }
}

#[cold]
#[inline(never)]
fn alloc_slow<H: Host>(
    size: usize,
    set: &Settings,
    ts: &ThreadState,
    real: impl FnOnce() -> *mut u8,
    counted: impl Fn(*mut u8) -> usize,
) -> *mut u8 {
    if !ts.guarded() {
        if ts.status.get() == STATUS_NEW {
            init_thread::<H>(ts, set, H::SET_UP_AT_FIRST_ALLOCATION);
        }
        if size as u64 >= set.max_alloc_bytes() {
            refuse_giant::<H>(ts, size, set.max_alloc_bytes());
            return std::ptr::null_mut();
        }
    }
    let p = real();
    if p.is_null() {
        if size != 0 {
            alloc_failed();
        }
        return p;
    }
    count_new_block::<H>(ts, set, p, counted(p) as u64)
}

/// A sampled block left the live table: its stack gives it back (see [`sample::retire`]).
/// Inlined: a call of its own cost every sampled free 4 instructions.
#[inline]
fn retire(rec: Record) {
    sample::retire(Sample { stack: rec.stack, weight: rec.weight, born_ns: rec.born_ns });
}

/// Free hook: `real(ptr)` releases `ptr` (which may be null) and runs last, after the record of a
/// sampled block is gone. `counted(ptr)` gives the block's counted size (it is only called for a
/// non-null `ptr`). Both receive the pointer rather than capture it, so that their captures
/// (the layout, in Rust) stay small enough to travel in registers to the slow path.
#[inline(always)]
pub fn on_free<H: Host>(
    ptr: *mut u8,
    counted: impl FnOnce(*mut u8) -> usize,
    real: impl FnOnce(*mut u8),
) {
    // The thread's filter rejects nothing unless it is set up and counts on its own counters.
    if !H::may_be_sampled(H::filter(), ptr as usize) {
        H::thread_state().add_freed(counted(ptr) as u64);
        return real(ptr);
    }
    free_slow::<H>(ptr, counted, real)
}

/// [`on_free`] beyond the unsampled path: everything but the free itself, for a front end whose
/// free path is written out in its own code (the shim's).
#[cold]
#[inline(never)]
pub fn free_slow<H: Host>(
    ptr: *mut u8,
    counted: impl FnOnce(*mut u8) -> usize,
    real: impl FnOnce(*mut u8),
) {
    if !ptr.is_null() {
        note_free::<H>(ptr, counted(ptr));
    }
    real(ptr)
}

fn note_free<H: Host>(ptr: *mut u8, counted: usize) {
    let ts = H::thread_state();
    if ts.guarded() {
        totals::sub_internal(counted);
        return;
    }
    // A thread whose first call is a free stays as it is (not set up, its frees on the slow
    // path): such a call is typically glibc freeing an exiting thread's TLS after its
    // destructors ran, and a thread set up there would register state that no exit handler
    // removes before its stack is unmapped.
    count_freed(ts, counted);
    if crate::engine::filter::may_contain(ptr as usize) {
        let _e = crate::sys::ErrnoGuard::save();
        let _g = ts.enter();
        if let Some(rec) = tables::take_live(ptr as usize) {
            retire(rec);
        }
    }
}

/// Reallocation hook. `old_counted` is the old block's counted size (0 when `old` is null);
/// `real` performs the reallocation and `counted` gives the new block's counted size. A realloc
/// is one long-lived allocation whose counted bytes change (see `sampler` for why the
/// estimates stay unbiased): a growth is counted as allocated bytes and charged to the budget
/// (an unsampled block whose growth uses it up becomes a sample, at the realloc's stack), a
/// shrink is counted as freed bytes (a sampled block is kept with probability
/// `p(new) / p(old)`). A sampled block keeps its stack and birth time under its new address; a
/// failed reallocation keeps the old record; a reallocation to zero bytes that frees the block
/// (C `realloc(p, 0)`) retires it.
#[inline(always)]
pub fn on_realloc<H: Host>(
    set: &Settings,
    old: *mut u8,
    old_counted: usize,
    new_size: usize,
    real: impl FnOnce() -> *mut u8 + Copy,
    counted: impl Fn(*mut u8) -> usize + Copy,
) -> *mut u8 {
    match realloc_unsampled::<H>(set, old, old_counted, new_size, real, counted) {
        Some(p) => p,
        None => {
            realloc_slow::<H>(set, H::thread_state(), old, old_counted, new_size, real, counted)
        }
    }
}

/// The unsampled reallocation path alone (see [`alloc_unsampled`]): when `old` is certainly not
/// sampled and the growth cannot use the budget up, performs the reallocation with `real` and
/// counts it; otherwise returns `None` without calling `real`, and the caller goes on to
/// [`on_realloc`].
///
/// The growth is known in counted bytes only after the call (the shim's new chunk); before it,
/// `new_size - old_counted` is a lower bound (a block's counted size is at least its request)
/// and exact in the Rust front end, which counts requests. A counted growth that uses the
/// budget up after all makes the new block a sample, as in [`alloc_unsampled`].
#[inline(always)]
pub(crate) fn realloc_unsampled<H: Host>(
    set: &Settings,
    old: *mut u8,
    old_counted: usize,
    new_size: usize,
    real: impl FnOnce() -> *mut u8,
    counted: impl Fn(*mut u8) -> usize,
) -> Option<*mut u8> {
    // A non-zero budget means: set up, unguarded, counting on its own counters.
    if (new_size.saturating_sub(old_counted) as u64) < H::budget()
        && new_size != 0
        && (new_size as u64) < set.max_alloc_bytes()
        && !H::may_be_sampled(H::filter(), old as usize)
    {
        let p = real();
        if p.is_null() {
            alloc_failed();
        } else {
            let new_counted = counted(p);
            let ts = H::thread_state();
            if new_counted >= old_counted {
                let growth = (new_counted - old_counted) as u64;
                if !ts.charge(growth) {
                    return Some(sampled_after::<H>(set, p, new_counted as u64, None));
                }
            } else {
                ts.add_freed((old_counted - new_counted) as u64);
            }
        }
        return Some(p);
    }
    None
}

#[cold]
#[inline(never)]
fn realloc_slow<H: Host>(
    set: &Settings,
    ts: &ThreadState,
    old: *mut u8,
    old_counted: usize,
    new_size: usize,
    real: impl FnOnce() -> *mut u8,
    counted: impl Fn(*mut u8) -> usize,
) -> *mut u8 {
    if ts.guarded() {
        let p = real();
        if !p.is_null() {
            totals::sub_internal(old_counted);
            totals::add_internal(counted(p));
        } else if new_size == 0 {
            totals::sub_internal(old_counted);
        } else {
            alloc_failed();
        }
        return p;
    }
    if ts.status.get() == STATUS_NEW {
        init_thread::<H>(ts, set, H::SET_UP_AT_FIRST_ALLOCATION);
    }
    if new_size as u64 >= set.max_alloc_bytes() {
        refuse_giant::<H>(ts, new_size, set.max_alloc_bytes());
        return std::ptr::null_mut();
    }
    // The record leaves the table before the real call: once the allocator frees or moves the
    // block, another thread may be handed the same address.
    let rec = if crate::engine::filter::may_contain(old as usize) {
        let _g = ts.enter();
        tables::take_live(old as usize)
    } else {
        None
    };
    let p = real();
    if p.is_null() {
        if new_size != 0 {
            alloc_failed();
        }
        let _g = ts.enter();
        match rec {
            // C realloc(p, 0) freed the block.
            Some(rec) if new_size == 0 => retire(rec),
            // Under a seccomp filter the record is dropped instead: putting it back may grow
            // the live table (a rehash), and the profiler's heap with `mmap`.
            Some(rec) if crate::sys::seccomp::restricted_here() => {
                tables::resize_sample(rec.stack, rec.weight, None, 0.0)
            }
            // Failure: the old block is still valid and still sampled.
            Some(rec) => tables::insert_live(old as usize, rec),
            None => {}
        }
        if new_size == 0 {
            count_freed(ts, old_counted);
        }
        return p;
    }
    let new_counted = counted(p);
    let growth = new_counted.saturating_sub(old_counted);
    if new_counted < old_counted {
        count_freed(ts, old_counted - new_counted);
    }
    match rec {
        Some(rec) => {
            // Sampled already: the growth needs no chance of its own (see `sampler`).
            count_allocated(ts, growth);
            resize_record(ts, set, p, rec, new_counted as u64);
        }
        None if growth == 0 => {}
        None if !ts.sampling() => totals::add_alloc_shared(growth),
        // An unsampled block grew: its growth takes its chance like fresh bytes would.
        None => {
            if !ts.charge(growth as u64) {
                sampled_after::<H>(set, p, new_counted as u64, None);
            }
        }
    }
    p
}

/// A sampled block's record after a successful reallocation to `p` of `new_counted` bytes:
/// weighed by its new size, after a shrink only if the thinning keeps it (see `sampler`).
fn resize_record(ts: &ThreadState, set: &Settings, p: *mut u8, mut rec: Record, new_counted: u64) {
    let _e = crate::sys::ErrnoGuard::save();
    let _g = ts.enter();
    let interval = set.sample_interval();
    // The bytes a shrink gave back, seen because the block was sampled (probability
    // `1 / rec.weight.count`).
    let freed = rec.size.saturating_sub(new_counted) as f64 * rec.weight.count;
    if crate::sys::seccomp::restricted_here() {
        // Under a seccomp filter the record leaves the tables: inserting it at its new
        // address may grow the live table, and the profiler's heap with `mmap`.
        tables::resize_sample(rec.stack, rec.weight, None, freed);
        return;
    }
    if new_counted < rec.size {
        let mut rng = ts.rng.get();
        let keep = sampler::keep_after_shrink(&mut rng, rec.weight, new_counted, interval);
        ts.rng.set(rng);
        if !keep {
            tables::resize_sample(rec.stack, rec.weight, None, freed);
            return;
        }
    }
    let w = sampler::weight_at(new_counted, set.ln_unmarked());
    tables::resize_sample(rec.stack, rec.weight, Some(w), freed);
    rec.weight = w;
    rec.size = new_counted;
    tables::insert_live(p as usize, rec);
}

/// Refuses a giant request: counts it, prints the stack that asked as raw `ying:` lines and
/// keeps it to be named at report time (see `giant`: nothing here may block, read files or be
/// a cancellation point).
#[inline(never)]
fn refuse_giant<H: Host>(ts: &ThreadState, size: usize, limit: u64) {
    tables::GIANT_REFUSED.fetch_add(1, Ordering::Relaxed);
    let _e = crate::sys::ErrnoGuard::save();
    let _g = ts.enter();
    let mut buf = frame_buf();
    let ips = capture::<H>(ts, &mut buf, None);
    let number = crate::engine::giant::record(size as u64, ips);
    crate::engine::giant::print_raw(number, size as u64, limit, ips);
}

/// Runs `f` as profiler code on the thread owning `ts` (its allocations are the profiler's).
pub fn run_guarded<T>(ts: &ThreadState, f: impl FnOnce() -> T) -> T {
    let _g = ts.enter();
    f()
}

/// Enters profiler code on the thread owning `ts` until [`leave_guard`] (for code that cannot
/// hold a scoped guard, such as `fork` handlers).
pub fn enter_guard(ts: &ThreadState) {
    ts.enter_forever();
}

/// Leaves one level of [`enter_guard`].
pub fn leave_guard(ts: &ThreadState) {
    ts.leave();
}

/// Whether the thread owning `ts` runs profiler code now.
pub fn is_guarded(ts: &ThreadState) -> bool {
    ts.guarded()
}

/// Marks the thread owning `ts` as profiler code for the rest of its life (report threads).
pub fn enter_forever(ts: &ThreadState) {
    ts.enter_forever();
}

/// Counts memory the profiler's own allocator handed out (the shim's internal allocator).
pub fn internal_alloc(bytes: usize) {
    totals::add_internal(bytes);
}

/// Counts memory the profiler's own allocator took back.
pub fn internal_free(bytes: usize) {
    totals::sub_internal(bytes);
}
