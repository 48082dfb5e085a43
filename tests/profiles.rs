//! Profiles as bytes (`ying_profiler::profiles`) served from a real axum router, the pattern of
//! the module's doc example: the handlers call the bytes API, a plain HTTP/1.1 client reads the
//! answers, and `go tool pprof` reads the profiles (exact mode: the marker functions' bytes are
//! known). Needs Go (`scripts/test.sh` installs golang-go when missing).

mod common;

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use axum::{Router, http::header, response::IntoResponse, routing::get};
use ying_profiler::YingProfiler;
use ying_profiler::profiles::{self, AllocBaseline, HeapView};
use ying_profiler::report::ReportOptions;

#[global_allocator]
static A: YingProfiler = YingProfiler::new(1, 64 << 30);

/// The baseline of the delta route (the previous call's "now").
static BASE: Mutex<Option<AllocBaseline>> = Mutex::new(None);

#[inline(never)]
fn marker_bytes_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..40 {
        out.push(black_box(vec![5u8; 25_000].into_boxed_slice()));
    }
}

#[inline(never)]
fn marker_bytes_churn() {
    for _ in 0..30 {
        drop(black_box(vec![6u8; 100_000]));
    }
}

fn gz(view: HeapView) -> Result<impl IntoResponse, String> {
    let bytes = profiles::pprof_gz(&A, view).map_err(|e| e.to_string())?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes))
}

async fn heap() -> Result<impl IntoResponse, String> {
    tokio::task::spawn_blocking(|| gz(HeapView::Inuse)).await.map_err(|e| e.to_string())?
}

async fn allocs() -> Result<impl IntoResponse, String> {
    tokio::task::spawn_blocking(|| gz(HeapView::Alloc)).await.map_err(|e| e.to_string())?
}

async fn delta() -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(|| {
        let since = BASE.lock().unwrap().take().expect("a baseline");
        let (gz, now) =
            profiles::delta_pprof_gz(&A, &since, HeapView::Alloc).map_err(|e| e.to_string())?;
        *BASE.lock().unwrap() = Some(now);
        Ok(gz)
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn report() -> Result<String, String> {
    tokio::task::spawn_blocking(|| profiles::text_report(&A, &ReportOptions::default()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

async fn svg() -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(|| profiles::flamegraph_svg(&A, &ReportOptions::default()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// GET `path` with a plain HTTP/1.1 request; the status line and the body.
fn get_from(port: u16, path: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a header end") + 4;
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head}");
    (head.lines().next().unwrap_or("").to_string(), all[end..].to_vec())
}

fn pprof_top(dir: &std::path::Path, name: &str, body: &[u8], index: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-unit=B", "-nodecount=200"])
        .arg(format!("-sample_index={index}"))
        .arg(&path)
        .output()
        .expect("go is required: run scripts/test.sh (installs golang-go)");
    assert!(out.status.success(), "go tool pprof: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn axum_router_serves_the_bytes_api() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/debug/pprof/heap", get(heap))
        .route("/debug/pprof/allocs", get(allocs))
        .route("/delta", get(delta))
        .route("/report.txt", get(report))
        .route("/flamegraph.svg", get(svg));
    rt.spawn(async move { axum::serve(listener, app).await });
    let dir = common::scratch("profiles");

    let mut keep = Vec::with_capacity(40);
    marker_bytes_keep(&mut keep);
    *BASE.lock().unwrap() = Some(profiles::alloc_baseline(&A).unwrap());
    marker_bytes_churn();

    let (status, body) = get_from(port, "/debug/pprof/heap");
    assert!(status.contains("200"), "{status}");
    let inuse = pprof_top(&dir, "heap.pb.gz", &body, "inuse_space");
    assert!(inuse.contains("Type: inuse_space"), "{inuse}");
    assert_eq!(common::cum_bytes(&inuse, "marker_bytes_keep"), Some(40 * 25_000), "{inuse}");
    assert_eq!(common::cum_bytes(&inuse, "marker_bytes_churn"), None, "{inuse}");

    // The allocs view opens on alloc_space (no -sample_index needed).
    let (status, body) = get_from(port, "/debug/pprof/allocs");
    assert!(status.contains("200"), "{status}");
    let path = dir.join("allocs.pb.gz");
    std::fs::write(&path, &body).unwrap();
    let out = Command::new("go").args(["tool", "pprof", "-top", "-unit=B"]).arg(&path).output();
    let top = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
    assert!(top.contains("Type: alloc_space"), "{top}");
    assert_eq!(common::cum_bytes(&top, "marker_bytes_churn"), Some(30 * 100_000), "{top}");

    // The delta since the baseline holds the churn, not what was kept before it; its inuse
    // figures are those of now.
    let (status, body) = get_from(port, "/delta");
    assert!(status.contains("200"), "{status}");
    let d = pprof_top(&dir, "delta.pb.gz", &body, "alloc_space");
    assert_eq!(common::cum_bytes(&d, "marker_bytes_churn"), Some(30 * 100_000), "{d}");
    assert_eq!(common::cum_bytes(&d, "marker_bytes_keep"), None, "{d}");
    let d_inuse = pprof_top(&dir, "delta.pb.gz", &body, "inuse_space");
    assert_eq!(common::cum_bytes(&d_inuse, "marker_bytes_keep"), Some(40 * 25_000), "{d_inuse}");
    // A second delta right after: the churn is not counted again.
    let (_, body) = get_from(port, "/delta");
    let d2 = pprof_top(&dir, "delta2.pb.gz", &body, "alloc_space");
    assert_eq!(common::cum_bytes(&d2, "marker_bytes_churn"), None, "{d2}");

    let (status, body) = get_from(port, "/report.txt");
    assert!(status.contains("200"), "{status}");
    let txt = String::from_utf8(body).unwrap();
    assert!(txt.contains("marker_bytes_keep"), "{txt}");
    let (status, body) = get_from(port, "/flamegraph.svg");
    assert!(status.contains("200"), "{status}");
    let svg = String::from_utf8(body).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("marker_bytes_keep"), "{}", &svg[..200]);

    // The peak view: the kept blocks were retained at the peak.
    let peak = profiles::pprof_gz(&A, HeapView::Peak).unwrap();
    let p = pprof_top(&dir, "peak.pb.gz", &peak, "inuse_space");
    assert!(p.contains("marker_bytes_keep"), "{p}");
    assert!(
        profiles::delta_pprof_gz(&A, &AllocBaseline::empty(std::time::UNIX_EPOCH), HeapView::Peak)
            .is_err()
    );
    drop(keep);

    // OTLP: a Tokio task's kept blocks, named by the task's future (its `task` attribute), in
    // the request `delta_otlp` encodes, decoded with the OpenTelemetry project's types.
    let kept = rt.block_on(rt.spawn(task_keeping())).unwrap();
    let since = AllocBaseline::empty(std::time::UNIX_EPOCH);
    let resource = [("service.name".to_string(), "profiles-test".to_string())];
    let (bytes, _) = profiles::delta_otlp(&A, &since, &resource).unwrap();
    let (bytes_by_task, frames) = otlp_inuse_of(&bytes, "marker_task_keep");
    assert_eq!(bytes_by_task, [("profiles::task_keeping".to_string(), 10 * 30_000)], "{frames:?}");
    assert_eq!(frames[0], "profiles::marker_task_keep", "the stack opens past the allocator");
    // And the endpoint's pprof profile labels the same bytes with the task, as
    // `go tool pprof -tags` lists them.
    let (_, body) = get_from(port, "/debug/pprof/heap");
    let path = dir.join("tasks.pb.gz");
    std::fs::write(&path, &body).unwrap();
    let out = Command::new("go").args(["tool", "pprof", "-tags", "-unit=B"]).arg(&path).output();
    let tags = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
    // The task's bytes: the kept blocks and the vector that holds them.
    let task_bytes = tags
        .lines()
        .find(|l| l.trim_end().ends_with(": profiles::task_keeping"))
        .and_then(|l| l.split_whitespace().next()?.strip_suffix('B')?.parse::<f64>().ok());
    assert!(task_bytes.is_some_and(|b| (300_000.0..301_000.0).contains(&b)), "{tags}");
    assert!(!tags.contains("__rust_alloc"), "an allocator frame named as a task: {tags}");
    drop(kept);
    let _ = std::fs::remove_dir_all(&dir);
}

#[inline(never)]
fn marker_task_keep(out: &mut Vec<Box<[u8]>>) {
    for _ in 0..10 {
        out.push(black_box(vec![9u8; 30_000].into_boxed_slice()));
    }
}

async fn task_keeping() -> Vec<Box<[u8]>> {
    tokio::task::yield_now().await;
    let mut out = Vec::with_capacity(10);
    marker_task_keep(&mut out);
    out
}

/// The `inuse_space` of the OTLP request `bytes` in the stacks through `function`, summed per
/// `task` attribute, and the frames (innermost first) of the first such stack.
fn otlp_inuse_of(bytes: &[u8], function: &str) -> (Vec<(String, i64)>, Vec<String>) {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;
    let req = ExportProfilesServiceRequest::decode(bytes).expect("a request");
    let d = req.dictionary.expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].clone();
    let p = &req.resource_profiles[0].scope_profiles[0].profiles;
    let inuse = p.iter().find(|p| s(p.sample_type.unwrap().type_strindex) == "inuse_space");
    let mut by_task: Vec<(String, i64)> = Vec::new();
    let mut first = Vec::new();
    for smp in &inuse.expect("inuse_space").samples {
        let frames: Vec<String> = d.stack_table[smp.stack_index as usize]
            .location_indices
            .iter()
            .flat_map(|&l| d.location_table[l as usize].lines.iter())
            .map(|line| s(d.function_table[line.function_index as usize].name_strindex))
            .collect();
        if !frames.iter().any(|f| f.ends_with(function)) {
            continue;
        }
        let task = smp.attribute_indices.iter().find_map(|&i| {
            let a = &d.attribute_table[i as usize];
            match (s(a.key_strindex).as_str(), a.value.as_ref().and_then(|v| v.value.as_ref())) {
                ("task", Some(Value::StringValue(v))) => Some(v.clone()),
                _ => None,
            }
        });
        let task = task.unwrap_or_default();
        match by_task.iter_mut().find(|(t, _)| *t == task) {
            Some(row) => row.1 += smp.values[0],
            None => by_task.push((task, smp.values[0])),
        }
        if first.is_empty() {
            first = frames;
        }
    }
    (by_task, first)
}
