//! Black-box tests of `libying.so`, the `LD_PRELOAD` shim of the Ying memory profiler.
//!
//! # Approach
//!
//! Every test runs real programs twice: once as they are and once with
//! `LD_PRELOAD=<libying.so>` and `YING_*` settings. A profiler must be invisible to the program
//! it profiles, so the two runs must print the same standard output and end with the same exit
//! status; standard error may differ only by lines starting with `ying:` (the shim's own
//! messages), and a test says which of those it expects (usually none). The programs are small C
//! and C++ files in `programs/`, compiled by the system `cc`/`c++` with `-g -O1` into a fresh
//! temporary directory per test, plus installed tools (python3, perl, gcc, a shell pipeline).
//!
//! Where the test knows what the program allocated, it runs in *exact mode*
//! (`YING_SAMPLE_INTERVAL_BYTES=1`: every allocation is sampled with weight one) and compares
//! the report with the program's own arithmetic, to the byte. Allocations happen in
//! `__attribute__((noinline))` marker functions with distinctive sizes, and
//! [`Folded::bytes_through`] sums the bytes of every stack that passes through a marker. The
//! `.folded` file is the easiest report to parse (`root;...;leaf <bytes>`, retained bytes by
//! default, allocated bytes with `YING_MEASURE_ALLOCATED_NOT_RETAINED=true`); the set's
//! manifest (`<set>.json`), read by [`ReportSet::manifest`] into a [`Manifest`], gives the
//! header figures, the counts of the listed entries and their frames (`file:line`). The human
//! text report is read only by tests of its wording.
//!
//! # Rules every test follows
//!
//! * The shim is not built here: [`preload_lib`] finds `YING_TEST_PRELOAD` or
//!   `<workspace>/target/release/libying.so` and fails with a message to run
//!   `cargo build --release` when it is missing.
//! * Every child runs with a timeout ([`DEFAULT_TIMEOUT`]) in its own process group, which is
//!   killed (`kill -KILL -- -<pgid>`) when time runs out, so a deadlock fails a test instead of
//!   hanging the suite.
//! * Every failure message shows the full command line, the variables set, the exit status,
//!   stdout and stderr ([`Outcome::describe`]) and the report files found.
//! * Each test has its own [`TestDir`] (compiled programs, reporting directories), removed when
//!   the test passes and kept (its path printed) when it fails. Tests can run in parallel.
//! * Inherited `YING_*` and `LD_PRELOAD` variables are removed from every child's environment,
//!   so a developer's settings cannot change the results.
//! * A run under the shim writes its exit reports in full (`YING_SHORT_PROCESS_SECS=0`) unless
//!   the test sets that variable: tests read the sets a process writes. The raw exit reports
//!   of short processes, the default, and the sets `ying report` and `ying run` make of them
//!   are tested in `churn.rs`.
//! * `cc`, `c++` and `nm` are required. A test that needs an optional tool (python3, perl, gcc,
//!   the coreutils of the pipeline) prints `SKIPPED: ...` and passes when it is not installed.
//!
//! # Writing test programs
//!
//! Compilers delete a `malloc` whose block is never observably used (even at `-O1`), which
//! silently removes the very allocation a test counts. Programs therefore keep blocks in
//! non-static globals, read them back into a printed checksum, or store them into a
//! `volatile` sink before `free`. Marker sizes are odd numbers unlikely to occur elsewhere, and
//! each test file mirrors its program's constants with a comment saying so.
//!
//! # The test files
//!
//! | file | what it covers |
//! |---|---|
//! | `exports.rs` | every exported function against glibc (`programs/exports.c`); `nm -D` symbol set |
//! | `exact.rs` | exact-mode bytes and counts per marker, retained and allocated; `file:line` |
//! | `resident.rs` | resident bytes per stack: an untouched `calloc` about 0, a filled block its size; `YING_RESIDENT=off` |
//! | `threads.rs` | 16 threads with cross-thread frees and reallocs |
//! | `fork.rs` | fork, fork + exec, forks while other threads allocate; CPython 3.12+'s warning at `os.fork` that counts the report thread (ignored: bug) |
//! | `fork_estimates.rs` | a `fork` child draws its own countdown: 300 children's estimates unbiased and as scattered as independent draws |
//! | `exit.rs` | `exit()` from a non-main thread while others allocate |
//! | `cxx.rs` | new/delete, new[]/delete[], aligned new; demangled names |
//! | `real_programs.rs` | python3 (threads, multiprocessing), perl, gcc, a shell pipeline, `YING_ONLY_EXE` |
//! | `dlopen.rs` | dlopen and dynamic TLS from 8 threads (C and python3 imports) |
//! | `bad_config.rs` | invalid values, unusable reporting paths, giant allocations |
//! | `settings.rs` | reporting switched off, periodic reports, no flamegraphs, relative paths, old sets removed beyond `YING_MAX_REPORT_SETS` |
//! | `thread_life.rs` | threads that end unseen, `pthread_getattr_np` at thread start, small stacks |
//! | `cancellation.rs` | `malloc` is never a cancellation point (giant refusals, samples) |
//! | `signal_alloc.rs` | samples in a signal handler that interrupted `calloc` (glibc's arena lock held) |
//! | `stress.rs` | the thread, cancellation and fork patterns looped over seeds and intervals |
//! | `report_files.rs` | file modes, symbolic links on the path, planted names, `chdir`, reopened stderr |
//! | `dlclose.rs` | a library closed and another loaded at its base: named and unwound as itself |
//! | `giant_limit_estimates.rs` | estimates unbiased over seeds with the interval at `YING_MAX_ALLOC_BYTES`, each pattern (malloc, calloc, memalign, near-interval blocks, realloc, mmap) |
//! | `aligned.rs` | the aligned allocation family against glibc for impossible alignments and sizes |
//! | `report_memory.rs` | the profiler memory a 20,000-stack exit report takes, against the README's formula |
//! | `mmap.rs` | anonymous mappings per marker in exact mode, `YING_TRACK_MMAP=false`, Python's arenas, threads and forks mapping at once |
//! | `process.rs` | single-threaded start, `unshare --user`, no report without a sample, exit during a dump, foreign `malloc` |
//! | `run_script.rs` | `scripts/run-with-ying.sh`: a shell wrapper's helpers write no set, the summary for static binaries, unwritable and stale directories |
//! | `cpython_suites.rs` | CPython's `test_subprocess`, `test_threading`, `test_os`, `test_signal`, `test_mmap`: every case that passes plain passes under the shim |
//! | `python_memray.rs` | Python frames against memray (installed from PyPI into a venv): six functions' retained bytes (a thread, an asyncio task, recursion, pymalloc arenas) per innermost frame, the same top five, within 4 standard errors of the program's own count |
//! | `wait_points.rs` | the report thread starts at each kind of wait (sleep, poll, select, read, condition, signal and child waits, accept), never in a signal handler or a `vfork` child; dispositions read back as installed; one line at exit when it never started |
//! | `descriptors.rs` | no descriptor of Ying's in `/proc/self/fd` between reports, a program at its `RLIMIT_NOFILE` keeps every slot, low descriptors closed under the endpoint, a worker that changed user is told once |
//! | `lifecycle.rs` | a `main` that ends with `pthread_exit` ends with its last thread, `exit` from three threads at once, from an `atexit` handler and during a dump: one complete set, no temporary file; CPython's `test_3_join_in_forked_from_thread` |
//! | `chained.rs` | `LD_PRELOAD=libying.so:<allocator>` for jemalloc, tcmalloc, tcmalloc_minimal and mimalloc: exact-mode bytes (the allocator's usable size) and counts per marker of `exact.c` and `cxx.cpp`, counts as under glibc; the header's `allocator:` and `bytes counted:` lines; sqlite3, python3 and 16 threads against the allocator alone |
//! | `memory_limits.rs` | a program that handles `ENOMEM` under `ulimit -v` and `ulimit -d`: fills to the limit and exits as plain (defaults, no report thread), every retry at the limit succeeds while reports are due, new stacks sampled at the limit, reports leave the program's `mallinfo2` as plain |
//! | `full_disk.rs` | a full filesystem at exit: no half-written set, the live file kept and named; a program filling the filesystem its reports share loses no write (the free-space floor); sets written whole above it |
//! | `retention.rs` | 150 short runs into one directory keep the newest 100 sets (`YING_RETAIN_SETS`), a byte limit holds, killed writers' temporary files removed by the next process and by `ying view` |
//! | `churn.rs` | a short process writes its exit report raw and `ying report DIR` makes the same set; a fork storm of 2,000 children keeps a bounded directory; an `exec` is not a death, a failed one keeps the live file |
//! | `scrape_latency.rs` | sampled `malloc`s timed under a `curl` loop on `/debug/pprof/heap` of 262,144 stacks: the slowest waits for a slice of a stripe, not the stripe |
//! | `other_preloads.rs` | libfaketime and a preload that allocates in every function it interposes, before and after the shim: no recursion through the clock |
//! | `seccomp.rs` | filters installed with `prctl` and `syscall(SYS_seccomp)`, with and without `TSYNC`, that kill, trap or fail each call Ying makes: the program lives as in the plain run; harmless filters change nothing; strict mode |
//!
//! # The harness, by job
//!
//! | module | job |
//! |---|---|
//! | `shim` | where things are: the shim under test, the workspace, the test programs, optional tools; the `YING_*` settings most tests use ([`EXACT`], [`QUIET`]) |
//! | `programs` | [`TestDir`]: the per-test scratch directory that compiles the C, C++ and Rust programs; [`tagged_line`], [`chunk_counts`] |
//! | `child` | [`Run`] and [`Outcome`]: one child with a timeout in its own process group; [`compare`]: the plain run against the shim's; [`Run::preload_after`]: another allocator after the shim, alone in the plain run |
//! | `exact` | [`EXACT_PROGRAM`], [`CXX_PROGRAM`]: the programs that count their own bytes per [`Marker`]; [`check_folded_bytes`], [`check_entries`], [`marker_counts`]: a report against their count |
//! | `reports` | [`ReportSet`], [`report_sets`], [`parse_report_name`]: the sets a run wrote; [`Folded`] and [`Manifest`]: their contents |
//! | `fs` | [`Tmpfs`]: a small filesystem mounted for one test (root only), filled to a free space |
//! | `seeds` | [`seeded_run`]: one seeded run at an interval; [`mean_and_stderr`]: a figure over the seeds |
//!
//! Everything is re-exported here, so tests name it `preload_tests::...` whatever its module.
//!
//! Tests of known shim/engine bugs are `#[ignore = "bug: ..."]`; run them with
//! `cargo test -p preload-tests -- --ignored`.

mod child;
mod exact;
mod fs;
mod programs;
mod reports;
mod seeds;
mod shim;

pub use child::*;
pub use exact::*;
pub use fs::*;
pub use programs::*;
pub use reports::*;
pub use seeds::*;
pub use shim::*;
