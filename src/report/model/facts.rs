//! What a report says besides its stacks: the header's facts (totals, counters, the kept peak,
//! the process, why and when the report was written, what the profiler could not see), read
//! once when the report is taken, so that no output reads a process global while it renders.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use crate::engine::mapped::MappedState;
use crate::engine::peak::Peak;
use crate::engine::sampler::ByteUnit;
use crate::engine::tables;
use crate::engine::totals::{self, Totals};
use crate::report::ReportContext;
use crate::report::model::rss::RssBreakdown;
use crate::symbols::symbolize::Module;

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

impl GiantRefusal {
    /// The refusal `number` of `size` bytes asked at the addresses `ips` (innermost first),
    /// each address's frames looked up in `frames_of` (one missing is left out).
    pub(crate) fn named<'a>(
        number: u64,
        size: u64,
        ips: impl Iterator<Item = usize>,
        frames_of: impl Fn(usize) -> Option<&'a std::sync::Arc<[crate::callstack::Frame]>>,
    ) -> Self {
        let frames = ips.filter_map(frames_of).flat_map(|fs| fs.iter().cloned()).collect();
        Self { number, size, frames }
    }
}

/// Why and when a report is written: what the writer knows and the engine does not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Occasion {
    /// Why the report was asked for, when a trigger asked (`reason:` in the text header).
    pub(crate) reason: Option<String>,
    /// Whether the process is exiting (the exit report): "at exit" rather than "now".
    pub(crate) exiting: bool,
    /// How the process ended, for a report written afterwards from its live file
    /// (`report/live/`): "killed by SIGKILL", "not running; last seen alive at ...". None for
    /// a report a process writes of itself.
    pub(crate) ended: Option<String>,
}

impl Occasion {
    /// "at exit" in the exit report, "at death" in one written from a live file after the
    /// process ended, "now" in any other.
    pub(crate) fn when(&self) -> &'static str {
        if self.ended.is_some() {
            "at death"
        } else if self.exiting {
            "at exit"
        } else {
            "now"
        }
    }
}

/// The header facts of a report.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// Wall-clock time the report was taken.
    pub(crate) taken_at: SystemTime,
    /// Exact totals, read before the stacks: `profiler_bytes` is what the profiler held before
    /// this report; the writer may set `profiler_peak_bytes` again before the text, which is
    /// written last.
    pub(crate) totals: Totals,
    /// Mean sampling interval in bytes.
    pub(crate) sample_interval: u64,
    /// What every byte figure counts.
    pub(crate) unit: ByteUnit,
    /// Live sampled allocations.
    pub(crate) live_samples: u64,
    /// Samples whose stack was not kept (stack table full).
    pub(crate) dropped_samples: u64,
    /// Samples the profiler's tables could not get the memory for, at a memory limit (see
    /// `engine::tables::LOST_FOR_MEMORY`).
    pub(crate) lost_for_memory: u64,
    /// Samples whose address was still recorded as live.
    pub(crate) address_conflicts: u64,
    /// Giant allocations refused.
    pub(crate) giant_refused: u64,
    /// The most recent giant refusals, named.
    pub(crate) giant_refusals: Vec<GiantRefusal>,
    /// Addresses in the symbol cache.
    pub(crate) symbol_cache_entries: u64,
    /// The kept peak (None before the first sample).
    pub(crate) peak: Option<Peak>,
    /// The process: pid, executable, resident memory.
    pub(crate) process: ReportContext,
    /// Why and when.
    pub(crate) occasion: Occasion,
    /// The object that owns the program's `malloc`, when it is not the profiler's.
    pub(crate) foreign_malloc: Option<String>,
    /// The allocator under the shim: `glibc (<libc's path>)`, or a chained allocator's path
    /// (`<path>, under Ying`); None for the Rust front end.
    pub(crate) allocator: Option<String>,
    /// The CPython interpreter whose frames the stacks carry, and whether they do
    /// (`engine/python/`): None in a process without one.
    pub(crate) python: Option<String>,
    /// The anonymous mappings counted.
    pub(crate) mapped: MappedState,
    /// The loaded modules, for the pprof profiles' mappings.
    pub(crate) modules: Vec<Module>,
    /// The resident set cut into parts (`model/rss.rs`), when read.
    pub(crate) rss: Option<RssBreakdown>,
    /// The memory limit and the near-limit trigger's state (`triggers/limit.rs`), when the
    /// process has a limit and a report thread that read it.
    pub(crate) limit: Option<crate::triggers::limit::LimitState>,
    /// How long the process had lived (since its start, or its fork) when the report was
    /// taken, ms; None when unknown.
    pub(crate) uptime_ms: Option<u64>,
}

impl Facts {
    /// The facts of a report of nothing: a [`crate::Snapshot`] brings its own figures, and
    /// what it does not carry is unknown (no reason, no mappings seen, no modules).
    pub(crate) fn empty(process: ReportContext) -> Self {
        Self {
            taken_at: std::time::UNIX_EPOCH,
            totals: Totals::default(),
            sample_interval: 0,
            unit: ByteUnit::Requested,
            live_samples: 0,
            dropped_samples: 0,
            lost_for_memory: 0,
            address_conflicts: 0,
            giant_refused: 0,
            giant_refusals: Vec::new(),
            symbol_cache_entries: 0,
            peak: None,
            process,
            occasion: Occasion::default(),
            foreign_malloc: None,
            allocator: None,
            python: None,
            mapped: MappedState::NotSeen,
            modules: Vec::new(),
            rss: None,
            limit: None,
            uptime_ms: None,
        }
    }

    /// The facts that cost a few atomic loads and the process's `/proc` files: everything but
    /// the kept peak (which a report sums from its stacks), the named giant refusals and the
    /// modules (see [`Facts::read_all`]). The caller holds the re-entrancy guard.
    pub(crate) fn read(sample_interval: u64, unit: ByteUnit, occasion: Occasion) -> Self {
        Self {
            taken_at: SystemTime::now(),
            totals: totals::read(),
            sample_interval,
            unit,
            live_samples: tables::live_len() as u64,
            dropped_samples: tables::DROPPED_SAMPLES.load(Ordering::Relaxed),
            lost_for_memory: tables::LOST_FOR_MEMORY.load(Ordering::Relaxed),
            address_conflicts: tables::ADDRESS_CONFLICTS.load(Ordering::Relaxed),
            giant_refused: tables::GIANT_REFUSED.load(Ordering::Relaxed),
            occasion,
            foreign_malloc: crate::report::foreign_malloc().map(str::to_string),
            allocator: crate::report::allocator().map(str::to_string),
            python: crate::engine::python::status(),
            mapped: crate::engine::mapped::state(),
            limit: crate::triggers::limit::state(),
            uptime_ms: crate::engine::peak::process_start_boot_ns()
                .map(|start| crate::sys::clock::boot_ns().saturating_sub(start) / 1_000_000),
            ..Self::empty(ReportContext::current())
        }
    }

    /// [`Facts::read`] with the giant refusals named and the modules listed (symbolization:
    /// report time). The caller holds the re-entrancy guard.
    pub(crate) fn read_all(sample_interval: u64, unit: ByteUnit, occasion: Occasion) -> Self {
        let mut f = Self::read(sample_interval, unit, occasion);
        f.giant_refusals = named_refusals();
        f.modules = crate::symbols::symbolize::modules();
        f.rss = f.read_rss();
        f
    }

    /// The resident set explained, from these facts' totals (see `model/rss.rs`). The caller
    /// holds the re-entrancy guard.
    pub(crate) fn read_rss(&self) -> Option<RssBreakdown> {
        let counted = match self.mapped {
            MappedState::Counted { bytes, .. } => bytes,
            _ => 0,
        };
        crate::report::model::rss::read(
            self.totals.retained_bytes(),
            counted,
            self.totals.profiler_bytes,
            self.foreign_malloc.is_some(),
        )
    }
}

/// The kept giant refusals (see `giant`), named. The caller holds the re-entrancy guard.
pub(crate) fn named_refusals() -> Vec<GiantRefusal> {
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
        .map(|r| {
            GiantRefusal::named(r.number, r.size, r.ips.iter().copied(), |ip| symbols.get(&ip))
        })
        .collect()
}
