//! Profiles as bytes: the current heap profile as gzipped pprof (`inuse`, `alloc` and `peak`
//! views), the text report as a `String` and the flamegraph SVG, built in memory with the
//! report set's own writers (`report/`) and never written to a file, so that a service can
//! serve them from its own router (the `jemalloc_pprof::dump_pprof` pattern). A delta of the
//! allocation figures between two moments ([`alloc_baseline`], [`delta_pprof_gz`]) serves Go's
//! `?seconds=N` and pushes to a continuous-profiling backend.
//!
//! Every function takes a [`ProfileSource`]: a `static` [`crate::YingProfiler`] (the
//! `#[global_allocator]` front end) is one. Each call takes a report as profiler code
//! (its memory the profiler's, never sampled), renders one output and returns a copy in the
//! caller's memory; builds run one at a time in the process, like report sets (a call waits
//! for one in progress, at most [`DEFAULT_DUMP_TIMEOUT`]). A call **blocks** while it
//! symbolizes and renders (milliseconds for a small program, about a hundred for 10,000
//! stacks): from async code, call it in `spawn_blocking`.
//!
//! # Serving `/debug/pprof/heap` from an axum router
//!
//! ```no_run
//! use axum::{Router, http::header, response::IntoResponse, routing::get};
//! use ying_profiler::YingProfiler;
//! use ying_profiler::profiles::{self, HeapView};
//!
//! #[global_allocator]
//! static YING: YingProfiler = YingProfiler::default();
//!
//! async fn heap() -> impl IntoResponse {
//!     match tokio::task::spawn_blocking(|| profiles::pprof_gz(&YING, HeapView::Inuse)).await {
//!         Ok(Ok(gz)) => Ok(([(header::CONTENT_TYPE, "application/octet-stream")], gz)),
//!         Ok(Err(e)) => Err(e.to_string()),
//!         Err(e) => Err(e.to_string()),
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() {
//!     let app = Router::new().route("/debug/pprof/heap", get(heap));
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:6060").await.unwrap();
//!     axum::serve(listener, app).await.unwrap();
//! }
//! ```
//!
//! `go tool pprof http://127.0.0.1:6060/debug/pprof/heap` then reads it (`tests/profiles.rs`
//! runs such a router and reads its answers).

use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;

use crate::report::model::table::StackTable;
use crate::report::model::{Occasion, Report};
use crate::report::{ReportOptions, flamegraph, folded, heap_profile, otlp, pprof, text};
use crate::source::turn::in_report_turn;
use crate::source::{DEFAULT_DUMP_TIMEOUT, ProfileSource, guarded_io};

/// Which heap profile: what the samples' values are and the view pprof opens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeapView {
    /// Go's four heap sample types (`alloc_objects`, `alloc_space`, `inuse_objects`,
    /// `inuse_space`), opening on `inuse_space`: Go's `/debug/pprof/heap`.
    Inuse,
    /// The same four, opening on `alloc_space`: Go's `/debug/pprof/allocs`.
    Alloc,
    /// Retained memory at the kept peak (`inuse_objects`, `inuse_space`), the report set's
    /// `.peak.pb.gz`.
    Peak,
}

impl HeapView {
    fn default_type(self) -> &'static str {
        match self {
            HeapView::Alloc => "alloc_space",
            HeapView::Inuse | HeapView::Peak => "inuse_space",
        }
    }
}

/// Takes a report of `source` as profiler code (shown as `opts` says; every stack a row of its
/// own for a pprof profile when None), builds `f` of it there, and returns a copy (`copy`) in
/// the caller's memory; the original is dropped as profiler code.
fn build<T>(
    source: &dyn ProfileSource,
    copy: impl Fn(&T) -> T,
    opts: Option<&ReportOptions>,
    f: impl FnOnce(&mut Report) -> io::Result<T>,
) -> io::Result<T> {
    let (interval, unit) = (source.sample_interval(), source.unit());
    in_report_turn(DEFAULT_DUMP_TIMEOUT, || {
        let built = || {
            // The profile's memory, reserved first (refused near a memory limit).
            let _memory =
                crate::source::budget::grant(crate::source::budget::Work::Profile, false)?;
            let mut r = match opts {
                Some(o) => Report::take(interval, unit, Occasion::default(), o),
                None => Report::take_rows(interval, unit),
            };
            f(&mut r)
        };
        Ok(guarded_io(source, built, copy)?)
    })?
}

fn gzipped(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<Vec<u8>> {
    let mut gz = pprof::gzip(Vec::new());
    write(&mut gz)?;
    gz.finish()
}

/// The heap profile of `source` now, gzipped pprof (the bytes of a report set's `.pb.gz`, or
/// of its `.peak.pb.gz` for [`HeapView::Peak`]), with the loaded modules as mappings (build
/// ids included) and `period_type` `space/bytes`, as Go's heap profiles.
pub fn pprof_gz(source: &dyn ProfileSource, view: HeapView) -> io::Result<Vec<u8>> {
    build(source, Vec::clone, None, |r| match view {
        HeapView::Peak => gzipped(|w| heap_profile::write_peak(r, w)),
        HeapView::Inuse => gzipped(|w| heap_profile::write(r, w)),
        HeapView::Alloc => {
            let c = heap_profile::comment(r, "");
            let table = &r.table;
            let mut row = |row: u32| Some(table.row(row).fig.pprof_values());
            let values = heap_profile::Values::Custom {
                default_type: view.default_type(),
                duration_nanos: 0,
                row: &mut row,
            };
            gzipped(|w| heap_profile::write_values(r, &c, w, values))
        }
    })
}

/// The text report of `source` now (a report set's `.txt`), with `opts`' ranking, top-k and
/// frame view.
pub fn text_report(source: &dyn ProfileSource, opts: &ReportOptions) -> io::Result<String> {
    let opts = ReportOptions { top_k: opts.top_k.max(1), ..opts.clone() };
    build(source, String::clone, Some(&opts), |r| {
        r.facts.totals.profiler_peak_bytes = crate::engine::totals::read().profiler_peak_bytes;
        Ok(text::render_report(r))
    })
}

/// The flamegraph SVG of `source` now (a report set's `.svg`: its top
/// [`folded::MAX_FOLDED_STACKS`] stacks by `opts.measurement`), whether or not
/// `opts.gen_flamegraphs` is set.
pub fn flamegraph_svg(source: &dyn ProfileSource, opts: &ReportOptions) -> io::Result<Vec<u8>> {
    build(source, Vec::clone, Some(opts), |r| {
        let fold = folded::render_report(r, r.opts.measurement, folded::MAX_FOLDED_STACKS);
        flamegraph::svg(r, &fold, None)
    })
}

/// The figures of every stack at one moment, to subtract from a later profile
/// ([`delta_pprof_gz`]). A few dozen bytes a stack, in the caller's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocBaseline {
    taken_at: SystemTime,
    /// (stack key, Go's four values), sorted by key.
    rows: Vec<(u64, [i64; 4])>,
}

impl AllocBaseline {
    /// A baseline of nothing at `taken_at`: a delta since it is the whole profile.
    pub fn empty(taken_at: SystemTime) -> Self {
        Self { taken_at, rows: Vec::new() }
    }

    /// When its figures were read.
    pub fn taken_at(&self) -> SystemTime {
        self.taken_at
    }

    /// Stacks it holds figures of.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it holds no stack.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn get(&self, key: u64) -> [i64; 4] {
        match self.rows.binary_search_by_key(&key, |&(k, _)| k) {
            Ok(i) => self.rows[i].1,
            Err(_) => [0; 4],
        }
    }

    fn of(r: &Report) -> Self {
        let t = &r.table;
        let mut rows: Vec<(u64, [i64; 4])> = (0..t.len() as u32)
            .map(|row| (row_key(t, row), t.row(row).fig.pprof_values()))
            .collect();
        rows.sort_unstable_by_key(|&(k, _)| k);
        rows.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                for (x, y) in a.1.iter_mut().zip(b.1) {
                    *x = x.saturating_add(y);
                }
            }
            same
        });
        Self { taken_at: r.facts.taken_at, rows }
    }
}

/// A stack's identity across snapshots: its addresses and span path (what the snapshot's rows
/// are keyed by), hashed with std's fixed-key SipHash.
fn row_key(snap: &StackTable, r: u32) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for l in snap.location_ids_of(r) {
        snap.locations()[l as usize].ip.hash(&mut h);
    }
    for sp in snap.spans_of(r) {
        sp.target.hash(&mut h);
        sp.name.hash(&mut h);
    }
    h.finish()
}

/// The figures of every stack of `source` now, for a later [`delta_pprof_gz`].
pub fn alloc_baseline(source: &dyn ProfileSource) -> io::Result<AllocBaseline> {
    build(source, AllocBaseline::clone, None, |r| Ok(AllocBaseline::of(r)))
}

/// A delta heap profile of `source` since `since`, gzipped pprof, and the baseline of now
/// (for the next delta, so that consecutive deltas add up to the whole).
///
/// `alloc_objects` and `alloc_space` are what was allocated between the two moments (never
/// negative). For [`HeapView::Alloc`] (pushes, `/debug/pprof/allocs?seconds=N`) the `inuse_*`
/// values are those of now, as Grafana Pyroscope's Go delta profiler sends them; for
/// [`HeapView::Inuse`] (`/debug/pprof/heap?seconds=N`) they are the change too, negative where
/// memory was released, as Go's `?seconds=N` gives. Stacks with nothing to show are left out.
/// `duration_nanos` is the time between the two moments, `time_nanos` the later one. A
/// [`HeapView::Peak`] has no delta: `InvalidInput`.
pub fn delta_pprof_gz(
    source: &dyn ProfileSource,
    since: &AllocBaseline,
    view: HeapView,
) -> io::Result<(Vec<u8>, AllocBaseline)> {
    if view == HeapView::Peak {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the peak profile has no delta"));
    }
    let copy = |(gz, base): &(Vec<u8>, AllocBaseline)| (gz.clone(), base.clone());
    build(source, copy, None, |r| {
        let span = r.facts.taken_at.duration_since(since.taken_at).unwrap_or_default();
        let from = since.taken_at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let c = heap_profile::comment(r, &format!(", allocations since {from} (unix seconds)"));
        let table = &r.table;
        let mut row = |row: u32| delta_values(table, since, view, row);
        let values = heap_profile::Values::Custom {
            default_type: view.default_type(),
            duration_nanos: i64::try_from(span.as_nanos()).unwrap_or(i64::MAX),
            row: &mut row,
        };
        let gz = gzipped(|w| heap_profile::write_values(r, &c, w, values))?;
        Ok((gz, AllocBaseline::of(r)))
    })
}

/// Go's four values of row `row` of `table` since `since`, as [`delta_pprof_gz`] describes
/// them for `view`; None when all four are 0.
fn delta_values(
    table: &StackTable,
    since: &AllocBaseline,
    view: HeapView,
    row: u32,
) -> Option<[i64; 4]> {
    let now = table.row(row).fig.pprof_values();
    let before = since.get(row_key(table, row));
    let alloc = |i: usize| now[i].saturating_sub(before[i]).max(0);
    let v = match view {
        HeapView::Alloc => [alloc(0), alloc(1), now[2], now[3]],
        _ => [alloc(0), alloc(1), now[2] - before[2], now[3] - before[3]],
    };
    (v != [0; 4]).then_some(v)
}

/// The OTLP profiles of `source` since `since` (one per sample type, sharing one dictionary;
/// the README's "OTLP" section gives their form): what was allocated between the two moments
/// and what is retained now, as [`HeapView::Alloc`]'s delta, the encoded
/// `ExportProfilesServiceRequest` (protobuf, uncompressed), and the baseline of now. `resource`
/// is the resource's attributes (`service.name` and the like, string values).
pub fn delta_otlp(
    source: &dyn ProfileSource,
    since: &AllocBaseline,
    resource: &[(String, String)],
) -> io::Result<(Vec<u8>, AllocBaseline)> {
    use prost::Message;
    delta_otlp_as(source, since, resource, |r| Ok(r.encode_to_vec()))
}

/// [`delta_otlp`], gzipped (the body of an OTLP/HTTP push).
pub(crate) fn delta_otlp_gz(
    source: &dyn ProfileSource,
    since: &AllocBaseline,
    resource: &[(String, String)],
) -> io::Result<(Vec<u8>, AllocBaseline)> {
    use prost::Message;
    delta_otlp_as(source, since, resource, |r| gzipped(|w| w.write_all(&r.encode_to_vec())))
}

/// [`delta_otlp`]'s request as a message (the gRPC pusher sends it as one).
#[cfg(feature = "otlp-grpc")]
pub(crate) fn delta_otlp_request(
    source: &dyn ProfileSource,
    since: &AllocBaseline,
    resource: &[(String, String)],
) -> io::Result<(ExportProfilesServiceRequest, AllocBaseline)> {
    delta_otlp_as(source, since, resource, Ok)
}

/// The OTLP request of [`delta_otlp`] made into `T` by `finish` inside the report's build (the
/// memory the build was granted, as a pprof profile is gzipped inside it), and the baseline of
/// now.
fn delta_otlp_as<T: Clone>(
    source: &dyn ProfileSource,
    since: &AllocBaseline,
    resource: &[(String, String)],
    finish: impl FnOnce(ExportProfilesServiceRequest) -> io::Result<T>,
) -> io::Result<(T, AllocBaseline)> {
    let copy = |(made, base): &(T, AllocBaseline)| (made.clone(), base.clone());
    build(source, copy, None, |r| {
        let span = r.facts.taken_at.duration_since(since.taken_at).unwrap_or_default();
        let meta = otlp::Meta {
            resource: resource.to_vec(),
            start: Some(since.taken_at),
            duration_nanos: u64::try_from(span.as_nanos()).unwrap_or(u64::MAX),
        };
        let table = &r.table;
        let mut row = |row: u32| delta_values(table, since, HeapView::Alloc, row);
        Ok((finish(otlp::request(r, &meta, &mut row))?, AllocBaseline::of(r)))
    })
}
