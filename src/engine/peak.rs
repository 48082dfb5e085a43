//! The peak view: the high-water mark of the estimated retained total, and every stack's
//! retained estimate at a kept peak, for reports that answer "what was holding my memory when
//! it was at its highest?" after the program freed it.
//!
//! # What runs where
//!
//! Nothing here runs on the unsampled paths. The estimated retained total changes only when a
//! sample is recorded, freed or resized, and each of those already holds the lock of the stack
//! table's stripe it changes ([`crate::engine::tables`]); the peak work rides on that.
//!
//! * **Per stripe, a tally** ([`StripeTally`], under the stripe's lock, in the stripe's own
//!   cache lines): the estimate's change not yet added to the global [`ESTIMATE`]. Adding every
//!   change to one shared counter would write a shared cache line on every sample (churn takes
//!   about 475,000 samples per second per thread); instead a stripe adds its change when it
//!   reaches the *flush quantum* `Q = max(4 * w, margin * kept / 16)` (`w` the smallest
//!   sample weight the stripe has seen, about the sampling interval `R`; `kept` the last kept
//!   peak), or at once when the stripe's own view `ESTIMATE + unflushed` passes the next
//!   capture threshold. A single-threaded program is therefore seen exactly; with several
//!   threads the global lags the truth by at most the other stripes' unflushed changes,
//!   `7 * Q`. A stable workload (churn) random-walks inside `±Q` for about 16 samples per
//!   flush; a growing one writes shared lines about once per `R` of growth, which a process can
//!   do only as often as it has memory to grow into.
//! * **A capture** ([`capture`], rare, under the stripe's lock) when the global estimate
//!   exceeds the last kept peak by the margin: bump [`EPOCH`], record the time (boot clock and
//!   wall clock) and the exact retained total (if the totals' registry lock is free at that
//!   instant: a capture never waits for it), and raise the threshold to
//!   `estimate * (1 + MARGIN)`. The state kept is the one just before the change that crossed
//!   the threshold: the changed entry's slot is set to its figures before the change, and the
//!   change's exact bytes are taken off the exact total. A moment picked because a sample was
//!   taken there would carry that sample's whole weight (about `R` for a small block, against
//!   its few real bytes): an upward bias of about one interval.
//! * **Per stack entry, lazily** ([`PeakSlot`]): before the first change of an entry after a
//!   new epoch, its retained bytes and count are saved with the epoch. The value of an entry
//!   at the kept peak is its saved value when saved in the current epoch, otherwise its
//!   current value (unchanged since the peak). A capture thus costs O(1), not O(stacks), and
//!   each change at most one comparison and two stores more.
//! * **The high-water mark** ([`HIGH_WATER`]): the highest `ESTIMATE + unflushed` any stripe
//!   saw, raised with a load first (it rises only while the total does).
//!
//! # The margin: 5 %
//!
//! A new peak is kept only when the estimate exceeds the last kept one by [`MARGIN`]. So the
//! kept peak is within 5 % of the high-water mark of the global estimate (the report shows
//! both: "peak 103 MiB; stacks kept at 100 MiB"), and the number of captures is logarithmic in
//! the growth: `ln(high / first) / ln(1.05)`, at most about 300 from one sample (512 KiB) to
//! 1 TiB, however slowly a program grows and however long it runs. 5 % is below the sampling
//! error of the estimate itself for all but very large heaps (its standard deviation is about
//! `sqrt(total * R)`: 7 % of 100 MiB at the default 512 KiB, 2.2 % of 1 GiB), so a smaller
//! margin would mostly chase noise with more captures, and a larger one would show a peak
//! visibly below the high-water mark.
//!
//! # Threads, forks, reset
//!
//! A stack sampled on several threads has an entry in each of their stripes: each entry keeps
//! its own slot and a snapshot sums the entries' values at the peak as it sums their current
//! ones. A free on another thread changes the entry its sample was counted in, under that
//! stripe's lock, like any change. Changes on other stripes between the capturing thread's
//! change and its epoch bump count as before the peak: each entry's changes are ordered by its
//! stripe's lock and the epoch only grows, so every entry is split cleanly into "before" and
//! "after". A snapshot reads the epoch before and after walking the table and walks the peak
//! values again if a capture happened meanwhile (see `snapshot`).
//!
//! One bias is left, and the statistical test measures it: the kept peak is the *last* capture,
//! and whether a capture is the last depends on what the estimate did afterwards (had its noise
//! been lower there, a later threshold would have been crossed instead). It is too small to
//! see: at a 64 KiB interval and 8 MiB, 800 seeds gave a mean error of +14 KiB with a standard
//! error of 25 KiB, against a spread of 700 KiB per run (`tests/peak_statistics.rs`). In a `fork` child (the
//! shim's handler) the peak starts afresh at the state inherited: the child never held its
//! parent's earlier peaks. `tables::clear` forgets the peak with the stacks.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::engine::sampler::f64_of;
use crate::sys::spin::SpinMutex;

/// A new peak is kept when the estimate exceeds the last kept one by this fraction (see the
/// module docs for the choice).
pub(crate) const MARGIN: f64 = 0.05;

/// Stripes of the stack table (`tables::STACKS`), each with its own [`StripeTally`]. Declared
/// here, below the tables, because the flush quantum depends on it.
pub(crate) const STACK_STRIPES: usize = 8;

/// Stripes whose unflushed changes the global estimate may miss, for the flush quantum.
const STRIPES: f64 = STACK_STRIPES as f64;

/// The current peak epoch: 0 before the first capture, bumped by every capture, reset and fork.
static EPOCH: AtomicU32 = AtomicU32::new(0);
/// Estimated retained bytes, all stripes' flushed changes.
static ESTIMATE: AtomicI64 = AtomicI64::new(0);
/// The estimate above which the next peak is kept (0: none kept yet).
static THRESHOLD: AtomicU64 = AtomicU64::new(0);
/// The highest estimate seen (see the module docs).
static HIGH_WATER: AtomicU64 = AtomicU64::new(0);
/// The last kept peak, written by a capture.
static KEPT: SpinMutex<Option<Kept>> = SpinMutex::new(None);
/// Captures since start (or reset, or fork).
static CAPTURES: AtomicU64 = AtomicU64::new(0);

/// What a capture records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    /// The exact retained bytes at that moment, if the totals could be read without waiting.
    pub(crate) exact: Option<u64>,
    /// `CLOCK_BOOTTIME` in nanoseconds (what `/proc` measures a process's start in).
    pub(crate) boot_ns: u64,
    /// Wall clock.
    pub(crate) wall: SystemTime,
}

/// A stack entry's retained estimates, bytes and count, and their variance estimates (see
/// `sampler::Weight::variance`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Retained {
    pub(crate) bytes: f64,
    pub(crate) count: f64,
    pub(crate) var: [f64; 2],
}

/// One stack entry's retained estimate as it was at the start of `epoch` (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PeakSlot {
    epoch: u32,
    saved: Retained,
}

impl PeakSlot {
    /// Saves `now` (the entry's retained figures) if this is the entry's first change in the
    /// current epoch. Call before every change of them.
    #[inline]
    pub(crate) fn before_change(&mut self, now: Retained) {
        let epoch = EPOCH.load(Ordering::Relaxed);
        if self.epoch != epoch {
            *self = PeakSlot { epoch, saved: now };
        }
    }

    /// The entry's tally asked for a capture after a change (`before`: its retained bytes,
    /// count and their variances just before it; a new sample, a growth, or a flush by a free):
    /// keeps a new peak if it is still due, as that state (see [`capture`]), `exact_excluded`
    /// being the change's exact bytes. Under the stripe's lock.
    #[cold]
    #[inline(never)]
    pub(crate) fn capture_before(&mut self, before: Retained, exact_excluded: f64) {
        if let Some(epoch) = capture(exact_excluded) {
            *self = PeakSlot { epoch, saved: before };
        }
    }

    /// The entry's retained figures at the peak of `epoch`, its current ones being `now`. A
    /// slot saved in a later epoch (a capture during the read) holds the value nearest to the
    /// peak that is left.
    pub(crate) fn at(&self, epoch: u32, now: Retained) -> Retained {
        if epoch == 0 {
            Retained::default()
        } else if self.epoch.wrapping_sub(epoch) as i32 >= 0 {
            self.saved
        } else {
            now
        }
    }
}

/// A stripe's share of the global estimate (see the module docs); lives in the stripe, under
/// its lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StripeTally {
    /// Changes not yet added to [`ESTIMATE`].
    unflushed: f64,
    /// The smallest sample weight in bytes seen (about the sampling interval).
    min_weight: f64,
    /// A flush made the global estimate pass the capture threshold: capture once the stripe's
    /// lock is released.
    capture: bool,
}

impl StripeTally {
    pub(crate) const fn new() -> Self {
        Self { unflushed: 0.0, min_weight: f64::INFINITY, capture: false }
    }

    /// The stripe's retained estimate changed by `delta` bytes at a sample weighing `weight`
    /// bytes (0 when not a new sample).
    #[inline]
    pub(crate) fn change(&mut self, delta: f64, weight: f64) {
        if weight > 0.0 && weight < self.min_weight {
            self.min_weight = weight;
        }
        self.unflushed += delta;
        let global = ESTIMATE.load(Ordering::Relaxed);
        let seen = global as f64 + self.unflushed;
        let threshold = f64_of(THRESHOLD.load(Ordering::Relaxed));
        const SHARE: f64 = MARGIN / (1.0 + MARGIN) / (2.0 * STRIPES);
        let quantum = (4.0 * self.min_weight).max(threshold * SHARE);
        if seen > threshold || self.unflushed.abs() >= quantum {
            let push = self.flush();
            let now = global.wrapping_add(push);
            if now as f64 > threshold {
                self.capture = true;
            }
        }
        if seen > f64_of(HIGH_WATER.load(Ordering::Relaxed)) {
            HIGH_WATER.fetch_max(seen as u64, Ordering::Relaxed);
        }
    }

    /// Adds the unflushed change to the global estimate; returns what was added.
    fn flush(&mut self) -> i64 {
        let push = self.unflushed.round();
        let push = if push.is_finite() { push as i64 } else { 0 };
        self.unflushed -= push as f64;
        ESTIMATE.fetch_add(push, Ordering::Relaxed);
        push
    }

    /// Joins the unflushed change to the global estimate and forgets a capture that was due:
    /// the `fork` child's step for each stripe (see [`after_fork_child`]).
    pub(crate) fn flush_after_fork(&mut self) {
        self.flush();
        self.capture = false;
    }

    /// Whether a capture is due (and clears the flag). Read under the stripe's lock, acted on
    /// after it is released ([`after_change`]).
    #[inline]
    pub(crate) fn take_capture(&mut self) -> bool {
        std::mem::replace(&mut self.capture, false)
    }
}

/// Keeps a new peak if the global estimate still exceeds the threshold, and returns its epoch.
/// The state kept is the one just before the change that crossed the threshold
/// (`exact_excluded` its exact bytes): a moment chosen because a sample was just
/// taken there holds that sample's whole weight (about `R` for a small block) against its few
/// bytes, an upward bias of about one interval; the moment before it carries none. Never
/// waits: a capture already in progress (or a snapshot copying the kept peak out) makes this
/// one give way, and the next change past the threshold tries again. Runs under the changed
/// stripe's lock (lock order: stripe, then this, then the totals' registry, both only tried).
fn capture(exact_excluded: f64) -> Option<u32> {
    let mut kept = KEPT.try_lock()?;
    let estimate = ESTIMATE.load(Ordering::Relaxed);
    let threshold = THRESHOLD.load(Ordering::Relaxed);
    if estimate <= 0 || estimate as u64 <= threshold {
        return None;
    }
    Some(keep(&mut kept, estimate, exact_excluded))
}

/// Opens a new epoch at estimate `estimate`, the exact total read now less `exact_excluded`
/// (a change the state kept does not include); the caller holds [`KEPT`].
fn keep(kept: &mut Option<Kept>, estimate: i64, exact_excluded: f64) -> u32 {
    let epoch = EPOCH.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    let exact = crate::engine::totals::try_read().map(|t| {
        let excluded = if exact_excluded.is_finite() { exact_excluded as i64 } else { 0 };
        (t.retained_bytes() as i64).saturating_sub(excluded).max(0) as u64
    });
    *kept = Some(Kept {
        exact,
        boot_ns: crate::sys::clock::boot_ns(),
        wall: crate::sys::clock::wall(),
    });
    THRESHOLD.store((estimate as f64 * (1.0 + MARGIN)) as u64, Ordering::Relaxed);
    HIGH_WATER.fetch_max(estimate as u64, Ordering::Relaxed);
    CAPTURES.fetch_add(1, Ordering::Relaxed);
    epoch
}

/// The kept peak as a snapshot reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    /// The epoch whose slots hold the values at the peak (0: no peak kept).
    pub(crate) epoch: u32,
    pub(crate) kept: Option<Kept>,
    pub(crate) high_water: u64,
    pub(crate) captures: u64,
}

/// Reads the kept peak (report time, under the re-entrancy guard).
pub(crate) fn read() -> Read {
    let kept = KEPT.lock();
    Read {
        epoch: EPOCH.load(Ordering::Acquire),
        kept: *kept,
        high_water: HIGH_WATER.load(Ordering::Relaxed),
        captures: CAPTURES.load(Ordering::Relaxed),
    }
}

/// The current epoch (a snapshot compares it before and after walking the table).
pub(crate) fn epoch() -> u32 {
    EPOCH.load(Ordering::Acquire)
}

/// Forgets the peak (`tables::clear`, which holds every stripe's lock and resets their tallies).
pub(crate) fn clear() {
    let mut kept = KEPT.lock();
    *kept = None;
    EPOCH.fetch_add(1, Ordering::AcqRel);
    ESTIMATE.store(0, Ordering::Relaxed);
    THRESHOLD.store(0, Ordering::Relaxed);
    HIGH_WATER.store(0, Ordering::Relaxed);
    CAPTURES.store(0, Ordering::Relaxed);
}

/// `fork` child (the shim's handler, the only thread left, the tables unlocked): the peak
/// starts afresh at the state the child inherited. Every stripe's unflushed change joins the
/// global estimate first (`flush_stripes`, which calls [`StripeTally::flush_after_fork`] on
/// each stripe's tally), since the threads that would have flushed them are gone.
pub(crate) fn after_fork_child(flush_stripes: impl FnOnce()) {
    KEPT.force_unlock();
    flush_stripes();
    let estimate = ESTIMATE.load(Ordering::Relaxed);
    let mut kept = KEPT.lock();
    HIGH_WATER.store(0, Ordering::Relaxed);
    CAPTURES.store(0, Ordering::Relaxed);
    if estimate > 0 {
        keep(&mut kept, estimate, 0.0);
    } else {
        *kept = None;
        EPOCH.fetch_add(1, Ordering::AcqRel);
        THRESHOLD.store(0, Ordering::Relaxed);
    }
}

/// The kept peak of the estimated retained total, as a snapshot carries it
/// ([`crate::Snapshot::peak`]). Each stack's figures at this moment are its
/// [`crate::StackStats::peak_retained_bytes`] and `peak_retained_count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peak {
    /// How long after the process started the peak was kept (None if `/proc` could not say).
    pub since_start: Option<Duration>,
    /// Wall-clock time at which the peak was kept.
    pub at: SystemTime,
    /// Estimated retained bytes at the kept peak: the sum of the stacks' figures at the peak.
    pub estimated_bytes: u64,
    /// Exact retained bytes at that moment (the profiler's own memory excluded), or None when
    /// the exact totals were being read elsewhere at that instant (a capture never waits).
    pub exact_bytes: Option<u64>,
    /// The highest estimated retained total seen: the kept peak is kept within 5 % of it (a
    /// new peak is kept only once the total exceeds the last kept one by 5 %), so this is at
    /// least `estimated_bytes` and at most about 5 % above it.
    pub high_water_bytes: u64,
    /// How many peaks were kept since start (each 5 % above the one before).
    pub captures: u64,
}

impl Peak {
    /// The public form of `read`, whose stacks sum to `estimated_bytes` at the peak (report
    /// time: reads `/proc`).
    pub(crate) fn from_read(read: &Read, estimated_bytes: u64) -> Option<Peak> {
        let kept = read.kept?;
        Some(Peak {
            since_start: since_start(&kept),
            at: kept.wall,
            estimated_bytes,
            exact_bytes: kept.exact,
            high_water_bytes: read.high_water.max(estimated_bytes),
            captures: read.captures,
        })
    }
}

/// Nanoseconds on `CLOCK_BOOTTIME` at which this process started (a `fork` child: was forked),
/// from `/proc/self/stat` (report time only: reads a file).
pub(crate) fn process_start_boot_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `starttime` is field 22; `rest` starts with field 3.
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    Some(ticks.saturating_mul(1_000_000_000) / hz)
}

/// How long after the process started the kept peak was captured (report time).
fn since_start(kept: &Kept) -> Option<Duration> {
    let start = process_start_boot_ns()?;
    (kept.boot_ns > 0).then(|| Duration::from_nanos(kept.boot_ns.saturating_sub(start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_keeps_the_value_at_the_start_of_its_epoch() {
        let r = |bytes: f64, count: f64| Retained { bytes, count, var: [bytes, count] };
        let mut s = PeakSlot::default();
        assert_eq!(s.at(0, r(5.0, 1.0)), Retained::default(), "no peak kept yet");
        // Changed in epoch 3, read for epoch 3: the saved value.
        s = PeakSlot { epoch: 3, saved: r(10.0, 2.0) };
        assert_eq!(s.at(3, r(99.0, 9.0)), r(10.0, 2.0));
        // Saved in epoch 2, read for epoch 3: unchanged since, the current value.
        assert_eq!(s.at(4, r(99.0, 9.0)), r(99.0, 9.0));
        // Saved in a later epoch than the one read (a capture during the read): the slot.
        assert_eq!(s.at(2, r(99.0, 9.0)), r(10.0, 2.0));
    }
}
