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
//!  "pid":4242,"exe":"/usr/bin/app","taken_at":"2026-12-05T07:15:00Z","reason":null,
//!  "exiting":true,"sample_interval_bytes":524288,"unit":"requested"|"chunk",
//!  "totals":{"allocated_bytes":..,"freed_bytes":..,"retained_bytes":..,"profiler_bytes":..,
//!            "profiler_peak_bytes":..},
//!  "estimated":{"allocated_bytes":..,"retained_bytes":..},
//!  "peak":{"estimated_bytes":..,"exact_bytes":..,"high_water_bytes":..,"at":"..",
//!          "captures":..} | null,
//!  "mapped":{"bytes":..,"regions":..} | null, "rss_kib":.. | null, "anon_rss_kib":.. | null,
//!  "foreign_malloc":".." | null,
//!  "stacks":{"sampled":..,"entries":..,"live_samples":..,"dropped_samples":..,
//!            "address_conflicts":..,"giant_refused":..},
//!  "files":{"text":"<set>.txt","folded":..,"svg":..,"pprof":..,"peak_folded":..,
//!           "peak_svg":..,"peak_pprof":..},
//!  "ranked_by":"retained","entries":[{"rank":1,"retained_bytes":..,"retained_count":..,
//!    "allocated_bytes":..,"allocations":..,"freed_bytes":..,"frees":..,
//!    "peak_retained_bytes":..,"samples":..,"live_samples":..,"spans":[".."],
//!    "frames":["function (file:line)",..]}],
//!  "peak_entries":[..the same, ranked by bytes retained at the kept peak..]}
//! ```
//!
//! Every figure is a JSON number (an integer); a missing one is `null`. New keys may be added
//! in a later version of the same `version`; a key's meaning never changes within it.

use std::path::Path;

use serde_json::{Value, json};

use super::model::Report;
use super::{ReportPaths, utc_timestamp};
use crate::callstack::Measurement;
use crate::engine::mapped::MappedState;

/// The manifest's format version.
pub const VERSION: u64 = 1;

/// The file name of a path of the set (None when the file was not written).
fn name(p: &Option<std::path::PathBuf>) -> Value {
    match p.as_deref().and_then(Path::file_name) {
        Some(n) => Value::String(n.to_string_lossy().into_owned()),
        None => Value::Null,
    }
}

/// The entries `ranked` of `r` (the first `k`), as the manifest lists them.
fn entries(r: &Report, m: Measurement, k: usize) -> Value {
    let view = r.opts.view();
    let list: Vec<Value> = r
        .ranked(m)
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, &e)| {
            let s = r.stack_stats(e);
            let frames: Vec<String> = s.shown_frames(view).iter().map(|f| f.text(true)).collect();
            let spans: Vec<String> = s.spans.iter().map(|sp| sp.to_string()).collect();
            json!({
                "rank": i + 1,
                "retained_bytes": s.retained_bytes,
                "retained_count": s.retained_count,
                "allocated_bytes": s.allocated_bytes,
                "allocations": s.num_allocations,
                "freed_bytes": s.freed_bytes,
                "frees": s.num_frees,
                "peak_retained_bytes": s.peak_retained_bytes,
                "samples": s.samples,
                "live_samples": s.live_samples,
                "spans": spans,
                "frames": frames,
            })
        })
        .collect();
    Value::Array(list)
}

/// The manifest of the set `stem` of `r`, whose files are `paths`.
pub(crate) fn render(r: &Report, stem: &str, paths: &ReportPaths) -> String {
    let f = &r.facts;
    let t = &f.totals;
    let (est_alloc, est_ret) = r.estimated_totals();
    let peak = match &f.peak {
        Some(p) => json!({
            "estimated_bytes": p.estimated_bytes,
            "exact_bytes": p.exact_bytes,
            "high_water_bytes": p.high_water_bytes,
            "at": utc_timestamp(p.at, true),
            "captures": p.captures,
        }),
        None => Value::Null,
    };
    let mapped = match f.mapped {
        MappedState::Counted { bytes, regions } => json!({"bytes": bytes, "regions": regions}),
        MappedState::Off | MappedState::NotSeen => Value::Null,
    };
    let unit = match f.unit {
        crate::ByteUnit::Requested => "requested",
        crate::ByteUnit::Chunk => "chunk",
    };
    let top_k = r.opts.top_k;
    let doc = json!({
        "format": "ying-report-set",
        "version": VERSION,
        "set": stem,
        "pid": f.process.pid,
        "exe": f.process.exe,
        "taken_at": utc_timestamp(f.taken_at, true),
        "reason": f.occasion.reason,
        "exiting": f.occasion.exiting,
        "sample_interval_bytes": f.sample_interval,
        "unit": unit,
        "totals": {
            "allocated_bytes": t.allocated_bytes,
            "freed_bytes": t.freed_bytes,
            "retained_bytes": t.retained_bytes(),
            "profiler_bytes": t.profiler_bytes,
            "profiler_peak_bytes": t.profiler_peak_bytes,
        },
        "estimated": {"allocated_bytes": est_alloc, "retained_bytes": est_ret},
        "peak": peak,
        "mapped": mapped,
        "rss_kib": f.process.rss_kib,
        "anon_rss_kib": f.process.anon_rss_kib,
        "foreign_malloc": f.foreign_malloc,
        "stacks": {
            "sampled": r.stacks_sampled(),
            "entries": r.entries(),
            "live_samples": f.live_samples,
            "dropped_samples": f.dropped_samples,
            "address_conflicts": f.address_conflicts,
            "giant_refused": f.giant_refused,
        },
        "files": {
            "text": name(&paths.text),
            "folded": name(&paths.folded),
            "svg": name(&paths.svg),
            "pprof": name(&paths.pprof),
            "peak_folded": name(&paths.peak_folded),
            "peak_svg": name(&paths.peak_svg),
            "peak_pprof": name(&paths.peak_pprof),
        },
        "ranked_by": r.opts.measurement.label(),
        "entries": entries(r, r.opts.measurement, top_k),
        "peak_entries": entries(r, Measurement::RetainedBytesAtPeak, top_k),
    });
    let mut out = doc.to_string();
    out.push('\n');
    out
}
