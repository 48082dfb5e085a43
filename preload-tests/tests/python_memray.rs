//! memray as an anchor for Ying's Python frames: `programs/python_memray.py` keeps a known
//! amount of memory in each of six functions (bytearrays, big strings from a thread, list
//! arrays under recursion, dicts from an asyncio task, floats and small bytes objects in
//! pymalloc's arenas), and the program says for each how many bytes the allocators hold for it
//! (`truth <function> <requested> <chunks>`: as requested, memray's unit, and as glibc's chunks,
//! Ying's; each run's own figures, as the arenas a function maps depend on what ran before it).
//! The program runs under `memray run` (memray installed from
//! PyPI into a venv in the test's directory) and under the shim, and each tool's figures are
//! summed per function: every stack (memray's records never freed, Ying's exit-report entries
//! from the set's manifest) goes to its innermost frame in the program's file.
//!
//! Asserted: both tools name the same five functions as the largest, in the same order except
//! where two of Ying's figures are within sampling error of each other; memray's figure for
//! each of the six functions is the truth (it records every allocation: only the interpreter's
//! own small allocations around the function may differ, [`overhead`]); Ying's is within four
//! standard errors (its `retained_bytes_stderr`, of which the text's `±` is 1.96) plus that
//! allowance. A Ying that read no Python frame, or put a run of them at the wrong native
//! frame, attributes the memory to no function of the program or to the wrong one.
//!
//! Both tools count pymalloc's arenas as the 1 MiB mappings they are, at the stack that mapped
//! them (memray without `--trace-python-allocators`), so the floats and bytes objects are
//! counted as the arenas their function added, as the program counts them.
//!
//! Skipped (one `SKIPPED:` line) when memray cannot be installed (no network, no wheel for this
//! interpreter) or the interpreter is not a CPython whose frames Ying reads (3.11 to 3.13).

use std::collections::BTreeMap;
use std::time::Duration;

use preload_tests::{
    Manifest, Outcome, Run, TestDir, list_dir, programs_dir, python3, report_sets,
};

/// The program, in `programs/`.
const PROGRAM: &str = "python_memray.py";

/// The six functions, as Ying names them (qualified) and as memray does (the code's name).
const FUNCTIONS: [(&str, &str); 6] = [
    ("Store.bytearrays", "bytearrays"),
    ("make_strings", "make_strings"),
    ("nested_lists", "nested_lists"),
    ("build_dicts", "build_dicts"),
    ("make_floats", "make_floats"),
    ("small_bytes", "small_bytes"),
];

/// Ying's sampling interval here: a 1 MiB block or arena is sampled with probability
/// 1 - e^-8, so the figures are close to exact and an attribution error of a few blocks shows.
const INTERVAL: &str = "131072";

/// Reads a memray capture file and prints `function<TAB>bytes` for the allocations never
/// freed, each summed at the innermost frame in the program's file (`<other>` for none).
const READ_MEMRAY: &str = r#"
import collections, os, sys
import memray
capture, program = sys.argv[1], os.path.realpath(sys.argv[2])
by_function = collections.Counter()
for record in memray.FileReader(capture).get_leaked_allocation_records(merge_threads=True):
    for function, file, _line in record.stack_trace():
        if file.startswith("/") and os.path.realpath(file) == program:
            by_function[function] += record.size
            break
    else:
        by_function["<other>"] += record.size
for function, size in by_function.items():
    print(function, size, sep="\t")
"#;

/// What the interpreter may add to or take from a function's figure beyond the objects it
/// keeps (its frames, the temporaries of its run still held, a list's spare room): 1 % and
/// 256 KiB. An arena put at the wrong function is 1 MiB, beyond it.
fn overhead(truth: u64) -> f64 {
    truth as f64 * 0.01 + (256 << 10) as f64
}

/// The `truth <function> <requested> <chunks>` lines of the program's output: the bytes it
/// keeps as requested (memray's unit) or as glibc's chunks (Ying's), keyed by function.
fn truths(o: &Outcome) -> BTreeMap<String, (u64, u64)> {
    o.stdout_str()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("truth")).then_some(())?;
            let name = w.next()?.to_string();
            Some((name, (w.next()?.parse().ok()?, w.next()?.parse().ok()?)))
        })
        .collect()
}

/// Installs memray into a venv under `dir`; the venv's python, or why not.
fn install_memray(dir: &TestDir) -> Result<std::path::PathBuf, String> {
    let venv = dir.join("venv");
    let made = Run::new("python3")
        .args(&["-m", "venv"])
        .arg(&venv)
        .timeout(Duration::from_secs(300))
        .run();
    if !made.success() {
        return Err(format!("python3 -m venv failed: {}", last_line(&made)));
    }
    let py = venv.join("bin/python");
    let pip = Run::new(&py)
        .args(&["-m", "pip", "install", "--disable-pip-version-check", "-q", "memray"])
        .timeout(Duration::from_secs(600))
        .run();
    if !pip.success() {
        return Err(format!("pip install memray failed: {}", last_line(&pip)));
    }
    Ok(py)
}

fn last_line(o: &Outcome) -> String {
    let err = o.stderr_str();
    let line = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    format!("{} ({line})", o.status_text())
}

/// Ying's figures from the exit report's manifest: function -> (retained bytes, variance),
/// each entry at its innermost frame in `program` (`<other>` for none).
fn ying_by_function(m: &Manifest, program: &str) -> BTreeMap<String, (u64, f64)> {
    let mut out: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for e in &m.entries {
        let function = e
            .frames
            .iter()
            .find(|f| {
                f.location
                    .as_deref()
                    .is_some_and(|l| l.rsplit_once(':').is_some_and(|(file, _)| file == program))
            })
            .map_or("<other>", |f| f.function.as_str());
        let slot = out.entry(function.to_string()).or_default();
        slot.0 += e.retained_bytes;
        slot.1 += (e.retained_bytes_stderr as f64).powi(2);
    }
    out
}

/// The names of the five largest, largest first.
fn top5<'a>(figures: impl Iterator<Item = (&'a str, u64)>) -> Vec<&'a str> {
    let mut v: Vec<(&str, u64)> = figures.filter(|(f, _)| *f != "<other>").collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().take(5).map(|(f, _)| f).collect()
}

fn sorted<'a>(v: &[&'a str]) -> Vec<&'a str> {
    let mut s = v.to_vec();
    s.sort();
    s
}

fn mib(b: f64) -> String {
    format!("{:.2} MiB", b / (1 << 20) as f64)
}

#[test]
fn python_functions_agree_with_memray_and_the_truth() {
    let Some((python, _)) = python3() else { return };
    let version = Run::new(&python)
        .args(&["-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"])
        .run();
    version.assert_success("asking python3 its version");
    let v = version.stdout_str();
    let minor: Option<u32> = v
        .strip_prefix("cpython 3 ")
        .and_then(|m| m.trim().parse().ok())
        .filter(|m| (11..=13).contains(m));
    if minor.is_none() {
        eprintln!("SKIPPED: python3 is {} (Ying reads CPython 3.11 to 3.13)", v.trim());
        return;
    }
    let dir = TestDir::new("python-memray");
    let venv_python = match install_memray(&dir) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED: memray could not be installed: {why}");
            return;
        }
    };
    let script = programs_dir().join(PROGRAM);
    let program = std::fs::canonicalize(&script).expect("the program's path").display().to_string();

    // memray: every allocation recorded, the never-freed ones summed per function.
    let capture = dir.join("memray.bin");
    let memray_run = Run::new(&venv_python)
        .args(&["-m", "memray", "run", "-q", "-o"])
        .arg(&capture)
        .arg(&script)
        .timeout(Duration::from_secs(300))
        .run();
    memray_run.assert_success("the program under memray");
    let read = Run::new(&venv_python).args(&["-c", READ_MEMRAY]).arg(&capture).arg(&program).run();
    read.assert_success("reading memray's capture");
    let memray: BTreeMap<String, u64> = read
        .stdout_str()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(f, b)| Some((f.to_string(), b.parse().ok()?)))
        .collect();
    let memray_truth = truths(&memray_run);

    // Ying: the exit report of the same program under the shim.
    let reports = dir.reports("ying");
    let ying_run = Run::new(&python)
        .arg(&script)
        .with_preload()
        .envs(&[
            ("YING_SAMPLE_INTERVAL_BYTES", INTERVAL),
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_TOP_K", "100000"),
            ("YING_REPORTING_PATH", &reports.display().to_string()),
        ])
        .timeout(Duration::from_secs(300))
        .run();
    ying_run.assert_success("the program under the shim");
    let sets: Vec<_> =
        report_sets(&reports).into_iter().filter(|s| s.pid == ying_run.pid).collect();
    let Some(set) = sets.last() else {
        panic!("no report set from the shim's run\n{}{}", ying_run.describe(), list_dir(&reports))
    };
    let m = set.manifest();
    assert!(m.exiting, "the last set is not the exit report: {}", set.stem);
    // Every entry that retains bytes is listed (the sums below miss none).
    let listed: u64 = m.entries.iter().map(|e| e.retained_bytes).sum();
    assert!(
        listed == m.estimated.retained_bytes,
        "the manifest lists entries retaining {listed} bytes of {}",
        m.estimated.retained_bytes
    );
    let ying = ying_by_function(&m, &program);
    let ying_truth = truths(&ying_run);

    // Side by side.
    let mut table = format!(
        "{:<18} {:>12} {:>12} {:>12} {:>22}\n",
        "function", "requested", "memray", "chunks", "Ying ± 95 %"
    );
    for (ours, theirs) in FUNCTIONS {
        let (y, var) = ying.get(ours).copied().unwrap_or((0, 0.0));
        table += &format!(
            "{:<18} {:>12} {:>12} {:>12} {:>12} ± {}\n",
            ours,
            mib(memray_truth.get(ours).map_or(0, |t| t.0) as f64),
            mib(memray.get(theirs).copied().unwrap_or(0) as f64),
            mib(ying_truth.get(ours).map_or(0, |t| t.1) as f64),
            mib(y as f64),
            mib(1.96 * var.sqrt()),
        );
    }
    table += "others (ying):";
    for (f, (b, _)) in ying.iter().filter(|(f, _)| !FUNCTIONS.iter().any(|(o, _)| o == f)) {
        table += &format!(" {f}={}", mib(*b as f64));
    }
    table += "\nothers (memray):";
    for (f, b) in memray.iter().filter(|(f, _)| !FUNCTIONS.iter().any(|(_, t)| t == f)) {
        table += &format!(" {f}={}", mib(*b as f64));
    }
    eprintln!("{table}");
    let context = format!(
        "{table}\n\nmemray capture: {}\nYing's exit report: {}",
        capture.display(),
        set.path("txt").display()
    );

    let mut problems = Vec::new();
    for (ours, theirs) in FUNCTIONS {
        let (Some(&(t_memray, _)), Some(&(_, t_ying))) =
            (memray_truth.get(ours), ying_truth.get(ours))
        else {
            problems.push(format!("{ours}: the program printed no truth line"));
            continue;
        };
        let got = memray.get(theirs).copied().unwrap_or(0);
        let off = (got as f64 - t_memray as f64).abs();
        if off > overhead(t_memray) {
            problems.push(format!(
                "{ours}: memray {got} bytes, the truth {t_memray}: off by {}",
                mib(off)
            ));
        }
        let (y, var) = ying.get(ours).copied().unwrap_or((0, 0.0));
        let off = (y as f64 - t_ying as f64).abs();
        let allowed = 4.0 * var.sqrt() + overhead(t_ying);
        if off > allowed {
            problems.push(format!(
                "{ours}: Ying {y} bytes, the truth {t_ying}: off by {}, more than 4 standard \
                 errors and the overhead ({})",
                mib(off),
                mib(allowed)
            ));
        }
    }
    // The five largest: the same functions; the same order but for figures within error.
    let ying_names: BTreeMap<&str, &str> = FUNCTIONS.iter().map(|(o, t)| (*t, *o)).collect();
    let memray_top: Vec<&str> =
        top5(memray.iter().map(|(f, b)| (ying_names.get(f.as_str()).copied().unwrap_or(f), *b)));
    let ying_top: Vec<&str> = top5(ying.iter().map(|(f, (b, _))| (f.as_str(), *b)));
    if sorted(&memray_top) != sorted(&ying_top) {
        problems.push(format!("the five largest: memray {memray_top:?}, Ying {ying_top:?}"));
    } else {
        for (i, a) in ying_top.iter().enumerate() {
            for b in &ying_top[i + 1..] {
                // Ying ranks `a` above `b`; where memray has it the other way round, the two
                // figures of Ying's must be within error of each other.
                let pos = |f: &&str| memray_top.iter().position(|x| x == f);
                if pos(a) > pos(b) {
                    let (ya, va) = ying[*a];
                    let (yb, vb) = ying[*b];
                    let gap = ya as f64 - yb as f64;
                    if gap > 4.0 * (va + vb).sqrt() {
                        problems.push(format!(
                            "Ying ranks {a} above {b} by {}, beyond error; memray the other way",
                            mib(gap)
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}\n\n{context}", problems.join("\n"));
}
