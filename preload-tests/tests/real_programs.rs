//! Real programs under the shim: python3 with threads and with multiprocessing, perl, a gcc
//! compile and a shell pipeline print the same and exit the same with and without it, and leave
//! reports named after their executables; `YING_ONLY_EXE` limits reports to one program.

use std::path::PathBuf;

use preload_tests::{Comparison, QUIET, Run, TestDir, compare, python3, require_tool};

/// A tool's absolute path with symlinks resolved, and the file name the shim uses in report
/// names (that of `/proc/self/exe`). `None` (the test is skipped) when it is not installed.
fn tool(name: &str) -> Option<(PathBuf, String)> {
    let p = require_tool(name)?;
    let real = std::fs::canonicalize(&p).unwrap_or(p);
    let file = real.file_name()?.to_string_lossy().into_owned();
    Some((real, file))
}

/// Asserts the started process left a complete report set named after `exe`.
fn check_main_report(c: &Comparison, exe: &str) {
    let r = c.main_report();
    c.check(r.exe == exe, format!("main report named after {:?}, expected {exe:?}", r.exe));
    c.check(r.has("txt") && r.has("folded") && r.has("svg"), "incomplete report set");
    c.check(r.manifest().pid == c.with.pid, "the report's pid header is not the process's pid");
}

/// No report thread, a fixed seed, a sample every 4 KiB on average: small programs (the gcc
/// driver, `seq`) take samples, and a process that took none writes no report.
const SMALL_PROGRAMS: &[(&str, &str)] = &[
    ("YING_CHECK_INTERVAL_SECS", "0"),
    ("YING_SEED", "1"),
    ("YING_SAMPLE_INTERVAL_BYTES", "4096"),
];

const PY_THREADS: &str = r#"
import threading
results = [None] * 4
def work(i):
    data = []
    for j in range(30000):
        data.append([j, str(j * i), {"k": j}])
    results[i] = sum(x[0] for x in data) + len("".join(x[1] for x in data))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(results)
"#;

#[test]
fn python_with_threads() {
    let Some((py, exe)) = python3() else { return };
    let dir = TestDir::new("python-threads");
    // Default settings, report thread included.
    let c = compare(&Run::new(&py).args(&["-c", PY_THREADS]), &[], &dir.reports("py"));
    c.check(c.with.success(), "python failed");
    c.assert_no_ying_lines();
    check_main_report(&c, &exe);
}

const PY_MP: &str = r#"
import multiprocessing as mp
def square(x):
    return x * x
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        print(sum(pool.map(square, range(2000))), flush=True)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=print, args=("hello from a spawned process",))
    p.start()
    p.join()
    print("spawned process exited with", p.exitcode, flush=True)
"#;

#[test]
fn python_with_multiprocessing() {
    let Some((py, exe)) = python3() else { return };
    let dir = TestDir::new("python-mp");
    let c = compare(&Run::new(&py).args(&["-c", PY_MP]), QUIET, &dir.reports("py"));
    c.check(c.with.success(), "python failed");
    c.check(
        c.with.stdout_str().contains("hello from a spawned process\n")
            && c.with.stdout_str().contains("spawned process exited with 0\n"),
        "unexpected output",
    );
    c.assert_no_ying_lines();
    check_main_report(&c, &exe);
    // The spawned interpreter (fork + exec) exits normally and reports too; the fork-only pool
    // workers end with os._exit, which runs no exit handlers.
    let others: Vec<_> =
        c.report_sets().into_iter().filter(|r| r.pid != c.with.pid && r.exe == exe).collect();
    c.check(!others.is_empty(), "no report from the spawned python process");
}

#[test]
fn perl_building_a_hash() {
    let Some((perl, exe)) = tool("perl") else { return };
    let dir = TestDir::new("perl");
    let script = r#"my %h; for my $i (1..200000) { $h{"k$i"} = [$i, "v" x ($i % 50)] } my $s = 0; $s += $_->[0] for values %h; print scalar(keys %h), " $s\n""#;
    let c = compare(&Run::new(&perl).args(&["-e", script]), QUIET, &dir.reports("perl"));
    c.check(c.with.success(), "perl failed");
    c.check(c.with.stdout_str() == "200000 20000100000\n", "unexpected output");
    c.assert_no_ying_lines();
    check_main_report(&c, &exe);
}

const SMALL_C: &str = r#"#include <stdio.h>
#include <stdlib.h>
struct node { struct node *next; int v; };
static int sum(const struct node *n) { int s = 0; for (; n; n = n->next) s += n->v; return s; }
int main(void) {
    struct node *head = NULL;
    for (int i = 0; i < 100; i++) {
        struct node *n = malloc(sizeof *n);
        n->v = i; n->next = head; head = n;
    }
    printf("%d\n", sum(head));
    return 0;
}
"#;

#[test]
fn gcc_compiles_a_file() {
    let Some((gcc, exe)) = tool("gcc") else { return };
    let dir = TestDir::new("gcc");
    std::fs::write(dir.join("small.c"), SMALL_C).expect("write small.c");
    let run = Run::new(&gcc).args(&["-O2", "-c", "small.c", "-o", "small.o"]).cwd(dir.path());
    let c = compare(&run, SMALL_PROGRAMS, &dir.reports("gcc"));
    c.check(c.with.success(), "gcc failed");
    c.assert_no_ying_lines();
    check_main_report(&c, &exe);
    // The compiler proper is a program of its own (exec'd by the driver): it reports too.
    let sets = c.report_sets();
    c.check(sets.iter().any(|r| r.exe == "cc1"), "no report from cc1");
    // The object file is the same as without the shim.
    let with_obj = std::fs::read(dir.join("small.o")).expect("small.o");
    let o = Run::new(&gcc).args(&["-O2", "-c", "small.c", "-o", "ref.o"]).cwd(dir.path()).run();
    o.assert_success("gcc without the shim");
    let ref_obj = std::fs::read(dir.join("ref.o")).expect("ref.o");
    c.check(with_obj == ref_obj, "gcc produced a different object file under the shim");
}

const PIPELINE: &str = "seq 1 20000 | sort -n | tail -1";

#[test]
fn shell_pipeline() {
    let Some((sh, _)) = tool("sh") else { return };
    let Some(names) =
        ["seq", "sort", "tail"].iter().map(|t| tool(t).map(|x| x.1)).collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let dir = TestDir::new("pipeline");
    let c = compare(&Run::new(&sh).args(&["-c", PIPELINE]), SMALL_PROGRAMS, &dir.reports("pipe"));
    c.check(c.with.success(), "the pipeline failed");
    c.check(c.with.stdout_str() == "20000\n", "unexpected output");
    c.assert_no_ying_lines();
    // Each program of the pipeline reports once. (The shell itself may not: dash leaves with
    // _exit, which runs no exit handlers.)
    let sets = c.report_sets();
    for n in &names {
        let n_sets = sets.iter().filter(|r| &r.exe == n).count();
        c.check(n_sets == 1, format!("{n_sets} report sets from {n}, expected 1"));
    }
    for r in &sets {
        c.check(r.has("txt") && r.has("folded"), format!("incomplete report set {}", r.stem));
    }
}

#[test]
fn only_exe_limits_reports_to_the_named_program() {
    let Some((sh, _)) = tool("sh") else { return };
    let Some((_, sort)) = tool("sort") else { return };
    let dir = TestDir::new("only-exe");
    let mut vars = QUIET.to_vec();
    vars.push(("YING_ONLY_EXE", sort.as_str()));
    let c = compare(&Run::new(&sh).args(&["-c", PIPELINE]), &vars, &dir.reports("only"));
    c.check(c.with.success(), "the pipeline failed");
    c.check(c.with.stdout_str() == "20000\n", "unexpected output");
    c.assert_no_ying_lines();
    let sets = c.report_sets();
    c.check(sets.len() == 1, format!("expected exactly one report set (from {sort})"));
    c.check(sets.iter().all(|r| r.exe == sort), format!("a program other than {sort} reported"));
    c.check(sets.iter().all(|r| r.pid != c.with.pid), "the shell reported");
}

const NODE_SCRIPT: &str = "let a = []; for (let i = 0; i < 200000; i++) a.push({ i, s: 'x'.repeat(100) + i }); \
     console.log(a.length);";

/// node's unwind tables lie in another loadable segment than its code (`_dl_find_object`
/// reports only the segment holding an address for the main program): its stacks must still
/// be named, not `[no frames]`.
#[test]
fn node_stacks_are_named() {
    let Some((node, file)) = tool("node") else { return };
    let dir = TestDir::new("node");
    let vars = [("YING_MEASURE_ALLOCATED_NOT_RETAINED", "true")];
    let c = compare(&Run::new(&node).args(&["-e", NODE_SCRIPT]), &vars, &dir.reports("node"));
    c.check(c.with.success(), "node failed under the shim");
    c.check(c.with.stdout_str() == "200000\n", "unexpected output");
    check_main_report(&c, &file);
    let m = c.main_report().manifest();
    let total: u64 = m.entries.iter().map(|b| b.allocated_bytes).sum();
    let unnamed: u64 = m
        .entries
        .iter()
        .filter(|b| {
            b.frames.iter().all(|f| f.function.starts_with('[') || f.function.contains('+'))
        })
        .map(|b| b.allocated_bytes)
        .sum();
    c.check(m.entries.len() >= 5, format!("only {} stacks", m.entries.len()));
    c.check(
        unnamed * 10 < total,
        format!("{unnamed} of {total} allocated bytes in the top stacks have no named frame"),
    );
    for b in m.entries.iter().take(5) {
        let named = b.frames.iter().filter(|f| f.function.contains("::")).count();
        c.check(
            named >= 2,
            format!("top stack #{} has {named} C++ frames: {:?}", b.rank, b.frames),
        );
    }
}
