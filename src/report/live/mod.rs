//! The live file: the process's profile kept on disk while it runs, so that a process killed
//! by the OOM killer, by `SIGKILL`, by a crash or by a signal it does not handle still leaves
//! its heap at death for `ying report FILE` to render afterwards, outside the process.
//!
//! # What it holds
//!
//! `ying.<exe>.<pid>.live` ([`file_name`]) in the reporting directory (or `YING_LIVE_FILE`'s):
//! a protobuf message (`format.rs`) with everything a report set needs: every sampled
//! stack as raw addresses with its eight estimates, sample counts and lifetime and age
//! histograms; the exact totals and counters; the kept peak; the recent timeline points; the
//! sampling interval and unit; the process's identity (pid, executable, command line, start
//! time, boot id); the loaded modules with their build ids (re-listed whenever the loader's
//! count of loads or unloads moved, so `dlopen`/`dlclose` are followed); and the report
//! options. Nothing is symbolized in the process: the reader names every address from the
//! files on disk, matched by build id (`symbols/offline.rs`).
//!
//! # Why it is valid whatever instruction the process dies at
//!
//! The report thread writes each version whole under a random temporary name in the same
//! directory and renames it over the previous one (`files.rs`), the same way every report file
//! is written. `rename` replaces the name atomically: at any instant the name points to one
//! complete version, the previous or the new. A process killed in the middle of a write leaves
//! at most a temporary file (named `.ying-tmp-*`, which no reader opens) and the previous
//! version in place. What the kernel accepted in `write` is in the page cache and survives the
//! process, whatever killed it; only a crash of the machine itself loses what was not yet
//! written back. So there is no half-written entry to detect: the file read is always a version
//! the process finished writing, at most one update interval old.
//!
//! The engine's tables are not mapped from the file, although that would make the state at
//! death exact to the last sample: the tables are built of in-process pointers, spin locks and
//! per-stripe hash tables that a reader would have to walk while they may be half-updated, and
//! the sampled path would pay for keeping them consistent. A version every
//! `YING_LIVE_INTERVAL_MS` (500 ms by default) costs the allocation paths nothing (they are
//! unchanged), and the report thread's work per version is measured in BENCHMARKS.md.
//!
//! # When it is written
//!
//! With `YING_LIVE_FILE` on (the default) or a directory; its opens are in the report thread's
//! own descriptor table (`sys::fds`), never the program's. By the report thread (so not with
//! `YING_CHECK_INTERVAL_SECS=0`), every
//! `YING_LIVE_INTERVAL_MS` when the allocated or freed bytes moved since the last version,
//! backing off to 20 times the time the last version took when that is longer (a large table
//! never costs more than 5 % of one core). A retained total that grows by a 32nd (and at
//! least 1 MiB) since the last version gets one at once, and while it grows the thread looks
//! every 25 ms: the spike before an OOM kill is what the file is for. When nothing moved, only
//! the file's modification time is set, every 5 s (the heartbeat: "last seen alive"). The first version is written 100 ms
//! after the report thread starts, or at the first look after that (every 100 ms for its
//! first 10 s) that finds a sample, so that an early death leaves its heap while processes
//! that live less (a shell's subshell, most compiler passes) write none: `make -j2` of 50
//! files under the shim slowed by a third when each of them wrote one (BENCHMARKS.md,
//! per-process cost). The rows
//! are streamed after the rest of the message, so a version holds one row at a time beyond
//! the stack table. A normal exit removes it after the exit report
//! (`YING_KEEP_LIVE_FILE` keeps it). A `fork` child writes its own file, named by its own pid,
//! once its report thread runs. A write that fails (disk full, directory removed) is said once
//! on stderr, and the profiler goes on in memory.

pub(crate) mod format;
pub mod read;
pub(crate) mod write;

/// The format's version, written in every file; a reader refuses a newer major version.
pub(crate) const VERSION: u32 = 1;

/// The extension of live files.
pub const EXTENSION: &str = "live";

/// The live file's name for the process `process` running `exe_name`:
/// `ying.<exe>.<pid>-<instance>.live`.
pub fn file_name(exe_name: &str, process: super::ProcessId) -> String {
    format!("ying.{exe_name}.{process}.{EXTENSION}")
}

/// Whether `name` is a process's live file (`ying.<exe>.<pid>.live`), not a report set's raw
/// profile (`ying.<exe>.<pid>.<seq>.<time>.live`, `YING_SYMBOLIZE=offline`).
pub fn is_live_file_name(name: &str) -> bool {
    name.starts_with("ying.")
        && name.ends_with(&format!(".{EXTENSION}"))
        && crate::report::SetName::parse_file(name).is_none()
}

pub use read::{LiveProfile, LiveReport};
