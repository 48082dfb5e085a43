//! The public snapshot: everything the profiler knows at one moment, every stack as a
//! [`StackStats`] with its own frames and histograms, for the stats API and for programs that
//! render or keep snapshots themselves.
//!
//! A snapshot is taken through a [`Report`] of the live engine with every stack an entry of its
//! own ([`Report::take_raw`], as profiler code, under the re-entrancy guard); the stacks are
//! then copied out of it *without* the guard: the snapshot is handed to the caller, so its
//! memory is the program's and is counted as such when it is later freed. Under the guard
//! again the report is dropped. Memory allocated as the profiler's is thus always freed as the
//! profiler's.

use std::time::SystemTime;

use crate::callstack::{Measurement, StackStats};
use crate::engine::host::Host;
use crate::engine::totals::Totals;
use crate::report::model::table::other;
use crate::report::model::{Facts, Report};

pub(crate) use crate::engine::peak::Peak;
pub use crate::report::model::facts::GiantRefusal;

/// Everything one report needs, taken at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Wall-clock time of the snapshot.
    pub taken_at: SystemTime,
    /// Exact totals of the program's allocations.
    pub totals: Totals,
    /// Mean sampling interval in bytes.
    pub sample_interval: u64,
    /// What every byte figure counts (the front end's unit).
    pub unit: crate::engine::sampler::ByteUnit,
    /// Every stack with at least one sample, unordered.
    pub stacks: Vec<StackStats>,
    /// Live sampled allocations.
    pub live_samples: u64,
    /// Samples whose stack was not kept (stack table full; see `YING_MAX_STACKS`).
    pub dropped_samples: u64,
    /// Samples whose address was still recorded as live (a free the profiler missed).
    pub address_conflicts: u64,
    /// Giant allocations refused.
    pub giant_refused: u64,
    /// The most recent giant refusals (up to 16), oldest first, with the stacks that asked.
    pub giant_refusals: Vec<GiantRefusal>,
    /// Addresses in the symbol cache.
    pub symbol_cache_entries: u64,
    /// The kept peak of the retained total: when, how high, and (in each stack's
    /// [`StackStats::peak_retained_bytes`]) what held it. None before the first sample, and in
    /// a snapshot taken without its stacks.
    ///
    /// ```
    /// use ying_profiler::{Measurement, YingProfiler};
    ///
    /// #[global_allocator]
    /// static YING_ALLOC: YingProfiler = YingProfiler::default().with_sample_interval(4096);
    ///
    /// let big: Vec<Vec<u8>> = (0..256).map(|_| vec![1u8; 16 * 1024]).collect();
    /// drop(big); // 4 MiB held, then freed: nothing retained now.
    /// let snap = YING_ALLOC.snapshot();
    /// let peak = snap.peak.expect("a peak was kept");
    /// assert!(peak.estimated_bytes >= 2 << 20, "{peak:?}");
    /// assert!(peak.high_water_bytes >= peak.estimated_bytes);
    /// let top = snap.top_k(1, Measurement::RetainedBytesAtPeak);
    /// assert!(top[0].peak_retained_bytes > 0 && top[0].retained_bytes < top[0].peak_retained_bytes);
    /// ```
    pub peak: Option<Peak>,
}

impl Snapshot {
    /// Estimated allocated and retained bytes summed over all stacks.
    pub fn estimated_totals(&self) -> (u64, u64) {
        self.stacks.iter().fold((0, 0), |(a, r), s| (a + s.allocated_bytes, r + s.retained_bytes))
    }

    /// The `k` stacks that retained the most at the kept peak ([`Snapshot::peak`]).
    pub fn top_k_at_peak(&self, k: usize) -> Vec<StackStats> {
        self.top_k(k, Measurement::RetainedBytesAtPeak)
    }

    /// The `k` stacks ranked highest by `m`, in a deterministic order (ties broken by frames).
    pub fn top_k(&self, k: usize, m: Measurement) -> Vec<StackStats> {
        let mut v: Vec<&StackStats> = self.stacks.iter().filter(|s| s.measure(m) > 0).collect();
        sort_stacks(&mut v, m);
        v.into_iter().take(k).cloned().collect()
    }
}

/// Sorts by `m` descending, then by the other measure, then by frame names and addresses.
pub(crate) fn sort_stacks(v: &mut [&StackStats], m: Measurement) {
    let other = other(m);
    v.sort_by(|a, b| {
        b.measure(m)
            .cmp(&a.measure(m))
            .then(b.measure(other).cmp(&a.measure(other)))
            .then_with(|| {
                let fa = a.frames.iter().map(|f| &*f.function);
                let fb = b.frames.iter().map(|f| &*f.function);
                fa.cmp(fb)
            })
            .then_with(|| a.stack.ips().cmp(b.stack.ips()))
            .then_with(|| a.spans.iter().map(|s| s.name).cmp(b.spans.iter().map(|s| s.name)))
    });
}

/// The `k` stacks ranked highest by `m` (as [`Snapshot::top_k`] ranks them), for the front end
/// `H`: only those `k` are materialised, out of a report taken and dropped as profiler code.
pub(crate) fn top_k<H: Host>(sample_interval: u64, k: usize, m: Measurement) -> Vec<StackStats> {
    let ts = H::thread_state();
    let guard = ts.enter();
    let report = Report::take_raw(sample_interval, H::UNIT, k);
    drop(guard);
    let top = report.ranked(m).iter().take(k).map(|&e| report.stack_stats(e)).collect();
    let _g = ts.enter();
    drop(report);
    top
}

/// Takes a snapshot for the front end `H` (see the module docs).
pub fn take<H: Host>(sample_interval: u64) -> Snapshot {
    let ts = H::thread_state();
    let guard = ts.enter();
    let report = Report::take_raw(sample_interval, H::UNIT, usize::MAX);
    drop(guard);
    let snap = of_report(&report);
    let _g = ts.enter();
    drop(report);
    snap
}

/// The report of `snap`, a snapshot someone took or built, for the process `process`: its
/// figures are the snapshot's, and what it does not carry is unknown (no reason, no mappings
/// seen, no modules).
pub(crate) fn report_of(
    snap: &Snapshot,
    process: crate::report::ReportContext,
    opts: &crate::report::ReportOptions,
) -> Report {
    let mut facts = Facts::empty(process);
    facts.taken_at = snap.taken_at;
    facts.totals = snap.totals;
    facts.sample_interval = snap.sample_interval;
    facts.unit = snap.unit;
    facts.live_samples = snap.live_samples;
    facts.dropped_samples = snap.dropped_samples;
    facts.address_conflicts = snap.address_conflicts;
    facts.giant_refused = snap.giant_refused;
    facts.giant_refusals = snap.giant_refusals.clone();
    facts.symbol_cache_entries = snap.symbol_cache_entries;
    facts.peak = snap.peak;
    Report::from_parts(facts, &snap.stacks, opts)
}

/// The public form of `r`: every entry as a [`StackStats`], unordered.
fn of_report(r: &Report) -> Snapshot {
    let f = &r.facts;
    Snapshot {
        taken_at: f.taken_at,
        totals: f.totals,
        sample_interval: f.sample_interval,
        unit: f.unit,
        stacks: (0..r.entries() as u32).map(|e| r.stack_stats(e)).collect(),
        live_samples: f.live_samples,
        dropped_samples: f.dropped_samples,
        address_conflicts: f.address_conflicts,
        giant_refused: f.giant_refused,
        giant_refusals: f.giant_refusals.clone(),
        symbol_cache_entries: f.symbol_cache_entries,
        peak: f.peak,
    }
}
