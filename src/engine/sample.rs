//! The sampled path, one step for every kind of allocation. When a thread's countdown runs out
//! at a block (a `malloc`'d block in `hooks`, a new mapping or the growth of one in `mapped`),
//! the same [`take`] draws the next countdown, weighs the block (Horvitz-Thompson, see
//! `sampler`), captures the calling stack (`capture`) and records it in the stack table; the
//! caller only says where the sample is kept (the live table, a region). Freeing a sampled block
//! of either kind is the same [`retire`]. One step means one set of rules to keep right: the
//! guard is held while the tables are touched, `errno` comes back as it was, nothing is
//! allocated on the host's heap, and the stack buffer is a fixed array.
//!
//! Layering: this file sits below `hooks` and `mapped` (which call it) and above `host`,
//! `capture`, `sampler` and `tables` (which it calls): the sampled path needs no import between
//! the two callers.

use crate::engine::capture::{capture, frame_buf};
use crate::engine::host::{Host, Settings};
use crate::engine::sampler::{self, Weight};
use crate::engine::tables;
use crate::engine::thread_state::ThreadState;
use crate::stack::unwind::CallerFrame;

/// One sampled block's figures: the stack they are counted at, its weight (from its counted
/// size) and its birth time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub(crate) stack: u32,
    pub(crate) weight: Weight,
    pub(crate) born_ns: u64,
}

/// Draws the next countdown and stores it as the thread's budget. Capped at the giant limit so
/// that a giant request always reaches the slow path; a thread without counters of its own
/// keeps a zero budget (every allocation takes the slow path). Inlined into the sample (a
/// call of its own cost it 4 instructions).
#[inline]
pub(crate) fn redraw(ts: &ThreadState, set: &Settings) {
    if !ts.sampling() {
        ts.set_budget(0);
        return;
    }
    let cap = set.max_alloc_bytes().max(1);
    if !set.enabled() {
        // Come back now and then: sampling may be switched on later (the shim enables it once
        // its configuration has been read).
        ts.set_budget(cap.min(1 << 20));
        return;
    }
    let mut rng = ts.rng.get();
    let cd = sampler::draw_countdown_at(&mut rng, set.ln_unmarked());
    ts.rng.set(rng);
    ts.set_budget(cd.min(cap));
}

/// The calling thread's countdown ran out at a block of `size` counted bytes: draws the next
/// countdown and, when sampling is on, weighs the block for `size` bytes, captures the calling
/// stack, adds the sample to the stack table and hands it to `keep` (which records where the
/// block lives: the live table, a region). `caller` is the program's innermost frame when the
/// entry point knew it (see `capture`). The guard is held from the capture to the end of
/// `keep` (re-entered if the caller holds it already, as `mapped` does across its system call)
/// and `errno` is restored on return. The caller holds no profiler lock but `mapped`'s own,
/// which comes before every other. Inlined into both callers: every profiler frame on the stack
/// is one more frame to unwind per sample.
#[inline(always)]
pub(crate) fn take<H: Host>(
    ts: &ThreadState,
    set: &Settings,
    size: u64,
    caller: Option<CallerFrame>,
    keep: impl FnOnce(Sample),
) {
    redraw(ts, set);
    if !set.enabled() {
        return;
    }
    let _e = crate::sys::ErrnoGuard::save();
    let _g = ts.enter();
    crate::engine::note_sample();
    let weight = sampler::weight_at(size, set.ln_unmarked());
    let mut buf = frame_buf();
    let ips = capture::<H>(ts, &mut buf, caller);
    let born_ns = crate::sys::clock::now_ns();
    let spans = crate::spans::current_path();
    let stack = tables::add_sample(ts.ordinal.get(), ips, spans, weight);
    keep(Sample { stack, weight, born_ns });
}

/// A sampled block of either kind is gone whole: its stack's estimates drop by its weight and
/// its lifetime joins the stack's histogram.
pub(crate) fn retire(s: Sample) {
    let lifetime_ms = sampler::f64_of(crate::sys::clock::now_ns().saturating_sub(s.born_ns)) / 1e6;
    tables::free_sample(s.stack, s.weight, lifetime_ms);
}
