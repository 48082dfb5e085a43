//! Consistent snapshots of everything the profiler knows, for reports and the stats API.
//!
//! Taking one has three phases. Under the re-entrancy guard (profiler memory) the tables are
//! copied under short lock holds and every address is symbolized. Without the guard the public
//! [`StackStats`] values are built: they are handed to the caller, so their memory is the
//! program's and is counted as such when it is later freed. Under the guard again the internal
//! copies are dropped. Memory allocated as the profiler's is thus always freed as the profiler's.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::callstack::{Measurement, StackStats, StdCallstack};
use crate::histogram::MillisHistogram;
use crate::hooks::Host;
use crate::tables;
use crate::totals::{self, Totals};

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
    pub unit: crate::sampler::ByteUnit,
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

    /// The `k` stacks ranked highest by `m`, in a deterministic order (ties broken by frames).
    pub fn top_k(&self, k: usize, m: Measurement) -> Vec<StackStats> {
        let mut v: Vec<&StackStats> = self.stacks.iter().filter(|s| s.measure(m) > 0).collect();
        sort_stacks(&mut v, m);
        v.into_iter().take(k).cloned().collect()
    }
}

/// Sorts by `m` descending, then by the other measure, then by frame names and addresses.
pub(crate) fn sort_stacks(v: &mut [&StackStats], m: Measurement) {
    let other = match m {
        Measurement::AllocatedBytes => Measurement::RetainedBytes,
        Measurement::RetainedBytes => Measurement::AllocatedBytes,
    };
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

/// Takes a snapshot for the front end `H` (see the module docs for the phases).
pub fn take<H: Host>(sample_interval: u64) -> Snapshot {
    let ts = H::thread_state();
    let guard = ts.enter();
    let entries = tables::merged_stacks();
    let live = tables::live_records();
    // Read with the tables, before this function's own unguarded allocations below (the
    // stacks it returns), so that at interval 1 the estimates equal the totals.
    let totals = totals::read();
    let refused = crate::giant::recent();
    // Scoped so that the address list is freed here, under the guard that allocated it (freed
    // after the guard, it was counted as a free of the program's).
    let symbols = {
        let mut ips: Vec<usize> = entries
            .iter()
            .flat_map(|m| m.entry.ips.iter().copied())
            .chain(refused.iter().flat_map(|r| r.ips.iter().copied()))
            .collect();
        ips.sort_unstable();
        ips.dedup();
        crate::symbolize::resolve_many(&ips)
    };
    let now = crate::clock::now_ns();
    let mut ages: HashMap<u32, MillisHistogram> = HashMap::new();
    for r in live.iter() {
        let age_ms = now.saturating_sub(r.born_ns) as f64 / 1e6;
        ages.entry(r.stack).or_default().add_weighted(age_ms, r.weight.bytes);
    }
    let cache_len = crate::symbolize::cache_len() as u64;
    drop(guard);

    let mut stacks = Vec::with_capacity(entries.len());
    for m in entries.iter() {
        let e = &m.entry;
        if e.samples == 0 {
            continue;
        }
        let mut frames = Vec::new();
        for ip in e.ips.iter() {
            if let Some(fs) = symbols.get(ip) {
                frames.extend(fs.iter().cloned());
            }
        }
        if m.overflow {
            frames.push(crate::callstack::Frame {
                ip: 0,
                function: "[stack table full: YING_MAX_STACKS]".into(),
                file: None,
                line: None,
                inlined: false,
                module: None,
            });
        }
        stacks.push(StackStats {
            allocated_bytes: round(e.alloc_bytes),
            num_allocations: round(e.alloc_count),
            freed_bytes: round(e.freed_bytes),
            num_frees: round(e.freed_count),
            retained_bytes: round(e.live_bytes),
            retained_count: round(e.live_count),
            samples: e.samples,
            live_samples: e.live_samples,
            frames,
            lifetimes: e.lifetimes,
            retained_age: m.ids.iter().fold(MillisHistogram::default(), |mut h, id| {
                if let Some(a) = ages.get(id) {
                    h.merge(a);
                }
                h
            }),
            stack: StdCallstack::from_ips(&e.ips),
            spans: crate::spans::resolve(&e.spans),
        });
    }
    let giant_refusals = refused
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
        .collect();
    let snap = Snapshot {
        taken_at: SystemTime::now(),
        totals,
        sample_interval,
        unit: H::UNIT,
        stacks,
        live_samples: live.len() as u64,
        dropped_samples: tables::DROPPED_SAMPLES.load(std::sync::atomic::Ordering::Relaxed),
        address_conflicts: tables::ADDRESS_CONFLICTS.load(std::sync::atomic::Ordering::Relaxed),
        giant_refused: tables::GIANT_REFUSED.load(std::sync::atomic::Ordering::Relaxed),
        giant_refusals,
        symbol_cache_entries: cache_len,
    };
    let _g = ts.enter();
    drop(entries);
    drop(live);
    drop(refused);
    drop(symbols);
    drop(ages);
    snap
}
