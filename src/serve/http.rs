//! The endpoint's HTTP/1.1 server: one thread, one request per connection (`Connection:
//! close`), request heads parsed by `httparse`, every read and write bounded in size and time.
//! Nothing here panics on what a client sends.
//!
//! The thread waits on the listening socket and on every connection whose request is still
//! arriving at once (`poll`), each with its own deadline ([`READ_TIMEOUT`] from its accept), so
//! that clients who send their requests slowly (a slowloris) hold nothing but their own
//! connections: at most [`MAX_PENDING`] wait, at most [`MAX_PENDING_PER_PEER`] of one peer (a
//! user, or a host), the oldest closed when another arrives, and a request that has arrived
//! whole is answered at once. A peer that may not use the endpoint
//! (`access.rs`) and could not be admitted by a token gets a second to send its request (and
//! then its 403), not five.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::socket::{Conn, Listener};
use super::{Runner, Services};
use crate::config::HttpAddr;
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
    /// The address listened at, as the status route shows it.
    pub(crate) addr: String,
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
    /// The `Authorization` header's value, if any.
    pub(crate) authorization: Option<String>,
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
        401 => "Unauthorized",
        403 => "Forbidden",
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
    addr: HttpAddr,
    services: Services,
    runner: Arc<dyn Runner>,
    source: &'static dyn ProfileSource,
    route: Route,
) {
    let body = Box::new(move || {
        source.enter_profiler_thread();
        let far = match &addr {
            HttpAddr::Tcp(a) => !a.ip().is_loopback(),
            HttpAddr::Unix(_) => false,
        };
        if far && services.http_token.is_none() {
            return crate::sys::warn(&format!(
                "HTTP endpoint not started: {addr} is not a loopback address and YING_HTTP_TOKEN \
                 is not set (without a token, a peer on another host could read the profile); \
                 the program runs on without it"
            ));
        }
        let (listener, bound) = match Listener::bind(&addr) {
            Ok(l) => l,
            Err(e) => {
                return crate::sys::warn(&format!(
                    "HTTP endpoint not started: cannot listen on {addr} ({e}); the program runs on without it"
                ));
            }
        };
        if far {
            crate::sys::write_stderr(
                format!(
                    "ying: serving profiles at http://{bound}/debug/pprof/ to every host that can reach this address (not loopback) with YING_HTTP_TOKEN's token\n"
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

/// The most connections whose requests are still arriving; the oldest is closed when another
/// arrives beyond it.
pub(crate) const MAX_PENDING: usize = 64;

/// The most connections of one peer whose requests are still arriving.
pub(crate) const MAX_PENDING_PER_PEER: usize = MAX_PENDING / 4;

/// How long a peer that will be refused whatever it sends may take to send its request.
const REFUSED_WAIT: Duration = Duration::from_secs(1);

/// A connection whose request is still arriving.
struct Pending {
    stream: Conn,
    peer: super::access::Peer,
    buf: Vec<u8>,
    deadline: Instant,
}

/// Accepts connections and answers their requests until [`stop`] (or for the rest of the
/// process, or until the program closes the listening socket).
fn serve(listener: &Listener, ctx: &Ctx) {
    let id = crate::sys::fd_id(listener.as_raw_fd());
    // Never wait inside `accept`: Linux reserves the connection's descriptor number (the
    // lowest free one) when `accept` starts, so a blocked `accept` would hold a low number the
    // program's `open` or `dup2` (EBUSY) then cannot have. The listener is non-blocking and
    // the wait is `poll`, which reserves nothing.
    if listener.set_nonblocking().is_err() {
        return crate::sys::warn("HTTP endpoint stopped: its socket cannot be made non-blocking");
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        // A program that closed every descriptor (as daemons do) may have reused the number:
        // never accept on a socket of its own. (A close between this check and `accept` is the
        // race left; a socket in a table of Ying's own is never the program's to close.)
        if crate::sys::fd_id(listener.as_raw_fd()) != id {
            return crate::sys::warn(
                "HTTP endpoint stopped: the program closed its listening socket",
            );
        }
        fds.clear();
        fds.push(libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        fds.extend(pending.iter().map(|p| libc::pollfd {
            fd: p.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now).as_millis() as i32 + 1)
            .fold(STOP_POLL_MS, i32::min);
        // SAFETY: `fds` holds `fds.len()` valid pollfds; a closed descriptor only sets POLLNVAL.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        if STOPPING.load(Ordering::SeqCst) {
            return;
        }
        let listening = fds[0].revents;
        if ready > 0 && listening & (libc::POLLNVAL | libc::POLLERR) != 0 {
            // Closed under us: the check above ends the loop; never spin on it.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        // The connections that can be read, newest last (indices into `pending`).
        let readable: Vec<usize> =
            fds[1..].iter().enumerate().filter(|(_, f)| f.revents != 0).map(|(i, _)| i).collect();
        let mut done = vec![false; pending.len()];
        for i in readable {
            done[i] = progress(&mut pending[i], ctx);
        }
        let now = Instant::now();
        for (p, d) in pending.iter().zip(done.iter_mut()) {
            if !*d && now >= p.deadline {
                let r = Response::text(408, "request not received within 5 seconds");
                let _ = write_response(&p.stream, &r, Duration::from_secs(1));
                *d = true;
            }
        }
        let mut d = done.into_iter();
        pending.retain(|_| !d.next().unwrap_or(true));
        if ready > 0 && listening & libc::POLLIN != 0 {
            accept_some(listener, ctx, &mut pending);
        }
    }
}

/// Accepts the connections waiting (at most 16 at a wake-up), refusing at once a peer that
/// may not use the endpoint, and adds the others to `pending`, the oldest closed beyond
/// [`MAX_PENDING`].
fn accept_some(listener: &Listener, ctx: &Ctx, pending: &mut Vec<Pending>) {
    for _ in 0..16 {
        // The connection is moved high too, for as long as it is answered.
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            // None left, or the client went away before: wait again.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // Out of descriptors or a connection reset before it was accepted: no busy loop.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        // One peer (a user, or an address of another host) holds at most a quarter of the
        // waiting places: its oldest goes first; then the oldest of all.
        let theirs: Vec<usize> = (0..pending.len()).filter(|&i| pending[i].peer == peer).collect();
        if theirs.len() >= MAX_PENDING_PER_PEER {
            pending.remove(theirs[0]);
        } else if pending.len() >= MAX_PENDING {
            pending.remove(0);
        }
        // A peer no token could admit gets its 403 once its request is read (answered before
        // it is read, a client still sending it may see the connection fail instead), but
        // waits a second at most.
        let wait = match super::access::refused_at_once(peer, ctx.services.http_token.as_ref()) {
            true => REFUSED_WAIT,
            false => READ_TIMEOUT,
        };
        let deadline = Instant::now() + wait;
        pending.push(Pending { stream, peer, buf: Vec::new(), deadline });
    }
}

/// Reads what arrived on `p`; when its request is whole (or cannot be), answers it. Whether the
/// connection is done with.
fn progress(p: &mut Pending, ctx: &Ctx) -> bool {
    let mut chunk = [0u8; 4096];
    let n = loop {
        // At most one byte beyond the limit: the head is then too large (431).
        let room = MAX_REQUEST_BYTES.saturating_sub(p.buf.len()).clamp(1, chunk.len());
        match (&p.stream).read(&mut chunk[..room]) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(_) | Ok(0) => return true, // The client went away.
            Ok(n) => break n,
        }
    };
    p.buf.extend_from_slice(&chunk[..n]);
    let response = match parse_head(&p.buf) {
        Ok(None) => return false,
        Ok(Some((req, head, body_len))) => {
            // Read the (ignored) body so that closing the socket does not reset it before the
            // answer is read.
            let _ = p.stream.set_nonblocking(false);
            let mut have = p.buf.len() - head;
            while have < body_len {
                match read_until(&p.stream, &mut chunk, p.deadline) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => have += n,
                }
            }
            let token = ctx.services.http_token.as_ref();
            match super::access::check(p.peer, &req.method, req.authorization.as_deref(), token) {
                Ok(()) => (ctx.route)(&req, ctx),
                Err(r) => refusal(r),
            }
        }
        Err(r) => r,
    };
    let _ = p.stream.set_nonblocking(false);
    let _ = write_response(&p.stream, &response, WRITE_TIMEOUT);
    p.stream.shutdown();
    true
}

/// The answer to a refused request.
fn refusal(r: super::access::Refused) -> Response {
    let answer = Response::text(r.status, r.why);
    if r.status == 401 { answer.header("WWW-Authenticate", "Bearer") } else { answer }
}

/// The request whose head `buf` starts with, the head's length and the body's announced
/// length, once the head is whole (None before); the answer to send when it cannot be one.
fn parse_head(buf: &[u8]) -> Result<Option<(Request, usize, usize)>, Response> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
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
            to_request(&req).map(|r| Some((r, head, body_len)))
        }
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST_BYTES => Ok(None),
        Ok(httparse::Status::Partial) => {
            Err(Response::text(431, format!("request head larger than {MAX_REQUEST_BYTES} bytes")))
        }
        Err(httparse::Error::TooManyHeaders) => {
            Err(Response::text(431, format!("more than {MAX_HEADERS} headers")))
        }
        Err(e) => Err(Response::text(400, format!("malformed request: {e}"))),
    }
}

/// One read into `buf`, waiting at most until `deadline`.
fn read_until(mut stream: &Conn, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
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
    let authorization = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::to_string);
    Ok(Request { method, path: percent_decode(path), query, authorization })
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

fn write_response(stream: &Conn, r: &Response, within: Duration) -> io::Result<()> {
    let deadline = Instant::now() + within;
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
fn write_until(mut stream: &Conn, mut data: &[u8], deadline: Instant) -> io::Result<()> {
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
