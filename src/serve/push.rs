//! Pushes to a Grafana Pyroscope server (`YING_PUSH_URL`, `YING_PUSH_INTERVAL_SECS`,
//! `YING_PUSH_LABELS`, or [`crate::utils::ProfilerRunnerBuilder::push_url`]).
//!
//! Every interval a profiler thread sends the heap profile with Pyroscope's ingest API, the
//! form every Pyroscope version (and Grafana Alloy's `pyroscope.receive_http`) accepts:
//!
//! ```text
//! POST <url>/ingest?name=<app>{k=v,...}&from=<unix s>&until=<unix s>&format=pprof&spyName=ying
//! Content-Type: multipart/form-data; boundary=...
//!   part "profile" (profile.pprof): the gzipped pprof heap profile
//!   part "sample_type_config" (sample_type_config.json): how to aggregate each sample type
//! ```
//!
//! The profile has Go's four heap sample types: `alloc_objects` and `alloc_space` are what was
//! allocated since the last push (`from` to `until`; since the pusher started for the first),
//! `inuse_objects` and `inuse_space` what is retained now, as Pyroscope's Go delta profiler
//! sends them (so the `sample_type_config` marks none as cumulative). With `profile_spans` on,
//! each sample carries its `span` and `span_path` labels, and a Tokio program's its `task`.
//! `<app>` is the `service_name` label of `YING_PUSH_LABELS`, or the executable's name; the
//! other labels go in braces. `YING_PUSH_HEADERS` go in every request (a token for a hosted
//! Pyroscope, a tenant).
//!
//! A push that fails is retried or dropped as [`super::client`] says (the next push carries
//! the allocations since the failed one's moment: a dropped delta is never sent again); the
//! pushing thread never holds a lock the program's threads wait for.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Runner;
use super::client::{self, Body, Failure, Target};
use crate::profiles::{self, AllocBaseline, HeapView};
use crate::source::ProfileSource;

/// Pyroscope's aggregation of each sample type: none is cumulative (the alloc figures are
/// already deltas), the in-use figures are averaged when profiles are merged over time.
pub const SAMPLE_TYPE_CONFIG: &str = concat!(
    "{\"alloc_objects\":{\"units\":\"objects\"},\"alloc_space\":{\"units\":\"bytes\"},",
    "\"inuse_objects\":{\"units\":\"objects\",\"aggregation\":\"average\"},",
    "\"inuse_space\":{\"units\":\"bytes\",\"aggregation\":\"average\"}}"
);

/// `s` with every byte but unreserved ones percent-encoded (a query value).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Pyroscope's `name`: the application, then the other labels in braces.
pub fn app_name(labels: &[(String, String)], exe_name: &str) -> String {
    let app = labels
        .iter()
        .find(|(k, _)| k == "service_name")
        .map(|(_, v)| v.as_str())
        .unwrap_or(exe_name);
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k != "service_name")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{app}{{{}}}", rest.join(","))
}

/// The multipart body of one push and its boundary.
fn multipart(profile: &[u8]) -> (Vec<u8>, String) {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut boundary = format!("ying-{nanos:032x}");
    while profile.windows(boundary.len()).any(|w| w == boundary.as_bytes()) {
        boundary.push('x');
    }
    let mut body = Vec::with_capacity(profile.len() + 1024);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(profile);
    body.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"sample_type_config\"; filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n{SAMPLE_TYPE_CONFIG}\r\n--{boundary}--\r\n"
        )
        .as_bytes(),
    );
    (body, boundary)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Where and as what pushes go.
struct Ingest {
    target: Target,
    /// Pyroscope's `name` (see [`app_name`]).
    name: String,
    /// `YING_PUSH_HEADERS`.
    headers: Vec<(String, String)>,
}

impl Ingest {
    /// Sends the profile of `from` to `until` (Unix seconds); Ok when the server answered 2xx.
    fn send(&self, from: u64, until: u64, profile: &[u8]) -> Result<(), Failure> {
        let (body, boundary) = multipart(profile);
        let path = format!(
            "{}/ingest?name={}&from={from}&until={until}&format=pprof&spyName=ying",
            self.target.prefix,
            encode(&self.name)
        );
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let body = Body {
            content_type: &content_type,
            encoding: None,
            headers: &self.headers,
            bytes: &body,
        };
        client::post(&self.target, &path, body).map(drop)
    }
}

/// Starts the pushing thread (as profiler code); a bad URL or header is one warning and no
/// pushes.
pub(crate) fn start(
    url: &str,
    services: &super::Services,
    source: &'static dyn ProfileSource,
    runner: Arc<dyn Runner>,
) {
    let target = match Target::parse(url) {
        Ok(t) => t,
        Err(e) => return crate::sys::warn(&format!("pushes to {url} not started: {e}")),
    };
    if let Err(e) = client::headers_ok(&services.push_headers) {
        return crate::sys::warn(&format!("pushes to {url} not started: {e}"));
    }
    let exe = crate::report::ReportContext::current().exe_name();
    let ingest = Ingest {
        target,
        name: app_name(&services.push_labels, &exe),
        headers: services.push_headers.clone(),
    };
    let interval = Duration::from_secs(services.push_interval_secs.max(1));
    let shown = url.to_string();
    let body = Box::new(move || {
        source.enter_profiler_thread();
        run(&ingest, &shown, interval, source, &*runner);
    });
    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-push", body) {
        crate::sys::warn(&format!("pushes to {url} not started: no thread ({e})"));
    }
}

/// Pushes every `interval`, for the rest of the process (until `client::stop`).
fn run(
    ingest: &Ingest,
    url: &str,
    interval: Duration,
    source: &dyn ProfileSource,
    runner: &dyn Runner,
) {
    let mut since = AllocBaseline::empty(SystemTime::now());
    let build = || {
        let from = unix_secs(since.taken_at());
        let (gz, now) = profiles::delta_pprof_gz(source, &since, HeapView::Alloc)?;
        // The next push starts here, whether this one is taken or dropped.
        since = now;
        Ok(Some((from, unix_secs(since.taken_at()).max(from), gz)))
    };
    let send = |(from, until, gz): &(u64, u64, Vec<u8>)| ingest.send(*from, *until, gz);
    client::run(&format!("push to {url}"), interval, &|| runner.exiting(), build, send);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let labels = vec![
            ("service_name".to_string(), "checkout".to_string()),
            ("env".to_string(), "prod".to_string()),
        ];
        assert_eq!(app_name(&labels, "a.out"), "checkout{env=prod}");
        assert_eq!(app_name(&[], "a.out"), "a.out{}");
        assert_eq!(encode("a{b=c,d}"), "a%7Bb%3Dc%2Cd%7D");
    }

    #[test]
    fn multipart_has_both_parts() {
        let (body, boundary) = multipart(b"\x1f\x8bPROFILE");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"profile\""));
        assert!(text.contains("name=\"sample_type_config\""));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
