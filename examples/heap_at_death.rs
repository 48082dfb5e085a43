//! A Rust program profiled by the `#[global_allocator]` front end that dies with memory held,
//! for `tests/heap_at_death.rs`: it grows in steps of 8 blocks of 48 KiB, all allocated in
//! `rust_grow` and kept, printing after each step the bytes it holds (`held N`), then ends as
//! its second argument says: `pause` (wait to be killed), `segv` (a write through a null
//! pointer), `abort`, `_exit` (`_exit(7)`, no exit handler) or `sigterm` (`SIGTERM`, not
//! handled). Its live file goes to the directory given as the first argument.
//!
//! usage: heap_at_death DIR MODE STEPS

use std::io::Write;

use ying_profiler::YingProfiler;
use ying_profiler::utils::ProfilerRunnerBuilder;

#[global_allocator]
static YING: YingProfiler = YingProfiler::default().with_sample_interval(256 * 1024);

/// The size of every block grown.
const BLOCK: usize = 48 * 1024;

#[inline(never)]
fn rust_grow() -> Vec<u8> {
    std::hint::black_box(vec![0x5au8; BLOCK])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "ying-profiles".to_string());
    let mode = args.next().unwrap_or_else(|| "pause".to_string());
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let _runner = ProfilerRunnerBuilder::default()
        .reporting_path(dir)
        .live_file(ying_profiler::utils::LiveFile::ReportingDir)
        .live_interval_ms(50)
        .build()
        .expect("runner settings")
        .spawn(&YING);
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut out = std::io::stdout().lock();
    for _ in 0..steps {
        for _ in 0..8 {
            kept.push(rust_grow());
        }
        let _ = writeln!(out, "held {}", kept.len() * BLOCK);
        let _ = out.flush();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = writeln!(out, "done");
    let _ = out.flush();
    std::thread::sleep(std::time::Duration::from_millis(400));
    match mode.as_str() {
        // SAFETY: none: the point is to crash, as a program with a bug does.
        "segv" => unsafe { std::ptr::null_mut::<i32>().write_volatile(1) },
        "abort" => std::process::abort(),
        // SAFETY: `_exit` ends the process at once; nothing after it runs.
        "_exit" => unsafe { libc::_exit(7) },
        "sigterm" => {
            // SAFETY: raise only sends a signal to this thread; SIGTERM's default ends the process.
            unsafe { libc::raise(libc::SIGTERM) };
        }
        _ => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
    }
    drop(kept);
}
