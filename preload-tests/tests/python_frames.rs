//! Python frames in the shim's stacks (`engine/python/`), on every CPython 3.11 to 3.13 found on
//! the machine (the system's `python3.11`, pyenv's builds, with the interpreter in the executable
//! or in `libpython`):
//!
//! - a script whose `make_value` (called by `build_index`) holds the memory names both, with
//!   their lines, in order, in its peak's top stack; with `YING_PYTHON_FRAMES=false` no stack
//!   has a Python frame (the control);
//! - `programs/python_hazards.py` (threads allocating with the GIL released, generators and
//!   coroutines suspended and resumed, deep recursion, exceptions unwinding, `sys.settrace` and
//!   `sys.setprofile`, finalizers and weak-reference callbacks while frames are torn down, code
//!   objects freed and their memory reused) prints and exits as the plain run does, under a
//!   sample every 4 KiB, and its stacks name its functions; each `made_<i>`, compiled, called
//!   and freed in turn (their code objects' memory reused), is named only at its own
//!   allocation's stack: a name lent by a freed code object to its successor would show another
//!   size.

use std::path::PathBuf;
use std::time::Duration;

use preload_tests::{Manifest, Run, TestDir, compare, programs_dir, python3, report_sets};
use ying_profiler::report::live::LiveProfile;

/// Every CPython 3.11+ interpreter here, by real path (deduplicated), with its `3.X` version.
fn interpreters() -> Vec<(PathBuf, String)> {
    let mut found: Vec<PathBuf> = Vec::new();
    if let Some((p, _)) = python3() {
        found.push(p);
    }
    for minor in 11..=13 {
        found.push(format!("/usr/bin/python3.{minor}").into());
    }
    let pyenv = std::env::var("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|_| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv")
    });
    if let Ok(rd) = std::fs::read_dir(pyenv.join("versions")) {
        for e in rd.flatten() {
            for minor in 11..=13 {
                found.push(e.path().join(format!("bin/python3.{minor}")));
            }
        }
    }
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    for p in found {
        let Ok(real) = std::fs::canonicalize(&p) else { continue };
        if out.iter().any(|(q, _)| *q == real) {
            continue;
        }
        let o = Run::new(&real)
            .args(&["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .without_preload()
            .run();
        let v = o.stdout_str().trim().to_string();
        if o.success() && ["3.11", "3.12", "3.13"].contains(&v.as_str()) {
            out.push((real, v));
        }
    }
    out.sort();
    if out.is_empty() {
        eprintln!("SKIPPED: no CPython 3.11 to 3.13 interpreter found");
    }
    out
}

/// The README's example (`examples/python/bigdict.py`: `make_value` at line 4, called by
/// `build_index` at line 9, called at line 12), on 200,000 entries.
fn bigdict() -> String {
    let path = preload_tests::workspace_root().join("examples/python/bigdict.py");
    let text = std::fs::read_to_string(&path).expect("examples/python/bigdict.py");
    assert!(text.contains("build_index(1_000_000)"), "{} changed", path.display());
    text.replace("build_index(1_000_000)", "build_index(200_000)")
}

/// The functions and locations of a manifest entry's frames that are in `file`.
fn python_frames(e: &preload_tests::Entry, file: &str) -> Vec<String> {
    e.frames
        .iter()
        .filter(|f| f.location.as_deref().is_some_and(|l| l.contains(file)))
        .map(|f| format!("{} {}", f.function, f.location.as_deref().unwrap_or("")))
        .collect()
}

#[test]
fn the_functions_holding_memory_are_named_with_their_lines() {
    for (py, version) in interpreters() {
        let dir = TestDir::new(&format!("python-frames-{version}"));
        let script = dir.join("bigdict.py");
        std::fs::write(&script, bigdict()).expect("write the script");
        let run = Run::new(&py).arg(&script).timeout(Duration::from_secs(120));
        let c = compare(&run, &[("YING_CHECK_INTERVAL_SECS", "0")], &dir.reports("on"));
        let set = c.main_report();
        let text = set.text();
        c.check(
            text.contains(&format!("python:             CPython {version}."))
                && text.contains("Python frames in every stack"),
            format!("{}: the header does not say Python frames are read:\n{text}", py.display()),
        );
        let m: Manifest = set.manifest();
        let top = m.peak_entries.first().expect("a peak entry");
        let frames = python_frames(top, "bigdict.py");
        let want = ["make_value ".to_string(), "build_index ".to_string(), "<module> ".to_string()];
        c.check(
            frames.len() == 3
                && frames.iter().zip(&want).all(|(f, w)| f.starts_with(w.as_str()))
                && frames[0].ends_with("bigdict.py:4")
                && frames[1].ends_with("bigdict.py:9")
                && frames[2].ends_with("bigdict.py:12"),
            format!(
                "{}: the peak's top stack should read make_value (bigdict.py:4), build_index (bigdict.py:9), <module> (bigdict.py:12); it has {frames:?}:\n{text}",
                py.display()
            ),
        );
        // pprof's own reader sees the same frames, as functions (`<module>` included, which
        // it would cut down as demangled C++ if its system name were the same).
        if preload_tests::require_tool("go").is_some() {
            let traces = Run::new("go")
                .args(&["tool", "pprof", "-traces", "-sample_index=alloc_space"])
                .arg(set.path("pb.gz"))
                .env("PPROF_TMPDIR", dir.path().display().to_string())
                .timeout(Duration::from_secs(60))
                .run();
            traces.assert_success("go tool pprof");
            let out = traces.stdout_str();
            let lines: Vec<&str> = out.lines().map(str::trim).collect();
            let found = lines.windows(3).any(|w| w == ["make_value", "build_index", "<module>"]);
            c.check(
                found,
                format!(
                    "go tool pprof -traces has no make_value/build_index/<module> trace:\n{out}"
                ),
            );
        }
        // The control: no Python frame anywhere when they are off.
        let off = compare(
            &run,
            &[("YING_CHECK_INTERVAL_SECS", "0"), ("YING_PYTHON_FRAMES", "false")],
            &dir.reports("off"),
        );
        let text = off.main_report().text();
        off.check(
            !text.contains("bigdict.py") && text.contains("Python frames off"),
            format!("{}: Python frames with YING_PYTHON_FRAMES=false:\n{text}", py.display()),
        );
    }
}

/// A Python process killed by `SIGKILL` leaves its Python frames in its live file: the code
/// objects' names travel with it, and `ying report`'s reader (another process, the interpreter
/// gone) names the frames from them.
#[test]
fn a_killed_python_process_leaves_its_python_frames() {
    let Some((py, version)) = interpreters().into_iter().next() else { return };
    let dir = TestDir::new(&format!("python-killed-{version}"));
    let script = dir.join("bigdict.py");
    let killed = format!(
        "{}import os, signal, time\ntime.sleep(1.5)\nos.kill(os.getpid(), signal.SIGKILL)\n",
        bigdict()
    );
    std::fs::write(&script, killed).expect("write the script");
    let reports = dir.reports("killed");
    let run = Run::new(&py).arg(&script).timeout(Duration::from_secs(120));
    let c = compare(
        &run,
        &[
            ("YING_CHECK_INTERVAL_SECS", "1"),
            ("YING_LIVE_FILE", "on"),
            ("YING_LIVE_INTERVAL_MS", "100"),
        ],
        &reports,
    );
    let file = preload_tests::live_file_of(&reports, c.with.pid)
        .unwrap_or_else(|| panic!("no live file: {}", preload_tests::list_dir(&reports)));
    let live = LiveProfile::read(&file).unwrap_or_else(|e| panic!("unreadable live file: {e}"));
    let out = dir.join("read");
    live.write_report_set(&out, None).unwrap_or_else(|e| panic!("{e}"));
    let set = report_sets(&out).into_iter().next().expect("the set written");
    let text = set.text();
    assert!(
        text.contains("make_value (")
            && text.contains("bigdict.py:4)")
            && text.contains("build_index ("),
        "the killed process's stacks lack their Python frames:\n{text}"
    );
}

#[test]
fn hazardous_programs_run_as_plain_and_name_their_frames() {
    let program = programs_dir().join("python_hazards.py");
    for (py, version) in interpreters() {
        let dir = TestDir::new(&format!("python-hazards-{version}"));
        let note = dir.join("reused.txt");
        let run = Run::new(&py)
            .arg(&program)
            .env("PY_HAZARDS_NOTE", note.display().to_string())
            .timeout(Duration::from_secs(300));
        let c = compare(
            &run,
            &[
                ("YING_SAMPLE_INTERVAL_BYTES", "4096"),
                ("YING_SEED", "7"),
                ("YING_CHECK_INTERVAL_SECS", "1"),
                ("YING_MEASURE_ALLOCATED_NOT_RETAINED", "true"),
                ("YING_TOP_K", "2000"),
            ],
            &dir.reports("hazards"),
        );
        c.check(c.with.success(), format!("{}: the program failed under the shim", py.display()));
        let sets: Vec<_> =
            report_sets(&c.reports).into_iter().filter(|s| s.pid == c.with.pid).collect();
        let m = sets.last().expect("an exit report").manifest();
        let named = |f: &str| m.entries.iter().any(|e| e.frames.iter().any(|x| x.function == f));
        for f in [
            "gil_free_worker",
            "gen_worker",
            "coro_worker",
            "recurse",
            "raiser",
            "Finalized.__del__",
            "traced",
        ] {
            c.check(named(f), format!("{}: no stack names {f}", py.display()));
        }
        // Under 800 frames of one activation, the innermost are still placed.
        let deep = m.entries.iter().any(|e| {
            let names: Vec<&str> = e.frames.iter().map(|f| f.function.as_str()).collect();
            names.windows(2).any(|w| w == ["deep_leaf", "recurse"])
        });
        c.check(deep, format!("{}: no stack reads deep_leaf, recurse", py.display()));
        // Each made_<i> allocated 100_000 + 8192 * i bytes (plus the chunk's rounding).
        let reused: usize = std::fs::read_to_string(&note)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .expect("the program notes how many code objects reused an address");
        c.check(reused >= 60, format!("only {reused} of 120 code objects reused an address"));
        let mut seen = 0;
        let mut wrong = Vec::new();
        for e in &m.entries {
            let Some(f) = e.frames.iter().find(|f| f.function.starts_with("made_")) else {
                continue;
            };
            let i: u64 = f.function["made_".len()..].parse().expect("made_<i>");
            let size = 100_000 + 8192 * i;
            seen += 1;
            if !(size..size + 8192).contains(&e.allocated_bytes) {
                wrong.push(format!(
                    "{} at {} bytes (its own: {size})",
                    f.function, e.allocated_bytes
                ));
            }
        }
        c.check(seen >= 100, format!("{}: only {seen} of 120 made_<i> stacks", py.display()));
        c.check(
            wrong.is_empty(),
            format!("{}: stacks named after another code object: {wrong:#?}", py.display()),
        );
    }
}

/// An interpreter Ying does not read (before 3.11) runs as plain with native frames only and
/// one warning line saying so.
#[test]
fn an_older_interpreter_gets_one_warning_and_native_frames() {
    let pyenv = std::env::var("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|_| {
        PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv")
    });
    let old = std::fs::read_dir(pyenv.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|e| (7..=10).map(move |m| e.path().join(format!("bin/python3.{m}"))))
        .find(|p| p.exists());
    let Some(py) = old else {
        eprintln!("SKIPPED: no CPython 3.7 to 3.10 interpreter under pyenv");
        return;
    };
    let dir = TestDir::new("python-older");
    let script = dir.join("bigdict.py");
    std::fs::write(&script, bigdict()).expect("write the script");
    let run = Run::new(&py).arg(&script).timeout(Duration::from_secs(120));
    let c = compare(&run, &[("YING_CHECK_INTERVAL_SECS", "0")], &dir.reports("old"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].contains("older than 3.11"),
        format!("{}: expected one warning line, got {lines:#?}", py.display()),
    );
    let text = c.main_report().text();
    c.check(!text.contains("bigdict.py:"), format!("Python frames from {}:\n{text}", py.display()));
}
