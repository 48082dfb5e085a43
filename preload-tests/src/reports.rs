//! Reading what the shim wrote: report sets in a directory (named `ying.<exe>.<pid>.<seq>.<UTC>`),
//! their `.folded` files and their manifests (`<set>.json`), read into the figures and frames
//! tests compare with the programs' own arithmetic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Lists a directory (names and sizes), for failure messages.
pub fn list_dir(dir: &Path) -> String {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return format!("  ({} does not exist or cannot be read)\n", dir.display());
    };
    let mut names: Vec<String> = rd
        .flatten()
        .map(|e| {
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            format!("  {} ({len} bytes)", e.file_name().to_string_lossy())
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return "  (empty)\n".to_string();
    }
    names.join("\n") + "\n"
}

/// One report set: the files `ying.<exe>.<pid>.<seq>.<UTC>.{txt,folded,svg,...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportSet {
    /// The directory.
    pub dir: PathBuf,
    /// The common stem, `ying.<exe>.<pid>.<seq>.<UTC>`.
    pub stem: String,
    /// The executable's file name (as sanitized by the shim).
    pub exe: String,
    /// The pid of the process that wrote it.
    pub pid: u32,
    /// Sequence number within that process.
    pub seq: u64,
    /// The extensions present (`txt`, `folded`, `svg`, ...).
    pub extensions: Vec<String>,
}

impl ReportSet {
    /// Path of the file with extension `ext`.
    pub fn path(&self, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", self.stem))
    }

    /// Whether a file with `ext` exists.
    pub fn has(&self, ext: &str) -> bool {
        self.extensions.iter().any(|e| e == ext)
    }

    /// The text report.
    pub fn text(&self) -> String {
        std::fs::read_to_string(self.path("txt"))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.path("txt").display()))
    }

    /// The manifest, `<set>.json`: the set's figures and listed entries, for programs.
    pub fn manifest(&self) -> Manifest {
        let p = self.path("json");
        Manifest::parse(
            &std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display())),
        )
    }

    /// The raw folded file.
    pub fn folded_text(&self) -> String {
        std::fs::read_to_string(self.path("folded"))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.path("folded").display()))
    }

    /// The parsed folded file.
    pub fn folded(&self) -> Folded {
        Folded::parse(&self.folded_text())
    }
}

/// Splits a report file name into (stem, exe, pid, seq, extension); `None` for other files
/// (temporary files included). Read as the library names sets
/// ([`ying_profiler::report::SetName`]).
pub fn parse_report_name(name: &str) -> Option<(String, String, u32, u64, String)> {
    if name.ends_with(".tmp") {
        return None;
    }
    let (set, ext) = ying_profiler::report::SetName::parse_file(name)?;
    Some((set.to_string(), set.exe, set.pid, set.seq, ext.to_string()))
}

/// Every report set in `dir`, ordered by pid then sequence number (empty if `dir` is missing).
pub fn report_sets(dir: &Path) -> Vec<ReportSet> {
    let mut sets: BTreeMap<(u32, u64, String), ReportSet> = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((stem, exe, pid, seq, ext)) = parse_report_name(&name) else { continue };
        sets.entry((pid, seq, stem.clone()))
            .or_insert_with(|| ReportSet {
                dir: dir.to_path_buf(),
                stem,
                exe,
                pid,
                seq,
                extensions: Vec::new(),
            })
            .extensions
            .push(ext);
    }
    let mut v: Vec<ReportSet> = sets.into_values().collect();
    for s in &mut v {
        s.extensions.sort();
    }
    v
}

/// Whether a frame name is the function `name`: equal, or `name(` followed by C++ parameter
/// types (demangled names such as `marker_new(unsigned long)`).
pub fn frame_is(frame: &str, name: &str) -> bool {
    frame == name || frame.strip_prefix(name).is_some_and(|rest| rest.starts_with('('))
}

/// One line of a `.folded` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedStack {
    /// Frames, root first.
    pub frames: Vec<String>,
    /// The weight (bytes).
    pub bytes: u64,
}

/// A parsed `.folded` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    /// Every line.
    pub stacks: Vec<FoldedStack>,
}

impl Folded {
    /// Parses `root;...;leaf <bytes>` lines.
    ///
    /// # Panics
    /// On a line without a numeric weight.
    pub fn parse(text: &str) -> Self {
        let stacks = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (frames, bytes) =
                    l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
                let bytes = bytes.parse().unwrap_or_else(|_| panic!("bad folded weight in {l:?}"));
                FoldedStack { frames: frames.split(';').map(String::from).collect(), bytes }
            })
            .collect();
        Self { stacks }
    }

    /// Sum of the weights of every stack with a frame that is `func` (see [`frame_is`]).
    pub fn bytes_through(&self, func: &str) -> u64 {
        self.stacks_through(func).map(|s| s.bytes).sum()
    }

    /// The stacks with a frame that is `func`.
    pub fn stacks_through<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a FoldedStack> {
        self.stacks.iter().filter(move |s| s.frames.iter().any(|f| frame_is(f, func)))
    }

    /// Sum of all weights.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.bytes).sum()
    }
}

/// One frame of a manifest entry, read from its text `function (file:line)` with an optional
/// ` [inlined]`, as the text report prints it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub struct Frame {
    /// The function (C++ parameter lists included).
    pub function: String,
    /// `file:line` or `file`, when given.
    pub location: Option<String>,
    /// Whether marked `[inlined]`.
    pub inlined: bool,
}

impl From<String> for Frame {
    /// Splits `function (location)` where the location looks like a path or `file:line`.
    fn from(line: String) -> Self {
        let mut s = line.trim();
        let mut inlined = false;
        if let Some(x) = s.strip_suffix(" [inlined]") {
            s = x;
            inlined = true;
        }
        if let Some(i) = s.rfind(" (").filter(|_| s.ends_with(')')) {
            let loc = &s[i + 2..s.len() - 1];
            let looks_like_location = loc.contains('/')
                || loc.rsplit_once(':').is_some_and(|(f, l)| {
                    !f.is_empty() && !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit())
                });
            if looks_like_location {
                return Frame {
                    function: s[..i].to_string(),
                    location: Some(loc.to_string()),
                    inlined,
                };
            }
        }
        Frame { function: s.to_string(), location: None, inlined }
    }
}

/// One listed entry of a manifest (`entries` or `peak_entries`): a stack and its figures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Entry {
    /// Rank in its list, from 1.
    pub rank: u64,
    /// Retained bytes.
    pub retained_bytes: u64,
    /// Retained allocations.
    pub retained_count: u64,
    /// Allocated bytes.
    pub allocated_bytes: u64,
    /// Allocations.
    pub allocations: u64,
    /// Freed bytes.
    pub freed_bytes: u64,
    /// Frees.
    pub frees: u64,
    /// Bytes retained at the kept peak.
    pub peak_retained_bytes: u64,
    /// The standard error of `retained_bytes`.
    #[serde(default)]
    pub retained_bytes_stderr: u64,
    /// The standard error of `allocated_bytes`.
    #[serde(default)]
    pub allocated_bytes_stderr: u64,
    /// Samples taken at this stack.
    pub samples: u64,
    /// Of them, still live.
    pub live_samples: u64,
    /// Estimated retained bytes in memory at the report (`YING_RESIDENT`), if measured.
    pub resident_bytes: Option<u64>,
    /// Estimated retained bytes in swap at the report, if measured.
    pub swapped_bytes: Option<u64>,
    /// The spans the stack ran in.
    pub spans: Vec<String>,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
}

impl Entry {
    /// Whether a frame is `func` (see [`frame_is`]).
    pub fn goes_through(&self, func: &str) -> bool {
        self.frames.iter().any(|f| frame_is(&f.function, func))
    }
}

/// The header totals of a manifest: what the shim counted exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Totals {
    /// Bytes allocated (exact).
    pub allocated_bytes: u64,
    /// Bytes freed (exact).
    pub freed_bytes: u64,
    /// Bytes retained (exact).
    pub retained_bytes: u64,
    /// The profiler's own memory.
    pub profiler_bytes: u64,
    /// The most the profiler held since start.
    pub profiler_peak_bytes: u64,
}

/// The sampled estimates of the totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Estimated {
    /// Bytes allocated (sampled).
    pub allocated_bytes: u64,
    /// Its standard error.
    #[serde(default)]
    pub allocated_bytes_stderr: u64,
    /// Bytes retained (sampled).
    pub retained_bytes: u64,
    /// Its standard error.
    #[serde(default)]
    pub retained_bytes_stderr: u64,
}

/// The kept peak.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Peak {
    /// The estimated retained bytes at the kept peak.
    pub estimated_bytes: u64,
    /// The exact retained bytes at the kept peak, when read.
    pub exact_bytes: Option<u64>,
    /// The high-water mark of the sampled estimate.
    pub high_water_bytes: u64,
    /// When it was kept (UTC).
    pub at: String,
    /// How many peaks were kept.
    pub captures: u64,
}

/// The anonymous mappings counted (absent when not counted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Mapped {
    /// Bytes retained in anonymous mappings.
    pub bytes: u64,
    /// Regions.
    pub regions: u64,
}

/// The stack counts of a report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Stacks {
    /// Stacks sampled.
    pub sampled: u64,
    /// Entries as printed.
    pub entries: u64,
    /// Live samples.
    pub live_samples: u64,
    /// Dropped samples.
    pub dropped_samples: u64,
    /// Address conflicts.
    pub address_conflicts: u64,
    /// Giant allocations refused.
    pub giant_refused: u64,
}

/// The manifest's `memory_limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct MemoryLimit {
    /// The limit, bytes.
    pub bytes: u64,
    /// `cgroup` or `YING_MEMORY_LIMIT_BYTES`.
    pub source: String,
    /// The near-limit report's level, percent (0: off).
    pub near_limit_pct: u64,
    /// When the resident set reached that level (and has not fallen back), if it did.
    pub near_limit_since: Option<String>,
}

/// A report set's manifest, `<set>.json` (schema: `src/report/manifest.rs`): the figures tests
/// compare with the programs' own arithmetic, read without parsing the human text report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Manifest {
    /// `ying-report-set`.
    pub format: String,
    /// The format version.
    pub version: u64,
    /// The set's stem.
    pub set: String,
    /// The process.
    pub pid: u32,
    /// Its executable.
    pub exe: String,
    /// When the snapshot was taken (UTC, `2026-12-05T07:15:00Z`).
    pub taken_at: String,
    /// Why the report was written, when given.
    pub reason: Option<String>,
    /// Whether it is the exit report.
    pub exiting: bool,
    /// How the process ended, for a set written from its live file after it ended.
    #[serde(default)]
    pub ended: Option<String>,
    /// The mean sampling interval.
    pub sample_interval_bytes: u64,
    /// `requested` or `chunk`: the bytes every figure counts.
    pub unit: String,
    /// The exact totals.
    pub totals: Totals,
    /// The sampled estimates.
    pub estimated: Estimated,
    /// The kept peak, when one was kept.
    pub peak: Option<Peak>,
    /// Anonymous mappings, when counted.
    pub mapped: Option<Mapped>,
    /// The owner of a `malloc` Ying does not see, when there is one.
    pub foreign_malloc: Option<String>,
    /// The resident set, bytes (the sum of `/proc/self/smaps`' `Rss:` at report time).
    #[serde(default)]
    pub rss_bytes: Option<u64>,
    /// The resident set cut into parts (`src/report/model/rss.rs`), part name -> bytes.
    #[serde(default)]
    pub rss_breakdown: Option<std::collections::BTreeMap<String, u64>>,
    /// The memory limit and the near-limit state, when the process had a limit.
    #[serde(default)]
    pub memory_limit: Option<MemoryLimit>,
    /// Stack counts.
    pub stacks: Stacks,
    /// `retained` or `allocated`: what `entries` is ranked by.
    pub ranked_by: String,
    /// The listed entries, ranked by `ranked_by`.
    pub entries: Vec<Entry>,
    /// The entries of the PEAK section, ranked by bytes retained at the kept peak.
    pub peak_entries: Vec<Entry>,
}

impl Manifest {
    /// Parses a manifest.
    ///
    /// # Panics
    /// When `json` is not a manifest of version 1.
    pub fn parse(json: &str) -> Self {
        let m: Manifest = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("not a report-set manifest ({e}):\n{json}"));
        assert!(
            m.format == "ying-report-set" && m.version == 1,
            "unexpected manifest format {:?} version {}",
            m.format,
            m.version
        );
        m
    }

    /// The entries whose stack goes through `func`.
    pub fn entries_through<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a Entry> {
        self.entries.iter().filter(move |e| e.goes_through(func))
    }

    /// The frames named `func` in any entry.
    pub fn frames_named<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a Frame> {
        self.entries.iter().flat_map(|e| &e.frames).filter(move |f| frame_is(&f.function, func))
    }
}

/// The process file (`ying.<exe>.<pid>-<instance>.<ext>`, `ext` being `live` or `html`) of the
/// process with `pid` in `dir`, if there is one: pid and instance as the library names them
/// (`ying_profiler::report::ProcessId`).
pub fn process_file(dir: &Path, pid: u32, ext: &str) -> Option<PathBuf> {
    let suffix = format!(".{ext}");
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            let Some(stem) = n.strip_prefix("ying.").and_then(|s| s.strip_suffix(&suffix)) else {
                return false;
            };
            stem.rsplit_once('.')
                .and_then(|(_, process)| process.parse::<ying_profiler::report::ProcessId>().ok())
                .is_some_and(|p| p.pid == pid)
        })
    })
}

/// The live file of `pid` in `dir` (see [`process_file`]).
pub fn live_file_of(dir: &Path, pid: u32) -> Option<PathBuf> {
    process_file(dir, pid, "live")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_parse_from_the_right() {
        let n = "ying.python3.11.1234.0.20261202T115021Z.folded";
        assert_eq!(
            parse_report_name(n),
            Some((
                "ying.python3.11.1234.0.20261202T115021Z".to_string(),
                "python3.11".to_string(),
                1234,
                0,
                "folded".to_string()
            ))
        );
        let n = "ying.x.7.12.20261202T115021Z.pb.gz";
        assert_eq!(parse_report_name(n).map(|p| (p.2, p.3, p.4)), Some((7, 12, "pb.gz".into())));
        assert_eq!(parse_report_name(".ying.x.7.1.20261202T115021Z.txt.7.0.tmp"), None);
        assert_eq!(parse_report_name("other.txt"), None);
    }

    #[test]
    fn folded_and_frames() {
        let f = Folded::parse(
            "a;main;marker_new(unsigned long);operator new(unsigned long) 10\nb;marker_new 5\nmarker_newer 7\n",
        );
        assert_eq!(f.bytes_through("marker_new"), 15);
        assert_eq!(f.bytes_through("operator new"), 10);
        assert_eq!(f.total(), 22);
    }

    #[test]
    fn manifest_parses() {
        let j = r#"{"format":"ying-report-set","version":1,"set":"ying.m.7.0.20261205T071500Z",
          "pid":7,"exe":"/tmp/m","taken_at":"2026-12-05T07:15:00Z","reason":null,"exiting":true,
          "sample_interval_bytes":1,"unit":"chunk",
          "totals":{"allocated_bytes":1100105,"freed_bytes":5,"retained_bytes":1100100,
                    "profiler_bytes":4096,"profiler_peak_bytes":8192},
          "estimated":{"allocated_bytes":1100105,"retained_bytes":1100100},
          "peak":{"estimated_bytes":1100100,"exact_bytes":null,"high_water_bytes":1100100,
                  "at":"2026-12-05T07:15:00Z","captures":3},
          "mapped":null,"rss_kib":null,"anon_rss_kib":null,"foreign_malloc":null,
          "stacks":{"sampled":2,"entries":2,"live_samples":100,"dropped_samples":0,
                    "address_conflicts":0,"giant_refused":0},
          "files":{"text":"ying.m.7.0.20261205T071500Z.txt","folded":null,"svg":null,
                   "pprof":null,"peak_folded":null,"peak_svg":null,"peak_pprof":null},
          "ranked_by":"retained",
          "entries":[{"rank":1,"retained_bytes":1100100,"retained_count":100,
            "allocated_bytes":1100105,"allocations":102,"freed_bytes":5,"frees":2,
            "peak_retained_bytes":1100100,"samples":102,"live_samples":100,"spans":[],
            "frames":["marker_keep (/tmp/yt/m.c:5)",
                      "marker_new(unsigned long) (/x/cxx.cpp:9) [inlined]",
                      "operator new(unsigned long)","_start"]}],
          "peak_entries":[]}"#;
        let m = Manifest::parse(j);
        assert_eq!((m.totals.retained_bytes, m.estimated.allocated_bytes), (1100100, 1100105));
        assert_eq!(m.peak.as_ref().map(|p| (p.exact_bytes, p.captures)), Some((None, 3)));
        assert!(m.mapped.is_none() && m.unit == "chunk");
        let e = &m.entries[0];
        assert_eq!((e.rank, e.retained_bytes, e.retained_count, e.frees), (1, 1100100, 100, 2));
        assert_eq!(e.frames[0].location.as_deref(), Some("/tmp/yt/m.c:5"));
        assert_eq!(e.frames[1].function, "marker_new(unsigned long)");
        assert!(e.frames[1].inlined && !e.frames[0].inlined);
        assert_eq!(e.frames[2].location, None);
        assert_eq!(e.frames[2].function, "operator new(unsigned long)");
        assert_eq!(m.entries_through("marker_new").count(), 1);
        assert_eq!(m.entries_through("marker").count(), 0);
        assert_eq!(m.frames_named("operator new").count(), 1);
    }

    #[test]
    #[should_panic(expected = "not a report-set manifest")]
    fn a_manifest_missing_a_figure_is_refused() {
        Manifest::parse(r#"{"format":"ying-report-set","version":1}"#);
    }
}
