//! The resident set explained (`src/report/model/rss.rs`): `programs/rss_parts.c` grows one
//! part of its resident set per mode and measures the kernel's own figure (`Rss:` of
//! `/proc/self/smaps_rollup`) before and after. In each exit report the parts sum exactly to
//! `rss_bytes`, `rss_bytes` is the kernel's figure (plus what the exit report itself made
//! resident, which is the profiler's and its threads'), and the part the mode grows grew, over
//! the same part of a run that grows nothing, by what the kernel saw the program add.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use preload_tests::{EXACT, Run, TestDir, compare};

/// One run's figures: the exit report's breakdown and the program's own lines.
#[derive(Debug, Clone)]
struct Grown {
    rss: u64,
    parts: BTreeMap<String, u64>,
    /// `rss_after - rss_before`, the kernel's figure of what the program added.
    kernel_added: i64,
    rss_after: u64,
    /// The program's other lines (`added`, `retained`, `freed`).
    lines: BTreeMap<String, u64>,
    description: String,
}

impl Grown {
    fn part(&self, name: &str) -> u64 {
        *self.parts.get(name).unwrap_or_else(|| panic!("no part {name}: {self:#?}"))
    }

    /// How much `name` grew over `base`.
    fn delta(&self, base: &Grown, name: &str) -> i64 {
        self.part(name) as i64 - base.part(name) as i64
    }
}

fn run_mode(mode: &str, arg: Option<&str>) -> Grown {
    let name = format!("rss-{mode}");
    let dir = TestDir::new(&name);
    let exe = dir.compile_c("rss_parts.c", &["-pthread", "-ldl"]);
    let reports = dir.reports(&name);
    let expect = dir.join("expect.txt");
    let mut run = Run::new(&exe).arg(mode).env("EXPECT_FILE", expect.display().to_string());
    if let Some(a) = arg {
        run = run.arg(a);
    }
    // Exact mode: a program that took no sample writes no exit report.
    let c = compare(&run, EXACT, &reports);
    c.check(c.with.success(), format!("rss_parts.c {mode} failed"));
    let m = c.main_report().manifest();
    let text = std::fs::read_to_string(&expect).expect("rss_parts.c wrote its figures");
    let mut lines = BTreeMap::new();
    for l in text.lines() {
        let (k, v) = l.split_once(' ').expect("key value");
        lines.insert(k.to_string(), v.parse::<u64>().expect("a number"));
    }
    let (before, after) = (lines["rss_before"], lines["rss_after"]);
    let g = Grown {
        rss: m.rss_bytes.unwrap_or_else(|| panic!("no rss_bytes\n{}", c.describe())),
        parts: m.rss_breakdown.clone().unwrap_or_else(|| panic!("no rss_breakdown")),
        kernel_added: after as i64 - before as i64,
        rss_after: after,
        lines,
        description: c.main_report().text().lines().take(40).collect::<Vec<_>>().join("\n"),
    };
    eprintln!("{mode}: rss {} kernel added {} parts {:?}", g.rss, g.kernel_added, g.parts);
    check_sum_and_kernel(&g);
    g
}

/// The parts sum to `rss_bytes`, and `rss_bytes` is the kernel's figure at the end of `main`
/// plus at most what the exit report made resident: the profiler's part, the thread stacks'
/// (the report thread) and a little more (the smaps text, the dying `main`'s buffers).
fn check_sum_and_kernel(g: &Grown) {
    let sum: u64 = g.parts.values().sum();
    assert_eq!(sum, g.rss, "the parts do not sum to rss_bytes: {g:#?}");
    assert_eq!(g.parts.len(), 8, "{g:#?}");
    let slack = g.part("profiler") + g.part("thread_stacks") + (8 << 20);
    assert!(
        g.rss + (2 << 20) >= g.rss_after && g.rss <= g.rss_after + slack,
        "rss_bytes {} vs the kernel's {} at the end of main (slack {slack})\n{}",
        g.rss,
        g.rss_after,
        g.description
    );
}

/// The run that grows nothing, shared by every test.
fn baseline() -> &'static Grown {
    static BASE: OnceLock<Grown> = OnceLock::new();
    BASE.get_or_init(|| run_mode("none", None))
}

/// `got` is within 10 % (and 2 MiB) of `want`.
fn near(got: i64, want: i64) -> bool {
    (got - want).abs() <= want.abs() / 10 + (2 << 20)
}

/// Checks that part `name` grew by the kernel's figure of what the program added.
fn grew_by_kernel_figure(g: &Grown, name: &str) {
    let base = baseline();
    let grown = g.delta(base, name);
    let kernel = g.kernel_added - base.kernel_added;
    assert!(
        near(grown, kernel),
        "{name} grew by {grown} bytes, the kernel saw {kernel} added\n{g:#?}\nbaseline {base:#?}"
    );
    let added = g.lines["added"] as i64;
    assert!(near(grown, added), "{name} grew by {grown} bytes, the program added {added}");
}

#[test]
fn fragmented_frees_grow_the_malloc_overhead() {
    let g = run_mode("overhead", None);
    let base = baseline();
    let (in_use, overhead) = (g.delta(base, "heap_in_use"), g.delta(base, "allocator_overhead"));
    // Exact mode records every block: the profiler's tables grow too, in its own part.
    let profiler = g.delta(base, "profiler");
    let kernel = g.kernel_added - base.kernel_added;
    assert!(
        near(in_use + overhead + profiler, kernel),
        "heap in use {in_use} + overhead {overhead} + profiler {profiler} vs the kernel's {kernel}\n{g:#?}"
    );
    // 100,000 chunks of 256 bytes freed between 100,000 kept: glibc cannot return them.
    let freed_chunks = (g.lines["freed"] / 240 * 256) as i64;
    assert!(near(overhead, freed_chunks), "overhead grew {overhead}, {freed_chunks} freed\n{g:#?}");
    assert!(near(in_use, freed_chunks), "heap in use grew {in_use}, {freed_chunks} kept\n{g:#?}");
}

#[test]
fn a_hundred_threads_grow_the_thread_stacks() {
    let g = run_mode("threads", None);
    grew_by_kernel_figure(&g, "thread_stacks");
}

#[test]
fn a_file_mapping_touched_grows_the_file_mappings() {
    let dir = TestDir::new("rss-file-data");
    let file = dir.join("data.bin");
    let g = run_mode("file", Some(&file.display().to_string()));
    grew_by_kernel_figure(&g, "file_mappings");
}

#[test]
fn a_big_library_loaded_grows_the_binaries() {
    // Built here, so the test never depends on what the machine happens to have installed.
    let dir = TestDir::new("rss-big-lib");
    let lib = dir.compile_c("big_lib.c", &["-shared", "-fPIC"]);
    let g = run_mode("binary", Some(&lib.display().to_string()));
    let base = baseline();
    let grown = g.delta(base, "binaries");
    let kernel = g.kernel_added - base.kernel_added;
    // The loader's relocations also write the library's data (counted as binaries too) and
    // allocate a little on the heap: the binaries take most of what the kernel saw added.
    assert!(near(grown, kernel), "binaries grew {grown}, the kernel saw {kernel}\n{g:#?}");
    let read = g.lines["added"] as i64;
    assert!(read >= 24 << 20, "the program read {read} bytes of the library's 24 MiB");
    assert!(grown >= read * 9 / 10, "binaries grew {grown}, the program read {read} bytes");
}

#[test]
fn a_raw_syscall_mapping_is_unseen_anonymous_memory() {
    let g = run_mode("raw", None);
    grew_by_kernel_figure(&g, "unseen_anonymous");
    assert!(g.delta(baseline(), "mmaps_counted").abs() < 1 << 20, "{g:#?}");
}

#[test]
fn a_counted_mmap_is_in_the_mmaps_counted() {
    let g = run_mode("mmap", None);
    grew_by_kernel_figure(&g, "mmaps_counted");
    assert!(g.delta(baseline(), "unseen_anonymous").abs() < 2 << 20, "{g:#?}");
}
