//! Collapsed ("folded") stacks: `root;caller;...;leaf value`, one line per stack, the input
//! format of flamegraph tools. Values are estimated bytes of the chosen measure.

use crate::callstack::{Frame, FrameView, Measurement, StackStats};
use crate::report::ReportOptions;
use crate::report::model::Report;
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
pub const MAX_FOLDED_STACKS: usize = crate::report::model::FOLDED_STACKS;

/// All stacks folded, sorted for determinism; stacks printed alike are one line (framework
/// runs folded unless `expand`).
pub fn render(stacks: &[StackStats], m: Measurement, expand: bool) -> String {
    render_top(stacks, m, expand, usize::MAX)
}

/// The `limit` stacks largest by `m` folded, sorted; the others become one
/// `[N smaller stacks]` line carrying their total, so the file still adds up to the whole.
pub fn render_top(stacks: &[StackStats], m: Measurement, expand: bool, limit: usize) -> String {
    let opts = ReportOptions {
        measurement: m,
        top_k: 0,
        expand_frames: expand,
        fold_framework_frames: true,
        gen_flamegraphs: false,
    };
    render_report(&Report::from_stacks(stacks, &opts), m, limit)
}

/// The folded stacks of `r`'s entries (in its frame view): the `limit` largest by `m`, sorted,
/// the others one `[N smaller stacks]` line. Only the `limit` lines written are built; entries
/// the text report keeps apart for their line numbers, which folded stacks do not show, are one
/// line here.
pub(crate) fn render_report(r: &Report, m: Measurement, limit: usize) -> String {
    let view = r.opts.view();
    let ranked = r.ranked(m);
    let (top, rest) = ranked.split_at(ranked.len().min(limit));
    let mut lines: Vec<(String, u64)> = top
        .iter()
        .map(|&e| {
            let line = line_of(r.frames_of(e), r.spans_of(e), r.figures(e).measure(m), view);
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
    let rest_len = r.ranked_len(m) - top.len();
    if rest_len > 0 {
        let total: u64 =
            rest.iter().map(|&e| r.figures(e).measure(m)).sum::<u64>() + r.unranked_total(m);
        lines.push(format!("[{rest_len} smaller stacks] {total}"));
    }
    lines.sort();
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}
