//! Pushes to a Pyroscope server (`YING_PUSH_URL`) from a program under the shim. The receiver
//! here implements the documented contract of Pyroscope's ingest API: `POST /ingest` with the
//! query parameters `name` (application and `{labels}`), `from` and `until` (Unix seconds) and
//! `format=pprof`, and a `multipart/form-data` body whose `profile` part is the (gzipped)
//! pprof profile and whose `sample_type_config` part says how to aggregate each sample type.
//! `go tool pprof` reads every received profile, and so does npm's `pprof-format` (an
//! independent decoder; `scripts/test.sh` installs it in `target/npm-pprof`). A dead receiver costs the program one warning
//! line and nothing else. Needs Go (`scripts/test.sh` installs it).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use preload_tests::{Outcome, Run, TestDir, compare};

/// One push as received.
#[derive(Debug)]
struct Push {
    path: String,
    query: Vec<(String, String)>,
    content_type: String,
    authorization: String,
    body: Vec<u8>,
}

impl Push {
    fn param(&self, k: &str) -> &str {
        self.query.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap_or("")
    }

    /// The named parts of the multipart body.
    fn parts(&self) -> Vec<(String, Vec<u8>)> {
        let boundary = self
            .content_type
            .split("boundary=")
            .nth(1)
            .unwrap_or_else(|| panic!("no boundary in {}", self.content_type));
        let delim = format!("--{boundary}");
        let mut out = Vec::new();
        let b = &self.body;
        let mut starts = Vec::new();
        let mut i = 0;
        while let Some(p) = find(&b[i..], delim.as_bytes()) {
            starts.push(i + p);
            i += p + delim.len();
        }
        for w in starts.windows(2) {
            let part = &b[w[0] + delim.len()..w[1]];
            let part = part.strip_prefix(b"\r\n").unwrap_or(part);
            let head_end = find(part, b"\r\n\r\n").expect("part head");
            let head = String::from_utf8_lossy(&part[..head_end]).into_owned();
            let name = head.split("name=\"").nth(1).and_then(|s| s.split('"').next()).unwrap();
            let data = &part[head_end + 4..];
            let data = data.strip_suffix(b"\r\n").unwrap_or(data);
            out.push((name.to_string(), data.to_vec()));
        }
        assert!(b.ends_with(format!("{delim}--\r\n").as_bytes()), "multipart end");
        out
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// Serves the ingest API on a thread; every push goes to the returned channel.
fn receiver() -> (u16, mpsc::Receiver<Push>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            if let Some(p) = read_push(&mut s) {
                let ok = p.path == "/ingest";
                let answer: &[u8] = if ok {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                } else {
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                };
                let _ = s.write_all(answer);
                if tx.send(p).is_err() {
                    return;
                }
            }
        }
    });
    (port, rx)
}

fn read_push(s: &mut TcpStream) -> Option<Push> {
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let request = lines.next()?.to_string();
    let mut parts = request.split(' ');
    assert_eq!(parts.next(), Some("POST"), "{request}");
    let target = parts.next()?.to_string();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let len: usize = header("content-length").parse().ok()?;
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    Some(Push {
        path: path.to_string(),
        query,
        content_type: header("content-type"),
        authorization: header("authorization"),
        body: buf[head_end..head_end + len].to_vec(),
    })
}

fn pprof_top(dir: &TestDir, file: &Path, index: &str) -> String {
    let o = Run::new("go")
        .args(&["tool", "pprof", "-top", "-unit=B", "-nodecount=40"])
        .arg(format!("-sample_index={index}"))
        .arg(file)
        .env("PPROF_TMPDIR", dir.path().display().to_string())
        .run();
    o.assert_success("go tool pprof");
    o.stdout_str()
}

/// `file` decoded by npm's pprof-format (`programs/pprof_format_decode.js`): sample types,
/// cumulative values per function, labels.
fn pprof_format(file: &Path) -> serde_json::Value {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = std::env::var_os("YING_TEST_PPROF_FORMAT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| manifest.join("../target/npm-pprof/node_modules"));
    assert!(
        modules.join("pprof-format").is_dir(),
        "no pprof-format in {} (scripts/test.sh installs it)",
        modules.display()
    );
    let o = Run::new("node")
        .arg(manifest.join("programs/pprof_format_decode.js"))
        .arg(file)
        .env("PPROF_FORMAT_MODULES", modules.display().to_string())
        .run();
    o.assert_success("node pprof_format_decode.js");
    serde_json::from_str(&o.stdout_str()).expect("JSON from the decoder")
}

fn cum_bytes(top: &str, name: &str) -> Option<u64> {
    top.lines()
        .skip_while(|l| !l.contains("flat%"))
        .find(|l| l.split_whitespace().skip(5).any(|w| w == name))
        .and_then(|l| l.split_whitespace().nth(3)?.strip_suffix('B')?.parse().ok())
}

#[test]
fn the_receiver_gets_a_profile_every_interval_with_the_labels() {
    let dir = TestDir::new("push");
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let (port, pushes) = receiver();
    let stop = dir.join("stop");
    let run = Run::new(&exe)
        .arg(&stop)
        .arg("60")
        .with_preload()
        .envs(&[
            ("YING_PUSH_URL", &format!("http://127.0.0.1:{port}")),
            ("YING_PUSH_INTERVAL_SECS", "1"),
            ("YING_PUSH_LABELS", "service_name=ying-test,env=ci,team=mem"),
            ("YING_PUSH_HEADERS", "authorization=Basic%20dXNlcjp0b2tlbg=="),
            ("YING_SAMPLE_INTERVAL_BYTES", "1"),
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_REPORTING_PATH", &dir.join("reports").display().to_string()),
        ])
        .timeout(Duration::from_secs(90));
    let host = std::thread::spawn(move || run.run());
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while got.len() < 4 && Instant::now() < deadline {
        if let Ok(p) = pushes.recv_timeout(Duration::from_millis(200)) {
            got.push(p);
        }
    }
    std::fs::write(&stop, "").unwrap();
    let out: Outcome = host.join().unwrap();
    out.assert_success("the program under the shim");
    assert_eq!(out.stdout_str(), "kept 2000 blocks, checksum 250008\n", "{}", out.describe());
    assert!(out.ying_lines().is_empty(), "{}", out.describe());
    assert_eq!(got.len(), 4, "four pushes within 40 s at a 1 s interval: {got:#?}");

    let mut until_before = 0u64;
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p.path, "/ingest");
        assert_eq!(p.param("name"), "ying-test{env=ci,team=mem}");
        assert_eq!(p.param("format"), "pprof");
        assert_eq!(p.authorization, "Basic dXNlcjp0b2tlbg==", "YING_PUSH_HEADERS");
        assert!(p.content_type.starts_with("multipart/form-data; boundary="), "{p:?}");
        let (from, until): (u64, u64) =
            (p.param("from").parse().unwrap(), p.param("until").parse().unwrap());
        assert!(from <= until, "{from} {until}");
        if i > 0 {
            assert_eq!(from, until_before, "each push starts where the last ended");
        }
        until_before = until;
        let parts = p.parts();
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["profile", "sample_type_config"]);
        let config = String::from_utf8_lossy(&parts[1].1);
        assert!(config.contains("\"alloc_space\"") && !config.contains("cumulative"), "{config}");
        let file = dir.join(&format!("push{i}.pb.gz"));
        std::fs::write(&file, &parts[0].1).unwrap();
        // Retained now: the kept blocks, in every push.
        let inuse = pprof_top(&dir, &file, "inuse_space");
        assert_eq!(cum_bytes(&inuse, "marker_keep"), Some(2000 * 4112), "{inuse}");
        // And as another decoder reads the same bytes (npm's pprof-format): Go's four types,
        // the same figure.
        let js = pprof_format(&file);
        let types: Vec<&str> =
            js["types"].as_array().unwrap().iter().map(|t| t[0].as_str().unwrap()).collect();
        assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
        assert_eq!(js["cum"]["marker_keep"][3], 2000 * 4112, "{js}");
        assert_eq!(js["period"], 1);
        // Allocated since the last push: the churn, and the kept blocks only in the first.
        let alloc = pprof_top(&dir, &file, "alloc_space");
        let churn = cum_bytes(&alloc, "marker_churn").unwrap_or(0);
        assert!(churn > 0, "push {i}: {alloc}");
        let keep = cum_bytes(&alloc, "marker_keep");
        if i == 0 {
            assert_eq!(keep, Some(2000 * 4112), "{alloc}");
        } else {
            assert_eq!(keep, None, "push {i} counts the kept blocks again: {alloc}");
        }
    }
}

#[test]
fn a_dead_receiver_costs_one_warning_line() {
    let dir = TestDir::new("push-dead");
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // The program runs 4 s (no stop file), pushing every second to a closed port.
    let run = Run::new(&exe).arg(dir.join("no-stop")).arg("4");
    let url = format!("http://127.0.0.1:{port}");
    let vars = [("YING_PUSH_URL", url.as_str()), ("YING_PUSH_INTERVAL_SECS", "1")];
    let c = compare(&run, &vars, &dir.reports("dead"));
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0].starts_with("ying: warning: push to ")
            && lines[0].contains(&url),
        format!("expected one warning line about the push: {lines:#?}"),
    );
}
