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
/// that a giant request always reaches the slow path, with the rest of the draw kept in
/// `beyond` (see [`ran_out`]); a thread without counters of its own keeps a zero budget (every
/// allocation takes the slow path). Inlined into the sample (a call of its own cost it 4
/// instructions).
#[inline]
pub(crate) fn redraw(ts: &ThreadState, set: &Settings) {
    if !ts.sampling() {
        ts.beyond.set(0);
        ts.set_budget(0);
        return;
    }
    let cap = set.max_alloc_bytes();
    if !set.enabled() {
        // Come back now and then: sampling may be switched on later (the shim enables it once
        // its configuration has been read).
        ts.beyond.set(0);
        ts.set_budget(cap.min(1 << 20));
        return;
    }
    let mut rng = ts.rng.get();
    let cd = sampler::draw_countdown_at(&mut rng, set.ln_unmarked());
    ts.rng.set(rng);
    set_countdown(ts, cd, cap);
}

/// Stores a countdown of `cd` bytes: `min(cd, cap)` as the budget the hot paths charge, the
/// rest in `beyond`.
#[inline]
fn set_countdown(ts: &ThreadState, cd: u64, cap: u64) {
    let budget = cd.min(cap);
    ts.beyond.set(cd - budget);
    ts.set_budget(budget);
}

/// Whether the thread's drawn countdown ran out in the block just charged, whose charge left
/// the budget at zero or below (wrapped). A budget capped at the giant limit runs out before
/// its countdown: the block is then sampled only if the countdown's marked byte lies within it
/// (the bytes `beyond` the budget are no more than the block's overshoot of it); otherwise the
/// rest of the countdown becomes the budget, capped again, and the block is not a sample.
/// Sampling at the cap instead would sample with probability 1 at every cap's end, and
/// overstate every estimate when the interval is not far below the giant limit. Cheap when no
/// draw was capped (`beyond` is 0, the default settings' case with probability
/// e^(-limit/interval)).
#[inline]
fn ran_out(ts: &ThreadState, set: &Settings) -> bool {
    let beyond = ts.beyond.get();
    if beyond == 0 {
        return true;
    }
    // The charge's overshoot of the budget (the budget wrapped below zero by it).
    let over = ts.budget_now().wrapping_neg();
    if beyond <= over {
        return true;
    }
    set_countdown(ts, beyond - over, set.max_alloc_bytes());
    false
}

/// The calling thread's budget ran out at a block of `size` counted bytes: unless the budget
/// was a capped countdown that goes on past the block (see [`ran_out`]), draws the next
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
    if !ran_out(ts, set) {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::thread_state::ThreadState;
    use std::sync::atomic::Ordering;

    fn live() -> ThreadState {
        ThreadState::live_for_tests()
    }

    /// Charges blocks of `block` bytes as the hot path does, asking [`ran_out`] whenever the
    /// budget is used up, until it says the countdown ran out: returns how many blocks that
    /// took, and the counted bytes meanwhile.
    fn blocks_to_sample(ts: &ThreadState, set: &Settings, block: u64) -> (u64, u64) {
        for n in 1..10_000 {
            if !ts.charge(block) && ran_out(ts, set) {
                return (n, ts.counters().0);
            }
        }
        panic!("the countdown never ran out");
    }

    #[test]
    fn a_capped_countdown_samples_the_block_holding_its_marked_byte() {
        // A countdown of 2,500 bytes under a 1,000-byte cap: the marked byte, number 2,500,
        // lies in the 9th block of 300 bytes (bytes 2,401 to 2,700), whatever the cap.
        for cap in [1, 299, 300, 1000, 2499, 2500, 1 << 40] {
            let set = Settings::new(1 << 20, cap);
            let ts = live();
            set_countdown(&ts, 2500, cap);
            assert!(ts.budget.load(Ordering::Relaxed) <= cap, "cap {cap}");
            assert_eq!(blocks_to_sample(&ts, &set, 300), (9, 2700), "cap {cap}");
        }
        // Under the guard (`mapped`'s case) the parked budget is charged and moved instead.
        let set = Settings::new(1 << 20, 1000);
        let ts = live();
        set_countdown(&ts, 2500, 1000);
        let _g = ts.enter();
        let mut n = 0;
        loop {
            n += 1;
            let b = ts.parked_budget.get();
            ts.parked_budget.set(b.wrapping_sub(300));
            if b <= 300 && ran_out(&ts, &set) {
                break;
            }
        }
        assert_eq!(n, 9);
    }

    #[test]
    fn an_uncapped_countdown_samples_where_its_budget_runs_out() {
        let set = Settings::new(1 << 20, 1 << 40);
        let ts = live();
        set_countdown(&ts, 2500, 1 << 40);
        assert_eq!(ts.beyond.get(), 0);
        assert_eq!(blocks_to_sample(&ts, &set, 300), (9, 2700));
        // A block of exactly the countdown holds its marked byte (its last).
        set_countdown(&ts, 300, 1 << 40);
        assert_eq!(blocks_to_sample(&ts, &set, 300).0, 1);
    }
}
