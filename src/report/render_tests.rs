//! Tests of the renderers against reports built by hand: every output is a function of the
//! model alone.

use crate::callstack::{Measurement, StackStats};
use crate::report::ReportOptions;
use crate::report::model::fixtures::stack;
use crate::report::model::{Occasion, Report};

/// A report whose facts were set by hand: every header fact the text and the manifest show
/// comes from the model, none from the process, and rendering it twice gives the same bytes.
#[test]
fn outputs_render_the_facts_of_a_hand_built_report() {
    use crate::engine::mapped::MappedState;
    use crate::report::{ReportContext, ReportPaths};
    let stacks = [stack(0x10, 7, 1), stack(0x11, 7, 2), stack(0x10, 8, 4)];
    let mut r = Report::from_stacks(&stacks, &ReportOptions::default());
    r.facts.process = ReportContext {
        pid: 4242,
        instance: None,
        exe: "/usr/bin/python3.13".into(),
        rss_kib: Some(2048),
        anon_rss_kib: Some(1024),
    };
    r.facts.occasion =
        Occasion { reason: Some("signal SIGUSR1 (pid 7)".into()), exiting: true, ended: None };
    r.facts.foreign_malloc = Some("/usr/lib/libjemalloc.so.2".into());
    r.facts.mapped = MappedState::Counted { bytes: 8192, regions: 2 };
    r.facts.totals.allocated_bytes = 123_456;
    r.facts.sample_interval = 4096;
    let text = crate::report::text::render_report(&r);
    assert_eq!(text, crate::report::text::render_report(&r), "rendering is pure");
    for line in [
        "reason:             signal SIGUSR1 (pid 7)",
        "pid:                4242",
        "heap not seen:      malloc is /usr/lib/libjemalloc.so.2's",
        "python:             pymalloc's arenas are counted as anonymous mmaps",
        "mapped (exact):     8.0 KiB (8192 bytes) retained in 2 anonymous mmap regions",
        "sample interval:    4096 bytes (mean)",
        "rss:                2048 kB (anonymous 1024 kB)",
        "stacks:             3 sampled, 2 entries as printed",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    // The merged entry (rows 0 and 1) sums their figures.
    let ranked = r.ranked(Measurement::RetainedBytes);
    assert_eq!(r.figures(ranked[1]).measure(Measurement::AllocatedBytes), 3002);
    let paths = ReportPaths {
        text: Some("/some/dir/ying.python3.13.4242.0.20261205T000000Z.txt".into()),
        ..ReportPaths::default()
    };
    let json = crate::report::manifest::render(&r, "ying.python3.13.4242.0.x", &paths);
    let m: serde_json::Value = serde_json::from_str(&json).expect("the manifest is JSON");
    assert_eq!(m["format"], "ying-report-set");
    assert_eq!(m["pid"], 4242);
    assert_eq!(m["reason"], "signal SIGUSR1 (pid 7)");
    assert_eq!(m["exiting"], true);
    assert_eq!(m["foreign_malloc"], "/usr/lib/libjemalloc.so.2");
    assert_eq!(m["mapped"]["bytes"], 8192);
    assert_eq!(m["totals"]["allocated_bytes"], 123_456);
    assert_eq!(m["files"]["text"], "ying.python3.13.4242.0.20261205T000000Z.txt");
    assert_eq!(m["files"]["pprof"], serde_json::Value::Null);
    assert_eq!(m["stacks"]["sampled"], 3);
    assert_eq!(m["stacks"]["entries"], 2);
    let entries = m["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2);
    // Line 8's stack retains 401 bytes, the merged entry of lines 7 (rows 0 and 1) 302.
    assert_eq!(entries[0]["retained_bytes"], 401);
    assert_eq!(entries[0]["allocated_bytes"], 4001);
    assert_eq!(entries[1]["retained_bytes"], 101 + 201);
    assert_eq!(entries[1]["allocated_bytes"], 1001 + 2001);
    assert!(entries[0]["frames"][0].as_str().unwrap().starts_with("app::alloc_site"));
    // Beside each printed frame, its source path whole.
    let frames = entries[0]["frames"].as_array().unwrap();
    let sources = entries[0]["sources"].as_array().unwrap();
    assert_eq!(frames.len(), sources.len());
    assert_eq!(sources[0], "/app/src/main.rs:3");
    assert_eq!(m["peak_entries"].as_array().map(Vec::len), Some(2));
    // Nothing retained in an exit report: the note says "at exit", from the occasion.
    let mut freed = stacks.clone();
    for s in &mut freed {
        s.retained_bytes = 0;
    }
    let mut r = Report::from_stacks(&freed, &ReportOptions::default());
    r.facts.occasion.exiting = true;
    let text = crate::report::text::render_report(&r);
    assert!(text.contains("nothing sampled is retained at exit"), "{text}");
    r.facts.occasion.exiting = false;
    let text = crate::report::text::render_report(&r);
    assert!(text.contains("nothing sampled is retained now"), "{text}");
}

/// A ranking orders its first `depth` entries only (selected, then sorted); the rest are
/// counted and summed, so the folded stacks still add up to the whole and list the same
/// leading entries as a full sort would.
#[test]
fn partial_rankings_agree_with_a_full_sort() {
    let n = 2_600u64;
    let stacks: Vec<StackStats> = (0..n)
        .map(|i| {
            let mut s = stack(0x1000 + i as usize, 7, 1);
            s.frames[2].function = format!("app::handler_{i}").into();
            // Sizes repeat, so ties are broken by the other measure and by names.
            s.retained_bytes = 1 + (i * 7919) % 1000;
            s.allocated_bytes = 1 + (i * 104_729) % 5000;
            s
        })
        .collect();
    let opts = ReportOptions::default();
    let partial = Report::from_stacks(&stacks, &opts);
    let mut full = Report::from_stacks(&stacks, &opts);
    full.rank_all();
    for m in
        [Measurement::RetainedBytes, Measurement::AllocatedBytes, Measurement::RetainedBytesAtPeak]
    {
        assert_eq!(partial.ranked_len(m), n as usize);
        let depth = partial.ranked(m).len();
        assert!(depth >= crate::report::folded::MAX_FOLDED_STACKS && depth < n as usize);
        assert_eq!(partial.ranked(m), &full.ranked(m)[..depth], "{m:?}");
        assert_eq!(full.unranked_total(m), 0);
        let rest: u64 = full.ranked(m)[depth..].iter().map(|&e| full.figures(e).measure(m)).sum();
        assert_eq!(partial.unranked_total(m), rest, "{m:?}");
        let limit = crate::report::folded::MAX_FOLDED_STACKS;
        assert_eq!(
            crate::report::folded::render_report(&partial, m, limit),
            crate::report::folded::render_report(&full, m, limit),
            "{m:?}"
        );
    }
    let folded = crate::report::folded::render_report(&partial, Measurement::RetainedBytes, 2000);
    let total: u64 =
        folded.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(total, stacks.iter().map(|s| s.retained_bytes).sum::<u64>());
    assert!(folded.contains("[600 smaller stacks] "), "{}", &folded[folded.len() - 200..]);
}

/// The header's peak line says the sampled high-water mark is an estimate, and never prints it
/// below an exact figure the peak includes: the retained total of the report itself (a
/// program that keeps its memory to its exit) or the exact total at the kept peak.
#[test]
fn the_header_peak_is_never_below_an_exact_figure_it_includes() {
    use crate::engine::peak::Peak;
    let mib = 1u64 << 20;
    let header = |retained: u64, high_water: u64, exact: Option<u64>| {
        let mut r = Report::from_stacks(&[stack(0x10, 7, 1)], &ReportOptions::default());
        r.facts.occasion = Occasion { reason: None, exiting: true, ended: None };
        r.facts.totals.allocated_bytes = retained;
        r.facts.peak = Some(Peak {
            since_start: None,
            at: std::time::UNIX_EPOCH,
            estimated_bytes: high_water - mib,
            exact_bytes: exact,
            high_water_bytes: high_water,
            captures: 1,
        });
        let text = crate::report::text::render_report(&r);
        text.lines().find(|l| l.starts_with("peak")).unwrap_or_default().to_string()
    };
    let l = header(3 * mib, 28 * mib, Some(26 * mib));
    assert!(l.starts_with("peak (sampled):     28.0 MiB high-water; stacks kept at 27.0"), "{l}");
    let hw = 29 * mib + 820 * 1024;
    let l = header(30 * mib, hw, Some(29 * mib));
    assert!(
        l.starts_with(
            "peak:               ≥30.0 MiB (exact, retained at exit; the sampled high-water \
             ≈29.8 MiB is below it); stacks kept at"
        ),
        "{l}"
    );
    let l = header(2 * mib, 20 * mib, Some(21 * mib));
    assert!(
        l.starts_with("peak:               ≥21.0 MiB (exact, retained at the kept peak;"),
        "{l}"
    );
}

/// The text opens on the answer: when retained at the report is under a tenth of the peak, a
/// `first read:` line says so and the PEAK section comes before the stacks retained now;
/// otherwise the order is as it was. An entry whose interval reaches zero is marked.
#[test]
fn the_text_leads_with_the_peak_when_little_is_left_and_marks_noise() {
    use crate::engine::peak::Peak;
    let mib = 1u64 << 20;
    let render = |retained: u64, noisy: bool| {
        let mut s = [stack(0x10, 7, 1), stack(0x11, 8, 2)];
        // The first stack's estimate is one sample's weight: its interval reaches zero.
        s[0].variance.retained_bytes = if noisy { 101.0 * 101.0 } else { 0.0 };
        let mut r = Report::from_stacks(&s, &ReportOptions::default());
        r.facts.occasion = Occasion { reason: None, exiting: true, ended: None };
        r.facts.totals.allocated_bytes = retained;
        r.facts.peak = Some(Peak {
            since_start: None,
            at: std::time::UNIX_EPOCH,
            estimated_bytes: 99 * mib,
            exact_bytes: Some(98 * mib),
            high_water_bytes: 100 * mib,
            captures: 1,
        });
        crate::report::text::render_report(&r)
    };
    let text = render(mib, true);
    let second = text.lines().nth(1).unwrap_or_default();
    assert!(
        second.starts_with(
            "first read:         retained at exit is 1.0 % of the peak (100.0 MiB high-water)"
        ),
        "{text}"
    );
    let at = |what: &str| text.find(what).unwrap_or_else(|| panic!("{what:?} in:\n{text}"));
    assert!(at("\nPEAK\n") < at("\nRETAINED AT EXIT\n"), "{text}");
    assert!(at("\nRETAINED AT EXIT\n") < at("\n#1 retained"), "{text}");
    // The noisy stack (101 bytes ± 198) is #2 by retained bytes; the other is clearly there.
    let marked: Vec<&str> = text
        .split("\n#")
        .filter(|b| b.contains("within sampling noise: its 95 % interval reaches 0 (3 samples)"))
        .collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].starts_with("2 retained 101 B"), "{text}");
    // A third of the peak still held: the stacks retained now first, no `first read:` line.
    let text = render(40 * mib, false);
    assert!(!text.contains("first read:") && !text.contains("RETAINED AT EXIT"), "{text}");
    assert!(text.find("\n#1 retained") < text.find("\nPEAK\n"), "{text}");
    assert!(!text.contains("within sampling noise"), "{text}");
}
