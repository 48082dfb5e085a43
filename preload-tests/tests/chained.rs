//! Chaining: with another allocator after `libying.so` in the preload list
//! (`LD_PRELOAD=libying.so:<allocator>`), every malloc-family call and C++ operator new/delete
//! goes to that allocator and Ying profiles on top of it. Checked for jemalloc, tcmalloc,
//! tcmalloc_minimal and mimalloc, each against the same allocator preloaded alone (the plain
//! run of [`Run::preload_after`]), since a profiler must be invisible whatever the allocator:
//!
//! * exact mode (`YING_SAMPLE_INTERVAL_BYTES=1`) under `programs/exact.c` (the malloc family)
//!   and `programs/cxx.cpp` (new/delete, aligned new): per marker, the retained and allocated
//!   bytes of the folded profile and of the manifest's entries are what the program counted
//!   with the allocator's own `malloc_usable_size` and no header (`YING_TEST_CHUNK_HEADER=0`),
//!   to the byte; the allocations, frees and live allocations per marker are those of the
//!   program's source and of the same run under glibc (sizes depend on the allocator, counts
//!   must not);
//! * the text report's header names the chained library in its `allocator:` line and counts
//!   usable bytes (`bytes counted:`), while a run without a chained allocator names glibc and
//!   counts glibc chunks;
//! * C++ allocation failures (`programs/cxx_bad_alloc.cpp`): `std::bad_alloc` thrown through
//!   the shim's `operator new`, the new-handler, the nothrow forms, as without the shim, and a
//!   request over `YING_MAX_ALLOC_BYTES` refused rather than passed to the allocator's own
//!   `operator new`;
//! * real programs (sqlite3 building an in-memory table, python3 allocating from four threads,
//!   `programs/threads.c`'s 16 threads freeing each other's blocks) exit the same and print the
//!   same as under the allocator alone, the shim writes no `ying:` line, and the report lists
//!   stacks that name the program's own functions.
//!
//! The allocators are Debian packages that `scripts/test.sh` installs; a missing one fails its
//! tests with the package to install, unless `YING_TEST_ALLOW_MISSING_ALLOCATORS=1` (then they
//! print `SKIPPED:` and pass).

use std::path::{Path, PathBuf};
use std::time::Duration;

use preload_tests::{
    CXX_PROGRAM, Comparison, Counts, EXACT, EXACT_ALLOCATED, EXACT_PROGRAM, ExactProgram, Run,
    TestDir, check_entries, check_folded_bytes, compare, compare_unchecked, marker_counts,
    preload_lib, python3, require_tool,
};

/// An allocator to chain to, and the Debian package that installs it.
struct Allocator {
    /// Its name in test and directory names.
    name: &'static str,
    /// The shared object preloaded after `libying.so`.
    path: &'static str,
    /// The Debian package with that file.
    package: &'static str,
}

const JEMALLOC: Allocator = Allocator {
    name: "jemalloc",
    path: "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    package: "libjemalloc2",
};
const TCMALLOC: Allocator = Allocator {
    name: "tcmalloc",
    path: "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
    package: "libgoogle-perftools4",
};
const TCMALLOC_MINIMAL: Allocator = Allocator {
    name: "tcmalloc_minimal",
    path: "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    package: "libtcmalloc-minimal4",
};
const MIMALLOC: Allocator = Allocator {
    name: "mimalloc",
    path: "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
    package: "libmimalloc2.0",
};

/// The allocator's shared object; `None` (the test is skipped) when it is missing and
/// `YING_TEST_ALLOW_MISSING_ALLOCATORS=1`.
///
/// # Panics
/// When it is missing otherwise, naming the package to install.
fn installed(a: &Allocator) -> Option<PathBuf> {
    let path = PathBuf::from(a.path);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("YING_TEST_ALLOW_MISSING_ALLOCATORS").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: {} is not installed (Debian package {})", a.path, a.package);
        return None;
    }
    panic!(
        "{} is not installed: install the Debian package {} (`apt-get install {}`; \
         scripts/test.sh does), or set YING_TEST_ALLOW_MISSING_ALLOCATORS=1 to skip the tests \
         of {}",
        a.path, a.package, a.package, a.name
    );
}

/// The value of the header line `key` (`allocator:`, `bytes counted:`) of the main report's
/// text, the padding after the key removed; fails the test when there is none.
fn header_value(c: &Comparison, key: &str) -> String {
    let text = c.main_report().text();
    let value = text.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string());
    c.check(
        value.is_some(),
        format!("the text report has no `{key}` line; it starts:\n{}", head(&text)),
    );
    value.unwrap_or_default()
}

/// The first lines of a text report, for failure messages.
fn head(text: &str) -> String {
    text.lines().take(20).collect::<Vec<_>>().join("\n")
}

/// The header names `lib` (as preloaded, or with its symbolic links resolved) as the allocator
/// Ying runs under, and counts its usable bytes.
fn check_chained_header(c: &Comparison, lib: &Path) {
    let allocator = header_value(c, "allocator:");
    let names = [lib.to_path_buf(), std::fs::canonicalize(lib).unwrap_or(lib.to_path_buf())]
        .map(|p| format!("{}, under Ying", p.display()));
    c.check(
        names.contains(&allocator),
        format!("`allocator: {allocator}`, expected `allocator: {}`", names[0]),
    );
    let counted = header_value(c, "bytes counted:");
    c.check(
        counted.starts_with("usable bytes") && counted.contains("malloc_usable_size"),
        format!("`bytes counted: {counted}`: not the chained allocator's usable bytes"),
    );
}

/// The header names glibc (`glibc (<path of libc.so.6>)`) and counts its chunks.
fn check_glibc_header(c: &Comparison) {
    let allocator = header_value(c, "allocator:");
    let libc = allocator.strip_prefix("glibc (").and_then(|s| s.strip_suffix(')'));
    c.check(
        libc.is_some_and(|p| p.starts_with('/') && p.ends_with("/libc.so.6")),
        format!("`allocator: {allocator}`, expected `allocator: glibc (/.../libc.so.6)`"),
    );
    let counted = header_value(c, "bytes counted:");
    c.check(
        counted.starts_with("glibc chunk bytes"),
        format!("`bytes counted: {counted}`: not glibc chunk bytes"),
    );
}

/// The run with the shim preloaded `libying.so:<lib>`, the plain run `<lib>` alone.
fn check_preloads(c: &Comparison, lib: &Path) {
    let preload = |vars: &[(String, String)]| {
        vars.iter().find(|(k, _)| k == "LD_PRELOAD").map(|(_, v)| v.clone()).unwrap_or_default()
    };
    let (lib, shim) = (lib.display().to_string(), preload_lib().display().to_string());
    c.check(preload(&c.without.vars) == lib, format!("the plain run does not preload {lib} alone"));
    c.check(
        preload(&c.with.vars) == format!("{shim}:{lib}"),
        format!("the run with the shim does not preload {shim}:{lib}"),
    );
}

/// `program` in exact mode under the shim chained to `a`: bytes per marker as the program
/// counted them with the allocator's usable sizes, retained and allocated; the header; and per
/// marker the same counts as in the source and under glibc.
fn exact_under(a: &Allocator, program: &ExactProgram) {
    let Some(lib) = installed(a) else { return };
    let stem = program.source.split('.').next().unwrap_or("program");
    let dir = TestDir::new(&format!("chained-{}-{stem}", a.name));
    let exe = program.compile(&dir);

    // The control: glibc, whose chunks carry the default 8-byte header.
    let reports = dir.reports("glibc");
    let glibc = program.compare(&program.run(&exe, &reports), EXACT_ALLOCATED, &reports);
    check_folded_bytes(&glibc, program.markers);
    check_entries(&glibc, program.markers);
    let under_glibc = marker_counts(&glibc, program.markers);
    // The program maps nothing itself: what the allocator maps for its own arenas is not a
    // program's mapping (under glibc, its heaps are not counted either).
    let mapped = |c: &Comparison| c.main_report().manifest().mapped.map(|m| (m.bytes, m.regions));
    let glibc_mapped = mapped(&glibc);

    for (measure, vars) in [("retained", EXACT), ("allocated", EXACT_ALLOCATED)] {
        let reports = dir.reports(measure);
        let run =
            program.run(&exe, &reports).preload_after(&lib).env("YING_TEST_CHUNK_HEADER", "0");
        let c = program.compare(&run, vars, &reports);
        check_preloads(&c, &lib);
        check_chained_header(&c, &lib);
        check_folded_bytes(&c, program.markers);
        check_entries(&c, program.markers);
        let chained_mapped = mapped(&c);
        c.check(
            chained_mapped == glibc_mapped && glibc_mapped.is_some(),
            format!(
                "mapped bytes and regions under {}: {chained_mapped:?}, under glibc: \
                 {glibc_mapped:?} (the allocator's own mappings counted as the program's?)",
                a.name
            ),
        );
        if measure == "allocated" {
            let counts = marker_counts(&c, program.markers);
            c.check(
                counts == under_glibc,
                format!(
                    "allocations, frees and live allocations per marker differ from glibc's:\n\
                     under {}: {counts:#?}\nunder glibc: {under_glibc:#?}",
                    a.name
                ),
            );
        }
    }
}

/// The settings of the real programs: a sample every 4 KiB on average, ranked and folded by
/// allocated bytes (so that every report lists stacks, also of programs that free all they
/// allocated before exit), a fixed seed, the report thread as by default.
const SAMPLED: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "4096"),
    ("YING_MEASURE_ALLOCATED_NOT_RETAINED", "true"),
    ("YING_SEED", "1"),
];

/// How long a real program may take under either run.
const REAL_TIMEOUT: Duration = Duration::from_secs(120);

/// `run` chained to `lib` against `lib` alone: same status and output (checked by [`compare`]),
/// success, no `ying:` line, the header naming `lib`, and a report whose top stacks have frames
/// and one of them a frame that `own` accepts (the program's own code).
fn real_program_under(
    lib: &Path,
    run: Run,
    reports: &Path,
    own: impl Fn(&str) -> bool,
) -> Comparison {
    let c = compare(&run.preload_after(lib).timeout(REAL_TIMEOUT), SAMPLED, reports);
    c.check(c.with.success(), "the program failed");
    c.assert_no_ying_lines();
    check_preloads(&c, lib);
    check_chained_header(&c, lib);
    let m = c.main_report().manifest();
    c.check(m.ranked_by == "allocated", "the report is not ranked by allocated bytes");
    c.check(!m.entries.is_empty(), "the report lists no stack");
    let top = &m.entries[..m.entries.len().min(5)];
    c.check(
        top.iter().all(|e| !e.frames.is_empty() && e.allocated_bytes > 0),
        format!("a top stack without frames or bytes: {top:#?}"),
    );
    c.check(
        m.entries.iter().any(|e| e.frames.iter().any(|f| own(&f.function))),
        "no stack goes through the program's own functions",
    );
    c
}

/// An in-memory table of 200,000 rows, its count printed.
const SQL: &str = "CREATE TABLE t(i INTEGER PRIMARY KEY, s TEXT); \
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) \
    INSERT INTO t SELECT x, printf('%020d', x) FROM c; \
    CREATE INDEX ts ON t(s); \
    SELECT count(*), sum(length(s)) FROM t;";

fn sqlite3_under(a: &Allocator) {
    let Some(lib) = installed(a) else { return };
    let Some(sqlite) = require_tool("sqlite3") else { return };
    let dir = TestDir::new(&format!("chained-{}-sqlite3", a.name));
    let run = Run::new(&sqlite).args(&[":memory:", SQL]);
    let c = real_program_under(&lib, run, &dir.reports("sqlite3"), |f| f.starts_with("sqlite3"));
    c.check(c.with.stdout_str() == "200000|4000000\n", "unexpected output from sqlite3");
}

/// Four threads build dicts, strings and big bytes objects (over pymalloc's 512 bytes, so they
/// come from malloc), some freed as they go; prints a total independent of scheduling.
const PY: &str = r#"
import json, threading
results = [0] * 4
def work(t):
    d = {}
    for i in range(20000):
        d[i] = json.dumps({"t": t, "i": i, "s": "x" * (i % 700)})
        if i % 3 == 0:
            del d[i]
    blobs = [bytearray(600 + (i * 37) % 9000) for i in range(3000)]
    results[t] = sum(map(len, d.values())) + sum(map(len, blobs))
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print(results)
"#;

fn python3_under(a: &Allocator) {
    let Some(lib) = installed(a) else { return };
    let Some((py, _)) = python3() else { return };
    let dir = TestDir::new(&format!("chained-{}-python3", a.name));
    let run = Run::new(&py).args(&["-c", PY]);
    let c = real_program_under(&lib, run, &dir.reports("python3"), |f| {
        f.starts_with("Py") || f.starts_with("_Py")
    });
    c.check(c.with.stdout_str().starts_with('['), "unexpected output from python3");
}

fn threads_under(a: &Allocator) {
    let Some(lib) = installed(a) else { return };
    let dir = TestDir::new(&format!("chained-{}-threads", a.name));
    let exe = dir.compile_c("threads.c", &["-pthread"]);
    let run = Run::new(&exe);
    let c = real_program_under(&lib, run, &dir.reports("threads"), |f| {
        f == "marker_thread_handoff" || f == "marker_thread_keep"
    });
    c.check(c.with.stdout_str().starts_with("threads 16 rounds 40 checksum "), "unexpected output");
}

/// `programs/cxx_bad_alloc.cpp` under the shim over `lib` (glibc when `None`): C++ allocation
/// failures behave as under the allocator alone, printed line for line. `std::bad_alloc` is
/// thrown through the shim's `operator new` (a first version aborted there: the library is
/// built with `panic = "abort"`, and the exception crossed a Rust frame), the new-handler is
/// called as often, the nothrow forms return null. The last line differs on purpose: a request
/// above `YING_MAX_ALLOC_BYTES` (1 MiB here) that the plain run allocates is refused under the
/// shim, with `std::bad_alloc`, and is not handed to the chained allocator's own
/// `operator new` behind Ying's back.
fn bad_alloc_under(name: &str, lib: Option<&Path>) {
    let dir = TestDir::new(&format!("chained-{name}-bad-alloc"));
    let exe = dir.compile_cxx("cxx_bad_alloc.cpp", &[]);
    let mut run = Run::new(&exe).args(&["2097152"]).timeout(REAL_TIMEOUT);
    if let Some(lib) = lib {
        run = run.preload_after(lib);
    }
    let vars = [("YING_MAX_ALLOC_BYTES", "1048576"), ("YING_CHECK_INTERVAL_SECS", "0")];
    let c = compare_unchecked(&run, &vars, &dir.reports("bad-alloc"));
    c.check(
        c.with.status_text() == c.without.status_text(),
        "exit status differs from the allocator's alone",
    );
    let (plain, with) = (c.without.stdout_str(), c.with.stdout_str());
    let body =
        |s: &str| s.lines().filter(|l| !l.starts_with("giant:")).collect::<Vec<_>>().join("\n");
    c.check(body(&with) == body(&plain), "C++ allocation failures differ from the plain run");
    if c.without.success() {
        c.check(plain.contains("giant: allocated"), "the plain run did not allocate 2 MiB");
        c.check(
            with.contains("giant: threw bad_alloc"),
            "a request above YING_MAX_ALLOC_BYTES was not refused with std::bad_alloc",
        );
        c.check(
            with.contains("threw bad_alloc after 2 handler calls"),
            "the new-handler was not called twice before std::bad_alloc",
        );
    }
}

#[test]
fn glibc_bad_alloc_behaves_as_without_the_shim() {
    bad_alloc_under("glibc", None);
}

/// The tests of one allocator, in a module named after it.
macro_rules! allocator_tests {
    ($($module:ident: $allocator:expr;)*) => {$(
        mod $module {
            use super::*;

            #[test]
            fn exact_c_bytes_and_counts_per_marker() {
                exact_under(&$allocator, &EXACT_PROGRAM);
            }

            #[test]
            fn cxx_bytes_and_counts_per_marker() {
                exact_under(&$allocator, &CXX_PROGRAM);
            }

            #[test]
            fn sqlite3_in_memory_table() {
                sqlite3_under(&$allocator);
            }

            #[test]
            fn python3_allocating_from_threads() {
                python3_under(&$allocator);
            }

            #[test]
            fn threads_freeing_each_others_blocks() {
                threads_under(&$allocator);
            }

            #[test]
            fn cxx_allocation_failures_behave_as_without_the_shim() {
                let Some(lib) = installed(&$allocator) else { return };
                bad_alloc_under($allocator.name, Some(&lib));
            }
        }
    )*};
}

allocator_tests! {
    jemalloc: JEMALLOC;
    tcmalloc: TCMALLOC;
    tcmalloc_minimal: TCMALLOC_MINIMAL;
    mimalloc: MIMALLOC;
}

/// Without a chained allocator the header names glibc and counts its chunks, and the counts
/// per marker are those of the source (the control of every allocator's exact test).
#[test]
fn glibc_header_and_counts_without_a_chained_allocator() {
    for program in [EXACT_PROGRAM, CXX_PROGRAM] {
        let dir = TestDir::new("chained-glibc");
        let exe = program.compile(&dir);
        let reports = dir.reports("glibc");
        let c = program.compare(&program.run(&exe, &reports), EXACT_ALLOCATED, &reports);
        check_glibc_header(&c);
        check_entries(&c, program.markers);
        let want: Vec<_> = program
            .markers
            .iter()
            .map(|m| {
                let counts = Counts {
                    allocations: m.allocations,
                    frees: m.allocations - m.live,
                    live: m.live,
                };
                (m.name, counts)
            })
            .collect();
        let got = marker_counts(&c, program.markers);
        c.check(got == want, format!("counts per marker {got:#?}, expected {want:#?}"));
    }
}
