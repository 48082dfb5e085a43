//! A process's stacks over time read back from its report sets' manifests (`<set>.json`, see
//! [`crate::report::manifest`]), for `ying leaks` and `ying view`.
//!
//! Why the manifests and not the pprof files: a manifest's entries carry the mean age of each
//! listed stack's retained bytes (`retained_age_ms`), which the leak test needs and a pprof
//! sample has no place for, and they are small. They list only the report's top entries
//! (`YING_TOP_K`, 20 by default): a stack outside a set's list is not seen at that dump, and
//! a leak worth finding is among the largest retained stacks by the time it matters. When the
//! list ranked by retained bytes was not cut (`entries_complete`), a stack outside it retained
//! nothing at that dump and counts as 0 B there. A stack is keyed by its printed frames and
//! spans.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Analysis, Observation, Series, analyse};
use crate::report::set_name::{SetName, stamp_ms};

/// One process's sets and what the leak test made of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessLeaks {
    /// The executable's name as set names carry it.
    pub exe: String,
    /// Its process id.
    pub pid: u32,
    /// The test's result.
    pub analysis: Analysis,
}

/// The manifests `args` name: every set's `.json` in a directory (and in its `uid-<N>`
/// subdirectories), a manifest, any other file of a set, or a set's name.
pub fn manifests(args: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let is_manifest = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(SetName::parse_file)
            .is_some_and(|(_, ext)| ext == "json")
    };
    for arg in args {
        if arg.is_dir() {
            let mut dirs = vec![arg.clone()];
            for e in std::fs::read_dir(arg)?.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if crate::report::set_name::uid_of_dir(&n).is_some() {
                    dirs.push(e.path());
                }
            }
            for d in dirs {
                for e in std::fs::read_dir(&d)?.flatten() {
                    if !is_manifest(&e.path()) {
                        continue;
                    }
                    // Another user's manifest planted in a shared directory: left out, said.
                    match crate::report::trust::untrusted_owner(&e.path()) {
                        Some(uid) => crate::sys::warn(
                            &crate::report::trust::untrusted_error(&e.path(), uid).to_string(),
                        ),
                        None => out.push(e.path()),
                    }
                }
            }
            continue;
        }
        let name = arg.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let json = match SetName::parse_file(name) {
            Some((set, _)) => arg.with_file_name(set.file("json")),
            None => PathBuf::from(format!("{}.json", arg.display())),
        };
        if !json.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no report set manifest ({})", arg.display(), json.display()),
            ));
        }
        out.push(json);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// One dump of a manifest: the process, when, and each listed stack's observation.
struct Dump {
    exe: String,
    pid: u32,
    t_ms: u64,
    /// Whether the entries list every stack that retained bytes at the dump.
    complete: bool,
    stacks: Vec<(Vec<String>, Observation)>,
}

fn dump_of(path: &Path) -> io::Result<Dump> {
    let bytes = crate::report::bounded::read_manifest(path)?;
    let m: Value = serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
    })?;
    let bad = |what: &str| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: no {what}", path.display()))
    };
    if m["format"] != "ying-report-set" {
        return Err(bad("\"format\":\"ying-report-set\""));
    }
    let set = m["set"]
        .as_str()
        .and_then(|s| SetName::parse_file(&format!("{s}.json")).map(|(set, _)| set))
        .ok_or_else(|| bad("set name"))?;
    let pid = m["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(set.pid);
    let t_ms = m["taken_at_ms"].as_u64().unwrap_or_else(|| stamp_ms(&set.stamp));
    let period = m["sample_interval_bytes"].as_f64().unwrap_or(0.0);
    let complete = m["ranked_by"] == "retained" && m["entries_complete"] == true;
    let mut stacks = Vec::new();
    for e in m["entries"].as_array().into_iter().flatten() {
        let text = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let mut key = text(&e["frames"]);
        key.extend(text(&e["spans"]).into_iter().map(|s| format!("[span {s}]")));
        let Some(bytes) = e["retained_bytes"].as_f64() else { continue };
        let stderr = e["retained_bytes_stderr"].as_f64();
        let obs = Observation {
            t_ms,
            bytes,
            stderr: crate::report::noise::variance(bytes, bytes, period, stderr).sqrt(),
            age_ms: e["retained_age_ms"].as_f64(),
        };
        stacks.push((key, obs));
    }
    Ok(Dump { exe: set.exe, pid, t_ms, complete, stacks })
}

/// The frame that names a stack of printed frames: the first that is not the allocator's, the
/// standard library's or a folded run (`... library internals ...`), else the first.
fn name_of(frames: &[String]) -> String {
    let plumbing = [
        "malloc",
        "calloc",
        "realloc",
        "free",
        "operator new",
        "alloc::",
        "__rust",
        "core::",
        "std::",
        "<alloc::",
        "<core::",
        "<std::",
        "hashbrown::",
        "[span ",
        "...",
    ];
    frames
        .iter()
        .find(|f| !plumbing.iter().any(|p| f.starts_with(p)))
        .or(frames.first())
        .cloned()
        .unwrap_or_default()
}

/// Reads `manifests` (see [`manifests`]) and tests each process's stacks. A manifest that
/// cannot be read is left out, with its error in the second value.
pub fn read(manifests: &[PathBuf]) -> (Vec<ProcessLeaks>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut by_process: BTreeMap<(String, u32), Vec<Dump>> = BTreeMap::new();
    for p in manifests {
        match dump_of(p) {
            Ok(d) => by_process.entry((d.exe.clone(), d.pid)).or_default().push(d),
            Err(e) => warnings.push(format!("{} left out: {e}", p.display())),
        }
    }
    let mut out = Vec::new();
    for ((exe, pid), mut dumps) in by_process {
        dumps.sort_by_key(|d| d.t_ms);
        let window = dumps.last().map_or(0, |d| d.t_ms) - dumps.first().map_or(0, |d| d.t_ms);
        let mut series: BTreeMap<Vec<String>, Series> = BTreeMap::new();
        for d in &dumps {
            for (key, obs) in &d.stacks {
                let s = series.entry(key.clone()).or_insert_with(|| Series {
                    name: name_of(key),
                    frames: key.clone(),
                    points: Vec::new(),
                });
                s.points.push(*obs);
            }
        }
        let mut series: Vec<Series> = series.into_values().collect();
        let complete: Vec<u64> = dumps.iter().filter(|d| d.complete).map(|d| d.t_ms).collect();
        super::fill_absent(&mut series, &complete);
        out.push(ProcessLeaks { exe, pid, analysis: analyse(&series, dumps.len(), window) });
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_named_by_its_first_frame_of_the_program() {
        let f = |v: &[&str]| name_of(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            f(&["malloc", "leak_site (leak.c:12)", "main (leak.c:40)"]),
            "leak_site (leak.c:12)"
        );
        assert_eq!(
            f(&["alloc::vec::from_elem", "app::leak_loop (main.rs:3)"]),
            "app::leak_loop (main.rs:3)"
        );
        assert_eq!(f(&["malloc"]), "malloc");
        assert_eq!(
            f(&["... library internals ...", "app::leak_loop (main.rs:3)"]),
            "app::leak_loop (main.rs:3)"
        );
    }
}
