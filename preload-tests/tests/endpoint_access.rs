//! Who the endpoint answers, and that it cannot be held: a root process's endpoint refuses
//! user `nobody` (403 on every route, `POST` too) and answers root; with a token `nobody` may
//! read with it and still not dump; and a hundred half-sent requests held open beside it do not
//! keep a legitimate scrape waiting (answered within a second, the time printed). Each run is
//! the C endpoint host under the shim, its output compared with the plain run's. Needs root
//! (to be the other user's peer) and curl; skips with one line without them.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use preload_tests::{Outcome, Run, TestDir, require_tool};

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The host under the shim serving at a free loopback port with `vars`, and the plain run's
/// output: `talk(port)` runs while it serves, then the host is stopped and both runs compared.
fn serving(dir: &TestDir, vars: &[(&str, &str)], talk: impl FnOnce(u16)) -> Outcome {
    serving_at(dir, vars, None, talk)
}

/// [`serving`] on the unix socket `unix` instead of a port when given (`talk` gets 0).
fn serving_at(
    dir: &TestDir,
    vars: &[(&str, &str)],
    unix: Option<&Path>,
    talk: impl FnOnce(u16),
) -> Outcome {
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let port = if unix.is_some() { 0 } else { free_port() };
    let addr = match unix {
        Some(p) => format!("unix:{}", p.display()),
        None => format!("127.0.0.1:{port}"),
    };
    let plain_stop = dir.join("stop-plain");
    std::fs::write(&plain_stop, "").unwrap();
    let plain = Run::new(&exe).arg(&plain_stop).arg("60").timeout(Duration::from_secs(90)).run();
    let stop = dir.join("stop");
    let _ = std::fs::remove_file(&stop);
    let with = Run::new(&exe)
        .arg(&stop)
        .arg("60")
        .with_preload()
        .envs(vars)
        .env("YING_HTTP_ADDR", &addr)
        .env("YING_REPORTING_PATH", dir.join("reports").display().to_string())
        .timeout(Duration::from_secs(90));
    let shim = std::thread::spawn(move || with.run());
    let deadline = Instant::now() + Duration::from_secs(30);
    let up = || match unix {
        Some(p) => std::os::unix::net::UnixStream::connect(p).is_ok(),
        None => TcpStream::connect(("127.0.0.1", port)).is_ok(),
    };
    while !up() {
        assert!(!shim.is_finished(), "the program ended before its endpoint answered");
        assert!(Instant::now() < deadline, "no endpoint at {addr} within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let talked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| talk(port)));
    std::fs::write(&stop, "").unwrap();
    let with = shim.join().unwrap();
    if let Err(e) = talked {
        eprintln!("{}", with.describe());
        std::panic::resume_unwind(e);
    }
    assert!(!with.timed_out && with.status == plain.status, "{}", with.describe());
    assert_eq!(with.stdout, plain.stdout, "{}", with.describe());
    with
}

/// `curl` as `user` (None: this process's user): the status code and the body.
fn curl(
    dir: &Path,
    user: Option<&str>,
    method: &str,
    url: &str,
    token: Option<&str>,
) -> (u16, String) {
    curl_via(dir, user, method, url, token, None)
}

/// [`curl`] through the unix socket `unix` when given.
fn curl_via(
    dir: &Path,
    user: Option<&str>,
    method: &str,
    url: &str,
    token: Option<&str>,
    unix: Option<&Path>,
) -> (u16, String) {
    let out: PathBuf = dir.join(format!("curl-{}.out", user.unwrap_or("me")));
    let _ = std::fs::remove_file(&out);
    let mut args: Vec<String> =
        ["-sS", "--max-time", "20", "-X", method].map(String::from).to_vec();
    if let Some(t) = token {
        args.extend(["-H".to_string(), format!("Authorization: Bearer {t}")]);
    }
    if let Some(p) = unix {
        args.extend(["--unix-socket".to_string(), p.display().to_string()]);
    }
    args.extend(["-o".to_string(), out.display().to_string(), "-w".into(), "%{http_code}".into()]);
    args.push(url.to_string());
    let o = match user {
        Some(u) => Run::new("setpriv")
            .args(&["--reuid", u, "--regid", u, "--clear-groups", "--", "curl"])
            .args(&args)
            .run(),
        None => Run::new("curl").args(&args).run(),
    };
    let code = o.stdout_str().trim().parse().unwrap_or(0);
    (code, std::fs::read_to_string(&out).unwrap_or_default())
}

/// Whether this test can run: root, curl and setpriv.
fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIPPED: needs root (the endpoint's process must be another user's than the client's)"
        );
        return false;
    }
    require_tool("curl").is_some() && require_tool("setpriv").is_some()
}

#[test]
fn a_root_process_answers_root_and_refuses_nobody() {
    if !can_run() {
        return;
    }
    let dir = TestDir::new("endpoint-access");
    // `nobody` must be able to write curl's output.
    let d = dir.path().to_path_buf();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let with = serving(&dir, &[], |port| {
        let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
        for path in ["/debug/pprof/heap", "/debug/ying/status", "/debug/ying/report.txt"] {
            let (code, body) = curl(&d, Some("65534"), "GET", &url(path), None);
            assert_eq!(code, 403, "nobody GET {path}: {body}");
            assert!(body.contains("own user and root"), "{body}");
            let (code, _) = curl(&d, None, "GET", &url(path), None);
            assert_eq!(code, 200, "root GET {path}");
        }
        let (code, _) = curl(&d, Some("65534"), "POST", &url("/debug/ying/dump"), None);
        assert_eq!(code, 403, "nobody POST");
        let (code, body) = curl(&d, None, "POST", &url("/debug/ying/dump"), None);
        assert_eq!(code, 200, "root POST: {body}");
    });
    let lines = with.ying_lines();
    let refused: Vec<_> = lines.iter().filter(|l| l.contains("refused user 65534")).collect();
    assert_eq!(refused.len(), 1, "one line for the refused user: {lines:#?}");
}

#[test]
fn with_a_token_nobody_reads_with_it_and_still_cannot_dump() {
    if !can_run() {
        return;
    }
    let dir = TestDir::new("endpoint-token");
    let d = dir.path().to_path_buf();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let token = "s3cret-token-of-the-test";
    serving(&dir, &[("YING_HTTP_TOKEN", token)], |port| {
        let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
        let (code, _) = curl(&d, Some("65534"), "GET", &url("/debug/pprof/heap"), None);
        assert_eq!(code, 401, "nobody without the token");
        let (code, _) = curl(
            &d,
            Some("65534"),
            "GET",
            &url("/debug/pprof/heap"),
            Some("wrong-token-wrong-token"),
        );
        assert_eq!(code, 401, "nobody with a wrong token");
        let (code, _) = curl(&d, Some("65534"), "GET", &url("/debug/pprof/heap"), Some(token));
        assert_eq!(code, 200, "nobody with the token");
        let (code, _) = curl(&d, Some("65534"), "POST", &url("/debug/ying/dump"), Some(token));
        assert_eq!(code, 403, "a dump is the owner's, token or not");
    });
}

/// A hundred connections each holding half a request (a slowloris) beside a scraper: the
/// scrape is answered within a second (before, one request at a time with 5 s each: 100 s).
#[test]
fn a_hundred_half_requests_do_not_hold_a_scrape() {
    if require_tool("curl").is_none() {
        return;
    }
    let dir = TestDir::new("endpoint-slowloris");
    let d = dir.path().to_path_buf();
    serving(&dir, &[], |port| {
        let held: Vec<TcpStream> = (0..100)
            .filter_map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                s.write_all(b"GET /debug/pprof/he").ok()?;
                Some(s)
            })
            .collect();
        assert_eq!(held.len(), 100);
        std::thread::sleep(Duration::from_millis(200));
        let mut worst = Duration::ZERO;
        for _ in 0..3 {
            let start = Instant::now();
            let (code, _) =
                curl(&d, None, "GET", &format!("http://127.0.0.1:{port}/debug/ying/status"), None);
            worst = worst.max(start.elapsed());
            assert_eq!(code, 200);
        }
        eprintln!("scrape beside 100 half-requests: worst of 3 took {} ms", worst.as_millis());
        assert!(worst < Duration::from_secs(1), "a scrape waited {worst:?}");
        drop(held);
    });
}

/// On a unix socket (`YING_HTTP_ADDR=unix:PATH`): the socket is mode 0600 (nobody cannot even
/// connect), and once opened to everyone the peer's credentials still refuse nobody; a stale
/// socket left at the path is replaced, any other file is left and the endpoint not started
/// (one line), the program running on.
#[test]
fn a_unix_socket_answers_its_owner_by_credentials() {
    if !can_run() {
        return;
    }
    let dir = TestDir::new("endpoint-unix");
    let d = dir.path().to_path_buf();
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let sock = dir.join("ying.sock");
    // A stale socket from an earlier run.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    serving_at(&dir, &[], Some(&sock), |_| {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the socket's mode");
        let url = "http://ying/debug/ying/status";
        let (code, body) = curl_via(&d, None, "GET", url, None, Some(&sock));
        assert_eq!(code, 200, "root: {body}");
        let (code, _) = curl_via(&d, Some("65534"), "GET", url, None, Some(&sock));
        assert_eq!(code, 0, "nobody connected to a 0600 socket");
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (code, body) = curl_via(&d, Some("65534"), "GET", url, None, Some(&sock));
        assert_eq!(code, 403, "nobody through an open socket: {body}");
    });
    // A regular file at the path is not replaced.
    let other = dir.join("not-a-socket");
    std::fs::write(&other, "mine").unwrap();
    let exe = dir.compile_c("endpoint_host.c", &[]);
    let stop = dir.join("stop-now");
    std::fs::write(&stop, "").unwrap();
    let o = Run::new(&exe)
        .arg(&stop)
        .arg("5")
        .with_preload()
        .env("YING_HTTP_ADDR", format!("unix:{}", other.display()))
        .env("YING_CHECK_INTERVAL_SECS", "1")
        .env("YING_REPORTING_PATH", dir.join("r2").display().to_string())
        .run();
    assert!(o.success(), "{}", o.describe());
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "mine");
}
