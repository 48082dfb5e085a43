//! Ying (鷹, eagle) is a sampling memory profiler for production programs. It tracks the memory
//! each call stack **retains** as well as what it **allocates**, with stacks that stay readable
//! for optimized and async Rust, and writes reports, flamegraphs, folded stacks and pprof
//! profiles.
//!
//! Two front ends share one engine:
//!
//! * in Rust code, [`YingProfiler`] as the `#[global_allocator]`;
//! * for any dynamically linked program, `LD_PRELOAD=libying.so ./app` (the `preload` package
//!   of this repository), configured by `YING_*` environment variables ([`config`]).
//!
//! # How to use
//!
//! Set Ying as the global allocator, then turn on reporting with one line:
//!
//! ```no_run
//! use ying_profiler::YingProfiler;
//!
//! #[global_allocator]
//! static YING_ALLOC: YingProfiler = YingProfiler::default();
//!
//! fn main() {
//!     YING_ALLOC.start_profiling();
//!     // ... the rest of your program
//! }
//! ```
//!
//! There are three layers, and it is worth knowing which one you are using.
//!
//! **1. The allocator: collects, never reports.** The `#[global_allocator]` declaration makes
//! Ying sample allocations. On its own it writes nothing and spawns no thread: it keeps its stats
//! in memory and defers every call to [`std::alloc::System`], or to the allocator your program
//! already uses: `YingProfiler<mimalloc::MiMalloc>` from [`YingProfiler::wrapping`] (any
//! `GlobalAlloc`; the figures are the same whatever is inside).
//!
//! **2. [`utils::ProfilerRunner`]: decides how stats get reported** — how often to look
//! (`check_interval_secs`), how much change is worth a report (`report_pct_change_trigger`),
//! where output goes (`reporting_path`, created if missing), what to rank by
//! (`measure_allocated_not_retained`), whether to draw flamegraphs (`gen_flamegraphs`), whether
//! to list every frame with its own `file:line` (`expand_frames`) and whether to fold runs of
//! framework frames (`fold_framework_frames`):
//!
//! ```no_run
//! use ying_profiler::{utils::ProfilerRunnerBuilder, YingProfiler};
//!
//! #[global_allocator]
//! static YING_ALLOC: YingProfiler = YingProfiler::default();
//!
//! fn main() {
//!     let runner = ProfilerRunnerBuilder::default()
//!         .check_interval_secs(60)
//!         .report_pct_change_trigger(5)
//!         .reporting_path("/var/log/ying")
//!         .gen_flamegraphs(true)
//!         .build()
//!         .unwrap();
//!     runner.spawn(&YING_ALLOC);
//! }
//! ```
//!
//! [`YingProfiler::start_profiling`] builds exactly one of these with the seed values (5 minute
//! interval, 10 % trigger, flamegraphs on, retained memory, output to `ying-profiles`, and a
//! final report set when the process exits: `report_at_exit`, on by default in every runner).
//! Both return a [`utils::RunnerHandle`]: [`utils::RunnerHandle::dump_now`] writes a report set
//! on demand (from a service's handler, say) and returns its paths. A runner keeps at most
//! `max_report_sets` sets of its process in its directory (50 by default), removing the oldest.
//!
//! With [`utils::ProfilerRunnerBuilder::live_file`] (`YING_LIVE_FILE=on`; `ying run` sets it),
//! a runner's report thread also keeps the process's *live file*, `ying.<exe>.<pid>.live`
//! ([`report::live`]; [`utils::ProfilerRunnerBuilder::live_file`]): a process killed by the
//! OOM killer or `SIGKILL`, or ended by a crash, leaves its heap at death there, and
//! `ying report FILE` (or [`report::live::LiveProfile`]) writes its report set afterwards,
//! outside the process.
//!
//! **3. Reading stats directly**, when reports should follow your own signals:
//! [`YingProfiler::top_k_stacks_by_retained`], [`YingProfiler::top_k_stacks_by_allocated`],
//! [`YingProfiler::top_k_stacks_at_peak`] (what held the memory at its highest, see
//! [`Snapshot::peak`]),
//! [`YingProfiler::total_retained_bytes`], [`utils::gen_flamegraph`] for a one-off SVG and
//! [`utils::write_report_now`] for a whole report set. These return one [`StackStats`] per raw
//! stack; reports merge the stacks that print alike (see below).
//!
//! ```
//! use ying_profiler::YingProfiler;
//!
//! #[global_allocator]
//! static YING_ALLOC: YingProfiler = YingProfiler::default();
//!
//! let kept: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 * 1024]).collect();
//! assert!(YingProfiler::total_retained_bytes() >= 4 << 20);
//! for stack in YING_ALLOC.top_k_stacks_by_retained(3) {
//!     println!("{} bytes retained at:", stack.retained_bytes);
//!     for frame in stack.display_frames(false) {
//!         println!("  {frame}");
//!     }
//! }
//! drop(kept);
//! ```
//!
//! # How reports show a stack
//!
//! The text report, folded stacks and flamegraphs list one line per function, innermost first:
//! functions inlined by the compiler are named like the others, consecutive frames of one
//! function (a recursion, a closure inlined into its namesake) are one line, and async
//! `::poll` glue and allocator plumbing are hidden. Runs of at least three frames in crates of
//! the cargo registry or in Rust's standard library fold into one line such as
//! `... 27 frames in tokio, hyper, axum ...`, and the allocation's own frames below the library
//! function the program called (`alloc::vec::from_elem`) into `... library internals ...`
//! (`fold_framework_frames`, `YING_FOLD_FRAMEWORK_FRAMES`; see [`callstack::shown_frames`]).
//! Paths in the registry print as `tokio-1.48.0/src/...`, the standard library's as
//! `std/src/...`. Stacks that print alike (they differ only in hidden frames, in addresses
//! within one line, or inside a folded run) are one entry, every figure summed. With
//! `expand_frames` every frame is listed with its own `file:line`, nothing folded. pprof
//! profiles keep every raw stack and frame: their tools fold on their own.
//!
//! # What the numbers mean
//!
//! Allocations are sampled by bytes: on average one sample per `R` bytes (512 KiB by default,
//! as jemalloc and Go; `R = 1` records everything). Each sample carries the weight of the
//! allocations it stands for, so every per-stack figure is an unbiased estimate of the truth.
//! [`YingProfiler::total_retained_bytes`] is exact (not sampled) and excludes the profiler's own
//! memory. A `realloc` keeps the block's original stack and birth time. Each stack also has a
//! histogram of how long its freed allocations lived ([`histogram`]) and of the age of the
//! bytes it still retains.
//!
//! # The peak
//!
//! Every report set and snapshot carries the kept peak of the retained total: a peak is kept
//! each time the estimated retained total exceeds the last kept one by 5 %, with every stack's
//! retained estimate at that moment ([`StackStats::peak_retained_bytes`]). A report set writes
//! the peak's `.peak.svg` flamegraph, `.peak.folded` stacks and `.peak.pb.gz` pprof heap profile
//! beside the current ones, and a PEAK section in its `.txt`. It costs nothing
//! on the unsampled path and O(1) per sample.
//!
//! # Giant allocations
//!
//! A single request of at least the limit (64 GiB by default; [`YingProfiler::new`]) is refused
//! before anything is allocated, and the stack that asked is printed to stderr. Rust's
//! infallible collections then abort the process through the allocation-error handler; C code
//! under the shim gets `NULL` and `ENOMEM`.
//!
//! # Cost
//!
//! The unsampled path takes no lock, makes no syscall and never allocates: a thread-local
//! countdown, a compare, a per-thread counter. Stacks are captured only for samples and are
//! symbolized at report time.
//!
//! # Feature flags
//!
//! * `profile_spans` — attributes samples to the `tracing` spans entered when they were taken:
//!   add [`spans::YingSpanLayer`] to your subscriber, and stats are kept per (stack, span path),
//!   shown above the frames in text reports, as root frames in flamegraphs and as `span` labels
//!   in pprof profiles.
//! * `otlp-grpc` — OTLP pushes over gRPC (`grpc://host:4317` as the runner's `otlp_url` or
//!   `YING_OTLP_URL`): the profiles service's gRPC client (tonic) on a single-threaded Tokio
//!   runtime the pushing thread owns. OTLP over HTTP needs no feature.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

// The source tree follows the data (ARCHITECTURE.md): `engine/` runs inside `malloc`, `stack/`
// walks the program's stack for it, `symbols/` and `report/` run at report time, `sys/` holds
// the primitives all of them use. Each folder's `mod.rs` says what its code may and may not do.

pub mod callstack;
pub mod config;
pub mod report;
pub mod spans;

pub(crate) mod engine;
pub(crate) mod stack;
pub(crate) mod symbols;
pub(crate) mod sys;

/// Separate debug info of stripped modules (debug packages under `/usr/lib/debug`, the
/// debuginfod client's cache, `.gnu_debuglink`): where it is looked for, and the switch that
/// lets the `ying` command fetch it from `DEBUGINFOD_URLS` (a profiled process never fetches).
pub mod debuginfo {
    pub use crate::symbols::debug_file::{DEBUG_ROOT, MAX_FETCH_BYTES, cache_dir, set_fetch};
}
pub(crate) mod triggers;

// What the preload shim (`preload/`) calls to drive the engine: see the module's doc.
#[doc(hidden)]
pub mod front_end;

mod profiler;
pub mod profiles;
#[doc(hidden)]
pub mod runner;
pub mod serve;
pub(crate) mod source;

pub use callstack::{Frame, Measurement, Residency, StackStats, Variances};
pub use engine::histogram;
/// The sampling settings of a [`YingProfiler`] ([`YingProfiler::settings`]): interval, giant
/// limit, seed, on/off, adjustable while the program runs.
pub use engine::host::Settings;
/// The kept peak of the retained total a [`Snapshot`] carries ([`Snapshot::peak`]).
pub use engine::peak::Peak;
pub use engine::sampler::ByteUnit;
pub use engine::totals::Totals;
pub use profiler::YingProfiler;
pub use report::snapshot::{GiantRefusal, Snapshot};

/// The report runner ([`utils::ProfilerRunner`]) and one-off reports, under the module name the
/// 0.3.0 API gave them (the source is `src/runner/`).
#[doc(inline)]
pub use runner as utils;
