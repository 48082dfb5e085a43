//! The HTML view of a directory of report sets ([`write_view`], behind `ying view DIR`): every
//! set's pprof profiles read back from disk, grouped by process (executable and pid, older
//! runs included), one section per process, in the same page as a process's own
//! `ying.<exe>.<pid>.html`.
//!
//! A set is read from its `.pb.gz` (the current figures of every stack), its `.peak.pb.gz` (the
//! stacks at the kept peak) and the exact totals and RSS of its manifest (`.json`, see
//! [`crate::report::manifest`]), when it is there. Stacks are shown as reports show them (stacks printed alike are one entry,
//! framework runs folded), and only the stacks a dump keeps in a process's timeline are kept
//! (see [`crate::report::timeline`]).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::callstack::{Frame, FrameView};
use crate::report::proto::{Profile, read_profile};
use crate::report::set_name::stamp_ms;
use crate::report::timeline::{
    ALLOCATED_STACKS, Dump, GroupFigures, PEAK_STACKS, Point, RETAINED_STACKS, StackFigures,
    Timeline,
};

/// The file [`write_view`] writes in the directory.
pub const VIEW_FILE: &str = "ying.view.html";

/// One report set found in the directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SetName {
    exe: String,
    pid: u32,
    seq: u64,
    stamp: String,
    /// `ying.<exe>.<pid>.<seq>.<stamp>`.
    stem: String,
    /// The subdirectory it is in: empty, or `uid-<N>/` (a worker that changed user, see
    /// `ProfilerRunner::dir_for_new_user`).
    sub: String,
}

/// `ying.<exe>.<pid>.<seq>.<yyyymmddThhmmssZ>.pb.gz` (not `.peak.pb.gz`) as a set's name.
fn parse_set(name: &str) -> Option<SetName> {
    let (set, ext) = crate::report::SetName::parse_file(name)?;
    (ext == "pb.gz").then(|| SetName {
        stem: set.to_string(),
        exe: set.exe,
        pid: set.pid,
        seq: set.seq,
        stamp: set.stamp,
        sub: String::new(),
    })
}

/// The stacks of `p` as reports show them, each stack's values for `types` summed over the
/// samples printed alike, in `t`'s interned stacks, with the variance of the first type's sum
/// (its samples' standard errors when the profile gives them: the `<type>_stderr` sample type,
/// or the `stderr:<type>` labels of older sets; else the bound from the profile's period, see
/// [`crate::report::noise::variance`]).
fn stacks_of(t: &mut Timeline, p: &Profile, types: &[&str]) -> HashMap<u32, (Vec<i64>, f64)> {
    let idx: Vec<Option<usize>> = types.iter().map(|n| p.sample_type_index(n)).collect();
    // A set written before standard errors existed has none, and gets the period's bound.
    let stderrs = p.stderrs_of(types[0]);
    let period = p.period as f64;
    let names: HashMap<u64, (Arc<str>, Option<Arc<str>>)> = p
        .function
        .iter()
        .map(|f| {
            let file = p.string(f.filename);
            (f.id, (Arc::from(p.string(f.name)), (!file.is_empty()).then(|| Arc::from(file))))
        })
        .collect();
    let locations: HashMap<u64, Vec<Frame>> = p
        .location
        .iter()
        .map(|l| {
            let n = l.line.len();
            let frames = l
                .line
                .iter()
                .enumerate()
                .map(|(i, line)| {
                    let (function, file) = names
                        .get(&line.function_id)
                        .cloned()
                        .unwrap_or_else(|| (Arc::from("[unknown]"), None));
                    Frame {
                        ip: l.address as usize,
                        function,
                        file,
                        line: u32::try_from(line.line).ok().filter(|&x| x > 0),
                        inlined: i + 1 < n,
                        module: None,
                    }
                })
                .collect::<Vec<_>>();
            let frames = if frames.is_empty() {
                vec![Frame {
                    ip: l.address as usize,
                    function: Arc::from(format!("{:#x}", l.address)),
                    file: None,
                    line: None,
                    inlined: false,
                    module: None,
                }]
            } else {
                frames
            };
            (l.id, frames)
        })
        .collect();
    let mut out: HashMap<u32, (Vec<i64>, f64)> = HashMap::new();
    for s in &p.sample {
        let frames = s.location_id.iter().filter_map(|id| locations.get(id)).flatten();
        let shown = crate::callstack::shown_frames(frames, FrameView::DEFAULT);
        let id = t.intern_shown(&shown, &[]);
        let (v, var) = out.entry(id).or_insert_with(|| (vec![0; types.len()], 0.0));
        for (k, i) in idx.iter().enumerate() {
            if let Some(i) = i {
                v[k] += s.value.get(*i).copied().unwrap_or(0);
            }
        }
        if let Some(i) = idx[0] {
            let b = s.value.get(i).copied().unwrap_or(0) as f64;
            let se = stderrs.as_ref().map(|e| e.of(p, s));
            *var += crate::report::noise::variance(b, b, period, se);
        }
    }
    out
}

/// Reads the set `set` of `dir` into `t` as one dump.
fn add_set(t: &mut Timeline, dir: &Path, set: &SetName) -> io::Result<()> {
    let read = |ext: &str| {
        let path = dir.join(format!("{}{}.{ext}", set.sub, set.stem));
        match (crate::report::trust::untrusted_owner(&path), ext) {
            (Some(uid), _) => Err(crate::report::trust::untrusted_error(&path, uid)),
            (None, "json") => crate::report::bounded::read_manifest(&path),
            (None, _) => crate::report::bounded::read_file(&path),
        }
    };
    let bytes = read("pb.gz")?;
    let p = read_profile(&bytes).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}.pb.gz: {e}", set.stem))
    })?;
    let types = ["inuse_space", "alloc_space", "alloc_objects", "inuse_objects", "resident_space"];
    let cur = stacks_of(t, &p, &types);
    let has_resident = p.sample_type_index("resident_space").is_some();
    let time_ms = u64::try_from(p.time_nanos / 1_000_000).unwrap_or(0);
    drop(p);
    let peak = read("peak.pb.gz")
        .ok()
        .and_then(|b| read_profile(&b).ok())
        .map(|pp| stacks_of(t, &pp, &["inuse_space"]))
        .unwrap_or_default();
    let manifest: serde_json::Value =
        read("json").ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let pos = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut all: BTreeMap<u32, StackFigures> = BTreeMap::new();
    for (&stack, (v, var)) in &cur {
        all.insert(
            stack,
            StackFigures {
                stack,
                retained: pos(v[0]),
                allocated: pos(v[1]),
                alloc_count: pos(v[2]),
                retained_count: pos(v[3]),
                peak: 0,
                lifetime_ms: -1.0,
                age_ms: -1.0,
                retained_stderr: var.sqrt() as f32,
                resident: has_resident.then(|| pos(v[4])),
            },
        );
    }
    for (&stack, (v, _)) in &peak {
        all.entry(stack)
            .or_insert(StackFigures {
                stack,
                lifetime_ms: -1.0,
                age_ms: -1.0,
                ..Default::default()
            })
            .peak = pos(v[0]);
    }
    let est_retained: u64 = all.values().map(|s| s.retained).sum();
    let est_allocated: u64 = all.values().map(|s| s.allocated).sum();
    let peak_estimated: u64 = all.values().map(|s| s.peak).sum();
    let mut keep: Vec<u32> = Vec::new();
    let mut rank = |key: fn(&StackFigures) -> u64, n: usize| {
        let mut v: Vec<&StackFigures> = all.values().filter(|s| key(s) > 0).collect();
        v.sort_by_key(|s| std::cmp::Reverse(key(s)));
        for s in v.into_iter().take(n) {
            if !keep.contains(&s.stack) {
                keep.push(s.stack);
            }
        }
    };
    rank(|s| s.retained, RETAINED_STACKS);
    rank(|s| s.allocated, ALLOCATED_STACKS);
    rank(|s| s.peak, PEAK_STACKS);
    let t_ms = if time_ms > 0 { time_ms } else { stamp_ms(&set.stamp) };
    // The kept peak as the set's text says it (its manifest's `peak`): the estimate, the exact
    // total and the time of the kept peak, and the high-water mark; the sum of the
    // `.peak.pb.gz` stacks only when the manifest is missing.
    let mp = &manifest["peak"];
    let peak_estimated = mp["estimated_bytes"].as_u64().unwrap_or(peak_estimated);
    let at = Point {
        t_ms,
        retained: manifest["totals"]["retained_bytes"].as_u64().unwrap_or(est_retained),
        allocated: manifest["totals"]["allocated_bytes"].as_u64().unwrap_or(est_allocated),
        rss: manifest["rss_kib"].as_u64().map_or(0, |kb| kb * 1024),
        peak: mp["high_water_bytes"].as_u64().unwrap_or(peak_estimated),
    };
    t.points.push_back(at);
    t.dumps.push_back(Dump {
        seq: set.seq,
        stem: set.stem.clone(),
        at,
        est_retained,
        est_allocated,
        peak_estimated,
        peak_exact: mp["exact_bytes"].as_u64().unwrap_or(0),
        peak_t_ms: mp["at"].as_str().map_or(0, extended_stamp_ms),
        stacks_sampled: cur.len() as u64,
        stacks: keep.iter().map(|s| all[s]).collect(),
        // The page's leak panel tests the manifests (`leaks::sets`), not these stacks.
        retained_complete: false,
        detail: true,
        rss_parts: manifest["rss_breakdown"]
            .as_object()
            .map(|o| o.iter().filter_map(|(k, v)| Some((k.clone(), v.as_u64()?))).collect())
            .unwrap_or_default(),
        tasks: groups_of(&manifest["tasks"]),
        spans: groups_of(&manifest["spans"]),
    });
    Ok(())
}

/// A manifest's `tasks` or `spans` (none in a manifest from before them) as a dump's rows.
fn groups_of(rows: &serde_json::Value) -> Vec<GroupFigures> {
    let Some(rows) = rows.as_array() else { return Vec::new() };
    rows.iter()
        .filter_map(|g| {
            let n = |k: &str| g[k].as_u64();
            Some(GroupFigures {
                name: g["name"].as_str()?.to_string(),
                retained: n("retained_bytes")?,
                retained_stderr: n("retained_bytes_stderr").unwrap_or(0) as f32,
                allocated: n("allocated_bytes")?,
                allocated_stderr: n("allocated_bytes_stderr").unwrap_or(0) as f32,
                stacks: n("stacks").unwrap_or(0) as u32,
            })
        })
        .collect()
}

/// Milliseconds since the epoch of a manifest's time, `2026-12-05T02:44:09Z` (see
/// `report::utc_timestamp`); 0 when it is not one.
fn extended_stamp_ms(s: &str) -> u64 {
    let basic: String = s.chars().filter(|c| *c != '-' && *c != ':').collect();
    if basic.len() != 16 || basic.as_bytes()[8] != b'T' || !basic.ends_with('Z') {
        return 0;
    }
    stamp_ms(&basic)
}

/// Writes one HTML page for the report sets in `dir` (`ying.view.html` there, atomically) and
/// returns its path: one section per process (executable and pid), sets of older runs
/// included, each with the chart of its dumps, the dump picker and the diff. A set whose
/// profile cannot be read is left out with a `ying: warning:` line; a directory without any
/// set is an error. The sets of workers that changed user, in `uid-<N>` subdirectories, are
/// read too.
pub fn write_view(dir: &Path) -> io::Result<PathBuf> {
    let names = |d: &Path| -> io::Result<Vec<String>> {
        Ok(std::fs::read_dir(d)?.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
    };
    // Short processes' raw exit profiles become their sets first (one line for each that
    // cannot).
    if let Ok(rendered) = crate::report::live::read::render_raw_sets(dir) {
        for (path, set) in rendered {
            if let Err(e) = set {
                crate::sys::warn(&format!("{}: {e}", path.display()));
            }
        }
    }
    let top = names(dir)?;
    // Temporary files that dead processes or crashes left go first (one line when there were).
    if let Ok(d) = crate::report::files::ReportDir::open(dir, crate::config::DEFAULT_FILE_MODE)
        && let Ok(n @ 1..) = d.remove_leftovers()
    {
        crate::sys::warn(&format!(
            "removed {n} temporary file{} that ended processes left in {}",
            if n == 1 { "" } else { "s" },
            dir.display()
        ));
    }
    let mut sets: Vec<SetName> = top.iter().filter_map(|n| parse_set(n)).collect();
    for sub in top.iter().filter(|n| crate::report::set_name::uid_of_dir(n).is_some()) {
        for n in names(&dir.join(sub)).unwrap_or_default() {
            if let Some(mut set) = parse_set(&n) {
                set.sub = format!("{sub}/");
                sets.push(set);
            }
        }
    }
    let lives = live_files(dir, &top);
    if sets.is_empty() && lives.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}: no report set (ying.<exe>.<pid>.<seq>.<time>.pb.gz) and no live file \
                 (ying.<exe>.<pid>.live)",
                dir.display()
            ),
        ));
    }
    sets.sort_by(|a, b| (&a.exe, a.pid, a.seq).cmp(&(&b.exe, b.pid, b.seq)));
    let mut timelines: Vec<Timeline> = Vec::new();
    for set in &sets {
        let same = timelines.last().is_some_and(|t| t.pid == set.pid && t.exe == set.exe);
        if !same {
            timelines.push(Timeline::new(&set.exe, set.pid));
        }
        let t = timelines.last_mut().expect("pushed");
        if let Err(e) = add_set(t, dir, set) {
            crate::sys::warn(&format!("set {} left out of the view: {e}", set.stem));
        }
    }
    // Each live file is its process's newest dump: its heap at death, or now.
    for live in &lives {
        let ending = live.default_ending();
        let (report, warnings) = live.report(Some(ending.clone()));
        for w in warnings {
            crate::sys::warn(&w);
        }
        let exe = report.facts.process.exe_name();
        let i = match timelines.iter().position(|t| t.pid == live.pid() && t.exe == exe) {
            Some(i) => i,
            None => {
                timelines.push(Timeline::new(&exe, live.pid()));
                timelines.len() - 1
            }
        };
        let t = &mut timelines[i];
        if t.dumps.is_empty() {
            for p in live.points() {
                t.push_point(p);
            }
        }
        let at = live.point(&report);
        t.push_point(at);
        let name = live.path().file_name().map_or(String::new(), |n| n.to_string_lossy().into());
        t.add_dump(&report, live.next_seq(), &name, at);
        t.note = Some(format!("{ending} (its live file {name}; `ying report` writes its set)"));
    }
    for t in timelines.iter_mut() {
        t.thin_dumps();
    }
    timelines.retain(|t| !t.dumps.is_empty());
    // Processes that died without their exit report first (their heap at death), then those
    // still running, then the others; each group in the order they started.
    let dead: Vec<u32> = lives.iter().filter(|l| !l.is_running()).map(|l| l.pid()).collect();
    let rank = |t: &Timeline| match &t.note {
        Some(_) if dead.contains(&t.pid) => 0,
        Some(_) => 1,
        None => 2,
    };
    timelines.sort_by_key(|t| (rank(t), t.dumps.front().map_or(0, |d| d.at.t_ms)));
    // The leak test on the sets' manifests, which carry the stacks' ages (see `leaks::sets`);
    // a process with a live file and no set is tested on its timeline.
    let manifests = crate::report::leaks::sets::manifests(&[dir.to_path_buf()]).unwrap_or_default();
    let (tested, _) = crate::report::leaks::sets::read(&manifests);
    let leaks: Vec<_> = timelines
        .iter()
        .map(|t| {
            tested.iter().find(|p| p.pid == t.pid && p.exe == t.exe).map(|p| p.analysis.clone())
        })
        .collect();
    let refs: Vec<&Timeline> = timelines.iter().collect();
    let title = format!("Ying memory report: {}", dir.display());
    let page = super::render_with(&refs, &leaks, &title);
    crate::report::files::write_atomic(dir, VIEW_FILE, page.as_bytes())
}

/// The live files among `names` in `dir` that can be read (one warning for each that cannot).
fn live_files(dir: &Path, names: &[String]) -> Vec<crate::report::live::LiveProfile> {
    let mut out = Vec::new();
    for n in names.iter().filter(|n| crate::report::live::is_live_file_name(n)) {
        match crate::report::live::LiveProfile::read(&dir.join(n)) {
            Ok(l) => out.push(l),
            Err(e) => crate::sys::warn(&format!("live file left out of the view: {e}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_names_and_stamps() {
        let s = parse_set("ying.my.app.42.7.20261203T211942Z.pb.gz").expect("a set");
        assert_eq!((s.exe.as_str(), s.pid, s.seq), ("my.app", 42, 7));
        assert!(parse_set("ying.app.42.7.20261203T211942Z.peak.pb.gz").is_none());
        assert!(parse_set("ying.app.42.html").is_none());
        assert_eq!(stamp_ms("20261202T123011Z"), 1_796_214_611_000);
    }
}
