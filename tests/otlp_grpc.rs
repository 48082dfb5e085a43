//! OTLP/gRPC pushes of the Rust front end (the `otlp-grpc` feature), set with
//! `ProfilerRunnerBuilder::otlp_url("grpc://...")`, received by
//! `preload-tests/programs/otlp_receiver.py`: the OpenTelemetry project's own service
//! definition served by grpcio, every request decoded with its own protos. The receiver answers
//! the first request UNAVAILABLE: the push is sent again, the same, and later ones carry what
//! this process allocated, under its Tokio task. Needs the Python packages `scripts/test.sh`
//! installs in `target/otlp-python` (or `YING_TEST_OTLP_PYTHON`).

mod common;

use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use ying_profiler::YingProfiler;
use ying_profiler::utils::ProfilerRunnerBuilder;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

#[inline(never)]
fn marker_grpc_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..20 {
        out.push(black_box(vec![3u8; 20_000].into_boxed_slice()));
    }
}

async fn grpc_keeping() -> Vec<Box<[u8]>> {
    tokio::task::yield_now().await;
    let mut out = Vec::with_capacity(20);
    marker_grpc_keep(&mut out);
    out
}

/// The bytes of `ty` in `request`'s stacks through `function`, and the `task` attributes of
/// those stacks.
fn bytes_through(request: &Value, ty: &str, function: &str) -> (u64, Vec<String>) {
    let profiles = request["resources"][0]["profiles"].as_array().expect("profiles");
    let p = profiles.iter().find(|p| p["type"] == ty).unwrap_or_else(|| panic!("no {ty}"));
    let mut bytes = 0;
    let mut tasks = Vec::new();
    for s in p["samples"].as_array().expect("samples") {
        let frames = s["frames"].as_array().expect("frames");
        if frames.iter().any(|f| f.as_str().is_some_and(|f| f.ends_with(function))) {
            bytes += s["value"].as_u64().unwrap();
            if let Some(t) = s["attributes"]["task"].as_str() {
                tasks.push(t.to_string());
            }
        }
    }
    (bytes, tasks)
}

#[test]
fn grpc_pushes_reach_the_profiles_service_and_a_busy_one_is_sent_again() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("YING_TEST_OTLP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("target/otlp-python"));
    assert!(
        python.join("grpc").is_dir(),
        "no grpcio in {} (scripts/test.sh installs it)",
        python.display()
    );
    let mut receiver = Command::new("python3")
        .arg(manifest.join("preload-tests/programs/otlp_receiver.py"))
        .args(["busy-once", "grpc"])
        .env("PYTHONPATH", &python)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().expect("a port").unwrap().trim().parse().unwrap();
    let (tx, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if tx.send(serde_json::from_str::<Value>(&l).expect("a JSON line")).is_err() {
                return;
            }
        }
    });

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let kept = rt.unwrap().block_on(async { tokio::spawn(grpc_keeping()).await.unwrap() });
    let dir = common::fresh_dir("otlp-grpc");
    let runner = ProfilerRunnerBuilder::default()
        .otlp_url(format!("grpc://127.0.0.1:{port}"))
        .push_interval_secs(3)
        .push_labels([("service_name", "grpc-test")])
        .push_headers([("authorization", "Bearer g")])
        .check_interval_secs(3600)
        .report_at_exit(false)
        .reporting_path(dir.display().to_string())
        .build()
        .unwrap();
    let _handle = runner.spawn(&A);

    let mut requests = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while requests.len() < 3 && Instant::now() < deadline {
        if let Ok(v) = got.recv_timeout(Duration::from_millis(200)) {
            requests.push(v);
        }
    }
    let _ = receiver.kill();
    let _ = receiver.wait();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    for r in &requests {
        assert!(r.get("malformed").is_none(), "{r}");
        assert_eq!(r["headers"]["authorization"], "Bearer g");
        let res = &r["request"]["resources"][0]["attributes"];
        assert_eq!(res["service.name"], "grpc-test", "{res}");
    }
    // The first was answered UNAVAILABLE: the second is the same push, sent again.
    assert_eq!(requests[0]["request"], requests[1]["request"], "the retry sends the same push");
    // What this process keeps, exactly (every byte sampled), under its task's kind.
    let (bytes, tasks) = bytes_through(&requests[1]["request"], "inuse_space", "marker_grpc_keep");
    assert_eq!(bytes, 20 * 20_000, "{:#}", requests[1]);
    assert!(tasks.iter().all(|t| t == "otlp_grpc::grpc_keeping") && !tasks.is_empty(), "{tasks:?}");
    // The next push carries the allocations since the retried one: not the kept blocks again.
    let (again, _) = bytes_through(&requests[2]["request"], "alloc_space", "marker_grpc_keep");
    assert_eq!(again, 0, "{:#}", requests[2]);
    drop(kept);
    let _ = std::fs::remove_dir_all(&dir);
}
