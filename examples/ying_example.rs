//! A long-running toy service profiled by Ying at production settings.
//!
//! The service is a multi-threaded Tokio program instrumented with `tracing` (spans on every
//! request, a periodic INFO summary on stderr). It runs two workloads at once:
//!
//! * **a cache workload** — many concurrent `cache_worker` tasks call `handle_request`,
//!   which looks a key up in a bounded cache (about 2000 entries) and, on a miss, renders a
//!   random-ish 1–4 KiB `String` and inserts it, evicting the oldest entry; every request also
//!   leaves a line in a bounded audit log (`record_audit`, inlined into the handler, which
//!   reports name all the same). Its memory churns: tens of MiB a second are *allocated* while
//!   only about 5 MiB stay *retained*;
//! * **a simulated leak** — `leak_loop` pushes a 4 MiB `vec![0u8; _]` buffer into a `Vec` it
//!   never frees, three times per check interval, so retained memory grows steadily by 12 MiB
//!   per interval.
//!
//! Ying is the `#[global_allocator]` with its default 512 KiB mean sampling interval, and a
//! [`ProfilerRunner`](ying_profiler::utils::ProfilerRunner) checks retained memory every
//! interval with a 5 % trigger. Because the leak grows by more than 5 % per interval, every
//! check writes a report set (`.txt`, `.folded`, `.svg` flamegraph) ranked by retained bytes,
//! where the leak is the top stack, named `leak_loop`, from the first report on. At the end the
//! example prints the exact retained total and the top three stacks by retained and by
//! allocated bytes, read through the stats API, and writes one more report set ranked by
//! *allocated* bytes, where the cache's churn (`handle_request`, `cache_worker`) comes first
//! while retaining only a small share of what it allocated.
//!
//! Run it (about 12 minutes, one check a minute):
//!
//! ```text
//! cargo run --profile bench --example ying_example
//! ```
//!
//! or, for a quicker demo:
//!
//! ```text
//! YING_EXAMPLE_INTERVAL_SECS=10 YING_EXAMPLE_RUNTIME_SECS=45 cargo run --profile bench --example ying_example
//! ```
//!
//! Settings (environment variables):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `YING_EXAMPLE_INTERVAL_SECS` | 60 | seconds between the runner's checks |
//! | `YING_EXAMPLE_RUNTIME_SECS` | 720 | how long the service runs |
//! | `YING_EXAMPLE_REPORTING_PATH` | `ying-profiles` | where report sets are written |
//!
//! The `bench` profile is an optimized build with debug info, so reports name functions, files
//! and lines. With linear growth the leak stays above the 5 % trigger for about 19 checks; a much
//! longer run makes reports rarer, as intended.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ying_profiler::report::ReportOptions;
use ying_profiler::utils::{ProfilerRunnerBuilder, write_report_now};
use ying_profiler::{Measurement, StackStats, YingProfiler};

#[global_allocator]
static YING_ALLOC: YingProfiler = YingProfiler::default();

/// Entries the cache keeps before evicting the oldest.
const CACHE_CAPACITY: usize = 2000;
/// Lines the audit log keeps.
const AUDIT_CAPACITY: usize = 1000;
/// Distinct keys requested: four times the capacity, so most lookups miss and churn.
const KEY_SPACE: u64 = 4 * CACHE_CAPACITY as u64;
/// Concurrent cache workers.
const WORKERS: u64 = 8;
/// Requests a worker serves between two short sleeps.
const REQUESTS_PER_BATCH: u64 = 10;
/// Pause between two batches of one worker.
const BATCH_PAUSE: Duration = Duration::from_millis(5);
/// Size of each leaked buffer.
const LEAK_BYTES: usize = 4 << 20;
/// Leaked buffers per check interval.
const LEAKS_PER_INTERVAL: u32 = 3;

/// What the example reads from its environment.
#[derive(Debug, Clone)]
struct Settings {
    interval_secs: u64,
    runtime_secs: u64,
    reporting_path: String,
}

impl Settings {
    fn from_env() -> Self {
        fn secs(name: &str, default: u64) -> u64 {
            match std::env::var(name) {
                Ok(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        eprintln!("{name}={v:?} is not a positive number; using {default}");
                        default
                    }
                },
                Err(_) => default,
            }
        }
        Self {
            interval_secs: secs("YING_EXAMPLE_INTERVAL_SECS", 60),
            runtime_secs: secs("YING_EXAMPLE_RUNTIME_SECS", 720),
            reporting_path: std::env::var("YING_EXAMPLE_REPORTING_PATH")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "ying-profiles".to_string()),
        }
    }
}

/// A bounded cache with first-in-first-out eviction.
#[derive(Debug, Default)]
struct Cache {
    map: HashMap<u64, String>,
    order: VecDeque<u64>,
    hits: u64,
    misses: u64,
    evictions: u64,
    audit: VecDeque<String>,
}

impl Cache {
    fn get_len(&mut self, key: u64) -> Option<usize> {
        let found = self.map.get(&key).map(String::len);
        if found.is_some() {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        found
    }

    fn insert(&mut self, key: u64, value: String) {
        if self.map.insert(key, value).is_none() {
            self.order.push_back(key);
        }
        while self.map.len() > CACHE_CAPACITY {
            let Some(old) = self.order.pop_front() else { break };
            self.map.remove(&old);
            self.evictions += 1;
        }
    }
}

type SharedCache = Arc<Mutex<Cache>>;

/// xorshift64*: cheap, deterministic per worker, good enough for keys and contents.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A random-ish value of 1–4 KiB of lowercase letters (one allocation of exactly its length).
fn render_value(rng: &mut Rng) -> String {
    let len = 1024 + (rng.next() % (3 * 1024 + 1)) as usize;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        let mut x = rng.next();
        for _ in 0..12 {
            if bytes.len() == len {
                break;
            }
            bytes.push(b'a' + (x % 26) as u8);
            x >>= 5;
        }
    }
    String::from_utf8(bytes).unwrap_or_default()
}

/// Keeps one line about a request in the cache's bounded audit log. Inlined into the handler
/// (no frame of its own at run time): reports still name it, from the debug info.
#[inline(always)]
fn record_audit(cache: &SharedCache, key: u64, len: usize, hit: bool) {
    let line = format!("audit: key={key:016x} len={len:06} hit={hit:<5} {:>160}", "|");
    if let Ok(mut c) = cache.lock() {
        if c.audit.len() == AUDIT_CAPACITY {
            c.audit.pop_front();
        }
        c.audit.push_back(line);
    }
}

/// Serves one request: a lookup, and on a miss a freshly rendered value inserted into the cache.
#[tracing::instrument(level = "info", skip(cache, rng))]
async fn handle_request(cache: &SharedCache, rng: &mut Rng, key: u64) -> usize {
    if let Some(len) = cache.lock().map(|mut c| c.get_len(key)).unwrap_or(None) {
        record_audit(cache, key, len, true);
        return len;
    }
    let value = render_value(rng);
    let len = value.len();
    record_audit(cache, key, len, false);
    if let Ok(mut c) = cache.lock() {
        c.insert(key, value);
    }
    len
}

/// One of the concurrent clients of the cache: batches of requests with short pauses.
#[tracing::instrument(level = "info", skip(cache, stop))]
async fn cache_worker(id: u64, cache: SharedCache, stop: Arc<AtomicBool>) -> u64 {
    let mut rng = Rng::new(id + 1);
    let mut served = 0u64;
    let mut bytes = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..REQUESTS_PER_BATCH {
            let key = rng.next() % KEY_SPACE;
            bytes += handle_request(&cache, &mut rng, key).await as u64;
            served += 1;
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    tracing::info!(served, bytes, "cache worker stopped");
    served
}

/// The simulated leak: every `period` a `LEAK_BYTES` buffer is pushed into a `Vec` that is
/// never freed (it is handed back only so the compiler cannot drop it early).
#[tracing::instrument(level = "info", skip(stop, leaked))]
async fn leak_loop(
    period: Duration,
    stop: Arc<AtomicBool>,
    leaked: Arc<AtomicU64>,
) -> Vec<Vec<u8>> {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut ticker = tokio::time::interval(period);
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let buffer = vec![0u8; LEAK_BYTES];
        kept.push(std::hint::black_box(buffer));
        leaked.fetch_add(LEAK_BYTES as u64, Ordering::Relaxed);
    }
    kept
}

/// Logs what the service is doing once per check interval.
async fn stats_loop(
    period: Duration,
    cache: SharedCache,
    leaked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let mut ticker = tokio::time::interval(period);
    ticker.tick().await;
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let (entries, hits, misses, evictions) = match cache.lock() {
            Ok(c) => (c.map.len(), c.hits, c.misses, c.evictions),
            Err(_) => continue,
        };
        tracing::info!(
            entries,
            hits,
            misses,
            evictions,
            leaked_mib = leaked.load(Ordering::Relaxed) >> 20,
            retained_mib = YingProfiler::total_retained_bytes() >> 20,
            "service stats"
        );
    }
}

/// Function names of a stack as reports show them, innermost first.
fn frame_names(s: &StackStats) -> Vec<String> {
    s.display_frames(false).iter().map(|f| f.function.to_string()).collect()
}

fn print_top(title: &str, stacks: &[StackStats]) {
    println!("top {} stacks by {title}:", stacks.len());
    for (i, s) in stacks.iter().enumerate() {
        println!(
            "  #{} retained {} bytes, allocated {} bytes",
            i + 1,
            s.retained_bytes,
            s.allocated_bytes
        );
        for name in frame_names(s) {
            println!("       {name}");
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    {
        use tracing_subscriber::prelude::*;
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO);
        let registry = tracing_subscriber::registry().with(fmt);
        // With `--features profile_spans`, samples are attributed to the entered spans
        // (`leak_loop`, `cache_worker`, `handle_request`): see the `span:` lines in the reports.
        #[cfg(feature = "profile_spans")]
        let registry = registry.with(ying_profiler::spans::YingSpanLayer);
        registry.init();
    }

    let settings = Settings::from_env();
    let interval = Duration::from_secs(settings.interval_secs);
    let runner = ProfilerRunnerBuilder::default()
        .check_interval_secs(settings.interval_secs as usize)
        .report_pct_change_trigger(5usize)
        .reporting_path(settings.reporting_path.clone())
        .gen_flamegraphs(true)
        // This service writes its own final report set (`write_report_now` below) before it
        // frees everything: a report at exit would be a second set, with what it held only in
        // its peak section.
        .report_at_exit(false)
        // `YING_SYMBOLIZE=offline` as the shim reads it: no debug info read in the process.
        .symbolize_offline(std::env::var("YING_SYMBOLIZE").is_ok_and(|v| v == "offline"))
        // The live file on, unless `YING_LIVE_FILE=off` (the benchmarks measure both).
        .live_file(if std::env::var("YING_LIVE_FILE").is_ok_and(|v| v == "off") {
            ying_profiler::utils::LiveFile::Off
        } else {
            ying_profiler::utils::LiveFile::ReportingDir
        })
        .build()?;
    let handle = runner.spawn(&YING_ALLOC);
    tracing::info!(
        interval_secs = settings.interval_secs,
        runtime_secs = settings.runtime_secs,
        reporting_path = %settings.reporting_path,
        sample_interval = YING_ALLOC.sample_interval(),
        "ying example service started"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let leaked = Arc::new(AtomicU64::new(0));
    let cache: SharedCache = Arc::new(Mutex::new(Cache::default()));

    let workers: Vec<_> = (0..WORKERS)
        .map(|id| tokio::spawn(cache_worker(id, Arc::clone(&cache), Arc::clone(&stop))))
        .collect();
    let leak = tokio::spawn(leak_loop(
        interval / LEAKS_PER_INTERVAL,
        Arc::clone(&stop),
        Arc::clone(&leaked),
    ));
    let stats = tokio::spawn(stats_loop(
        interval,
        Arc::clone(&cache),
        Arc::clone(&leaked),
        Arc::clone(&stop),
    ));

    tokio::time::sleep(Duration::from_secs(settings.runtime_secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut served = 0;
    for w in workers {
        served += w.await?;
    }
    let kept = leak.await?;
    stats.abort();
    handle.stop();
    tracing::info!(served, leaked_buffers = kept.len(), "service stopped");

    println!("total retained bytes (exact): {}", YingProfiler::total_retained_bytes());
    print_top("retained", &YING_ALLOC.top_k_stacks_by_retained(3));
    print_top("allocated", &YING_ALLOC.top_k_stacks_by_allocated(3));

    let options =
        ReportOptions { measurement: Measurement::AllocatedBytes, ..ReportOptions::default() };
    let paths = write_report_now(&YING_ALLOC, &options, Path::new(&settings.reporting_path))?;
    if let Some(text) = paths.text {
        println!("allocated-ranked report: {}", text.display());
    }
    drop(kept);
    Ok(())
}
