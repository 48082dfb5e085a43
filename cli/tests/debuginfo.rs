//! Names from separate debug info, on a real program under the shim: a stripped library
//! (cli/tests/data/hidden.c, its allocating function static, so only its debug file names it)
//! is named from its debug file found in the debuginfod client's cache, through its
//! `.gnu_debuglink`, or fetched by `ying report` from a local debuginfod server (Debian's
//! `debuginfod` serving a directory), through `debuginfod-find` and through Ying's own HTTP
//! client; a debug file of another build is never used. The control
//! is the same run with no debug file: the frame is `libhidden.so+0x...`.
//!
//! Needs the shim (as the preload tests find it) and Debian's `debuginfod` (`scripts/test.sh`
//! installs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{data, success, ying};
use preload_tests::{Run, TestDir, preload_lib};

/// The stripped library, its debug file and a program that calls it, in `dir`.
struct Built {
    lib: PathBuf,
    debug: PathBuf,
    main: PathBuf,
    build_id: String,
}

fn cc(args: &[&str]) {
    Run::new("cc").args(args).run().assert_success(&format!("cc {args:?}"));
}

fn tool(args: &[&str]) {
    Run::new(args[0]).args(&args[1..]).run().assert_success(&format!("{args:?}"));
}

fn build(dir: &Path, variant: &str) -> Built {
    let d = dir.join(variant);
    std::fs::create_dir_all(&d).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (lib, debug, main) = (d.join("libhidden.so"), d.join("libhidden.so.debug"), d.join("main"));
    let src = data("hidden.c");
    let define = format!("-DVARIANT=\"{variant}\"");
    cc(&["-g", "-O1", "-fPIC", "-shared", "-Wl,--build-id", &define, "-o", &s(&lib), &s(&src)]);
    tool(&["objcopy", "--only-keep-debug", &s(&lib), &s(&debug)]);
    tool(&["strip", "--strip-all", &s(&lib)]);
    let main_c = d.join("main.c");
    std::fs::write(
        &main_c,
        "#include <stdio.h>\nvoid *lib_entry(unsigned long n);\nint main(void) { void *k[8]; \
         for (int i = 0; i < 8; i++) k[i] = lib_entry(1 << 20); printf(\"%p\\n\", k[7]); \
         return 0; }\n",
    )
    .unwrap();
    let rpath = format!("-Wl,-rpath,{}", d.display());
    cc(&["-o", &s(&main), &s(&main_c), "-L", &s(&d), "-lhidden", &rpath]);
    let o = Run::new("readelf").args(&["-n", &s(&lib)]).run();
    let build_id = o
        .stdout_str()
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build id");
    Built { lib, debug, main, build_id }
}

/// Runs `b.main` under the shim (every allocation sampled) with `env`, reporting to
/// `reports`; `in_process` writes the set in the process, else its raw exit.
fn run(b: &Built, reports: &Path, in_process: bool, env: &[(&str, &Path)]) {
    let mut r = Run::new(&b.main)
        .env("LD_PRELOAD", preload_lib().to_str().unwrap())
        .env("YING_REPORTING_PATH", reports.to_str().unwrap())
        .env("YING_SAMPLE_INTERVAL_BYTES", "1")
        .env("YING_SHORT_PROCESS_SECS", if in_process { "0" } else { "60" });
    for (k, v) in env {
        r = r.env(k, v.to_str().unwrap());
    }
    r.run().assert_success("main under the shim");
}

/// The frames of the text reports in `reports` that are the library's.
fn lib_frames(reports: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(reports).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txt") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| l.contains("hidden") || l.starts_with("lib_entry"))
                    .map(str::to_string),
            );
        }
    }
    out
}

fn named(frames: &[String]) -> bool {
    frames.iter().any(|f| f.starts_with("hidden_alloc_site (") && f.contains("hidden.c:"))
}

#[test]
fn a_stripped_library_is_named_from_its_debug_file_of_the_same_build_only() {
    let dir = TestDir::new("debuginfo");
    let b = build(dir.path(), "a");
    let empty = dir.join("empty-cache");
    std::fs::create_dir_all(&empty).unwrap();

    // Control: no debug file anywhere.
    let r = dir.join("none");
    run(&b, &r, true, &[("DEBUGINFOD_CACHE_PATH", &empty)]);
    let f = lib_frames(&r);
    assert!(!named(&f) && f.iter().any(|l| l.starts_with("libhidden.so+0x")), "{f:?}");

    // In the debuginfod client's cache, by build id: names and lines, in the process.
    let cache = dir.join("cache");
    std::fs::create_dir_all(cache.join(&b.build_id)).unwrap();
    std::fs::copy(&b.debug, cache.join(&b.build_id).join("debuginfo")).unwrap();
    let r = dir.join("cache-run");
    run(&b, &r, true, &[("DEBUGINFOD_CACHE_PATH", &cache)]);
    assert!(named(&lib_frames(&r)), "{:?}", lib_frames(&r));

    // Another build's debug file under this build's id is not used.
    let other = build(dir.path(), "b");
    assert_ne!(other.build_id, b.build_id);
    let wrong = dir.join("wrong-cache");
    std::fs::create_dir_all(wrong.join(&b.build_id)).unwrap();
    std::fs::copy(&other.debug, wrong.join(&b.build_id).join("debuginfo")).unwrap();
    let r = dir.join("wrong-run");
    run(&b, &r, true, &[("DEBUGINFOD_CACHE_PATH", &wrong)]);
    assert!(!named(&lib_frames(&r)), "{:?}", lib_frames(&r));

    // One planted by another user (when this test may give a file away) is not read.
    let planted = dir.join("planted-cache");
    std::fs::create_dir_all(planted.join(&b.build_id)).unwrap();
    let file = planted.join(&b.build_id).join("debuginfo");
    std::fs::copy(&b.debug, &file).unwrap();
    if std::os::unix::fs::chown(&file, Some(65534), Some(65534)).is_ok() {
        let r = dir.join("planted-run");
        run(&b, &r, true, &[("DEBUGINFOD_CACHE_PATH", &planted)]);
        assert!(!named(&lib_frames(&r)), "{:?}", lib_frames(&r));
    }

    // Through .gnu_debuglink, in the library's .debug/ directory.
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let linked = format!("--add-gnu-debuglink={}", s(&b.debug));
    tool(&["objcopy", &linked, &s(&b.lib)]);
    let dot_debug = b.lib.parent().unwrap().join(".debug");
    std::fs::create_dir_all(&dot_debug).unwrap();
    std::fs::rename(&b.debug, dot_debug.join("libhidden.so.debug")).unwrap();
    let r = dir.join("link-run");
    run(&b, &r, true, &[("DEBUGINFOD_CACHE_PATH", &empty)]);
    assert!(named(&lib_frames(&r)), "{:?}", lib_frames(&r));
}

/// A `debuginfod` serving a directory on a free port, killed on drop.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, files: &Path, build_id: &str) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("debuginfod")
        .args(["-F", files.to_str().unwrap(), "-p", &port.to_string(), "-t", "1", "-d"])
        .arg(dir.join("debuginfod.sqlite"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("debuginfod is required: run scripts/test.sh (installs Debian's debuginfod)");
    let server = Server { child, url: format!("http://127.0.0.1:{port}") };
    // Ready once it has scanned the directory and serves the file.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Run::new("curl")
            .args(&["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("{}/buildid/{build_id}/debuginfo", server.url))
            .run();
        if o.stdout_str() == "200" {
            return server;
        }
        assert!(Instant::now() < deadline, "debuginfod did not serve {build_id} within 60 s");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn ying_report_fetches_a_debug_file_from_debuginfod_into_the_cache() {
    let dir = TestDir::new("debuginfod");
    let b = build(dir.path(), "a");
    let files = dir.join("served");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::copy(&b.debug, files.join("libhidden.so.debug")).unwrap();
    let server = serve(dir.path(), &files, &b.build_id);

    // The process writes its raw exit and never fetches (it is not told to).
    let cache = dir.join("cache");
    let r = dir.join("raw");
    run(&b, &r, false, &[("DEBUGINFOD_CACHE_PATH", &cache)]);
    assert!(!cache.join(&b.build_id).exists(), "a profiled process fetched");
    let live: PathBuf = std::fs::read_dir(&r)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "live"))
        .expect("a raw exit");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // `client`: whether `debuginfod-find` is on the PATH (else Ying's own HTTP client asks).
    let report = |out: &Path, urls: &str, cache: &Path, client: bool| {
        let empty = dir.join("empty-path");
        std::fs::create_dir_all(&empty).unwrap();
        let path = if client { std::env::var("PATH").unwrap() } else { s(&empty) };
        let o = ying()
            .args(&["report", "-o", out.to_str().unwrap()])
            .arg(&live)
            .env("DEBUGINFOD_URLS", urls)
            .env("DEBUGINFOD_CACHE_PATH", cache.to_str().unwrap())
            .env("PATH", &path)
            .run();
        success(o, "ying report");
        lib_frames(out)
    };
    for (client, name) in [(false, "own-client"), (true, "debuginfod-find")] {
        let cache = dir.join(&format!("cache-{name}"));
        // Control: no server answers.
        let f = report(&dir.join(&format!("{name}-none")), "http://127.0.0.1:9", &cache, client);
        assert!(!named(&f), "{name}: {f:?}");
        // `ying report` fetches it, names the frames and leaves it in the cache.
        let f = report(&dir.join(&format!("{name}-out")), &server.url, &cache, client);
        assert!(named(&f), "{name}: {f:?}");
        assert!(cache.join(&b.build_id).join("debuginfo").is_file(), "{name}");
    }
    // With the server gone, the cache names them.
    drop(server);
    let cache = dir.join("cache-own-client");
    let f = report(&dir.join("out-cached"), "http://127.0.0.1:9", &cache, false);
    assert!(named(&f), "{f:?}");
}
