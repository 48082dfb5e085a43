//! Encoding the engine's state as one version of the live file (see the module docs of
//! `live`). Runs on the report thread (profiler code): it takes the stack table without
//! naming a frame, reads every row's histograms in one pass, and encodes.

use std::io::{self, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::format;
use crate::callstack::Measurement;
use crate::engine::sampler::ByteUnit;
use crate::engine::totals::Totals;
use crate::report::ReportOptions;
use crate::report::model::Occasion;
use crate::report::model::Report;
use crate::report::model::facts::Facts;
use crate::report::model::rss::RssBreakdown;
use crate::report::model::table::{self, StackTable};
use crate::symbols::symbolize::Module;

/// Timeline points a version carries (the most recent ones): 40 bytes each in memory, about
/// 20 in the file.
const POINTS: usize = 512;

/// While the retained total grows, the report thread looks at it this often (instead of once
/// per interval), so that a spike towards an OOM kill gets a version as it grows. Measured
/// (`heap_at_death::fast_growth...`, 200 MB/s, killed at random): polls every 100 ms and a
/// version at each eighth of growth left the file 89 % of the heap at the kill; every 25 ms
/// and each 32nd, see BENCHMARKS.md ("Freshness at death").
const GROWTH_POLL: Duration = Duration::from_millis(25);
/// Growth between two looks that counts as growing (10 MB/s at [`GROWTH_POLL`]).
const GROWING_BYTES: u64 = 256 << 10;
/// A version is written before its interval when the retained total grew by a 32nd
/// ([`SPIKE_SHARE`]) since the last one, and by at least this much. The least gap between
/// versions (20 times what the last one took) still bounds the thread's writing at 5 %.
const SPIKE_BYTES: u64 = 1 << 20;
/// See [`SPIKE_BYTES`].
const SPIKE_SHARE: u64 = 32;
/// The least time between two readings of the resident set's parts (see [`LiveWriter::rss`]).
const RSS_EVERY: Duration = Duration::from_secs(1);
/// When nothing moved, the file's modification time (the heartbeat) is set this often.
const HEARTBEAT: Duration = Duration::from_secs(5);

/// What the writer keeps between versions: the caller (the report thread) owns it.
#[derive(Debug, Default)]
pub(crate) struct LiveWriter {
    /// The process's identity (read again by a `fork` child, whose pid differs).
    process: format::Process,
    /// The loader's (loads, unloads) counters when `modules` was listed.
    modules_key: (u64, u64),
    modules: Vec<format::Module>,
    /// The totals of the last version written: a version is written only when they moved.
    last_totals: Option<Totals>,
    /// When the next version is due at the latest interval (None: now).
    next: Option<Instant>,
    /// When the last version was written or the heartbeat set, and the least time before the
    /// next version (20 times what the last one took).
    last_write: Option<Instant>,
    last_touch: Option<Instant>,
    min_gap: Duration,
    /// The retained total at the last look, when that was, and whether it grew since the look
    /// before.
    last_look: u64,
    last_look_at: Option<Instant>,
    growing: bool,
    /// When the writer was made (the report thread's start).
    born: Option<Instant>,
    /// The last reading of the resident set's parts, when it was taken, and what it took.
    rss: Option<(RssBreakdown, Instant)>,
    rss_cost: Duration,
    /// What reading it took in the version being written: paced on its own (at most 5 % of
    /// the thread too), so left out of the version's cost that paces the versions.
    rss_spent: Duration,
    /// What measuring the residency took in the version being written (left out of its cost
    /// too, see [`LiveWriter::done`]).
    measure_spent: Duration,
}

/// What [`LiveWriter::due`] asks the report thread to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Nothing yet.
    No,
    /// Write a version: the totals moved.
    Write,
    /// Nothing moved for a while: only set the file's modification time (the heartbeat).
    Touch,
}

impl LiveWriter {
    /// A writer whose first version is due at `first`.
    pub(crate) fn starting(first: Instant) -> Self {
        Self { next: Some(first), born: Some(Instant::now()), ..Self::default() }
    }

    /// How long ago the writer was made (the report thread's age).
    pub(crate) fn age(&self) -> std::time::Duration {
        self.born.map_or(std::time::Duration::MAX, |b| b.elapsed())
    }

    /// When the report thread should wake for the live file: at the next version's time, or
    /// sooner while the retained total grows.
    pub(crate) fn next(&self) -> Instant {
        let next = self.next.unwrap_or_else(Instant::now);
        match self.last_look_at {
            Some(at) if self.growing => next.min(at + GROWTH_POLL),
            _ => next,
        }
    }

    /// What is due at `now`, the exact totals being `totals`: a version when the totals moved
    /// and the interval passed, or before it when the retained total grew by a 32nd (at
    /// least [`SPIKE_BYTES`]) since the last version; the heartbeat when nothing moved for
    /// [`HEARTBEAT`].
    pub(crate) fn due(&mut self, now: Instant, totals: &Totals, interval: Duration) -> Due {
        let retained = totals.retained_bytes();
        self.growing = retained > self.last_look.saturating_add(GROWING_BYTES);
        self.last_look = retained;
        self.last_look_at = Some(now);
        if self.last_totals.is_none() {
            // No version yet: the first one at its time.
            return if self.next.is_some_and(|n| now < n) { Due::No } else { Due::Write };
        }
        let last = self.last_totals.map_or(0, |t| t.retained_bytes());
        let gap_passed = self.last_write.is_none_or(|w| now >= w + self.min_gap);
        let spike = retained >= last.saturating_add((last / SPIKE_SHARE).max(SPIKE_BYTES));
        if spike && gap_passed {
            return Due::Write;
        }
        if self.next.is_some_and(|n| now < n) {
            return Due::No;
        }
        if self.last_totals != Some(moved(totals)) {
            Due::Write
        } else if self.last_touch.is_none_or(|t| now >= t + HEARTBEAT) {
            Due::Touch
        } else {
            // Nothing moved: looked at again an interval later.
            self.next = Some(now + interval);
            Due::No
        }
    }

    /// The file is gone (removed at an `exec` that failed): the next look writes a version.
    pub(crate) fn rewrite(&mut self) {
        self.last_totals = None;
    }

    /// Records what was done at `now` (a version that took `cost`, or the heartbeat) and
    /// schedules the next version `interval` later, or 20 times `cost` when that is longer,
    /// so that writing never takes more than 5 % of the thread. Left out of `cost`: the resident
    /// set's reading (paced on its own, see [`LiveWriter::rss`]) and the residency's pagemap
    /// read (0.6 ms a version at 200 MB live): counted, they thinned the versions of a fast
    /// grower (its heap at death held 93 to 96 % of the heap at the kill, 97 to 98 % without
    /// them). Measured with both: the report thread used 50 ms of CPU in 2 s of growth at
    /// 200 MB/s (2.5 %).
    pub(crate) fn done(&mut self, now: Instant, due: Due, interval: Duration, cost: Duration) {
        let cost = cost.saturating_sub(std::mem::take(&mut self.rss_spent));
        let cost = cost.saturating_sub(std::mem::take(&mut self.measure_spent));
        match due {
            Due::Write => {
                self.last_write = Some(now);
                self.last_touch = Some(now);
                self.min_gap = cost.saturating_mul(20);
            }
            Due::Touch => self.last_touch = Some(now),
            Due::No => {}
        }
        self.next = Some(now + interval.max(self.min_gap));
    }

    /// Writes the engine's state now to `out` (a version of the live file), `next_seq` the
    /// number a report of it would take. The caller holds the re-entrancy guard (the report
    /// thread is profiler code).
    pub(crate) fn encode(
        &mut self,
        sample_interval: u64,
        unit: ByteUnit,
        opts: &ReportOptions,
        next_seq: u64,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let key = crate::symbols::symbolize::loader_counters();
        if self.modules.is_empty() || key != self.modules_key {
            self.modules = crate::symbols::symbolize::modules().iter().map(module).collect();
            self.modules_key = key;
        }
        let mut facts = Facts::read(sample_interval, unit, Occasion::default());
        self.last_totals = Some(moved(&facts.totals));
        let (mut stacks, peak) = table::take_unsymbolized();
        facts.peak = peak;
        // What the exit report measures too, so that a heap at death says how much of each
        // stack was resident and why the OOM killer counted what it did.
        if crate::report::model::resident::enabled() {
            let t = Instant::now();
            stacks.measure_residency();
            self.measure_spent = t.elapsed();
        }
        facts.rss = self.rss(&facts);
        let modules = std::mem::take(&mut self.modules);
        let written = self.encode_state(&facts, &stacks, &modules, opts, next_seq, out);
        self.modules = modules;
        written
    }

    /// The resident set explained for a version written now with `facts`: read again when the
    /// last reading is older than [`RSS_EVERY`] (or 20 times what it took), else that reading,
    /// its age told. Reading `/proc/self/smaps` walks the page tables of every mapping (3 to 4
    /// ms at 200 MB resident, measured), several times what the rest of a version costs: read
    /// at every version and counted in the versions' pacing, it thinned the versions of a
    /// fast-growing process, and its heap at death held 93 % of the heap at the kill instead
    /// of 97 %.
    fn rss(&mut self, facts: &Facts) -> Option<RssBreakdown> {
        let now = Instant::now();
        let stale = self
            .rss
            .as_ref()
            .is_none_or(|(_, at)| now >= *at + RSS_EVERY.max(self.rss_cost.saturating_mul(20)));
        if stale {
            let b = facts.read_rss();
            self.rss_cost = now.elapsed();
            self.rss_spent = self.rss_cost;
            self.rss = b.map(|b| (b, now));
        }
        self.rss.as_ref().map(|(b, at)| RssBreakdown {
            age_ms: now.saturating_duration_since(*at).as_millis() as u64,
            ..b.clone()
        })
    }

    /// Writes the engine's state now, as of `facts` (read by the caller, who names the file
    /// after them), as report set `seq`'s raw profile: no symbol is read. See
    /// [`write_raw_set`].
    fn encode_raw_set(
        &mut self,
        mut facts: Facts,
        opts: &ReportOptions,
        seq: u64,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let modules: Vec<format::Module> =
            crate::symbols::symbolize::modules().iter().map(module).collect();
        let (stacks, peak) = table::take_unsymbolized();
        facts.peak = peak;
        self.encode_state(&facts, &stacks, &modules, opts, seq, out)
    }

    /// Writes the report `r` as a raw profile (`YING_SYMBOLIZE=offline`: the set's `.live`,
    /// numbered `seq` as the set): the very figures and addresses of the set, not another
    /// walk of the engine's tables.
    pub(crate) fn encode_report(
        &mut self,
        r: &Report,
        seq: u64,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let modules: Vec<format::Module> = r.facts.modules.iter().map(module).collect();
        self.encode_state(&r.facts, &r.table, &modules, &r.opts, seq, out)
    }

    /// Writes `facts` and `stacks` to `out`: the message without its rows first, then each
    /// row as it is made (a protobuf message is its fields in any order), so that what is held
    /// beyond the stack table is one row and the histograms of all rows, not a copy of the
    /// whole table.
    fn encode_state(
        &mut self,
        facts: &Facts,
        stacks: &StackTable,
        modules: &[format::Module],
        opts: &ReportOptions,
        next_seq: u64,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        if self.process.pid != std::process::id() {
            self.process = identity();
        }
        let (sample_interval, unit, occasion) =
            (facts.sample_interval, facts.unit, &facts.occasion);
        let ctx = &facts.process;
        let mut process = self.process.clone();
        process.exe.clone_from(&ctx.exe);
        process.rss_kib = ctx.rss_kib.unwrap_or(0);
        process.anon_rss_kib = ctx.anon_rss_kib.unwrap_or(0);
        let ips: Vec<u64> = stacks.locations().iter().map(|l| l.ip as u64).collect();
        let python_codes = python_codes(&ips);
        let span_paths = stacks
            .span_paths()
            .iter()
            .map(|p| format::SpanPath {
                spans: p
                    .iter()
                    .map(|s| format::Span {
                        name: s.name.to_string(),
                        target: s.target.to_string(),
                    })
                    .collect(),
            })
            .collect();
        let t = &facts.totals;
        let (mapped_kind, mapped_bytes, mapped_regions) = match facts.mapped {
            crate::engine::mapped::MappedState::NotSeen => (0, 0, 0),
            crate::engine::mapped::MappedState::Off => (1, 0, 0),
            crate::engine::mapped::MappedState::Counted { bytes, regions } => (2, bytes, regions),
        };
        let head = format::Live {
            version: super::VERSION,
            process: Some(process),
            written_ms: ms(facts.taken_at),
            next_seq,
            sample_interval,
            unit: match unit {
                ByteUnit::Requested => 0,
                ByteUnit::Chunk => 1,
                ByteUnit::Usable => 2,
            },
            totals: Some(format::Totals {
                allocated_bytes: t.allocated_bytes,
                freed_bytes: t.freed_bytes,
                profiler_bytes: t.profiler_bytes,
                profiler_peak_bytes: t.profiler_peak_bytes,
                live_samples: facts.live_samples,
                dropped_samples: facts.dropped_samples,
                address_conflicts: facts.address_conflicts,
                giant_refused: facts.giant_refused,
            }),
            peak: facts.peak.map(|p| format::Peak {
                since_start_ms_plus_one: p.since_start.map_or(0, |d| d.as_millis() as u64 + 1),
                at_ms: ms(p.at),
                estimated_bytes: p.estimated_bytes,
                exact_bytes_plus_one: p.exact_bytes.map_or(0, |b| b.saturating_add(1)),
                high_water_bytes: p.high_water_bytes,
                captures: p.captures,
            }),
            modules: modules.to_vec(),
            ips,
            rows: Vec::new(),
            span_paths,
            points: crate::report::timeline::recent_points(POINTS)
                .into_iter()
                .map(|p| format::Point {
                    t_ms: p.t_ms,
                    retained: p.retained,
                    allocated: p.allocated,
                    rss: p.rss,
                    peak: p.peak,
                })
                .collect(),
            options: Some(format::Options {
                top_k: opts.top_k as u64,
                measure_allocated: opts.measurement == Measurement::AllocatedBytes,
                gen_flamegraphs: opts.gen_flamegraphs,
                expand_frames: opts.expand_frames,
                fold_framework_frames: opts.fold_framework_frames,
            }),
            mapped_kind,
            mapped_bytes,
            mapped_regions,
            foreign_malloc: facts.foreign_malloc.clone().unwrap_or_default(),
            allocator: facts.allocator.clone().unwrap_or_default(),
            python: facts.python.clone().unwrap_or_default(),
            python_codes,
            giant_refusals: crate::engine::giant::recent()
                .into_iter()
                .map(|r| format::GiantRefusal {
                    number: r.number,
                    size: r.size,
                    ips: r.ips.iter().map(|&ip| ip as u64).collect(),
                })
                .collect(),
            reason: occasion.reason.clone().unwrap_or_default(),
            exiting: occasion.exiting,
            rss: facts.rss.as_ref().map(|b| format::Rss {
                rss: b.rss,
                parts: b.parts.to_vec(),
                heap_not_resident: b.heap_not_resident,
                allocator_known: b.allocator_known,
                age_ms: b.age_ms,
            }),
            limit: facts.limit.map(|l| format::Limit {
                bytes: l.bytes,
                cgroup: l.cgroup,
                pct: l.pct,
                near_since_ms: l.near_since_ms.unwrap_or(0),
            }),
        };
        let mut buf = prost::Message::encode_to_vec(&head);
        drop(head);
        out.write_all(&buf)?;
        let histograms = stacks.all_histograms();
        for (r, h) in histograms.into_iter().enumerate() {
            let raw = stacks.raw_row(r as u32, h);
            let row = format::Row {
                est: raw.fig.est.to_vec(),
                var: raw.fig.var.to_vec(),
                res: raw.fig.res.map_or_else(Vec::new, |r| r.to_vec()),
                samples: raw.fig.samples,
                live_samples: raw.fig.live_samples,
                locs: raw.locs,
                spans: raw.spans,
                lifetimes: histogram(&raw.histograms.lifetimes),
                retained_age: histogram(&raw.histograms.retained_age),
            };
            buf.clear();
            prost::encoding::message::encode(ROWS_TAG, &row, &mut buf);
            out.write_all(&buf)?;
        }
        Ok(())
    }
}

/// The field number of `Live::rows` (see `format.rs`).
const ROWS_TAG: u32 = 11;

/// The totals that say whether memory moved: allocated and freed bytes only (the profiler's
/// own bytes move when a version is written).
fn moved(t: &Totals) -> Totals {
    Totals { allocated_bytes: t.allocated_bytes, freed_bytes: t.freed_bytes, ..Totals::default() }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The code objects named by the Python frames among `ips` (each once), for a reader in
/// another process.
fn python_codes(ips: &[u64]) -> Vec<format::PythonCode> {
    let mut ids: Vec<u32> = ips
        .iter()
        .filter_map(|&ip| crate::engine::python::decode(ip as usize).map(|(id, _)| id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| {
            let (qualname, filename) = crate::engine::python::describe(id)?;
            Some(format::PythonCode { id, qualname, filename })
        })
        .collect()
}

fn module(m: &Module) -> format::Module {
    format::Module {
        path: m.name.to_string(),
        start: m.start as u64,
        end: m.end as u64,
        bias: m.bias as u64,
        build_id: m.build_id.clone(),
    }
}

fn histogram(h: &crate::engine::histogram::MillisHistogram) -> Option<format::Histogram> {
    let (weights, sum, total) = h.parts();
    (total != 0.0).then(|| format::Histogram {
        weights: weights.to_vec(),
        weighted_sum_millis: sum,
        total_weight: total,
    })
}

/// The process's identity, read once per process: command line, start time, boot id.
fn identity() -> format::Process {
    let cmdline = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let start_ticks = crate::sys::state_and_start("self").map_or(0, |(_, t)| t);
    format::Process {
        pid: std::process::id(),
        instance: Some(crate::report::instance()),
        cmdline,
        start_ticks,
        start_ms: crate::sys::start_ms(start_ticks).unwrap_or(0),
        boot_id: boot_id(),
        ..format::Process::default()
    }
}

/// `/proc/sys/kernel/random/boot_id`, trimmed (empty when unreadable).
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Writes report set `seq` of this process into `dir` as its raw profile only,
/// `ying.<exe>.<pid>.<seq>.<time>.live`: the engine's tables as addresses with their figures and
/// histograms, the loaded modules with their build ids, the totals and the occasion, and no
/// symbol read (a short process's exit report, `YING_SHORT_PROCESS_SECS`). `ying report`,
/// `ying view` and `ying run` turn it into the full set, under the same name, outside the
/// process. The caller holds the re-entrancy guard.
pub(crate) fn write_raw_set(
    dir: &crate::report::files::ReportDir,
    sample_interval: u64,
    unit: ByteUnit,
    opts: &ReportOptions,
    occasion: Occasion,
    seq: u64,
) -> io::Result<crate::report::ReportPaths> {
    let facts = Facts::read(sample_interval, unit, occasion);
    let stem = crate::report::SetName {
        exe: facts.process.exe_name(),
        pid: facts.process.pid,
        instance: facts.process.instance,
        seq,
        stamp: crate::report::utc_timestamp(facts.taken_at, false),
    }
    .to_string();
    let mut w = LiveWriter::default();
    let raw = dir.write_atomic_with(&format!("{stem}.{}", super::EXTENSION), |out| {
        w.encode_raw_set(facts, opts, seq, out)
    })?;
    Ok(crate::report::ReportPaths { raw: Some(raw), ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(retained: u64) -> Totals {
        Totals { allocated_bytes: retained, ..Totals::default() }
    }

    /// A writer that wrote a version of `retained` bytes at `at`.
    fn wrote(at: Instant, retained: u64, interval: Duration) -> LiveWriter {
        let mut w = LiveWriter::starting(at);
        assert_eq!(w.due(at, &totals(retained), interval), Due::Write);
        w.last_totals = Some(moved(&totals(retained)));
        w.done(at, Due::Write, interval, Duration::from_millis(1));
        w
    }

    /// Between versions nothing is due; at the interval a version if memory moved, else
    /// nothing until the heartbeat is due; a heartbeat every [`HEARTBEAT`].
    #[test]
    fn versions_at_the_interval_and_heartbeats_when_nothing_moves() {
        let (t0, i) = (Instant::now(), Duration::from_millis(500));
        let mut w = wrote(t0, 10 << 20, i);
        // Half a MiB more: below a spike (1 MiB at least).
        let more = (10 << 20) + (512 << 10);
        assert_eq!(w.due(t0 + i / 2, &totals(more), i), Due::No);
        assert_eq!(w.due(t0 + i, &totals(more), i), Due::Write);
        let mut w = wrote(t0, 10 << 20, i);
        assert_eq!(w.due(t0 + i, &totals(10 << 20), i), Due::No, "heartbeat not due yet");
        assert!(w.next() >= t0 + i + i, "looked at again an interval later, no spinning");
        assert_eq!(w.due(t0 + HEARTBEAT, &totals(10 << 20), i), Due::Touch);
    }

    /// A retained total that grows by a 32nd (at least [`SPIKE_BYTES`]) gets a version
    /// before the interval, once 20 times the last version's cost has passed; while it grows,
    /// the thread looks every [`GROWTH_POLL`].
    #[test]
    fn a_spike_gets_a_version_before_its_interval() {
        let (t0, i) = (Instant::now(), Duration::from_secs(60));
        let mut w = wrote(t0, 100 << 20, i);
        let soon = t0 + Duration::from_millis(100);
        assert_eq!(w.due(soon, &totals(102 << 20), i), Due::No, "2 MiB is not a 32nd");
        assert!(w.next() <= soon + GROWTH_POLL, "growing: looked at again soon");
        assert_eq!(w.due(soon + GROWTH_POLL, &totals(104 << 20), i), Due::Write);
        let mut small = wrote(t0, 1 << 20, i);
        assert_eq!(small.due(soon, &totals(3 << 19), i), Due::No, "less than SPIKE_BYTES");
        // A version that took 50 ms: the next not before a second.
        let mut slow = wrote(t0, 100 << 20, i);
        slow.done(t0, Due::Write, i, Duration::from_millis(50));
        assert_eq!(slow.due(t0 + Duration::from_millis(500), &totals(200 << 20), i), Due::No);
        assert_eq!(slow.due(t0 + Duration::from_secs(1), &totals(200 << 20), i), Due::Write);
        // Not growing any more: the next look is at the interval.
        let mut flat = wrote(t0, 100 << 20, i);
        assert_eq!(flat.due(soon, &totals(100 << 20), i), Due::No);
        assert!(flat.next() >= t0 + i);
    }

    /// The message written head first and rows one by one decodes as the whole message.
    #[test]
    fn rows_streamed_after_the_head_decode_as_one_message() {
        let row = |n: u64| format::Row {
            est: vec![n as f64; 8],
            var: vec![n as f64; 8],
            samples: n,
            live_samples: n / 2,
            locs: vec![1, 2, n as u32],
            spans: 0,
            lifetimes: Some(format::Histogram {
                weights: vec![1.0, 2.0],
                weighted_sum_millis: 3.0,
                total_weight: 3.0,
            }),
            retained_age: None,
            res: vec![n as f64, 0.0],
        };
        let whole = format::Live {
            version: super::super::VERSION,
            process: Some(format::Process { pid: 7, exe: "/bin/x".into(), ..Default::default() }),
            ips: vec![0, 10, 20, 30],
            rows: vec![row(3), row(5)],
            ..Default::default()
        };
        let mut out =
            prost::Message::encode_to_vec(&format::Live { rows: Vec::new(), ..whole.clone() });
        for r in &whole.rows {
            prost::encoding::message::encode(ROWS_TAG, r, &mut out);
        }
        let back: format::Live = prost::Message::decode(out.as_slice()).unwrap();
        assert_eq!(back, whole);
    }
}
