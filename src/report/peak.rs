//! The peak in a report set: the text report's PEAK section and header line, and the peak's
//! own files beside the current ones:
//!
//! | file | what |
//! |---|---|
//! | `<set>.peak.folded` | folded stacks weighted by the bytes each retained at the kept peak |
//! | `<set>.peak.svg` | their flamegraph, when flamegraphs are on |
//! | `<set>.peak.pb.gz` | pprof heap profile of the peak: `inuse_objects` and `inuse_space` |
//!
//! The kept peak is the last moment the estimated retained total rose 5 % above the peak kept
//! before it (see [`crate::Snapshot::peak`]); the reports name both it and the high-water mark.

use std::fmt::Write as _;
use std::io;
use std::path::PathBuf;

use super::{files, flamegraph, folded, heap_profile};
use super::{human_bytes, human_millis, utc_timestamp};
use crate::callstack::{FrameView, Measurement};
use crate::report::model::Report;
use crate::report::snapshot::Peak;

/// The measure the peak files rank and weigh by.
const M: Measurement = Measurement::RetainedBytesAtPeak;

/// `2.3s after start (2026-12-03T16:47:59Z)`.
fn when(p: &Peak) -> String {
    let since = match p.since_start {
        Some(d) => format!("{} after start", human_millis(d.as_secs_f64() * 1000.0)),
        None => "time since start unknown".to_string(),
    };
    format!("{since} ({})", utc_timestamp(p.at, true))
}

/// `98.7 MiB (103497728 bytes)`, or why the exact figure is missing.
fn exact(p: &Peak) -> String {
    match p.exact_bytes {
        Some(b) => format!("{} ({b} bytes) exact", human_bytes(b)),
        None => "exact not read (the exact totals were being read elsewhere at that instant)"
            .to_string(),
    }
}

/// The text report's one-line summary of the peak, for its header.
pub(crate) fn header_line(r: &Report) -> String {
    match &r.facts.peak {
        Some(p) => format!(
            "peak (sampled):     {} high-water; stacks kept at {} estimated, {}, {}\n",
            human_bytes(p.high_water_bytes),
            human_bytes(p.estimated_bytes),
            match p.exact_bytes {
                Some(b) => format!("{} exact", human_bytes(b)),
                None => "exact not read".to_string(),
            },
            when(p)
        ),
        None => "peak (sampled):     none kept yet (nothing sampled)\n".to_string(),
    }
}

/// What the text report says instead of its stacks when none has a non-zero `m` although
/// stacks were sampled (a program that freed everything before its exit report): where to look
/// instead. None when there is nothing to point at.
pub(crate) fn nothing_now(r: &Report, m: Measurement) -> Option<String> {
    if r.entries() == 0 || m == M {
        return None;
    }
    let when = when_taken(r);
    Some(format!(
        "nothing sampled is {} {when}: the {} sampled stacks freed what they held; the PEAK \
         section below and the .peak.svg, .peak.folded and .peak.pb.gz files of this set show \
         what they held at the peak",
        m.label(),
        r.stacks_sampled()
    ))
}

/// The text report's PEAK section: when, how high (estimated and exact), and the top `top_k`
/// stacks ranked by what they retained at the kept peak.
pub(crate) fn section(r: &Report, top_k: usize, view: FrameView) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "PEAK");
    let Some(p) = &r.facts.peak else {
        let _ = writeln!(o, "no peak kept yet: nothing was sampled\n");
        return o;
    };
    let _ = writeln!(
        o,
        "high-water (sampled): {} ({} bytes): the most the sampled estimate of retained memory reached",
        human_bytes(p.high_water_bytes),
        p.high_water_bytes
    );
    let _ = writeln!(
        o,
        "kept peak:            {} ({} bytes) estimated, {}",
        human_bytes(p.estimated_bytes),
        p.estimated_bytes,
        exact(p)
    );
    let _ = writeln!(o, "kept at:              {}", when(p));
    let _ = writeln!(
        o,
        "                      (peak {} kept: a peak is kept each time the total exceeds the last kept one by 5 %)",
        p.captures
    );
    let ranked = r.ranked(M);
    let top = &ranked[..ranked.len().min(top_k)];
    let _ = writeln!(
        o,
        "ranked by:            bytes retained at the kept peak (top {} of {})\n",
        top.len(),
        r.ranked_len(M)
    );
    for (i, &e) in top.iter().enumerate() {
        let at_peak = r.figures(e).measure(M);
        let share = if p.estimated_bytes == 0 {
            0.0
        } else {
            at_peak as f64 * 100.0 / p.estimated_bytes as f64
        };
        let s = r.stack_stats(e);
        let _ = writeln!(
            o,
            "peak #{}: {} ({} bytes, {share:.1}% of the kept peak) in {} allocations; retained now {}",
            i + 1,
            human_bytes(at_peak),
            at_peak,
            s.peak_retained_count,
            human_bytes(s.retained_bytes)
        );
        crate::report::text::write_spans_and_frames(&mut o, &s, view, true);
        o.push('\n');
    }
    o
}

/// "at exit" in the exit report, "now" in any other.
fn when_taken(r: &Report) -> &'static str {
    if r.facts.occasion.exiting { "at exit" } else { "now" }
}

/// What the current flamegraph of a report set says when it has nothing to draw: "no
/// samples" only when nothing was sampled; otherwise that nothing is retained now and where
/// the peak flamegraph is (`stem`, the set's; None for a flamegraph outside a set).
pub(crate) fn empty_flamegraph_note(r: &Report, m: Measurement, stem: Option<&str>) -> String {
    if r.entries() == 0 {
        return flamegraph::NO_SAMPLES.to_string();
    }
    match stem {
        Some(stem) => format!(
            "nothing {} {}; see the peak flamegraph {stem}.peak.svg",
            m.label(),
            when_taken(r)
        ),
        None => format!("nothing {} {}", m.label(), when_taken(r)),
    }
}

/// The peak's folded stacks of `r`.
pub(crate) fn folded(r: &Report) -> String {
    folded::render_report(r, M, folded::MAX_FOLDED_STACKS)
}

/// The peak's flamegraph of `r`, drawn from its folded stacks `fold`.
pub(crate) fn svg(r: &Report, fold: &str) -> io::Result<Vec<u8>> {
    let ctx = &r.facts.process;
    let title = match &r.facts.peak {
        Some(p) => format!(
            " of {} (pid {}) at its kept peak, {} estimated, {}",
            ctx.exe_name(),
            ctx.pid,
            human_bytes(p.estimated_bytes),
            when(p)
        ),
        None => format!(" of {} (pid {})", ctx.exe_name(), ctx.pid),
    };
    let note = if r.facts.peak.is_none() {
        "no peak kept yet: nothing was sampled"
    } else {
        "no stack retained anything at the kept peak"
    };
    flamegraph::render_svg_noting(fold, M, &title, note)
        .map_err(|e| io::Error::other(format!("flamegraph: {e}")))
}

/// The results of writing the peak's folded stacks and flamegraph.
pub(crate) struct Written {
    pub(crate) folded: io::Result<PathBuf>,
    pub(crate) svg: Option<io::Result<PathBuf>>,
}

/// Writes the peak's folded stacks and flamegraph (when on) of `r` into `dir` under `stem`,
/// one after the other (each built, written and dropped before the next).
pub(crate) fn write_files(r: &Report, dir: &files::ReportDir, stem: &str) -> Written {
    let fold = folded(r);
    let folded = files::write_atomic(dir, &format!("{stem}.peak.folded"), fold.as_bytes());
    let svg = r.opts.gen_flamegraphs.then(|| {
        svg(r, &fold).and_then(|b| files::write_atomic(dir, &format!("{stem}.peak.svg"), &b))
    });
    Written { folded, svg }
}

/// Writes the peak's heap profile of `r` (every raw stack: pprof's locations are addresses)
/// into `dir` under `stem`.
pub(crate) fn write_pprof(r: &Report, dir: &files::ReportDir, stem: &str) -> io::Result<PathBuf> {
    dir.write_atomic_with(&format!("{stem}.peak.pb.gz"), |w| {
        let mut gz = super::pprof::gzip(w);
        heap_profile::write_peak(r, &mut gz)?;
        gz.finish().map(drop)
    })
    .map_err(|e| io::Error::new(e.kind(), format!("peak pprof: {e}")))
}
