//! Services of a running program: the built-in HTTP endpoint (`YING_HTTP_ADDR`,
//! [`ProfilerRunnerBuilder::http_addr`](crate::utils::ProfilerRunnerBuilder::http_addr)), pushes to a Pyroscope-compatible server
//! (`YING_PUSH_URL`, [`ProfilerRunnerBuilder::push_url`](crate::utils::ProfilerRunnerBuilder::push_url)) and pushes of OpenTelemetry
//! profiles (`YING_OTLP_URL`, [`ProfilerRunnerBuilder::otlp_url`](crate::utils::ProfilerRunnerBuilder::otlp_url)).
//!
//! Both are opt-in, and both start with the runner's report thread
//! ([`ProfilerRunner::spawn_thread_for`](crate::utils::ProfilerRunner::spawn_thread_for); under the preload shim at the program's first safe
//! point, never at load), once per process (a `fork` child serves and pushes nothing: its
//! parent's port is taken and its parent's pushes go on). Each runs on its own profiler
//! thread: everything it allocates is the profiler's own memory, never sampled, never seen by
//! the host's allocation hooks as the program's. They build their answers with
//! [`crate::profiles`] (one build at a time in the process, like report sets) and write to a
//! socket only after the build, holding no profiler lock.
//!
//! # The endpoint
//!
//! One small HTTP/1.1 server thread, one request per connection, every connection whose request
//! is arriving waited on at once (`http.rs`), answering only the process's own user and root,
//! and token bearers for reading (`access.rs`):
//!
//! | route | answer |
//! |---|---|
//! | `GET /debug/pprof/heap` | gzipped pprof, Go's four heap sample types, opening on `inuse_space` |
//! | `GET /debug/pprof/allocs` | the same, opening on `alloc_space` |
//! | `?seconds=N` on both | a delta profile over the next N seconds (1 to [`MAX_DELTA_SECS`]), as Go's |
//! | `?debug=1` on both | the text report (ranked by retained, or by allocated bytes for `allocs`) |
//! | `?gc=1` | ignored (there is no collector to run) |
//! | `GET /debug/pprof/heap/peak` | gzipped pprof of the kept peak (`inuse_*`) |
//! | `GET /debug/ying/flamegraph.svg` | the flamegraph of now |
//! | `GET /debug/ying/report.txt` | the text report of now |
//! | `POST /debug/ying/dump` | writes a report set; JSON of its paths |
//! | `GET /debug/ying/status` | JSON: totals, peak, samples, profiler memory, settings |
//!
//! A request is at most 16 KiB of head (32 headers) and must arrive within 5 s; an answer is
//! abandoned after 30 s. Malformed
//! requests get 400, 404, 405 or 431 with a one-line body saying why; a refused peer 401 or
//! 403. The address is loopback unless an explicit other address is given with a token, which
//! is said on stderr; a port already in use is one `ying: warning:` line and no endpoint.
//!
//! # Pushes
//!
//! See [`push`] (Pyroscope's ingest API) and [`otlp`] (OTLP over HTTP); what they share,
//! retries included, is [`client`].

mod access;
pub mod client;
pub(crate) mod http;
pub mod otlp;
pub mod push;
mod routes;
mod socket;

use std::sync::atomic::{AtomicBool, Ordering};

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::report::{ReportOptions, ReportPaths};
use crate::source::{ProfileSource, guarded};

/// The longest `?seconds=N` of a delta profile.
pub const MAX_DELTA_SECS: u64 = 300;

pub use crate::config::DEFAULT_PUSH_INTERVAL_SECS;

/// The services a runner starts: part of its settings (set by `ProfilerRunnerBuilder`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Services {
    pub(crate) http_addr: Option<crate::config::HttpAddr>,
    pub(crate) http_token: Option<crate::config::HttpToken>,
    pub(crate) push_url: Option<String>,
    pub(crate) push_interval_secs: u64,
    pub(crate) push_labels: Vec<(String, String)>,
    pub(crate) otlp_url: Option<String>,
    pub(crate) push_headers: Vec<(String, String)>,
}

impl Default for Services {
    fn default() -> Self {
        Self {
            http_addr: None,
            http_token: None,
            push_url: None,
            push_interval_secs: DEFAULT_PUSH_INTERVAL_SECS,
            push_labels: Vec::new(),
            otlp_url: None,
            push_headers: Vec::new(),
        }
    }
}

impl Services {
    /// Whether any service is asked for.
    pub(crate) fn any(&self) -> bool {
        self.http_addr.is_some() || self.push_url.is_some() || self.otlp_url.is_some()
    }
}

/// What the services need of the runner that starts them (the runner implements it: `serve/`
/// does not import the runner, the runner imports `serve/`).
pub(crate) trait Runner: Send + Sync + 'static {
    /// The report options of the runner's settings.
    fn report_options(&self) -> ReportOptions;
    /// The reporting directory, absolute.
    fn reporting_path(&self) -> PathBuf;
    /// Seconds between the runner's checks.
    fn check_interval_secs(&self) -> usize;
    /// Percent change that triggers a report.
    fn report_pct_change_trigger(&self) -> usize;
    /// Writes a report set now (`RunnerHandle::dump_now`).
    fn dump_now(&self) -> io::Result<ReportPaths>;
    /// Whether the process is exiting.
    fn exiting(&self) -> bool;
}

/// Starts the services `services` asks for, once per process (the runner's start calls it).
pub(crate) fn start(
    services: &Services,
    runner: Arc<dyn Runner>,
    source: &'static dyn ProfileSource,
) {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if !services.any() || STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let go = || {
        if let Some(addr) = services.http_addr.clone() {
            http::start(addr, services.clone(), Arc::clone(&runner), source, routes::route);
        }
        if let Some(url) = &services.push_url {
            push::start(url, services, source, Arc::clone(&runner));
        }
        if let Some(url) = &services.otlp_url {
            otlp::start(url, services, source, Arc::clone(&runner));
        }
    };
    let _ = guarded(source, go, |_| ());
}

/// Ends the endpoint's and the pusher's threads (each at its next wake, which this causes).
pub(crate) fn stop() {
    http::stop();
    client::stop();
}

/// `s` as a JSON string literal.
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
    }
}
