//! The peak's own files in a report set, beside the current ones (the text report's PEAK
//! section and header line are the text renderer's):
//!
//! | file | what |
//! |---|---|
//! | `<set>.peak.folded` | folded stacks weighted by the bytes each retained at the kept peak |
//! | `<set>.peak.svg` | their flamegraph, when flamegraphs are on |
//! | `<set>.peak.pb.gz` | pprof heap profile of the peak: `inuse_objects` and `inuse_space` |
//!
//! The kept peak is the last moment the estimated retained total rose 5 % above the peak kept
//! before it (see [`crate::Snapshot::peak`]); the reports name both it and the high-water mark.

use std::io;
use std::path::PathBuf;

use super::{files, flamegraph, folded, heap_profile, human_bytes};
use crate::callstack::Measurement;
use crate::report::model::Report;

/// The measure the peak files rank and weigh by.
const M: Measurement = Measurement::RetainedBytesAtPeak;

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
            super::peak_when(p)
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
