//! The endpoint's HTTP/1.1 server: one thread, one connection at a time, one request per
//! connection (`Connection: close`), request heads parsed by `httparse`, every read and write
//! bounded in size and time. Nothing here panics on what a client sends.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::{Runner, Services};
use crate::source::ProfileSource;

/// The most bytes of a request's head (request line and headers), and of a body read.
pub(crate) const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The most headers of a request.
pub(crate) const MAX_HEADERS: usize = 32;
/// The longest a client may take to send its request.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest an answer may take to be written.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the routes need.
pub(crate) struct Ctx {
    pub(crate) addr: SocketAddr,
    pub(crate) services: Services,
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) source: &'static dyn ProfileSource,
    /// The answer to a request (`routes::route`, given by `serve/mod.rs`: the server knows
    /// HTTP, the routes know the profiler).
    pub(crate) route: Route,
}

/// What answers a request.
pub(crate) type Route = fn(&Request, &Ctx) -> Response;

/// A parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
}

impl Request {
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// An answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        Self { status, content_type, headers: Vec::new(), body }
    }

    /// A plain-text answer, one line ending in a newline.
    pub(crate) fn text(status: u16, msg: impl Into<String>) -> Self {
        let mut body = msg.into().into_bytes();
        if body.last() != Some(&b'\n') {
            body.push(b'\n');
        }
        Self::new(status, "text/plain; charset=utf-8", body)
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Starts the server thread, which binds `addr` in its own descriptor table (`sys::fds`: the
/// listening socket and every connection take no number of the program's, a `fork` child never
/// inherits the port, and a program that closes or `dup2`s over its descriptors cannot touch
/// them); a failure is one warning and no endpoint. Runs as profiler code.
pub(crate) fn start(
    addr: SocketAddr,
    services: Services,
    runner: Arc<dyn Runner>,
    source: &'static dyn ProfileSource,
    route: Route,
) {
    let body = Box::new(move || {
        source.enter_profiler_thread();
        let listener = match TcpListener::bind(addr) {
            Ok(l) => l,
            Err(e) => {
                return crate::sys::warn(&format!(
                    "HTTP endpoint not started: cannot listen on {addr} ({e}); the program runs on without it"
                ));
            }
        };
        // Close-on-exec (std's sockets are); on a thread left in the program's table (an old
        // kernel), moved far above the numbers the program's own next `open` may expect.
        let listener =
            TcpListener::from(crate::sys::move_high(std::os::fd::OwnedFd::from(listener)));
        let bound = listener.local_addr().unwrap_or(addr);
        if !addr.ip().is_loopback() {
            crate::sys::write_stderr(
                format!(
                    "ying: serving profiles at http://{bound}/debug/pprof/ to every host that can reach this address (not loopback)\n"
                )
                .as_bytes(),
            );
        }
        let ctx = Ctx { addr: bound, services, runner, source, route };
        serve(&listener, &ctx);
        if !crate::sys::fds::private_here() {
            // Only returns when the number may no longer be our socket: never close the
            // program's.
            std::mem::forget(listener);
        }
    });
    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-http", body) {
        crate::sys::warn(&format!("HTTP endpoint not started: no thread ({e})"));
    }
}

/// Set by [`stop`]: the server thread ends at its next wake.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// How long the server thread waits for a connection before it looks at [`STOPPING`]: its
/// socket is in a table of its own, so no other thread can wake it by shutting the socket
/// down. Four wake-ups a second of an idle thread.
const STOP_POLL_MS: i32 = 250;

/// Ends the server thread (before a seccomp filter that would cover it is installed), within
/// [`STOP_POLL_MS`].
pub(crate) fn stop() {
    STOPPING.store(true, Ordering::SeqCst);
}

/// Accepts and answers connections, one at a time, until [`stop`] (or for the rest of the
/// process, or until the program closes the listening socket).
fn serve(listener: &TcpListener, ctx: &Ctx) {
    let id = crate::sys::fd_id(listener.as_raw_fd());
    // Never wait inside `accept`: Linux reserves the connection's descriptor number (the
    // lowest free one) when `accept` starts, so a blocked `accept` would hold a low number the
    // program's `open` or `dup2` (EBUSY) then cannot have. The listener is non-blocking and
    // the wait is `poll`, which reserves nothing.
    if listener.set_nonblocking(true).is_err() {
        return crate::sys::warn("HTTP endpoint stopped: its socket cannot be made non-blocking");
    }
    loop {
        // A program that closed every descriptor (as daemons do) may have reused the number:
        // never accept on a socket of its own. (A close between this check and `accept` is the
        // race left; a socket in a table of Ying's own is never the program's to close.)
        if crate::sys::fd_id(listener.as_raw_fd()) != id {
            return crate::sys::warn(
                "HTTP endpoint stopped: the program closed its listening socket",
            );
        }
        let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: `pfd` is one valid pollfd; a closed descriptor only sets POLLNVAL.
        let ready = unsafe { libc::poll(&mut pfd, 1, STOP_POLL_MS) };
        if STOPPING.load(Ordering::SeqCst) {
            return;
        }
        if pfd.revents & (libc::POLLNVAL | libc::POLLERR) != 0 && ready > 0 {
            // Closed under us: the check above ends the loop; never spin on it.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if ready <= 0 || pfd.revents & libc::POLLIN == 0 {
            continue;
        }
        match listener.accept() {
            // Another connection took it, or the client went away before: wait again.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            // The connection moved high too, for as long as it is answered.
            Ok((stream, _)) => answer(
                TcpStream::from(crate::sys::move_high(std::os::fd::OwnedFd::from(stream))),
                ctx,
            ),
            // Out of descriptors or a connection reset before it was accepted: no busy loop.
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn answer(mut stream: TcpStream, ctx: &Ctx) {
    let response = match read_request(&mut stream) {
        Ok(Some(req)) => (ctx.route)(&req, ctx),
        Ok(None) => return, // The client went away.
        Err(r) => r,
    };
    let _ = write_response(&mut stream, &response);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Reads a request's head (and discards a small body), within [`READ_TIMEOUT`] and
/// [`MAX_REQUEST_BYTES`]; the error is the answer to send.
fn read_request(stream: &mut TcpStream) -> Result<Option<Request>, Response> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = vec![0u8; MAX_REQUEST_BYTES];
    let mut len = 0;
    loop {
        let n = match read_until(stream, &mut buf[len..], deadline) {
            Ok(0) if len == 0 => return Ok(None),
            Ok(0) => return Err(Response::text(400, "incomplete request")),
            Ok(n) => n,
            Err(e) if is_timeout(&e) => {
                return Err(Response::text(408, "request not received within 5 seconds"));
            }
            Err(_) => return Ok(None),
        };
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(head)) => {
                let body_len = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body_len > MAX_REQUEST_BYTES {
                    return Err(Response::text(413, "request body too large"));
                }
                let parsed = to_request(&req);
                // Read the (ignored) body so that closing the socket does not reset it
                // before the answer is read.
                let mut have = len - head;
                while have < body_len {
                    match read_until(stream, &mut buf[..], deadline) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => have += n,
                    }
                }
                return parsed.map(Some);
            }
            Ok(httparse::Status::Partial) if len < buf.len() => continue,
            Ok(httparse::Status::Partial) => {
                return Err(Response::text(
                    431,
                    format!("request head larger than {MAX_REQUEST_BYTES} bytes"),
                ));
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Response::text(431, format!("more than {MAX_HEADERS} headers")));
            }
            Err(e) => return Err(Response::text(400, format!("malformed request: {e}"))),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// One read into `buf`, waiting at most until `deadline`.
fn read_until(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))?;
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

fn to_request(req: &httparse::Request<'_, '_>) -> Result<Request, Response> {
    let method = req.method.unwrap_or("").to_string();
    let target = req.path.unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !path.starts_with('/') {
        return Err(Response::text(
            400,
            "the request target must be a path such as /debug/pprof/heap",
        ));
    }
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(Request { method, path: percent_decode(path), query })
}

/// `%XX` escapes and `+` (in queries) decoded; invalid escapes kept as they are.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' => {
                match (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn write_response(stream: &mut TcpStream, r: &Response) -> io::Result<()> {
    let deadline = Instant::now() + WRITE_TIMEOUT;
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (name, value) in &r.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    write_until(stream, head.as_bytes(), deadline)?;
    write_until(stream, &r.body, deadline)
}

/// Writes all of `data` by pieces, giving up at `deadline` (a client that reads too slowly).
fn write_until(stream: &mut TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(&data[..data.len().min(64 * 1024)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b+c"), "a b c");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("%41"), "A");
        assert_eq!(percent_decode("%"), "%");
    }
}
