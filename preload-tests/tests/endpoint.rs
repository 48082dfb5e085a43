//! The built-in endpoint (`YING_HTTP_ADDR`) of programs running under the shim: a C program and
//! a Python program answer `curl` on every route and `go tool pprof` on `/debug/pprof/heap` and
//! `/debug/pprof/allocs?seconds=2` with the expected top functions; garbage, huge headers, a
//! slow client and 1,000 requests in a loop leave the program's output and exit status those
//! of the plain run, and the endpoint still answers; a busy port is one warning. Each program
//! runs until the test creates its stop file (or its own time limit), under a timeout. Needs
//! curl and Go (`scripts/test.sh` installs both when missing).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use preload_tests::{Comparison, Outcome, Run, TestDir, compare, python3, require_tool};

/// Mirrors programs/endpoint_host.c.
const KEEP: u64 = 2000;
/// glibc's chunk of a 4099-byte request (the shim counts chunks).
const KEEP_CHUNK: u64 = 4112;

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `run` (its last arguments are the stop file and the time limit) without the shim with
/// the stop file already there, then with the shim and `vars` while `client` talks to its
/// endpoint at `port`; the stop file is created when `client` returns (or panics). Both runs
/// must print the same and exit the same way.
fn with_client(
    dir: &TestDir,
    program: &[&Path],
    vars: &[(&str, &str)],
    client: impl FnOnce(u16),
) -> Comparison {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let plain_stop = dir.join("stop-plain");
    std::fs::write(&plain_stop, "").unwrap();
    let shim_stop = dir.join("stop-shim");
    let _ = std::fs::remove_file(&shim_stop);
    let run = |stop: &Path| {
        let mut r = Run::new(program[0]);
        for a in &program[1..] {
            r = r.arg(a);
        }
        r.arg(stop).arg("60").cwd(dir.path()).timeout(Duration::from_secs(90))
    };
    let without = run(&plain_stop).run();
    let reports = dir.join("reports");
    let mut with = run(&shim_stop)
        .with_preload()
        .envs(vars)
        .env("YING_HTTP_ADDR", &addr)
        .env("YING_REPORTING_PATH", reports.display().to_string());
    with = with.env("YING_CHECK_INTERVAL_SECS", "0");
    let shim = std::thread::spawn(move || with.run());
    let talked = catch_unwind(AssertUnwindSafe(|| {
        wait_for(port, &shim);
        client(port)
    }));
    std::fs::write(&shim_stop, "").unwrap();
    let with: Outcome = shim.join().unwrap();
    let c = Comparison { without, with, reports };
    if let Err(e) = talked {
        eprintln!("{}", c.describe());
        resume_unwind(e);
    }
    c.check(!c.with.timed_out, "the run WITH the shim timed out");
    c.check(c.with.status == c.without.status, "exit status differs");
    c.check(c.with.stdout == c.without.stdout, "stdout differs between the two runs");
    c.check(c.with.stderr_without_ying() == c.without.stderr_str(), "stderr differs");
    c
}

/// Waits until the endpoint accepts connections (at most 30 s).
fn wait_for(port: u16, shim: &std::thread::JoinHandle<Outcome>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(!shim.is_finished(), "the program ended before its endpoint answered");
        assert!(Instant::now() < deadline, "no endpoint on port {port} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `curl` on `url`: status code, content type and body.
fn curl(dir: &TestDir, method: &str, url: &str) -> (u16, String, Vec<u8>) {
    let out = dir.join("curl.out");
    let _ = std::fs::remove_file(&out);
    let o = Run::new("curl")
        .args(&["-sS", "--max-time", "30", "-X", method, "-o"])
        .arg(&out)
        .args(&["-w", "%{http_code}|%{content_type}", url])
        .run();
    o.assert_success(&format!("curl {url}"));
    let w = o.stdout_str();
    let (code, ty) = w.split_once('|').unwrap_or((&w, ""));
    (code.parse().unwrap_or(0), ty.to_string(), std::fs::read(&out).unwrap_or_default())
}

/// `go tool pprof -top` of `what` (a URL or a file), in bytes.
fn pprof_top(dir: &TestDir, what: &str, extra: &[&str]) -> String {
    let o = Run::new("go")
        .args(&["tool", "pprof", "-top", "-unit=B", "-nodecount=40"])
        .args(extra)
        .arg(what)
        .env("PPROF_TMPDIR", dir.path().display().to_string())
        .timeout(Duration::from_secs(60))
        .run();
    o.assert_success(&format!("go tool pprof {what}"));
    o.stdout_str()
}

/// The function with the largest flat value of a `-top` listing.
fn top_flat(top: &str) -> String {
    let mut lines = top.lines().skip_while(|l| !l.contains("flat%"));
    lines.next();
    lines
        .next()
        .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The cumulative bytes of the first line naming `name`.
fn cum_bytes(top: &str, name: &str) -> Option<u64> {
    top.lines()
        .skip_while(|l| !l.contains("flat%"))
        .find(|l| l.split_whitespace().skip(5).any(|w| w == name))
        .and_then(|l| l.split_whitespace().nth(3)?.strip_suffix('B')?.parse().ok())
}

fn tools() -> bool {
    require_tool("curl").is_some() && require_tool("go").is_some()
}

fn c_host(dir: &TestDir) -> PathBuf {
    dir.compile_c("endpoint_host.c", &[])
}

#[test]
fn c_program_answers_every_route() {
    assert!(tools(), "curl and go are required: run scripts/test.sh (installs them)");
    let dir = TestDir::new("endpoint-c");
    let exe = c_host(&dir);
    let exact = [("YING_SAMPLE_INTERVAL_BYTES", "1"), ("YING_SEED", "1")];
    let c = with_client(&dir, &[&exe], &exact, |port| {
        let base = format!("http://127.0.0.1:{port}");
        let (code, ty, body) = curl(&dir, "GET", &format!("{base}/debug/pprof/heap"));
        assert_eq!((code, ty.as_str()), (200, "application/octet-stream"));
        assert_eq!(&body[..2], b"\x1f\x8b", "gzip");

        let heap = pprof_top(&dir, &format!("{base}/debug/pprof/heap"), &[]);
        assert!(heap.contains("Type: inuse_space"), "{heap}");
        assert!(heap.contains("Build ID: "), "mappings carry build ids: {heap}");
        assert_eq!(top_flat(&heap), "marker_keep", "{heap}");
        assert_eq!(cum_bytes(&heap, "marker_keep"), Some(KEEP * KEEP_CHUNK), "{heap}");

        let allocs = pprof_top(&dir, &format!("{base}/debug/pprof/allocs?seconds=2"), &[]);
        assert!(allocs.contains("Type: alloc_space"), "{allocs}");
        assert!(allocs.contains("Duration: 2"), "{allocs}");
        assert_eq!(top_flat(&allocs), "marker_churn", "{allocs}");
        assert_eq!(cum_bytes(&allocs, "marker_keep"), None, "kept before the 2 s: {allocs}");
        // The whole allocation profile opens on alloc_space and has both.
        let all = pprof_top(&dir, &format!("{base}/debug/pprof/allocs"), &[]);
        assert!(all.contains("Type: alloc_space"), "{all}");
        assert_eq!(cum_bytes(&all, "marker_keep"), Some(KEEP * KEEP_CHUNK), "{all}");
        // And the heap's delta: what was retained over 2 s did not change.
        let hd = pprof_top(&dir, &format!("{base}/debug/pprof/heap?seconds=2"), &[]);
        assert!(hd.contains("Type: inuse_space"), "{hd}");
        assert_eq!(cum_bytes(&hd, "marker_keep"), None, "{hd}");

        for (q, want) in [("heap?debug=1", "marker_keep"), ("allocs?debug=1", "marker_churn")] {
            let (code, ty, body) = curl(&dir, "GET", &format!("{base}/debug/pprof/{q}"));
            let text = String::from_utf8_lossy(&body);
            assert_eq!((code, ty.as_str()), (200, "text/plain; charset=utf-8"), "{text}");
            assert!(text.contains(want), "{q}: {text}");
        }
        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/pprof/heap?gc=1"));
        assert_eq!((code, &body[..2]), (200, &b"\x1f\x8b"[..]));

        let peak = pprof_top(&dir, &format!("{base}/debug/pprof/heap/peak"), &[]);
        assert!(peak.contains("Type: inuse_space") && peak.contains("marker_keep"), "{peak}");

        let (code, ty, body) = curl(&dir, "GET", &format!("{base}/debug/ying/flamegraph.svg"));
        let svg = String::from_utf8_lossy(&body);
        assert_eq!((code, ty.as_str()), (200, "image/svg+xml"));
        assert!(svg.contains("<svg") && svg.contains("marker_keep"), "{svg}");

        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/ying/report.txt"));
        let txt = String::from_utf8_lossy(&body);
        assert!(code == 200 && txt.contains("marker_keep"), "{code} {txt}");

        let (code, ty, body) = curl(&dir, "GET", &format!("{base}/debug/ying/status"));
        let status = String::from_utf8_lossy(&body);
        assert_eq!((code, ty.as_str()), (200, "application/json"), "{status}");
        assert!(status.contains("\"sample_interval_bytes\":1,"), "{status}");
        assert!(status.contains(&format!("\"http_addr\":\"127.0.0.1:{port}\"")), "{status}");
        let retained: u64 = status
            .split("\"retained_bytes\":")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
            .unwrap_or(0);
        assert!(retained >= KEEP * KEEP_CHUNK, "{status}");

        let (code, ty, body) = curl(&dir, "POST", &format!("{base}/debug/ying/dump"));
        let json = String::from_utf8_lossy(&body);
        assert_eq!((code, ty.as_str()), (200, "application/json"), "{json}");
        let pprof = json.split("\"pprof\":\"").nth(1).and_then(|s| s.split('"').next());
        let pprof = pprof.unwrap_or_else(|| panic!("no pprof path in {json}"));
        assert!(Path::new(pprof).exists(), "{json}");

        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/ying/dump"));
        assert_eq!(code, 405, "{}", String::from_utf8_lossy(&body));
        let (code, _, _) = curl(&dir, "POST", &format!("{base}/debug/pprof/heap"));
        assert_eq!(code, 405);
        let (code, _, body) = curl(&dir, "GET", &format!("{base}/nope"));
        assert_eq!(code, 404);
        assert!(String::from_utf8_lossy(&body).contains("/debug/pprof/"));
        for q in ["seconds=0", "seconds=100000", "seconds=x", "debug=x", "seconds=1&debug=1"] {
            let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/pprof/heap?{q}"));
            assert_eq!(code, 400, "{q}: {}", String::from_utf8_lossy(&body));
        }
        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/pprof/"));
        assert!(code == 200 && String::from_utf8_lossy(&body).contains("/debug/ying/status"));
    });
    c.assert_no_ying_lines();
}

#[test]
fn python_program_heap_and_allocs() {
    assert!(tools(), "curl and go are required: run scripts/test.sh (installs them)");
    let Some((py, _)) = python3() else { return };
    let dir = TestDir::new("endpoint-py");
    let script = preload_tests::programs_dir().join("endpoint_host.py");
    let vars = [("YING_SAMPLE_INTERVAL_BYTES", "4096"), ("YING_SEED", "1")];
    let c = with_client(&dir, &[&py, &script], &vars, |port| {
        let base = format!("http://127.0.0.1:{port}");
        // bytearray(n) reaches malloc through PyByteArray_Resize (PyObject_Malloc and the
        // like are dropped as allocator frames); an interpreter built without debug
        // information may show the bytearray function it is inlined into instead.
        // The endpoint can answer before the blocks are kept: the report thread starts at
        // the interpreter's first safe point, a `read` of its start-up files.
        let started = std::time::Instant::now();
        let heap = loop {
            let heap = pprof_top(&dir, &format!("{base}/debug/pprof/heap"), &[]);
            let top = top_flat(&heap);
            let kept = cum_bytes(&heap, &top).unwrap_or(0);
            let ready =
                top.to_ascii_lowercase().contains("bytearray") && kept >= 500 * 40_000 * 8 / 10;
            if ready || started.elapsed() > Duration::from_secs(20) {
                break heap;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(heap.contains("Type: inuse_space"), "{heap}");
        let top = top_flat(&heap);
        assert!(top.to_ascii_lowercase().contains("bytearray"), "{heap}");
        let kept = cum_bytes(&heap, &top).unwrap_or(0);
        assert!(kept >= 500 * 40_000 * 8 / 10, "500 blocks of 40,000 bytes kept: {heap}");
        let allocs = pprof_top(&dir, &format!("{base}/debug/pprof/allocs?seconds=2"), &[]);
        assert!(allocs.contains("Type: alloc_space") && allocs.contains("Duration: 2"));
        assert_eq!(top_flat(&allocs), top, "{allocs}");
        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/ying/report.txt"));
        assert!(code == 200 && String::from_utf8_lossy(&body).contains(&top));
        let (code, _, body) = curl(&dir, "GET", &format!("{base}/debug/ying/flamegraph.svg"));
        assert!(code == 200 && String::from_utf8_lossy(&body).contains(&top));
    });
    c.assert_no_ying_lines();
}

/// Sends `bytes` on a new connection and returns what the endpoint answered (maybe nothing).
fn raw(port: u16, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_line(answer: &str) -> &str {
    answer.lines().next().unwrap_or("")
}

#[test]
fn malformed_requests_change_nothing_and_the_endpoint_still_answers() {
    assert!(tools(), "curl and go are required: run scripts/test.sh (installs them)");
    let dir = TestDir::new("endpoint-abuse");
    let exe = c_host(&dir);
    let vars = [("YING_SAMPLE_INTERVAL_BYTES", "4096"), ("YING_SEED", "1")];
    let c = with_client(&dir, &[&exe], &vars, |port| {
        let a = raw(port, b"\x00\xff\x13garbage\r\n\r\n");
        assert!(status_line(&a).starts_with("HTTP/1.1 400"), "{a}");
        assert!(a.contains("malformed request"), "{a}");
        let a = raw(port, b"GET /debug/pprof/heap HTTP/9.9\r\n\r\n");
        assert!(status_line(&a).starts_with("HTTP/1.1 400"), "{a}");
        // A head larger than the limit: 431 (or the connection closed while still sending).
        let mut big = b"GET /debug/pprof/heap HTTP/1.1\r\nX-Big: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 1 << 20));
        let a = raw(port, &big);
        assert!(a.is_empty() || status_line(&a).starts_with("HTTP/1.1 431"), "{a}");
        let mut many = b"GET /debug/pprof/heap HTTP/1.1\r\n".to_vec();
        for i in 0..100 {
            many.extend(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend(b"\r\n");
        let a = raw(port, &many);
        assert!(status_line(&a).starts_with("HTTP/1.1 431"), "{a}");
        // Connections that say nothing.
        for _ in 0..20 {
            drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
        }
        // A slow client: half a request line, then silence. It is cut off after 5 s.
        let started = Instant::now();
        let a = raw(port, b"GET /debug/pp");
        assert!(status_line(&a).starts_with("HTTP/1.1 408"), "{a}");
        assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
        // A client that asks and never reads a large answer, then goes away.
        for _ in 0..3 {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /debug/ying/flamegraph.svg HTTP/1.1\r\n\r\n").unwrap();
        }
        // 1,000 requests in a loop.
        let paths = ["/debug/ying/status", "/nope", "/debug/pprof/", "/debug/pprof/heap"];
        for i in 0..1000 {
            let path = paths[i % paths.len()];
            let a = raw(port, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let want = if path == "/nope" { "HTTP/1.1 404" } else { "HTTP/1.1 200" };
            assert!(status_line(&a).starts_with(want), "request {i} {path}: {a}");
        }
        // Still answering, with a profile pprof reads.
        let heap = pprof_top(&dir, &format!("http://127.0.0.1:{port}/debug/pprof/heap"), &[]);
        assert_eq!(top_flat(&heap), "marker_keep", "{heap}");
    });
    c.assert_no_ying_lines();
}

#[test]
fn a_busy_port_is_one_warning_and_the_program_runs_on() {
    let dir = TestDir::new("endpoint-busy");
    let exe = c_host(&dir);
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let stop = dir.join("stop");
    std::fs::write(&stop, "").unwrap();
    let run = Run::new(&exe).arg(&stop).arg("60");
    let c = compare(&run, &[("YING_HTTP_ADDR", &addr)], &dir.reports("busy"));
    let lines = c.with.ying_lines();
    c.check(lines.len() == 1, format!("expected one ying: line, got {lines:#?}"));
    c.check(
        lines[0].starts_with("ying: warning:") && lines[0].contains(&addr),
        format!("the line names the address: {lines:#?}"),
    );
    drop(taken);
    // An explicit address other than loopback is served only with a token, and said; without
    // one it is refused in one line.
    let port = free_port();
    let any = format!("0.0.0.0:{port}");
    let token = [("YING_HTTP_ADDR", any.as_str()), ("YING_HTTP_TOKEN", "0123456789abcdef-token")];
    let c = compare(&run, &token, &dir.reports("any"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].contains("not loopback") && lines[0].contains(&any),
        format!("expected one line saying the address is not loopback: {lines:#?}"),
    );
    let c = compare(&run, &[("YING_HTTP_ADDR", &any)], &dir.reports("any-no-token"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].starts_with("ying: warning: HTTP endpoint not started")
            && lines[0].contains("YING_HTTP_TOKEN"),
        format!("expected one line refusing a non-loopback address without a token: {lines:#?}"),
    );
    // A bad value is one warning too.
    let c = compare(&run, &[("YING_HTTP_ADDR", "nonsense")], &dir.reports("bad"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].contains("YING_HTTP_ADDR=nonsense is invalid"),
        format!("{lines:#?}"),
    );
}

#[test]
fn a_fork_child_does_not_keep_the_port_of_its_parent() {
    let dir = TestDir::new("endpoint-daemon");
    let exe = dir.compile_c("endpoint_daemon.c", &[]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (stop, gone) = (dir.join("stop"), dir.join("parent-gone"));
    let run = Run::new(&exe)
        .arg(&stop)
        .arg(&gone)
        .with_preload()
        .env("YING_HTTP_ADDR", &addr)
        .env("YING_REPORTING_PATH", dir.join("reports").display().to_string())
        .timeout(Duration::from_secs(60));
    // The run ends when the child has exited too (it holds the output pipes).
    let daemon = std::thread::spawn(move || run.run());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gone.exists() && Instant::now() < deadline && !daemon.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rebind = TcpListener::bind(&addr);
    std::fs::write(&stop, "").unwrap();
    let out = daemon.join().unwrap();
    out.assert_success("the daemon under the shim");
    assert!(gone.exists(), "the child never saw its parent exit\n{}", out.describe());
    assert!(out.ying_lines().is_empty(), "{}", out.describe());
    assert!(
        rebind.is_ok(),
        "the port of the parent's endpoint is still held after it exited: {rebind:?}"
    );
}
