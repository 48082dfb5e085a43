//! The process's memory over time, for the HTML report ([`super::html`]): a bounded series of
//! points (time, exact retained and allocated bytes, RSS, the sampled peak) filled by the
//! report thread at each check, and for each dump the figures of the stacks that matter in it
//! (the top stacks by retained, allocated and retained-at-peak bytes, each stack stored once
//! as interned frames) with the rest summed as "others".
//!
//! # What it costs
//!
//! Nothing on the allocation paths: the report thread adds a point at each check (reading the
//! exact totals, `/proc/self/statm` and the peak, as a check already does), and the reporting
//! path adds a dump after each report set. Memory, all of it the profiler's:
//!
//! - points: 40 bytes each, at most [`MAX_POINTS`] (160 KiB). When the ring is full, every
//!   second point of its older half is dropped, so a month of checks at any interval keeps the
//!   whole month at decreasing resolution towards the start, never more than [`MAX_POINTS`].
//! - dumps: the newest [`DETAIL_DUMPS`] keep up to [`RETAINED_STACKS`] + [`ALLOCATED_STACKS`] +
//!   [`PEAK_STACKS`] stacks of 56 bytes each (at most 9 KB a dump, 450 KB for 50 dumps); older
//!   dumps keep only their [`CHART_STACKS`] largest stacks for the chart (about 1 KB with their
//!   interned frames), and past [`MAX_DUMPS`] (128) dumps every second older one is dropped: the
//!   dumps never hold more than about 530 KB, reached after 128 sets, and the profiler's memory
//!   is flat from there (`tests/report_soak.rs`).
//! - interned stacks and frames: 4 bytes a frame of each distinct stack still referenced, and
//!   each distinct frame's name and `file:line` once; unreferenced ones are dropped when dumps
//!   are thinned. A program whose top stacks stay the same (the usual case) holds each once.
//!
//! Measured ([`Timeline::memory_bytes`] in `tests/html_report.rs`, BENCHMARKS.md): 100 dumps
//! of a 10,000-stack program of 30-frame stacks whose sizes change at every dump, so that each
//! dump's top stacks differ (the worst case: 5,240 distinct stacks kept), hold 4.3 MiB.
//!
//! The lock is never waited for when a thread of another process holds it (a `fork` child
//! whose parent's report thread held it at the fork): that child's dumps then write no page.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::callstack::{FrameView, Measurement, ShownFrame, is_allocator_entry};
use crate::report::ReportOptions;
use crate::report::model::Report;
use crate::report::model::groups;
use crate::report::noise;
use crate::report::snapshot::Snapshot;
use crate::spans::SpanInfo;

/// Points kept in the ring.
pub const MAX_POINTS: usize = 4096;
/// Dumps kept with their stacks in detail (their table, flamegraph and peak view): as many as
/// the report sets a runner keeps by default ([`crate::utils::DEFAULT_MAX_REPORT_SETS`]).
pub const DETAIL_DUMPS: usize = 50;
/// Dumps kept at all (the older ones with their chart figures only): a bound on the profiler's
/// memory that is reached soon (past it, every second older dump is dropped, so the chart
/// keeps the whole run at decreasing resolution), not after a month of dumps. At 1,024 each
/// set left about 1.7 KB behind for a thousand sets (`tests/report_soak.rs`).
pub const MAX_DUMPS: usize = 128;
/// Stacks kept per dump, ranked by retained bytes (the flamegraph's; the rest is "others").
pub const RETAINED_STACKS: usize = 100;
/// Further stacks kept per dump, ranked by allocated bytes (the table's allocated view).
pub const ALLOCATED_STACKS: usize = 20;
/// Further stacks kept per dump, ranked by retained bytes at the kept peak (the peak view).
pub const PEAK_STACKS: usize = 40;
/// Stacks an older dump keeps for the chart.
pub const CHART_STACKS: usize = 10;
/// Stacks of a dump whose lifetimes are read (the table's rows).
const TABLE_STACKS: usize = 25;

/// One moment of the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Point {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Exact bytes the program retains.
    pub retained: u64,
    /// Exact bytes the program allocated since start.
    pub allocated: u64,
    /// Resident set size in bytes (0 when unknown).
    pub rss: u64,
    /// The highest sampled estimate of retained bytes so far (the peak's high-water mark).
    pub peak: u64,
}

/// One stack's figures in one dump.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StackFigures {
    /// Index of the stack in [`Timeline::stacks`].
    pub stack: u32,
    /// Estimated retained bytes.
    pub retained: u64,
    /// Estimated allocated bytes.
    pub allocated: u64,
    /// Estimated allocations.
    pub alloc_count: u64,
    /// Estimated retained allocations.
    pub retained_count: u64,
    /// Estimated retained bytes at the kept peak.
    pub peak: u64,
    /// Mean lifetime of the freed allocations in ms (negative: not read or none freed).
    pub lifetime_ms: f32,
    /// Mean age of the retained bytes in ms (negative: not read or none retained).
    pub age_ms: f32,
    /// Standard error of `retained` from sampling ([`crate::report::noise::variance`]): what
    /// the diff and the leak suspects weigh a change against.
    pub retained_stderr: f32,
    /// Estimated retained bytes in pages present in memory at the dump (`YING_RESIDENT`;
    /// None when not measured).
    pub resident: Option<u64>,
}

/// One row of a dump's memory per task kind or per span (`model/groups.rs`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupFigures {
    /// The task kind or the span.
    pub name: String,
    /// Estimated retained bytes, and their standard error.
    pub retained: u64,
    /// See `retained`.
    pub retained_stderr: f32,
    /// Estimated allocated bytes, and their standard error.
    pub allocated: u64,
    /// See `allocated`.
    pub allocated_stderr: f32,
    /// Stacks summed.
    pub stacks: u32,
}

impl GroupFigures {
    /// The rows of `groups` the outputs list (the first ten).
    pub(crate) fn listed(groups: &[groups::Group]) -> Vec<Self> {
        groups
            .iter()
            .take(groups::LISTED)
            .map(|g| Self {
                name: g.name.clone(),
                retained: g.retained.max(0.0).round() as u64,
                retained_stderr: g.retained_var.max(0.0).sqrt() as f32,
                allocated: g.allocated.max(0.0).round() as u64,
                allocated_stderr: g.allocated_var.max(0.0).sqrt() as f32,
                stacks: g.stacks,
            })
            .collect()
    }
}

/// What one dump showed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dump {
    /// The report set's sequence number in the process.
    pub seq: u64,
    /// The report set's file stem (`ying.<exe>.<pid>.<seq>.<time>`).
    pub stem: String,
    /// The moment, with the exact totals and RSS at the dump.
    pub at: Point,
    /// Estimated retained and allocated bytes summed over every stack.
    pub est_retained: u64,
    /// See `est_retained`.
    pub est_allocated: u64,
    /// The kept peak: estimated bytes, exact bytes (0 unknown), and when (ms since the epoch).
    pub peak_estimated: u64,
    /// See `peak_estimated`.
    pub peak_exact: u64,
    /// See `peak_estimated`.
    pub peak_t_ms: u64,
    /// Stacks sampled in the process at the dump.
    pub stacks_sampled: u64,
    /// The stacks kept, largest retained first.
    pub stacks: Vec<StackFigures>,
    /// Whether `stacks` holds every stack that retained bytes at the dump: one it leaves out
    /// retained none then (the leak suspects count it as 0 B there).
    pub retained_complete: bool,
    /// Whether the dump still has its stacks in detail (else its chart stacks only).
    pub detail: bool,
    /// The resident set's parts at the dump (`model/rss.rs`), part key and bytes, in the
    /// order reports print them; empty when not read.
    pub rss_parts: Vec<(String, u64)>,
    /// Memory per Tokio task kind and per innermost span, the largest first (at most
    /// `groups::LISTED` each; empty when no stack has one, and in a thinned dump).
    pub tasks: Vec<GroupFigures>,
    /// See `tasks`.
    pub spans: Vec<GroupFigures>,
}

/// A frame as reports show it: its name and `file:line` (empty when unknown).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShownLine {
    /// Function name, or a folded run (`... 27 frames in tokio ...`).
    pub name: String,
    /// Short `file:line`, empty when unknown.
    pub location: String,
}

/// A stack kept by some dump: frames root first, and the frame that names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Stack {
    /// Frame indices into [`Timeline::frames`], root first.
    pub frames: Box<[u32]>,
    /// The frame that names the stack: the innermost frame of the program's own code (else the
    /// innermost frame).
    pub label: u32,
}

/// The series of one process (see the module documentation).
#[derive(Clone, Default)]
pub struct Timeline {
    /// Path of the executable.
    pub exe: String,
    /// Process id.
    pub pid: u32,
    /// How the process ended, when it is known to have ended without its exit report (its
    /// live file, `report::live`), or that it still runs.
    pub note: Option<String>,
    /// The ring of points, oldest first.
    pub points: VecDeque<Point>,
    /// Dumps, oldest first.
    pub dumps: VecDeque<Dump>,
    /// Interned frames.
    pub frames: Vec<ShownLine>,
    /// Interned stacks.
    pub stacks: Vec<Stack>,
    /// Indices of `frames` and `stacks` by their hash (the values are not stored twice).
    frame_index: HashTable<u32>,
    stack_index: HashTable<u32>,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("exe", &self.exe)
            .field("pid", &self.pid)
            .field("points", &self.points.len())
            .field("dumps", &self.dumps.len())
            .field("stacks", &self.stacks.len())
            .field("frames", &self.frames.len())
            .finish()
    }
}

/// A fixed hash for the interning tables.
fn hash_of<T: Hash + ?Sized>(v: &T) -> u64 {
    std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
        .hash_one(v)
}

/// Interns `v` in `items` through `index`.
fn intern<T: Hash + Eq>(items: &mut Vec<T>, index: &mut HashTable<u32>, v: T) -> u32 {
    let h = hash_of(&v);
    if let Some(&i) = index.find(h, |&i| items[i as usize] == v) {
        return i;
    }
    let i = items.len() as u32;
    items.push(v);
    index.insert_unique(h, i, |&j| hash_of(&items[j as usize]));
    i
}

/// An index of `items` by hash.
fn index_of<T: Hash>(items: &[T]) -> HashTable<u32> {
    let mut t = HashTable::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        t.insert_unique(hash_of(v), i as u32, |&j| hash_of(&items[j as usize]));
    }
    t
}

/// The process's timeline (report threads only).
static TIMELINE: Mutex<Option<Timeline>> = Mutex::new(None);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Resident set size in bytes from `/proc/self/statm` (0 when unreadable).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    pages * crate::sys::page_size() as u64
}

/// The point of now: exact totals, RSS, the peak's high-water mark.
fn point_now() -> Point {
    let totals = crate::engine::totals::read();
    Point {
        t_ms: now_ms(),
        retained: totals.retained_bytes(),
        allocated: totals.allocated_bytes,
        rss: rss_bytes(),
        peak: crate::engine::peak::read().high_water,
    }
}

/// The process whose thread holds [`TIMELINE`] (0: none, or not yet recorded).
static HOLDER: AtomicU32 = AtomicU32::new(0);

/// The longest wait for the timeline held by another thread of this process (one dump at a
/// time is written, so this is only a check's point waiting for a dump's page).
const WAIT_OWN: Duration = Duration::from_secs(60);
/// The longest wait when the holder is not of this process: a `fork` child whose parent's
/// thread held the lock at the fork (nothing in the child will ever release it).
const WAIT_OTHER: Duration = Duration::from_millis(200);

/// Runs `f` on this process's timeline (a fresh one after a `fork`); None, without waiting
/// more than [`WAIT_OTHER`], when the lock is held by a thread of another process (the parent's
/// report thread at the moment of a `fork`): that child's reports then have no page rather than
/// a hang.
fn with_timeline<T>(f: impl FnOnce(&mut Timeline) -> T) -> Option<T> {
    let pid = std::process::id();
    let start = Instant::now();
    let mut g = loop {
        match TIMELINE.try_lock() {
            Ok(g) => break g,
            Err(TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let limit =
                    if HOLDER.load(Ordering::Relaxed) == pid { WAIT_OWN } else { WAIT_OTHER };
                if start.elapsed() > limit {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    HOLDER.store(pid, Ordering::Relaxed);
    let t = g.get_or_insert_with(Timeline::default);
    if t.pid != pid {
        *t = Timeline { pid, ..Timeline::default() };
    }
    let out = f(t);
    HOLDER.store(0, Ordering::Relaxed);
    Some(out)
}

/// Adds a point for now (the report thread, at each check; profiler code).
pub(crate) fn tick() {
    let p = point_now();
    let _ = with_timeline(|t| t.push_point(p));
}

/// The newest `n` points, oldest first (none when the timeline cannot be had).
pub(crate) fn recent_points(n: usize) -> Vec<Point> {
    with_timeline(|t| t.points.iter().rev().take(n).rev().copied().collect()).unwrap_or_default()
}

/// Records the dump written from `r` under `stem` (with a point at its time, RSS and peak read
/// now), then runs `f` on the timeline (the reporting path renders the HTML there); None when
/// the timeline cannot be had (see `with_timeline`).
pub(crate) fn record_dump<T>(
    r: &Report,
    seq: u64,
    stem: &str,
    f: impl FnOnce(&Timeline) -> T,
) -> Option<T> {
    let mut at = point_now();
    at.t_ms =
        r.facts.taken_at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    at.retained = r.facts.totals.retained_bytes();
    at.allocated = r.facts.totals.allocated_bytes;
    with_timeline(|t| {
        t.exe = r.facts.process.exe.clone();
        t.push_point(at);
        t.add_dump(r, seq, stem, at);
        f(t)
    })
}

/// The standard error of `retained` estimated bytes at the sample interval `period`, or the
/// producer's own `stderr` when it gives one (see [`noise::variance`]).
pub(crate) fn retained_stderr(retained: u64, period: u64, stderr: Option<f64>) -> f32 {
    let b = retained as f64;
    noise::variance(b, b, period as f64, stderr).sqrt() as f32
}

fn round_ms(ms: f64) -> f32 {
    if ms.is_finite() { ms as f32 } else { -1.0 }
}

impl Timeline {
    /// An empty timeline for `exe` and `pid` (the view of a directory builds one per process).
    pub fn new(exe: &str, pid: u32) -> Self {
        Self { exe: exe.to_string(), pid, ..Self::default() }
    }

    /// The dump a page opens on: the last one, unless what it retained (exact) is under
    /// [`crate::report::text::PEAK_FIRST_BELOW_PCT`] of the largest dump's (a program that
    /// freed its data before its exit report), then the largest. None without dumps.
    pub fn dump_that_matters(&self) -> Option<usize> {
        let last = self.dumps.len().checked_sub(1)?;
        let (largest, most) = self
            .dumps
            .iter()
            .enumerate()
            .map(|(i, d)| (i, d.at.retained))
            .fold((last, 0), |best, c| if c.1 > best.1 { c } else { best });
        let share = self.dumps[last].at.retained as f64 * 100.0 / most.max(1) as f64;
        Some(if share < crate::report::text::PEAK_FIRST_BELOW_PCT { largest } else { last })
    }

    /// Adds a point, thinning the older half of the ring when it is full.
    pub fn push_point(&mut self, p: Point) {
        if self.points.len() >= MAX_POINTS {
            let half = self.points.len() / 2;
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i > half || i % 2 == 1
            });
        }
        self.points.push_back(p);
    }

    /// Interns a frame.
    pub fn frame_id(&mut self, line: ShownLine) -> u32 {
        intern(&mut self.frames, &mut self.frame_index, line)
    }

    /// Interns a stack.
    pub fn stack_id(&mut self, stack: Stack) -> u32 {
        intern(&mut self.stacks, &mut self.stack_index, stack)
    }

    /// Interns the stack of entry `e` of `r` as its view shows it.
    fn intern_entry(&mut self, r: &Report, e: u32) -> u32 {
        self.intern_shown(&r.shown(e, r.opts.view()), r.spans_of(e))
    }

    /// Interns a stack whose lines (innermost first) are `shown`, under the span path `spans`.
    pub(crate) fn intern_shown(&mut self, shown: &[ShownFrame<'_>], spans: &[SpanInfo]) -> u32 {
        let mut frames: Vec<u32> = Vec::with_capacity(shown.len() + spans.len());
        let mut label = None;
        // Innermost first: the first frame of the program's own code that is not the
        // allocator's names the stack (not `_PyObject_ArenaMmap` under `_PyObject_Malloc`, which
        // would name every stack of Python objects alike): the frames up to the outermost
        // allocator entry point are skipped, as pprof drops them (`is_allocator_entry`).
        let past_allocator = shown
            .iter()
            .rposition(|l| matches!(l, ShownFrame::Frame(f) if is_allocator_entry(&f.function)))
            .map_or(0, |i| i + 1);
        let past_allocator = if past_allocator < shown.len() { past_allocator } else { 0 };
        // A stack with Python frames is named by its innermost one (`make_value`), not by the
        // interpreter's C function it called (`PyUnicode_Concat`).
        let python = shown.iter().any(|l| matches!(l, ShownFrame::Frame(f) if f.is_python()));
        let mut first_past = None;
        let mut ids: Vec<u32> = Vec::with_capacity(shown.len());
        for (k, l) in shown.iter().enumerate() {
            let (line, own) = match l {
                ShownFrame::Frame(f) => (
                    ShownLine {
                        name: f.function.to_string(),
                        location: f.short_location().unwrap_or_default(),
                    },
                    if python {
                        f.is_python()
                    } else {
                        f.framework_crate().is_none() && !f.is_std_internal() && f.file.is_some()
                    },
                ),
                ShownFrame::Folded { .. } => {
                    (ShownLine { name: l.name().into_owned(), location: String::new() }, false)
                }
            };
            let id = self.frame_id(line);
            if k >= past_allocator {
                first_past = first_past.or(Some(id));
                if own && label.is_none() {
                    label = Some(id);
                }
            }
            ids.push(id);
        }
        for sp in spans {
            frames.push(
                self.frame_id(ShownLine { name: format!("[span {sp}]"), location: String::new() }),
            );
        }
        frames.extend(ids.iter().rev());
        if frames.is_empty() {
            frames.push(
                self.frame_id(ShownLine { name: "[unknown]".to_string(), location: String::new() }),
            );
        }
        let label = label.or(first_past).unwrap_or(frames[frames.len() - 1]);
        self.stack_id(Stack { frames: frames.into_boxed_slice(), label })
    }

    /// Adds `snap` (a snapshot the program took or built) as dump `seq` named `stem`, with a
    /// point at its time (its exact totals and the peak's high-water mark; RSS unknown).
    pub fn add_snapshot(&mut self, snap: &Snapshot, view: FrameView, seq: u64, stem: &str) {
        let opts = ReportOptions {
            expand_frames: view.expand,
            fold_framework_frames: view.fold_framework,
            ..ReportOptions::default()
        };
        // Names nothing (`stem` is given): no instance needed.
        let process = crate::report::ReportContext {
            pid: self.pid,
            instance: None,
            exe: self.exe.clone(),
            rss_kib: None,
            anon_rss_kib: None,
        };
        let report = crate::report::snapshot::report_of(snap, process, &opts);
        let at = Point {
            t_ms: snap.taken_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            retained: snap.totals.retained_bytes(),
            allocated: snap.totals.allocated_bytes,
            rss: 0,
            peak: snap.peak.map_or(0, |p| p.high_water_bytes),
        };
        self.push_point(at);
        self.add_dump(&report, seq, stem, at);
    }

    /// Adds the dump of `r`: its top stacks by retained, allocated and retained-at-peak
    /// bytes, then thins older dumps.
    pub(crate) fn add_dump(&mut self, r: &Report, seq: u64, stem: &str, at: Point) {
        let by_retained = r.ranked(Measurement::RetainedBytes);
        let retained_complete = r.ranked_len(Measurement::RetainedBytes) <= RETAINED_STACKS;
        let mut rows: Vec<u32> = by_retained.iter().take(RETAINED_STACKS).copied().collect();
        let mut read: Vec<u32> = by_retained.iter().take(TABLE_STACKS).copied().collect();
        for m in [Measurement::AllocatedBytes, Measurement::RetainedBytesAtPeak] {
            let n = if m == Measurement::AllocatedBytes { ALLOCATED_STACKS } else { PEAK_STACKS };
            for &e in r.ranked(m).iter().take(n) {
                if !rows.contains(&e) {
                    rows.push(e);
                }
            }
        }
        for &e in rows.iter().skip(RETAINED_STACKS) {
            if !read.contains(&e) && r.figures(e).measure(Measurement::AllocatedBytes) > 0 {
                read.push(e);
            }
        }
        let mut stacks = Vec::with_capacity(rows.len());
        for &e in &rows {
            let s = r.stack_stats(e);
            let (lifetime_ms, age_ms) = if read.contains(&e) && r.has_histograms(e) {
                (round_ms(s.lifetimes.average_millis()), round_ms(s.retained_age.average_millis()))
            } else {
                (-1.0, -1.0)
            };
            stacks.push(StackFigures {
                stack: self.intern_entry(r, e),
                retained: s.retained_bytes,
                allocated: s.allocated_bytes,
                alloc_count: s.num_allocations,
                retained_count: s.retained_count,
                peak: s.peak_retained_bytes,
                lifetime_ms,
                age_ms,
                retained_stderr: retained_stderr(
                    s.retained_bytes,
                    r.facts.sample_interval,
                    Some(s.variance.retained_bytes.sqrt()),
                ),
                resident: s.residency.map(|r| r.resident_bytes),
            });
        }
        let (est_allocated, est_retained) = r.estimated_totals();
        let peak = r.facts.peak.as_ref();
        self.dumps.push_back(Dump {
            seq,
            stem: stem.to_string(),
            at,
            est_retained,
            est_allocated,
            peak_estimated: peak.map_or(0, |p| p.estimated_bytes),
            peak_exact: peak.and_then(|p| p.exact_bytes).unwrap_or(0),
            peak_t_ms: peak
                .and_then(|p| p.at.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64),
            stacks_sampled: r.stacks_sampled() as u64,
            stacks,
            retained_complete,
            detail: true,
            rss_parts: r
                .facts
                .rss
                .as_ref()
                .map(|b| b.iter().map(|(p, v)| (p.key().to_string(), v)).collect())
                .unwrap_or_default(),
            tasks: GroupFigures::listed(&groups::by_task(r)),
            spans: GroupFigures::listed(&groups::by_span(r)),
        });
        self.thin_dumps();
    }

    /// Reduces dumps beyond the newest [`DETAIL_DUMPS`] to their chart stacks, drops every
    /// second older dump past [`MAX_DUMPS`], and forgets stacks and frames no dump refers to.
    pub fn thin_dumps(&mut self) {
        let n = self.dumps.len();
        let mut changed = false;
        for d in self.dumps.iter_mut().take(n.saturating_sub(DETAIL_DUMPS)) {
            if d.detail {
                d.detail = false;
                d.stacks.sort_by_key(|s| std::cmp::Reverse(s.retained));
                if d.stacks.get(CHART_STACKS).is_some_and(|s| s.retained > 0) {
                    d.retained_complete = false;
                }
                d.stacks.truncate(CHART_STACKS);
                d.stacks.shrink_to_fit();
                d.tasks = Vec::new();
                d.spans = Vec::new();
                changed = true;
            }
        }
        if n > MAX_DUMPS {
            let half = n / 2;
            let mut i = 0;
            self.dumps.retain(|_| {
                i += 1;
                i > half || i % 2 == 1
            });
            changed = true;
        }
        if changed {
            self.collect_garbage();
        }
    }

    /// Drops the stacks and frames no dump refers to, renumbering the rest.
    fn collect_garbage(&mut self) {
        let mut stack_map = vec![u32::MAX; self.stacks.len()];
        let mut stacks = Vec::new();
        for d in self.dumps.iter_mut() {
            for s in d.stacks.iter_mut() {
                let old = s.stack as usize;
                if stack_map[old] == u32::MAX {
                    stack_map[old] = stacks.len() as u32;
                    stacks.push(std::mem::replace(
                        &mut self.stacks[old],
                        Stack { frames: Box::new([]), label: 0 },
                    ));
                }
                s.stack = stack_map[old];
            }
        }
        let mut frame_map = vec![u32::MAX; self.frames.len()];
        let mut frames = Vec::new();
        for st in stacks.iter_mut() {
            for f in st.frames.iter_mut().chain(std::iter::once(&mut st.label)) {
                let old = *f as usize;
                if frame_map[old] == u32::MAX {
                    frame_map[old] = frames.len() as u32;
                    frames.push(std::mem::replace(
                        &mut self.frames[old],
                        ShownLine { name: String::new(), location: String::new() },
                    ));
                }
                *f = frame_map[old];
            }
        }
        self.frame_index = index_of(&frames);
        self.stack_index = index_of(&stacks);
        self.frames = frames;
        self.stacks = stacks;
    }

    /// Bytes this timeline holds, approximately (its vectors, maps and strings).
    pub fn memory_bytes(&self) -> usize {
        // A table slot: its 4-byte value and a control byte, at a load of 7/8.
        let slot = 5 * 8 / 7 + 1;
        let frames: usize = self
            .frames
            .iter()
            .map(|f| f.name.capacity() + f.location.capacity() + size_of::<ShownLine>() + slot)
            .sum();
        let stacks: usize =
            self.stacks.iter().map(|s| s.frames.len() * 4 + size_of::<Stack>() + slot).sum();
        let dumps: usize = self
            .dumps
            .iter()
            .map(|d| {
                std::mem::size_of::<Dump>()
                    + d.stem.capacity()
                    + d.stacks.capacity() * std::mem::size_of::<StackFigures>()
                    + d.tasks
                        .iter()
                        .chain(&d.spans)
                        .map(|g| std::mem::size_of::<GroupFigures>() + g.name.capacity())
                        .sum::<usize>()
            })
            .sum();
        self.points.capacity() * std::mem::size_of::<Point>() + frames + stacks + dumps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callstack::{Frame, StackStats, StdCallstack};
    use crate::engine::histogram::MillisHistogram;

    /// A stack `app::main` → `leaf` (at `line`) retaining `retained` bytes.
    fn stack(leaf: &str, line: u32, retained: u64) -> StackStats {
        let f = |ip: usize, name: &str, line: u32| Frame {
            ip,
            function: name.into(),
            file: Some("/app/src/main.rs".into()),
            line: Some(line),
            inlined: false,
            module: None,
        };
        StackStats {
            allocated_bytes: retained * 2,
            num_allocations: 4,
            freed_bytes: retained,
            num_frees: 2,
            retained_bytes: retained,
            retained_count: 2,
            peak_retained_bytes: retained,
            peak_retained_count: 2,
            samples: 1,
            live_samples: 1,
            frames: vec![f(0x1000 + line as usize, leaf, line), f(0x2000, "app::main", 5)],
            lifetimes: MillisHistogram::new(),
            retained_age: MillisHistogram::new(),
            stack: StdCallstack::from_ips(&[0x1000 + line as usize, 0x2000]),
            spans: Vec::new(),
            variance: Default::default(),
            residency: None,
        }
    }

    fn snapshot(stacks: Vec<StackStats>, t: u64) -> Snapshot {
        Snapshot {
            taken_at: UNIX_EPOCH + std::time::Duration::from_secs(t),
            totals: Default::default(),
            sample_interval: 4096,
            unit: crate::engine::sampler::ByteUnit::Requested,
            stacks,
            live_samples: 0,
            dropped_samples: 0,
            address_conflicts: 0,
            giant_refused: 0,
            giant_refusals: Vec::new(),
            symbol_cache_entries: 0,
            peak: None,
        }
    }

    #[test]
    fn a_timeline_held_by_another_process_is_given_up_not_waited_for() {
        // What a `fork` child sees when its parent's report thread held the lock at the fork:
        // the lock taken, by a holder that is not of this process.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _g = TIMELINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            HOLDER.store(std::process::id() + 1, Ordering::Relaxed);
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            HOLDER.store(0, Ordering::Relaxed);
        });
        held_rx.recv().unwrap();
        let start = Instant::now();
        assert!(with_timeline(|_| ()).is_none(), "given up");
        assert!(start.elapsed() < WAIT_OWN, "{:?}", start.elapsed());
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        // Released: the timeline is there again.
        assert!(with_timeline(|t| t.pid).is_some_and(|p| p == std::process::id()));
    }

    /// A CPython stack: the arena's frames under `_PyObject_Malloc`, called by `caller`.
    fn python_stack(caller: &str, ip: usize, retained: u64) -> StackStats {
        let f = |ip: usize, name: &str| Frame {
            ip,
            function: name.into(),
            file: Some("Objects/obmalloc.c".into()),
            line: Some(152),
            inlined: false,
            module: None,
        };
        let mut s = stack("x", 1, retained);
        s.frames = vec![
            f(0x10, "_PyObject_ArenaMmap"),
            f(0x20, "new_arena"),
            f(0x30, "pymalloc_alloc"),
            f(0x40, "_PyObject_Malloc"),
            f(ip, caller),
            f(0x9000, "main"),
        ];
        s.stack = StdCallstack::from_ips(&[0x10, 0x20, 0x30, 0x40, ip, 0x9000]);
        s
    }

    #[test]
    fn a_stack_is_named_by_its_first_frame_past_the_allocator() {
        let mut t = Timeline::new("python3", 1);
        let s = vec![
            python_stack("PyUnicode_New", 0x100, 3000),
            python_stack("PyList_New", 0x200, 2000),
            stack("app::leaf", 7, 1000),
        ];
        t.add_snapshot(&snapshot(s, 1), FrameView::DEFAULT, 0, "set0");
        let d = t.dumps.back().unwrap();
        let mut labels: Vec<&str> = d
            .stacks
            .iter()
            .map(|s| t.frames[t.stacks[s.stack as usize].label as usize].name.as_str())
            .collect();
        labels.sort();
        assert_eq!(labels, ["PyList_New", "PyUnicode_New", "app::leaf"]);
        // A stack of the allocator's frames only keeps its innermost frame as its name.
        let mut only = python_stack("x", 0x300, 10);
        only.frames.truncate(4);
        only.stack = StdCallstack::from_ips(&[0x10, 0x20, 0x30, 0x40]);
        t.add_snapshot(&snapshot(vec![only], 2), FrameView::DEFAULT, 1, "set1");
        let d = t.dumps.back().unwrap();
        let label = t.stacks[d.stacks[0].stack as usize].label;
        assert_eq!(t.frames[label as usize].name, "_PyObject_ArenaMmap");
    }

    #[test]
    fn old_dumps_are_thinned_and_their_stacks_still_name_the_right_frames() {
        let mut t = Timeline::new("x", 1);
        let n = MAX_DUMPS as u64 + 100;
        for d in 0..n {
            // A stack of its own in each dump (named after the dump), and one in all of them.
            let own = format!("app::only_in_dump_{d}");
            let s = vec![stack(&own, 10 + (d % 7) as u32, 1000 + d), stack("app::always", 9, 10)];
            t.add_snapshot(&snapshot(s, d), FrameView::DEFAULT, d, &format!("set{d}"));
        }
        assert!(t.dumps.len() <= MAX_DUMPS, "{} dumps", t.dumps.len());
        assert_eq!(t.dumps.back().unwrap().seq, n - 1, "the newest dump stays");
        assert_eq!(t.dumps.front().unwrap().seq, 0, "the first dump stays");
        assert_eq!(t.dumps.iter().filter(|d| d.detail).count(), DETAIL_DUMPS);
        for d in &t.dumps {
            assert!(d.stacks.len() <= if d.detail { 2 } else { CHART_STACKS });
            for s in &d.stacks {
                let st = &t.stacks[s.stack as usize];
                let label = &t.frames[st.label as usize].name;
                if s.retained == 10 {
                    assert_eq!(label, "app::always");
                } else {
                    assert_eq!(label, &format!("app::only_in_dump_{}", d.seq), "renumbered right");
                    assert_eq!(s.retained, 1000 + d.seq);
                }
                let root = &t.frames[st.frames[0] as usize];
                assert_eq!(root.name, "app::main");
            }
        }
        // Stacks of dumps no longer kept are forgotten: one per kept dump and the shared one.
        assert_eq!(t.stacks.len(), t.dumps.len() + 1);
        // Interning still finds the survivors.
        let before = t.stacks.len();
        let s = vec![stack("app::always", 9, 10)];
        t.add_snapshot(&snapshot(s, n), FrameView::DEFAULT, n, "last");
        assert_eq!(t.stacks.len(), before, "the shared stack is found again, not added");
    }

    #[test]
    fn the_ring_stays_bounded_and_keeps_the_start_and_the_newest() {
        let mut t = Timeline::new("x", 1);
        for i in 0..(30 * 24 * 3600 / 5) {
            t.push_point(Point { t_ms: i, ..Point::default() });
        }
        assert!(t.points.len() <= MAX_POINTS && t.points.len() > MAX_POINTS / 2);
        assert_eq!(t.points.front().unwrap().t_ms, 0, "the start stays");
        assert_eq!(t.points.back().unwrap().t_ms, 30 * 24 * 3600 / 5 - 1, "the newest stays");
        let ts: Vec<u64> = t.points.iter().map(|p| p.t_ms).collect();
        assert!(ts.windows(2).all(|w| w[0] < w[1]), "in order");
    }
}
