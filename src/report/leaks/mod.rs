//! Leak suspects: the stacks whose retained bytes grow beyond sampling noise across a
//! process's dumps, and keep growing, and whose retained blocks are old.
//!
//! A growing stack is not yet a leak. A cache grows while it fills and then stays flat; a
//! queue under load grows and drains; a stack with a few samples moves by a sample's weight
//! from one dump to the next. So a stack is a suspect only when all of these hold:
//!
//! 1. **It grew beyond noise over the window**: from its first to its last dump, the change's
//!    `z` ([`super::noise::Change`]) is above the one-sided threshold for the number of stacks
//!    tested ([`super::noise::threshold`], family-wise 1 %).
//! 2. **It still grows in the later part of the window**: the same test from the dump nearest
//!    the window's middle to the last one. A cache that filled in the first half and then
//!    plateaued fails this one.
//! 3. **Its retained blocks are old**: the mean age of its retained bytes at the last dump (the
//!    retained-age histogram, [`crate::StackStats::retained_age`]) is at least
//!    [`OLD_FRACTION`] of the window. What a leak keeps stays, so a steady leak's bytes are
//!    half the window old on average; what churns (a bounded cache with eviction, buffers
//!    being reused) is young whatever its size. A stack whose ages were not read is not
//!    listed: without them a leak and a growing working set look the same.
//!
//! The growth rate shown is the least-squares slope of the stack's retained bytes over the
//! dumps' times, in bytes per hour; how sure it is, the smaller of the two `z` (and its
//! one-sided p-value). Two dumps of one process share their older samples, so the first-to-last
//! variance `Var(A) + Var(B)` overstates the scatter of the change: the tests are conservative.
//!
//! A stack a dump does not list is not seen there, unless the dump lists every stack that
//! retained bytes (a manifest's `entries_complete`, a timeline dump's `retained_complete`):
//! then it retained nothing there, and [`fill_absent`] says so with a 0 B point. A stack
//! that ended at 0 B is never a suspect, however it grew before.
//!
//! Two sources feed the same test ([`Series`]): a process's own timeline (the HTML page's
//! panel, `report::html`) and its report sets' manifests read back from disk ([`sets`], behind
//! `ying leaks` and `ying view`).

pub mod sets;

use super::noise::{self, Change};
use super::{human_bytes, human_millis};

/// The least mean age of a suspect's retained bytes, as a fraction of the window.
pub const OLD_FRACTION: f64 = 0.25;

/// Dumps a stack must be seen in to be tested (first, middle and last distinct).
pub const MIN_POINTS: usize = 3;

/// One stack's retained bytes at one dump.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// When, in milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Estimated retained bytes.
    pub bytes: f64,
    /// Their standard error (see [`noise::variance`]).
    pub stderr: f64,
    /// Mean age of the retained bytes in ms, when it was read.
    pub age_ms: Option<f64>,
}

/// One stack over a process's dumps.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Its frames as reports print them, innermost first.
    pub frames: Vec<String>,
    /// The frame that names it (the program's own innermost frame, when known).
    pub name: String,
    /// Its figures at the dumps that list it, oldest first.
    pub points: Vec<Observation>,
}

/// A stack that looks like a leak (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    /// The frame that names it.
    pub name: String,
    /// Its frames, innermost first.
    pub frames: Vec<String>,
    /// Retained bytes at the last dump.
    pub retained: f64,
    /// Least-squares growth rate over the window.
    pub bytes_per_hour: f64,
    /// The change from the first dump to the last.
    pub growth: Change,
    /// The change from the middle dump to the last.
    pub late: Change,
    /// The smaller `z` of the two.
    pub z: f64,
    /// The one-sided p-value of `z` (for one stack; the threshold already allowed for many).
    pub p: f64,
    /// Mean age of its retained bytes at the last dump, ms.
    pub age_ms: f64,
    /// From its first dump to its last, ms.
    pub window_ms: u64,
    /// The dumps it was seen in.
    pub points: usize,
}

/// The test's result for one process.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Analysis {
    /// The suspects, surest first.
    pub suspects: Vec<Suspect>,
    /// Stacks tested (seen in at least [`MIN_POINTS`] dumps).
    pub tested: usize,
    /// The `z` a change had to pass.
    pub threshold: f64,
    /// Dumps read.
    pub dumps: usize,
    /// From the first dump to the last, ms.
    pub window_ms: u64,
}

/// Gives every series a 0 B point at each dump of `complete` (times, ms) that lists every
/// stack that retained bytes and does not list it, and puts each series' points in time
/// order.
pub fn fill_absent(series: &mut [Series], complete: &[u64]) {
    for s in series {
        for &t_ms in complete {
            if !s.points.iter().any(|p| p.t_ms == t_ms) {
                s.points.push(Observation { t_ms, bytes: 0.0, stderr: 0.0, age_ms: None });
            }
        }
        s.points.sort_by_key(|p| p.t_ms);
    }
}

/// The least-squares slope of `points`' bytes over time, bytes per ms.
fn slope(points: &[Observation]) -> f64 {
    let n = points.len() as f64;
    let t0 = points[0].t_ms as f64;
    let mt = points.iter().map(|p| p.t_ms as f64 - t0).sum::<f64>() / n;
    let mb = points.iter().map(|p| p.bytes).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for p in points {
        let dt = p.t_ms as f64 - t0 - mt;
        sxy += dt * (p.bytes - mb);
        sxx += dt * dt;
    }
    if sxx > 0.0 { sxy / sxx } else { 0.0 }
}

/// The change from `a` to `b`.
fn change(a: &Observation, b: &Observation) -> Change {
    Change::between(a.bytes, a.stderr * a.stderr, b.bytes, b.stderr * b.stderr)
}

/// Tests every series of one process (see the module documentation); `dumps` and `window_ms`
/// describe the dumps they come from.
pub fn analyse(series: &[Series], dumps: usize, window_ms: u64) -> Analysis {
    let tested: Vec<&Series> = series.iter().filter(|s| s.points.len() >= MIN_POINTS).collect();
    let threshold = noise::threshold(tested.len(), false);
    let mut suspects = Vec::new();
    for s in tested.iter().copied() {
        let pts = &s.points;
        let (first, last) = (&pts[0], &pts[pts.len() - 1]);
        let window = last.t_ms.saturating_sub(first.t_ms);
        if window == 0 || last.bytes <= 0.0 {
            continue;
        }
        let middle_t = first.t_ms + window / 2;
        let mid = pts[1..pts.len() - 1]
            .iter()
            .min_by_key(|p| p.t_ms.abs_diff(middle_t))
            .expect("at least three points");
        let (growth, late) = (change(first, last), change(mid, last));
        if growth.delta <= 0.0 || late.delta <= 0.0 {
            continue;
        }
        let z = growth.z().min(late.z());
        let Some(age_ms) = last.age_ms else { continue };
        if z <= threshold || age_ms < OLD_FRACTION * window as f64 {
            continue;
        }
        suspects.push(Suspect {
            name: s.name.clone(),
            frames: s.frames.clone(),
            retained: last.bytes,
            bytes_per_hour: slope(pts) * 3_600_000.0,
            growth,
            late,
            z,
            p: noise::normal_sf(z),
            age_ms,
            window_ms: window,
            points: pts.len(),
        });
    }
    suspects
        .sort_by(|a, b| b.z.total_cmp(&a.z).then(b.bytes_per_hour.total_cmp(&a.bytes_per_hour)));
    Analysis { suspects, tested: tested.len(), threshold, dumps, window_ms }
}

/// Why the test found nothing it could test: fewer dumps of the process than [`MIN_POINTS`]
/// (a short run, or reports minutes apart), said with how to get more; None otherwise.
pub fn too_few_dumps(a: &Analysis) -> Option<String> {
    (a.dumps < MIN_POINTS).then(|| {
        format!(
            "the trend test needs at least {MIN_POINTS} dumps of the process and has {}: a \
             shorter YING_CHECK_INTERVAL_SECS, or dumps on demand (signal, endpoint), gives it more",
            a.dumps
        )
    })
}

/// A p-value as `p=0.0012` or `p<1e-15`.
pub fn p_text(p: f64) -> String {
    if p < 1e-15 {
        "p<1e-15".to_string()
    } else if p < 1e-3 {
        format!("p={p:.1e}")
    } else {
        format!("p={p:.4}")
    }
}

/// The text section of `a` for the process named `who`: a heading, how the test was made, one
/// block per suspect (its rate, how sure, its retained bytes and their age, its frames), or a
/// line saying there is none.
pub fn text(who: &str, a: &Analysis) -> String {
    let mut o = format!(
        "LEAK SUSPECTS of {who}: {} dumps over {}, {} stacks tested; a suspect grew beyond noise \
         (one-sided z > {:.2}) from its first dump to its last and from the middle one to the \
         last, and its retained bytes are on average at least {:.0} % of the window old\n",
        a.dumps,
        human_millis(a.window_ms as f64),
        a.tested,
        a.threshold,
        OLD_FRACTION * 100.0
    );
    if a.suspects.is_empty() {
        match too_few_dumps(a) {
            Some(why) => o.push_str(&format!("  none: {why}\n")),
            None => o.push_str("  none\n"),
        }
    }
    for (i, s) in a.suspects.iter().enumerate() {
        o.push_str(&format!(
            "  #{} {}/h  z={:.1} ({})  retained {} (grew {} over {}, {} in its later half), \
             mean age {}  {}\n",
            i + 1,
            human_bytes(s.bytes_per_hour.max(0.0) as u64),
            s.z,
            p_text(s.p),
            human_bytes(s.retained.max(0.0) as u64),
            human_bytes(s.growth.delta.max(0.0) as u64),
            human_millis(s.window_ms as f64),
            human_bytes(s.late.delta.max(0.0) as u64),
            human_millis(s.age_ms),
            s.name
        ));
        for f in s.frames.iter().take(8) {
            o.push_str(&format!("       {f}\n"));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: f64 = 65536.0;

    /// A stack observed every 10 s at `bytes(i)`, its retained blocks `age(i)` ms old.
    fn series(name: &str, n: u64, bytes: impl Fn(u64) -> f64, age: impl Fn(u64) -> f64) -> Series {
        Series {
            frames: vec![name.to_string()],
            name: name.to_string(),
            points: (0..n)
                .map(|i| {
                    let b = bytes(i);
                    Observation {
                        t_ms: i * 10_000,
                        bytes: b,
                        stderr: noise::variance(b, b, P, None).sqrt(),
                        age_ms: Some(age(i)),
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn a_steady_leak_is_a_suspect_and_a_filled_cache_or_churn_is_not() {
        let mib = 1048576.0;
        let s = [
            // 4 MiB more every 10 s, kept: half the run old.
            series("leak", 10, |i| 4.0 * mib * (i + 1) as f64, |i| i as f64 * 5000.0),
            // Fills 20 MiB in 30 s, then flat.
            series("cache", 10, |i| 20.0 * mib * (i.min(3) as f64 / 3.0 + 0.01), |_| 60_000.0),
            // Grows as much as the leak, but its bytes are always young (reused buffers).
            series("churn", 10, |i| 4.0 * mib * (i + 1) as f64, |_| 200.0),
            // Within noise: one sample's weight either way.
            series("noise", 10, |i| P * (2 + i % 2) as f64, |i| i as f64 * 5000.0),
        ];
        let a = analyse(&s, 10, 90_000);
        let names: Vec<&str> = a.suspects.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["leak"], "{a:#?}");
        let leak = &a.suspects[0];
        // 4 MiB per 10 s = 1440 MiB per hour.
        assert!((leak.bytes_per_hour / mib - 1440.0).abs() < 1.0, "{}", leak.bytes_per_hour);
        assert!(leak.z > a.threshold && leak.p < 1e-4);
        assert_eq!(a.tested, 4);
        let t = text("app (pid 1)", &a);
        assert!(t.contains("#1 1.4 GiB/h  z="), "{t}");
        assert!(t.contains("leak") && !t.contains("cache"), "{t}");
    }

    #[test]
    fn too_few_dumps_or_unknown_ages_make_no_suspect() {
        let mib = 1048576.0;
        let short = series("leak", 2, |i| 4.0 * mib * (i + 1) as f64, |i| i as f64 * 5000.0);
        let mut unaged = series("leak", 10, |i| 4.0 * mib * (i + 1) as f64, |_| 0.0);
        for p in unaged.points.iter_mut() {
            p.age_ms = None;
        }
        let a = analyse(&[short, unaged], 10, 90_000);
        assert!(a.suspects.is_empty(), "{a:#?}");
        assert_eq!(a.tested, 1);
        assert!(text("x", &a).contains("  none\n"));
        // With fewer dumps than the test needs, the text says so.
        let one = analyse(&[], 1, 0);
        let t = text("x", &one);
        assert!(
            t.contains("  none: the trend test needs at least 3 dumps of the process and has 1"),
            "{t}"
        );
    }

    #[test]
    fn a_stack_a_complete_dump_leaves_out_retained_nothing_there() {
        let mib = 1048576.0;
        let leak = || series("leak", 10, |i| 4.0 * mib * (i + 1) as f64, |i| i as f64 * 5000.0);
        // The last dump (at 100 s) does not list it: not seen, when that dump was cut at top K.
        let cut = analyse(&[leak()], 11, 100_000);
        assert_eq!(cut.suspects.len(), 1, "{cut:#?}");
        // When that dump listed every stack that retained bytes, the leak ended at 0 B.
        let mut s = [leak()];
        fill_absent(&mut s, &[100_000]);
        assert_eq!(s[0].points.len(), 11);
        assert_eq!(s[0].points.last().map(|p| p.bytes), Some(0.0));
        let complete = analyse(&s, 11, 100_000);
        assert!(complete.suspects.is_empty(), "{complete:#?}");
        // A dump that lists it is left as it is; points stay in time order.
        let mut s = [leak()];
        fill_absent(&mut s, &[0, 50_000]);
        assert_eq!(s[0].points, leak().points);
    }
}
