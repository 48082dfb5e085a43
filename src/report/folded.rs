//! Collapsed ("folded") stacks: `root;caller;...;leaf value`, one line per stack, the input
//! format of flamegraph tools. Values are estimated bytes of the chosen measure.

use crate::callstack::{Measurement, StackStats};

/// Escapes a frame name for the folded format: `;` separates frames and a line ends at a
/// newline, so both are replaced; a trailing ` <digits>` would be read as the value.
pub fn escape(name: &str) -> String {
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// The folded line of one stack (root first), or an empty string when its value is 0. Its span
/// path, if any, comes first as `[span target::name]` root frames.
pub fn line(s: &StackStats, m: Measurement, expand: bool) -> String {
    let v = s.measure(m);
    if v == 0 {
        return String::new();
    }
    let frames = s.display_frames(expand);
    let mut parts: Vec<String> = s.spans.iter().map(|sp| escape(&format!("[span {sp}]"))).collect();
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
    let mut ranked: Vec<&StackStats> = stacks.iter().filter(|s| s.measure(m) > 0).collect();
    crate::snapshot::sort_stacks(&mut ranked, m);
    let rest = ranked.split_off(ranked.len().min(limit));
    let mut lines: Vec<String> = ranked.iter().map(|s| line(s, m, expand)).collect();
    if !rest.is_empty() {
        let total: u64 = rest.iter().map(|s| s.measure(m)).sum();
        lines.push(format!("[{} smaller stacks] {total}", rest.len()));
    }
    lines.sort();
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}
