//! Services of a running program: the built-in HTTP endpoint (`YING_HTTP_ADDR`,
//! [`ProfilerRunnerBuilder::http_addr`]) and pushes to a Pyroscope-compatible server
//! (`YING_PUSH_URL`, [`ProfilerRunnerBuilder::push_url`]).
//!
//! Both are opt-in, and both start with the runner's report thread
//! ([`ProfilerRunner::spawn_thread_for`]; under the preload shim at the program's first safe
//! point, never at load), once per process (a `fork` child serves and pushes nothing: its
//! parent's port is taken and its parent's pushes go on). Each runs on its own profiler
//! thread: everything it allocates is the profiler's own memory, never sampled, never seen by
//! the host's allocation hooks as the program's. They build their answers with
//! [`crate::profiles`] (one build at a time in the process, like report sets) and write to a
//! socket only after the build, holding no profiler lock.
//!
//! # The endpoint
//!
//! One small HTTP/1.1 server thread, one connection at a time, one request per connection:
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
//! requests get 400, 404, 405 or 431 with a one-line body saying why. The address is loopback
//! unless an explicit other address is given, which is said on stderr; a port already in use
//! is one `ying: warning:` line and no endpoint.
//!
//! # Pushes
//!
//! See [`push`].

pub(crate) mod http;
pub mod push;
mod routes;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::runner::{ProfileSource, ProfilerRunner, ProfilerRunnerBuilder, RunnerHandle};

/// The longest `?seconds=N` of a delta profile.
pub const MAX_DELTA_SECS: u64 = 300;

/// Default seconds between pushes.
pub const DEFAULT_PUSH_INTERVAL_SECS: u64 = 15;

/// The services a runner starts: part of its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Services {
    pub(crate) http_addr: Option<SocketAddr>,
    pub(crate) push_url: Option<String>,
    pub(crate) push_interval_secs: u64,
    pub(crate) push_labels: Vec<(String, String)>,
}

impl Default for Services {
    fn default() -> Self {
        Self {
            http_addr: None,
            push_url: None,
            push_interval_secs: DEFAULT_PUSH_INTERVAL_SECS,
            push_labels: Vec::new(),
        }
    }
}

impl Services {
    pub(crate) fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            http_addr: cfg.http_addr,
            push_url: cfg.push_url.clone(),
            push_interval_secs: cfg.push_interval_secs.max(1),
            push_labels: cfg.push_labels.clone(),
        }
    }

    /// Whether any service is asked for.
    pub(crate) fn any(&self) -> bool {
        self.http_addr.is_some() || self.push_url.is_some()
    }
}

impl ProfilerRunnerBuilder {
    /// Serve `/debug/pprof/heap`, `/debug/pprof/allocs` and Ying's own routes (see
    /// [`crate::serve`]) at `addr` from the runner's start, e.g. `127.0.0.1:6060`
    /// (`YING_HTTP_ADDR` for [`ProfilerRunner::from_env`]). An address other than loopback is
    /// said on stderr.
    pub fn http_addr(&mut self, addr: SocketAddr) -> &mut Self {
        self.runner_mut().services.http_addr = Some(addr);
        self
    }

    /// Push the heap profile every [`push_interval_secs`](Self::push_interval_secs) to the
    /// Pyroscope-compatible server at `url` (`http://host:port`, see [`push`];
    /// `YING_PUSH_URL`).
    pub fn push_url(&mut self, url: impl Into<String>) -> &mut Self {
        self.runner_mut().services.push_url = Some(url.into());
        self
    }

    /// Seconds between pushes (at least 1; default [`DEFAULT_PUSH_INTERVAL_SECS`]).
    pub fn push_interval_secs(&mut self, secs: u64) -> &mut Self {
        self.runner_mut().services.push_interval_secs = secs.max(1);
        self
    }

    /// Labels of pushed profiles; `service_name` names the application.
    pub fn push_labels<K: Into<String>, V: Into<String>>(
        &mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        self.runner_mut().services.push_labels =
            labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        self
    }
}

impl ProfilerRunner {
    /// The endpoint's address, if it serves one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.services.http_addr
    }

    /// The push target, if profiles are pushed.
    pub fn push_url(&self) -> Option<&str> {
        self.services.push_url.as_deref()
    }
}

/// Starts the services `runner` asks for, once per process (the runner's start calls it).
pub(crate) fn start(
    runner: &ProfilerRunner,
    source: &'static dyn ProfileSource,
    handle: &RunnerHandle,
) {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if !runner.services.any() || STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let mut go = || {
        if let Some(addr) = runner.services.http_addr {
            http::start(addr, runner.clone(), source, handle.clone());
        }
        if let Some(url) = &runner.services.push_url {
            push::start(url, &runner.services, source);
        }
    };
    source.run_guarded(&mut go);
}

/// Ends the endpoint's and the pusher's threads (each at its next wake, which this causes).
pub(crate) fn stop() {
    http::stop();
    push::stop();
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
