//! The `#[global_allocator]` front end never keeps a process alive: `examples/pthread_exit_main.rs`
//! ends its `main` with `pthread_exit` while a worker runs, and must end when the worker does,
//! with glibc's `exit(0)` (its atexit handler prints) and one exit report set.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_rust_main_that_calls_pthread_exit_ends_with_its_last_thread() {
    // `cargo test` builds the examples beside the test binaries' `deps` directory.
    let me = std::env::current_exe().unwrap();
    let exe = me.parent().unwrap().parent().unwrap().join("examples/pthread_exit_main");
    if !exe.exists() {
        eprintln!("SKIPPED: {} was not built", exe.display());
        return;
    }
    let dir = std::env::temp_dir().join(format!("ying-pthread-exit-main-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(&exe)
        .arg(&dir)
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("the process did not end within 20 s after its last thread ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
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
