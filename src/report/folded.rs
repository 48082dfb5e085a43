//! Collapsed ("folded") stacks: `root;caller;...;leaf value`, one line per stack, the input
//! format of flamegraph tools. Values are estimated bytes of the chosen measure.

use crate::callstack::{Frame, FrameView, Measurement, StackStats};
use crate::report::snapshot::CompactSnapshot;
use crate::spans::SpanInfo;

/// Escapes a frame name for the folded format: `;` separates frames and a line ends at a
/// newline, so both are replaced; a trailing ` <digits>` would be read as the value.
pub fn escape(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded line of one stack (root first), or an empty string when its value is 0. Its span
/// path, if any, comes first as `[span target::name]` root frames.
pub fn line(s: &StackStats, m: Measurement, expand: bool) -> String {
    line_of(s.frames.iter(), &s.spans, s.measure(m), FrameView::expanded(expand))
}

/// The folded line of a stack with frames `frames` (innermost first), spans `spans` and value
/// `v`, shown in `view` (a folded run of framework frames is one frame,
/// `... 27 frames in tokio, std ...`); see [`line`].
fn line_of<'a>(
    frames: impl Iterator<Item = &'a Frame>,
    spans: &[SpanInfo],
    v: u64,
    view: FrameView,
) -> String {
    if v == 0 {
        return String::new();
    }
    let frames = crate::callstack::shown_frames(frames, view);
    let mut parts: Vec<String> = spans.iter().map(|sp| escape(&format!("[span {sp}]"))).collect();
    parts.extend(frames.iter().rev().map(|f| escape(&f.name())));
    if parts.is_empty() {
        parts.push("[unknown]".to_string());
    }
    format!("{} {v}", parts.join(";"))
}

/// Stacks kept in folded files and flamegraphs; the rest are summed into one line. A
/// flamegraph cannot show thousands of slivers anyway, and 10,000 stacks made a 5 MB report set.
pub const MAX_FOLDED_STACKS: usize = 2000;

/// All stacks folded, sorted for determinism; stacks printed alike are one line (framework
/// runs folded unless `expand`).
pub fn render(stacks: &[StackStats], m: Measurement, expand: bool) -> String {
    render_top(stacks, m, expand, usize::MAX)
}

/// The `limit` stacks largest by `m` folded, sorted; the others become one
/// `[N smaller stacks]` line carrying their total, so the file still adds up to the whole.
pub fn render_top(stacks: &[StackStats], m: Measurement, expand: bool, limit: usize) -> String {
    let view = FrameView::expanded(expand);
    let snap = CompactSnapshot::from_stacks(stacks).merge_printed(view);
    render_ranked(&snap, &snap.ranked(m), m, view, limit)
}

/// [`render_top`] of a compact snapshot (its rows merged in `view`) whose rows with a
/// non-zero `m`, ranked, are `ranked`. Only the `limit` lines written are built; stacks the
/// text report keeps apart for their line numbers, which folded stacks do not show, are one
/// line here.
pub(crate) fn render_ranked(
    snap: &CompactSnapshot,
    ranked: &[u32],
    m: Measurement,
    view: FrameView,
    limit: usize,
) -> String {
    let (top, rest) = ranked.split_at(ranked.len().min(limit));
    let mut lines: Vec<(String, u64)> = top
        .iter()
        .map(|&r| {
            let line = line_of(snap.frames_of(r), snap.spans_of(r), snap.row(r).measure(m), view);
            match line.rsplit_once(' ') {
                Some((stack, v)) => (stack.to_string(), v.parse().unwrap_or(0)),
                None => (line, 0),
            }
        })
        .collect();
    lines.sort();
    lines.dedup_by(|later, first| {
        let same = later.0 == first.0;
        if same {
            first.1 += later.1;
        }
        same
    });
    let mut lines: Vec<String> = lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect();
    if !rest.is_empty() {
        let total: u64 = rest.iter().map(|&r| snap.row(r).measure(m)).sum();
        lines.push(format!("[{} smaller stacks] {total}", rest.len()));
    }
    lines.sort();
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// The folded format of one stack's statistics, with the formats rather than with the data type.
impl StackStats {
    /// One folded-stack line (`root;...;leaf value`) weighted by `measurement` (0.3.0 name).
    pub fn dtrace_report<A: std::alloc::GlobalAlloc>(
        &self,
        _profiler: &crate::YingProfiler<A>,
        measurement: Measurement,
    ) -> String {
        line(self, measurement, false)
    }
}
