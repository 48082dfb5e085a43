//! The manifest of a report set, `<set>.json`: what the set says, for programs. The `ying`
//! command, the scripts and the tests read it instead of parsing the human text report.
//!
//! It is written last, after every other file of the set, from the same report model
//! (`src/report/model/`): the header's figures, the reason and the occasion, the files the set
//! holds (names relative to its directory), and the listed entries of the text report (ranked by
//! the report's measure) and of its PEAK section, each with its figures and its frames as the text
//! prints them.
//!
//! ```json
//! {"format":"ying-report-set","version":1,"set":"ying.app.4242.0.20261205T071500Z",
//!  "pid":4242,"exe":"/usr/bin/app","taken_at":"2026-12-05T07:15:00Z","taken_at_ms":..,"reason":null,
//!  "exiting":true,"ended":null,"sample_interval_bytes":524288,"unit":"requested"|"chunk",
//!  "totals":{"allocated_bytes":..,"freed_bytes":..,"retained_bytes":..,"profiler_bytes":..,
//!            "profiler_peak_bytes":..},
//!  "estimated":{"allocated_bytes":..,"allocated_bytes_stderr":..,"retained_bytes":..,
//!               "retained_bytes_stderr":..},
//!  "peak":{"estimated_bytes":..,"estimated_bytes_stderr":..,"exact_bytes":..,
//!          "high_water_bytes":..,"at":"..",
//!          "captures":..} | null,
//!  "mapped":{"bytes":..,"regions":..} | null, "rss_kib":.. | null, "anon_rss_kib":.. | null,
//!  "rss_bytes":.. | null, "rss_breakdown":{"heap_in_use":..,"allocator_overhead":..,
//!    "mmaps_counted":..,"thread_stacks":..,"binaries":..,"file_mappings":..,"profiler":..,
//!    "unseen_anonymous":..} | null, "heap_not_resident_bytes":.. | null,
//!  "memory_limit":{"bytes":..,"source":"cgroup"|"YING_MEMORY_LIMIT_BYTES",
//!    "near_limit_pct":.. (0: off),"near_limit_since":".." | null} | null,
//!  "foreign_malloc":".." | null,
//!  "allocator":".." | null,
//!  "stacks":{"sampled":..,"entries":..,"live_samples":..,"dropped_samples":..,"lost_for_memory":..,
//!            "address_conflicts":..,"giant_refused":..},
//!  "files":{"text":"<set>.txt","folded":..,"svg":..,"pprof":..,"peak_folded":..,
//!           "peak_svg":..,"peak_pprof":..,"raw":.. | null},
//!  "ranked_by":"retained","entries_complete":true|false,"entries":[{"rank":1,"retained_bytes":..,"retained_count":..,
//!    "allocated_bytes":..,"allocations":..,"freed_bytes":..,"frees":..,
//!    "peak_retained_bytes":..,"samples":..,"live_samples":..,
//!    "retained_age_ms":.. | null,"resident_bytes":.. | null,"swapped_bytes":.. | null,
//!    "spans":[".."],
//!    (and beside each sampled figure its standard error: "retained_bytes_stderr":.., ...)
//!    "frames":["function (file:line)",..],
//!    "sources":["/the/whole/path/file.c:12" | null,..] (each frame's, the text shortens them)}],
//!  "peak_entries":[..the same, ranked by bytes retained at the kept peak..],
//!  "tasks":[{"name":"svc::handler","retained_bytes":..,"retained_bytes_stderr":..,
//!    "allocated_bytes":..,"allocated_bytes_stderr":..,"stacks":..}] (Tokio task kinds),
//!  "spans":[..the same per innermost span..]}
//! ```
//!
//! `entries_complete` is true when `entries` lists every stack whose `ranked_by` figure is not
//! zero (none was cut at `YING_TOP_K`): a stack a complete list leaves out had none of it at
//! this dump (the leak suspects count it as 0 B there, `report::leaks::sets`).
//!
//! Every figure is a JSON number (an integer); a missing one is `null`. A sampled figure's
//! `_stderr` is its standard error (0 when it has none): the truth is within 1.96 of them 95
//! times in 100. New keys may be added
//! in a later version of the same `version`; a key's meaning never changes within it.
//!
//! It is streamed to its file through `serde_json`'s serializer, one key at a time, rather
//! than built as a `serde_json::Value` tree: a tree of a few thousand small strings, built at
//! the end of a dump on the dumping thread, grew that thread's malloc arena above what the
//! dump had freed (measured by `tests/dump_memory.rs`: 12 concurrent dumps on 12 threads left
//! about 1.4 MiB more resident).

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;
use serde::ser::Serializer;

use super::model::Report;
use super::model::groups;
use super::timeline::GroupFigures;
use super::{ReportPaths, utc_timestamp};
use crate::callstack::Measurement;
use crate::engine::mapped::MappedState;

/// The manifest's format version.
pub const VERSION: u64 = 1;

#[derive(Serialize)]
struct Manifest<'a> {
    format: &'static str,
    version: u64,
    set: &'a str,
    pid: u32,
    exe: &'a str,
    taken_at: String,
    /// `taken_at` in milliseconds since the Unix epoch (the leak suspects' clock).
    taken_at_ms: u64,
    reason: Option<&'a str>,
    exiting: bool,
    /// How the process ended (a report written from its live file after it ended), else null.
    ended: Option<&'a str>,
    sample_interval_bytes: u64,
    unit: &'static str,
    totals: Totals,
    estimated: Estimated,
    peak: Option<Peak>,
    mapped: Option<Mapped>,
    rss_kib: Option<u64>,
    anon_rss_kib: Option<u64>,
    /// The resident set, bytes, as the sum of `/proc/self/smaps`' `Rss:` (`model/rss.rs`).
    rss_bytes: Option<u64>,
    /// The same cut into parts, part name -> bytes; the parts sum to `rss_bytes`.
    rss_breakdown: Option<Breakdown<'a>>,
    /// Retained heap bytes that are not resident (never touched, or swapped).
    heap_not_resident_bytes: Option<u64>,
    /// The memory limit and the near-limit trigger's state (`triggers/limit.rs`).
    memory_limit: Option<MemoryLimit>,
    foreign_malloc: Option<&'a str>,
    /// The allocator under the shim (`glibc (path)`, or the chained allocator's path).
    allocator: Option<&'a str>,
    stacks: Stacks,
    files: Files,
    ranked_by: &'static str,
    /// Whether `entries` lists every stack whose `ranked_by` figure is not zero.
    entries_complete: bool,
    entries: Entries<'a>,
    peak_entries: Entries<'a>,
    /// Memory per Tokio task kind and per innermost span (`model/groups.rs`), the largest
    /// retained first, at most ten each; empty when no stack has one.
    tasks: Vec<Group>,
    spans: Vec<Group>,
}

/// One row of `tasks` or `spans`.
#[derive(Serialize)]
struct Group {
    name: String,
    retained_bytes: u64,
    retained_bytes_stderr: u64,
    allocated_bytes: u64,
    allocated_bytes_stderr: u64,
    stacks: u32,
}

/// The rows of `groups` the manifest lists: the page's (`timeline::GroupFigures::listed`).
fn group_rows(groups: &[groups::Group]) -> Vec<Group> {
    GroupFigures::listed(groups)
        .into_iter()
        .map(|g| Group {
            name: g.name,
            retained_bytes: g.retained,
            retained_bytes_stderr: f64::from(g.retained_stderr).round() as u64,
            allocated_bytes: g.allocated,
            allocated_bytes_stderr: f64::from(g.allocated_stderr).round() as u64,
            stacks: g.stacks,
        })
        .collect()
}

/// `rss_breakdown`: one key per part, in the order reports print them.
struct Breakdown<'a>(&'a crate::report::model::rss::RssBreakdown);

impl Serialize for Breakdown<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.parts.len()))?;
        for (part, bytes) in self.0.iter() {
            m.serialize_entry(part.key(), &bytes)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct Totals {
    allocated_bytes: u64,
    freed_bytes: u64,
    retained_bytes: u64,
    profiler_bytes: u64,
    profiler_peak_bytes: u64,
}

/// Each sampled figure's standard error beside it, `<figure>_stderr` (0: no sampling error).
#[derive(Serialize)]
struct Estimated {
    allocated_bytes: u64,
    allocated_bytes_stderr: u64,
    retained_bytes: u64,
    retained_bytes_stderr: u64,
}

#[derive(Serialize)]
struct Peak {
    estimated_bytes: u64,
    estimated_bytes_stderr: u64,
    exact_bytes: Option<u64>,
    high_water_bytes: u64,
    at: String,
    captures: u64,
}

#[derive(Serialize)]
struct Mapped {
    bytes: u64,
    regions: u64,
}

#[derive(Serialize)]
struct MemoryLimit {
    bytes: u64,
    source: &'static str,
    near_limit_pct: u64,
    /// When the resident set reached the near-limit level (and stayed above 95 % of it).
    near_limit_since: Option<String>,
}

#[derive(Serialize)]
struct Stacks {
    sampled: usize,
    entries: usize,
    live_samples: u64,
    dropped_samples: u64,
    lost_for_memory: u64,
    address_conflicts: u64,
    giant_refused: u64,
}

#[derive(Serialize)]
struct Files {
    text: Option<String>,
    folded: Option<String>,
    svg: Option<String>,
    pprof: Option<String>,
    peak_folded: Option<String>,
    peak_svg: Option<String>,
    peak_pprof: Option<String>,
    /// The raw profile (`.live`), with `YING_SYMBOLIZE=offline` only.
    raw: Option<String>,
}

/// The first `k` entries of `r` ranked by `m`, serialized one at a time.
struct Entries<'a> {
    r: &'a Report,
    m: Measurement,
    k: usize,
}

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let view = self.r.opts.view();
        s.collect_seq(self.r.ranked(self.m).iter().take(self.k).enumerate().map(|(i, &e)| {
            let st = self.r.stack_stats(e);
            let shown = st.shown_frames(view);
            let frames: Vec<String> = shown.iter().map(|f| f.text(true)).collect();
            // Each frame's source path whole (the text shortens it, see `short_path`).
            let sources: Vec<Option<String>> = shown
                .iter()
                .map(|f| match f {
                    crate::callstack::ShownFrame::Frame(f) => f.location(),
                    crate::callstack::ShownFrame::Folded { .. } => None,
                })
                .collect();
            let spans: Vec<String> = st.spans.iter().map(|sp| sp.to_string()).collect();
            let v = &st.variance;
            let se = |v: f64| v.max(0.0).sqrt().round() as u64;
            Entry {
                rank: i + 1,
                retained_bytes: st.retained_bytes,
                retained_bytes_stderr: se(v.retained_bytes),
                retained_count: st.retained_count,
                retained_count_stderr: se(v.retained_count),
                allocated_bytes: st.allocated_bytes,
                allocated_bytes_stderr: se(v.allocated_bytes),
                allocations: st.num_allocations,
                allocations_stderr: se(v.num_allocations),
                freed_bytes: st.freed_bytes,
                freed_bytes_stderr: se(v.freed_bytes),
                frees: st.num_frees,
                frees_stderr: se(v.num_frees),
                peak_retained_bytes: st.peak_retained_bytes,
                peak_retained_bytes_stderr: se(v.peak_retained_bytes),
                samples: st.samples,
                live_samples: st.live_samples,
                retained_age_ms: (self.r.has_histograms(e) && !st.retained_age.is_empty())
                    .then(|| st.retained_age.average_millis().round() as u64),
                resident_bytes: st.residency.map(|r| r.resident_bytes),
                swapped_bytes: st.residency.map(|r| r.swapped_bytes),
                spans,
                frames,
                sources,
            }
        }))
    }
}

#[derive(Serialize)]
struct Entry {
    rank: usize,
    retained_bytes: u64,
    retained_bytes_stderr: u64,
    retained_count: u64,
    retained_count_stderr: u64,
    allocated_bytes: u64,
    allocated_bytes_stderr: u64,
    allocations: u64,
    allocations_stderr: u64,
    freed_bytes: u64,
    freed_bytes_stderr: u64,
    frees: u64,
    frees_stderr: u64,
    peak_retained_bytes: u64,
    peak_retained_bytes_stderr: u64,
    samples: u64,
    live_samples: u64,
    /// Mean age of the retained bytes in ms (null: none retained, or the ages were not read).
    retained_age_ms: Option<u64>,
    /// Estimated retained bytes in memory and in swap (`YING_RESIDENT`), else null.
    resident_bytes: Option<u64>,
    swapped_bytes: Option<u64>,
    spans: Vec<String>,
    frames: Vec<String>,
    /// Each frame's `file:line` with its whole path (null: no file, or a folded line).
    sources: Vec<Option<String>>,
}

/// The file name of a path of the set (None when the file was not written).
fn name(p: &Option<std::path::PathBuf>) -> Option<String> {
    p.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned())
}

/// Streams the manifest of the set `stem` of `r`, whose files are `paths`, to `out`.
pub(crate) fn write(
    r: &Report,
    stem: &str,
    paths: &ReportPaths,
    out: impl Write,
) -> io::Result<()> {
    let f = &r.facts;
    let t = &f.totals;
    let (est_alloc, est_ret) = r.estimated_totals();
    let (se_alloc, se_ret, se_peak) = r.estimated_stderrs();
    let doc = Manifest {
        format: "ying-report-set",
        version: VERSION,
        set: stem,
        pid: f.process.pid,
        exe: &f.process.exe,
        taken_at: utc_timestamp(f.taken_at, true),
        taken_at_ms: f
            .taken_at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        reason: f.occasion.reason.as_deref(),
        exiting: f.occasion.exiting,
        ended: f.occasion.ended.as_deref(),
        sample_interval_bytes: f.sample_interval,
        unit: match f.unit {
            crate::ByteUnit::Requested => "requested",
            crate::ByteUnit::Chunk => "chunk",
            crate::ByteUnit::Usable => "usable",
        },
        totals: Totals {
            allocated_bytes: t.allocated_bytes,
            freed_bytes: t.freed_bytes,
            retained_bytes: t.retained_bytes(),
            profiler_bytes: t.profiler_bytes,
            profiler_peak_bytes: t.profiler_peak_bytes,
        },
        estimated: Estimated {
            allocated_bytes: est_alloc,
            allocated_bytes_stderr: se_alloc.round() as u64,
            retained_bytes: est_ret,
            retained_bytes_stderr: se_ret.round() as u64,
        },
        peak: f.peak.as_ref().map(|p| Peak {
            estimated_bytes: p.estimated_bytes,
            estimated_bytes_stderr: se_peak.round() as u64,
            exact_bytes: p.exact_bytes,
            high_water_bytes: p.high_water_bytes,
            at: utc_timestamp(p.at, true),
            captures: p.captures,
        }),
        mapped: match f.mapped {
            MappedState::Counted { bytes, regions } => Some(Mapped { bytes, regions }),
            MappedState::Off | MappedState::NotSeen => None,
        },
        rss_kib: f.process.rss_kib,
        anon_rss_kib: f.process.anon_rss_kib,
        rss_bytes: f.rss.as_ref().map(|b| b.rss),
        rss_breakdown: f.rss.as_ref().map(Breakdown),
        heap_not_resident_bytes: f.rss.as_ref().map(|b| b.heap_not_resident),
        memory_limit: f.limit.map(|l| MemoryLimit {
            bytes: l.bytes,
            source: if l.cgroup { "cgroup" } else { "YING_MEMORY_LIMIT_BYTES" },
            near_limit_pct: l.pct,
            near_limit_since: l.near_since_ms.map(|ms| {
                utc_timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms), true)
            }),
        }),
        foreign_malloc: f.foreign_malloc.as_deref(),
        allocator: f.allocator.as_deref(),
        stacks: Stacks {
            sampled: r.stacks_sampled(),
            entries: r.entries(),
            live_samples: f.live_samples,
            dropped_samples: f.dropped_samples,
            lost_for_memory: f.lost_for_memory,
            address_conflicts: f.address_conflicts,
            giant_refused: f.giant_refused,
        },
        files: Files {
            text: name(&paths.text),
            folded: name(&paths.folded),
            svg: name(&paths.svg),
            pprof: name(&paths.pprof),
            peak_folded: name(&paths.peak_folded),
            peak_svg: name(&paths.peak_svg),
            peak_pprof: name(&paths.peak_pprof),
            raw: name(&paths.raw),
        },
        ranked_by: r.opts.measurement.label(),
        entries_complete: r.ranked_len(r.opts.measurement) <= r.opts.top_k,
        entries: Entries { r, m: r.opts.measurement, k: r.opts.top_k },
        peak_entries: Entries { r, m: Measurement::RetainedBytesAtPeak, k: r.opts.top_k },
        tasks: group_rows(&groups::by_task(r)),
        spans: group_rows(&groups::by_span(r)),
    };
    let mut out = io::BufWriter::new(out);
    serde_json::to_writer(&mut out, &doc).map_err(io::Error::other)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// The manifest as a string (tests).
#[cfg(test)]
pub(crate) fn render(r: &Report, stem: &str, paths: &ReportPaths) -> String {
    let mut out = Vec::new();
    write(r, stem, paths, &mut out).expect("writing to memory");
    String::from_utf8(out).expect("JSON is UTF-8")
}
