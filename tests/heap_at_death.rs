//! The heap at death under the `#[global_allocator]` front end: `examples/heap_at_death.rs`
//! killed by `SIGKILL` at random moments, crashing (`SIGSEGV`, `abort`), ended by an unhandled
//! `SIGTERM` or by `_exit` leaves its live
//! file, from which a report set naming `rust_grow` is written outside the process, its
//! estimate unbiased over the runs.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ying_profiler::report::live::LiveProfile;

/// Mirrors the example's block size.
const BLOCK: u64 = 48 * 1024;
/// Mirrors the example's sampling interval.
const INTERVAL: f64 = 256.0 * 1024.0;

fn example() -> Option<PathBuf> {
    // `cargo test` builds the examples beside the test binaries' `deps` directory.
    let me = std::env::current_exe().unwrap();
    let exe = me.parent()?.parent()?.join("examples/heap_at_death");
    exe.exists().then_some(exe)
}

/// Runs the example in `mode`; `kill_after` sends `SIGKILL` that long after its first line.
/// Returns its pid, its end and the last `held` it printed before the end.
fn run(exe: &Path, dir: &Path, mode: &str, kill_after: Option<Duration>) -> (u32, i32, u64) {
    let mut cmd = Command::new(exe);
    common::without_ying_vars(&mut cmd);
    let mut child = cmd
        .arg(dir)
        .arg(mode)
        .arg("60")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let out = child.stdout.take().unwrap();
    let l = Arc::clone(&lines);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    let start = Instant::now();
    while lines.lock().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20), "no output in 20 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        let _ = child.kill();
    }
    let pid = child.id();
    let status = common::wait_or_kill(child, Duration::from_secs(20), "the example").status;
    reader.join().unwrap();
    let held = lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("held ")?.parse().ok())
        .next_back()
        .unwrap_or(0);
    (pid, status.signal().unwrap_or(0), held)
}

/// Bytes of the folded stacks that pass through `func`.
fn through(folded: &str, func: &str) -> u64 {
    folded
        .lines()
        .filter(|l| l.split(';').any(|f| f.contains(func)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The report set of `pid`'s live file in `dir`, written to `out`: (retained bytes through
/// `rust_grow`, exact retained bytes, whether `rust_grow` is in the top entry).
fn heap_at_death(dir: &Path, pid: u32, out: &Path) -> (u64, u64, bool) {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.strip_prefix("ying.heap_at_death.")
                .and_then(|r| r.strip_suffix(".live"))
                .and_then(|r| r.parse::<ying_profiler::report::ProcessId>().ok())
                .is_some_and(|p| p.pid == pid)
        })
        .unwrap_or_else(|| panic!("no live file of pid {pid} in {}", dir.display()));
    let live = LiveProfile::read(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(!live.is_running());
    let set = live.write_report_set(out, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    let folded = std::fs::read_to_string(set.paths.folded.as_ref().unwrap()).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(set.paths.manifest.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    let top = manifest["entries"][0]["frames"]
        .as_array()
        .is_some_and(|fs| fs.iter().any(|f| f.as_str().is_some_and(|n| n.contains("rust_grow"))));
    (through(&folded, "rust_grow"), manifest["totals"]["retained_bytes"].as_u64().unwrap(), top)
}

#[test]
fn a_rust_program_killed_at_random_moments_leaves_its_heap() {
    let Some(exe) = example() else {
        eprintln!("SKIPPED: examples/heap_at_death was not built");
        return;
    };
    let base =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
            as u64;
    let (mut diff, mut var) = (0.0f64, 0.0f64);
    let p = 1.0 - (-(BLOCK as f64) / INTERVAL).exp();
    for i in 0..12u64 {
        let dir = common::scratch(&format!("death-rust-{i}"));
        let wait = 200 + (base.wrapping_mul(2654435761).wrapping_add(i * 7919) % 900);
        let (pid, sig, held) = run(&exe, &dir, "pause", Some(Duration::from_millis(wait)));
        assert_eq!(sig, libc::SIGKILL);
        let (est, exact, top) = heap_at_death(&dir, pid, &dir.join("out"));
        assert!(exact <= held + 256 * 1024, "run {i}: file says {exact} held, program {held}");
        if exact >= 4 * BLOCK {
            assert!(top, "run {i}: rust_grow is not in the top entry");
        }
        let blocks = exact / BLOCK;
        diff += est as f64 - (blocks * BLOCK) as f64;
        var += blocks as f64 * (BLOCK * BLOCK) as f64 * (1.0 - p) / p;
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let z = diff / var.sqrt();
    eprintln!("12 kills: estimate minus truth {diff:.0} bytes, z = {z:.2}");
    assert!(z.abs() < 4.0, "estimates through rust_grow are biased: z = {z:.2}");
}

#[test]
fn a_rust_program_that_crashes_or_ends_without_exit_handlers_leaves_its_heap() {
    let Some(exe) = example() else {
        eprintln!("SKIPPED: examples/heap_at_death was not built");
        return;
    };
    // (mode, signal that ends it; 0: it exits, with `_exit`)
    for (mode, sig) in [
        ("segv", libc::SIGSEGV),
        ("abort", libc::SIGABRT),
        ("sigterm", libc::SIGTERM),
        ("_exit", 0),
    ] {
        let dir = common::scratch(&format!("death-rust-{mode}"));
        let (pid, got, held) = run(&exe, &dir, mode, None);
        assert_eq!(got, sig, "{mode}");
        assert_eq!(held, 480 * BLOCK);
        let (_, exact, top) = heap_at_death(&dir, pid, &dir.join("out"));
        assert!(top, "{mode}: rust_grow is not in the top entry");
        assert!(exact >= held, "{mode}: the file holds {exact} of {held}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
