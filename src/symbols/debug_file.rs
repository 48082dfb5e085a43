//! Separate debug info: the file that holds a stripped module's symbols and DWARF.
//!
//! Distributions strip their libraries and ship what was stripped in debug packages (Debian's
//! `-dbgsym`, Fedora's `-debuginfo`), installed under `/usr/lib/debug`, or serve it from a
//! debuginfod server. Without it a frame of `libsqlite3.so.0` is `libsqlite3.so.0+0xb786c`;
//! with it, `sqlite3VdbeExec`. A module's debug file is looked for, in this order:
//!
//! 1. by build id under [`DEBUG_ROOT`]: `/usr/lib/debug/.build-id/ab/cdef....debug`;
//! 2. in the debuginfod client's cache, `<cache>/<build id>/debuginfo`, where `<cache>` is
//!    `$DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`, else
//!    `$HOME/.cache/debuginfod_client` (the directories elfutils' client fills, so a file
//!    `debuginfod-find` fetched is found too);
//! 3. by the module's `.gnu_debuglink` name: beside it, in its `.debug/` directory, and under
//!    `/usr/lib/debug/<its directory>/`;
//! 4. only where fetching is on ([`set_fetch`]: the `ying` command, never a profiled
//!    process): from the servers of `$DEBUGINFOD_URLS`, into the cache of step 2, through
//!    elfutils' `debuginfod-find` when it is installed (it speaks `https://`), else with a
//!    plain HTTP client of our own from each `http://` server
//!    (`GET <url>/buildid/<id>/debuginfo`).
//!
//! A candidate whose build id differs from the module's is not used (a debug file of another
//! build would name the wrong functions and look right), nor one owned by another user than
//! this process's or root. A profiled process never fetches: a
//! report would wait on the network, and Debian sets `DEBUGINFOD_URLS` for every login shell,
//! so every profiled program would reach out to a public server. Without `debuginfod-find`,
//! `https://` servers are not asked (Ying has no TLS client); one line says so.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::symbols::elf_symbols::{gnu_build_id, named_sections};

/// Where debug packages install their files.
pub const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The largest debug file fetched (libc's is about 30 MiB; a browser's can pass 1 GiB).
pub const MAX_FETCH_BYTES: u64 = 2 << 30;

/// How long a debuginfod server may take to accept a connection, and then to send each part
/// of its answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

static FETCH: AtomicBool = AtomicBool::new(false);

/// Lets this process fetch debug files from `$DEBUGINFOD_URLS` (the `ying` command turns it on;
/// a profiled process never does, see the module documentation).
pub fn set_fetch(on: bool) {
    FETCH.store(on, Ordering::Relaxed);
}

/// The debuginfod client's cache directory (see the module documentation), read from the
/// environment once: a report thread does not read the environment again while the program
/// may be changing it.
pub fn cache_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        var("DEBUGINFOD_CACHE_PATH")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("debuginfod_client")))
            .or_else(|| var("HOME").map(|d| d.join(".cache/debuginfod_client")))
    })
    .clone()
}

/// The separate debug file of the module at `path` whose GNU build id is `build_id` (hex, or
/// empty when it has none), when one for its build is installed, cached or (with fetching on)
/// served.
pub(crate) fn find(path: &str, build_id: &str) -> Option<PathBuf> {
    let id = (!build_id.is_empty()).then_some(build_id);
    // A regular file of this user's or root's (a debug file another user planted in a shared
    // cache could name the wrong functions; it is not read), of the module's build.
    let matches = |p: &Path| -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(f) = File::open(p) else { return false };
        let ours = f.metadata().is_ok_and(|md| md.is_file() && crate::sys::trusted_owner(md.uid()));
        ours && id.is_none_or(|id| gnu_build_id(&f).as_deref() == Some(id))
    };
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(id) = id.filter(|id| id.len() > 2) {
        candidates.push(Path::new(DEBUG_ROOT).join(format!(
            ".build-id/{}/{}.debug",
            &id[..2],
            &id[2..]
        )));
        if let Some(cache) = cache_dir() {
            candidates.push(cache.join(id).join("debuginfo"));
        }
    }
    let module = Path::new(path);
    if let Some(link) = File::open(module).ok().and_then(|f| debuglink(&f)) {
        let dir = module.parent().unwrap_or(Path::new("/"));
        candidates.push(dir.join(&link));
        candidates.push(dir.join(".debug").join(&link));
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        candidates.push(Path::new(DEBUG_ROOT).join(rel).join(&link));
    }
    if let Some(found) = candidates.into_iter().find(|p| p.as_path() != module && matches(p)) {
        return Some(found);
    }
    match id {
        Some(id) if FETCH.load(Ordering::Relaxed) => fetch(id).filter(|p| matches(p)),
        _ => None,
    }
}

/// The file name in `file`'s `.gnu_debuglink` section (a NUL-terminated name, then a CRC).
fn debuglink(file: &File) -> Option<String> {
    let sec = named_sections(file)?.into_iter().find(|s| s.name == ".gnu_debuglink")?;
    let mut buf = vec![0u8; usize::try_from(sec.size.min(4096)).ok()?];
    file.read_exact_at(&mut buf, sec.offset).ok()?;
    let end = buf.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&buf[..end]).ok()?;
    // A bare file name: a link may not point elsewhere.
    (!name.is_empty() && !name.contains('/')).then(|| name.to_string())
}

/// Build ids this process failed to fetch, and servers that failed (not a 404): asked once.
static FAILED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Fetches the debug file of build id `id` from `$DEBUGINFOD_URLS` into the cache; its path.
fn fetch(id: &str) -> Option<PathBuf> {
    if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let urls = std::env::var("DEBUGINFOD_URLS").ok()?;
    let cache = cache_dir()?;
    let mut failed = FAILED.lock().unwrap_or_else(|e| e.into_inner());
    if failed.iter().any(|f| f == id) {
        return None;
    }
    if let Some(client) = client() {
        let found = with_client(&client, id, &cache);
        if found.is_none() {
            failed.push(id.to_string());
        }
        return found;
    }
    for url in urls.split_whitespace() {
        let Some(rest) = url.strip_prefix("http://") else {
            warn_once_https(url);
            continue;
        };
        if failed.iter().any(|f| f == url) {
            continue;
        }
        match get(rest, id, &cache) {
            Ok(path) => return Some(path),
            // The server has no debug file of this build: the usual answer, nothing to say.
            Err(e) if e == "HTTP 404" => {}
            Err(e) => {
                crate::sys::warn(&format!(
                    "{url} (DEBUGINFOD_URLS) not asked again: debug info of build {id}: {e}"
                ));
                failed.push(url.to_string());
            }
        }
    }
    failed.push(id.to_string());
    None
}

/// elfutils' `debuginfod-find` (Debian's `debuginfod` package), when installed: it speaks
/// `https://` too and fills the same cache.
fn client() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("debuginfod-find")).find(|p| p.is_file())
}

/// `debuginfod-find debuginfo <id>` into `cache`: the path it prints. A server's "not found"
/// is quiet; any other failure is said once.
fn with_client(client: &Path, id: &str, cache: &Path) -> Option<PathBuf> {
    let mut cmd = std::process::Command::new(client);
    cmd.args(["debuginfo", id]).env("DEBUGINFOD_CACHE_PATH", cache);
    if std::env::var_os("DEBUGINFOD_TIMEOUT").is_none() {
        cmd.env("DEBUGINFOD_TIMEOUT", CONNECT_TIMEOUT.as_secs().to_string());
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().ok()?;
    if out.status.success() {
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        return path.is_file().then_some(path);
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.lines().next().unwrap_or("").trim();
    if !said.contains("No such file or directory") {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            crate::sys::warn(&format!(
                "{} debuginfo {id} (DEBUGINFOD_URLS): {said}",
                client.display()
            ));
        }
    }
    None
}

/// Says once that an `https://` server is not asked.
fn warn_once_https(url: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::sys::warn(&format!(
            "{url} (DEBUGINFOD_URLS) not asked: without debuginfod-find (Debian's debuginfod \
             package) Ying fetches from http:// servers only"
        ));
    }
}

/// `GET /<prefix>/buildid/<id>/debuginfo` from `authority_and_prefix` (`host:port[/prefix]`),
/// the body written to `<cache>/<id>/debuginfo` (through a temporary file renamed into place).
fn get(authority_and_prefix: &str, id: &str, cache: &Path) -> Result<PathBuf, String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let (authority, prefix) = match authority_and_prefix.split_once('/') {
        Some((a, p)) => (a, format!("/{}", p.trim_end_matches('/'))),
        None => (authority_and_prefix, String::new()),
    };
    let authority =
        if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
    let addrs = authority.to_socket_addrs().map_err(|e| format!("{authority}: {e}"))?;
    let mut stream = None;
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let mut s = stream.ok_or(last)?;
    s.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    let head = format!(
        "GET {prefix}/buildid/{id}/debuginfo HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: ying/{}\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    // The head: at most 16 KiB.
    let mut buf = vec![0u8; 16 * 1024];
    let mut len = 0;
    let (code, body_at, length, chunked) = loop {
        if len == buf.len() {
            return Err("an answer head over 16 KiB".into());
        }
        let n = s.read(&mut buf[len..]).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the answer".into());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(at)) => {
                let header = |name: &str| {
                    resp.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
                };
                let length = header("content-length").and_then(|v| v.parse::<u64>().ok());
                let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                break (resp.code.unwrap_or(0), at, length, chunked);
            }
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(format!("malformed answer: {e}")),
        }
    };
    if code != 200 {
        return Err(format!("HTTP {code}"));
    }
    if chunked {
        return Err("a chunked answer (not read)".into());
    }
    if length.is_some_and(|l| l > MAX_FETCH_BYTES) {
        return Err(format!("{} bytes, over the {} limit", length.unwrap_or(0), MAX_FETCH_BYTES));
    }
    let dir = cache.join(id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".debuginfo.ying-{}", std::process::id()));
    let written = (|| -> Result<u64, String> {
        let mut out = File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        out.write_all(&buf[body_at..len]).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut total = (len - body_at) as u64;
        let mut chunk = vec![0u8; 256 * 1024];
        loop {
            if length.is_some_and(|l| total >= l) {
                break;
            }
            let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            total += n as u64;
            if total > MAX_FETCH_BYTES {
                return Err(format!("over the {MAX_FETCH_BYTES}-byte limit"));
            }
            out.write_all(&chunk[..n]).map_err(|e| format!("{}: {e}", tmp.display()))?;
        }
        Ok(total)
    })();
    let done = match written {
        Ok(total) if length.is_none_or(|l| l == total) => {
            let path = dir.join("debuginfo");
            std::fs::rename(&tmp, &path)
                .map(|()| path)
                .map_err(|e| format!("{}: {e}", dir.display()))
        }
        Ok(total) => Err(format!("{total} of {} bytes", length.unwrap_or(0))),
        Err(e) => Err(e),
    };
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}
