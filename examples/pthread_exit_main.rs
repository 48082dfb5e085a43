//! A program whose `main` ends with `pthread_exit` while a worker still runs, profiled by the
//! `#[global_allocator]` front end with a report thread: the process must end when the worker
//! does, as it would without Ying (glibc's last thread calls `exit(0)`), with its exit report.
//! Run by `tests/pthread_exit_main.rs` with the reporting directory as its argument.
//!
//! Its `main` is the C one: `pthread_exit` unwinds the calling thread, and Rust's own `main`
//! wrapper aborts a forced unwind, with or without Ying.

#![no_main]

use ying_profiler::YingProfiler;
use ying_profiler::utils::ProfilerRunnerBuilder;

#[global_allocator]
static YING: YingProfiler = YingProfiler::default();

extern "C" fn say_goodbye() {
    println!("atexit handler ran");
}

#[inline(never)]
fn marker_kept() -> Vec<u8> {
    std::hint::black_box(vec![7u8; 1 << 20])
}

/// The C `main`: nothing of Rust's runs around it, and it holds nothing to drop when
/// `pthread_exit` unwinds it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn main(
    _argc: libc::c_int,
    _argv: *const *const libc::c_char,
) -> libc::c_int {
    start();
    println!("main exits");
    // SAFETY: ends the main thread only; nothing of it is used afterwards.
    unsafe { libc::pthread_exit(std::ptr::null_mut()) }
}

fn start() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "ying-profiles".to_string());
    let _runner = ProfilerRunnerBuilder::default()
        .reporting_path(dir)
        .check_interval_secs(1usize)
        .build()
        .expect("runner settings")
        .spawn(&YING);
    // SAFETY: `say_goodbye` is a plain extern "C" fn.
    unsafe { libc::atexit(say_goodbye) };
    std::mem::forget(marker_kept());
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::mem::forget(marker_kept());
        println!("worker done");
    });
}
