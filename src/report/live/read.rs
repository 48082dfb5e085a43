//! Reading a live file from outside its process, dead or alive, and writing its report set:
//! the same files the process would have written ([`crate::report`]), every address named
//! from the binaries on disk matched by build id (`symbols/offline.rs`), the text header
//! saying how the process ended when that can be known.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::format;
use crate::callstack::Measurement;
use crate::engine::histogram::MillisHistogram;
use crate::engine::peak::Peak;
use crate::engine::sampler::ByteUnit;
use crate::engine::totals::Totals;
use crate::report::files::{DEFAULT_FILE_MODE, ReportDir};
use crate::report::model::Report;
use crate::report::model::facts::{Facts, GiantRefusal, Occasion};
use crate::report::model::rss::RssBreakdown;
use crate::report::model::table::{self, Figures, Histograms, RawRow, StackTable};
use crate::report::timeline::{Point, Timeline};
use crate::report::{ReportContext, ReportOptions, ReportPaths, utc_timestamp};
use crate::spans::SpanInfo;
use crate::symbols::symbolize::Module;
use crate::triggers::limit::LimitState;

/// A live file, read and decoded.
#[derive(Debug, Clone)]
pub struct LiveProfile {
    live: format::Live,
    path: PathBuf,
    modified: SystemTime,
}

/// What [`LiveProfile::write_report_set`] wrote.
#[derive(Debug, Clone)]
pub struct LiveReport {
    /// The set's files.
    pub paths: ReportPaths,
    /// The set's stem, `ying.<exe>.<pid>.<seq>.<time>`.
    pub stem: String,
    /// One line per module whose frames could not be named (missing or rebuilt binary).
    pub warnings: Vec<String>,
    /// How the process ended, as the text header says it.
    pub ended: String,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

impl LiveProfile {
    /// Reads and decodes the live file at `path`. Errors name the path: unreadable, not a live
    /// file, or written by a newer Ying.
    pub fn read(path: &Path) -> io::Result<Self> {
        // Never a FIFO or a device (a directory listing may name one): opening it could block.
        let md = std::fs::metadata(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        if !md.is_file() {
            return Err(bad(path, "not a regular file"));
        }
        if let Some(uid) = crate::report::trust::untrusted_owner(path) {
            return Err(crate::report::trust::untrusted_error(path, uid));
        }
        let limit = crate::report::bounded::max_decoded_bytes();
        if md.len().saturating_mul(9) > limit {
            let e = crate::report::bounded::over_bound("the live file", md.len() * 9, limit);
            return Err(bad(path, e));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let modified = md.modified().unwrap_or(UNIX_EPOCH);
        // What decoding may take, bounded before it starts (a planted file; `bounded`).
        let bound = crate::report::bounded::decoded_bound(&bytes);
        if bound > limit {
            let e = crate::report::bounded::over_bound("the live file", bound, limit);
            return Err(bad(path, e));
        }
        let live: format::Live = prost::Message::decode(bytes.as_slice())
            .map_err(|e| bad(path, format!("not a Ying live file ({e})")))?;
        if live.version == 0 || live.process.is_none() {
            return Err(bad(path, "not a Ying live file (no version or process)"));
        }
        if live.version > super::VERSION {
            return Err(bad(
                path,
                format!(
                    "written by a newer Ying (format {}, this one reads {})",
                    live.version,
                    super::VERSION
                ),
            ));
        }
        Ok(Self { live, path: path.to_path_buf(), modified })
    }

    fn process(&self) -> &format::Process {
        // `read` refuses a file without one.
        self.live.process.as_ref().expect("checked in read")
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.process().pid
    }

    /// The process's executable.
    pub fn exe(&self) -> &str {
        &self.process().exe
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the version read was written.
    pub fn written_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.live.written_ms)
    }

    /// The last moment the process is known to have been alive: the version's time, or the
    /// file's modification time (the heartbeat), whichever is later.
    pub fn last_seen_alive(&self) -> SystemTime {
        self.written_at().max(self.modified)
    }

    /// Exact bytes the program retained as of the version read.
    pub fn retained_bytes(&self) -> u64 {
        self.live.totals.as_ref().map_or(0, |t| t.allocated_bytes.saturating_sub(t.freed_bytes))
    }

    /// Whether the process that wrote the file is still running: the same pid, started at the
    /// same tick, since the same boot, and not a zombie (dead, not yet reaped by its parent).
    pub fn is_running(&self) -> bool {
        let p = self.process();
        // A zombie (state Z or X) has ended; its parent has not reaped it yet.
        p.boot_id == super::write::boot_id()
            && crate::sys::state_and_start(&p.pid.to_string()).is_some_and(|(state, start)| {
                start == p.start_ticks && state != "Z" && state != "X"
            })
    }

    /// What the text header says of the process's end when the caller does not know it.
    pub fn default_ending(&self) -> String {
        if self.is_running() {
            format!(
                "still running; this is its state as of {}",
                utc_timestamp(self.written_at(), true)
            )
        } else {
            format!(
                "not running; last seen alive at {}",
                utc_timestamp(self.last_seen_alive(), true)
            )
        }
    }

    /// Writes the report set of the version read into `out` (created if missing): text with
    /// its PEAK section, folded stacks and flamegraphs, both pprof profiles, the manifest and
    /// the HTML page. `ended` is how the process ended ("killed by SIGKILL"), when the caller
    /// knows it; else [`LiveProfile::default_ending`].
    pub fn write_report_set(&self, out: &Path, ended: Option<&str>) -> io::Result<LiveReport> {
        // A set's raw profile (`YING_SYMBOLIZE=offline`) is a moment of a process's life, not
        // its end: its set says nothing of an end unless told.
        let ended = match ended {
            Some(e) => Some(e.to_string()),
            None if self.is_set_profile() => None,
            None => Some(self.default_ending()),
        };
        let (mut report, warnings) = self.report(ended.clone());
        let ended = ended.unwrap_or_default();
        // A set's raw profile is named over its own raw files; a live file's set is new.
        let dir = ReportDir::open(out, DEFAULT_FILE_MODE)?;
        let dir = if self.is_set_profile() { dir.replacing() } else { dir };
        let ctx = &report.facts.process;
        // A set's raw profile becomes its own set; a live file's set takes a free number.
        let seq = match self.is_set_profile() {
            true => self.live.next_seq,
            false => free_seq(out, &ctx.exe_name(), ctx.process(), self.live.next_seq),
        };
        // The page: the recent points and this one dump.
        let ctx = &report.facts.process;
        let mut t = Timeline::new(&ctx.exe, ctx.pid);
        t.note = (!ended.is_empty()).then(|| ended.clone());
        for p in self.points() {
            t.push_point(p);
        }
        let title = if ended.is_empty() {
            format!("Ying memory report: {} (pid {})", ctx.exe_name(), ctx.pid)
        } else {
            format!("Ying memory report: {} (pid {}), {ended}", ctx.exe_name(), ctx.pid)
        };
        let at = self.point(&report);
        let page = crate::report::Page::Of(Box::new(t), at, title);
        let paths = crate::report::write_set_numbered(&mut report, &dir, seq, false, page)?;
        let stem = crate::report::set_stem(&report, seq);
        Ok(LiveReport { paths, stem, warnings, ended })
    }

    /// Whether the file is a report set's raw profile (`ying.<exe>.<pid>.<seq>.<time>.live`,
    /// written with `YING_SYMBOLIZE=offline`) rather than a process's live file.
    pub fn is_set_profile(&self) -> bool {
        self.path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| crate::report::SetName::parse_file(n).is_some())
    }

    /// The timeline points the file carries, oldest first.
    pub(crate) fn points(&self) -> impl Iterator<Item = Point> + '_ {
        self.live.points.iter().map(|p| Point {
            t_ms: p.t_ms,
            retained: p.retained,
            allocated: p.allocated,
            rss: p.rss,
            peak: p.peak,
        })
    }

    /// The number the process's next set would have had.
    pub(crate) fn next_seq(&self) -> u64 {
        self.live.next_seq
    }

    /// The point of the version read, from `report` (its report).
    pub(crate) fn point(&self, report: &Report) -> Point {
        let totals = &report.facts.totals;
        Point {
            t_ms: self.live.written_ms,
            retained: totals.retained_bytes(),
            allocated: totals.allocated_bytes,
            rss: report.facts.process.rss_kib.unwrap_or(0) * 1024,
            peak: report.facts.peak.map_or(0, |p| p.high_water_bytes),
        }
    }

    /// The report of the version read, every address named from the files on disk, and the
    /// warnings of that naming.
    pub(crate) fn report(&self, ended: Option<String>) -> (Report, Vec<String>) {
        let l = &self.live;
        let p = self.process();
        let modules: Vec<Module> = l
            .modules
            .iter()
            .map(|m| Module {
                name: Arc::from(m.path.as_str()),
                start: m.start as usize,
                end: m.end as usize,
                bias: m.bias as usize,
                build_id: m.build_id.clone(),
            })
            .collect();
        let mut want: Vec<usize> = l.ips.iter().skip(1).map(|&ip| ip as usize).collect();
        want.extend(l.giant_refusals.iter().flat_map(|r| r.ips.iter().map(|&ip| ip as usize)));
        want.sort_unstable();
        want.dedup();
        // Python frames are named from the code objects the file carries, not from binaries.
        let codes: HashMap<u32, (String, String)> = l
            .python_codes
            .iter()
            .map(|c| (c.id, (c.qualname.clone(), c.filename.clone())))
            .collect();
        let (python, want): (Vec<usize>, Vec<usize>) =
            want.into_iter().partition(|&ip| crate::engine::python::decode(ip).is_some());
        let (mut names, warnings) = crate::symbols::offline::resolve_offline(
            (p.pid, (p.start_ms != 0).then_some(p.start_ms)),
            &modules,
            &want,
        );
        for w in python {
            let named =
                crate::engine::python::decode(w).and_then(|(id, _)| codes.get(&id).cloned());
            names.insert(w, crate::symbols::symbolize::python_frame_named(w, named));
        }
        let ips: Vec<usize> =
            if l.ips.is_empty() { vec![0] } else { l.ips.iter().map(|&ip| ip as usize).collect() };
        let locations = table::unnamed_locations(&ips);
        let span_paths: Vec<Vec<SpanInfo>> = l
            .span_paths
            .iter()
            .map(|sp| {
                sp.spans
                    .iter()
                    .map(|s| SpanInfo { name: intern(&s.name), target: intern(&s.target) })
                    .collect()
            })
            .collect();
        let rows = l
            .rows
            .iter()
            .map(|r| {
                let mut est = [0.0; 8];
                for (a, b) in est.iter_mut().zip(&r.est) {
                    *a = if b.is_finite() { *b } else { 0.0 };
                }
                let mut var = [0.0; 8];
                for (a, b) in var.iter_mut().zip(&r.var) {
                    *a = if b.is_finite() { b.max(0.0) } else { 0.0 };
                }
                RawRow {
                    fig: Figures {
                        est,
                        var,
                        samples: r.samples,
                        live_samples: r.live_samples,
                        res: match r.res[..] {
                            [res, swapped] if res.is_finite() && swapped.is_finite() => {
                                Some([res.max(0.0), swapped.max(0.0)])
                            }
                            _ => None,
                        },
                    },
                    locs: r.locs.clone(),
                    spans: r.spans,
                    histograms: Histograms {
                        lifetimes: histogram(r.lifetimes.as_ref()),
                        retained_age: histogram(r.retained_age.as_ref()),
                    },
                }
            })
            .collect();
        let mut table = StackTable::from_raw(rows, locations, span_paths);
        table.name_locations(|ip| names.get(&ip).cloned());
        let ctx = ReportContext {
            pid: p.pid,
            instance: p.instance,
            exe: p.exe.clone(),
            rss_kib: (p.rss_kib != 0).then_some(p.rss_kib),
            anon_rss_kib: (p.anon_rss_kib != 0).then_some(p.anon_rss_kib),
        };
        let mut facts = Facts::empty(ctx);
        let t = l.totals.clone().unwrap_or_default();
        facts.taken_at = self.written_at();
        // A set's raw profile renders as that set: the time of its name, to the second.
        if let Some((set, _)) = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(crate::report::SetName::parse_file)
        {
            facts.taken_at =
                UNIX_EPOCH + Duration::from_millis(crate::report::set_name::stamp_ms(&set.stamp));
        }
        if p.start_ms != 0 {
            let taken = facts.taken_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
            facts.uptime_ms = Some((taken as u64).saturating_sub(p.start_ms));
        }
        facts.totals = Totals {
            allocated_bytes: t.allocated_bytes,
            freed_bytes: t.freed_bytes,
            profiler_bytes: t.profiler_bytes,
            profiler_peak_bytes: t.profiler_peak_bytes,
        };
        facts.sample_interval = l.sample_interval;
        facts.unit = match l.unit {
            1 => ByteUnit::Chunk,
            2 => ByteUnit::Usable,
            _ => ByteUnit::Requested,
        };
        facts.live_samples = t.live_samples;
        facts.dropped_samples = t.dropped_samples;
        facts.address_conflicts = t.address_conflicts;
        facts.giant_refused = t.giant_refused;
        facts.giant_refusals = l
            .giant_refusals
            .iter()
            .map(|r| {
                let ips = r.ips.iter().map(|&ip| ip as usize);
                GiantRefusal::named(r.number, r.size, ips, |ip| names.get(&ip))
            })
            .collect();
        facts.peak = l.peak.as_ref().map(|pk| Peak {
            since_start: pk.since_start_ms_plus_one.checked_sub(1).map(Duration::from_millis),
            at: UNIX_EPOCH + Duration::from_millis(pk.at_ms),
            estimated_bytes: pk.estimated_bytes,
            exact_bytes: pk.exact_bytes_plus_one.checked_sub(1),
            high_water_bytes: pk.high_water_bytes,
            captures: pk.captures,
        });
        // A set's raw profile keeps its set's reason and exit flag.
        let reason = (!l.reason.is_empty()).then(|| l.reason.clone());
        facts.occasion = Occasion { reason, exiting: l.exiting, ended };
        facts.foreign_malloc = (!l.foreign_malloc.is_empty()).then(|| l.foreign_malloc.clone());
        facts.python = (!l.python.is_empty()).then(|| l.python.clone());
        facts.allocator = (!l.allocator.is_empty()).then(|| l.allocator.clone());
        facts.mapped = match l.mapped_kind {
            1 => crate::engine::mapped::MappedState::Off,
            2 => crate::engine::mapped::MappedState::Counted {
                bytes: l.mapped_bytes,
                regions: l.mapped_regions,
            },
            _ => crate::engine::mapped::MappedState::NotSeen,
        };
        facts.modules = modules;
        facts.rss = l.rss.as_ref().filter(|r| r.parts.len() == 8).map(|r| {
            let mut parts = [0u64; 8];
            parts.copy_from_slice(&r.parts);
            RssBreakdown {
                rss: r.rss,
                parts,
                heap_not_resident: r.heap_not_resident,
                allocator_known: r.allocator_known,
                age_ms: r.age_ms,
            }
        });
        facts.limit = l.limit.as_ref().filter(|m| m.bytes != 0).map(|m| LimitState {
            bytes: m.bytes,
            cgroup: m.cgroup,
            pct: m.pct.min(100),
            near_since_ms: (m.near_since_ms != 0).then_some(m.near_since_ms),
        });
        let o = l.options.clone().unwrap_or_default();
        let opts = ReportOptions {
            measurement: if o.measure_allocated {
                Measurement::AllocatedBytes
            } else {
                Measurement::RetainedBytes
            },
            top_k: usize::try_from(o.top_k).unwrap_or(usize::MAX).clamp(1, 100_000),
            expand_frames: o.expand_frames,
            fold_framework_frames: o.fold_framework_frames,
            gen_flamegraphs: o.gen_flamegraphs,
        };
        (Report::from_table(facts, table, &opts), warnings)
    }
}

fn histogram(h: Option<&format::Histogram>) -> MillisHistogram {
    h.map_or_else(MillisHistogram::new, |h| {
        MillisHistogram::from_parts(&h.weights, h.weighted_sum_millis, h.total_weight)
    })
}

/// A span name or target as the `&'static str` a [`SpanInfo`] holds: each distinct string is
/// kept once for the life of the process (a reader of live files is a short command; the
/// names of one program's spans are few).
fn intern(s: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(&known) = set.get(s) {
        return known;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The raw profiles in `dir` that are the whole of their set (`ying.<exe>.<pid>.<seq>.<time>.live`
/// with no `.json` beside it: a short process's exit report, see `YING_SHORT_PROCESS_SECS`), in
/// name order.
pub fn raw_sets(dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    let names: Vec<String> = crate::sys::dir::entries(dir)?.into_iter().map(|e| e.name).collect();
    let have: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut raw: Vec<std::path::PathBuf> = names
        .iter()
        .filter(|n| {
            crate::report::SetName::parse_file(n).is_some_and(|(set, ext)| {
                ext == super::EXTENSION && !have.contains(set.file("json").as_str())
            })
        })
        .map(|n| dir.join(n))
        .collect();
    raw.sort();
    Ok(raw)
}

/// Turns every raw profile of `dir` that is the whole of its set ([`raw_sets`]) into its full
/// set, in `dir`, under its own name (the raw profile stays beside it); returns each one's
/// outcome, in name order. What `ying run`, `ying view` and `ying report DIR` do first.
pub fn render_raw_sets(
    dir: &Path,
) -> io::Result<Vec<(std::path::PathBuf, io::Result<LiveReport>)>> {
    Ok(raw_sets(dir)?
        .into_iter()
        .map(|path| {
            let set = LiveProfile::read(&path).and_then(|p| p.write_report_set(dir, None));
            (path, set)
        })
        .collect())
}

/// The first sequence number from `seq` on that no set of `process` of `exe` in `dir` has:
/// the set of a live file never replaces one the process wrote itself (a process killed while
/// its own set was being written took `seq` already), nor one an earlier `ying report` wrote.
/// Raw profiles (`.live`) are not sets of their own: each is rendered as the set it names.
fn free_seq(dir: &Path, exe: &str, process: crate::report::ProcessId, seq: u64) -> u64 {
    let Ok(entries) = crate::sys::dir::entries(dir) else { return seq };
    let taken = entries
        .iter()
        .filter_map(|e| crate::report::SetName::parse_file(&e.name))
        .filter(|(_, ext)| *ext != "live")
        .map(|(n, _)| n)
        .filter(|n| n.exe == exe && n.process() == process && n.seq >= seq)
        .map(|n| n.seq + 1)
        .max();
    taken.unwrap_or(seq).max(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_read_from_a_live_file_takes_the_next_free_number() {
        let dir = std::env::temp_dir().join(format!("ying-free-seq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = |pid| crate::report::ProcessId { pid, instance: None };
        assert_eq!(free_seq(&dir, "app", p(42), 0), 0, "an empty directory");
        // The process's own set 0, written when it was killed; another process's set 5; an
        // older set of this one below the number asked for.
        for name in [
            "ying.app.42.0.20261207T120000Z.txt",
            "ying.app.42.0.20261207T120000Z.pb.gz",
            "ying.app.43.5.20261207T120000Z.txt",
            "ying.other.42.7.20261207T120000Z.txt",
            "ying.app.43.9.20261207T120000Z.live",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        assert_eq!(free_seq(&dir, "app", p(42), 0), 1, "set 0 is the process's own");
        assert_eq!(free_seq(&dir, "app", p(42), 3), 3, "nothing at 3 or above");
        assert_eq!(free_seq(&dir, "app", p(43), 2), 6, "a set at 5");
        let other = crate::report::ProcessId { pid: 42, instance: Some(7) };
        assert_eq!(free_seq(&dir, "app", other, 0), 0, "another process with pid 42");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What a live file says of residency, the resident set and the memory limit reaches the
    /// report of it, and so its text and manifest.
    #[test]
    fn residency_the_resident_set_and_the_limit_reach_the_report() {
        let row = |loc: u32, res: Vec<f64>| format::Row {
            est: vec![4096.0; 8],
            var: vec![0.0; 8],
            samples: 1,
            live_samples: 1,
            locs: vec![loc],
            res,
            ..Default::default()
        };
        let live = format::Live {
            version: super::super::VERSION,
            process: Some(format::Process { pid: 7, exe: "/bin/x".into(), ..Default::default() }),
            sample_interval: 1,
            ips: vec![0, 0x1000, 0x2000, 0x3000],
            rows: vec![
                row(1, vec![1024.0, 512.0]),
                row(2, Vec::new()),
                row(3, vec![f64::NAN, 1.0]),
            ],
            rss: Some(format::Rss {
                rss: 10 << 20,
                parts: vec![6 << 20, 1 << 20, 0, 1 << 20, 2 << 20, 0, 0, 0],
                heap_not_resident: 3 << 20,
                allocator_known: true,
                age_ms: 400,
            }),
            limit: Some(format::Limit {
                bytes: 64 << 20,
                cgroup: true,
                pct: 90,
                near_since_ms: 1_796_000_000_000,
            }),
            ..Default::default()
        };
        let p = LiveProfile {
            live,
            path: PathBuf::from("/nonexistent/ying.x.7.live"),
            modified: UNIX_EPOCH,
        };
        let (r, _) = p.report(Some("killed".into()));
        let res: Vec<_> = (0..r.table.len() as u32).map(|i| r.table.row(i).fig.res).collect();
        assert_eq!(res.len(), 3);
        assert_eq!(res.iter().filter(|r| **r == Some([1024.0, 512.0])).count(), 1, "{res:?}");
        assert_eq!(res.iter().filter(|r| r.is_none()).count(), 2, "unmeasured or not finite");
        let rss = r.facts.rss.as_ref().expect("the resident set");
        assert_eq!(
            (rss.rss, rss.parts[4], rss.heap_not_resident, rss.age_ms),
            (10 << 20, 2 << 20, 3 << 20, 400)
        );
        let l = r.facts.limit.expect("the limit");
        assert_eq!(
            (l.bytes, l.cgroup, l.pct, l.near_since_ms),
            (64 << 20, true, 90, Some(1_796_000_000_000))
        );
        let text = crate::report::text::render_report(&r);
        assert!(text.contains("from /proc/self/smaps 400 ms before the figures above"), "{text}");
        assert!(
            text.contains("memory limit:       64.0 MiB (the cgroup's); the rss is 15 % of it; above the near-limit level (90 %) since 2026-"),
            "{text}"
        );
    }
}
