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

/// All stacks folded, sorted for determinism.
pub fn render(stacks: &[StackStats], m: Measurement, expand: bool) -> String {
    let mut lines: Vec<String> =
        stacks.iter().map(|s| line(s, m, expand)).filter(|l| !l.is_empty()).collect();
    lines.sort();
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}
