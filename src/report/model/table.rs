//! The stacks of a report: every sampled stack at one moment as a row of figures, each stack as
//! indices into one table of *locations* (one per distinct address, with its symbolized
//! frames shared with the symbol cache), coded one or two bytes an index, so a deep stack
//! costs a byte or two a frame and no name is copied.
//!
//! A table is taken from the engine ([`take`]) under the re-entrancy guard (its memory is the
//! profiler's) by walking the stack table in place, each stripe under its own short lock hold,
//! copying nothing but figures: the entries of one stack in different stripes are summed into
//! one row, and each stripe's distinct addresses are looked up once. Or it is made from the
//! [`StackStats`] of a [`crate::Snapshot`] ([`StackTable::from_stacks`]). The lifetime and age
//! histograms are read later, for the entries a report lists ([`StackTable::histograms`]).
//!
//! # What it costs
//!
//! A table of `S` stacks of `F` frames on average takes about `S * (200 + F)` bytes while
//! fewer than 128 distinct addresses are in it, `S * (200 + 2 * F)` below 16,384: a 192-byte
//! row of figures (its peak figures, the estimates' variances and the resident bytes
//! included), the coded location indices, and while the stripes are merged a hash index of
//! about 20 bytes a stack (the rows are counted first and allocated once, at their size). The
//! location table is a few hundred bytes per distinct address.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use crate::callstack::{
    Frame, FrameFacts, FrameView, Measurement, ShownFrame, ShownScratch, StackStats, StdCallstack,
};
use crate::engine::histogram::MillisHistogram;
use crate::engine::peak::Peak;
use crate::engine::tables::arena::{Arena, ArenaVec};
use crate::engine::tables::{self, AddrHasher, EntryFrames, STACK_STRIPES, StackEntry};
use crate::spans::{SpanInfo, SpanPath};
use crate::sys::leb128;

/// The other measure: the first tie-breaker of a ranking by `m`.
pub(crate) fn other(m: Measurement) -> Measurement {
    match m {
        Measurement::AllocatedBytes => Measurement::RetainedBytes,
        Measurement::RetainedBytes => Measurement::AllocatedBytes,
        Measurement::RetainedBytesAtPeak => Measurement::RetainedBytes,
    }
}

pub(crate) fn round(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 { x.round() as u64 } else { 0 }
}

/// One distinct address and its frames (innermost first), shared by every stack through it.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub(crate) ip: usize,
    pub(crate) frames: Arc<[Frame]>,
}

/// The facts of every location's frames in one array, judged once per report
/// ([`StackTable::frame_facts`]): a report of a million stacks looks them up for every frame
/// of every stack, and one array with offsets is a load where a vector per location was two.
#[derive(Debug)]
pub(crate) struct LocationFacts<'a> {
    frames: Vec<(&'a Frame, FrameFacts<'a>)>,
    /// Where each location's frames start in `frames`, and one past the last.
    start: Vec<u32>,
}

impl<'a> LocationFacts<'a> {
    /// The frames of location `l`, innermost first, with their facts.
    #[inline]
    pub(crate) fn of(&self, l: u32) -> &[(&'a Frame, FrameFacts<'a>)] {
        let l = l as usize;
        match (self.start.get(l), self.start.get(l + 1)) {
            (Some(&a), Some(&b)) => &self.frames[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// What a frame's line prints: its name, short location and whether it was inlined.
pub(crate) type LineText<'a> = (&'a str, Option<&'a str>, Option<u32>, bool);

/// The [`LineText`] of `f`.
pub(crate) fn line_text(f: &Frame) -> LineText<'_> {
    (&f.function, f.file.as_deref().map(crate::callstack::short_path), f.line, f.inlined)
}

/// Indices of a row's estimates.
pub(crate) const ALLOC_BYTES: usize = 0;
pub(crate) const ALLOC_COUNT: usize = 1;
pub(crate) const FREED_BYTES: usize = 2;
pub(crate) const FREED_COUNT: usize = 3;
pub(crate) const LIVE_BYTES: usize = 4;
pub(crate) const LIVE_COUNT: usize = 5;
/// Retained bytes and count at the kept peak.
pub(crate) const PEAK_BYTES: usize = 6;
pub(crate) const PEAK_COUNT: usize = 7;

/// The figures of one stack, or of one entry of a report (the stacks printed alike summed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Figures {
    /// Unrounded estimates (sums over the stripes), see the `ALLOC_BYTES`... indices.
    pub(crate) est: [f64; 8],
    /// Their variance estimates (see [`crate::Variances`]), same indices.
    pub(crate) var: [f64; 8],
    pub(crate) samples: u64,
    pub(crate) live_samples: u64,
    /// Estimated retained bytes in pages present in memory and in swap at report time (see
    /// `resident`); None when not measured. Kept apart from `est`: not every table has it.
    pub(crate) res: Option<[f64; 2]>,
}

impl Figures {
    /// The figure that `m` ranks by.
    pub(crate) fn measure(&self, m: Measurement) -> u64 {
        match m {
            Measurement::AllocatedBytes => round(self.est[ALLOC_BYTES]),
            Measurement::RetainedBytes => round(self.est[LIVE_BYTES]),
            Measurement::RetainedBytesAtPeak => round(self.est[PEAK_BYTES]),
        }
    }

    /// The standard error of estimate `i` (the `ALLOC_BYTES`... indices).
    pub(crate) fn stderr_at(&self, i: usize) -> f64 {
        self.var[i].max(0.0).sqrt()
    }

    /// The standard errors of Go's four heap values ([`Figures::pprof_values`]).
    pub(crate) fn pprof_stderrs(&self) -> [f64; 4] {
        [ALLOC_COUNT, ALLOC_BYTES, LIVE_COUNT, LIVE_BYTES].map(|i| self.stderr_at(i))
    }

    /// The standard errors of the peak heap profile's two values.
    pub(crate) fn peak_pprof_stderrs(&self) -> [f64; 2] {
        [PEAK_COUNT, PEAK_BYTES].map(|i| self.stderr_at(i))
    }

    /// Go's four heap values: allocated objects and bytes, retained objects and bytes.
    pub(crate) fn pprof_values(&self) -> [i64; 4] {
        [ALLOC_COUNT, ALLOC_BYTES, LIVE_COUNT, LIVE_BYTES]
            .map(|i| i64::try_from(round(self.est[i])).unwrap_or(i64::MAX))
    }

    /// Retained objects and bytes at the kept peak (the peak heap profile's two values).
    pub(crate) fn peak_pprof_values(&self) -> [i64; 2] {
        [PEAK_COUNT, PEAK_BYTES].map(|i| i64::try_from(round(self.est[i])).unwrap_or(i64::MAX))
    }

    /// Estimated resident and swapped bytes (0 when not measured): a heap profile's
    /// `resident_space` and `swapped_space` values.
    pub(crate) fn resident_pprof_values(&self) -> [i64; 2] {
        self.res.unwrap_or_default().map(|x| i64::try_from(round(x)).unwrap_or(i64::MAX))
    }

    /// Adds `other`'s figures, each estimate rounded first (as they print), so that entries
    /// summed from several stacks still add up to the same totals.
    pub(crate) fn add_rounded(&mut self, other: &Figures) {
        for (a, b) in self.est.iter_mut().zip(other.est) {
            *a = round(*a) as f64 + round(b) as f64;
        }
        for (a, b) in self.var.iter_mut().zip(other.var) {
            *a += b.max(0.0);
        }
        self.samples += other.samples;
        self.live_samples += other.live_samples;
        self.res = match (self.res, other.res) {
            (None, None) => None,
            (a, b) => {
                let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                Some([0, 1].map(|i| round(a[i]) as f64 + round(b[i]) as f64))
            }
        };
    }

    /// Estimated resident and swapped bytes (see `res`), rounded.
    pub(crate) fn residency(&self) -> Option<crate::callstack::Residency> {
        self.res.map(|[r, s]| crate::callstack::Residency {
            resident_bytes: round(r),
            swapped_bytes: round(s),
        })
    }

    /// The figures as a [`StackStats`] carries them (frames, stack and histograms empty).
    pub(crate) fn stats(&self) -> StackStats {
        StackStats {
            allocated_bytes: round(self.est[ALLOC_BYTES]),
            num_allocations: round(self.est[ALLOC_COUNT]),
            freed_bytes: round(self.est[FREED_BYTES]),
            num_frees: round(self.est[FREED_COUNT]),
            retained_bytes: round(self.est[LIVE_BYTES]),
            retained_count: round(self.est[LIVE_COUNT]),
            peak_retained_bytes: round(self.est[PEAK_BYTES]),
            peak_retained_count: round(self.est[PEAK_COUNT]),
            samples: self.samples,
            live_samples: self.live_samples,
            variance: crate::Variances {
                allocated_bytes: self.var[ALLOC_BYTES].max(0.0),
                num_allocations: self.var[ALLOC_COUNT].max(0.0),
                freed_bytes: self.var[FREED_BYTES].max(0.0),
                num_frees: self.var[FREED_COUNT].max(0.0),
                retained_bytes: self.var[LIVE_BYTES].max(0.0),
                retained_count: self.var[LIVE_COUNT].max(0.0),
                peak_retained_bytes: self.var[PEAK_BYTES].max(0.0),
                peak_retained_count: self.var[PEAK_COUNT].max(0.0),
            },
            frames: Vec::new(),
            lifetimes: MillisHistogram::new(),
            retained_age: MillisHistogram::new(),
            stack: StdCallstack::from_ips(&[]),
            spans: Vec::new(),
            residency: self.residency(),
        }
    }
}

/// One stack of a [`StackTable`]: its figures and where its frames are.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) fig: Figures,
    /// The first stack-table entry summed into it (see [`entry_key`]).
    entry: u64,
    /// The row's location indices, innermost first, are coded in `locs[start..start + len]`
    /// (see [`LocCodes`]).
    start: u32,
    len: u32,
    /// Index of its span path in `span_paths` (0: none).
    pub(crate) spans: u32,
}

impl Row {
    fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// The location indices of every row, one row after the other, each index in LEB128 ([`leb128`]: one byte
/// below 128, two below 16,384): a stack of 46 frames takes 46 to 92 bytes, not 184, which
/// kept a report of a million stacks under one and a half times the stack table's memory.
#[derive(Debug)]
struct LocCodes(ArenaVec<u8>);

impl LocCodes {
    fn new() -> Self {
        Self(ArenaVec::new_in(Arena))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn push(&mut self, l: u32) {
        leb128::push(&mut self.0, l);
    }

    /// The indices coded in `range`.
    fn decode(&self, range: std::ops::Range<usize>) -> leb128::Numbers<'_> {
        leb128::Numbers::new(self.0.get(range).unwrap_or(&[]))
    }
}

/// Every sampled stack at one moment: rows of figures, each stack as indices into one table of
/// locations (see the module docs).
#[derive(Debug)]
pub(crate) struct StackTable {
    rows: ArenaVec<Row>,
    locs: LocCodes,
    locations: Vec<Location>,
    /// Distinct span paths, outermost span first; entry 0 is the empty path.
    span_paths: Vec<Vec<SpanInfo>>,
    /// `(row, entry)` for each further stack-table entry summed into a row (a stack sampled
    /// on threads of several stripes).
    extra_entries: ArenaVec<(u32, u64)>,
    /// The histograms of every row, for a table made from [`StackStats`] (which bring their
    /// own); None for one taken from the engine, which is asked (see
    /// [`StackTable::histograms`]).
    stored_histograms: Option<Vec<Histograms>>,
}

/// The histograms of one stack: what [`StackTable::histograms`] reads for the stacks a
/// report lists.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Histograms {
    /// Lifetimes of the freed allocations (weighted counts).
    pub(crate) lifetimes: MillisHistogram,
    /// Age of the retained bytes (weighted by bytes).
    pub(crate) retained_age: MillisHistogram,
}

/// A key naming a stack-table entry by its stripe and its index there.
fn entry_key(stripe: usize, index: u32) -> u64 {
    (stripe as u64) << 32 | u64::from(index)
}

/// The pseudo-frame ending the stack of samples whose stack was not kept.
fn overflow_frame() -> Frame {
    Frame {
        ip: 0,
        function: "[stack table full: YING_MAX_STACKS]".into(),
        file: None,
        line: None,
        inlined: false,
        module: None,
    }
}

/// A row index that names no row.
pub(crate) const NO_ROW: u32 = u32::MAX;

pub(crate) type Build = BuildHasherDefault<AddrHasher>;

/// A map in the profiler's own heap.
type ArenaMap<K, V> = hashbrown::HashMap<K, V, Build, Arena>;

/// Builds the rows of a stack table from the stack table's entries, summing the entries of
/// one (stack, span path) from different stripes. It runs with a stripe's lock held, so all its
/// memory is in the profiler's own heap (`tables::arena`): growing it never calls the host's
/// allocator, whose lock a thread sampling in a signal handler (and waiting for the stripe's
/// lock) may hold.
struct Builder {
    rows: ArenaVec<Row>,
    locs: LocCodes,
    /// Distinct addresses; index 0 stands for the overflow pseudo-location.
    ips: ArenaVec<usize>,
    ip_index: ArenaMap<usize, u32>,
    /// Hash of (overflow, ips, spans) -> the last row with that hash; rows with equal hashes
    /// are chained through `next_same_hash`.
    by_hash: ArenaMap<u64, u32>,
    next_same_hash: ArenaVec<u32>,
    extra_entries: ArenaVec<(u32, u64)>,
    span_index: ArenaMap<SpanPath, u32>,
    raw_spans: ArenaVec<SpanPath>,
    /// The location of each stripe's address numbers (`NO_ROW`: not looked up yet).
    stripe_locs: [ArenaVec<u32>; STACK_STRIPES],
    /// The locations of the stack being added, and their code.
    scratch: ArenaVec<u32>,
    scratch_code: LocCodes,
    /// The peak epoch whose figures the rows take (0: no peak kept).
    peak_epoch: u32,
}

impl Builder {
    fn new() -> Self {
        let mut b = Self {
            rows: ArenaVec::new_in(Arena),
            locs: LocCodes::new(),
            ips: ArenaVec::new_in(Arena),
            ip_index: ArenaMap::with_hasher_in(Build::default(), Arena),
            by_hash: ArenaMap::with_hasher_in(Build::default(), Arena),
            next_same_hash: ArenaVec::new_in(Arena),
            extra_entries: ArenaVec::new_in(Arena),
            span_index: ArenaMap::with_hasher_in(Build::default(), Arena),
            raw_spans: ArenaVec::new_in(Arena),
            stripe_locs: [const { ArenaVec::new_in(Arena) }; STACK_STRIPES],
            scratch: ArenaVec::new_in(Arena),
            scratch_code: LocCodes::new(),
            peak_epoch: 0,
        };
        b.ips.push(0);
        b.raw_spans.push(SpanPath::default());
        b.span_index.insert(SpanPath::default(), 0);
        b
    }

    fn span_id(&mut self, spans: &SpanPath) -> u32 {
        if let Some(&i) = self.span_index.get(spans) {
            return i;
        }
        let i = self.raw_spans.len() as u32;
        self.raw_spans.push(*spans);
        self.span_index.insert(*spans, i);
        i
    }

    fn ip_id(&mut self, ip: usize) -> u32 {
        if let Some(&i) = self.ip_index.get(&ip) {
            return i;
        }
        let i = self.ips.len() as u32;
        self.ips.push(ip);
        self.ip_index.insert(ip, i);
        i
    }

    /// Whether row `r` is the stack of locations coded `code` (the overflow entry's when
    /// `overflow`) under `spans`. Equal codes, equal locations.
    fn is(&self, r: u32, overflow: bool, code: &[u8], spans: u32) -> bool {
        let row = &self.rows[r as usize];
        let row_code = &self.locs.0[row.range()];
        row.spans == spans && if overflow { row_code == [0] } else { row_code == code }
    }

    /// The location of number `id` of stripe `stripe` (see [`tables::EntryFrames`]): each
    /// distinct address of a stripe is looked up once, not once for each stack through it.
    fn loc_of(&mut self, stripe: usize, frames: EntryFrames<'_>, id: u32) -> u32 {
        let known = &mut self.stripe_locs[stripe % STACK_STRIPES];
        if known.len() <= id as usize {
            known.resize(id as usize + 1, NO_ROW);
        }
        if known[id as usize] == NO_ROW {
            let l = self.ip_id(frames.ip(id));
            self.stripe_locs[stripe % STACK_STRIPES][id as usize] = l;
        }
        self.stripe_locs[stripe % STACK_STRIPES][id as usize]
    }

    fn add(
        &mut self,
        stripe: usize,
        index: u32,
        e: &StackEntry,
        frames: EntryFrames<'_>,
        spans: &SpanPath,
    ) {
        if e.samples == 0 {
            return;
        }
        let overflow = index == 0;
        let spans = self.span_id(spans);
        let mut scratch = std::mem::replace(&mut self.scratch, ArenaVec::new_in(Arena));
        scratch.clear();
        if !overflow {
            for &id in frames.ids {
                let l = self.loc_of(stripe, frames, id);
                scratch.push(l);
            }
        }
        let mut code = std::mem::replace(&mut self.scratch_code, LocCodes::new());
        code.0.clear();
        for &l in scratch.iter() {
            code.push(l);
        }
        let mut h = AddrHasher::default();
        overflow.hash(&mut h);
        code.0.hash(&mut h);
        spans.hash(&mut h);
        let hash = h.finish();
        let head = self.by_hash.get(&hash).copied().unwrap_or(NO_ROW);
        let mut r = head;
        while r != NO_ROW && !self.is(r, overflow, &code.0, spans) {
            r = self.next_same_hash[r as usize];
        }
        let peak = e.peak.at(self.peak_epoch, e.live);
        let est = [
            e.alloc_bytes,
            e.alloc_count,
            e.freed_bytes,
            e.freed_count,
            e.live.bytes,
            e.live.count,
            peak.bytes,
            peak.count,
        ];
        let var = [
            e.alloc_var[0],
            e.alloc_var[1],
            e.alloc_var[0] - e.live.var[0],
            e.alloc_var[1] - e.live.var[1],
            e.live.var[0],
            e.live.var[1],
            peak.var[0],
            peak.var[1],
        ]
        .map(|v| v.max(0.0));
        if r == NO_ROW {
            r = self.rows.len() as u32;
            let start = self.locs.len() as u32;
            if overflow {
                self.locs.push(0);
            } else {
                self.locs.0.extend_from_slice(&code.0);
            }
            self.rows.push(Row {
                fig: Figures {
                    est,
                    var,
                    samples: e.samples,
                    live_samples: e.live_samples,
                    res: None,
                },
                entry: entry_key(stripe, index),
                start,
                len: self.locs.len() as u32 - start,
                spans,
            });
            self.next_same_hash.push(head);
            self.by_hash.insert(hash, r);
        } else {
            let fig = &mut self.rows[r as usize].fig;
            for (a, b) in fig.est.iter_mut().zip(est) {
                *a += b;
            }
            for (a, b) in fig.var.iter_mut().zip(var) {
                *a += b;
            }
            fig.samples += e.samples;
            fig.live_samples += e.live_samples;
            self.extra_entries.push((r, entry_key(stripe, index)));
        }
        self.scratch = scratch;
        self.scratch_code = code;
    }
}

/// Distinct stacks (and span paths) in the engine's table, the stripes' entries of one stack
/// counted once and the overflow entry not at all: the stripes merged as [`take`] merges them,
/// without symbolizing. The caller holds the re-entrancy guard.
pub(crate) fn distinct_stacks() -> usize {
    let mut b = Builder::new();
    tables::for_each_stack(|stripe, index, e, f, spans| b.add(stripe, index, e, f, spans));
    b.rows.iter().filter(|r| b.locs.0[r.range()] != [0]).count()
}

/// Takes the stack table of the engine now, with the kept peak its rows' figures at the peak
/// add up to (see the module docs), its locations symbolized. The caller holds the re-entrancy
/// guard.
pub(crate) fn take() -> (StackTable, Option<Peak>) {
    let (mut table, peak) = take_unsymbolized();
    if super::resident::enabled() {
        table.measure_residency();
    }
    let ips: Vec<usize> = table.locations.iter().skip(1).map(|l| l.ip).collect();
    let symbols = crate::symbols::symbolize::resolve_many(&ips);
    drop(ips);
    table.name_locations(|ip| symbols.get(&ip).cloned());
    (table, peak)
}

/// [`take`] without naming a frame: each location has its address only (no frames), as the
/// live file stores them (`report/live/`), to be named later, perhaps in another process. The
/// caller holds the re-entrancy guard.
pub(crate) fn take_unsymbolized() -> (StackTable, Option<Peak>) {
    let mut peak = crate::engine::peak::read();
    let mut b = Builder::new();
    b.peak_epoch = if peak.kept.is_some() { peak.epoch } else { 0 };
    // Counted first, so the big arrays are allocated once at their size: grown by doubling,
    // each would take up to twice that, and its old copy while it moves.
    let (mut entries, mut frames) = (0usize, 0usize);
    tables::for_each_entry(|_, _, e, _| {
        if e.samples > 0 {
            entries += 1;
            frames += e.depth().max(1);
        }
    });
    b.rows.reserve_exact(entries);
    b.next_same_hash.reserve_exact(entries);
    b.by_hash.reserve(entries);
    // A byte a frame while a stripe has fewer than 128 distinct addresses.
    b.locs.0.reserve(frames);
    tables::for_each_stack(|stripe, index, e, f, spans| b.add(stripe, index, e, f, spans));
    let Builder { mut rows, locs, ips, raw_spans, extra_entries, .. } = b;
    // A capture while the table was walked: the peak figures of the rows walked before it are
    // those of the peak before (see `peak`); read them again, all of the latest peak.
    for _ in 0..3 {
        if crate::engine::peak::epoch() == peak.epoch {
            break;
        }
        peak = crate::engine::peak::read();
        let epoch = if peak.kept.is_some() { peak.epoch } else { 0 };
        reread_peak(&mut rows, &extra_entries, epoch);
    }
    let locations = unnamed_locations(&ips);
    drop(ips);
    let span_paths = raw_spans.iter().map(crate::spans::resolve).collect();
    rows.shrink_to_fit();
    let mut locs = locs;
    locs.0.shrink_to_fit();
    let peak = Peak::from_read(&peak, rows.iter().map(|r| round(r.fig.est[PEAK_BYTES])).sum());
    let table =
        StackTable { rows, locs, locations, span_paths, extra_entries, stored_histograms: None };
    (table, peak)
}

/// The locations of the addresses `ips` (index 0: the overflow pseudo-location), with no
/// frames yet but the overflow's.
pub(crate) fn unnamed_locations(ips: &[usize]) -> Vec<Location> {
    let empty: Arc<[Frame]> = Arc::from(Vec::new());
    ips.iter()
        .enumerate()
        .map(|(i, &ip)| Location {
            ip,
            frames: if i == 0 { Arc::from(vec![overflow_frame()]) } else { empty.clone() },
        })
        .collect()
}

/// One row of a table being rebuilt from its parts (a live file's, see `report/live/`).
pub(crate) struct RawRow {
    pub(crate) fig: Figures,
    /// Location indices, innermost first.
    pub(crate) locs: Vec<u32>,
    /// Index of its span path.
    pub(crate) spans: u32,
    pub(crate) histograms: Histograms,
}

/// Row index of each stack-table entry summed into a row (its key, [`entry_key`]).
fn rows_of_entries(
    rows: &ArenaVec<Row>,
    extra_entries: &ArenaVec<(u32, u64)>,
) -> ArenaMap<u64, u32> {
    let mut row_of: ArenaMap<u64, u32> = ArenaMap::with_hasher_in(Build::default(), Arena);
    row_of.reserve(rows.len() + extra_entries.len());
    for (r, row) in rows.iter().enumerate() {
        row_of.insert(row.entry, r as u32);
    }
    for &(r, entry) in extra_entries.iter() {
        row_of.insert(entry, r);
    }
    row_of
}

impl StackTable {
    /// Gives every row its resident and swapped bytes (see `resident`): the pagemap read for
    /// the live sampled blocks, each block's figures added to the row of its stack. Rows left
    /// unmeasured (None) when the pagemap cannot be read. The caller holds the re-entrancy
    /// guard.
    pub(crate) fn measure_residency(&mut self) {
        let row_of = rows_of_entries(&self.rows, &self.extra_entries);
        let mut res: ArenaVec<[f64; 2]> = ArenaVec::with_capacity_in(self.rows.len(), Arena);
        res.resize(self.rows.len(), [0.0; 2]);
        let ok = super::resident::measure_live(|stack, r, s| {
            let (stripe, index) = tables::stripe_and_index(stack);
            if let Some(&row) = row_of.get(&entry_key(stripe, index)) {
                let v = &mut res[row as usize];
                v[0] += r;
                v[1] += s;
            }
        });
        if ok {
            for (row, v) in self.rows.iter_mut().zip(res.iter()) {
                row.fig.res = Some(*v);
            }
        }
    }
}

/// Sets every row's figures at the peak to those of `epoch`, read from the table again.
fn reread_peak(rows: &mut ArenaVec<Row>, extra_entries: &ArenaVec<(u32, u64)>, epoch: u32) {
    let row_of = rows_of_entries(rows, extra_entries);
    for row in rows.iter_mut() {
        row.fig.est[PEAK_BYTES] = 0.0;
        row.fig.est[PEAK_COUNT] = 0.0;
        row.fig.var[PEAK_BYTES] = 0.0;
        row.fig.var[PEAK_COUNT] = 0.0;
    }
    tables::for_each_entry(|stripe, index, e, _| {
        if let Some(row) =
            row_of.get(&entry_key(stripe, index)).and_then(|&r| rows.get_mut(r as usize))
        {
            let peak = e.peak.at(epoch, e.live);
            row.fig.est[PEAK_BYTES] += peak.bytes;
            row.fig.est[PEAK_COUNT] += peak.count;
            row.fig.var[PEAK_BYTES] += peak.var[0].max(0.0);
            row.fig.var[PEAK_COUNT] += peak.var[1].max(0.0);
        }
    });
}

impl StackTable {
    /// The table of `stacks` (a [`crate::Snapshot`]'s, which someone built or took). A stack's
    /// frames become one location per address they pass through: a run of inlined frames and
    /// the frame they are inlined into.
    pub(crate) fn from_stacks(stacks: &[StackStats]) -> Self {
        let mut rows = ArenaVec::with_capacity_in(stacks.len(), Arena);
        let mut locs = LocCodes::new();
        let mut locations: Vec<Location> = Vec::new();
        let mut by_ip: HashMap<usize, Vec<u32>, Build> = HashMap::default();
        let mut span_paths: Vec<Vec<SpanInfo>> = vec![Vec::new()];
        for s in stacks {
            let start = locs.len() as u32;
            // An address's frames end with its one frame that is not inlined; the next frame
            // starts another location even at the same address (recursion).
            for group in s.frames.chunk_by(|a, b| a.ip == b.ip && a.inlined) {
                let ip = group[0].ip;
                let known = by_ip.entry(ip).or_default();
                let l = match known.iter().find(|&&l| *locations[l as usize].frames == *group) {
                    Some(&l) => l,
                    None => {
                        let l = locations.len() as u32;
                        locations.push(Location { ip, frames: Arc::from(group) });
                        known.push(l);
                        l
                    }
                };
                locs.push(l);
            }
            let spans = match span_paths.iter().position(|p| *p == s.spans) {
                Some(i) => i as u32,
                None => {
                    span_paths.push(s.spans.clone());
                    span_paths.len() as u32 - 1
                }
            };
            let f = |v: u64| v as f64;
            rows.push(Row {
                fig: Figures {
                    est: [
                        f(s.allocated_bytes),
                        f(s.num_allocations),
                        f(s.freed_bytes),
                        f(s.num_frees),
                        f(s.retained_bytes),
                        f(s.retained_count),
                        f(s.peak_retained_bytes),
                        f(s.peak_retained_count),
                    ],
                    var: [
                        s.variance.allocated_bytes,
                        s.variance.num_allocations,
                        s.variance.freed_bytes,
                        s.variance.num_frees,
                        s.variance.retained_bytes,
                        s.variance.retained_count,
                        s.variance.peak_retained_bytes,
                        s.variance.peak_retained_count,
                    ],
                    samples: s.samples,
                    live_samples: s.live_samples,
                    res: s.residency.map(|r| [r.resident_bytes as f64, r.swapped_bytes as f64]),
                },
                entry: 0,
                start,
                len: locs.len() as u32 - start,
                spans,
            });
        }
        Self {
            rows,
            locs,
            locations,
            span_paths,
            extra_entries: ArenaVec::new_in(Arena),
            stored_histograms: Some(
                stacks
                    .iter()
                    .map(|s| Histograms { lifetimes: s.lifetimes, retained_age: s.retained_age })
                    .collect(),
            ),
        }
    }

    /// The table of `rows` over `locations` (index 0 the overflow pseudo-location) and
    /// `span_paths` (index 0 the empty path), as [`StackTable::raw_row`] gives them: the
    /// inverse of that, for a table stored in a file. A location index out of range is
    /// dropped from its row, a span index out of range becomes the empty path.
    pub(crate) fn from_raw(
        rows: Vec<RawRow>,
        locations: Vec<Location>,
        mut span_paths: Vec<Vec<SpanInfo>>,
    ) -> Self {
        if span_paths.is_empty() {
            span_paths.push(Vec::new());
        }
        let mut out_rows = ArenaVec::with_capacity_in(rows.len(), Arena);
        let mut locs = LocCodes::new();
        let mut histograms = Vec::with_capacity(rows.len());
        for r in rows {
            let start = locs.len() as u32;
            for l in r.locs.into_iter().filter(|&l| (l as usize) < locations.len()) {
                locs.push(l);
            }
            let spans = if (r.spans as usize) < span_paths.len() { r.spans } else { 0 };
            out_rows.push(Row {
                fig: r.fig,
                entry: 0,
                start,
                len: locs.len() as u32 - start,
                spans,
            });
            histograms.push(r.histograms);
        }
        Self {
            rows: out_rows,
            locs,
            locations,
            span_paths,
            extra_entries: ArenaVec::new_in(Arena),
            stored_histograms: Some(histograms),
        }
    }

    /// The histograms of every row (in one pass over the engine's tables for a table taken
    /// from it), for [`StackTable::raw_row`].
    pub(crate) fn all_histograms(&self) -> Vec<Histograms> {
        self.histograms(Some, self.rows.len())
    }

    /// Row `r` as [`StackTable::from_raw`] takes it, with its histograms `histograms`.
    pub(crate) fn raw_row(&self, r: u32, histograms: Histograms) -> RawRow {
        let row = &self.rows[r as usize];
        RawRow {
            fig: row.fig,
            locs: self.locs.decode(row.range()).collect(),
            spans: row.spans,
            histograms,
        }
    }

    /// The distinct span paths (index 0 the empty path), as rows name them.
    pub(crate) fn span_paths(&self) -> &[Vec<SpanInfo>] {
        &self.span_paths
    }

    /// Gives every location its frames from `name` (an address's frames, innermost first).
    pub(crate) fn name_locations(&mut self, name: impl Fn(usize) -> Option<Arc<[Frame]>>) {
        for l in self.locations.iter_mut().skip(1) {
            if let Some(f) = name(l.ip) {
                l.frames = f;
            }
        }
    }

    /// The histograms of `slots` groups of rows: `slot_of(row)` names the group a row's
    /// histograms join, if any (an entry of a report is one or more rows printed alike). For a
    /// table taken from the engine they are read from the engine now, in one pass over the
    /// stack table and one over the live blocks: a report needs them for the few entries it
    /// lists, and keeping two 88-byte histograms for every stack would double what a report
    /// costs. So they describe the moment they are read, a little after the figures (the time
    /// it took to symbolize and rank).
    pub(crate) fn histograms(
        &self,
        slot_of: impl Fn(u32) -> Option<u32>,
        slots: usize,
    ) -> Vec<Histograms> {
        let mut out = vec![Histograms::default(); slots];
        if let Some(stored) = &self.stored_histograms {
            for (r, h) in stored.iter().enumerate() {
                if let Some(slot) = slot_of(r as u32) {
                    out[slot as usize].lifetimes.merge(&h.lifetimes);
                    out[slot as usize].retained_age.merge(&h.retained_age);
                }
            }
            return out;
        }
        // (engine entry, slot), sorted by entry: 12 bytes a row listed, looked up by binary
        // search (an entry of a report may be most of the table's rows).
        let mut want: Vec<(u64, u32)> = Vec::new();
        for (r, row) in self.rows.iter().enumerate() {
            if let Some(slot) = slot_of(r as u32) {
                want.push((row.entry, slot));
            }
        }
        for &(r, entry) in &self.extra_entries {
            if let Some(slot) = slot_of(r) {
                want.push((entry, slot));
            }
        }
        want.sort_unstable();
        let find = |key: u64| {
            want.binary_search_by_key(&key, |&(k, _)| k).ok().map(|i| want[i].1 as usize)
        };
        tables::for_each_entry(|stripe, index, _, lifetimes| {
            if let Some(slot) = find(entry_key(stripe, index)) {
                out[slot].lifetimes.merge(lifetimes);
            }
        });
        let now = crate::sys::clock::now_ns();
        tables::for_each_live(|r| {
            let (stripe, index) = tables::stripe_and_index(r.stack);
            if let Some(slot) = find(entry_key(stripe, index)) {
                let age_ms = now.saturating_sub(r.born_ns) as f64 / 1e6;
                out[slot].retained_age.add_weighted(age_ms, r.weight.bytes);
            }
        });
        out
    }

    /// The lines row `r` prints in `view`.
    pub(crate) fn shown(&self, r: u32, view: FrameView) -> Vec<ShownFrame<'_>> {
        crate::callstack::shown_frames(self.frames_of(r), view)
    }

    /// [`StackTable::shown`] into `out`, with the facts of each location's frames from `facts`
    /// ([`StackTable::frame_facts`]), working in `scratch`.
    pub(crate) fn shown_into<'a>(
        &'a self,
        r: u32,
        view: FrameView,
        facts: &LocationFacts<'a>,
        scratch: &mut ShownScratch<'a>,
        out: &mut Vec<ShownFrame<'a>>,
    ) {
        let row = &self.rows[r as usize];
        scratch.clear(view);
        for l in self.locs.decode(row.range()) {
            for &f in facts.of(l) {
                scratch.push(f);
            }
        }
        crate::callstack::shown_frames_of_scratch(view, scratch, out);
    }

    /// Every location's frames with their facts, judged once (see
    /// [`StackTable::shown_into`]); frames of one function name share its number, frames
    /// that print the same line share theirs.
    pub(crate) fn frame_facts(&self) -> LocationFacts<'_> {
        let mut functions: HashMap<&str, u32> = HashMap::new();
        let mut lines: HashMap<LineText<'_>, u32> = HashMap::new();
        let frames = self.locations.iter().map(|l| l.frames.len()).sum();
        let mut out = LocationFacts {
            frames: Vec::with_capacity(frames),
            start: Vec::with_capacity(self.locations.len() + 1),
        };
        for l in &self.locations {
            out.start.push(out.frames.len() as u32);
            for f in l.frames.iter() {
                let next = functions.len() as u32 + 1;
                let function = *functions.entry(&*f.function).or_insert(next);
                let next = lines.len() as u32 + 1;
                let line = *lines.entry(line_text(f)).or_insert(next);
                out.frames.push((f, FrameFacts { function, line, ..FrameFacts::of(f) }));
            }
        }
        out.start.push(out.frames.len() as u32);
        out
    }

    /// Number of stacks.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Row `r`.
    pub(crate) fn row(&self, r: u32) -> &Row {
        &self.rows[r as usize]
    }

    /// The locations of row `r`, innermost first.
    pub(crate) fn locations_of(&self, r: u32) -> impl Iterator<Item = &Location> {
        let row = &self.rows[r as usize];
        self.locs.decode(row.range()).map(|l| &self.locations[l as usize])
    }

    /// The frames of row `r`, innermost first, inlined frames expanded.
    pub(crate) fn frames_of(&self, r: u32) -> impl Iterator<Item = &Frame> {
        self.locations_of(r).flat_map(|l| l.frames.iter())
    }

    /// The span path of row `r`, outermost first.
    pub(crate) fn spans_of(&self, r: u32) -> &[SpanInfo] {
        &self.span_paths[self.rows[r as usize].spans as usize]
    }

    /// The raw addresses of row `r` (the overflow pseudo-location has none).
    fn ips_of(&self, r: u32) -> impl Iterator<Item = u64> {
        self.locations_of(r).map(|l| l.ip as u64).filter(|&ip| ip != 0)
    }

    /// Location `i` of the location table, and how many there are.
    pub(crate) fn locations(&self) -> &[Location] {
        &self.locations
    }

    /// The location indices of row `r`.
    pub(crate) fn location_ids_of(&self, r: u32) -> leb128::Numbers<'_> {
        self.locs.decode(self.rows[r as usize].range())
    }

    /// Rows `a` and `b` compared as a ranking breaks the ties of their figures: by frame
    /// names, innermost first, then addresses, then span names.
    pub(crate) fn cmp_ties(&self, a: u32, b: u32) -> std::cmp::Ordering {
        self.cmp_function_names(a, b).then_with(|| self.ips_of(a).cmp(self.ips_of(b))).then_with(
            || {
                let sa = self.spans_of(a).iter().map(|s| s.name);
                sa.cmp(self.spans_of(b).iter().map(|s| s.name))
            },
        )
    }

    /// Rows `a` and `b` compared by the names of their frames, innermost first (as
    /// `Snapshot::top_k` compares stacks). The locations both start with are skipped unread:
    /// ranking 100,000 stacks that tie on their bytes compares millions of names otherwise.
    fn cmp_function_names(&self, a: u32, b: u32) -> std::cmp::Ordering {
        let (la, lb) = (self.location_ids_of(a), self.location_ids_of(b));
        let same = la.clone().zip(lb.clone()).take_while(|(x, y)| x == y).count();
        let mut na = self.names(la.skip(same));
        let mut nb = self.names(lb.skip(same));
        loop {
            match (na.next(), nb.next()) {
                (None, None) => return std::cmp::Ordering::Equal,
                (None, Some(_)) => return std::cmp::Ordering::Less,
                (Some(_), None) => return std::cmp::Ordering::Greater,
                (Some(x), Some(y)) if Arc::ptr_eq(x, y) => {}
                (Some(x), Some(y)) => match x.cmp(y) {
                    std::cmp::Ordering::Equal => {}
                    other => return other,
                },
            }
        }
    }

    /// The function names of the frames at locations `locs`, in order.
    fn names<'a>(
        &'a self,
        locs: impl Iterator<Item = u32> + 'a,
    ) -> impl Iterator<Item = &'a Arc<str>> {
        locs.flat_map(|l| self.locations[l as usize].frames.iter()).map(|f| &f.function)
    }

    /// Row `r`'s stack with figures `fig` and histograms `h` as a [`StackStats`] (its frames
    /// copied out of the shared locations).
    pub(crate) fn stack_stats(&self, r: u32, fig: &Figures, h: &Histograms) -> StackStats {
        let ips: Vec<usize> = self.ips_of(r).map(|ip| ip as usize).collect();
        StackStats {
            frames: self.frames_of(r).cloned().collect(),
            lifetimes: h.lifetimes,
            retained_age: h.retained_age,
            stack: StdCallstack::from_ips(&ips),
            spans: self.spans_of(r).to_vec(),
            ..fig.stats()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(samples: u64, bytes: f64) -> StackEntry {
        let mut e = StackEntry::new();
        e.samples = samples;
        e.alloc_bytes = bytes;
        e
    }

    /// Adds the stack `ips` as stripe `stripe` of the engine gives it: as numbers into the
    /// stripe's distinct addresses, which each stripe numbers in its own order.
    fn add(b: &mut Builder, stripe: usize, index: u32, e: &StackEntry, ips: &[usize]) {
        let dict: &[usize] = if stripe == 1 { &[3, 2, 1] } else { &[1, 2, 3] };
        let ids: Vec<u32> =
            ips.iter().map(|ip| dict.iter().position(|d| d == ip).unwrap() as u32).collect();
        b.add(stripe, index, e, EntryFrames { ids: &ids, ips: dict }, &SpanPath::default());
    }

    /// A stack sampled on threads of two stripes is one row with the sums of both entries;
    /// each stripe's overflow entry (index 0) joins the others, not a real stack that happens
    /// to be empty.
    #[test]
    fn a_row_is_the_size_the_module_docs_and_the_readme_count() {
        assert_eq!(std::mem::size_of::<Row>(), 192, "update `What it costs` and the README");
    }

    #[test]
    fn one_stack_from_two_stripes_is_one_row() {
        let mut b = Builder::new();
        add(&mut b, 0, 0, &entry(1, 10.0), &[]);
        add(&mut b, 0, 1, &entry(2, 100.0), &[1, 2]);
        add(&mut b, 1, 0, &entry(3, 30.0), &[]);
        add(&mut b, 1, 1, &entry(5, 50.0), &[1, 2]);
        add(&mut b, 1, 2, &entry(7, 70.0), &[]);
        add(&mut b, 2, 1, &entry(0, 0.0), &[3]);
        assert_eq!(b.rows.len(), 3, "[1, 2], the overflow entries, the empty stack");
        let row = |locs: &[u32]| {
            b.rows.iter().find(|r| b.locs.decode(r.range()).eq(locs.iter().copied())).unwrap()
        };
        let (one, two) = (b.ip_index[&1], b.ip_index[&2]);
        let s = row(&[one, two]);
        assert_eq!((s.fig.samples, s.fig.est[ALLOC_BYTES]), (7, 150.0));
        assert_eq!(
            b.extra_entries.iter().filter(|&&(r, _)| b.rows[r as usize].entry == s.entry).count(),
            1
        );
        let overflow = row(&[0]);
        assert_eq!(overflow.fig.samples, 4);
        assert_eq!(row(&[]).fig.samples, 7, "a real empty stack is not the overflow entry");
        assert!(!b.ip_index.contains_key(&3), "an entry with no sample makes no row");
    }
}
