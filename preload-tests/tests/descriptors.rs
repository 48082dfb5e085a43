//! The program's descriptor table holds nothing of Ying's (issues #25 and #46): Ying's threads
//! work in a table of their own, so a program that checks every number it is given sees the
//! lowest free one each time while reports, the live file and the endpoint are all busy; no
//! descriptor of the shim's is ever in the program's table; the endpoint survives a program
//! that closes or `dup2`s over its low descriptors; and a worker that dropped privileges gets
//! one clear line instead of a failure per report. Each program runs
//! plain and under the shim (periodic reports every second, every 1,000 bytes sampled) with a
//! timeout; stdout and the exit status must be those of the plain run, the live file being
//! written every 50 ms meanwhile.

use std::path::Path;
use std::time::{Duration, Instant};

use preload_tests::{Comparison, Outcome, Run, TestDir, compare, require_tool};

/// Periodic reports every second, and enough samples that each check writes or tries to; the
/// live file written every 50 ms meanwhile (kept after the exit, to be seen).
const REPORTING: [(&str, &str); 5] = [
    ("YING_CHECK_INTERVAL_SECS", "1"),
    ("YING_SAMPLE_INTERVAL_BYTES", "1000"),
    ("YING_LIVE_FILE", "on"),
    ("YING_LIVE_INTERVAL_MS", "50"),
    ("YING_KEEP_LIVE_FILE", "1"),
];

/// /proc/self/fd and an fcntl count, before and after 2.5 s of periodic reports, and the number
/// the next `open` gets: all as in the plain run, and reports were written meanwhile.
#[test]
fn descriptor_table_is_the_programs_own() {
    let dir = TestDir::new("descriptors-list");
    let exe = dir.compile_c("fd_list.c", &[]);
    let reports = dir.reports("list");
    let c = compare(&Run::new(&exe).arg("2500"), &REPORTING, &reports);
    c.check(
        c.without.stdout_str().contains("next open: 3\n"),
        "the plain run's next open is not 3",
    );
    c.assert_no_ying_lines();
    // The baseline at the first check and at least one more during the sleep, then the exit's.
    c.check(c.main_reports().len() >= 2, "fewer than two report sets: no periodic report ran");
    let live = std::fs::read_dir(&reports)
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".live")))
        .unwrap_or(false);
    c.check(live, "no live file was written meanwhile");
}

/// The descriptor checker (`fd_checker.c`) opens, `dup`s, `dup2`s, `pipe`s and makes sockets
/// for 4 s, checking after each call that it got the lowest free number and that each close
/// succeeds, while reports are checked every second, the live file is written every 50 ms and
/// the endpoint is scraped over and over: it sees what it sees in its plain run, no wrong
/// number, no failed close or call, and a pipe it closed reads end-of-file; pushes to Pyroscope
/// and OTLP go out every second meanwhile. (With the report
/// thread's I/O in the program's table it saw 5,280 wrong numbers and 6 failed closes in 3 s.)
#[test]
fn a_program_that_checks_every_descriptor_number_sees_no_difference() {
    let dir = TestDir::new("descriptors-checker");
    let exe = dir.compile_c("fd_checker.c", &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let pushes = answer_every_post();
    let run = Run::new(&exe).arg("4000").timeout(Duration::from_secs(60));
    let without = run.clone().without_preload().run();
    let reports = dir.join("reports");
    let with_run = run
        .with_preload()
        .envs(&REPORTING)
        .env("YING_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("YING_PUSH_URL", format!("http://127.0.0.1:{}", pushes.0))
        .env("YING_OTLP_URL", format!("http://127.0.0.1:{}", pushes.0))
        .env("YING_PUSH_INTERVAL_SECS", "1")
        .env("YING_REPORTING_PATH", reports.display().to_string());
    let shim = std::thread::spawn(move || with_run.run());
    // Scrapes the endpoint (the heap profile: the tables, a symbolization, a gzip) until the
    // run ends.
    let mut scrapes = 0;
    while !shim.is_finished() {
        use std::io::{Read, Write};
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let req = "GET /debug/pprof/heap HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            let mut answer = Vec::new();
            if s.write_all(req.as_bytes()).is_ok() && s.read_to_end(&mut answer).is_ok() {
                scrapes += usize::from(answer.starts_with(b"HTTP/1.1 200"));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let with: Outcome = shim.join().unwrap();
    let c = Comparison { without, with, reports };
    c.check(
        c.without.stdout_str()
            == "wrong numbers: 0\nfailed closes: 0\nfailed calls: 0\npipe end-of-file: yes\n\
                next open is the lowest free: yes\n",
        "the plain run saw a difference of its own",
    );
    c.check(!c.with.timed_out, "the run WITH the shim timed out");
    c.check(c.with.status == c.without.status, "exit status differs");
    c.check(c.with.stdout == c.without.stdout, "stdout differs between the two runs");
    c.check(scrapes >= 5, format!("the endpoint answered {scrapes} scrapes"));
    let pushed = pushes.1.load(std::sync::atomic::Ordering::SeqCst);
    c.check(pushed >= 4, format!("{pushed} pushes (Pyroscope's and OTLP's) arrived"));
    c.check(c.main_reports().len() >= 2, "fewer than two report sets: no periodic report ran");
    c.assert_no_ying_lines();
}

/// A server that answers every request with 200 and counts them: where the checker's pushes go.
fn answer_every_post() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            // The head, then as much body as its length says.
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                let Some(end) = text.find("\r\n\r\n") else { continue };
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if got.len() >= end + 4 + len {
                    break;
                }
            }
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, count)
}

/// At soft limits of 4, 5 and 6 descriptors the program opens 1, 2 and 3 files, as in the plain
/// run, while reports are due; the reports skipped meanwhile are one warning, and the exit
/// report (after the program restored its limit) is written.
#[test]
fn a_program_at_its_descriptor_limit_keeps_every_slot() {
    let dir = TestDir::new("descriptors-rlimit");
    let exe = dir.compile_c("rlimit_files.c", &[]);
    let reports = dir.reports("rlimit");
    let c = compare(&Run::new(&exe), &REPORTING, &reports);
    c.check(
        c.without.stdout_str().starts_with(
            "limit 4: opened 1 (Too many open files)\nlimit 5: opened 2 (Too many open files)\n\
             limit 6: opened 3 (Too many open files)\n",
        ),
        "the plain run does not open 1, 2, 3 files",
    );
    let lines = c.with.ying_lines();
    c.check(lines.len() <= 1, format!("more than one `ying:` line: {lines:#?}"));
    c.check(
        lines.iter().all(|l| l.contains("RLIMIT_NOFILE") && l.contains("skipped")),
        format!("unexpected `ying:` lines: {lines:#?}"),
    );
    c.main_report();
}

/// A program that closes descriptors 3 to 63 and `dup2`s over 3 to 9 while the endpoint is on
/// gets 3 and 4 from its next opens, and the endpoint still answers.
#[test]
fn closing_low_descriptors_leaves_the_endpoint_alone() {
    if require_tool("curl").is_none() {
        return;
    }
    let dir = TestDir::new("descriptors-endpoint");
    let exe = dir.compile_c("close_low_fds.c", &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let run = |ready: &Path, stop: &Path| {
        Run::new(&exe).arg(ready).arg(stop).arg("60").timeout(Duration::from_secs(90))
    };
    let plain_stop = dir.join("stop-plain");
    std::fs::write(&plain_stop, "").unwrap();
    let without = run(&dir.join("ready-plain"), &plain_stop).run();
    let (ready, stop) = (dir.join("ready-shim"), dir.join("stop-shim"));
    let reports = dir.join("reports");
    let with_run = run(&ready, &stop)
        .with_preload()
        .envs(&REPORTING)
        .env("YING_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("YING_REPORTING_PATH", reports.display().to_string());
    let shim = std::thread::spawn(move || with_run.run());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() && !shim.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("http://127.0.0.1:{port}/debug/ying/status");
    let answer = Run::new("curl").args(&["-sS", "--max-time", "30", "-o", "/dev/null"]).args(&[
        "-w",
        "%{http_code}",
        url.as_str(),
    ]);
    let answered = answer.run();
    std::fs::write(&stop, "").unwrap();
    let with: Outcome = shim.join().unwrap();
    let c = Comparison { without, with, reports };
    c.check(c.without.stdout_str() == "opened 3 4\ndone\n", "the plain run did not get 3 and 4");
    c.check(!c.with.timed_out, "the run WITH the shim timed out");
    c.check(c.with.status == c.without.status, "exit status differs");
    c.check(c.with.stdout == c.without.stdout, "stdout differs between the two runs");
    c.check(c.with.stderr_without_ying() == c.without.stderr_str(), "stderr differs");
    c.check(
        answered.stdout_str() == "200",
        format!("the endpoint did not answer after the closes:\n{}", answered.describe()),
    );
    c.assert_no_ying_lines();
}

/// A root parent forks a worker that becomes uid 65534 (a daemon's pattern). The worker cannot
/// write in the root-owned reporting directory, so before it changes user the shim prepares
/// `uid-65534` inside it, given to that user, and the worker's sets land there: no `ying:` line,
/// the parent's set in the directory itself, the worker's (its marker allocations included) in
/// the subdirectory, owned by uid 65534. Skipped unless the tests run as root.
#[test]
fn a_worker_that_dropped_privileges_keeps_its_profile() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        println!("SKIPPED: needs root to drop privileges");
        return;
    }
    let dir = TestDir::new("descriptors-setuid");
    // The worker (uid 65534) must reach the reporting directory to write below it.
    make_traversable(dir.path());
    let exe = dir.compile_c("setuid_worker.c", &[]);
    let reports = dir.reports("setuid");
    let c = compare(&Run::new(&exe).arg("2500"), &REPORTING, &reports);
    c.check(
        c.without.stdout_str() == "worker uid 65534\nworker exited 0\n",
        "the plain run's worker did not drop privileges",
    );
    c.assert_no_ying_lines();
    let parent = c.main_report();
    let sub = reports.join("uid-65534");
    let owner = std::fs::metadata(&sub).map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    c.check(owner.as_ref().ok() == Some(&65534), format!("{}: owner {owner:?}", sub.display()));
    let worker: Vec<_> = preload_tests::report_sets(&sub);
    c.check(!worker.is_empty(), format!("no set of the worker in {}", sub.display()));
    c.check(
        worker.iter().all(|s| s.pid != parent.pid),
        "the parent's sets went into the worker's directory",
    );
    let last = worker.iter().max_by_key(|s| s.seq).expect("a set");
    // The worker's marker blocks: 50021 * i bytes for i in 1..64, retained at its exit.
    let bytes = last.folded().total();
    c.check(bytes >= 50_021 * 63 * 32 / 2, format!("the worker's set holds {bytes} bytes"));
}

/// As above, but `uid-65534` is a symbolic link planted in the reporting directory: it is not
/// followed (nothing lands where it points), and the worker says in `ying:` lines which uid
/// cannot write its reports and what to set; the program's output is unchanged.
#[test]
fn a_planted_link_for_the_worker_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        println!("SKIPPED: needs root to drop privileges");
        return;
    }
    let dir = TestDir::new("descriptors-setuid-link");
    make_traversable(dir.path());
    let exe = dir.compile_c("setuid_worker.c", &[]);
    let reports = dir.reports("setuid-link");
    let target = dir.join("elsewhere");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(&reports).unwrap();
    std::os::unix::fs::symlink(&target, reports.join("uid-65534")).unwrap();
    let c = compare(&Run::new(&exe).arg("1500"), &REPORTING, &reports);
    let lines = c.with.ying_lines();
    c.check(
        lines.iter().any(|l| l.contains("uid 65534") && l.contains("YING_REPORTING_PATH")),
        format!("no line says which uid cannot write and what to set: {lines:#?}"),
    );
    c.check(
        std::fs::read_dir(&target).unwrap().next().is_none(),
        "a file was written through the planted link",
    );
    c.main_report();
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Opens the directories from `/tmp` down to `p` to everyone's traversal (mode +x).
fn make_traversable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for a in
        p.ancestors().take_while(|a| a.starts_with(std::env::temp_dir()) && *a != Path::new("/"))
    {
        if let Ok(m) = std::fs::metadata(a) {
            let mut perm = m.permissions();
            perm.set_mode(perm.mode() | 0o111);
            let _ = std::fs::set_permissions(a, perm);
        }
    }
}
