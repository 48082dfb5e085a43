//! The `#[global_allocator]` front end never keeps a process alive: `examples/pthread_exit_main.rs`
//! ends its `main` with `pthread_exit` while a worker runs, and must end when the worker does,
//! with glibc's `exit(0)` (its atexit handler prints) and one exit report set.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_rust_main_that_calls_pthread_exit_ends_with_its_last_thread() {
    // `cargo test` builds the examples beside the test binaries' `deps` directory.
    let me = std::env::current_exe().unwrap();
    let exe = me.parent().unwrap().parent().unwrap().join("examples/pthread_exit_main");
    if !exe.exists() {
        eprintln!("SKIPPED: {} was not built", exe.display());
        return;
    }
    let dir = common::fresh_dir("pthread-exit-main");
    let child = Command::new(&exe)
        .arg(&dir)
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let what = "the process, whose last thread ended,";
    let out = common::wait_or_kill(child, Duration::from_secs(20), what);
    let status = out.status;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(status.success(), "{status:?}\n{stdout}");
    assert_eq!(stdout, "main exits\nworker done\natexit handler ran\n");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n.ends_with(".pb.gz")), "no exit report: {names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "temporary file left: {names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
