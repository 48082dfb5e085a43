//! What every pusher shares (Pyroscope's ingest API in [`super::push`], OTLP in
//! [`super::otlp`]): the HTTP/1.1 client, one `POST` per connection with time limits, and the
//! loop that pushes every interval, retries a failure that may pass and drops it otherwise.
//!
//! **Retries.** A push that fails for a reason that may pass (no connection, no answer in
//! time, `429`, `502`, `503` or `504`, the statuses OTLP's specification calls retryable) is
//! sent again after 1 s, then 2 s (or the server's `Retry-After`, up to 30 s), at most
//! [`ATTEMPTS`] times in all and never past the next interval; then it is dropped: the next push
//! carries what was allocated since the dropped one's moment, never the dropped one again. Other
//! answers (`400`, `401`, `404`, `500`...) are dropped at once. Only the push being sent is
//! held: a pusher's memory never grows with failures.
//!
//! **Warnings.** A dropped push is counted and said on stderr at most once a minute, with the
//! count; the program never waits for a pusher, which never holds a lock the program's
//! threads take.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a connection may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server may take to read a push and answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one failure line per this long.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// How many times one push is sent at most (the first and its retries).
pub const ATTEMPTS: u32 = 3;
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Where pushes go, parsed from `http://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `host:port`, as connected to and sent in `Host`.
    pub(crate) authority: String,
    /// The path after the authority, without a trailing `/` (empty for none).
    pub(crate) prefix: String,
}

impl Target {
    /// Parses `http://host[:port][/path]` (port 80 by default).
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
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
}

/// One request's head fields beyond the method and path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Body<'a> {
    /// `Content-Type`.
    pub(crate) content_type: &'a str,
    /// `Content-Encoding`, if any (`gzip`).
    pub(crate) encoding: Option<&'a str>,
    /// Further headers (an OTLP receiver's `Authorization`), already checked to be one line each.
    pub(crate) headers: &'a [(String, String)],
    /// The body.
    pub(crate) bytes: &'a [u8],
}

/// Whether `headers` may go out as they are: names HTTP tokens, values one line.
pub(crate) fn headers_ok(headers: &[(String, String)]) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    for (k, v) in headers {
        if k.is_empty() || !k.chars().all(token) {
            return Err(format!("header name \"{}\" is not an HTTP token", k.escape_debug()));
        }
        if v.chars().any(|c| c.is_control()) {
            return Err(format!("header {k} has a control character"));
        }
    }
    Ok(())
}

/// Why a push was not taken.
#[derive(Debug)]
pub(crate) struct Failure {
    /// What happened, one line.
    pub(crate) what: String,
    /// Whether sending it again may work, and after how long at least.
    pub(crate) retry: Option<Duration>,
}

impl Failure {
    fn io(e: io::Error) -> Self {
        Self { what: e.to_string(), retry: Some(Duration::ZERO) }
    }
}

/// Sends `body` to `path` (which includes any query) on `target`; `Ok` with the first 64 KiB
/// of the answer's body when the server answered 2xx.
pub(crate) fn post(target: &Target, path: &str, body: Body<'_>) -> Result<Vec<u8>, Failure> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    let mut stream = None;
    for addr in target.authority.to_socket_addrs().map_err(Failure::io)? {
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
    let stream = stream.ok_or(last).map_err(Failure::io)?;
    let mut s = TcpStream::from(crate::sys::move_high(std::os::fd::OwnedFd::from(stream)));
    let exchange = |s: &mut TcpStream| -> io::Result<(u16, Option<Duration>, Vec<u8>)> {
        s.set_write_timeout(Some(IO_TIMEOUT))?;
        s.set_read_timeout(Some(IO_TIMEOUT))?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: ying/{}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            target.authority,
            env!("CARGO_PKG_VERSION"),
            body.content_type,
            body.bytes.len()
        );
        if let Some(e) = body.encoding {
            head.push_str(&format!("Content-Encoding: {e}\r\n"));
        }
        for (k, v) in body.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())?;
        s.write_all(body.bytes)?;
        read_answer(s)
    };
    let (code, retry_after, said) = exchange(&mut s).map_err(Failure::io)?;
    if (200..300).contains(&code) {
        return Ok(said);
    }
    let text = String::from_utf8_lossy(&said);
    let text: String = text.lines().next().unwrap_or("").chars().take(200).collect();
    let retry = matches!(code, 429 | 502 | 503 | 504)
        .then(|| retry_after.unwrap_or(Duration::ZERO).min(MAX_RETRY_AFTER));
    Err(Failure { what: format!("HTTP {code} {text}").trim_end().to_string(), retry })
}

/// The status, `Retry-After` (seconds) and up to 64 KiB of the body of an answer: at most 8 KiB
/// of head, all within [`IO_TIMEOUT`].
fn read_answer(s: &mut TcpStream) -> io::Result<(u16, Option<Duration>, Vec<u8>)> {
    const MAX_BODY: usize = 64 * 1024;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = vec![0u8; 8 * 1024];
    let mut len = 0;
    let (code, retry_after, head_len, body_len) = loop {
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
                let header = |name: &str| {
                    resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| {
                        std::str::from_utf8(h.value).ok().map(|v| v.trim().to_string())
                    })
                };
                let retry_after =
                    header("retry-after").and_then(|v| v.parse().ok()).map(Duration::from_secs);
                let body_len = header("content-length").and_then(|v| v.parse::<usize>().ok());
                break (resp.code.unwrap_or(0), retry_after, head_len, body_len);
            }
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(io::Error::other(format!("malformed answer: {e}"))),
        }
    };
    let want = body_len.unwrap_or(MAX_BODY).min(MAX_BODY);
    let mut body = buf[head_len..len].to_vec();
    body.truncate(want);
    let mut chunk = [0u8; 4096];
    while body.len() < want && Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n.min(want - body.len())]),
            // The status is what counts; a body cut short is kept as far as it came.
            Err(_) => break,
        }
    }
    Ok((code, retry_after, body))
}

/// Set by [`stop`] (every pusher ends at once), with its wake-up.
static STOPPING: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();

/// Ends every pushing thread (before a seccomp filter that would cover them is installed).
pub(crate) fn stop() {
    *STOPPING.lock().unwrap_or_else(PoisonError::into_inner) = true;
    WAKE.notify_all();
}

/// Waits `how_long`; false if [`stop`] was called.
fn pause(how_long: Duration) -> bool {
    let g = STOPPING.lock().unwrap_or_else(PoisonError::into_inner);
    let (g, _) = WAKE
        .wait_timeout_while(g, how_long, |stopping| !*stopping)
        .unwrap_or_else(PoisonError::into_inner);
    !*g
}

/// The pause before attempt `attempt` (2, 3 ...): 1 s, 2 s, 4 s ..., or what the server asked.
fn backoff(attempt: u32, asked: Duration) -> Duration {
    asked.max(Duration::from_secs(1 << (attempt - 2).min(5)))
}

/// Pushes every `interval` for the rest of the process (until [`stop`] or `exiting`): `build`
/// makes a push (None: nothing this time), `send` sends it (retried as the module says). `what`
/// names the pushes in warnings (`push to <url>`).
pub(crate) fn run<P>(
    what: &str,
    interval: Duration,
    exiting: &dyn Fn() -> bool,
    mut build: impl FnMut() -> io::Result<Option<P>>,
    mut send: impl FnMut(&P) -> Result<(), Failure>,
) {
    let mut failures: u64 = 0;
    let mut last_warning: Option<Instant> = None;
    loop {
        if !pause(interval) || exiting() {
            return;
        }
        // Rendering (symbols) and sending open descriptors: not while the program is near its
        // descriptor limit (this push waits for the next; one warning per process).
        if !crate::sys::fd_headroom_or_warn("push") {
            continue;
        }
        let started = Instant::now();
        let failed = match build() {
            Ok(None) => continue,
            Ok(Some(push)) => {
                let mut attempt = 1;
                loop {
                    match send(&push) {
                        Ok(()) => break None,
                        Err(f) => {
                            let wait = f.retry.map(|asked| backoff(attempt + 1, asked));
                            match wait {
                                Some(w)
                                    if attempt < ATTEMPTS
                                        && started.elapsed() + w < interval
                                        && !exiting() =>
                                {
                                    if !pause(w) {
                                        return;
                                    }
                                    attempt += 1;
                                }
                                _ => {
                                    break Some(format!(
                                        "{}{}",
                                        f.what,
                                        if attempt > 1 {
                                            format!(", {attempt} attempts")
                                        } else {
                                            String::new()
                                        }
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failed {
            failures += 1;
            if last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                crate::sys::warn(&format!(
                    "{what} failed ({why}); {failures} failed push{} so far, next in {} s",
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
    use std::net::TcpListener;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:4040").unwrap();
        assert_eq!(t, Target { authority: "127.0.0.1:4040".into(), prefix: String::new() });
        let t = Target::parse("http://alloy.local/pyroscope/").unwrap();
        assert_eq!(t, Target { authority: "alloy.local:80".into(), prefix: "/pyroscope".into() });
        assert!(Target::parse("https://x").is_err());
        assert!(Target::parse("http://u:p@x").is_err());
    }

    #[test]
    fn backoff_doubles_and_honours_the_server() {
        assert_eq!(backoff(2, Duration::ZERO), Duration::from_secs(1));
        assert_eq!(backoff(3, Duration::ZERO), Duration::from_secs(2));
        assert_eq!(backoff(2, Duration::from_secs(7)), Duration::from_secs(7));
    }

    /// Answers one connection with `answer` after reading the request; returns the request.
    fn serve_once(answer: &'static str) -> (Target, std::thread::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = Target::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).ends_with("BODY") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "request cut short: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(answer.as_bytes()).unwrap();
            String::from_utf8(got).unwrap()
        });
        (target, t)
    }

    fn body<'a>(headers: &'a [(String, String)]) -> Body<'a> {
        Body {
            content_type: "application/x-protobuf",
            encoding: Some("gzip"),
            headers,
            bytes: b"BODY",
        }
    }

    #[test]
    fn a_post_carries_its_headers_and_reads_the_answer() {
        let (t, server) =
            serve_once("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
        let headers = vec![("Authorization".to_string(), "Bearer abc".to_string())];
        let said = post(&t, "/v1development/profiles", body(&headers)).unwrap();
        assert_eq!(said, b"hello");
        let req = server.join().unwrap();
        assert!(req.starts_with("POST /v1development/profiles HTTP/1.1\r\n"), "{req}");
        for h in [
            "Content-Type: application/x-protobuf\r\n",
            "Content-Encoding: gzip\r\n",
            "Authorization: Bearer abc\r\n",
            "Content-Length: 4\r\n",
        ] {
            assert!(req.contains(h), "{h} in {req}");
        }
    }

    #[test]
    fn statuses_say_whether_to_retry() {
        let (t, server) = serve_once(
            "HTTP/1.1 503 Unavailable\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nbusy",
        );
        let f = post(&t, "/", body(&[])).unwrap_err();
        server.join().unwrap();
        assert_eq!((f.what.as_str(), f.retry), ("HTTP 503 busy", Some(Duration::from_secs(3))));
        let (t, server) = serve_once("HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n");
        let f = post(&t, "/", body(&[])).unwrap_err();
        server.join().unwrap();
        assert_eq!((f.what.as_str(), f.retry), ("HTTP 500", None));
        // Nobody listening: a connection error, retryable.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let t = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        assert_eq!(post(&t, "/", body(&[])).unwrap_err().retry, Some(Duration::ZERO));
    }

    #[test]
    fn headers_that_would_break_the_request_are_refused() {
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(headers_ok(&h("authorization", "Bearer abc")).is_ok());
        assert!(headers_ok(&h("x-scope-orgid", "t1\r\nX-Evil: 1")).is_err());
        assert!(headers_ok(&h("bad name", "v")).is_err());
    }
}
