//! The live file's messages: protobuf (prost-derived, as the pprof types are), so that a
//! field added later is skipped by an older reader and a missing one reads as its default.
//! Every address is raw: the file is named and symbolized by whoever reads it.

/// The whole file: one version of the process's profile.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Live {
    /// [`super::VERSION`] of the writer.
    #[prost(uint32, tag = "1")]
    pub(crate) version: u32,
    /// The process.
    #[prost(message, optional, tag = "2")]
    pub(crate) process: Option<Process>,
    /// When this version was written (ms since the Unix epoch): the process was alive then.
    #[prost(uint64, tag = "3")]
    pub(crate) written_ms: u64,
    /// The number the process's next report set would have had.
    #[prost(uint64, tag = "4")]
    pub(crate) next_seq: u64,
    /// Mean sampling interval in bytes.
    #[prost(uint64, tag = "5")]
    pub(crate) sample_interval: u64,
    /// What byte figures count: 0 the requested size, 1 glibc's chunk.
    #[prost(uint32, tag = "6")]
    pub(crate) unit: u32,
    /// Exact totals and the profiler's counters as of `written_ms`.
    #[prost(message, optional, tag = "7")]
    pub(crate) totals: Option<Totals>,
    /// The kept peak, if one was.
    #[prost(message, optional, tag = "8")]
    pub(crate) peak: Option<Peak>,
    /// The loaded modules, sorted by start address.
    #[prost(message, repeated, tag = "9")]
    pub(crate) modules: Vec<Module>,
    /// Distinct addresses; entry 0 stands for the `[stack table full]` pseudo-location.
    #[prost(uint64, repeated, tag = "10")]
    pub(crate) ips: Vec<u64>,
    /// Every sampled stack.
    #[prost(message, repeated, tag = "11")]
    pub(crate) rows: Vec<Row>,
    /// Distinct span paths; entry 0 is the empty path.
    #[prost(message, repeated, tag = "12")]
    pub(crate) span_paths: Vec<SpanPath>,
    /// The most recent points of the memory timeline, oldest first.
    #[prost(message, repeated, tag = "13")]
    pub(crate) points: Vec<Point>,
    /// How the process's reports were set to look.
    #[prost(message, optional, tag = "14")]
    pub(crate) options: Option<Options>,
    /// Anonymous mappings: 0 not seen (Rust front end), 1 not counted, 2 counted.
    #[prost(uint32, tag = "15")]
    pub(crate) mapped_kind: u32,
    #[prost(uint64, tag = "16")]
    pub(crate) mapped_bytes: u64,
    #[prost(uint64, tag = "17")]
    pub(crate) mapped_regions: u64,
    /// The object owning the program's `malloc` when it is not the profiler's.
    #[prost(string, tag = "18")]
    pub(crate) foreign_malloc: String,
    /// The most recent giant refusals.
    #[prost(message, repeated, tag = "19")]
    pub(crate) giant_refusals: Vec<GiantRefusal>,
    /// Why the report was asked for, for a set's raw profile (`YING_SYMBOLIZE=offline`); empty
    /// in a live file.
    #[prost(string, tag = "20")]
    pub(crate) reason: String,
    /// Whether it is the exit report's raw profile.
    #[prost(bool, tag = "21")]
    pub(crate) exiting: bool,
    /// The report header's words on Python frames (empty: no interpreter).
    #[prost(string, tag = "22")]
    pub(crate) python: String,
    /// The code objects the Python frames among `ips` name (`engine/python/`).
    #[prost(message, repeated, tag = "23")]
    pub(crate) python_codes: Vec<PythonCode>,
    /// The allocator under the shim (`glibc (path)` or the chained allocator's path); empty
    /// for the Rust front end.
    #[prost(string, tag = "24")]
    pub(crate) allocator: String,
    /// The resident set cut into parts as of `written_ms` (`model/rss.rs`), when read.
    #[prost(message, optional, tag = "25")]
    pub(crate) rss: Option<Rss>,
    /// The memory limit and the near-limit state as of `written_ms`, when the process had one.
    #[prost(message, optional, tag = "26")]
    pub(crate) limit: Option<Limit>,
}

/// The resident set's parts (`model/rss.rs`'s `RssBreakdown`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Rss {
    #[prost(uint64, tag = "1")]
    pub(crate) rss: u64,
    /// Bytes of each part, in `rss::Part::ALL`'s order.
    #[prost(uint64, repeated, tag = "2")]
    pub(crate) parts: Vec<u64>,
    #[prost(uint64, tag = "3")]
    pub(crate) heap_not_resident: u64,
    #[prost(bool, tag = "4")]
    pub(crate) allocator_known: bool,
    /// How long before `Live::written_ms` it was read, ms.
    #[prost(uint64, tag = "5")]
    pub(crate) age_ms: u64,
}

/// The memory limit (`triggers/limit.rs`'s `LimitState`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Limit {
    #[prost(uint64, tag = "1")]
    pub(crate) bytes: u64,
    /// The cgroup's (else `YING_MEMORY_LIMIT_BYTES`).
    #[prost(bool, tag = "2")]
    pub(crate) cgroup: bool,
    /// The near-limit level, percent (0: off).
    #[prost(uint64, tag = "3")]
    pub(crate) pct: u64,
    /// When the resident set reached the level (ms since the Unix epoch; 0: below it).
    #[prost(uint64, tag = "4")]
    pub(crate) near_since_ms: u64,
}

/// One code object of the interpreter's: the id its frames' words carry, its qualified name
/// and file.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PythonCode {
    #[prost(uint32, tag = "1")]
    pub(crate) id: u32,
    #[prost(string, tag = "2")]
    pub(crate) qualname: String,
    #[prost(string, tag = "3")]
    pub(crate) filename: String,
}

/// The process's identity.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Process {
    #[prost(uint32, tag = "1")]
    pub(crate) pid: u32,
    /// Path of the executable.
    #[prost(string, tag = "2")]
    pub(crate) exe: String,
    /// The command line, one argument each.
    #[prost(string, repeated, tag = "3")]
    pub(crate) cmdline: Vec<String>,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22): with `boot_id`,
    /// what tells this process from a later one with the same pid.
    #[prost(uint64, tag = "4")]
    pub(crate) start_ticks: u64,
    /// Start time, ms since the Unix epoch.
    #[prost(uint64, tag = "5")]
    pub(crate) start_ms: u64,
    /// `/proc/sys/kernel/random/boot_id`.
    #[prost(string, tag = "6")]
    pub(crate) boot_id: String,
    /// Resident set and its anonymous part, KiB, as of `written_ms` (0: unknown).
    #[prost(uint64, tag = "7")]
    pub(crate) rss_kib: u64,
    #[prost(uint64, tag = "8")]
    pub(crate) anon_rss_kib: u64,
    /// The process's instance (`report::ProcessId`), in its file names; absent in files
    /// written before instances.
    #[prost(uint32, optional, tag = "9")]
    pub(crate) instance: Option<u32>,
}

/// Exact totals and counters.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Totals {
    #[prost(uint64, tag = "1")]
    pub(crate) allocated_bytes: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) freed_bytes: u64,
    #[prost(uint64, tag = "3")]
    pub(crate) profiler_bytes: u64,
    #[prost(uint64, tag = "4")]
    pub(crate) profiler_peak_bytes: u64,
    #[prost(uint64, tag = "5")]
    pub(crate) live_samples: u64,
    #[prost(uint64, tag = "6")]
    pub(crate) dropped_samples: u64,
    #[prost(uint64, tag = "7")]
    pub(crate) address_conflicts: u64,
    #[prost(uint64, tag = "8")]
    pub(crate) giant_refused: u64,
}

/// The kept peak.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Peak {
    /// Time since start, ms, plus one (0: unknown).
    #[prost(uint64, tag = "1")]
    pub(crate) since_start_ms_plus_one: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) at_ms: u64,
    #[prost(uint64, tag = "3")]
    pub(crate) estimated_bytes: u64,
    /// Exact bytes plus one (0: unknown).
    #[prost(uint64, tag = "4")]
    pub(crate) exact_bytes_plus_one: u64,
    #[prost(uint64, tag = "5")]
    pub(crate) high_water_bytes: u64,
    #[prost(uint64, tag = "6")]
    pub(crate) captures: u64,
}

/// A loaded module.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Module {
    #[prost(string, tag = "1")]
    pub(crate) path: String,
    #[prost(uint64, tag = "2")]
    pub(crate) start: u64,
    #[prost(uint64, tag = "3")]
    pub(crate) end: u64,
    #[prost(uint64, tag = "4")]
    pub(crate) bias: u64,
    #[prost(string, tag = "5")]
    pub(crate) build_id: String,
}

/// One stack and its figures.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Row {
    /// The eight estimates (allocated bytes and count, freed bytes and count, retained bytes
    /// and count, retained bytes and count at the peak), unrounded.
    #[prost(double, repeated, tag = "1")]
    pub(crate) est: Vec<f64>,
    #[prost(uint64, tag = "2")]
    pub(crate) samples: u64,
    #[prost(uint64, tag = "3")]
    pub(crate) live_samples: u64,
    /// Indices into `Live::ips`, innermost first.
    #[prost(uint32, repeated, tag = "4")]
    pub(crate) locs: Vec<u32>,
    /// Index into `Live::span_paths`.
    #[prost(uint32, tag = "5")]
    pub(crate) spans: u32,
    #[prost(message, optional, tag = "6")]
    pub(crate) lifetimes: Option<Histogram>,
    #[prost(message, optional, tag = "7")]
    pub(crate) retained_age: Option<Histogram>,
    /// The estimates' variance estimates, same order (absent in a file of a version that did
    /// not write them: read as zero).
    #[prost(double, repeated, tag = "8")]
    pub(crate) var: Vec<f64>,
    /// Resident and swapped bytes of the stack's live blocks when the version was written
    /// (`model/resident.rs`); empty when not measured.
    #[prost(double, repeated, tag = "9")]
    pub(crate) res: Vec<f64>,
}

/// A weighted histogram of milliseconds.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Histogram {
    #[prost(double, repeated, tag = "1")]
    pub(crate) weights: Vec<f64>,
    #[prost(double, tag = "2")]
    pub(crate) weighted_sum_millis: f64,
    #[prost(double, tag = "3")]
    pub(crate) total_weight: f64,
}

/// A span path, outermost first.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SpanPath {
    #[prost(message, repeated, tag = "1")]
    pub(crate) spans: Vec<Span>,
}

/// One span.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Span {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) target: String,
}

/// A timeline point.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Point {
    #[prost(uint64, tag = "1")]
    pub(crate) t_ms: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) retained: u64,
    #[prost(uint64, tag = "3")]
    pub(crate) allocated: u64,
    #[prost(uint64, tag = "4")]
    pub(crate) rss: u64,
    #[prost(uint64, tag = "5")]
    pub(crate) peak: u64,
}

/// The report options of the process.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Options {
    #[prost(uint64, tag = "1")]
    pub(crate) top_k: u64,
    #[prost(bool, tag = "2")]
    pub(crate) measure_allocated: bool,
    #[prost(bool, tag = "3")]
    pub(crate) gen_flamegraphs: bool,
    #[prost(bool, tag = "4")]
    pub(crate) expand_frames: bool,
    #[prost(bool, tag = "5")]
    pub(crate) fold_framework_frames: bool,
}

/// A refused giant allocation.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GiantRefusal {
    #[prost(uint64, tag = "1")]
    pub(crate) number: u64,
    #[prost(uint64, tag = "2")]
    pub(crate) size: u64,
    #[prost(uint64, repeated, tag = "3")]
    pub(crate) ips: Vec<u64>,
}
