//! The exact-mode programs that count their own bytes, `programs/exact.c` and
//! `programs/cxx.cpp`: their markers and the allocations each makes, how to run them, and the
//! checks of a report against the program's own arithmetic, per marker, to the byte.
//!
//! Each program counts every block of a marker as the shim counts it, its usable size plus a
//! header (`$YING_TEST_CHUNK_HEADER` bytes, 8 when unset: glibc's chunk header; 0 under a
//! chained allocator, whose usable size the shim counts as is), and writes the sums as
//! `chunks <marker> <allocated> <freed>` lines to `$CHUNKS_FILE` (see [`chunk_counts`]).

use std::path::{Path, PathBuf};

use crate::{Comparison, Run, TestDir, chunk_counts, compare};

/// One marker function of an exact-mode program and the allocations it makes, as the program
/// makes them (mirrored here from its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The function's name.
    pub name: &'static str,
    /// Allocations still live at exit.
    pub live: u64,
    /// Allocations made (a realloc'd block is one).
    pub allocations: u64,
}

impl Marker {
    const fn new(name: &'static str, live: u64, allocations: u64) -> Self {
        Self { name, live, allocations }
    }
}

/// A program that counts its own bytes per marker.
#[derive(Debug, Clone, Copy)]
pub struct ExactProgram {
    /// The source in `programs/` (`.c` or `.cpp`).
    pub source: &'static str,
    /// The arguments it runs with.
    pub args: &'static [&'static str],
    /// Its markers.
    pub markers: &'static [Marker],
    /// What it prints: its whole stdout, or its start when `stdout_is_prefix`.
    pub stdout: &'static str,
    /// Whether `stdout` is only the start of the output.
    pub stdout_is_prefix: bool,
}

/// `programs/exact.c`: the malloc family (malloc, calloc, posix_memalign, realloc chains,
/// aligned_alloc, valloc and memalign, realloc to 0 and from NULL, reallocarray).
pub const EXACT_PROGRAM: ExactProgram = ExactProgram {
    source: "exact.c",
    args: &[],
    markers: &[
        Marker::new("marker_keep", 100, 100),
        Marker::new("marker_churn", 0, 50),
        // Each calloc follows a malloc + free of the same size (to dirty the memory it reuses).
        Marker::new("marker_calloc", 10, 20),
        Marker::new("marker_posix_memalign", 20, 20),
        // malloc(1000) -> realloc 30000 -> realloc 2000: one allocation that grew, then shrank.
        Marker::new("marker_realloc_chain", 5, 5),
        Marker::new("marker_aligned_alloc", 0, 4),
        Marker::new("marker_valloc", 6, 6),
        // realloc(p, 0) frees (or, under mimalloc, shrinks a block freed next): one allocation.
        Marker::new("marker_realloc_zero", 0, 3),
        Marker::new("marker_realloc_null", 12, 12),
    ],
    stdout: "kept 153 blocks, checksum ",
    stdout_is_prefix: true,
};

/// `programs/cxx.cpp`: new/delete, new[]/delete[] and aligned new, with the `warmup` argument
/// (see `tests/cxx.rs` for why).
pub const CXX_PROGRAM: ExactProgram = ExactProgram {
    source: "cxx.cpp",
    args: &["warmup"],
    markers: &[
        Marker::new("marker_new", 30, 30),
        Marker::new("marker_new_array", 20, 20),
        Marker::new("marker_aligned_new", 10, 10),
        Marker::new("marker_align_val_new", 8, 8),
        // 12 rounds of new + delete, new[] + delete[] and aligned new + delete.
        Marker::new("marker_new_delete", 0, 36),
    ],
    stdout: "kept 68 objects, checksum 150\n",
    stdout_is_prefix: false,
};

/// Where a program writes its chunk counts for the runs reporting to `reports`.
pub fn chunks_file(reports: &Path) -> PathBuf {
    reports.with_extension("chunks")
}

impl ExactProgram {
    /// Compiles the program into `dir` (`cc` or `c++` by its extension).
    pub fn compile(&self, dir: &TestDir) -> PathBuf {
        if self.source.ends_with(".cpp") {
            dir.compile_cxx(self.source, &[])
        } else {
            dir.compile_c(self.source, &[])
        }
    }

    /// The run of `exe` (this program, compiled) with its arguments, writing its counts to
    /// [`chunks_file`]`(reports)`.
    pub fn run(&self, exe: &Path, reports: &Path) -> Run {
        Run::new(exe).args(self.args).env("CHUNKS_FILE", chunks_file(reports).display().to_string())
    }

    /// [`compare`]s `run` (see [`ExactProgram::run`]) with the shim's settings `ying`,
    /// reporting to `reports`, and asserts that it succeeded, printed what the program prints
    /// and that the shim said nothing on stderr.
    pub fn compare(&self, run: &Run, ying: &[(&str, &str)], reports: &Path) -> Comparison {
        let c = compare(run, ying, reports);
        c.check(c.with.success(), format!("{} failed", self.source));
        let out = c.with.stdout_str();
        let printed =
            if self.stdout_is_prefix { out.starts_with(self.stdout) } else { out == self.stdout };
        c.check(
            printed,
            format!("unexpected output from {}, expected {:?}", self.source, self.stdout),
        );
        c.assert_no_ying_lines();
        c
    }

    /// The markers that keep something until exit.
    pub fn keeping(&self) -> impl Iterator<Item = &'static Marker> {
        self.markers.iter().filter(|m| m.live > 0)
    }
}

/// The bytes (allocated, freed) the program counted for `marker` in the run with the shim (the
/// second run, so the file holds its figures).
pub fn counted_chunks(c: &Comparison, marker: &str) -> (u64, u64) {
    let got = chunk_counts(&chunks_file(&c.reports), marker);
    c.check(got.is_some(), format!("no `chunks {marker} A F` line from the program"));
    got.unwrap_or_default()
}

/// Whether the main report of `c` measures allocated bytes (else retained bytes).
fn measures_allocated(c: &Comparison) -> bool {
    c.main_report().manifest().ranked_by == "allocated"
}

/// The folded profile of an exact-mode run gives each marker the bytes the program counted,
/// to the byte: allocated minus freed when it measures retained bytes, allocated bytes when
/// it measures them.
pub fn check_folded_bytes(c: &Comparison, markers: &[Marker]) {
    let allocated = measures_allocated(c);
    let f = c.main_report().folded();
    for m in markers {
        let (alloc, freed) = counted_chunks(c, m.name);
        let want = if allocated { alloc } else { alloc - freed };
        let got = f.bytes_through(m.name);
        let what = if allocated { "allocated" } else { "retained" };
        c.check(got == want, format!("{}: folded {what} {got} bytes, expected {want}", m.name));
    }
}

/// The manifest's entries through each marker add up to the program's figures, to the byte and
/// allocation: retained bytes and live allocations in a report of retained bytes; allocated
/// and freed bytes, allocations and frees in a report of allocated bytes (a report lists only
/// the stacks with a non-zero figure of its measure, so markers that keep nothing are left out
/// of a report of retained bytes).
pub fn check_entries(c: &Comparison, markers: &[Marker]) {
    let allocated = measures_allocated(c);
    let m = c.main_report().manifest();
    for mk in markers {
        let (alloc, freed) = counted_chunks(c, mk.name);
        let entries: Vec<_> = m.entries_through(mk.name).collect();
        let sum = |f: fn(&crate::Entry) -> u64| entries.iter().map(|e| f(e)).sum::<u64>();
        if !allocated {
            let (bytes, count) = (sum(|e| e.retained_bytes), sum(|e| e.retained_count));
            let want = alloc - freed;
            c.check(
                bytes == want && count == mk.live,
                format!(
                    "{}: the report retains {bytes} bytes in {count} allocations, expected \
                     {want} in {}",
                    mk.name, mk.live
                ),
            );
            continue;
        }
        let (a, n, fb, nf) = (
            sum(|e| e.allocated_bytes),
            sum(|e| e.allocations),
            sum(|e| e.freed_bytes),
            sum(|e| e.frees),
        );
        c.check(
            a == alloc && n == mk.allocations,
            format!(
                "{}: the report allocated {a} bytes in {n}, expected {alloc} in {}",
                mk.name, mk.allocations
            ),
        );
        // What is not retained was freed, by free(), realloc(p, 0) or a shrinking realloc.
        c.check(fb == freed, format!("{}: freed {fb} bytes, expected {freed}", mk.name));
        let frees = mk.allocations - mk.live;
        c.check(nf == frees, format!("{}: {nf} frees, expected {frees}", mk.name));
    }
}

/// The counts of one marker in a report: allocations, frees, and allocations live at exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Allocations (a realloc'd block is one).
    pub allocations: u64,
    /// Frees.
    pub frees: u64,
    /// Allocations live at exit.
    pub live: u64,
}

/// Each marker's [`Counts`] as the main report of `c` gives them (summed over the entries
/// through it); read from a report of allocated bytes, which lists every marker.
pub fn marker_counts(c: &Comparison, markers: &[Marker]) -> Vec<(&'static str, Counts)> {
    let m = c.main_report().manifest();
    c.check(m.ranked_by == "allocated", "marker counts are read from a report of allocated bytes");
    markers
        .iter()
        .map(|mk| {
            let mut n = Counts::default();
            for e in m.entries_through(mk.name) {
                n.allocations += e.allocations;
                n.frees += e.frees;
                n.live += e.retained_count;
            }
            (mk.name, n)
        })
        .collect()
}
