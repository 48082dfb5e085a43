//! What the shim costs and changes for a process as a whole: no report thread at start (a
//! process that must be single-threaded, such as `unshare --user`, works), no report set from a
//! process that took no sample, report threads started in fork children at their own safe
//! points, complete report sets when the program exits during a periodic dump, and a warning
//! plus a report header line when the program's `malloc` is not the shim's.

use std::time::Duration;

use preload_tests::{
    EXACT, Run, TestDir, compare, find_in_path, programs_dir, report_sets, require_tool,
    workspace_root,
};

/// Default settings, but a fixed seed.
const DEFAULTS: &[(&str, &str)] = &[("YING_SEED", "1")];

#[test]
fn main_starts_single_threaded_with_default_settings() {
    let dir = TestDir::new("threads-at-start");
    let exe = dir.compile_c("threads_at_start.c", &[]);
    let c = compare(&Run::new(&exe), DEFAULTS, &dir.reports("start"));
    c.check(c.with.success(), "threads_at_start failed");
    c.check(c.with.stdout_str() == "threads at start: 1\n", "main did not start single-threaded");
    c.assert_no_ying_lines();
}

#[test]
fn unshare_user_namespace_works_under_the_shim() {
    let Some(unshare) = require_tool("unshare") else { return };
    let Some(truth) = find_in_path("true") else { return };
    let plain = Run::new(&unshare).args(&["--user", "--map-root-user"]).arg(&truth).run();
    if !plain.success() {
        eprintln!(
            "SKIPPED: this kernel or sandbox refuses user namespaces even without the shim \
             (unshare --user --map-root-user true: {}); nothing to compare",
            plain.status_text()
        );
        return;
    }
    let dir = TestDir::new("unshare");
    let run = Run::new(&unshare).args(&["--user", "--map-root-user"]).arg(&truth);
    let c = compare(&run, DEFAULTS, &dir.reports("unshare"));
    c.check(c.with.success(), "unshare --user --map-root-user true failed under the shim");
    c.assert_no_ying_lines();
}

#[test]
fn a_process_that_took_no_sample_writes_no_report() {
    let Some(truth) = find_in_path("true") else { return };
    let dir = TestDir::new("no-sample");
    // Default sampling: /bin/true allocates far less than the 512 KiB sample interval.
    let c = compare(&Run::new(&truth), DEFAULTS, &dir.reports("true"));
    c.check(c.with.success(), "true failed");
    c.assert_no_ying_lines();
    c.check(c.report_sets().is_empty(), "a report set from a process that took no sample");
    // Every allocation sampled: the same kind of process that does allocate reports.
    let exe = dir.compile_c("hello.c", &[]);
    let c = compare(&Run::new(&exe), EXACT, &dir.reports("hello"));
    c.check(c.main_reports().len() == 1, "no report set from a process that took samples");
}

#[test]
fn fork_children_that_take_no_sample_write_no_report() {
    // The children inherit the parent's records but sample nothing themselves (subshells).
    let dir = TestDir::new("fork-idle");
    let exe = dir.compile_c("fork_idle.c", &[]);
    let c = compare(&Run::new(&exe), DEFAULTS, &dir.reports("idle"));
    c.check(c.with.success(), "fork_idle failed");
    c.check(c.with.stdout_str() == "3 children exited with 0\n", "unexpected output");
    c.assert_no_ying_lines();
    let pids: Vec<u32> = c.report_sets().iter().map(|s| s.pid).collect();
    c.check(
        pids == [c.with.pid],
        format!("report sets from pids {pids:?}, expected the parent only"),
    );
}

#[test]
fn a_fork_child_starts_its_own_report_thread_at_a_safe_point() {
    let dir = TestDir::new("fork-sleep");
    let exe = dir.compile_c("fork_sleep.c", &[]);
    let vars = [
        ("YING_SAMPLE_INTERVAL_BYTES", "1"),
        ("YING_SEED", "1"),
        ("YING_CHECK_INTERVAL_SECS", "1"),
    ];
    let c = compare(&Run::new(&exe), &vars, &dir.reports("fork"));
    c.check(c.with.success(), "fork_sleep failed");
    c.assert_no_ying_lines();
    let child: Vec<u64> =
        c.report_sets().iter().filter(|s| s.pid != c.with.pid).map(|s| s.seq).collect();
    // A periodic report at about 1 s (the child sleeps 1.5 s), then the exit report.
    c.check(child == [0, 1], format!("child report sequence numbers {child:?}, expected [0, 1]"));
}

/// Runs dump_race.c with a check every second and every allocation sampled.
fn dump_race(dir: &TestDir, exe: &std::path::Path, name: &str, at_exit: &str) {
    let reports = dir.reports(name);
    let vars = [
        ("YING_SAMPLE_INTERVAL_BYTES", "1"),
        ("YING_SEED", "1"),
        ("YING_CHECK_INTERVAL_SECS", "1"),
        ("YING_REPORT_AT_EXIT", at_exit),
    ];
    let c = compare(&Run::new(exe).arg(&reports), &vars, &reports);
    c.check(c.with.success(), "dump_race failed");
    c.check(c.with.stdout_str() == "allocated at 65536 stacks\n", "unexpected output");
    let sets = c.main_reports();
    c.check(sets.first().is_some_and(|s| s.seq == 0), "no periodic report (sequence 0)");
    for s in &sets {
        for ext in ["txt", "folded", "svg", "pb.gz"] {
            c.check(
                s.has(ext),
                format!("report set {} has no .{ext}: cut off by the exit", s.stem),
            );
        }
    }
}

#[test]
fn an_exit_during_a_periodic_dump_leaves_complete_sets() {
    let dir = TestDir::new("dump-race");
    let exe = dir.compile_c("dump_race.c", &[]);
    // Without an exit report the exit follows the text file of the periodic dump at once.
    dump_race(&dir, &exe, "no-exit-report", "false");
    // With one, both sets must be complete.
    dump_race(&dir, &exe, "exit-report", "true");
}

#[test]
fn a_program_with_its_own_malloc_is_named_and_its_reports_say_so() {
    let dir = TestDir::new("own-malloc");
    let exe = dir.compile_c("own_malloc.c", &["-rdynamic"]);
    let c = compare(&Run::new(&exe), DEFAULTS, &dir.reports("own"));
    c.check(c.with.success(), "own_malloc failed");
    let lines = c.with.ying_lines();
    let named = exe.display().to_string();
    c.check(
        lines.len() == 1
            && lines[0].starts_with("ying: warning: malloc is defined by ")
            && lines[0].contains(&named),
        format!("expected one warning naming {named}, got {lines:?}"),
    );
    let m = c.main_report().manifest();
    let owner = m.foreign_malloc.clone().unwrap_or_default();
    c.check(owner.contains(&named), format!("no foreign malloc naming {named}: {owner:?}"));
    c.check(m.totals.allocated_bytes == 0, "the shim saw allocations after all?");
}

/// A position-dependent executable that takes `malloc`'s address makes its PLT stub the
/// function's canonical address (Debian's `python3.11` is one): the shim must not take the stub
/// for an allocator of the program's own and must report the heap it does see.
#[test]
fn a_position_dependent_program_taking_mallocs_address_is_not_called_foreign() {
    let dir = TestDir::new("malloc-address");
    let exe = dir.compile_c("malloc_address.c", &["-no-pie", "-fno-pie"]);
    let c = compare(&Run::new(&exe), DEFAULTS, &dir.reports("addr"));
    c.check(c.with.success(), "malloc_address failed");
    let lines = c.with.ying_lines();
    c.check(lines.is_empty(), format!("expected no ying line, got {lines:?}"));
    let m = c.main_report().manifest();
    c.check(m.foreign_malloc.is_none(), "the report says the heap was not seen");
    let allocated = m.totals.allocated_bytes;
    c.check(allocated >= 8 << 20, format!("allocated (exact) {allocated} < 8 MiB"));
}

#[test]
fn rustc_with_its_own_jemalloc_is_named() {
    // rustc links jemalloc and exports it as `malloc`; other toolchains may not.
    let Some(rustc) = require_tool("rustc") else { return };
    let exports_malloc = Run::new("nm")
        .args(&["-D", "--defined-only"])
        .arg(std::fs::canonicalize(&rustc).unwrap_or(rustc.clone()))
        .run();
    let real = Run::new(&rustc).args(&["--print", "sysroot"]).run();
    let sysroot = real.stdout_str().trim().to_string();
    let bin = std::path::Path::new(&sysroot).join("bin/rustc");
    let defines = |o: &preload_tests::Outcome| {
        o.stdout_str().lines().any(|l| l.split_whitespace().last() == Some("malloc"))
    };
    let bin_defines =
        bin.is_file() && defines(&Run::new("nm").args(&["-D", "--defined-only"]).arg(&bin).run());
    if !bin_defines && !defines(&exports_malloc) {
        eprintln!("SKIPPED: this rustc does not export its own malloc (no jemalloc built in)");
        return;
    }
    let target = if bin_defines { bin } else { rustc };
    let dir = TestDir::new("rustc");
    let c = compare(&Run::new(&target).arg("--version"), DEFAULTS, &dir.reports("rustc"));
    c.check(c.with.success(), "rustc --version failed");
    let lines = c.with.ying_lines();
    c.check(
        lines
            .iter()
            .any(|l| l.starts_with("ying: warning: malloc is defined by ") && l.contains("rustc")),
        format!("no warning naming rustc as the owner of malloc: {lines:?}"),
    );
    let sets = report_sets(&c.reports);
    c.check(
        sets.iter().any(|s| s.manifest().foreign_malloc.is_some()),
        "no report header saying Ying saw nothing of rustc's heap",
    );
}

#[test]
fn a_rust_program_with_the_jemalloc_crate_is_named() {
    // programs/jemalloc_crate: tikv-jemallocator built in unprefixed. Built offline into a
    // target directory of its own that later runs reuse; skipped where its crates are missing.
    let manifest = programs_dir().join("jemalloc_crate/Cargo.toml");
    let target = workspace_root().join("target/preload-tests-jemalloc");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let build = Run::new(cargo)
        .args(&["build", "--release", "--offline", "--locked", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .timeout(Duration::from_secs(900))
        .run();
    if !build.success() {
        let why = build.stderr_str().lines().last().unwrap_or("").to_string();
        eprintln!("SKIPPED: the jemalloc crate program does not build offline here ({why})");
        return;
    }
    let exe = target.join("release/ying-test-jemalloc-crate");
    let dir = TestDir::new("jemalloc-crate");
    let c = compare(&Run::new(&exe), DEFAULTS, &dir.reports("jemalloc"));
    c.check(c.with.success(), "the jemalloc crate program failed");
    c.check(c.with.stdout_str() == "jemalloc crate: 100000 strings\n", "unexpected output");
    let named = exe.display().to_string();
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].starts_with("ying: warning: malloc is defined by ")
            && lines[0].contains(&named),
        format!("expected one warning naming {named}, got {lines:?}"),
    );
    let owner = c.main_report().manifest().foreign_malloc.unwrap_or_default();
    c.check(owner.contains(&named), format!("no foreign malloc naming {named}: {owner:?}"));
}
