//! `ying run` on a real program (tests/data/leaky.c under the shim): the program's output and
//! exit status pass through, the summary names the sets it wrote, signals reach the program;
//! and `ying diff` / `ying top` on its two report sets agree with `go tool pprof`.
//!
//! Needs the shim, found like the preload tests find it (`YING_TEST_PRELOAD`, or the
//! workspace's target/release/libying.so; scripts/test.sh builds it first).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_same_top, go_pprof, success, top_rows, ying};
use preload_tests::{Outcome, Run, TestDir, preload_lib, report_sets};

/// leaky.c's block size and counts, mirrored: 32 early blocks (half freed later), 96 late.
const BLOCK: u64 = 64 * 1024;
const LATE: u64 = 96;

fn leaky(dir: &TestDir) -> PathBuf {
    let exe = dir.join("leaky");
    Run::new("cc")
        .args(&["-g", "-O1", "-o"])
        .arg(&exe)
        .arg(common::data("leaky.c"))
        .run()
        .assert_success("cc leaky.c");
    exe
}

/// `ying run` of `leaky args`, reporting to `reports`, every 1 s, a sample per 4 KiB.
fn ying_run(exe: &Path, args: &[&str], reports: &Path, cwd: &Path) -> Outcome {
    let lib = preload_lib();
    ying()
        .args(&["run", "--interval", "1", "--sample-interval", "4KiB", "--lib"])
        .arg(&lib)
        .arg("-o")
        .arg(reports)
        .arg("--")
        .arg(exe)
        .args(args)
        .cwd(cwd)
        .run()
}

#[test]
fn run_passes_the_status_through_and_sums_up_two_sets_that_diff_like_pprof() {
    let dir = TestDir::new("cli-run");
    let exe = leaky(&dir);
    let plain = Run::new(&exe).run();
    assert_eq!(plain.code(), Some(3), "{}", plain.describe());
    let reports = dir.join("reports");
    let o = ying_run(&exe, &[], &reports, dir.path());
    assert_eq!(o.code(), Some(3), "the program's status\n{}", o.describe());
    assert_eq!(o.stdout_str(), plain.stdout_str(), "{}", o.describe());

    let mut sets = report_sets(&reports);
    sets.sort_by_key(|s| s.seq);
    assert!(sets.len() >= 2, "a baseline and an exit report\n{}", o.describe());
    let err = o.stderr_str();
    let summary = format!("ying: this run wrote {} report sets (1 process) in", sets.len());
    assert!(err.contains(&summary), "{}", o.describe());
    assert!(err.contains("leaky") && err.contains("retained at exit"), "{}", o.describe());
    // Each figure says what it is: the peak sampled (or at least an exact figure), the
    // retained total at exit exact.
    let row = err.lines().find(|l| l.contains(" pid ")).expect("the process's line");
    assert!(row.contains("peak ≈") || row.contains("peak ≥"), "{row}");
    assert!(row.contains(" (sampled)") || row.contains("(exact, "), "{row}");
    assert!(row.contains("retained at exit ") && row.contains(" (exact)  ("), "{row}");
    let last_txt = format!(
        "ying: largest: {}",
        reports.join(format!("{}.txt", sets.last().unwrap().stem)).display()
    );
    assert!(err.contains(&last_txt), "expected {last_txt:?}\n{}", o.describe());

    // The first and last sets, named as sets (their stem), against pprof on their .pb.gz.
    let a = reports.join(&sets[0].stem);
    let b = reports.join(&sets.last().unwrap().stem);
    let (a_pb, b_pb) = (format!("{}.pb.gz", a.display()), format!("{}.pb.gz", b.display()));
    let out = dir.join("d");
    let d = ying()
        .args(&[
            "diff",
            "--all",
            "--unit",
            "B",
            "-o",
            out.to_str().unwrap(),
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ])
        .run();
    let d = success(d, "ying diff of two sets");
    let Some(theirs) = go_pprof(&["-top", "-unit=B", "-diff_base", &a_pb, &b_pb]) else { return };
    assert_same_top(&d.stdout_str(), &theirs, 5);
    let rows = top_rows(&d.stdout_str());
    assert_eq!(rows[0].2, "keep_late", "{}", d.stdout_str());
    let late: i64 = rows[0].0.parse().unwrap();
    // 6 MiB of chunks, estimated from samples: within a tenth.
    let expected = (LATE * BLOCK) as i64;
    assert!(
        (late - expected).abs() < expected / 10,
        "keep_late grew by {late}, expected ~{expected}"
    );
    assert!(rows.iter().any(|r| r.2 == "keep_early" && r.0.starts_with('-')), "{}", d.stdout_str());

    // ying top of the last set, named by its .txt, against pprof.
    let t = ying().args(&["top", "--unit", "B", &format!("{}.txt", b.display())]).run();
    let t = success(t, "ying top");
    assert!(t.stdout_str().contains(&format!("File: {b_pb}")), "{}", t.stdout_str());
    let theirs = go_pprof(&["-top", "-unit=B", &b_pb]).expect("go");
    assert_same_top(&t.stdout_str(), &theirs, 5);
    // Sampled every 4 KiB, its rows carry their 95 % intervals, read from the profile's
    // standard-error labels: keep_late's 1000-byte blocks are estimates with an error.
    let top = t.stdout_str();
    assert!(top.contains("±95% flat"), "{top}");
    let late = top.lines().find(|l| l.contains("keep_late")).expect("keep_late in the top");
    let pm = late.split_whitespace().find(|c| c.starts_with('±')).expect("an interval");
    assert!(pm != "±0" && pm != "±0B", "keep_late's estimate has an error: {late}");

    // ying view of the directory: one page, its path printed, naming the sets' functions.
    let v = success(ying().args(&["view", &reports.display().to_string()]).run(), "ying view");
    let page = PathBuf::from(v.stdout_str().trim());
    assert_eq!(page, reports.join("ying.view.html"), "{}", v.describe());
    let html = std::fs::read_to_string(&page).expect("the page");
    assert!(
        html.contains("keep_late") && html.contains("keep_early"),
        "{}",
        &html[..html.len().min(2000)]
    );
    // Its peak is the last set's, as its manifest (and text) say: the kept peak's estimate and
    // time, not the sum of the `.peak.pb.gz` stacks at the epoch (1970-01-01T00:00:00Z).
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.json", b.display())).unwrap())
            .unwrap();
    let at = m["peak"]["at"].as_str().expect("the set has a peak");
    let est = ying_profiler::report::human_bytes(m["peak"]["estimated_bytes"].as_u64().unwrap());
    let row = html
        .lines()
        .find(|l| l.starts_with("<tr><th>peak</th>"))
        .unwrap_or_else(|| panic!("no peak row\n{}", &html[..html.len().min(3000)]));
    assert!(row.contains(&format!("kept peak at {at}: {est} estimated")), "{row}\n{m:#}");
    assert!(!html.contains("1970-01-01"), "{row}");
}

#[test]
fn a_signal_that_ends_the_program_is_its_status() {
    let dir = TestDir::new("cli-run-die");
    let exe = leaky(&dir);
    let o = ying_run(&exe, &["die"], &dir.join("reports"), dir.path());
    assert_eq!(o.code(), Some(128 + 15), "SIGTERM ended the program\n{}", o.describe());
}

#[test]
fn a_missing_program_is_one_error_line() {
    let dir = TestDir::new("cli-run-missing");
    let missing = dir.join("no-such-program");
    let o = ying_run(&missing, &[], &dir.join("reports"), dir.path());
    assert!(!o.success(), "{}", o.describe());
    let err = o.stderr_str();
    assert!(err.starts_with(&format!("ying: error: {}: ", missing.display())), "{}", o.describe());
    assert_eq!(err.lines().count(), 1, "{}", o.describe());
}

#[test]
fn sigterm_sent_to_ying_reaches_the_program() {
    let dir = TestDir::new("cli-run-signal");
    let exe = leaky(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ying"))
        .args(["run", "--no-summary", "--lib"])
        .arg(preload_lib())
        .arg("-o")
        .arg(dir.join("reports"))
        .arg("--")
        .arg(&exe)
        .arg("wait")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // At once: the signal may reach `ying` before its spawn of the program has returned.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let program: i32 = line.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()).unwrap();
    // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            // SAFETY: kill touches no memory; the program's pid as it printed it.
            unsafe { libc::kill(program, libc::SIGKILL) };
            panic!("ying run did not end within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(42), "the program's SIGTERM handler exits with 42");
}

#[test]
fn top_of_a_cxx_program_drops_operator_new_like_pprof() {
    let dir = TestDir::new("cli-run-cxx");
    let exe = dir.join("newer");
    Run::new("c++")
        .args(&["-std=c++17", "-g", "-O1", "-o"])
        .arg(&exe)
        .arg(common::data("newer.cpp"))
        .run()
        .assert_success("c++ newer.cpp");
    let reports = dir.join("reports");
    let o = ying_run(&exe, &[], &reports, dir.path());
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    let sets = report_sets(&reports);
    assert_eq!(sets.len(), 1, "one exit report\n{}", o.describe());
    let pb = format!("{}.pb.gz", reports.join(&sets[0].stem).display());
    for sample in ["inuse_space", "alloc_objects"] {
        let t = ying().args(&["top", "--unit", "B", "--sample", sample, &pb]).run();
        let ours = success(t, "ying top").stdout_str();
        let Some(theirs) = go_pprof(&["-top", "-unit=B", &format!("-sample_index={sample}"), &pb])
        else {
            return;
        };
        assert_same_top(&ours, &theirs, 5);
        let rows = top_rows(&ours);
        assert!(!rows.iter().any(|r| r.2.starts_with("operator new")), "dropped:\n{ours}");
        let flat_names: Vec<&str> =
            rows.iter().filter(|r| r.0 != "0").map(|r| r.2.as_str()).collect();
        assert!(flat_names.contains(&"keep_buffers()"), "{ours}");
    }
}

#[test]
fn small_processes_beside_the_one_that_matters_are_folded_unless_asked_for() {
    let dir = TestDir::new("cli-run-small");
    let exe = leaky(&dir);
    // A helper that takes a sample or two and exits: under 1 MiB, under 1 % of leaky's peak.
    let tiny_c = dir.join("tiny.c");
    std::fs::write(
        &tiny_c,
        "#include <stdlib.h>\nint main(void) { for (int i = 0; i < 4; i++) { void *volatile p = \
         malloc(1000); (void)p; } return 0; }\n",
    )
    .unwrap();
    let tiny = dir.join("tiny");
    Run::new("cc").arg("-o").arg(&tiny).arg(&tiny_c).run().assert_success("cc tiny.c");
    let script = format!("{t}; {t}; {t}; exec {e}", t = tiny.display(), e = exe.display());
    let run = |reports: &Path, all: bool| {
        let mut args = vec!["run", "--interval", "0", "--sample-interval", "1", "--lib"];
        if all {
            args.insert(1, "--all-processes");
        }
        let o = ying()
            .args(&args)
            .arg(preload_lib())
            .arg("-o")
            .arg(reports)
            .args(&["--", "sh", "-c", &script])
            .cwd(dir.path())
            .run();
        assert_eq!(o.code(), Some(3), "leaky's status\n{}", o.describe());
        o
    };
    let rows = |o: &Outcome| -> Vec<String> {
        o.stderr_str().lines().filter(|l| l.contains(" pid ")).map(str::to_string).collect()
    };
    let o = run(&dir.join("folded"), false);
    let err = o.stderr_str();
    let listed = rows(&o);
    assert!(listed.iter().any(|l| l.starts_with("ying:   leaky ")), "{err}");
    assert!(!listed.iter().any(|l| l.starts_with("ying:   tiny ")), "{err}");
    let fold = err.lines().find(|l| l.contains("small process")).expect("the folded line");
    assert!(fold.contains("tiny ×3"), "{err}");
    assert!(fold.ends_with("--all-processes lists them"), "{err}");
    // Asked for: every process has its line, and nothing is folded.
    let o = run(&dir.join("all"), true);
    let listed = rows(&o);
    assert_eq!(listed.iter().filter(|l| l.starts_with("ying:   tiny ")).count(), 3, "{listed:?}");
    assert!(!o.stderr_str().contains("small process"), "{}", o.describe());
}
