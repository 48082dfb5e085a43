//! `ying.<exe>.<pid>.html`: one self-contained page per process, rewritten at each dump, with
//! the memory of the process over time ([`super::timeline`]), its leak suspects (`suspects.rs`,
//! [`super::leaks`]), each dump's top stacks, its flamegraph and its peak, and the diff of any
//! two dumps (each stack's change weighed against sampling noise as [`super::noise`] says).
//!
//! The page is plain HTML first: a summary (totals, the peak, the leak suspects, the top stacks
//! of the last dump) that a text browser or `less` reads, then the data as JSON and a small script
//! (`ying.js`, about 20 KB, with `ying.css` included in the page) that draws the chart, the
//! dump picker, the flamegraphs and the diff. Nothing is loaded from anywhere: the page's
//! Content-Security-Policy forbids every request, so it opens the same on an air-gapped host.
//!
//! Why a hand-written renderer rather than uPlot and d3-flame-graph: the page needs one
//! stacked chart and one flamegraph drawn from data the crate already shapes, and the two
//! libraries with d3 would be about 300 KB per page and a vendoring step; the script draws
//! the chart as SVG and the flamegraph as positioned elements, so the browser test reads stack
//! names, values and colours from the DOM.
//!
//! Size: each stack is stored once (frames interned, a stack a list of frame indices), each
//! dump lists only the stacks the timeline keeps for it (see [`super::timeline`]) as 8 numbers,
//! the rest one "others" figure. Measured by the tests: a 10,000-stack, 100-dump timeline is
//! well under 5 MB (the test prints the size).

use std::fmt::Write as _;

pub(crate) mod suspects;
mod view;
pub use view::{VIEW_FILE, write_view};

use super::timeline::{Dump, Timeline};
use super::{human_bytes, plus_minus_bytes, utc_timestamp};

const SCRIPT: &str = include_str!("ying.js");
const STYLE: &str = include_str!("ying.css");

/// The file name of a process's HTML report: `ying.<exe>.<pid>-<instance>.html`.
pub fn file_name(exe_name: &str, process: super::ProcessId) -> String {
    format!("ying.{exe_name}.{process}.html")
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A JSON string literal, with `<` escaped so that no `</script>` can end the data block.
fn json_str(o: &mut String, s: &str) {
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '<' => o.push_str("\\u003c"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
}

fn when(ms: u64) -> String {
    utc_timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms), true)
}

/// The executable's file name.
fn short_exe(exe: &str) -> &str {
    exe.rsplit('/').next().unwrap_or(exe)
}

/// The page for the timelines of one or more processes, `title` in its heading. Hidden with
/// [`crate::report::timeline`], for the same test: the runner renders its own page at each dump.
#[doc(hidden)]
pub fn render(timelines: &[&Timeline], title: &str) -> String {
    render_with(timelines, &[], title)
}

/// [`render`], with the leak test's result for each timeline given (`leaks[i]` for
/// `timelines[i]`; a missing one is computed from the timeline).
pub(crate) fn render_with(
    timelines: &[&Timeline],
    leaks: &[Option<crate::report::leaks::Analysis>],
    title: &str,
) -> String {
    let mut o = String::with_capacity(64 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style></head>\n<body>\n<h1>{}</h1>\n",
        esc(title),
        esc(title)
    );
    let _ = writeln!(
        o,
        "<p class=\"note\">Written by ying {} at {}. The summary below is plain HTML; the chart, \
         the dump picker, the flamegraphs and the diff need JavaScript.</p>",
        env!("CARGO_PKG_VERSION"),
        utc_timestamp(std::time::SystemTime::now(), true)
    );
    for (i, t) in timelines.iter().enumerate() {
        summary(&mut o, i, t, leaks.get(i).and_then(Option::as_ref));
    }
    o.push_str("<script type=\"application/json\" id=\"ying-data\">");
    data(&mut o, timelines);
    o.push_str("</script>\n<script>\n");
    o.push_str(SCRIPT);
    o.push_str("</script>\n</body></html>\n");
    o
}

/// The plain-HTML summary of one process: totals, the peak, the leak suspects (`leaks`, else
/// tested on `t`), the top stacks of its last dump.
fn summary(o: &mut String, i: usize, t: &Timeline, leaks: Option<&crate::report::leaks::Analysis>) {
    let _ = writeln!(
        o,
        "<section class=\"process\" id=\"ying-process-{i}\">\n<h2>{} (pid {})</h2>",
        esc(short_exe(&t.exe)),
        t.pid
    );
    if let Some(note) = &t.note {
        let _ = writeln!(o, "<p class=\"ended\"><strong>{}</strong></p>", esc(note));
    }
    let Some(last) = t.dumps.back() else {
        o.push_str("<p>No dump yet.</p>\n</section>\n");
        return;
    };
    let first = t.dumps.front().unwrap_or(last);
    let _ = writeln!(
        o,
        "<p class=\"summary\">{} dumps from {} to {}; executable <code>{}</code>.</p>",
        t.dumps.len(),
        when(first.at.t_ms),
        when(last.at.t_ms),
        esc(&t.exe)
    );
    o.push_str("<table class=\"totals\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(o, "<tr><th>{k}</th><td class=\"n\">{}</td></tr>", esc(&v));
    };
    // The high-water mark is an estimate: when an exact figure it includes (the retained total
    // at a dump, the exact total at the kept peak) is above it, the peak was at least
    // that, which is printed instead and said.
    let peak = if last.peak_estimated > 0 {
        let dumps = t.dumps.iter().map(|d| d.at.retained).max().unwrap_or(0);
        let floor = dumps.max(last.peak_exact);
        let head = if floor > last.at.peak {
            format!(
                "at least {} (exact, {}; the sampled high-water ≈{} is below it)",
                human_bytes(floor),
                if floor == last.at.retained {
                    "retained at the last dump"
                } else if floor == dumps {
                    "retained at an earlier dump"
                } else {
                    "retained at the kept peak"
                },
                human_bytes(last.at.peak)
            )
        } else {
            format!("≈{} (sampled high-water)", human_bytes(last.at.peak))
        };
        format!(
            "{head}; kept peak at {}: {} estimated{}",
            when(last.peak_t_ms),
            human_bytes(last.peak_estimated),
            if last.peak_exact > 0 {
                format!(", {} exact", human_bytes(last.peak_exact))
            } else {
                String::new()
            },
        )
    } else {
        "none kept yet".to_string()
    };
    // A page of one dump (a short program) leads with its peak.
    let single = t.dumps.len() == 1;
    if single {
        row("peak", peak.clone());
    }
    row(
        "retained (exact) at the last dump",
        format!("{} ({} bytes)", human_bytes(last.at.retained), last.at.retained),
    );
    row("allocated since start", human_bytes(last.at.allocated));
    row("resident set (RSS)", human_bytes(last.at.rss));
    if !single {
        row("retained at the first dump", human_bytes(first.at.retained));
        row("peak", peak);
    }
    row("stacks sampled", last.stacks_sampled.to_string());
    o.push_str("</table>\n");
    rss_table(o, last);
    match leaks {
        Some(a) => suspects::panel(o, a),
        None => suspects::panel(o, &suspects::of_timeline(t)),
    }
    let shown = t.dump_that_matters().and_then(|i| t.dumps.get(i)).unwrap_or(last);
    top_table(o, t, shown, last);
    groups_tables(o, shown);
    o.push_str("</section>\n");
}

/// Memory per Tokio task kind and per span at dump `d`, as the text report's `BY TASK` and
/// `BY SPAN` sections (`model/groups.rs`); nothing for a dump that has none.
fn groups_tables(o: &mut String, d: &Dump) {
    let pm = |v: u64, se: f32| format!("{}{}", human_bytes(v), plus_minus_bytes(f64::from(se)));
    for (rows, title, what) in [
        (&d.tasks, "Memory by task: each Tokio task kind named by the future it runs", "task"),
        (&d.spans, "Memory by span: the innermost span entered at allocation", "span"),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "<h3>{title} (dump {})</h3>\n<table class=\"groups\">\n<tr><th class=\"n\">retained</th>\
             <th class=\"n\">allocated</th><th class=\"n\">stacks</th><th>{what}</th></tr>",
            d.seq
        );
        for g in rows {
            let _ = writeln!(
                o,
                "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td>{}</td></tr>",
                pm(g.retained, g.retained_stderr),
                pm(g.allocated, g.allocated_stderr),
                g.stacks,
                esc(&g.name)
            );
        }
        o.push_str("</table>\n");
    }
}

/// The resident set's parts at dump `d` (`model/rss.rs`), with what each one is.
fn rss_table(o: &mut String, d: &Dump) {
    if d.rss_parts.is_empty() {
        return;
    }
    use crate::report::model::rss::Part;
    let rank = |k: &str| Part::ALL.iter().position(|p| p.key() == k).unwrap_or(Part::ALL.len());
    let mut parts = d.rss_parts.clone();
    parts.sort_by_key(|(k, _)| rank(k));
    let total: u64 = parts.iter().map(|(_, b)| b).sum();
    let _ = writeln!(
        o,
        "<h3>Resident set at dump {}: {} (/proc/self/smaps), the sum of</h3>\n<table class=\"rss\">",
        d.seq,
        human_bytes(total)
    );
    for (key, bytes) in &parts {
        let part = Part::ALL.iter().find(|p| p.key() == key);
        let _ = writeln!(
            o,
            "<tr><th>{}</th><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(part.map_or(key.as_str(), |p| p.label())),
            human_bytes(*bytes),
            esc(part.map_or("", |p| p.meaning()))
        );
    }
    o.push_str("</table>\n");
}

/// The top stacks of `d` by retained bytes, as a plain table; `last` is the last dump (`d`
/// unless the page opens on the largest, [`Timeline::dump_that_matters`], which is said).
/// No table when no stack retained bytes at `d`: a line says so instead.
fn top_table(o: &mut String, t: &Timeline, d: &Dump, last: &Dump) {
    let mut rows: Vec<_> = d.stacks.iter().filter(|s| s.retained > 0).collect();
    rows.sort_by_key(|s| std::cmp::Reverse(s.retained));
    let why = if d.seq == last.seq {
        String::new()
    } else {
        format!(
            "; the largest, shown instead of the last one, dump {}, which retained {} (exact)",
            last.seq,
            human_bytes(last.at.retained)
        )
    };
    let _ = writeln!(
        o,
        "<h3>Top stacks by retained bytes at dump {} ({}{})</h3>",
        d.seq,
        d.stem,
        esc(&why)
    );
    if rows.is_empty() {
        let _ = writeln!(
            o,
            "<p class=\"top-empty\">No sampled stack retained bytes at this dump: its stacks had \
             freed what they held ({} retained, exact). The peak above holds what they held at \
             its height.</p>",
            human_bytes(d.at.retained)
        );
        return;
    }
    // The span path of a stack, when the program has spans: one function under two spans is
    // two rows, told apart by this column.
    let span_of = |s: &crate::report::timeline::StackFigures| {
        let names = t.stacks[s.stack as usize].frames.iter().map(|&f| &t.frames[f as usize].name);
        names
            .filter_map(|n| n.strip_prefix("[span ").and_then(|n| n.strip_suffix(']')))
            .collect::<Vec<_>>()
            .join(" > ")
    };
    let spans = rows.iter().take(10).any(|s| !span_of(s).is_empty());
    let _ = writeln!(
        o,
        "<table class=\"top\">\n<tr><th>#</th><th class=\"n\">retained</th>\
         <th class=\"n\">resident</th><th class=\"n\">allocated</th><th>function</th>\
         <th>file:line</th>{}</tr>",
        if spans { "<th>span</th>" } else { "" }
    );
    for (k, s) in rows.iter().take(10).enumerate() {
        let st = &t.stacks[s.stack as usize];
        let f = &t.frames[st.label as usize];
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td><td class=\"loc\">{}</td>{}</tr>",
            k + 1,
            human_bytes(s.retained),
            crate::report::plus_minus_bytes(f64::from(s.retained_stderr)),
            s.resident.map_or_else(|| "-".to_string(), human_bytes),
            human_bytes(s.allocated),
            esc(&f.name),
            esc(&f.location),
            if spans { format!("<td>{}</td>", esc(&span_of(s))) } else { String::new() }
        );
    }
    o.push_str("</table>\n");
}

/// The timelines as the script reads them (see `ying.js`).
fn data(o: &mut String, timelines: &[&Timeline]) {
    o.push_str("{\"processes\":[");
    for (i, t) in timelines.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str("{\"exe\":");
        json_str(o, &t.exe);
        let open = t.dump_that_matters().unwrap_or(0);
        let _ = write!(o, ",\"pid\":{},\"open\":{open},\"frames\":[", t.pid);
        for (k, f) in t.frames.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            o.push('[');
            json_str(o, &f.name);
            o.push(',');
            json_str(o, &f.location);
            o.push(']');
        }
        o.push_str("],\n\"stacks\":[");
        for (k, s) in t.stacks.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            let _ = write!(o, "[{}", s.label);
            for f in s.frames.iter() {
                let _ = write!(o, ",{f}");
            }
            o.push(']');
        }
        o.push_str("],\n\"points\":[");
        for (k, p) in t.points.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            let _ = write!(o, "[{},{},{},{},{}]", p.t_ms, p.retained, p.allocated, p.rss, p.peak);
        }
        o.push_str("],\n\"dumps\":[");
        for (k, d) in t.dumps.iter().enumerate() {
            if k > 0 {
                o.push_str(",\n");
            }
            let _ = write!(o, "{{\"seq\":{},\"stem\":", d.seq);
            json_str(o, &d.stem);
            let _ = write!(
                o,
                ",\"t\":{},\"retained\":{},\"allocated\":{},\"rss\":{},\"peak\":{},\
                 \"est_retained\":{},\"est_allocated\":{},\"peak_est\":{},\"peak_exact\":{},\
                 \"peak_t\":{},\"sampled\":{},\"detail\":{},\"s\":[",
                d.at.t_ms,
                d.at.retained,
                d.at.allocated,
                d.at.rss,
                d.at.peak,
                d.est_retained,
                d.est_allocated,
                d.peak_estimated,
                d.peak_exact,
                d.peak_t_ms,
                d.stacks_sampled,
                d.detail
            );
            for (j, s) in d.stacks.iter().enumerate() {
                if j > 0 {
                    o.push(',');
                }
                let ms =
                    |v: f32| if v >= 0.0 { format!("{}", v.round() as i64) } else { "-1".into() };
                let _ = write!(
                    o,
                    "[{},{},{},{},{},{},{},{},{},{}]",
                    s.stack,
                    s.retained,
                    s.allocated,
                    s.alloc_count,
                    s.retained_count,
                    s.peak,
                    ms(s.lifetime_ms),
                    ms(s.age_ms),
                    s.retained_stderr.round() as u64,
                    s.resident.map_or(-1, |r| i64::try_from(r).unwrap_or(i64::MAX))
                );
            }
            o.push_str("]}");
        }
        o.push_str("]}");
    }
    o.push_str("]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_cannot_close_the_script() {
        let mut o = String::new();
        json_str(&mut o, "a</script>\"\\\n");
        assert_eq!(o, "\"a\\u003c/script>\\\"\\\\\\u000a\"");
        assert_eq!(esc("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }

    #[test]
    fn a_dump_with_tasks_shows_them_and_one_without_shows_nothing() {
        use crate::report::timeline::GroupFigures;
        let row = |name: &str, retained| GroupFigures {
            name: name.into(),
            retained,
            retained_stderr: 1000.0,
            allocated: 5 << 20,
            allocated_stderr: 0.0,
            stacks: 3,
        };
        let mut d = Dump {
            seq: 4,
            tasks: vec![row("svc::leak<T>", 8 << 20), row("svc::worker", 1 << 20)],
            ..Dump::default()
        };
        let mut o = String::new();
        groups_tables(&mut o, &d);
        assert!(o.contains("Memory by task"), "{o}");
        assert!(!o.contains("Memory by span"), "no spans, no table: {o}");
        assert!(o.contains("<td class=\"n\">8.0 MiB ± 1.9 KiB</td>"), "{o}");
        assert!(o.contains("<td>svc::leak&lt;T&gt;</td>"), "names are escaped: {o}");
        assert!(o.find("svc::leak") < o.find("svc::worker"), "in the dump's order: {o}");
        d.tasks.clear();
        let mut o = String::new();
        groups_tables(&mut o, &d);
        assert!(o.is_empty(), "{o}");
    }

    #[test]
    fn the_page_is_no_file_of_a_set_so_the_set_limit_keeps_it() {
        use crate::report::ProcessId;
        let app = ProcessId { pid: 42, instance: Some(0xab) };
        let name = file_name("app", app);
        assert_eq!(name, "ying.app.42-000000ab.html");
        assert_eq!(crate::report::files::set_seq_of(&name, "app", app), None);
        let view = ProcessId { pid: 0, instance: None };
        assert_eq!(crate::report::files::set_seq_of(VIEW_FILE, "view", view), None);
    }
}
