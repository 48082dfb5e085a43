//! Collapsed ("folded") stacks: `root;caller;...;leaf value`, one line per stack, the input
//! format of flamegraph tools. Values are estimated bytes of the chosen measure.

use crate::callstack::{Frame, Measurement, StackStats};
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
    line_of(s.frames.iter(), &s.spans, s.measure(m), expand)
}

/// The folded line of a stack with frames `frames` (innermost first), spans `spans` and value
/// `v`; see [`line`].
fn line_of<'a>(
    frames: impl Iterator<Item = &'a Frame>,
    spans: &[SpanInfo],
    v: u64,
    expand: bool,
) -> String {
    if v == 0 {
        return String::new();
    }
    let frames = crate::callstack::display_frames(frames, expand);
    let mut parts: Vec<String> = spans.iter().map(|sp| escape(&format!("[span {sp}]"))).collect();
    parts.extend(frames.iter().rev().map(|f| escape(&f.function)));
    if parts.is_empty() {
        parts.push("[unknown]".to_string());
    }
    format!("{} {v}", parts.join(";"))
}

/// Stacks kept in folded files and flamegraphs; the rest are summed into one line. A
/// flamegraph cannot show thousands of slivers anyway, and 10,000 stacks made a 5 MB report set.
pub const MAX_FOLDED_STACKS: usize = 2000;

/// All stacks folded, sorted for determinism.
pub fn render(stacks: &[StackStats], m: Measurement, expand: bool) -> String {
    render_top(stacks, m, expand, usize::MAX)
}

/// The `limit` stacks largest by `m` folded, sorted; the others become one
/// `[N smaller stacks]` line carrying their total, so the file still adds up to the whole.
pub fn render_top(stacks: &[StackStats], m: Measurement, expand: bool, limit: usize) -> String {
    let snap = CompactSnapshot::from_stacks(stacks);
    render_ranked(&snap, &snap.ranked(m), m, expand, limit)
}

/// [`render_top`] of a compact snapshot whose rows with a non-zero `m`, ranked, are `ranked`.
/// Only the `limit` lines written are built.
pub(crate) fn render_ranked(
    snap: &CompactSnapshot,
    ranked: &[u32],
    m: Measurement,
    expand: bool,
    limit: usize,
) -> String {
    let (top, rest) = ranked.split_at(ranked.len().min(limit));
    let mut lines: Vec<String> = top
        .iter()
        .map(|&r| line_of(snap.frames_of(r), snap.spans_of(r), snap.row(r).measure(m), expand))
        .collect();
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
