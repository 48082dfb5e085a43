//! The service workload: an axum HTTP/1.1 service on a 2-worker Tokio runtime, and its load
//! generator. The service answers `GET /item/{id}` from a sharded cache of items (built on a
//! miss: a name, a few tags, a payload of 200..2,000 bytes; the cache keeps at most 32,768
//! items and evicts on insert), formatting each answer into a fresh string, the allocation
//! pattern of a typical JSON service. `GET /stats` answers the process's CPU microseconds so
//! far, its peak RSS in kB and the requests served (the load generator reads it before and
//! after its load, so that start-up and exit are not counted); `GET /shutdown` stops it.
//!
//! The load generator (`System` allocator, a process of its own) opens `CONNECTIONS` keep-alive
//! connections over loopback and runs for `SECONDS`: closed loop (each connection sends its
//! next request when the answer arrives) or at a fixed total `RATE` of requests per second. It
//! prints one line: `requests N seconds S rps R cpu_us_per_req C peak_rss_kb K errors E`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use tokio::sync::Notify;

const SHARDS: usize = 16;
const PER_SHARD: usize = 2048;
/// Item ids are drawn from 0..KEYS (skewed to the small ones), about twice what the cache
/// holds: hits and misses, builds and evictions all the time.
const KEYS: u64 = 65_536;

/// One cached item.
struct Item {
    name: String,
    tags: Vec<String>,
    payload: Vec<u8>,
}

struct App {
    shards: Vec<Mutex<HashMap<u64, Arc<Item>>>>,
    served: AtomicU64,
    stop: Notify,
}

fn build_item(id: u64) -> Item {
    let tags = (0..3 + id % 6).map(|t| format!("tag-{}-{}", t, id % 97)).collect();
    let len = 200 + (id.wrapping_mul(2_654_435_761) % 1800) as usize;
    let payload = (0..len).map(|i| (i as u64 ^ id) as u8).collect();
    Item { name: format!("item-{id:08}"), tags, payload }
}

fn lookup(app: &App, id: u64) -> Arc<Item> {
    let shard = &app.shards[(id as usize) % SHARDS];
    if let Some(item) = shard.lock().unwrap().get(&id) {
        return Arc::clone(item);
    }
    let item = Arc::new(build_item(id));
    let mut map = shard.lock().unwrap();
    if map.len() >= PER_SHARD {
        let victim = *map.keys().next().unwrap();
        map.remove(&victim);
    }
    map.insert(id, Arc::clone(&item));
    item
}

async fn item(State(app): State<Arc<App>>, Path(id): Path<u64>) -> String {
    app.served.fetch_add(1, Ordering::Relaxed);
    let item = lookup(&app, id);
    let sum: u64 = item.payload.iter().map(|&b| b as u64).sum();
    let mut out = String::with_capacity(64);
    write!(out, "{{\"id\":{id},\"name\":\"{}\",\"tags\":[", item.name).unwrap();
    for (i, t) in item.tags.iter().enumerate() {
        write!(out, "{}\"{t}\"", if i > 0 { "," } else { "" }).unwrap();
    }
    write!(out, "],\"len\":{},\"sum\":{sum}}}", item.payload.len()).unwrap();
    out
}

fn rusage() -> (u64, u64) {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime) + us(ru.ru_stime), ru.ru_maxrss as u64)
}

async fn stats(State(app): State<Arc<App>>) -> String {
    let (cpu_us, rss_kb) = rusage();
    format!("{cpu_us} {rss_kb} {}", app.served.load(Ordering::Relaxed))
}

async fn shutdown(State(app): State<Arc<App>>) -> &'static str {
    app.stop.notify_one();
    "bye"
}

/// Runs the service until `GET /shutdown`: `svc-* PORT_FILE` writes its port to `PORT_FILE`.
pub fn serve_main(name: &str) {
    let port_file = std::env::args().nth(1).expect("usage: svc-* PORT_FILE");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let served = rt.unwrap().block_on(async move {
        let app = Arc::new(App {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            served: AtomicU64::new(0),
            stop: Notify::new(),
        });
        let router = Router::new()
            .route("/item/{id}", get(item))
            .route("/stats", get(stats))
            .route("/shutdown", get(shutdown))
            .with_state(Arc::clone(&app));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let tmp = format!("{port_file}.tmp");
        std::fs::write(&tmp, port.to_string()).unwrap();
        std::fs::rename(&tmp, &port_file).unwrap();
        let stop = Arc::clone(&app);
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.stop.notified().await })
            .await
            .unwrap();
        app.served.load(Ordering::Relaxed)
    });
    println!("{name}: served {served} requests");
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(port: u16) -> Sender {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn get_body(sender: &mut Sender, path: &str) -> Option<Bytes> {
    let req = hyper::Request::get(path).header("host", "127.0.0.1").body(Empty::new()).ok()?;
    sender.ready().await.ok()?;
    let resp = sender.send_request(req).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(resp.into_body().collect().await.ok()?.to_bytes())
}

async fn server_stats(sender: &mut Sender) -> (u64, u64, u64) {
    let body = get_body(sender, "/stats").await.expect("GET /stats");
    let text = String::from_utf8_lossy(&body).to_string();
    let v: Vec<u64> = text.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// A connection's requests until `end`: back to back, or one per `period`.
async fn drive(port: u16, seed: u64, end: Instant, period: Option<Duration>) -> (u64, u64) {
    let mut sender = connect(port).await;
    let mut x = seed | 1;
    let (mut ok, mut errors) = (0, 0);
    let mut tick = period.map(|p| {
        let mut t = tokio::time::interval(p);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    while Instant::now() < end {
        if let Some(t) = tick.as_mut() {
            t.tick().await;
        }
        // xorshift64; the square skews ids towards the small ones (the hot items).
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let r = (x >> 11) as f64 / (1u64 << 53) as f64;
        let id = (r * r * KEYS as f64) as u64;
        match get_body(&mut sender, &format!("/item/{id}")).await {
            Some(_) => ok += 1,
            None => {
                errors += 1;
                sender = connect(port).await;
            }
        }
    }
    (ok, errors)
}

/// `svc-load PORT closed|rate SECONDS CONNECTIONS [RATE] [shutdown]`.
pub fn load_main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: svc-load PORT closed|rate SECONDS CONNECTIONS [RATE] [--shutdown]";
    let port: u16 = args.get(1).and_then(|a| a.parse().ok()).expect(usage);
    let mode = args.get(2).expect(usage).clone();
    let secs: f64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
    let conns: u64 = args.get(4).and_then(|a| a.parse().ok()).expect(usage);
    let rate: f64 =
        if mode == "rate" { args.get(5).and_then(|a| a.parse().ok()).expect(usage) } else { 0.0 };
    let shutdown = args.iter().any(|a| a == "--shutdown");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let mut control = connect(port).await;
        let (cpu0, _, served0) = server_stats(&mut control).await;
        let start = Instant::now();
        let end = start + Duration::from_secs_f64(secs);
        let period = (rate > 0.0).then(|| Duration::from_secs_f64(conns as f64 / rate));
        let tasks: Vec<_> = (0..conns)
            .map(|c| tokio::spawn(drive(port, 0x9E37_79B9_7F4A_7C15 ^ (c + 1) * 0x1234_5678_9ABC, end, period)))
            .collect();
        let (mut ok, mut errors) = (0, 0);
        for t in tasks {
            let (o, e) = t.await.unwrap();
            ok += o;
            errors += e;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let (cpu1, rss_kb, served1) = server_stats(&mut control).await;
        let served = served1 - served0;
        println!(
            "requests {ok} seconds {elapsed:.3} rps {:.1} cpu_us_per_req {:.2} peak_rss_kb {rss_kb} errors {errors} served {served}",
            ok as f64 / elapsed,
            (cpu1 - cpu0) as f64 / served.max(1) as f64,
        );
        if shutdown {
            let _ = get_body(&mut control, "/shutdown").await;
        }
    });
}
