//! SVG flamegraphs rendered with `inferno` from the folded stacks: titled with what they
//! measure and the process, bytes in tooltips, and a placeholder SVG when there is nothing to
//! draw (inferno refuses empty input).

use inferno::flamegraph::{self, Options, color::BasicPalette, color::Palette};

use crate::callstack::Measurement;

/// What a flamegraph with nothing to draw says when nothing was sampled.
pub const NO_SAMPLES: &str = "no samples yet: nothing was sampled at this sampling interval";

/// Renders `folded` (as produced by [`super::folded::render`]) into an SVG.
pub fn render_svg(folded: &str, m: Measurement, title_suffix: &str) -> Result<Vec<u8>, String> {
    render_svg_noting(folded, m, title_suffix, NO_SAMPLES)
}

/// [`render_svg`], saying `empty_note` when there is nothing to draw (a report set says "no
/// samples" only when nothing was sampled).
pub fn render_svg_noting(
    folded: &str,
    m: Measurement,
    title_suffix: &str,
    empty_note: &str,
) -> Result<Vec<u8>, String> {
    let title = format!("Ying: {} bytes{}", m.label(), title_suffix);
    if folded.trim().is_empty() {
        return Ok(placeholder(&title, empty_note).into_bytes());
    }
    let mut opts = Options::default();
    opts.title = title;
    opts.count_name = "bytes".to_string();
    opts.colors = Palette::Basic(BasicPalette::Mem);
    opts.subtitle = Some(format!("width = estimated {} bytes", m.label()));
    opts.deterministic = true;
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, folded.lines(), &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn placeholder(title: &str, note: &str) -> String {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"80\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"600\" y=\"24\" text-anchor=\"middle\" font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"56\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n</svg>\n",
        xml_escape(title),
        xml_escape(note)
    )
}

/// The flamegraph of `r`'s entries by its measure, drawn from its folded stacks `fold`; when
/// there is nothing to draw it says why, and where the peak's flamegraph is when it is one of
/// the report set `stem`.
pub(crate) fn svg(
    r: &crate::report::model::Report,
    fold: &str,
    stem: Option<&str>,
) -> std::io::Result<Vec<u8>> {
    let m = r.opts.measurement;
    let ctx = &r.facts.process;
    let title = format!(" of {} (pid {})", ctx.exe_name(), ctx.pid);
    let note = empty_flamegraph_note(r, m, stem);
    render_svg_noting(fold, m, &title, &note)
        .map_err(|e| std::io::Error::other(format!("flamegraph: {e}")))
}

/// What the current flamegraph of a report set says when it has nothing to draw: "no
/// samples" only when nothing was sampled; otherwise that nothing is retained now and where
/// the peak flamegraph is (`stem`, the set's; None for a flamegraph outside a set).
pub(crate) fn empty_flamegraph_note(
    r: &crate::report::model::Report,
    m: Measurement,
    stem: Option<&str>,
) -> String {
    if r.entries() == 0 {
        return NO_SAMPLES.to_string();
    }
    match stem {
        Some(stem) => format!(
            "nothing {} {}; see the peak flamegraph {stem}.peak.svg",
            m.label(),
            r.facts.occasion.when()
        ),
        None => format!("nothing {} {}", m.label(), r.facts.occasion.when()),
    }
}
