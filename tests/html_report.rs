//! The HTML report in a real browser: headless Chromium opens `ying.<exe>.<pid>.html` and the
//! directory view, runs their script, and the tests read the DOM it leaves (`--dump-dom`): the
//! chart's series, the dump picker, the flamegraphs and the diff, with the expected stack
//! names. Chromium's network log must show no request made by the page (a control page that
//! does make requests shows them, so the check can fail). The summary must read in a text
//! browser (`lynx -dump`).
//!
//! Needs Debian's `chromium` and `lynx` (`scripts/test.sh` installs them when missing).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ying_profiler::callstack::{Frame, FrameView, StdCallstack};
use ying_profiler::histogram::MillisHistogram;
use ying_profiler::report::html;
use ying_profiler::report::timeline::Timeline;
use ying_profiler::{Snapshot, StackStats, Totals};

const LEAK_FN: &str = "leak_loop";

fn scratch(name: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("html-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn chromium() -> &'static str {
    let ok = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "chromium is required: run scripts/test.sh (installs Debian's chromium)");
    "chromium"
}

/// What Chromium left after loading `url`: the DOM once the scripts ran, and the URLs of the
/// requests the page made (from its network log: requests in the page's `file://` network
/// partition, not the browser's own background requests).
struct Loaded {
    dom: String,
    page_requests: Vec<String>,
    took: Duration,
}

fn load(url: &str, work: &Path, screenshot: Option<&Path>) -> Loaded {
    let profile = work.join("chromium-profile");
    let netlog = work.join("netlog.json");
    let _ = std::fs::remove_file(&netlog);
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--hide-scrollbars",
        "--window-size=1280,2600",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--log-net-log={}", netlog.display()));
    match screenshot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let start = Instant::now();
    let out = cmd.arg(url).stderr(Stdio::null()).output().expect("chromium runs");
    let took = start.elapsed();
    assert!(out.status.success(), "chromium failed on {url}: {:?}", out.status);
    let log = std::fs::read_to_string(&netlog).expect("chromium wrote its network log");
    let page_requests = log
        .lines()
        .filter(|l| l.contains("\"network_isolation_key\":\"file://"))
        .filter_map(|l| {
            let s = l.find("\"url\":\"")? + 7;
            Some(l[s..s + l[s..].find('"')?].to_string())
        })
        .collect();
    Loaded { dom: String::from_utf8_lossy(&out.stdout).into_owned(), page_requests, took }
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// The value of attribute `attr` of every element whose opening tag contains `marker`.
fn attrs<'a>(dom: &'a str, marker: &str, attr: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find(marker) {
        let tag_start = rest[..i].rfind('<').unwrap_or(0);
        let tag_end = i + rest[i..].find('>').unwrap_or(rest.len() - i);
        let tag = &rest[tag_start..tag_end];
        let key = format!(" {attr}=\"");
        if let Some(a) = tag.find(&key) {
            let v = &tag[a + key.len()..];
            out.push(&v[..v.find('"').unwrap_or(v.len())]);
        }
        rest = &rest[tag_end..];
    }
    out
}

/// The text of the element starting at the first `marker` up to its closing `end`, tags
/// replaced by spaces.
fn text_of(dom: &str, marker: &str, end: &str) -> String {
    let Some(i) = dom.find(marker) else { return String::new() };
    let j = i + dom[i..].find(end).unwrap_or(dom.len() - i);
    let mut out = String::new();
    let mut in_tag = false;
    for c in dom[i..j].chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// The rows of the first table whose tag contains `marker`, each row's text.
fn rows(dom: &str, marker: &str) -> Vec<String> {
    let Some(i) = dom.find(marker) else { return Vec::new() };
    let table = &dom[i..i + dom[i..].find("</table>").unwrap_or(dom.len() - i)];
    let body = &table[table.find("<tbody>").map_or(0, |b| b + 7)..];
    body.split("<tr>").skip(1).map(|r| text_of(r, "", "</tr>")).collect()
}

/// The page made no request: checked on a control page first, which must show its own.
fn assert_no_page_requests(loaded: &Loaded, work: &Path) {
    let control = work.join("control.html");
    std::fs::write(
        &control,
        "<html><body><img src=\"http://127.0.0.1:9/x.png\"><script>fetch('http://127.0.0.1:9/y')\
         .catch(() => {})</script></body></html>",
    )
    .unwrap();
    let c = load(&file_url(&control), work, None);
    assert!(
        c.page_requests.iter().any(|u| u.starts_with("http://127.0.0.1:9/")),
        "the network log shows a control page's requests: {:?}",
        c.page_requests
    );
    assert!(loaded.page_requests.is_empty(), "the page made requests: {:?}", loaded.page_requests);
}

#[test]
fn example_leak_grows_in_the_chart_and_leads_the_diff_in_chromium() {
    let exe = common::build_example();
    let work = scratch("example");
    let reports = work.join("reports");
    let status = Command::new(&exe)
        .env("YING_EXAMPLE_INTERVAL_SECS", "2")
        .env("YING_EXAMPLE_RUNTIME_SECS", "13")
        .env("YING_EXAMPLE_REPORTING_PATH", &reports)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the example runs");
    assert!(status.success(), "ying_example failed: {status:?}");
    let htmls: Vec<PathBuf> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .collect();
    assert_eq!(htmls.len(), 1, "one HTML file per process: {htmls:?}");
    let page = &htmls[0];
    let name = page.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("ying.ying_example.") && name.ends_with(".html"), "{name}");
    let sets = std::fs::read_dir(&reports)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().ends_with(".txt"))
        .count();
    assert!(sets >= 4, "the example wrote {sets} sets");

    let loaded = load(&file_url(page), &work, None);
    let dom = &loaded.dom;
    assert!(dom.contains("data-rendered=\"yes\""), "the script ran to its end");
    // The chart: the leak's stacked series grows from dump to dump.
    let names = attrs(dom, "class=\"series\"", "data-name");
    let values = attrs(dom, "class=\"series\"", "data-values");
    let leak = names.iter().position(|n| n.contains(LEAK_FN)).expect("the chart has the leak");
    assert_eq!(leak, 0, "the leak is the largest series: {names:?}");
    let v: Vec<u64> = values[leak].split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!(v.len(), sets, "one value per dump: {v:?}");
    let rises = v.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(rises + 1 >= v.len() - 1, "the leak grows at (nearly) every dump: {v:?}");
    assert!(v[v.len() - 1] > 3 * v[0], "the leak grows: {v:?}");
    assert!(dom.matches("class=\"dump-marker").count() == sets, "a marker per dump");
    for line in ["exact retained", "RSS", "peak (sampled high-water)"] {
        assert!(dom.contains(&format!("data-name=\"{line}\"")), "the chart has {line}");
    }
    // The dump picker: one option per dump, the last picked, its table and flamegraph.
    let picker = text_of(dom, "class=\"dump-picker\"", "</select>");
    assert_eq!(picker.matches("dump ").count(), sets, "{picker}");
    let table = rows(dom, "class=\"stacks\"");
    assert!(table[0].contains(LEAK_FN), "the last dump's top stack is the leak: {table:?}");
    let flame = text_of(dom, "class=\"flame-box current\"", "class=\"flame-box peak\"");
    assert!(flame.contains(LEAK_FN) && flame.contains("handle_request"), "{flame}");
    assert!(dom.contains("class=\"fg-node\""));
    let peak = text_of(dom, "class=\"peak-info\"", "</p>");
    assert!(peak.contains("kept peak at"), "{peak}");
    // The diff of the first and last dumps names the leak first.
    let diff = rows(dom, "class=\"diff-table\"");
    assert!(diff[0].contains(LEAK_FN), "the diff names the leak first: {diff:?}");
    assert!(diff[0].contains('+'), "it grew: {}", diff[0]);
    let diff_flame = text_of(dom, "class=\"flame-box diff\"", "</section>");
    assert!(diff_flame.contains(LEAK_FN), "the diff flamegraph names the leak");
    assert!(dom.contains("data-delta=\""), "diff nodes carry their change");
    let tips = attrs(dom, "class=\"fg-node\"", "title");
    assert!(
        tips.iter().any(|t| t.contains(LEAK_FN) && t.contains("MiB retained")),
        "the flamegraph's tooltips give bytes: {:?}",
        &tips[..tips.len().min(5)]
    );
    assert_no_page_requests(&loaded, &work);

    // Searching (from the URL) marks the leak's nodes and sums their bytes.
    let found = load(&format!("{}#search=leak_loop", file_url(page)), &work, None);
    let matched = text_of(&found.dom, "class=\"note fg-found\"", "</span>");
    assert!(matched.contains("matched") && matched.contains("MiB"), "{matched}");
    assert!(found.dom.contains("fg-node fg-match"), "matching nodes are marked");

    // Picking the first dump through the URL shows that dump.
    let first = load(&format!("{}#dump=0&a=0&b=1", file_url(page)), &work, None);
    assert!(first.dom.contains("class=\"dump-view\" data-dump=\"0\""), "dump 0 picked");
    assert!(text_of(&first.dom, "class=\"dump-info\"", "</p>").contains("dump 0 "));

    // The screenshot (the README's picture comes from this test's output).
    let png = work.join("ying-html.png");
    load(&file_url(page), &work, Some(&png));
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 50_000, "{} bytes", bytes.len());
    println!("screenshot: {}", png.display());

    // The summary in a text browser.
    let lynx = Command::new("lynx").args(["-dump", "-nolist", "-width=200"]).arg(page).output();
    let lynx = lynx.expect("lynx is required: run scripts/test.sh (installs lynx)");
    let text = String::from_utf8_lossy(&lynx.stdout);
    assert!(text.contains("retained (exact) at the last dump"), "{text}");
    let top = text
        .lines()
        .skip_while(|l| !l.contains("Top stacks"))
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_default();
    assert!(top.contains(LEAK_FN), "the summary's top stack is the leak: {top}\n{text}");

    // The directory view, read back from the sets on disk, one section per process.
    let view = html::write_view(&reports).expect("the view is written");
    let v = load(&file_url(&view), &work, None);
    assert!(v.dom.contains("data-rendered=\"yes\""));
    assert_eq!(v.dom.matches("class=\"process\"").count(), 1);
    let diff = rows(&v.dom, "class=\"diff-table\"");
    assert!(diff[0].contains(LEAK_FN), "the view's diff names the leak first: {diff:?}");
    let names = attrs(&v.dom, "class=\"series\"", "data-name");
    assert!(names[0].contains(LEAK_FN), "{names:?}");
    assert_no_page_requests(&v, &work);
}

/// The function names of the synthetic program: 20 layers of 400 handlers, 997 dispatchers.
fn synthetic_names() -> (Vec<std::sync::Arc<str>>, Vec<std::sync::Arc<str>>) {
    let layers =
        (0..20 * 400).map(|k| format!("app::layer{}::handler_{}", k / 400, k % 400).into());
    let dispatch = (0..997).map(|k| format!("app::service::dispatch_{k}").into());
    (layers.collect(), dispatch.collect())
}

/// A 30-frame stack `i` of the synthetic program.
fn synthetic_stack_named(
    i: usize,
    retained: u64,
    names: &(Vec<std::sync::Arc<str>>, Vec<std::sync::Arc<str>>),
) -> StackStats {
    let file: std::sync::Arc<str> = "/app/src/service/handlers.rs".into();
    let frames: Vec<Frame> = (0..30)
        .map(|d| Frame {
            ip: 0x1000 + i * 64 + d,
            function: if d < 20 {
                names.0[d * 400 + (i * 7 + d) % 400].clone()
            } else {
                names.1[i % 997].clone()
            },
            file: Some(file.clone()),
            // A function's frames are at a few lines of its own.
            line: Some(10 + ((i + d) % 3) as u32),
            inlined: false,
            module: None,
        })
        .collect();
    let ips: Vec<usize> = frames.iter().map(|f| f.ip).collect();
    StackStats {
        allocated_bytes: retained * 3 + 4096,
        num_allocations: retained / 512 + 1,
        freed_bytes: retained * 2 + 4096,
        num_frees: retained / 1024,
        retained_bytes: retained,
        retained_count: retained / 1024,
        peak_retained_bytes: retained + 100,
        peak_retained_count: retained / 1024,
        samples: 1,
        live_samples: 1,
        frames,
        lifetimes: MillisHistogram::new(),
        retained_age: MillisHistogram::new(),
        stack: StdCallstack::from_ips(&ips),
        spans: Vec::new(),
        variance: Default::default(),
        residency: None,
    }
}

fn synthetic_stack(i: usize, retained: u64) -> StackStats {
    synthetic_stack_named(i, retained, &(vec!["app::x".into(); 8000], vec!["app::y".into(); 997]))
}

/// Benchmark and check: the page of a 10,000-stack, 100-dump run is under 5 MB and renders in
/// Chromium (the time is printed, not asserted).
#[test]
// A million frames are built and ranked 100 times: minutes unoptimized; scripts/test.sh runs it
// with `--release`.
#[cfg_attr(debug_assertions, ignore = "run with --release (scripts/test.sh does)")]
fn ten_thousand_stacks_a_hundred_dumps_under_5_mb_and_renders() {
    let mut t = Timeline::new("/usr/bin/big-service", 4242);
    let start = UNIX_EPOCH + Duration::from_secs(1_796_214_611);
    let names = synthetic_names();
    let base: Vec<StackStats> = (0..10_000).map(|i| synthetic_stack_named(i, 0, &names)).collect();
    for dump in 0..100u64 {
        // The stacks' sizes move from dump to dump, so each dump's top differs (the worst case
        // for the interned stacks).
        let mut stacks = base.clone();
        for (i, s) in stacks.iter_mut().enumerate() {
            let r = ((i as u64 * 2_654_435_761 + dump * 40_503) % 1_000_003) * 10;
            s.retained_bytes = r;
            s.allocated_bytes = r * 3 + 4096;
            s.peak_retained_bytes = r + 100;
        }
        let retained: u64 = stacks.iter().map(|s| s.retained_bytes).sum();
        let snap = Snapshot {
            taken_at: start + Duration::from_secs(300 * dump),
            totals: Totals {
                allocated_bytes: retained * 3,
                freed_bytes: retained * 2,
                ..Totals::default()
            },
            sample_interval: 524_288,
            unit: ying_profiler::ByteUnit::Requested,
            stacks,
            live_samples: 10_000,
            dropped_samples: 0,
            address_conflicts: 0,
            giant_refused: 0,
            giant_refusals: Vec::new(),
            symbol_cache_entries: 0,
            peak: None,
        };
        t.add_snapshot(&snap, FrameView::DEFAULT, dump, &format!("ying.big-service.4242.{dump}"));
    }
    let page = html::render(&[&t], "Ying memory report: big-service (pid 4242)");
    let work = scratch("10k");
    let path = work.join("ying.big-service.4242.html");
    std::fs::write(&path, &page).unwrap();
    println!(
        "10k stacks, 100 dumps: {} bytes of HTML, {} distinct stacks kept, timeline {} bytes in memory",
        page.len(),
        t.stacks.len(),
        t.memory_bytes()
    );
    assert!(page.len() < 5_000_000, "{} bytes", page.len());
    let loaded = load(&file_url(&path), &work, None);
    let ms = attrs(&loaded.dom, "<body", "data-render-ms");
    println!(
        "chromium: {:.2} s from start to exit (browser start included), script {} ms",
        loaded.took.as_secs_f64(),
        ms.first().copied().unwrap_or("?")
    );
    assert!(loaded.dom.contains("data-rendered=\"yes\""), "the script ran to its end");
    let picker = text_of(&loaded.dom, "class=\"dump-picker\"", "</select>");
    assert_eq!(picker.matches("dump ").count(), 100);
    assert!(loaded.dom.matches("class=\"fg-node\"").count() > 100, "flamegraphs drawn");
    // The diff lists at most 20 stacks, those beyond noise, and sums up the rest.
    assert!(rows(&loaded.dom, "class=\"diff-table\"").len() <= 20);
    assert!(loaded.dom.contains("class=\"diff-noise\""), "the diff says what is noise");
    assert_no_page_requests(&loaded, &work);
}

/// A stack `main` → `app::handler` → `leaf` retaining `retained` bytes.
fn named_stack(leaf: &str, line: u32, retained: u64) -> StackStats {
    let mut s = synthetic_stack(0, retained);
    let f = |ip: usize, name: &str, line: u32| Frame {
        ip,
        function: name.into(),
        file: Some("/app/src/main.rs".into()),
        line: Some(line),
        inlined: false,
        module: None,
    };
    s.frames = vec![
        f(0x10 + line as usize, leaf, line),
        f(0x2000, "app::handler", 20),
        f(0x3000, "app::main", 5),
    ];
    s.stack = StdCallstack::from_ips(&[0x10 + line as usize, 0x2000, 0x3000]);
    s
}

/// `ying view DIR`'s page: sets of three processes (two runs of one program, one of another)
/// written by `write_report_set`, read back from disk, one section per process, each with its
/// own dumps, chart and diff.
#[test]
fn the_directory_view_has_a_section_per_process_in_chromium() {
    let work = scratch("view");
    let dir = work.join("reports");
    let opts = ying_profiler::report::ReportOptions::default();
    let start = UNIX_EPOCH + Duration::from_secs(1_796_214_611);
    // (exe, pid, the function that grows, sets)
    let procs = [
        ("svc", 100u32, "app::old_run_cache", 3u64),
        ("svc", 200, "app::new_run_leak", 4),
        ("worker", 300, "app::batch_buffer", 2),
    ];
    for (k, (exe, pid, grows, n)) in procs.iter().enumerate() {
        let ctx = ying_profiler::report::ReportContext {
            pid: *pid,
            instance: None,
            exe: format!("/usr/bin/{exe}"),
            rss_kib: Some(50_000),
            anon_rss_kib: Some(40_000),
        };
        for i in 0..*n {
            let stacks = vec![
                named_stack(grows, 40, (1 + i) * (4 << 20)),
                named_stack("app::steady_pool", 41, 3 << 20),
                named_stack("app::shrinking_queue", 42, (8 - 2 * i.min(3)) << 20),
            ];
            let retained: u64 = stacks.iter().map(|s| s.retained_bytes).sum();
            let snap = Snapshot {
                taken_at: start + Duration::from_secs(3600 * k as u64 + 60 * i),
                totals: Totals {
                    allocated_bytes: retained * 2,
                    freed_bytes: retained,
                    ..Totals::default()
                },
                // Every change below is tens of standard errors at this interval (see noise.rs).
                sample_interval: 4096,
                unit: ying_profiler::ByteUnit::Requested,
                stacks,
                live_samples: 3,
                dropped_samples: 0,
                address_conflicts: 0,
                giant_refused: 0,
                giant_refusals: Vec::new(),
                symbol_cache_entries: 0,
                peak: None,
            };
            // The worker changed user: its sets are in `uid-65534/`, as the shim puts them.
            let target = if *exe == "worker" { dir.join("uid-65534") } else { dir.clone() };
            std::fs::create_dir_all(&target).unwrap();
            ying_profiler::report::write_report_set(&snap, &ctx, &opts, &target)
                .expect("set written");
        }
    }
    // A file of no set and a corrupt profile are left out.
    std::fs::write(dir.join("notes.txt"), b"x").unwrap();
    std::fs::write(dir.join("ying.svc.999.0.20261203T181500Z.pb.gz"), b"not gzip").unwrap();
    let page = html::write_view(&dir).expect("the view is written");
    assert_eq!(page, dir.join(html::VIEW_FILE));
    let loaded = load(&file_url(&page), &work, None);
    let dom = &loaded.dom;
    assert!(dom.contains("data-rendered=\"yes\""), "the script ran to its end");
    let sections: Vec<&str> = dom.split("class=\"process\"").skip(1).collect();
    assert_eq!(sections.len(), 3, "one section per process");
    for (s, (exe, pid, grows, n)) in sections.iter().zip(&procs) {
        assert!(
            s.contains(&format!("{exe} (pid {pid})")),
            "sections in the order the processes ran"
        );
        let picker = text_of(s, "class=\"dump-picker\"", "</select>");
        assert_eq!(picker.matches("dump ").count() as u64, *n, "{picker}");
        let diff = rows(s, "class=\"diff-table\"");
        assert!(diff[0].contains(grows), "{exe} {pid}: the diff names {grows} first: {diff:?}");
        assert!(diff.last().unwrap().contains("shrinking_queue") || *n < 3, "{diff:?}");
        let names = attrs(s, "class=\"series\"", "data-name");
        assert!(names.contains(grows), "{names:?}");
    }
    assert_no_page_requests(&loaded, &work);
    // An empty directory is an error, not an empty page.
    let empty = work.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(html::write_view(&empty).is_err());
}

/// A CPython stack: the arena's frames under `_PyObject_Malloc`, called by `caller` (at `ip`),
/// retaining `retained` bytes (and as much at the peak).
fn python_stack(caller: &str, ip: usize, retained: u64) -> StackStats {
    let mut s = synthetic_stack(0, retained);
    let f = |ip: usize, name: &str, file: &str| Frame {
        ip,
        function: name.into(),
        file: Some(file.into()),
        line: Some(100 + (ip % 97) as u32),
        inlined: false,
        module: None,
    };
    s.frames = vec![
        f(0x10, "_PyObject_ArenaMmap", "Objects/obmalloc.c"),
        f(0x20, "new_arena", "Objects/obmalloc.c"),
        f(0x30, "allocate_from_new_pool", "Objects/obmalloc.c"),
        f(0x40, "_PyObject_Malloc", "Objects/obmalloc.c"),
        f(ip, caller, "Objects/unicodeobject.c"),
        f(0x9000, "main", "Programs/python.c"),
    ];
    s.stack = StdCallstack::from_ips(&[0x10, 0x20, 0x30, 0x40, ip, 0x9000]);
    s.peak_retained_bytes = retained;
    s
}

/// One dump of a CPython-like program at `secs` after the test's epoch, whose sampled
/// high-water mark (29.8 MiB) is below its exact retained total (30 MiB).
fn python_snapshot(secs: u64) -> Snapshot {
    let start = UNIX_EPOCH + Duration::from_secs(1_796_214_611);
    let mib = 1u64 << 20;
    let stacks = vec![
        python_stack("PyUnicode_New", 0x100, 18 * mib),
        python_stack("PyList_New", 0x200, 9 * mib),
    ];
    Snapshot {
        taken_at: start + Duration::from_secs(secs),
        totals: Totals { allocated_bytes: 40 * mib, freed_bytes: 10 * mib, ..Totals::default() },
        sample_interval: 524_288,
        unit: ying_profiler::ByteUnit::Requested,
        stacks,
        live_samples: 2,
        dropped_samples: 0,
        address_conflicts: 0,
        giant_refused: 0,
        giant_refusals: Vec::new(),
        symbol_cache_entries: 0,
        peak: Some(ying_profiler::Peak {
            since_start: Some(Duration::from_millis(700)),
            at: start + Duration::from_millis(secs * 1000 - 300),
            estimated_bytes: 27 * mib,
            exact_bytes: Some(28 * mib),
            high_water_bytes: 29 * mib + 820 * 1024,
            captures: 3,
        }),
    }
}

/// A short program's page has one dump: no chart of one instant and no diff of the dump with
/// itself; it leads with the peak (the plain summary too). Its stacks are named by their first
/// frame past the allocator (`PyUnicode_New`, not `_PyObject_ArenaMmap` for both), in the
/// tables and, once there are two dumps, in the chart's legend, each name once.
#[test]
fn a_page_of_one_dump_leads_with_the_peak_and_stacks_are_named_past_the_allocator() {
    let work = scratch("one-dump");
    let mut t = Timeline::new("/usr/bin/python3.11", 2948);
    t.add_snapshot(&python_snapshot(2), FrameView::DEFAULT, 0, "ying.python3.11.2948.0.x");
    let page = html::render(&[&t], "Ying memory report: python3.11 (pid 2948)");
    // The plain summary: the peak first, as at least the exact retained total.
    let totals: Vec<String> = rows(&page, "class=\"totals\"")
        .iter()
        .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(totals[0].starts_with("peak at least 30.0 MiB (exact, retained at the last dump; the sampled high-water ≈29.8 MiB is below it); kept peak at 2026-12-02T12:30:12Z: 27.0 MiB estimated, 28.0 MiB exact"), "{totals:?}");
    let top = rows(&page, "class=\"top\"");
    assert!(top[1].contains("PyUnicode_New") && top[2].contains("PyList_New"), "{top:?}");
    assert!(!page.contains("_PyObject_ArenaMmap</td>"), "no stack is named by the arena");
    let path = work.join("one.html");
    std::fs::write(&path, &page).unwrap();
    let loaded = load(&file_url(&path), &work, None);
    let dom = &loaded.dom;
    assert!(dom.contains("data-rendered=\"yes\""), "the script ran to its end");
    assert!(!dom.contains("class=\"chart-svg\""), "no chart of one dump");
    assert!(!dom.contains("class=\"diff-table\"") && !dom.contains("class=\"diff-a\""), "no diff");
    assert!(dom.contains("class=\"note single-dump\""));
    let app = &dom[dom.find("class=\"app\"").expect("the app")..];
    let first_h3 = text_of(app, "<h3>", "</h3>");
    assert_eq!(first_h3.trim(), "Peak", "the page leads with the peak");
    let peak = text_of(app, "class=\"peak-info\"", "</p>");
    assert!(peak.contains("peak at least 30.0 MiB") && peak.contains("kept peak at"), "{peak}");
    let peak_rows = rows(app, "class=\"peak-stacks\"");
    assert!(peak_rows[0].contains("PyUnicode_New"), "{peak_rows:?}");
    assert!(app.find("class=\"peak-view\"") < app.find("class=\"dump-view\""));
    assert_eq!(app.matches("class=\"peak-info\"").count(), 1, "the peak is shown once");
    let stacks = rows(app, "class=\"stacks\"");
    assert!(stacks[0].contains("PyUnicode_New"), "{stacks:?}");
    assert_no_page_requests(&loaded, &work);

    // Two dumps: the chart, its legend naming each stack once, past the allocator.
    t.add_snapshot(&python_snapshot(4), FrameView::DEFAULT, 1, "ying.python3.11.2948.1.x");
    let path = work.join("two.html");
    std::fs::write(&path, html::render(&[&t], "two")).unwrap();
    let loaded = load(&file_url(&path), &work, None);
    let names = attrs(&loaded.dom, "class=\"series\"", "data-name");
    assert_eq!(names, ["PyUnicode_New", "PyList_New", "others"], "{names:?}");
    assert!(loaded.dom.contains("class=\"diff-table\"") && loaded.dom.contains("chart-svg"));
}
