//! Pushes of OpenTelemetry profiles (`YING_OTLP_URL`, `YING_PUSH_HEADERS`,
//! `YING_PUSH_INTERVAL_SECS`, `YING_PUSH_LABELS`, or
//! [`crate::utils::ProfilerRunnerBuilder::otlp_url`]) to any OTLP profiles receiver: an
//! OpenTelemetry Collector (its `otlp` receiver's HTTP port, 4318), Grafana Pyroscope, or
//! another backend that takes OTLP/HTTP; or over OTLP/gRPC (`grpc://host:4317`) with the
//! `otlp-grpc` feature, the same request to the profiles service's `Export`.
//!
//! Every interval a profiler thread sends one OTLP/HTTP export request:
//!
//! ```text
//! POST <url>                        (http://host:4318 becomes http://host:4318/v1development/profiles)
//! Content-Type: application/x-protobuf
//! Content-Encoding: gzip
//! <YING_PUSH_HEADERS>               (authorization, tenant...)
//!   ExportProfilesServiceRequest: one resource (the process), four profiles, one dictionary
//! ```
//!
//! The four profiles are Go's heap sample types: `alloc_objects` and `alloc_space` what was
//! allocated since the last push (the profiles' time range, from the last push to this one),
//! `inuse_objects` and `inuse_space` what is retained at this push, as the Pyroscope pushes
//! send them. The resource's attributes are `service.name` (the `service_name` label of
//! `YING_PUSH_LABELS`, or the executable's name), `process.pid`, `process.executable.name`,
//! `process.executable.path`, `host.name`, and the other labels as they are; spans and Tokio
//! task kinds are sample attributes. The request's form is described in the README's "OTLP"
//! section.
//!
//! A receiver's answer of partial success (some profiles rejected) is said like a failure and
//! not sent again; failures are retried or dropped as [`super::client`] says.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prost::Message;

use super::Runner;
use super::client::{self, Body, Failure, Target};
use crate::profiles::{self, AllocBaseline};
use crate::report::ReportContext;
use crate::source::ProfileSource;

#[cfg(feature = "otlp-grpc")]
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;

/// The resource attributes of this process's pushes: `service.name` first.
pub fn resource(labels: &[(String, String)], process: &ReportContext) -> Vec<(String, String)> {
    let exe_name = process.exe.rsplit('/').next().unwrap_or(&process.exe).to_string();
    let service = labels
        .iter()
        .find(|(k, _)| k == "service_name")
        .map_or_else(|| exe_name.clone(), |(_, v)| v.clone());
    let mut out = vec![
        ("service.name".to_string(), service),
        ("process.pid".to_string(), process.pid.to_string()),
        ("process.executable.name".to_string(), exe_name),
        ("process.executable.path".to_string(), process.exe.clone()),
    ];
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        out.push(("host.name".to_string(), host.trim().to_string()));
    }
    for (k, v) in labels.iter().filter(|(k, _)| k != "service_name") {
        match out.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// Ok when a receiver's answer took every profile, else the rejection as a failure (not
/// retried: the receiver has said no).
fn taken(answer: ExportProfilesServiceResponse) -> Result<(), Failure> {
    match answer.partial_success {
        Some(p) if p.rejected_profiles > 0 || !p.error_message.is_empty() => Err(Failure {
            what: format!(
                "the receiver rejected {} profile(s): {}",
                p.rejected_profiles,
                p.error_message.chars().take(200).collect::<String>()
            ),
            retry: None,
        }),
        _ => Ok(()),
    }
}

/// Sends one gzipped request body over OTLP/HTTP; Ok when the receiver took all of it.
fn send_http(target: &Target, headers: &[(String, String)], gz: &[u8]) -> Result<(), Failure> {
    let body =
        Body { content_type: "application/x-protobuf", encoding: Some("gzip"), headers, bytes: gz };
    let said = client::post(target, &target.prefix, body)?;
    // An answer that is no response message (an empty body) takes everything.
    taken(ExportProfilesServiceResponse::decode(&said[..]).unwrap_or_default())
}

/// OTLP/gRPC (`grpc://host:port`, the `otlp-grpc` feature): the profiles service's `Export`, over HTTP/2 without TLS,
/// one connection a push, on a single-threaded Tokio runtime the pushing thread owns (built on
/// that thread: its descriptors are in the thread's own table). The host is resolved on the
/// pushing thread before each connection, so the runtime never starts a thread to resolve it.
#[cfg(feature = "otlp-grpc")]
struct Grpc {
    /// `host:port`.
    authority: String,
    headers: tonic::metadata::MetadataMap,
    runtime: tokio::runtime::Runtime,
}

/// The gRPC status codes OTLP's specification calls retryable.
#[cfg(feature = "otlp-grpc")]
fn retryable(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Cancelled
            | DeadlineExceeded
            | ResourceExhausted
            | Aborted
            | OutOfRange
            | Unavailable
            | DataLoss
    )
}

#[cfg(feature = "otlp-grpc")]
impl Grpc {
    fn new(url: &str, headers: &[(String, String)]) -> Result<Self, String> {
        let authority =
            url.strip_prefix("grpc://").unwrap_or(url).trim_end_matches('/').to_string();
        let mut map = tonic::metadata::MetadataMap::new();
        for (k, v) in headers {
            let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|_| {
                format!("header name \"{}\" is no gRPC metadata key", k.escape_debug())
            })?;
            let value = v.parse().map_err(|_| format!("header {k} is no gRPC metadata value"))?;
            map.insert(key, value);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("no runtime for gRPC ({e})"))?;
        Ok(Self { authority, headers: map, runtime })
    }

    fn send(&self, request: &ExportProfilesServiceRequest) -> Result<(), Failure> {
        use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_client::ProfilesServiceClient;
        use std::net::ToSocketAddrs;
        let again = |what: String| Failure { what, retry: Some(Duration::ZERO) };
        let addr = self
            .authority
            .to_socket_addrs()
            .map_err(|e| again(e.to_string()))?
            .next()
            .ok_or_else(|| again(format!("no address for {}", self.authority)))?;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Failure { what: e.to_string(), retry: None })?
            .connect_timeout(client::CONNECT_TIMEOUT)
            .timeout(client::IO_TIMEOUT);
        self.runtime.block_on(async {
            let channel =
                endpoint.connect().await.map_err(|e| again(format!("no connection ({e})")))?;
            let mut grpc = ProfilesServiceClient::new(channel);
            let mut call = tonic::Request::new(request.clone());
            *call.metadata_mut() = self.headers.clone();
            match grpc.export(call).await {
                Ok(answer) => taken(answer.into_inner()),
                Err(status) => Err(Failure {
                    what: format!("gRPC {:?}: {}", status.code(), status.message())
                        .chars()
                        .take(240)
                        .collect(),
                    retry: retryable(status.code()).then_some(Duration::ZERO),
                }),
            }
        })
    }
}

/// One push as built: the gzipped body of an OTLP/HTTP request, or the message gRPC sends.
enum Payload {
    Gz(Vec<u8>),
    #[cfg(feature = "otlp-grpc")]
    Request(Box<ExportProfilesServiceRequest>),
}

/// Where a pushing thread sends.
enum Transport {
    Http(Target),
    /// Made on the pushing thread ([`Grpc`]).
    Grpc(String),
}

/// Starts the pushing thread (as profiler code); a bad URL or header is one warning and no
/// pushes.
pub(crate) fn start(
    url: &str,
    services: &super::Services,
    source: &'static dyn ProfileSource,
    runner: Arc<dyn Runner>,
) {
    let transport = if url.starts_with("grpc://") {
        Ok(Transport::Grpc(url.to_string()))
    } else {
        Target::parse(url).and_then(|t| {
            if t.prefix.is_empty() { Err("no path".to_string()) } else { Ok(Transport::Http(t)) }
        })
    };
    let transport = match transport {
        Ok(t) => t,
        Err(e) => return crate::sys::warn(&format!("OTLP pushes to {url} not started: {e}")),
    };
    if let Err(e) = client::headers_ok(&services.push_headers) {
        return crate::sys::warn(&format!("OTLP pushes to {url} not started: {e}"));
    }
    let resource = resource(&services.push_labels, &ReportContext::current());
    let headers = services.push_headers.clone();
    let interval = Duration::from_secs(services.push_interval_secs.max(1));
    let shown = url.to_string();
    #[cfg(not(feature = "otlp-grpc"))]
    if let Transport::Grpc(url) = &transport {
        return crate::sys::warn(&format!(
            "OTLP pushes to {url} not started: this build of Ying has no OTLP/gRPC (the \
             otlp-grpc feature: cargo build --release -p ying-preload --features otlp-grpc); \
             push over OTLP/HTTP instead, e.g. YING_OTLP_URL=http://host:4318"
        ));
    }
    let body = Box::new(move || {
        source.enter_profiler_thread();
        #[cfg(feature = "otlp-grpc")]
        let grpc = match &transport {
            Transport::Grpc(url) => match Grpc::new(url, &headers) {
                Ok(g) => Some(g),
                Err(e) => {
                    return crate::sys::warn(&format!("OTLP pushes to {url} not started: {e}"));
                }
            },
            Transport::Http(_) => None,
        };
        let mut since = AllocBaseline::empty(SystemTime::now());
        // Each push is made whole inside the report's build, whose memory was granted: the
        // gzipped body for HTTP, the message for gRPC.
        let build = || {
            let (push, now) = match &transport {
                Transport::Http(_) => profiles::delta_otlp_gz(source, &since, &resource)
                    .map(|(gz, now)| (Payload::Gz(gz), now))?,
                #[cfg(feature = "otlp-grpc")]
                Transport::Grpc(_) => profiles::delta_otlp_request(source, &since, &resource)
                    .map(|(request, now)| (Payload::Request(Box::new(request)), now))?,
                #[cfg(not(feature = "otlp-grpc"))]
                Transport::Grpc(_) => unreachable!("refused above"),
            };
            // The next push starts here, whether this one is taken or dropped.
            since = now;
            Ok(Some(push))
        };
        let send = |push: &Payload| match (&transport, push) {
            (Transport::Http(target), Payload::Gz(gz)) => send_http(target, &headers, gz),
            #[cfg(feature = "otlp-grpc")]
            (Transport::Grpc(_), Payload::Request(request)) => match &grpc {
                Some(g) => g.send(request),
                None => unreachable!("made above"),
            },
            _ => unreachable!("each transport builds its own payload"),
        };
        client::run(&format!("OTLP push to {shown}"), interval, &|| runner.exiting(), build, send);
    });
    if let Err(e) = crate::sys::spawn_profiler_thread(c"ying-otlp", body) {
        crate::sys::warn(&format!("OTLP pushes to {url} not started: no thread ({e})"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> ReportContext {
        ReportContext {
            pid: 42,
            instance: None,
            exe: "/usr/bin/svc".into(),
            rss_kib: None,
            anon_rss_kib: None,
        }
    }

    #[test]
    fn the_resource_names_the_service_and_the_process() {
        let labels = vec![
            ("service_name".to_string(), "checkout".to_string()),
            ("env".to_string(), "prod".to_string()),
        ];
        let r = resource(&labels, &process());
        assert_eq!(r[0], ("service.name".to_string(), "checkout".to_string()));
        let get = |k: &str| r.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("process.pid"), Some("42"));
        assert_eq!(get("process.executable.name"), Some("svc"));
        assert_eq!(get("process.executable.path"), Some("/usr/bin/svc"));
        assert_eq!(get("env"), Some("prod"));
        assert!(get("host.name").is_some_and(|h| !h.is_empty()));
        let r = resource(&[], &process());
        assert_eq!(r[0].1, "svc", "the executable's name by default");
    }
}
