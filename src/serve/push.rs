//! Pushes to a Grafana Pyroscope server (`YING_PUSH_URL`, `YING_PUSH_INTERVAL_SECS`,
//! `YING_PUSH_LABELS`, or [`crate::utils::ProfilerRunnerBuilder::push_url`]).
//!
//! Every interval a profiler thread sends the heap profile with Pyroscope's ingest API, the
//! form every Pyroscope version (and Grafana Alloy's `pyroscope.receive_http`) accepts:
//!
//! ```text
//! POST <url>/ingest?name=<app>{k=v,...}&from=<unix s>&until=<unix s>&format=pprof&spyName=ying
//! Content-Type: multipart/form-data; boundary=...
//!   part "profile" (profile.pprof): the gzipped pprof heap profile
//!   part "sample_type_config" (sample_type_config.json): how to aggregate each sample type
//! ```
//!
//! The profile has Go's four heap sample types: `alloc_objects` and `alloc_space` are what was
//! allocated since the last push (`from` to `until`; since the pusher started for the first),
//! `inuse_objects` and `inuse_space` what is retained now, as Pyroscope's Go delta profiler
//! sends them (so the `sample_type_config` marks none as cumulative). With `profile_spans` on,
//! each sample carries its `span` and `span_path` labels. `<app>` is the `service_name` label
//! of `YING_PUSH_LABELS`, or the executable's name; the other labels go in braces.
//!
//! A push that fails (no connection within 5 s, no answer within 10 s, a status other than
//! 2xx) is counted, and said on stderr at most once a minute with the count; the next push is
//! at the next interval, never sooner, and carries the allocations since the failed one's
//! moment (a failed delta is not sent again). The pushing thread never holds a lock the
//! program's threads wait for.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::profiles::{self, AllocBaseline, HeapView};
use std::sync::Arc;

use super::Runner;
use crate::source::ProfileSource;

/// How long a connection may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server may take to read the push and answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one failure line per this long.
pub const WARN_EVERY: Duration = Duration::from_secs(60);

/// Pyroscope's aggregation of each sample type: none is cumulative (the alloc figures are
/// already deltas), the in-use figures are averaged when profiles are merged over time.
pub const SAMPLE_TYPE_CONFIG: &str = concat!(
    "{\"alloc_objects\":{\"units\":\"objects\"},\"alloc_space\":{\"units\":\"bytes\"},",
    "\"inuse_objects\":{\"units\":\"objects\",\"aggregation\":\"average\"},",
    "\"inuse_space\":{\"units\":\"bytes\",\"aggregation\":\"average\"}}"
);

/// Where pushes go, parsed from `http://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// `host:port`, as connected to and sent in `Host`.
    authority: String,
    /// The path prefix before `/ingest`, without a trailing `/`.
    prefix: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs are supported")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains('@') {
        return Err("expected http://host:port".into());
    }
    let authority = if host.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
    }) {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    Ok(Target { authority, prefix: path.trim_end_matches('/').to_string() })
}

/// `s` with every byte but unreserved ones percent-encoded (a query value).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Pyroscope's `name`: the application, then the other labels in braces.
pub fn app_name(labels: &[(String, String)], exe_name: &str) -> String {
    let app = labels
        .iter()
        .find(|(k, _)| k == "service_name")
        .map(|(_, v)| v.as_str())
        .unwrap_or(exe_name);
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k != "service_name")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{app}{{{}}}", rest.join(","))
}

/// The multipart body of one push and its boundary.
fn multipart(profile: &[u8]) -> (Vec<u8>, String) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut boundary = format!("ying-{nanos:032x}");
    while profile.windows(boundary.len()).any(|w| w == boundary.as_bytes()) {
        boundary.push('x');
    }
    let mut body = Vec::with_capacity(profile.len() + 1024);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(profile);
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"sample_type_config\"; filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n{SAMPLE_TYPE_CONFIG}\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    (body, boundary)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Sends one profile; Ok when the server answered 2xx.
fn send(target: &Target, name: &str, from: u64, until: u64, profile: &[u8]) -> io::Result<()> {
    let (body, boundary) = multipart(profile);
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    let mut stream = None;
    for addr in target.authority.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    // Open only during this push, close-on-exec (std's sockets are), and moved far above the
    // numbers the program's own next `open` or `socket` may expect.
    let mut s =
        TcpStream::from(crate::sys::move_high(std::os::fd::OwnedFd::from(stream.ok_or(last)?)));
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    let head = format!(
        "POST {}/ingest?name={}&from={from}&until={until}&format=pprof&spyName=ying HTTP/1.1\r\nHost: {}\r\nUser-Agent: ying/{}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        target.prefix,
        encode(name),
        target.authority,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(&body)?;
    // The status line and headers: at most 8 KiB are read.
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = vec![0u8; 8 * 1024];
    let mut len = 0;
    loop {
        if Instant::now() >= deadline || len == buf.len() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no complete answer"));
        }
        let n = s.read(&mut buf[len..])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(head_len)) => {
                let code = resp.code.unwrap_or(0);
                if (200..300).contains(&code) {
                    return Ok(());
                }
                let said = String::from_utf8_lossy(&buf[head_len..len]);
                let said: String = said.lines().next().unwrap_or("").chars().take(200).collect();
                return Err(io::Error::other(format!("HTTP {code} {said}")));
            }
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(io::Error::other(format!("malformed answer: {e}"))),
        }
    }
}

/// Starts the pushing thread (as profiler code); a bad URL is one warning and no pushes.
pub(crate) fn start(
    url: &str,
    services: &super::Services,
    source: &'static dyn ProfileSource,
    runner: Arc<dyn Runner>,
) {
    let target = match parse_url(url) {
        Ok(t) => t,
        Err(e) => return crate::sys::warn(&format!("pushes to {url} not started: {e}")),
    };
    let exe = crate::report::ReportContext::current().exe_name();
    let name = app_name(&services.push_labels, &exe);
    let interval = Duration::from_secs(services.push_interval_secs.max(1));
    let shown = url.to_string();
    let body = Box::new(move || {
        source.enter_profiler_thread();
        run(&target, &shown, &name, interval, source, &*runner);
    });
    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-push", body) {
        crate::sys::warn(&format!("pushes to {url} not started: no thread ({e})"));
    }
}

/// Set by [`stop`] (the pusher ends at once), with its wake-up.
static STOPPING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
static WAKE: std::sync::Condvar = std::sync::Condvar::new();

/// Ends the pushing thread (before a seccomp filter that would cover it is installed).
pub(crate) fn stop() {
    *STOPPING.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    WAKE.notify_all();
}

/// Waits `interval`; false if [`stop`] was called.
fn pause(interval: Duration) -> bool {
    let g = STOPPING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (g, _) = WAKE
        .wait_timeout_while(g, interval, |stopping| !*stopping)
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    !*g
}

/// Pushes every `interval`, for the rest of the process (or until [`stop`]).
fn run(
    target: &Target,
    url: &str,
    name: &str,
    interval: Duration,
    source: &dyn ProfileSource,
    runner: &dyn Runner,
) {
    let mut since = AllocBaseline::empty(SystemTime::now());
    let mut failures: u64 = 0;
    let mut last_warning: Option<Instant> = None;
    loop {
        if !pause(interval) || runner.exiting() {
            return;
        }
        // Rendering (symbols) and sending open descriptors: not while the program is near its
        // descriptor limit (this push waits for the next; one warning per process).
        if !crate::sys::fd_headroom_or_warn("push") {
            continue;
        }
        let from = unix_secs(since.taken_at());
        let sent =
            profiles::delta_pprof_gz(source, &since, HeapView::Alloc).and_then(|(gz, now)| {
                since = now;
                send(target, name, from, unix_secs(since.taken_at()).max(from), &gz)
            });
        if let Err(e) = sent {
            failures += 1;
            if last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                crate::sys::warn(&format!(
                    "push to {url} failed ({e}); {failures} failed push{} so far, next in {} s",
                    if failures == 1 { "" } else { "es" },
                    interval.as_secs()
                ));
                last_warning = Some(Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_names() {
        let t = parse_url("http://127.0.0.1:4040").unwrap();
        assert_eq!(t, Target { authority: "127.0.0.1:4040".into(), prefix: String::new() });
        let t = parse_url("http://alloy.local/pyroscope/").unwrap();
        assert_eq!(t, Target { authority: "alloy.local:80".into(), prefix: "/pyroscope".into() });
        assert!(parse_url("https://x").is_err());
        let labels = vec![
            ("service_name".to_string(), "checkout".to_string()),
            ("env".to_string(), "prod".to_string()),
        ];
        assert_eq!(app_name(&labels, "a.out"), "checkout{env=prod}");
        assert_eq!(app_name(&[], "a.out"), "a.out{}");
        assert_eq!(encode("a{b=c,d}"), "a%7Bb%3Dc%2Cd%7D");
    }

    #[test]
    fn multipart_has_both_parts() {
        let (body, boundary) = multipart(b"\x1f\x8bPROFILE");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"profile\""));
        assert!(text.contains("name=\"sample_type_config\""));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
