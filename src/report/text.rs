//! The human report: a header with exact totals and sampled estimates, then the top stacks,
//! each with its figures, lifetime histogram, age of retained bytes and frames. The order is
//! deterministic so golden files can pin the format.
//!
//! It opens on the answer. When what is retained at the report is a small part of the peak
//! ([`PEAK_FIRST_BELOW_PCT`]: a program that frees its data before it exits, a service between
//! bursts), the stacks retained now are not what the reader came for: a `first read:` line
//! says so and the PEAK section comes before them. An entry whose 95 % interval reaches zero
//! (one or two samples) is marked as within sampling noise, so that a reader does not take a
//! single sample's weight for a culprit.
//!
//! After the stacks, a Tokio program's memory per task kind and a `profile_spans` program's
//! per span (`model/groups.rs`), each row with its interval.

use std::fmt::Write;

use super::{
    ReportContext, ReportOptions, human_bytes, plus_minus_bytes, plus_minus_count, utc_timestamp,
};
use crate::callstack::{FrameView, Measurement, StackStats};
use crate::engine::mapped::MappedState;
use crate::report::model::Report;
use crate::report::model::groups::{self, Group};
use crate::report::snapshot::{Peak, Snapshot};

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The block of one stack. `rank` prefixes it with `#n` and shares of `totals` (allocated,
/// retained) when given.
pub fn stack_block(
    s: &StackStats,
    rank: Option<(usize, u64, u64)>,
    with_filenames: bool,
    expand: bool,
) -> String {
    stack_block_ranked_by(s, rank, Measurement::RetainedBytes, with_filenames, expand)
}

/// Like [`stack_block`], led by the figure the report ranks by: the retained line first for
/// [`Measurement::RetainedBytes`], the allocated line first for
/// [`Measurement::AllocatedBytes`] (a report of churn, whose top stacks often retain nothing).
pub fn stack_block_ranked_by(
    s: &StackStats,
    rank: Option<(usize, u64, u64)>,
    m: Measurement,
    with_filenames: bool,
    expand: bool,
) -> String {
    stack_block_in(s, rank, m, with_filenames, FrameView::expanded(expand), None)
}

/// [`stack_block_ranked_by`] with its frames shown in `view`; `uptime_ms`, the process's life
/// when known, lets a ranked entry say it was never freed (see `never_freed_line`).
pub(crate) fn stack_block_in(
    s: &StackStats,
    rank: Option<(usize, u64, u64)>,
    m: Measurement,
    with_filenames: bool,
    view: FrameView,
    uptime_ms: Option<u64>,
) -> String {
    let mut o = String::new();
    let (head, est_alloc, est_ret) = match rank {
        Some((n, a, r)) => (format!("#{n} "), a, r),
        None => (String::new(), 0, 0),
    };
    let share = |v: u64, w: u64| {
        if rank.is_some() { format!(", {} of estimated", pct(v, w)) } else { String::new() }
    };
    let v = &s.variance;
    let (b, c) = (|v: f64| plus_minus_bytes(v.sqrt()), |v: f64| plus_minus_count(v.sqrt()));
    let retained = format!(
        "retained {}{} ({} bytes{}) in {}{} allocations{}",
        human_bytes(s.retained_bytes),
        b(v.retained_bytes),
        s.retained_bytes,
        share(s.retained_bytes, est_ret),
        s.retained_count,
        c(v.retained_count),
        residency(s),
    );
    let allocated = format!(
        "allocated {}{} ({} bytes{}) in {}{} allocations; freed {}{} ({} bytes) in {}{} frees",
        human_bytes(s.allocated_bytes),
        b(v.allocated_bytes),
        s.allocated_bytes,
        share(s.allocated_bytes, est_alloc),
        s.num_allocations,
        c(v.num_allocations),
        human_bytes(s.freed_bytes),
        b(v.freed_bytes),
        s.freed_bytes,
        s.num_frees,
        c(v.num_frees),
    );
    let (first, second) = match m {
        Measurement::RetainedBytes | Measurement::RetainedBytesAtPeak => (retained, allocated),
        Measurement::AllocatedBytes => (allocated, retained),
    };
    let _ = writeln!(o, "{head}{first}");
    let (value, var) = match m {
        Measurement::RetainedBytes => (s.retained_bytes, v.retained_bytes),
        Measurement::RetainedBytesAtPeak => (s.peak_retained_bytes, v.peak_retained_bytes),
        Measurement::AllocatedBytes => (s.allocated_bytes, v.allocated_bytes),
    };
    if rank.is_some() {
        o.push_str(&noise_line(value, var, s.samples));
    }
    if let (Some(uptime), Measurement::RetainedBytes) = (uptime_ms, m) {
        o.push_str(&never_freed_line(s, uptime));
    }
    let _ = writeln!(o, "   {second}");
    let _ = writeln!(o, "   samples: {} ({} live)", s.samples, s.live_samples);
    let _ = writeln!(o, "   lifetimes of freed allocations: {}", s.lifetimes);
    let _ = writeln!(o, "   age of retained bytes: {}", s.retained_age);
    write_spans_and_frames(&mut o, s, view, with_filenames);
    o
}

/// `   within sampling noise: ...` under a ranked entry whose 95 % interval for `value`
/// (variance `var`) reaches zero; nothing otherwise. Not "it may be nothing": a live sample
/// proves a block is there; what the interval says is that its size is uncertain.
fn noise_line(value: u64, var: f64, samples: u64) -> String {
    if value == 0 || super::Z95 * var.max(0.0).sqrt() < value as f64 {
        return String::new();
    }
    let n = if samples == 1 { "1 sample".to_string() } else { format!("{samples} samples") };
    format!("   within sampling noise: its 95 % interval reaches 0 ({n}); its size is uncertain\n")
}

/// Live samples a stack needs before one report calls it never freed (fewer say too little).
pub const NEVER_FREED_MIN_SAMPLES: u64 = 5;

/// `   never freed: ...` under a ranked entry whose sampled blocks are all still live (at least
/// [`NEVER_FREED_MIN_SAMPLES`], none freed) and whose retained bytes are on average at least
/// [`crate::report::leaks::OLD_FRACTION`] of the process's life old (`uptime_ms`): the one-dump
/// evidence of a leak. A cache that never evicts looks the same in one dump, which the line
/// says; the trend test (`report::leaks`) tells them apart from three.
fn never_freed_line(s: &StackStats, uptime_ms: u64) -> String {
    if s.samples < NEVER_FREED_MIN_SAMPLES || s.live_samples != s.samples || s.num_frees != 0 {
        return String::new();
    }
    if s.retained_age.is_empty() {
        return String::new();
    }
    let age = s.retained_age.average_millis();
    if uptime_ms == 0 || age < crate::report::leaks::OLD_FRACTION * uptime_ms as f64 {
        return String::new();
    }
    format!(
        "   never freed: none of its {} sampled blocks was freed, and its bytes are on average \
         {} old ({:.0} % of the process's life): a leak, or a cache that never evicts (one dump \
         cannot tell them apart; three can, see `ying leaks`)\n",
        s.samples,
        super::human_millis(age),
        age * 100.0 / uptime_ms as f64
    )
}

/// Below this share of the peak, the bytes retained at a report are not what its reader came
/// for: the text report opens on its PEAK section (see the module documentation).
pub const PEAK_FIRST_BELOW_PCT: f64 = 10.0;

/// The share of the peak retained at `r` (exact retained bytes over the peak: the larger of the
/// high-water mark and the kept peak's exact bytes) and that peak, when the report should lead
/// with its peak: ranked by retained bytes, a peak with stacks kept, and the share below
/// [`PEAK_FIRST_BELOW_PCT`].
pub(crate) fn peak_first(r: &Report) -> Option<(f64, u64)> {
    let p = r.facts.peak.as_ref()?;
    if r.opts.measurement != Measurement::RetainedBytes || r.ranked_len(M) == 0 {
        return None;
    }
    let peak = p.high_water_bytes.max(p.exact_bytes.unwrap_or(0));
    let share = r.facts.totals.retained_bytes() as f64 * 100.0 / peak.max(1) as f64;
    (peak > 0 && share < PEAK_FIRST_BELOW_PCT).then_some((share, peak))
}

/// `, 12.0 MiB resident` (and `, 1.0 MiB swapped` when some is) after the retained figures of a
/// stack whose residency was measured; nothing otherwise.
fn residency(s: &StackStats) -> String {
    match s.residency {
        Some(r) if r.swapped_bytes > 0 => format!(
            ", {} resident, {} swapped",
            human_bytes(r.resident_bytes),
            human_bytes(r.swapped_bytes)
        ),
        Some(r) => format!(", {} resident", human_bytes(r.resident_bytes)),
        None => String::new(),
    }
}

/// An entry's span path (if any) and its frames as the view shows them: the part of a stack's
/// block that the current and the peak sections share.
pub(crate) fn write_spans_and_frames(
    o: &mut String,
    s: &StackStats,
    view: FrameView,
    with_filenames: bool,
) {
    if !s.spans.is_empty() {
        let path: Vec<String> = s.spans.iter().map(|sp| sp.to_string()).collect();
        let _ = writeln!(o, "   span: {}", path.join(" > "));
    }
    let _ = writeln!(o, "   frames:");
    let frames = s.shown_frames(view);
    if frames.is_empty() {
        let _ = writeln!(o, "     [no frames]");
    }
    for f in frames {
        let _ = writeln!(o, "     {}", f.text(with_filenames));
    }
}

/// The whole text report, framework frames folded unless `expand` (stacks printed alike are
/// one entry: see [`crate::report::ReportOptions`]).
pub fn render(
    snap: &Snapshot,
    ctx: &ReportContext,
    m: Measurement,
    top_k: usize,
    expand: bool,
) -> String {
    let opts = ReportOptions {
        measurement: m,
        top_k,
        expand_frames: expand,
        fold_framework_frames: true,
        gen_flamegraphs: false,
    };
    render_report(&crate::report::snapshot::report_of(snap, ctx.clone(), &opts))
}

/// The text report of `r`: its header, its top `r.opts.top_k` entries ranked by
/// `r.opts.measurement` (only those are materialised), the PEAK section and the giant
/// refusals.
pub(crate) fn render_report(r: &Report) -> String {
    let (f, ctx, m, view) = (&r.facts, &r.facts.process, r.opts.measurement, r.opts.view());
    let t = &f.totals;
    let mut o = String::new();
    let (est_alloc, est_ret) = r.estimated_totals();
    let _ = writeln!(o, "Ying memory profile");
    let peak_first = peak_first(r);
    if let Some((share, peak)) = peak_first {
        let _ = writeln!(
            o,
            "first read:         retained {} is {share:.1} % of the peak ({} high-water): the PEAK \
             section comes first, the stacks retained {} follow it",
            f.occasion.when(),
            human_bytes(peak),
            f.occasion.when()
        );
    }
    let _ = writeln!(o, "time:               {}", utc_timestamp(f.taken_at, true));
    if let Some(why) = &f.occasion.reason {
        let _ = writeln!(o, "reason:             {why}");
    }
    if let Some(ended) = &f.occasion.ended {
        let _ = writeln!(o, "process ended:      {ended}");
    }
    let _ = writeln!(o, "pid:                {}", ctx.pid);
    let _ = writeln!(o, "executable:         {}", ctx.exe);
    if let Some(owner) = &f.foreign_malloc {
        let _ =
            writeln!(o, "heap not seen:      malloc is {owner}'s, Ying saw nothing of its heap");
    }
    if let Some(allocator) = &f.allocator {
        let _ = writeln!(o, "allocator:          {allocator}");
    }
    o.push_str(&python_line(&ctx.exe, f.python.as_deref(), f.mapped));
    let _ = writeln!(o, "sample interval:    {} bytes (mean)", f.sample_interval);
    let _ = writeln!(
        o,
        "bytes counted:      {} in every figure; a realloc is one allocation: growth allocated, shrink freed",
        f.unit.describe()
    );
    let _ = writeln!(
        o,
        "retained (exact):   {} ({} bytes)",
        human_bytes(t.retained_bytes()),
        t.retained_bytes()
    );
    let _ = writeln!(
        o,
        "allocated (exact):  {} ({} bytes), freed {} bytes",
        human_bytes(t.allocated_bytes),
        t.allocated_bytes,
        t.freed_bytes
    );
    o.push_str(&mapped_line(f.mapped));
    let (se_alloc, se_ret, _) = r.estimated_stderrs();
    let legend = if se_ret > 0.0 || se_alloc > 0.0 {
        "; ± is the 95 % interval of a sampled figure"
    } else {
        ""
    };
    let _ = writeln!(
        o,
        "retained (sampled): {}{} ({} bytes{legend})",
        human_bytes(est_ret),
        plus_minus_bytes(se_ret),
        est_ret
    );
    let _ = writeln!(
        o,
        "allocated (sampled):{}{} ({} bytes)",
        human_bytes(est_alloc),
        plus_minus_bytes(se_alloc),
        est_alloc
    );
    o.push_str(&peak_header_line(r));
    let _ = writeln!(
        o,
        "profiler memory:    {} ({} bytes)",
        human_bytes(t.profiler_bytes),
        t.profiler_bytes
    );
    let _ = writeln!(
        o,
        "profiler peak:      {} ({} bytes) since start",
        human_bytes(t.profiler_peak_bytes),
        t.profiler_peak_bytes
    );
    match (&f.rss, ctx.rss_kib, ctx.anon_rss_kib) {
        (Some(b), _, _) => o.push_str(&rss_lines(b)),
        (None, Some(r), Some(a)) => {
            let _ = writeln!(o, "rss:                {} kB (anonymous {} kB)", r, a);
        }
        (None, ..) => {
            let _ = writeln!(o, "rss:                unknown");
        }
    }
    if let Some(l) = &f.limit {
        // The resident set read with the figures (`statm`), fresher than a breakdown a live
        // file's version may carry from a little before.
        let rss = ctx.rss_kib.map(|k| k * 1024).or(f.rss.as_ref().map(|b| b.rss));
        o.push_str(&limit_line(l, rss));
    }
    let _ = writeln!(
        o,
        "stacks:             {} sampled, {} entries as printed ({} live samples, {} dropped samples, {} address conflicts, {} giant allocations refused)",
        r.stacks_sampled(),
        r.entries(),
        f.live_samples,
        f.dropped_samples,
        f.address_conflicts,
        f.giant_refused
    );
    if f.lost_for_memory > 0 {
        let _ = writeln!(
            o,
            "memory limit:       {} samples lost: the profiler's tables could not grow at a memory limit (a new stack's went to the overflow entry, a block's was taken as freed)",
            f.lost_for_memory
        );
    }
    let ranked = r.ranked(m);
    let top = &ranked[..ranked.len().min(r.opts.top_k)];
    let _ = writeln!(
        o,
        "ranked by:          {} bytes (top {} of {} entries)",
        m.label(),
        top.len(),
        r.entries()
    );
    o.push('\n');
    if peak_first.is_some() {
        o.push_str(&peak_section(r, r.opts.top_k, view));
        let _ = writeln!(o, "RETAINED {}\n", f.occasion.when().to_uppercase());
    }
    if top.is_empty() {
        match nothing_now(r, m, peak_first.is_some()) {
            Some(note) => {
                let _ = writeln!(o, "{note}\n");
            }
            None => {
                let _ = writeln!(o, "no stacks with {} bytes sampled yet", m.label());
            }
        }
    }
    for (i, &e) in top.iter().enumerate() {
        let s = r.stack_stats(e);
        let rank = Some((i + 1, est_alloc, est_ret));
        o.push_str(&stack_block_in(&s, rank, m, true, view, f.uptime_ms));
        o.push('\n');
    }
    o.push_str(&groups_section(&groups::by_task(r), GroupKind::Task));
    o.push_str(&groups_section(&groups::by_span(r), GroupKind::Span));
    if peak_first.is_none() {
        o.push_str(&peak_section(r, r.opts.top_k, view));
    }
    o.push_str(&giant_refusals(&f.giant_refusals));
    o
}

/// What a [`groups_section`] sums by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupKind {
    Task,
    Span,
}

/// The `BY TASK` or `BY SPAN` section (nothing when no stack has one): retained and allocated
/// bytes of each group with their 95 % intervals, largest retained first.
fn groups_section(groups: &[Group], kind: GroupKind) -> String {
    if groups.is_empty() {
        return String::new();
    }
    let mut o = String::new();
    let (title, what) = match kind {
        GroupKind::Task => (
            "BY TASK (Tokio tasks, each named by the future it runs; memory stays with the task that allocated it)",
            "task",
        ),
        GroupKind::Span => (
            "BY SPAN (the innermost span entered at allocation; memory that outlives its span stays with it)",
            "span",
        ),
    };
    let _ = writeln!(o, "{title}");
    let _ = writeln!(o, "  {:<24} {:<24} {:>6}  {what}", "retained", "allocated", "stacks");
    let figure = |v: f64, var: f64| {
        format!("{}{}", human_bytes(v.max(0.0).round() as u64), plus_minus_bytes(var.sqrt()))
    };
    for g in groups.iter().take(groups::LISTED) {
        let _ = writeln!(
            o,
            "  {:<24} {:<24} {:>6}  {}",
            figure(g.retained, g.retained_var),
            figure(g.allocated, g.allocated_var),
            g.stacks,
            g.name
        );
    }
    if groups.len() > groups::LISTED {
        let rest = &groups[groups::LISTED..];
        let sum = |f: fn(&Group) -> f64| rest.iter().map(f).sum::<f64>();
        let _ = writeln!(
            o,
            "  {:<24} {:<24} {:>6}  and {} more {what}s",
            figure(sum(|g| g.retained), sum(|g| g.retained_var)),
            figure(sum(|g| g.allocated), sum(|g| g.allocated_var)),
            rest.iter().map(|g| g.stacks).sum::<u32>(),
            rest.len()
        );
    }
    o.push('\n');
    o
}

/// The measure the PEAK section ranks by.
const M: Measurement = Measurement::RetainedBytesAtPeak;

/// `98.7 MiB (103497728 bytes)`, or why the exact figure is missing.
fn exact(p: &Peak) -> String {
    match p.exact_bytes {
        Some(b) => format!("{} ({b} bytes) exact", human_bytes(b)),
        None => "exact not read (the exact totals were being read elsewhere at that instant)"
            .to_string(),
    }
}

/// The text report's one-line summary of the peak, for its header: the sampled high-water mark,
/// unless an exact figure the peak includes (the retained total of this report, or at the kept
/// peak) is above that estimate; the peak was at least that much, which is printed instead and
/// said.
fn peak_header_line(r: &Report) -> String {
    let now = r.facts.totals.retained_bytes();
    let head = |p: &Peak| {
        let kept = p.exact_bytes.unwrap_or(0);
        let floor = if now >= kept {
            (now, format!("retained {}", r.facts.occasion.when()))
        } else {
            (kept, "retained at the kept peak".to_string())
        };
        if floor.0 > p.high_water_bytes {
            format!(
                "peak:               ≥{} (exact, {}; the sampled high-water ≈{} is below it)",
                human_bytes(floor.0),
                floor.1,
                human_bytes(p.high_water_bytes)
            )
        } else {
            format!("peak (sampled):     {} high-water", human_bytes(p.high_water_bytes))
        }
    };
    match &r.facts.peak {
        Some(p) => format!(
            "{}; stacks kept at {}{} estimated, {}, {}\n",
            head(p),
            human_bytes(p.estimated_bytes),
            plus_minus_bytes(r.estimated_stderrs().2),
            match p.exact_bytes {
                Some(b) => format!("{} exact", human_bytes(b)),
                None => "exact not read".to_string(),
            },
            super::peak_when(p)
        ),
        None => "peak (sampled):     none kept yet (nothing sampled)\n".to_string(),
    }
}

/// What the text report says instead of its stacks when none has a non-zero `m` although
/// stacks were sampled (a program that freed everything before its exit report): where to look
/// instead. None when there is nothing to point at.
fn nothing_now(r: &Report, m: Measurement, peak_above: bool) -> Option<String> {
    if r.entries() == 0 || m == M {
        return None;
    }
    let when = r.facts.occasion.when();
    Some(format!(
        "nothing sampled is {} {when}: the {} sampled stacks freed what they held; the PEAK \
         section {} and the .peak.svg, .peak.folded and .peak.pb.gz files of this set show \
         what they held at the peak",
        m.label(),
        r.stacks_sampled(),
        if peak_above { "above" } else { "below" }
    ))
}

/// The text report's PEAK section: when, how high (estimated and exact), and the top `top_k`
/// stacks ranked by what they retained at the kept peak.
fn peak_section(r: &Report, top_k: usize, view: FrameView) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "PEAK");
    let Some(p) = &r.facts.peak else {
        let _ = writeln!(o, "no peak kept yet: nothing was sampled\n");
        return o;
    };
    let _ = writeln!(
        o,
        "high-water (sampled): {} ({} bytes): the most the sampled estimate of retained memory reached",
        human_bytes(p.high_water_bytes),
        p.high_water_bytes
    );
    let _ = writeln!(
        o,
        "kept peak:            {}{} ({} bytes) estimated, {}",
        human_bytes(p.estimated_bytes),
        plus_minus_bytes(r.estimated_stderrs().2),
        p.estimated_bytes,
        exact(p)
    );
    let _ = writeln!(o, "kept at:              {}", super::peak_when(p));
    let _ = writeln!(
        o,
        "                      (peak {} kept: a peak is kept each time the total exceeds the last kept one by 5 %)",
        p.captures
    );
    let ranked = r.ranked(M);
    let top = &ranked[..ranked.len().min(top_k)];
    let _ = writeln!(
        o,
        "ranked by:            bytes retained at the kept peak (top {} of {})\n",
        top.len(),
        r.ranked_len(M)
    );
    for (i, &e) in top.iter().enumerate() {
        let at_peak = r.figures(e).measure(M);
        let share = if p.estimated_bytes == 0 {
            0.0
        } else {
            at_peak as f64 * 100.0 / p.estimated_bytes as f64
        };
        let s = r.stack_stats(e);
        let _ = writeln!(
            o,
            "peak #{}: {}{} ({} bytes, {share:.1}% of the kept peak) in {}{} allocations; retained now {}{}",
            i + 1,
            human_bytes(at_peak),
            plus_minus_bytes(s.variance.peak_retained_bytes.sqrt()),
            at_peak,
            s.peak_retained_count,
            plus_minus_count(s.variance.peak_retained_count.sqrt()),
            human_bytes(s.retained_bytes),
            plus_minus_bytes(s.variance.retained_bytes.sqrt()),
        );
        o.push_str(&noise_line(at_peak, s.variance.peak_retained_bytes, s.samples));
        write_spans_and_frames(&mut o, &s, view, true);
        o.push('\n');
    }
    o
}

/// The kept giant refusals, each with the stack that asked (empty when there were none).
pub(crate) fn giant_refusals(refusals: &[crate::report::snapshot::GiantRefusal]) -> String {
    let mut o = String::new();
    for r in refusals {
        let _ = writeln!(
            o,
            "giant allocation refused (refusal #{}): {} ({} bytes), requested at:",
            r.number,
            human_bytes(r.size),
            r.size
        );
        for f in r.frames.iter().filter(|f| !f.is_noise()) {
            let _ = writeln!(o, "    {f}");
        }
        o.push('\n');
    }
    o
}

/// A lifetime histogram in one line, as the text report shows it: the average, then the count
/// of each non-empty bucket.
impl std::fmt::Display for crate::engine::histogram::MillisHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return write!(f, "(none)");
        }
        write!(f, "avg {}", super::human_millis(self.average_millis()))?;
        for (label, c) in crate::engine::histogram::BUCKET_LABELS.iter().zip(self.counts()) {
            if c > 0 {
                write!(f, " {label}:{c}")?;
            }
        }
        Ok(())
    }
}

/// The `memory limit:` line: the limit, how close the resident set `rss` is to it, and the
/// near-limit trigger's state.
fn limit_line(l: &crate::triggers::limit::LimitState, rss: Option<u64>) -> String {
    let source = if l.cgroup { "the cgroup's" } else { "YING_MEMORY_LIMIT_BYTES" };
    let mut o = format!("memory limit:       {} ({source})", human_bytes(l.bytes));
    if let Some(rss) = rss {
        let _ = write!(o, "; the rss is {} % of it", rss as u128 * 100 / l.bytes.max(1) as u128);
    }
    match (l.pct, l.near_since_ms) {
        (0, _) => o.push_str("; the near-limit report is off"),
        (pct, Some(ms)) => {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            let _ = write!(
                o,
                "; above the near-limit level ({pct} %) since {}",
                utc_timestamp(at, true)
            );
        }
        (pct, None) => {
            let _ = write!(o, "; below the near-limit level ({pct} %)");
        }
    }
    o.push('\n');
    o
}

/// The resident set's lines: the total, then one line per part (kB, as the kernel counts),
/// with its meaning, and the notes on the heap.
fn rss_lines(b: &crate::report::model::rss::RssBreakdown) -> String {
    let mut o = String::new();
    let when = match b.age_ms {
        0 => String::new(),
        ms => format!(" {ms} ms before the figures above"),
    };
    let _ = writeln!(
        o,
        "rss:                {} kB, from /proc/self/smaps{when}: the sum of",
        b.rss / 1024
    );
    for (part, bytes) in b.iter() {
        let _ = writeln!(o, "  {:<17}{:>10} kB  {}", part.label(), bytes / 1024, part.meaning());
    }
    if b.heap_not_resident > 0 {
        let _ = writeln!(
            o,
            "  {:<17}{:>10} kB  of the retained heap is not resident (never touched, or swapped)",
            "heap not resident",
            b.heap_not_resident / 1024
        );
    }
    if !b.allocator_known {
        let _ = writeln!(
            o,
            "  malloc is not glibc's: its overhead is not known, its memory counts as unseen anonymous"
        );
    }
    o
}

/// The header line about anonymous mappings: the bytes counted now (none in the Rust front end,
/// which sees no mappings).
fn mapped_line(mapped: MappedState) -> String {
    match mapped {
        MappedState::Counted { bytes, regions } => format!(
            "mapped (exact):     {} ({bytes} bytes) retained in {regions} anonymous mmap regions, included in the figures above and below (PROT_NONE reservations not counted)\n",
            human_bytes(bytes),
        ),
        MappedState::Off => {
            "mapped:             anonymous mmaps not counted (YING_TRACK_MMAP=false)\n".into()
        }
        MappedState::NotSeen => String::new(),
    }
}

/// The header line of a Python interpreter's report (one was found, or the executable's file
/// name starts with `python`): whether the stacks carry Python frames, where its objects are and
/// how to see them one by one.
fn python_line(exe: &str, frames: Option<&str>, mapped: MappedState) -> String {
    let name = exe.rsplit('/').next().unwrap_or(exe);
    if frames.is_none() && !name.starts_with("python") {
        return String::new();
    }
    let frames = frames.map(|f| format!("{f}; ")).unwrap_or_default();
    let arenas = match mapped {
        MappedState::Counted { .. } => {
            "pymalloc's arenas are counted as anonymous mmaps, at the stack that mapped them"
        }
        _ => "pymalloc's small objects are not seen (YING_TRACK_MMAP=false)",
    };
    format!(
        "python:             {frames}{arenas}; PYTHONMALLOC=malloc samples each object at its own stack instead\n"
    )
}
