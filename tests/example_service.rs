//! Runs a short version of `examples/ying_example.rs` as a real process (built with
//! `--profile bench`, as its documentation says) and checks the report sets it leaves behind:
//! the runner's retained-ranked reports name the leak as the top stack, the flamegraphs are
//! complete SVG documents, and the final allocated-ranked report shows the cache's churn as
//! allocated but not retained. Reports read like the code: each call site of the example is one
//! entry (stacks printed alike are merged), its inlined `record_audit` is named, and Tokio's and
//! std's frames are folded, with short paths.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const LEAK_FN: &str = "leak_loop";
/// Inlined into `handle_request` (`#[inline(always)]`): named in the default view all the same.
const AUDIT_FN: &str = "record_audit";
const CACHE_FNS: [&str; 2] = ["cache_worker", "handle_request"];
const INTERVAL_SECS: u64 = 3;
const RUNTIME_SECS: u64 = 10;
const TIMEOUT: Duration = Duration::from_secs(60);

/// One report set, by file stem `ying.<exe>.<pid>.<seq>.<time>`.
#[derive(Debug, Default)]
struct ReportSet {
    txt: Option<PathBuf>,
    json: Option<PathBuf>,
    svg: Option<PathBuf>,
    folded: Option<PathBuf>,
}

fn report_sets(dir: &Path) -> BTreeMap<u64, ReportSet> {
    let mut sets: BTreeMap<u64, ReportSet> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("reporting dir exists") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let (stem, ext) = match name.rsplit_once('.') {
            Some((s, e)) if !name.starts_with('.') => (s.to_string(), e.to_string()),
            _ => continue,
        };
        let stem = stem.strip_suffix(".pb").unwrap_or(&stem);
        // ying.<exe>.<pid>.<seq>.<time>: the sequence number is the second field from the end.
        let Some(seq) = stem.rsplit('.').nth(1).and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        let set = sets.entry(seq).or_default();
        match ext.as_str() {
            "txt" => set.txt = Some(path),
            "json" => set.json = Some(path),
            "svg" => set.svg = Some(path),
            "folded" => set.folded = Some(path),
            _ => {}
        }
    }
    sets
}

/// One listed entry of a report set (read from its manifest).
#[derive(Debug)]
struct Block {
    retained: u64,
    allocated: u64,
    /// The span path (`a > b`), if any.
    span: Option<String>,
    /// Frame lines as the text report prints them (function, location, `[inlined]`).
    lines: Vec<String>,
}

impl Block {
    /// The function name of each frame line.
    fn functions(&self) -> Vec<&str> {
        self.lines
            .iter()
            .map(|l| {
                let l = l.strip_suffix(" [inlined]").unwrap_or(l);
                match l.rfind(" (") {
                    Some(i) if l.ends_with(')') => &l[..i],
                    _ => l,
                }
            })
            .collect()
    }

    /// Whether a frame *is* a function of `name` (`ying_example::leak_loop::{{closure}}`), not
    /// merely some other function instantiated with its future type as a generic argument
    /// (`{closure#0}<ying_example::leak_loop::{async_fn_env#0}, ..>` names tokio's closure).
    fn names(&self, name: &str) -> bool {
        self.functions().iter().any(|f| without_generics(f).contains(name))
    }
}

/// A function name without its generic argument lists (`a::<T>::b<U>` -> `a::::b`); the `>`
/// of `->` does not close a list.
fn without_generics(f: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut prev = ' ';
    for c in f.chars() {
        match c {
            '<' => depth += 1,
            '>' if prev != '-' && depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
        prev = c;
    }
    out
}

/// The listed entries of a set's manifest (`<set>.json`), as blocks.
fn blocks_of(manifest: &Value) -> Vec<Block> {
    let n = |e: &Value, k: &str| e[k].as_u64().unwrap_or_else(|| panic!("no {k} in {e}"));
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
    };
    manifest["entries"]
        .as_array()
        .expect("the manifest lists its entries")
        .iter()
        .map(|e| {
            let spans = strings(&e["spans"]);
            Block {
                retained: n(e, "retained_bytes"),
                allocated: n(e, "allocated_bytes"),
                // As the text report's `span:` line joins them.
                span: (!spans.is_empty()).then(|| spans.join(" > ")),
                lines: strings(&e["frames"]),
            }
        })
        .collect()
}

/// Sum of folded-stack values over lines that mention any of `names`.
fn folded_sum(folded: &str, names: &[&str]) -> u64 {
    folded
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

/// A block's frame lines without its folded ones (`... N frames in tokio ...`,
/// `... library internals ...`).
fn unfolded(b: &Block) -> Vec<&str> {
    b.lines.iter().map(String::as_str).filter(|l| !l.starts_with("... ")).collect()
}

/// Reports read like the code: no two entries print alike, no two entries differ only in
/// folded frames (one call site of a library function, one entry: stacks that differ inside
/// the allocator, Tokio or std are one entry), and those frames are folded, with short paths.
fn assert_reads_like_the_code(report: &str, blocks: &[Block]) {
    for (i, a) in blocks.iter().enumerate() {
        for b in &blocks[i + 1..] {
            assert!(
                a.lines != b.lines || a.span != b.span,
                "two entries print alike:\n{:#?}\n{report}",
                a.lines
            );
            assert!(
                unfolded(a) != unfolded(b) || a.span != b.span,
                "one call site in two entries:\n{:#?}\n{report}",
                unfolded(a)
            );
        }
    }
    assert!(
        !report.contains(".cargo/registry/") && !report.contains("/rustc/"),
        "long registry or std paths in the report:\n{report}"
    );
    assert!(report.contains(" frames in tokio"), "Tokio's frames not folded:\n{report}");
}

/// The text report's section titled `title...`, up to its blank line.
fn section<'a>(txt: &'a str, title: &str) -> &'a str {
    let start = txt.find(&format!("\n{title} ")).unwrap_or_else(|| panic!("no {title}:\n{txt}"));
    let rest = &txt[start + 1..];
    &rest[..rest.find("\n\n").unwrap_or(rest.len())]
}

fn read(p: &Option<PathBuf>, what: &str) -> String {
    let p = p.as_ref().unwrap_or_else(|| panic!("report set without its {what}"));
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn example_service_writes_reports_naming_the_leak_and_the_churn() {
    let exe = common::build_example();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("ying-example-{}-{nanos}", std::process::id()));

    let started = Instant::now();
    let child = Command::new(&exe)
        .env("YING_EXAMPLE_INTERVAL_SECS", INTERVAL_SECS.to_string())
        .env("YING_EXAMPLE_RUNTIME_SECS", RUNTIME_SECS.to_string())
        .env("YING_EXAMPLE_REPORTING_PATH", &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let what = format!("the example (reports in {})", dir.display());
    let output = common::wait_or_kill(child, TIMEOUT, &what);
    let status = output.status;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("example ran {:?}; stdout:\n{stdout}", started.elapsed());
    assert!(status.success(), "example failed: {status:?}\nstderr:\n{stderr}");
    assert!(stderr.contains("service stats"), "no tracing output on stderr:\n{stderr}");

    // The stats API summary on stdout.
    let total: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("total retained bytes (exact): "))
        .and_then(|n| n.trim().parse().ok())
        .expect("stdout has the exact retained total");
    assert!(total >= 16 << 20, "the leak is retained: {total}");
    // Up to three stacks by retained bytes: the leaked buffers usually come through two stacks
    // (a few MiB through a second one), and a run where all came through one has only two
    // stacks still retaining (seen once in CI); the leak is first either way.
    let by_retained = stdout.split("stacks by allocated:").next().unwrap_or_default();
    assert!(
        ["top 2 stacks by retained:", "top 3 stacks by retained:"]
            .iter()
            .any(|t| by_retained.contains(t)),
        "{stdout}"
    );
    let first = by_retained.split("  #2 ").next().unwrap_or_default();
    assert!(first.contains(LEAK_FN), "the leak is not the top retained stack:\n{stdout}");
    assert!(stdout.contains("top 3 stacks by allocated:"), "{stdout}");

    let sets = report_sets(&dir);
    let mut retained_sets = Vec::new();
    let mut allocated_sets = Vec::new();
    for (seq, set) in &sets {
        let txt = read(&set.txt, "text report");
        let manifest: Value = serde_json::from_str(&read(&set.json, "manifest"))
            .unwrap_or_else(|e| panic!("report {seq}: manifest: {e}"));
        let svg = read(&set.svg, "flamegraph");
        let folded = read(&set.folded, "folded stacks");
        assert!(
            svg.starts_with("<?xml"),
            "report {seq}: SVG prologue: {}",
            &svg[..svg.len().min(80)]
        );
        assert!(svg.trim_end().ends_with("</svg>"), "report {seq}: SVG is cut short");
        assert!(svg.contains(LEAK_FN), "report {seq}: flamegraph does not name {LEAK_FN}");
        match manifest["ranked_by"].as_str().expect("the manifest names its ranking") {
            "retained" => retained_sets.push((txt, folded, manifest)),
            "allocated" => allocated_sets.push((txt, folded, manifest)),
            other => panic!("report {seq}: unknown ranking {other}"),
        }
    }
    assert!(
        retained_sets.len() >= 2,
        "at least two runner reports expected, got {} in {}",
        retained_sets.len(),
        dir.display()
    );
    assert_eq!(allocated_sets.len(), 1, "one allocated-ranked report at the end");

    // The runner's last report: the leak is the top retained stack, named, without async glue.
    let (last_txt, last_folded, last_manifest) = retained_sets.last().expect("a retained report");
    let blocks = blocks_of(last_manifest);
    let top = blocks.first().expect("the last report lists stacks");
    assert!(top.names(LEAK_FN), "#1 retained stack does not name {LEAK_FN}:\n{last_txt}");
    assert!(top.retained >= 8 << 20, "the leak retains several MiB: {top:?}");
    for line in &top.lines {
        assert!(!line.contains("GenFuture"), "async glue in the leak's stack: {line}");
    }
    if cfg!(feature = "profile_spans") {
        // The leak is attributed to the leaking span, and the churn to the request spans.
        let span_of = |needle: &str| {
            blocks.iter().find(|b| b.lines.iter().any(|l| l.contains(needle)))?.span.clone()
        };
        assert_eq!(span_of(LEAK_FN).as_deref(), Some("ying_example::leak_loop"), "{last_txt}");
        assert!(
            last_folded.lines().any(|l| l.starts_with("[span ying_example::leak_loop]")),
            "{last_folded}"
        );
    }
    for (f, line) in top.functions().iter().zip(&top.lines) {
        let inlined = line.ends_with("[inlined]");
        let base = without_generics(f);
        let glue = base == "poll" || base.ends_with("::poll");
        assert!(!(inlined && glue), "inlined ::poll glue shown: {line}");
    }
    assert_reads_like_the_code(last_txt, &blocks);
    // Memory per task kind: the leaking task first, the cache workers (eight tasks moving
    // between the worker threads) one row, with their intervals.
    let by_task = section(last_txt, "BY TASK");
    let task_rows: Vec<&str> = by_task.lines().skip(2).collect();
    assert!(task_rows[0].ends_with(" ying_example::leak_loop"), "{by_task}");
    assert!(task_rows[0].contains(" ± "), "{by_task}");
    let workers: Vec<&&str> =
        task_rows.iter().filter(|l| l.ends_with(" ying_example::cache_worker")).collect();
    assert_eq!(workers.len(), 1, "{by_task}");
    // The manifest lists the same rows for programs (and `ying view`'s page).
    assert_eq!(last_manifest["tasks"][0]["name"], "ying_example::leak_loop", "{last_manifest}");
    if cfg!(feature = "profile_spans") {
        assert_eq!(last_manifest["spans"][0]["name"], "ying_example::leak_loop");
        let by_span = section(last_txt, "BY SPAN");
        let first = by_span.lines().nth(2).unwrap_or_default();
        assert!(first.ends_with(" ying_example::leak_loop"), "{by_span}");
    }
    // The leak's `vec!` is one entry, with the library function it called named.
    let leak_entries: Vec<&Block> = blocks
        .iter()
        .filter(|b| b.names(LEAK_FN) && b.functions().contains(&"alloc::vec::from_elem"))
        .collect();
    assert_eq!(leak_entries.len(), 1, "the leak's vec! in several entries:\n{last_txt}");
    let leak_folded = folded_sum(last_folded, &[LEAK_FN]);
    let max_line = last_folded
        .lines()
        .max_by_key(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0))
        .expect("folded stacks");
    assert!(max_line.contains(LEAK_FN), "heaviest folded stack is not the leak: {max_line}");
    assert!(leak_folded >= top.retained, "folded leak weight {leak_folded} < {}", top.retained);

    // The allocated-ranked report: the cache churns, allocating far more than it retains.
    let (alloc_txt, alloc_folded, alloc_manifest) = &allocated_sets[0];
    let alloc_blocks = blocks_of(alloc_manifest);
    let cache = alloc_blocks
        .iter()
        .take(3)
        .find(|b| CACHE_FNS.iter().any(|n| b.names(n)))
        .unwrap_or_else(|| panic!("no cache stack among the top allocated:\n{alloc_txt}"));
    assert!(
        cache.retained * 4 < cache.allocated,
        "cache stack retains {} of {} allocated bytes",
        cache.retained,
        cache.allocated
    );
    assert_reads_like_the_code(alloc_txt, &alloc_blocks);
    // The handler's inlined helper is named (inlined, under the handler that calls it); each
    // of its call sites is one entry (checked above for every entry).
    let audit: Vec<&Block> = alloc_blocks.iter().filter(|b| b.names(AUDIT_FN)).collect();
    assert!(!audit.is_empty(), "no entry names the inlined {AUDIT_FN}:\n{alloc_txt}");
    for b in &audit {
        let line = b.lines.iter().find(|l| l.contains(AUDIT_FN)).expect("the helper's line");
        assert!(line.ends_with("[inlined]"), "{AUDIT_FN} is inlined: {line}");
        assert!(b.names("handle_request"), "{AUDIT_FN} without its handler: {:#?}", b.lines);
    }
    assert!(alloc_folded.contains(AUDIT_FN), "folded stacks name {AUDIT_FN}");
    let cache_allocated = folded_sum(alloc_folded, &CACHE_FNS);
    let cache_retained = folded_sum(last_folded, &CACHE_FNS);
    assert!(
        cache_retained * 4 < cache_allocated,
        "folded: cache retained {cache_retained} vs allocated {cache_allocated}"
    );

    std::fs::remove_dir_all(&dir).expect("remove the reporting dir");
}
