//! The page's "Leak suspects" panel: the leak test ([`crate::report::leaks`]) on a process's
//! timeline, written as plain HTML (a text browser reads it; no script needed).
//!
//! A process's own page tests the stacks its timeline keeps for each dump, with the ages the
//! dump read (its top stacks by retained bytes). `ying view` passes the result of the same test
//! on the sets' manifests instead ([`crate::report::leaks::sets`]), since stacks read back from
//! pprof files carry no ages.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::esc;
use crate::report::human_bytes;
use crate::report::leaks::{self, Analysis, Observation, Series};
use crate::report::timeline::Timeline;

/// The leak test on `t`'s dumps.
pub(crate) fn of_timeline(t: &Timeline) -> Analysis {
    let mut series: BTreeMap<u32, Series> = BTreeMap::new();
    for d in &t.dumps {
        for s in &d.stacks {
            let e = series.entry(s.stack).or_insert_with(|| {
                let st = &t.stacks[s.stack as usize];
                let text = |f: u32| {
                    let l = &t.frames[f as usize];
                    if l.location.is_empty() {
                        l.name.clone()
                    } else {
                        format!("{} ({})", l.name, l.location)
                    }
                };
                Series {
                    name: text(st.label),
                    frames: st.frames.iter().rev().map(|&f| text(f)).collect(),
                    points: Vec::new(),
                }
            });
            e.points.push(Observation {
                t_ms: d.at.t_ms,
                bytes: s.retained as f64,
                stderr: f64::from(s.retained_stderr),
                age_ms: (s.age_ms >= 0.0).then_some(f64::from(s.age_ms)),
            });
        }
    }
    let window = match (t.dumps.front(), t.dumps.back()) {
        (Some(a), Some(b)) => b.at.t_ms.saturating_sub(a.at.t_ms),
        _ => 0,
    };
    let mut series: Vec<Series> = series.into_values().collect();
    let complete: Vec<u64> =
        t.dumps.iter().filter(|d| d.retained_complete).map(|d| d.at.t_ms).collect();
    leaks::fill_absent(&mut series, &complete);
    leaks::analyse(&series, t.dumps.len(), window)
}

/// The panel of `a`.
pub(crate) fn panel(o: &mut String, a: &Analysis) {
    let _ = writeln!(
        o,
        "<h3>Leak suspects</h3>\n<p class=\"leak-info\">{} dumps over {}, {} stacks seen in at \
         least {} dumps tested. A suspect's retained bytes grew beyond sampling noise (one-sided \
         z &gt; {:.2}, allowing for every stack tested) from its first dump to its last and from \
         the middle one to the last (a cache that filled and stopped is not one), and they are \
         on average at least {:.0} % of the window old.</p>",
        a.dumps,
        crate::report::human_millis(a.window_ms as f64),
        a.tested,
        leaks::MIN_POINTS,
        a.threshold,
        leaks::OLD_FRACTION * 100.0
    );
    if a.suspects.is_empty() {
        match leaks::too_few_dumps(a) {
            Some(why) => {
                let _ = writeln!(o, "<p class=\"no-leaks\">No leak suspect: {}.</p>", esc(&why));
            }
            None => o.push_str("<p class=\"no-leaks\">No leak suspect.</p>\n"),
        }
        return;
    }
    o.push_str(
        "<table class=\"leaks\">\n<tr><th>#</th><th class=\"n\">growth per hour</th>\
         <th class=\"n\">z</th><th class=\"n\">p</th><th class=\"n\">retained</th>\
         <th class=\"n\">mean age</th><th>stack</th></tr>\n",
    );
    for (i, s) in a.suspects.iter().enumerate() {
        let frames: Vec<String> = s.frames.iter().take(6).map(|f| esc(f)).collect();
        let _ = writeln!(
            o,
            "<tr class=\"suspect\"><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td><strong>{}</strong><br><span class=\"loc\">{}</span></td></tr>",
            i + 1,
            human_bytes(s.bytes_per_hour.max(0.0) as u64),
            s.z,
            leaks::p_text(s.p),
            human_bytes(s.retained.max(0.0) as u64),
            crate::report::human_millis(s.age_ms),
            esc(&s.name),
            frames.join("<br>")
        );
    }
    o.push_str("</table>\n");
}
