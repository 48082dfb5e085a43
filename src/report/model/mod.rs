//! The report model: one value per report, built once from a source, that every output is a
//! pure function of.
//!
//! A [`Report`] holds everything any output needs: the header's [`Facts`] (totals, counters,
//! the kept peak, the process, the reason, whether it is the exit report, what the profiler
//! could not see, the loaded modules), the [`StackTable`] (every sampled stack as figures and
//! location indices, with the symbolized frames), its grouping into the entries one frame view
//! prints ([`Printed`]), the entries ranked by each measure (once), and the lifetime and age
//! histograms of the entries an output lists. The text report, the folded stacks, the
//! flamegraphs, the pprof profiles, the timeline of the HTML page and the endpoint's answers
//! are rendered from it with no global, no table walk and no clock.
//!
//! It is built from the live engine ([`Report::take`], under the re-entrancy guard: its memory
//! is the profiler's) or from a [`crate::Snapshot`] someone took or built
//! ([`Report::from_snapshot`]); a report read from outside the process fills the same fields.
//!
//! # What it costs
//!
//! The stack table's `S * (110 + 4 * F)` bytes for `S` stacks of `F` frames (see
//! [`table`]), the grouping's 4 to 8 bytes a stack, the three rankings' 12 bytes an entry, and
//! two 88-byte histograms for each of the few entries listed. The outputs then add a bounded
//! amount, about 8 MiB with the symbolization they need: the text report materialises its top
//! K entries only, the folded stacks and the flamegraph 2,000 entries at most, and the pprof
//! profile is streamed to its file one sample at a time (see [`crate::report::pprof`]).
//! Measured: 92,137 stacks of about 46 frames, 32.8 MiB of its own with the resident bytes
//! read (BENCHMARKS.md, "Profiler memory of a report"); the README's *Limits* section gives the
//! formula.

pub(crate) mod facts;
pub(crate) mod groups;
pub(crate) mod printed;
pub(crate) mod resident;
pub(crate) mod rss;
mod smaps;
pub(crate) mod table;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::callstack::{Frame, FrameView, Measurement, ShownFrame, StackStats};
use crate::engine::sampler::ByteUnit;
use crate::report::ReportOptions;
use crate::spans::SpanInfo;
pub(crate) use facts::{Facts, Occasion};
use printed::Printed;
use table::{Build, Figures, Histograms, StackTable};

/// Entries in folded files and flamegraphs (the rest are summed into one line): every ranking
/// orders at least these. `report::folded::MAX_FOLDED_STACKS` is this number.
pub(crate) const FOLDED_STACKS: usize = 2000;

/// Entries whose histograms a report reads, per measure: the text report's top K (when larger)
/// and the HTML timeline's table (25 by retained bytes, 20 by allocated, 40 at the peak).
const LISTED: usize = 40;

/// The three measures, in the order of [`Report`]'s rankings.
const MEASURES: [Measurement; 3] =
    [Measurement::RetainedBytes, Measurement::AllocatedBytes, Measurement::RetainedBytesAtPeak];

fn measure_index(m: Measurement) -> usize {
    match m {
        Measurement::RetainedBytes => 0,
        Measurement::AllocatedBytes => 1,
        Measurement::RetainedBytesAtPeak => 2,
    }
}

/// The entries with a non-zero figure of one measure, the first [`Report`]`::depth` of them in
/// order.
#[derive(Debug, Default)]
struct Ranking {
    /// The leading entries, in order.
    top: Vec<u32>,
    /// Entries with a non-zero figure, `top` included.
    len: usize,
    /// The figures of the entries after `top`, summed.
    rest_total: u64,
}

/// The stack table of the live engine, with `facts` completed by what taking it tells: the kept
/// peak its rows add up to and the symbol cache's size after symbolizing them.
fn take_live(mut facts: Facts) -> (Facts, StackTable) {
    let (table, peak) = table::take();
    facts.peak = peak;
    facts.symbol_cache_entries = crate::symbols::symbolize::cache_len() as u64;
    (facts, table)
}

/// One report: see the module docs.
#[derive(Debug)]
pub(crate) struct Report {
    /// The header's facts.
    pub(crate) facts: Facts,
    /// Every sampled stack.
    pub(crate) table: StackTable,
    /// What the report shows: ranking, top K, frame view, flamegraphs.
    pub(crate) opts: ReportOptions,
    printed: Printed,
    /// The entries with a non-zero figure, ranked by each of [`MEASURES`], each ranked when
    /// first asked for (a pprof profile needs none).
    ranked: [OnceLock<Ranking>; 3],
    /// Each row's Tokio task kind, found when first asked for (`groups.rs`).
    tasks: OnceLock<groups::TaskKinds>,
    /// How many entries a ranking orders: every output lists fewer (the rest are counted and
    /// summed), so ranking 100,000 entries costs a selection and a sort of this many.
    depth: usize,
    /// The histograms of the entries listed (see [`LISTED`]).
    histograms: HashMap<u32, Histograms, Build>,
}

impl Report {
    /// The Tokio task kind of row `row` of the table (`groups.rs`), the rows' kinds found
    /// once per report for every output that shows them.
    pub(crate) fn task_of(&self, row: u32) -> Option<&str> {
        self.tasks.get_or_init(|| groups::TaskKinds::of(&self.table)).of_row(row)
    }

    /// Takes the report of the live engine now, shown as `opts` says. The caller holds the
    /// re-entrancy guard.
    pub(crate) fn take(
        sample_interval: u64,
        unit: ByteUnit,
        occasion: Occasion,
        opts: &ReportOptions,
    ) -> Self {
        let (facts, table) = take_live(Facts::read_all(sample_interval, unit, occasion));
        Self::build(facts, table, opts, Printed::group, opts.top_k.max(LISTED))
    }

    /// The report of the live engine for a pprof profile: every stack a row, no entries
    /// grouped, no histograms read. The caller holds the re-entrancy guard.
    pub(crate) fn take_rows(sample_interval: u64, unit: ByteUnit) -> Self {
        let facts = Facts::read_all(sample_interval, unit, Occasion::default());
        let (facts, table) = take_live(facts);
        let identity = |t: &StackTable, _| Printed::identity(t.len());
        Self::build(facts, table, &ReportOptions::default(), identity, 0)
    }

    /// The report of the live engine with every stack an entry of its own and the histograms
    /// of its first `listed` stacks by each measure read (every stack's with `usize::MAX`):
    /// what a [`crate::Snapshot`] carries (no modules). The caller holds the re-entrancy guard.
    pub(crate) fn take_raw(sample_interval: u64, unit: ByteUnit, listed: usize) -> Self {
        let mut facts = Facts::read(sample_interval, unit, Occasion::default());
        facts.giant_refusals = facts::named_refusals();
        let (facts, table) = take_live(facts);
        let identity = |t: &StackTable, _| Printed::identity(t.len());
        let opts = ReportOptions { top_k: listed, ..ReportOptions::default() };
        Self::build(facts, table, &opts, identity, listed.max(1))
    }

    /// The report of `stacks` with the facts `facts` (see `snapshot::report_of`).
    pub(crate) fn from_parts(facts: Facts, stacks: &[StackStats], opts: &ReportOptions) -> Self {
        let table = StackTable::from_stacks(stacks);
        Self::build(facts, table, opts, Printed::group, opts.top_k.max(LISTED))
    }

    /// The report of `table` (rebuilt from a live file, `report/live/`) with the facts
    /// `facts`, grouped and ranked as `opts` says.
    pub(crate) fn from_table(facts: Facts, table: StackTable, opts: &ReportOptions) -> Self {
        Self::build(facts, table, opts, Printed::group, opts.top_k.max(LISTED))
    }

    /// The report of `stacks` alone (header facts empty: an unknown process, no totals).
    pub(crate) fn from_stacks(stacks: &[StackStats], opts: &ReportOptions) -> Self {
        Self::from_parts(Facts::empty(crate::report::ReportContext::unknown()), stacks, opts)
    }

    /// The report of `table` grouped by `group`, with the histograms of the top `listed`
    /// entries by each measure read (none when 0, every entry's when `usize::MAX`).
    fn build(
        facts: Facts,
        table: StackTable,
        opts: &ReportOptions,
        group: impl FnOnce(&StackTable, FrameView) -> Printed,
        listed: usize,
    ) -> Self {
        let printed = group(&table, opts.view());
        let mut report = Self {
            facts,
            table,
            opts: opts.clone(),
            printed,
            ranked: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
            tasks: OnceLock::new(),
            depth: opts.top_k.max(LISTED).max(FOLDED_STACKS),
            histograms: HashMap::default(),
        };
        if listed == 0 {
            return report;
        }
        let listed: Vec<u32> = if listed == usize::MAX {
            (0..report.entries() as u32).collect()
        } else {
            let mut v: Vec<u32> = MEASURES
                .iter()
                .flat_map(|&m| report.ranked(m).iter().take(listed))
                .copied()
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let slot: HashMap<u32, u32, Build> =
            listed.iter().enumerate().map(|(i, &e)| (e, i as u32)).collect();
        let printed = &report.printed;
        let histograms =
            report.table.histograms(|r| slot.get(&printed.entry_of(r)).copied(), listed.len());
        drop(slot);
        report.histograms = listed.into_iter().zip(histograms).collect();
        report
    }

    /// The entries with a non-zero `m`, ranked by `m` descending, then the other measure, then
    /// frame names, addresses and span names: the first `depth` selected, then sorted.
    fn rank(&self, m: Measurement) -> Ranking {
        let other = table::other(m);
        let mut v: Vec<u32> =
            (0..self.entries() as u32).filter(|&e| self.figures(e).measure(m) > 0).collect();
        let cmp = |a: &u32, b: &u32| {
            let (fa, fb) = (self.figures(*a), self.figures(*b));
            fb.measure(m)
                .cmp(&fa.measure(m))
                .then(fb.measure(other).cmp(&fa.measure(other)))
                .then_with(|| self.table.cmp_ties(self.printed.lead(*a), self.printed.lead(*b)))
        };
        let len = v.len();
        let mut rest_total = 0;
        if len > self.depth {
            if self.depth > 0 {
                v.select_nth_unstable_by(self.depth - 1, cmp);
            }
            rest_total = v[self.depth..].iter().map(|&e| self.figures(e).measure(m)).sum();
            v.truncate(self.depth);
        }
        v.sort_unstable_by(cmp);
        v.shrink_to_fit();
        Ranking { top: v, len, rest_total }
    }

    /// Number of entries (stacks printed alike are one).
    pub(crate) fn entries(&self) -> usize {
        self.printed.len()
    }

    /// Number of stacks sampled (before those printed alike were made one entry).
    pub(crate) fn stacks_sampled(&self) -> usize {
        self.table.len()
    }

    /// The leading entries with a non-zero `m`, ranked (see [`Report::rank`]): at least the
    /// report's top K, 2,000 (the folded stacks' and flamegraphs') and 40, or all of them.
    pub(crate) fn ranked(&self, m: Measurement) -> &[u32] {
        &self.ranking(m).top
    }

    /// How many entries have a non-zero `m` (those [`Report::ranked`] leaves out included).
    pub(crate) fn ranked_len(&self, m: Measurement) -> usize {
        self.ranking(m).len
    }

    /// The sum of `m` over the entries [`Report::ranked`] leaves out.
    pub(crate) fn unranked_total(&self, m: Measurement) -> u64 {
        self.ranking(m).rest_total
    }

    fn ranking(&self, m: Measurement) -> &Ranking {
        self.ranked[measure_index(m)].get_or_init(|| self.rank(m))
    }

    /// Ranks every entry, not only the first [`Report::ranked`] needs to (a flamegraph of
    /// every stack, as 0.3.0 drew it); the rankings made so far are made again.
    pub(crate) fn rank_all(&mut self) {
        self.depth = usize::MAX;
        self.ranked = Default::default();
    }

    /// The figures of entry `e`.
    pub(crate) fn figures(&self, e: u32) -> &Figures {
        self.printed.figures(&self.table, e)
    }

    /// The frames of entry `e`, innermost first, inlined frames expanded.
    pub(crate) fn frames_of(&self, e: u32) -> impl Iterator<Item = &Frame> {
        self.table.frames_of(self.printed.lead(e))
    }

    /// The span path of entry `e`, outermost first.
    pub(crate) fn spans_of(&self, e: u32) -> &[SpanInfo] {
        self.table.spans_of(self.printed.lead(e))
    }

    /// The lines entry `e` prints in `view`.
    pub(crate) fn shown(&self, e: u32, view: FrameView) -> Vec<ShownFrame<'_>> {
        self.table.shown(self.printed.lead(e), view)
    }

    /// Whether entry `e`'s histograms were read (it is listed by some output).
    pub(crate) fn has_histograms(&self, e: u32) -> bool {
        self.histograms.contains_key(&e)
    }

    /// Entry `e` as a [`StackStats`]: its figures, frames and spans, and its histograms when
    /// they were read (empty otherwise).
    pub(crate) fn stack_stats(&self, e: u32) -> StackStats {
        let h = self.histograms.get(&e).copied().unwrap_or_default();
        self.table.stack_stats(self.printed.lead(e), self.figures(e), &h)
    }

    /// The standard errors of [`Report::estimated_totals`] and of the estimate at the kept peak
    /// (allocated, retained, at the peak): the stacks' variances add up.
    pub(crate) fn estimated_stderrs(&self) -> (f64, f64, f64) {
        let (a, r, p) = (0..self.table.len() as u32).fold((0.0, 0.0, 0.0), |(a, r, p), row| {
            let v = &self.table.row(row).fig.var;
            (a + v[table::ALLOC_BYTES], r + v[table::LIVE_BYTES], p + v[table::PEAK_BYTES])
        });
        (a.sqrt(), r.sqrt(), p.sqrt())
    }

    /// Estimated allocated and retained bytes summed over all stacks.
    pub(crate) fn estimated_totals(&self) -> (u64, u64) {
        (0..self.table.len() as u32).fold((0, 0), |(a, r), row| {
            let f = &self.table.row(row).fig;
            (a + f.measure(Measurement::AllocatedBytes), r + f.measure(Measurement::RetainedBytes))
        })
    }
}

/// Stacks built by hand for the tests of the model and of its renderers.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::callstack::{Frame, StackStats, StdCallstack};
    use crate::engine::histogram::MillisHistogram;

    pub(crate) fn frame(ip: usize, function: &str, line: u32, inlined: bool) -> Frame {
        Frame {
            ip,
            function: function.into(),
            file: Some("/app/src/main.rs".into()),
            line: Some(line),
            inlined,
            module: None,
        }
    }

    /// A stack through `glue_ip` (an address whose only visible frame is `app::handler` at
    /// `line`, under hidden `::poll` glue), with figures scaled by `k`.
    pub(crate) fn stack(glue_ip: usize, line: u32, k: u64) -> StackStats {
        let mut lifetimes = MillisHistogram::new();
        lifetimes.add_weighted(5.0, k as f64);
        let mut retained_age = MillisHistogram::new();
        retained_age.add_weighted(50_000.0, (100 * k) as f64);
        let frames = vec![
            frame(1, "app::alloc_site", 3, false),
            frame(glue_ip, "<core::pin::Pin<P> as core::future::future::Future>::poll", 9, true),
            frame(glue_ip, "app::handler", line, false),
        ];
        StackStats {
            allocated_bytes: 1000 * k + 1,
            num_allocations: 10 * k,
            freed_bytes: 900 * k,
            num_frees: 9 * k,
            retained_bytes: 100 * k + 1,
            retained_count: k,
            peak_retained_bytes: 200 * k,
            peak_retained_count: 2 * k,
            samples: 3 * k,
            live_samples: k,
            stack: StdCallstack::from_ips(&[1, glue_ip]),
            frames,
            lifetimes,
            retained_age,
            spans: Vec::new(),
            variance: Default::default(),
            residency: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::stack;
    use super::*;
    use crate::engine::histogram::MillisHistogram;

    #[test]
    fn stacks_printed_alike_merge_with_exact_sums() {
        // Rows 0, 1 and 3 differ only in the glue's address: one entry; row 2 is another line.
        let stacks = [stack(0x10, 7, 1), stack(0x11, 7, 2), stack(0x10, 8, 4), stack(0x12, 7, 8)];
        let merged = Report::from_stacks(&stacks, &ReportOptions::default());
        assert_eq!((merged.entries(), merged.stacks_sampled()), (2, 4));
        let s: Vec<StackStats> = (0..2).map(|e| merged.stack_stats(e)).collect();
        let sum = |f: fn(&StackStats) -> u64, idx: &[usize]| -> u64 {
            idx.iter().map(|&i| f(&stacks[i])).sum()
        };
        let group = [0, 1, 3];
        assert_eq!(s[0].stack.ips(), stacks[0].stack.ips(), "the first row of a group leads it");
        assert_eq!(s[0].allocated_bytes, sum(|s| s.allocated_bytes, &group));
        assert_eq!(s[0].num_allocations, sum(|s| s.num_allocations, &group));
        assert_eq!(s[0].freed_bytes, sum(|s| s.freed_bytes, &group));
        assert_eq!(s[0].num_frees, sum(|s| s.num_frees, &group));
        assert_eq!(s[0].retained_bytes, sum(|s| s.retained_bytes, &group));
        assert_eq!(s[0].retained_count, sum(|s| s.retained_count, &group));
        assert_eq!(s[0].peak_retained_bytes, sum(|s| s.peak_retained_bytes, &group));
        assert_eq!(s[0].peak_retained_count, sum(|s| s.peak_retained_count, &group));
        assert_eq!(s[0].samples, sum(|s| s.samples, &group));
        assert_eq!(s[0].live_samples, sum(|s| s.live_samples, &group));
        let mut lifetimes = MillisHistogram::new();
        let mut age = MillisHistogram::new();
        for &i in &group {
            lifetimes.merge(&stacks[i].lifetimes);
            age.merge(&stacks[i].retained_age);
        }
        assert_eq!(s[0].lifetimes.counts(), lifetimes.counts());
        assert_eq!(s[0].retained_age.weights(), age.weights());
        // The other line is untouched.
        assert_eq!(s[1].allocated_bytes, stacks[2].allocated_bytes);
        assert_eq!(s[1].samples, stacks[2].samples);
        // The totals are those of the raw stacks.
        let sum_all = |f: fn(&StackStats) -> u64| stacks.iter().map(f).sum::<u64>();
        assert_eq!(
            merged.estimated_totals(),
            (sum_all(|s| s.allocated_bytes), sum_all(|s| s.retained_bytes))
        );
        // Expanded, the glue is still hidden: the same entries.
        let opts = ReportOptions { expand_frames: true, ..ReportOptions::default() };
        assert_eq!(Report::from_stacks(&stacks, &opts).entries(), 2);
    }
}
