//! Consistent snapshots of everything the profiler knows, for reports and the stats API.
//!
//! # Two forms
//!
//! A `CompactSnapshot` is what reports are written from. It is taken under the re-entrancy
//! guard (its memory is the profiler's) by walking the stack table in place, each stripe under
//! its own short lock hold, copying nothing but figures: the entries of one stack in different
//! stripes are summed into one row, and a row holds its stack as 4-byte indices into one table
//! of *locations* (one per distinct address, with its symbolized frames shared with the symbol
//! cache), so a deep stack costs 4 bytes a frame and no name is copied. The lifetime and age
//! histograms are read later, for the rows a report lists (`CompactSnapshot::histograms`).
//!
//! A [`Snapshot`] is the public form: every stack as a [`StackStats`] with its own frames and
//! histograms. It is built from a compact snapshot *without* the guard: it is handed to the
//! caller, so its memory is the program's and is counted as such when it is later freed. Under
//! the guard again the compact snapshot is dropped. Memory allocated as the profiler's is thus
//! always freed as the profiler's.
//!
//! # What a report costs
//!
//! A compact snapshot of `S` stacks of `F` frames on average takes about `S * (110 + 4 * F)`
//! bytes: a 104-byte row of figures (its peak figures included), the frame indices, and while the stripes are merged a
//! hash index of about 20 bytes a stack (the arrays are counted first and allocated once, at
//! their size). The location table is a few hundred bytes per distinct address. The outputs
//! then add a bounded amount, about 8 MiB with the symbolization they need: the ranking is
//! 4 bytes a stack, the text report materialises its top K stacks only, the folded stacks and
//! the flamegraph 2,000 stacks at most, and the pprof profile is streamed to its file one
//! sample at a time (see [`crate::report::pprof`]). Measured: 92,137 stacks of about 46 frames,
//! 27.5 MiB at the peak (BENCHMARKS.md); the README's *Limits* section gives the formula.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use std::time::SystemTime;

use crate::callstack::{Frame, FrameView, Measurement, ShownFrame, StackStats, StdCallstack};
use crate::engine::histogram::MillisHistogram;
use crate::engine::hooks::Host;
use crate::engine::tables::arena::{Arena, ArenaVec};
use crate::engine::tables::{self, AddrHasher, Frames, StackEntry};
use crate::engine::totals::{self, Totals};
use crate::spans::{SpanInfo, SpanPath};

pub use crate::engine::peak::Peak;

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

/// A refused giant allocation (`YING_MAX_ALLOC_BYTES`) and the stack that asked for it,
/// named at snapshot time (the refusal itself only prints raw frames; see the README).
#[derive(Debug, Clone)]
pub struct GiantRefusal {
    /// The refusal's number in the process, from 1 (it prints as `refusal #N`).
    pub number: u64,
    /// Bytes requested.
    pub size: u64,
    /// The requesting stack, innermost first, inlined frames expanded.
    pub frames: Vec<crate::callstack::Frame>,
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

/// The other measure: the first tie-breaker of a ranking by `m`.
fn other(m: Measurement) -> Measurement {
    match m {
        Measurement::AllocatedBytes => Measurement::RetainedBytes,
        Measurement::RetainedBytes => Measurement::AllocatedBytes,
        Measurement::RetainedBytesAtPeak => Measurement::RetainedBytes,
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

fn round(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 { x.round() as u64 } else { 0 }
}

/// One distinct address and its frames (innermost first), shared by every stack through it.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub(crate) ip: usize,
    pub(crate) frames: Arc<[Frame]>,
}

/// Indices of a row's estimates.
const ALLOC_BYTES: usize = 0;
const ALLOC_COUNT: usize = 1;
const FREED_BYTES: usize = 2;
const FREED_COUNT: usize = 3;
const LIVE_BYTES: usize = 4;
const LIVE_COUNT: usize = 5;
/// Retained bytes and count at the kept peak.
const PEAK_BYTES: usize = 6;
const PEAK_COUNT: usize = 7;

/// One stack of a [`CompactSnapshot`]: the figures of a [`StackStats`] and where its frames are.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Unrounded estimates (sums over the stripes), see the `ALLOC_BYTES`... indices.
    est: [f64; 8],
    pub(crate) samples: u64,
    pub(crate) live_samples: u64,
    /// The first stack-table entry summed into it (see [`entry_key`]).
    entry: u64,
    /// The row's location indices are `locs[start..start + len]`, innermost first.
    start: u32,
    len: u32,
    /// Index of its span path in `span_paths` (0: none).
    spans: u32,
}

impl Row {
    /// The figure that `m` ranks by.
    pub(crate) fn measure(&self, m: Measurement) -> u64 {
        match m {
            Measurement::AllocatedBytes => round(self.est[ALLOC_BYTES]),
            Measurement::RetainedBytes => round(self.est[LIVE_BYTES]),
            Measurement::RetainedBytesAtPeak => round(self.est[PEAK_BYTES]),
        }
    }

    fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
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
}

/// The report form of a snapshot (see the module docs): rows of figures, each stack as indices
/// into one table of locations.
#[derive(Debug)]
pub(crate) struct CompactSnapshot {
    pub(crate) taken_at: SystemTime,
    /// Read before the snapshot was taken: `profiler_bytes` is what the profiler held before
    /// this report.
    pub(crate) totals: Totals,
    pub(crate) sample_interval: u64,
    pub(crate) unit: crate::engine::sampler::ByteUnit,
    pub(crate) live_samples: u64,
    pub(crate) dropped_samples: u64,
    pub(crate) address_conflicts: u64,
    pub(crate) giant_refused: u64,
    pub(crate) giant_refusals: Vec<GiantRefusal>,
    pub(crate) symbol_cache_entries: u64,
    pub(crate) peak: Option<Peak>,
    /// Stacks sampled: the rows before [`CompactSnapshot::merge_printed`] merged those printed
    /// alike.
    pub(crate) stacks_sampled: usize,
    rows: ArenaVec<Row>,
    locs: ArenaVec<u32>,
    locations: Vec<Location>,
    /// Distinct span paths, outermost span first; entry 0 is the empty path.
    span_paths: Vec<Vec<SpanInfo>>,
    /// `(row, entry)` for each further stack-table entry summed into a row (a stack sampled
    /// on threads of several stripes).
    extra_entries: ArenaVec<(u32, u64)>,
    /// The histograms of every row, for a snapshot made from [`StackStats`] (which bring
    /// their own); None for one taken from the tables, which are asked (see
    /// [`CompactSnapshot::histograms`]).
    stored_histograms: Option<Vec<Histograms>>,
}

/// The histograms of one stack: what [`CompactSnapshot::histograms`] reads for the stacks a
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
const NO_ROW: u32 = u32::MAX;

type Build = BuildHasherDefault<AddrHasher>;

/// A map in the profiler's own heap.
type ArenaMap<K, V> = hashbrown::HashMap<K, V, Build, Arena>;

/// Builds the rows of a compact snapshot from the stack table's entries, summing the entries of
/// one (stack, span path) from different stripes. It runs with a stripe's lock held, so all its
/// memory is in the profiler's own heap (`tables::arena`): growing it never calls the host's
/// allocator, whose lock a thread sampling in a signal handler (and waiting for the stripe's
/// lock) may hold.
struct Builder {
    rows: ArenaVec<Row>,
    locs: ArenaVec<u32>,
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
    /// The peak epoch whose figures the rows take (0: no peak kept).
    peak_epoch: u32,
}

impl Builder {
    fn new() -> Self {
        let mut b = Self {
            rows: ArenaVec::new_in(Arena),
            locs: ArenaVec::new_in(Arena),
            ips: ArenaVec::new_in(Arena),
            ip_index: ArenaMap::with_hasher_in(Build::default(), Arena),
            by_hash: ArenaMap::with_hasher_in(Build::default(), Arena),
            next_same_hash: ArenaVec::new_in(Arena),
            extra_entries: ArenaVec::new_in(Arena),
            span_index: ArenaMap::with_hasher_in(Build::default(), Arena),
            raw_spans: ArenaVec::new_in(Arena),
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

    /// Whether row `r` is the stack `ips` (the overflow entry's when `overflow`) under `spans`.
    fn is(&self, r: u32, overflow: bool, ips: &[usize], spans: u32) -> bool {
        let row = &self.rows[r as usize];
        let locs = &self.locs[row.range()];
        row.spans == spans
            && if overflow {
                locs == [0]
            } else {
                locs.len() == ips.len()
                    && locs.iter().zip(ips).all(|(&l, &ip)| l != 0 && self.ips[l as usize] == ip)
            }
    }

    fn add(&mut self, stripe: usize, index: u32, e: &StackEntry<Frames>, ips: &[usize]) {
        if e.samples == 0 {
            return;
        }
        let overflow = index == 0;
        let spans = self.span_id(&e.spans);
        let mut h = AddrHasher::default();
        overflow.hash(&mut h);
        ips.hash(&mut h);
        spans.hash(&mut h);
        let hash = h.finish();
        let head = self.by_hash.get(&hash).copied().unwrap_or(NO_ROW);
        let mut r = head;
        while r != NO_ROW && !self.is(r, overflow, ips, spans) {
            r = self.next_same_hash[r as usize];
        }
        let (peak_bytes, peak_count) = e.peak.at(self.peak_epoch, e.live_bytes, e.live_count);
        let est = [
            e.alloc_bytes,
            e.alloc_count,
            e.freed_bytes,
            e.freed_count,
            e.live_bytes,
            e.live_count,
            peak_bytes,
            peak_count,
        ];
        if r == NO_ROW {
            r = self.rows.len() as u32;
            let start = self.locs.len() as u32;
            if overflow {
                self.locs.push(0);
            } else {
                for &ip in ips.iter() {
                    let l = self.ip_id(ip);
                    self.locs.push(l);
                }
            }
            self.rows.push(Row {
                est,
                samples: e.samples,
                live_samples: e.live_samples,
                entry: entry_key(stripe, index),
                start,
                len: self.locs.len() as u32 - start,
                spans,
            });
            self.next_same_hash.push(head);
            self.by_hash.insert(hash, r);
        } else {
            let row = &mut self.rows[r as usize];
            for (a, b) in row.est.iter_mut().zip(est) {
                *a += b;
            }
            row.samples += e.samples;
            row.live_samples += e.live_samples;
            self.extra_entries.push((r, entry_key(stripe, index)));
        }
    }
}

/// The kept giant refusals (see `giant`), named. The caller holds the re-entrancy guard.
fn named_refusals() -> Vec<GiantRefusal> {
    let refused = crate::engine::giant::recent();
    if refused.is_empty() {
        return Vec::new();
    }
    let mut ips: Vec<usize> = refused.iter().flat_map(|r| r.ips.iter().copied()).collect();
    ips.sort_unstable();
    ips.dedup();
    let symbols = crate::symbols::symbolize::resolve_many(&ips);
    refused
        .iter()
        .map(|r| GiantRefusal {
            number: r.number,
            size: r.size,
            frames: r
                .ips
                .iter()
                .filter_map(|ip| symbols.get(ip))
                .flat_map(|fs| fs.iter().cloned())
                .collect(),
        })
        .collect()
}

/// Takes a compact snapshot (see the module docs). The caller holds the re-entrancy guard.
pub(crate) fn take_compact(
    sample_interval: u64,
    unit: crate::engine::sampler::ByteUnit,
) -> CompactSnapshot {
    let totals = totals::read();
    let giant_refusals = named_refusals();
    let mut peak = crate::engine::peak::read();
    let mut b = Builder::new();
    b.peak_epoch = if peak.kept.is_some() { peak.epoch } else { 0 };
    // Counted first, so the big arrays are allocated once at their size: grown by doubling,
    // each would take up to twice that, and its old copy while it moves.
    let (mut entries, mut frames) = (0usize, 0usize);
    tables::for_each_stack(|_, _, e, ips| {
        if e.samples > 0 {
            entries += 1;
            frames += ips.len().max(1);
        }
    });
    b.rows.reserve_exact(entries);
    b.next_same_hash.reserve_exact(entries);
    b.by_hash.reserve(entries);
    b.locs.reserve_exact(frames);
    tables::for_each_stack(|stripe, index, e, ips| b.add(stripe, index, e, ips));
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
    let live_samples = tables::live_len() as u64;
    let symbols = crate::symbols::symbolize::resolve_many(ips.get(1..).unwrap_or(&[]));
    let empty: Arc<[Frame]> = Arc::from(Vec::new());
    let locations: Vec<Location> = ips
        .iter()
        .enumerate()
        .map(|(i, &ip)| Location {
            ip,
            frames: if i == 0 {
                Arc::from(vec![overflow_frame()])
            } else {
                symbols.get(&ip).cloned().unwrap_or_else(|| empty.clone())
            },
        })
        .collect();
    drop(symbols);
    drop(ips);
    let span_paths = raw_spans.iter().map(crate::spans::resolve).collect();
    rows.shrink_to_fit();
    let mut locs = locs;
    locs.shrink_to_fit();
    CompactSnapshot {
        taken_at: SystemTime::now(),
        totals,
        sample_interval,
        unit,
        live_samples,
        dropped_samples: tables::DROPPED_SAMPLES.load(std::sync::atomic::Ordering::Relaxed),
        address_conflicts: tables::ADDRESS_CONFLICTS.load(std::sync::atomic::Ordering::Relaxed),
        giant_refused: tables::GIANT_REFUSED.load(std::sync::atomic::Ordering::Relaxed),
        giant_refusals,
        symbol_cache_entries: crate::symbols::symbolize::cache_len() as u64,
        peak: Peak::from_read(&peak, rows.iter().map(|r| round(r.est[PEAK_BYTES])).sum()),
        stacks_sampled: rows.len(),
        rows,
        locs,
        locations,
        span_paths,
        extra_entries,
        stored_histograms: None,
    }
}

/// Sets every row's figures at the peak to those of `epoch`, read from the table again.
fn reread_peak(rows: &mut ArenaVec<Row>, extra_entries: &ArenaVec<(u32, u64)>, epoch: u32) {
    let mut row_of: ArenaMap<u64, u32> = ArenaMap::with_hasher_in(Build::default(), Arena);
    row_of.reserve(rows.len() + extra_entries.len());
    for (r, row) in rows.iter_mut().enumerate() {
        row.est[PEAK_BYTES] = 0.0;
        row.est[PEAK_COUNT] = 0.0;
        row_of.insert(row.entry, r as u32);
    }
    for &(r, entry) in extra_entries.iter() {
        row_of.insert(entry, r);
    }
    tables::for_each_stack(|stripe, index, e, _| {
        if let Some(row) =
            row_of.get(&entry_key(stripe, index)).and_then(|&r| rows.get_mut(r as usize))
        {
            let (bytes, count) = e.peak.at(epoch, e.live_bytes, e.live_count);
            row.est[PEAK_BYTES] += bytes;
            row.est[PEAK_COUNT] += count;
        }
    });
}

impl CompactSnapshot {
    /// The form of a [`Snapshot`] someone built or took (the public report functions take
    /// those). A stack's frames become one location per address they pass through: a run of
    /// inlined frames and the frame they are inlined into.
    pub(crate) fn from_snapshot(snap: &Snapshot) -> Self {
        let mut out = Self::from_stacks(&snap.stacks);
        out.taken_at = snap.taken_at;
        out.totals = snap.totals;
        out.sample_interval = snap.sample_interval;
        out.live_samples = snap.live_samples;
        out.dropped_samples = snap.dropped_samples;
        out.address_conflicts = snap.address_conflicts;
        out.giant_refused = snap.giant_refused;
        out.giant_refusals = snap.giant_refusals.clone();
        out.unit = snap.unit;
        out.symbol_cache_entries = snap.symbol_cache_entries;
        out.peak = snap.peak;
        out
    }

    /// A snapshot of `stacks` alone (header figures zero).
    pub(crate) fn from_stacks(stacks: &[StackStats]) -> Self {
        let mut rows = ArenaVec::with_capacity_in(stacks.len(), Arena);
        let mut locs = ArenaVec::new_in(Arena);
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
                samples: s.samples,
                live_samples: s.live_samples,
                entry: 0,
                start,
                len: locs.len() as u32 - start,
                spans,
            });
        }
        Self {
            taken_at: std::time::UNIX_EPOCH,
            totals: Totals::default(),
            sample_interval: 0,
            live_samples: 0,
            dropped_samples: 0,
            address_conflicts: 0,
            giant_refused: 0,
            giant_refusals: Vec::new(),
            unit: crate::engine::sampler::ByteUnit::Requested,
            symbol_cache_entries: 0,
            peak: None,
            stacks_sampled: rows.len(),
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

    /// The histograms of rows `rows`, in that order. For a snapshot taken from the tables they
    /// are read from the tables now, in one pass over the stack table and one over the live
    /// blocks: a report needs them for the few stacks it lists, and keeping two 88-byte
    /// histograms for every stack would double what a snapshot costs. So they describe the
    /// moment they are read, a little after the figures (the time it took to symbolize and
    /// rank).
    pub(crate) fn histograms(&self, rows: &[u32]) -> Vec<Histograms> {
        if let Some(stored) = &self.stored_histograms {
            return rows.iter().map(|&r| stored[r as usize]).collect();
        }
        let mut slot_of: HashMap<u32, usize, Build> = HashMap::default();
        let mut want: HashMap<u64, usize, Build> = HashMap::default();
        for (slot, &r) in rows.iter().enumerate() {
            slot_of.insert(r, slot);
            want.insert(self.row(r).entry, slot);
        }
        for &(r, entry) in &self.extra_entries {
            if let Some(&slot) = slot_of.get(&r) {
                want.insert(entry, slot);
            }
        }
        drop(slot_of);
        let mut out = vec![Histograms::default(); rows.len()];
        tables::for_each_stack(|stripe, index, e, _| {
            if let Some(&slot) = want.get(&entry_key(stripe, index)) {
                out[slot].lifetimes.merge(&e.lifetimes);
            }
        });
        let now = crate::sys::clock::now_ns();
        tables::for_each_live(|r| {
            let (stripe, index) = tables::stripe_and_index(r.stack);
            if let Some(&slot) = want.get(&entry_key(stripe, index)) {
                let age_ms = now.saturating_sub(r.born_ns) as f64 / 1e6;
                out[slot].retained_age.add_weighted(age_ms, r.weight.bytes);
            }
        });
        out
    }

    /// The rows whose stacks print alike in `view` merged into one (the first of them, in
    /// row order): stacks that differ only in hidden frames (`::poll` glue, allocator
    /// plumbing), in addresses within one line, or inside a folded run of framework frames
    /// are one entry of a report. Every figure of a merged row is the sum of its rows' figures
    /// as they printed before (each estimate rounded first, so that the entries still add up
    /// to the same totals), and its histograms are those of all its stack-table entries.
    ///
    /// Done in place: what it costs beyond the snapshot is about 30 bytes a row while it runs
    /// (a hash per distinct printed stack and two indices a row), nothing after. The pprof
    /// profile, whose locations are addresses, is written from the rows before this merge.
    pub(crate) fn merge_printed(mut self, view: FrameView) -> Self {
        let n = self.rows.len();
        if n < 2 {
            return self;
        }
        // Representative of each row (itself when it leads its group).
        let mut rep: Vec<u32> = Vec::with_capacity(n);
        // Groups with the same hash, chained through `next`.
        let mut first: HashMap<u64, u32, Build> = HashMap::default();
        let mut next: Vec<u32> = vec![NO_ROW; n];
        for r in 0..n as u32 {
            let lines = self.shown(r, view);
            let spans = self.rows[r as usize].spans;
            let mut h = AddrHasher::default();
            spans.hash(&mut h);
            for l in &lines {
                hash_line(l, &mut h);
            }
            let hash = h.finish();
            let head = first.get(&hash).copied().unwrap_or(NO_ROW);
            let mut c = head;
            while c != NO_ROW {
                if self.rows[c as usize].spans == spans && same_lines(&self.shown(c, view), &lines)
                {
                    break;
                }
                c = next[c as usize];
            }
            if c == NO_ROW {
                next[r as usize] = head;
                first.insert(hash, r);
                rep.push(r);
            } else {
                rep.push(c);
            }
        }
        drop(first);
        drop(next);
        if rep.iter().enumerate().all(|(r, &g)| r as u32 == g) {
            return self;
        }
        for row in self.rows.iter_mut() {
            row.est = row.est.map(|v| round(v) as f64);
        }
        for r in 0..n {
            let g = rep[r] as usize;
            if g == r {
                continue;
            }
            let (est, samples, live, entry) = {
                let row = &self.rows[r];
                (row.est, row.samples, row.live_samples, row.entry)
            };
            let lead = &mut self.rows[g];
            for (a, b) in lead.est.iter_mut().zip(est) {
                *a += b;
            }
            lead.samples += samples;
            lead.live_samples += live;
            self.extra_entries.push((g as u32, entry));
            if let Some(stored) = &mut self.stored_histograms {
                let h = stored[r];
                stored[g].lifetimes.merge(&h.lifetimes);
                stored[g].retained_age.merge(&h.retained_age);
            }
        }
        for e in self.extra_entries.iter_mut() {
            e.0 = rep[e.0 as usize];
        }
        // New indices of the leading rows; the others go.
        let mut new_index = vec![NO_ROW; n];
        let mut kept = 0u32;
        for r in 0..n {
            if rep[r] as usize == r {
                new_index[r] = kept;
                kept += 1;
            }
        }
        let mut r = 0;
        self.rows.retain(|_| {
            r += 1;
            rep[r - 1] as usize == r - 1
        });
        if let Some(stored) = &mut self.stored_histograms {
            let mut r = 0;
            stored.retain(|_| {
                r += 1;
                rep[r - 1] as usize == r - 1
            });
        }
        for e in self.extra_entries.iter_mut() {
            e.0 = new_index[e.0 as usize];
        }
        self.rows.shrink_to_fit();
        self
    }

    /// The lines row `r` prints in `view`.
    pub(crate) fn shown(&self, r: u32, view: FrameView) -> Vec<ShownFrame<'_>> {
        crate::callstack::shown_frames(self.frames_of(r), view)
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
        self.locs[row.range()].iter().map(|&l| &self.locations[l as usize])
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
    pub(crate) fn location_ids_of(&self, r: u32) -> &[u32] {
        &self.locs[self.rows[r as usize].range()]
    }

    /// Estimated allocated and retained bytes summed over all stacks.
    pub(crate) fn estimated_totals(&self) -> (u64, u64) {
        self.rows.iter().fold((0, 0), |(a, r), row| {
            (
                a + row.measure(Measurement::AllocatedBytes),
                r + row.measure(Measurement::RetainedBytes),
            )
        })
    }

    /// The rows with a non-zero `m`, ranked as [`Snapshot::top_k`] ranks stacks: by `m`
    /// descending, then the other measure, then frame names, addresses and span names.
    pub(crate) fn ranked(&self, m: Measurement) -> Vec<u32> {
        let other = other(m);
        let mut v: Vec<u32> =
            (0..self.rows.len() as u32).filter(|&r| self.row(r).measure(m) > 0).collect();
        v.sort_unstable_by(|&a, &b| {
            let (ra, rb) = (self.row(a), self.row(b));
            rb.measure(m)
                .cmp(&ra.measure(m))
                .then(rb.measure(other).cmp(&ra.measure(other)))
                .then_with(|| self.cmp_function_names(a, b))
                .then_with(|| self.ips_of(a).cmp(self.ips_of(b)))
                .then_with(|| {
                    let sa = self.spans_of(a).iter().map(|s| s.name);
                    sa.cmp(self.spans_of(b).iter().map(|s| s.name))
                })
        });
        v
    }

    /// Rows `a` and `b` compared by the names of their frames, innermost first (as
    /// [`sort_stacks`] compares stacks). The locations both start with are skipped unread:
    /// ranking 100,000 stacks that tie on their bytes compares millions of names otherwise.
    fn cmp_function_names(&self, a: u32, b: u32) -> std::cmp::Ordering {
        let (la, lb) = (self.location_ids_of(a), self.location_ids_of(b));
        let same = la.iter().zip(lb).take_while(|(x, y)| x == y).count();
        let mut na = self.names(&la[same..]);
        let mut nb = self.names(&lb[same..]);
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
    fn names<'a>(&'a self, locs: &'a [u32]) -> impl Iterator<Item = &'a Arc<str>> {
        locs.iter().flat_map(|&l| self.locations[l as usize].frames.iter()).map(|f| &f.function)
    }

    /// Row `r` as a [`StackStats`] (its frames copied out of the shared locations).
    pub(crate) fn stack_stats(&self, r: u32, h: &Histograms) -> StackStats {
        let row = self.row(r);
        let ips: Vec<usize> = self.ips_of(r).map(|ip| ip as usize).collect();
        StackStats {
            allocated_bytes: round(row.est[ALLOC_BYTES]),
            num_allocations: round(row.est[ALLOC_COUNT]),
            freed_bytes: round(row.est[FREED_BYTES]),
            num_frees: round(row.est[FREED_COUNT]),
            retained_bytes: round(row.est[LIVE_BYTES]),
            retained_count: round(row.est[LIVE_COUNT]),
            peak_retained_bytes: round(row.est[PEAK_BYTES]),
            peak_retained_count: round(row.est[PEAK_COUNT]),
            samples: row.samples,
            live_samples: row.live_samples,
            frames: self.frames_of(r).cloned().collect(),
            lifetimes: h.lifetimes,
            retained_age: h.retained_age,
            stack: StdCallstack::from_ips(&ips),
            spans: self.spans_of(r).to_vec(),
        }
    }

    /// The public form, every stack materialised, with `histograms` (of every row).
    fn to_snapshot(&self, histograms: &[Histograms]) -> Snapshot {
        Snapshot {
            taken_at: self.taken_at,
            totals: self.totals,
            sample_interval: self.sample_interval,
            unit: self.unit,
            stacks: (0..self.rows.len() as u32)
                .zip(histograms)
                .map(|(r, h)| self.stack_stats(r, h))
                .collect(),
            live_samples: self.live_samples,
            dropped_samples: self.dropped_samples,
            address_conflicts: self.address_conflicts,
            giant_refused: self.giant_refused,
            giant_refusals: self.giant_refusals.clone(),
            symbol_cache_entries: self.symbol_cache_entries,
            peak: self.peak,
        }
    }
}

/// Feeds what line `l` prints (name, short location, `[inlined]`) to `h`.
fn hash_line(l: &ShownFrame<'_>, h: &mut AddrHasher) {
    match l {
        ShownFrame::Frame(f) => {
            0u8.hash(h);
            f.function.hash(h);
            f.file.as_deref().map(crate::callstack::short_path).hash(h);
            f.line.hash(h);
            f.inlined.hash(h);
        }
        ShownFrame::Folded { frames, crates } => {
            1u8.hash(h);
            frames.hash(h);
            crates.hash(h);
        }
    }
}

/// Whether two stacks' lines print alike.
fn same_lines(a: &[ShownFrame<'_>], b: &[ShownFrame<'_>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (ShownFrame::Frame(x), ShownFrame::Frame(y)) => {
                x.function == y.function
                    && x.file.as_deref().map(crate::callstack::short_path)
                        == y.file.as_deref().map(crate::callstack::short_path)
                    && x.line == y.line
                    && x.inlined == y.inlined
            }
            (x, y) => x == y,
        })
}

thread_local! {
    /// Set while [`without_stacks`] runs on this thread. Const-initialised and without a
    /// destructor: no allocation and no destructor registration on first use.
    static WITHOUT_STACKS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every [`take`] on this thread leaving the stacks out (`stacks` empty): a
/// report writer asks its source for the header figures only and reads the stacks itself, in
/// compact form.
pub(crate) fn without_stacks<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            WITHOUT_STACKS.set(self.0);
        }
    }
    let _restore = Restore(WITHOUT_STACKS.replace(true));
    f()
}

/// The `k` stacks ranked highest by `m` (as [`Snapshot::top_k`] ranks them), for the front end
/// `H`: only those `k` are materialised, out of a compact snapshot taken and dropped as
/// profiler code.
pub fn top_k<H: Host>(sample_interval: u64, k: usize, m: Measurement) -> Vec<StackStats> {
    let ts = H::thread_state();
    let guard = ts.enter();
    let compact = take_compact(sample_interval, H::UNIT);
    let mut ranked = compact.ranked(m);
    ranked.truncate(k);
    let histograms = compact.histograms(&ranked);
    drop(guard);
    let top = ranked.iter().zip(&histograms).map(|(&r, h)| compact.stack_stats(r, h)).collect();
    let _g = ts.enter();
    drop(compact);
    drop(ranked);
    drop(histograms);
    top
}

/// Takes a snapshot for the front end `H` (see the module docs for the phases).
pub fn take<H: Host>(sample_interval: u64) -> Snapshot {
    let ts = H::thread_state();
    if WITHOUT_STACKS.get() {
        let _g = ts.enter();
        return Snapshot {
            taken_at: SystemTime::now(),
            totals: totals::read(),
            sample_interval,
            unit: H::UNIT,
            stacks: Vec::new(),
            live_samples: tables::live_len() as u64,
            dropped_samples: tables::DROPPED_SAMPLES.load(std::sync::atomic::Ordering::Relaxed),
            address_conflicts: tables::ADDRESS_CONFLICTS.load(std::sync::atomic::Ordering::Relaxed),
            giant_refused: tables::GIANT_REFUSED.load(std::sync::atomic::Ordering::Relaxed),
            giant_refusals: Vec::new(),
            symbol_cache_entries: 0,
            peak: None,
        };
    }
    let guard = ts.enter();
    let compact = take_compact(sample_interval, H::UNIT);
    let all: Vec<u32> = (0..compact.len() as u32).collect();
    let histograms = compact.histograms(&all);
    drop(all);
    drop(guard);
    let snap = compact.to_snapshot(&histograms);
    let _g = ts.enter();
    drop(compact);
    drop(histograms);
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ip: usize, function: &str, line: u32, inlined: bool) -> Frame {
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
    fn stack(glue_ip: usize, line: u32, k: u64) -> StackStats {
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
        }
    }

    #[test]
    fn stacks_printed_alike_merge_with_exact_sums() {
        // Rows 0, 1 and 3 differ only in the glue's address: one entry; row 2 is another line.
        let stacks = [stack(0x10, 7, 1), stack(0x11, 7, 2), stack(0x10, 8, 4), stack(0x12, 7, 8)];
        let raw = CompactSnapshot::from_stacks(&stacks);
        assert_eq!(raw.len(), 4);
        let merged = CompactSnapshot::from_stacks(&stacks).merge_printed(FrameView::DEFAULT);
        assert_eq!((merged.len(), merged.stacks_sampled), (2, 4));
        let all: Vec<u32> = (0..2).collect();
        let h = merged.histograms(&all);
        let s: Vec<StackStats> =
            all.iter().zip(&h).map(|(&r, h)| merged.stack_stats(r, h)).collect();
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
        // The totals are those of the raw rows.
        assert_eq!(merged.estimated_totals(), raw.estimated_totals());
        // Expanded, the glue is still hidden: the same entries.
        let expanded =
            CompactSnapshot::from_stacks(&stacks).merge_printed(FrameView::expanded(true));
        assert_eq!(expanded.len(), 2);
    }
}
