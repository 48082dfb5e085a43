//! The endpoint of the Rust front end, set with `ProfilerRunnerBuilder::http_addr`: started
//! with the runner, it serves this process's profiles (read back over plain HTTP/1.1 and by
//! `go tool pprof`) and its status. Reads have timeouts, so a hang fails the test.

mod common;

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use ying_profiler::YingProfiler;
use ying_profiler::utils::ProfilerRunnerBuilder;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_builder_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..30 {
        out.push(black_box(vec![7u8; 33_333].into_boxed_slice()));
    }
}

fn get(addr: SocketAddr, path: &str) -> (String, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("no endpoint at {addr}: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    (String::from_utf8_lossy(&all[..end]).into_owned(), all[end..].to_vec())
}

#[test]
fn builder_http_addr_serves_the_profiles() {
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = common::fresh_dir("serve-builder");
    let runner = ProfilerRunnerBuilder::default()
        .http_addr(addr)
        .check_interval_secs(3600)
        .report_at_exit(false)
        .reporting_path(dir.display().to_string())
        .build()
        .unwrap();
    assert_eq!(runner.http_addr(), Some(addr));
    assert_eq!(runner.push_url(), None);
    let mut keep = Vec::with_capacity(30);
    marker_builder_keep(&mut keep);
    let _handle = runner.spawn(&A);

    let (head, body) = get(addr, "/debug/pprof/heap");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("Content-Type: application/octet-stream"), "{head}");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("heap.pb.gz");
    std::fs::write(&file, &body).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=B", "-nodecount=300"])
        .arg(&file)
        .output()
        .expect("go is required: run scripts/test.sh (installs golang-go)");
    let top = String::from_utf8_lossy(&out.stdout);
    assert!(top.contains("Type: inuse_space"), "{top}");
    let line = top.lines().find(|l| l.contains("marker_builder_keep")).unwrap_or_default();
    assert_eq!(line.split_whitespace().nth(3), Some("999990B"), "{top}");

    let (head, body) = get(addr, "/debug/ying/status");
    let status = String::from_utf8_lossy(&body);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(status.contains(&format!("\"http_addr\":\"{addr}\"")), "{status}");
    assert!(status.contains("\"sample_interval_bytes\":1,"), "{status}");
    let (head, _) = get(addr, "/debug/pprof/nothing");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    drop(keep);
    let _ = std::fs::remove_dir_all(&dir);
}
