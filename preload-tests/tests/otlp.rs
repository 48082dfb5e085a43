//! OTLP pushes (`YING_OTLP_URL`) from a program under the shim, received and decoded by
//! `programs/otlp_receiver.py` with the OpenTelemetry project's own Python package (its
//! official `.proto` files compiled by protobuf): what the receiver resolves through the
//! dictionary is what the program did. A receiver that is busy gets the push again; one that
//! fails or rejects costs the program one warning line and nothing else. OTLP/gRPC, which the
//! default shim leaves out, is one warning line here and tested through the Rust front end
//! (`tests/otlp_grpc.rs`). Needs the packages in `target/otlp-python` (or
//! `YING_TEST_OTLP_PYTHON`), which `scripts/test.sh` installs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use preload_tests::{Outcome, Run, TestDir, compare};
use serde_json::Value;

/// The receiver, its port and the JSON line of every request it got.
struct Receiver {
    child: Child,
    port: u16,
    lines: mpsc::Receiver<Value>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the receiver listens and the shim pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Http,
    Grpc,
}

impl Wire {
    /// `YING_OTLP_URL` for a receiver on `port`.
    fn url(self, port: u16) -> String {
        match self {
            Wire::Http => format!("http://127.0.0.1:{port}"),
            Wire::Grpc => format!("grpc://127.0.0.1:{port}"),
        }
    }

    /// The path (the gRPC method's) every request arrives on.
    fn path(self) -> &'static str {
        match self {
            Wire::Http => "/v1development/profiles",
            Wire::Grpc => {
                "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
            }
        }
    }
}

fn receiver(mode: &str, wire: Wire) -> Receiver {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("YING_TEST_OTLP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../target/otlp-python"));
    assert!(
        python.join("opentelemetry/proto").is_dir(),
        "no opentelemetry-proto package in {} (scripts/test.sh installs it)",
        python.display()
    );
    let mut child = Command::new("python3")
        .arg(manifest.join("programs/otlp_receiver.py"))
        .arg(mode)
        .args(if wire == Wire::Grpc { &["grpc"][..] } else { &[][..] })
        .env("PYTHONPATH", &python)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = out.next().expect("the receiver's port").unwrap().trim().parse().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).expect("a JSON line")).is_err() {
                return;
            }
        }
    });
    Receiver { child, port, lines }
}

/// Runs endpoint_host under the shim, pushing every `interval` seconds to `r` over `wire`,
/// until `want` requests arrived (or 40 s passed); returns the program's outcome and the
/// requests.
fn run_until(
    dir: &TestDir,
    r: &Receiver,
    wire: Wire,
    interval: &str,
    want: usize,
    extra: &[(&str, &str)],
) -> (Outcome, Vec<Value>) {
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let stop = dir.join("stop");
    let url = wire.url(r.port);
    let run = Run::new(&exe)
        .arg(&stop)
        .arg("60")
        .with_preload()
        .envs(&[
            ("YING_OTLP_URL", &url),
            ("YING_PUSH_INTERVAL_SECS", interval),
            ("YING_SAMPLE_INTERVAL_BYTES", "1"),
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_REPORTING_PATH", &dir.join("reports").display().to_string()),
        ])
        .envs(extra)
        .timeout(Duration::from_secs(90));
    let host = std::thread::spawn(move || run.run());
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while got.len() < want && Instant::now() < deadline {
        if let Ok(v) = r.lines.recv_timeout(Duration::from_millis(200)) {
            got.push(v);
        }
    }
    std::fs::write(&stop, "").unwrap();
    let out = host.join().unwrap();
    out.assert_success("the program under the shim");
    assert_eq!(out.stdout_str(), "kept 2000 blocks, checksum 250008\n", "{}", out.describe());
    (out, got)
}

/// The samples of profile `ty` of a resolved request whose stack holds `function`: (value,
/// frames) each.
fn samples_of<'a>(req: &'a Value, ty: &str, function: &str) -> Vec<(u64, Vec<&'a str>)> {
    let profiles = req["resources"][0]["profiles"].as_array().unwrap();
    let p = profiles.iter().find(|p| p["type"] == ty).unwrap_or_else(|| panic!("no {ty}"));
    p["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let frames: Vec<&str> =
                s["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
            (s["value"].as_u64().unwrap(), frames)
        })
        .filter(|(_, frames)| frames.contains(&function))
        .collect()
}

fn sum(samples: &[(u64, Vec<&str>)]) -> u64 {
    samples.iter().map(|(v, _)| v).sum()
}

/// Three pushes over `wire`, decoded by the receiver, each checked against what the program did.
fn pushes_show_what_the_program_did(wire: Wire) {
    let dir = TestDir::new(&format!("otlp-{wire:?}"));
    let r = receiver("ok", wire);
    let extra = [
        ("YING_PUSH_HEADERS", "authorization=Bearer%20t0k3n,x-scope-orgid=team1"),
        ("YING_PUSH_LABELS", "service_name=ying-test,env=ci"),
    ];
    let (out, got) = run_until(&dir, &r, wire, "1", 3, &extra);
    assert!(out.ying_lines().is_empty(), "{}", out.describe());
    assert_eq!(got.len(), 3, "three pushes within 40 s at a 1 s interval: {got:#?}");
    let mut end_before = 0u64;
    for (i, push) in got.iter().enumerate() {
        assert!(push.get("malformed").is_none(), "push {i}: {push}");
        assert_eq!(push["path"], wire.path());
        let h = &push["headers"];
        assert_eq!(h["authorization"], "Bearer t0k3n");
        assert_eq!(h["x-scope-orgid"], "team1");
        if wire == Wire::Http {
            assert_eq!(h["content-type"], "application/x-protobuf");
        }
        let req = &push["request"];
        let res = &req["resources"][0]["attributes"];
        assert_eq!(res["service.name"], "ying-test", "{res}");
        assert_eq!(res["env"], "ci");
        assert_eq!(res["process.executable.name"], "endpoint_host");
        assert!(res["process.pid"].as_str().is_some_and(|p| p.parse::<u32>().is_ok()), "{res}");
        let profiles = req["resources"][0]["profiles"].as_array().unwrap();
        let types: Vec<(&str, &str)> = profiles
            .iter()
            .map(|p| (p["type"].as_str().unwrap(), p["unit"].as_str().unwrap()))
            .collect();
        assert_eq!(
            types,
            [
                ("alloc_objects", "count"),
                ("alloc_space", "bytes"),
                ("inuse_objects", "count"),
                ("inuse_space", "bytes")
            ]
        );
        for p in profiles {
            assert_eq!(p["scope"], "ying");
            assert_eq!(p["period_type"], serde_json::json!(["space", "bytes"]));
            assert_eq!(p["period"], 1);
        }
        // One time range per push, each starting where the last ended.
        let start = profiles[0]["time_unix_nano"].as_u64().unwrap();
        let end = start + profiles[0]["duration_nano"].as_u64().unwrap();
        if i > 0 {
            assert_eq!(start, end_before, "push {i} starts where the last ended");
        }
        end_before = end;
        // Retained now: the kept blocks (whole chunks: 4,099 bytes asked, 4,112 counted), in
        // every push, each stack opening on the program's function, not on malloc.
        let keep = samples_of(req, "inuse_space", "marker_keep");
        assert_eq!(sum(&keep), 2000 * 4112, "push {i}: {keep:?}");
        for (_, frames) in &keep {
            assert_eq!(frames[0], "marker_keep", "the allocator's frames are left out");
        }
        assert_eq!(sum(&samples_of(req, "inuse_objects", "marker_keep")), 2000);
        // Allocated since the last push: the churn, and the kept blocks in the first only.
        assert!(sum(&samples_of(req, "alloc_space", "marker_churn")) > 0, "push {i}");
        let kept_allocated = sum(&samples_of(req, "alloc_space", "marker_keep"));
        assert_eq!(kept_allocated, if i == 0 { 2000 * 4112 } else { 0 }, "push {i}");
    }
    let mappings = got[0]["request"]["mappings"].as_array().unwrap();
    let exe = mappings.iter().find(|m| m["file"].as_str().unwrap().ends_with("/endpoint_host"));
    let build_id = exe.map(|m| &m["attributes"]["process.executable.build_id.gnu"]);
    assert!(
        build_id.and_then(Value::as_str).is_some_and(|b| b.len() >= 16),
        "the executable's mapping carries its build id: {mappings:#?}"
    );
}

#[test]
fn http_pushes_decode_with_the_official_protos_and_show_what_the_program_did() {
    pushes_show_what_the_program_did(Wire::Http);
}

/// The shim as `scripts/test.sh` builds it has no OTLP/gRPC (the `otlp-grpc` feature, which
/// `tests/otlp_grpc.rs` tests through the Rust front end): a `grpc://` URL is one warning line
/// saying how to get it, and the program runs as its plain run does.
#[test]
fn grpc_in_a_build_without_it_is_one_warning_line() {
    let dir = TestDir::new("otlp-grpc-off");
    let r = receiver("ok", Wire::Grpc);
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let run = Run::new(&exe).arg(dir.join("no-stop")).arg("2");
    let url = Wire::Grpc.url(r.port);
    let vars = [("YING_OTLP_URL", url.as_str()), ("YING_PUSH_INTERVAL_SECS", "1")];
    let c = compare(&run, &vars, &dir.reports("grpc-off"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].contains("not started") && lines[0].contains("otlp-grpc"),
        format!("expected one warning line naming the feature: {lines:#?}"),
    );
    assert_eq!(r.lines.try_iter().count(), 0, "nothing was sent");
}

#[test]
fn a_busy_receiver_gets_the_same_push_again() {
    let dir = TestDir::new("otlp-busy");
    let r = receiver("busy-once", Wire::Http);
    // 503 with Retry-After: 1 to the first request; the interval leaves room for the retry.
    let (out, got) = run_until(&dir, &r, Wire::Http, "3", 2, &[]);
    assert!(out.ying_lines().is_empty(), "a retried push is no failure: {}", out.describe());
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[0]["request"], got[1]["request"], "the retry sends the same profiles");
}

#[test]
fn a_failing_or_rejecting_receiver_costs_one_warning_line() {
    for (wire, mode, said) in
        [(Wire::Http, "fail", "HTTP 500 not now"), (Wire::Http, "reject", "rejected 1 profile(s)")]
    {
        let dir = TestDir::new(&format!("otlp-{mode}-{wire:?}"));
        let r = receiver(mode, wire);
        let exe = dir.compile_c("endpoint_host.c", &[]);
        // The program runs 4 s (no stop file), pushing every second.
        let run = Run::new(&exe).arg(dir.join("no-stop")).arg("4");
        let url = wire.url(r.port);
        let vars = [("YING_OTLP_URL", url.as_str()), ("YING_PUSH_INTERVAL_SECS", "1")];
        let c = compare(&run, &vars, &dir.reports(mode));
        let lines = c.with.ying_lines();
        c.check(
            lines.len() == 1
                && lines[0].starts_with("ying: warning: OTLP push to ")
                && lines[0].contains(said),
            format!("{wire:?} {mode}: expected one warning line saying {said:?}: {lines:#?}"),
        );
        assert!(r.lines.try_iter().count() >= 2, "{wire:?} {mode}: the receiver was asked");
    }
}

/// A receiver that takes the request and never answers (for 60 s): the pushing thread waits
/// for it, the program does not. It ends on time, as its plain run does, with no line (the
/// push's own time limit, 10 s, is never reached); the run's timeout, 9 s for a program of
/// 3 s, is under that limit, so an exit that waited for the push fails the test.
#[test]
fn a_slow_receiver_never_holds_the_program() {
    let dir = TestDir::new("otlp-slow");
    let r = receiver("slow", Wire::Http);
    let exe = dir.compile_c("endpoint_host.c", &[]);
    // The program runs 3 s (no stop file), its first push after 1 s.
    let run = Run::new(&exe).arg(dir.join("no-stop")).arg("3").timeout(Duration::from_secs(9));
    let url = Wire::Http.url(r.port);
    let vars = [("YING_OTLP_URL", url.as_str()), ("YING_PUSH_INTERVAL_SECS", "1")];
    let c = compare(&run, &vars, &dir.reports("slow"));
    c.assert_no_ying_lines();
    let got = r.lines.recv_timeout(Duration::from_secs(5)).expect("the receiver got a push");
    assert!(got.get("malformed").is_none(), "{got}");
}
