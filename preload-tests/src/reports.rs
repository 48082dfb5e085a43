//! Reading what the shim wrote: report sets in a directory (named `ying.<exe>.<pid>.<seq>.<UTC>`),
//! their `.folded` files and their text reports, parsed into the figures and frames tests
//! compare with the programs' own arithmetic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

    /// The parsed text report.
    pub fn text_report(&self) -> TextReport {
        TextReport::parse(&self.text())
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

/// One frame line of a text report: `     function (file:line)` with an optional ` [inlined]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextFrame {
    /// The function (C++ parameter lists included).
    pub function: String,
    /// `file:line` or `file`, when given.
    pub location: Option<String>,
    /// Whether marked `[inlined]`.
    pub inlined: bool,
}

/// One `#N` block of a text report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackBlock {
    /// Rank (`#N`).
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
    /// Frames, innermost first.
    pub frames: Vec<TextFrame>,
}

impl StackBlock {
    /// Whether a frame is `func`.
    pub fn goes_through(&self, func: &str) -> bool {
        self.frames.iter().any(|f| frame_is(&f.function, func))
    }
}

/// One `peak #N` block of a text report's PEAK section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeakBlock {
    /// Rank (`peak #N`).
    pub rank: u64,
    /// Bytes retained at the kept peak.
    pub bytes: u64,
    /// Allocations retained at the kept peak.
    pub count: u64,
    /// Frames, innermost first.
    pub frames: Vec<TextFrame>,
}

impl PeakBlock {
    /// Whether a frame is `func`.
    pub fn goes_through(&self, func: &str) -> bool {
        self.frames.iter().any(|f| frame_is(&f.function, func))
    }
}

/// A text report's PEAK section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeakSection {
    /// The high-water mark of the sampled estimate.
    pub high_water: u64,
    /// The estimated retained bytes at the kept peak.
    pub estimated: u64,
    /// The exact retained bytes at the kept peak, when read.
    pub exact: Option<u64>,
    /// The `peak #N` blocks in order.
    pub blocks: Vec<PeakBlock>,
}

/// A parsed text report: the header lines (`key: value`) and the stack blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextReport {
    /// Header fields before the first blank line, keyed by the text before the first `:`.
    pub header: BTreeMap<String, String>,
    /// The `#N` blocks in order.
    pub blocks: Vec<StackBlock>,
    /// The PEAK section, when there is one with a kept peak.
    pub peak: Option<PeakSection>,
}

/// Parses the lines of a PEAK section (after its `PEAK` line) up to its end.
fn parse_peak<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Option<PeakSection> {
    let mut p = PeakSection::default();
    let mut kept = false;
    let mut cur: Option<PeakBlock> = None;
    let mut in_frames = false;
    for line in lines {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("high-water (sampled):") {
            p.high_water = paren_bytes(rest).unwrap_or_else(|| bad_line(line));
        } else if let Some(rest) = t.strip_prefix("kept peak:") {
            kept = true;
            let (est, exact) = rest.split_once(" estimated, ").unwrap_or_else(|| bad_line(line));
            p.estimated = paren_bytes(est).unwrap_or_else(|| bad_line(line));
            p.exact = paren_bytes(exact);
        } else if let Some(rest) = line.strip_prefix("peak #") {
            if let Some(b) = cur.take() {
                p.blocks.push(b);
            }
            let (rank, rest) = rest.split_once(": ").unwrap_or_else(|| bad_line(line));
            cur = Some(PeakBlock {
                rank: rank.parse().unwrap_or_else(|_| bad_line(line)),
                bytes: paren_bytes(rest).unwrap_or_else(|| bad_line(line)),
                count: number_before(rest, " allocations").unwrap_or_else(|| bad_line(line)),
                frames: Vec::new(),
            });
            in_frames = false;
        } else if t == "frames:" {
            in_frames = true;
        } else if t.is_empty() {
            in_frames = false;
        } else if in_frames && t != "[no frames]" {
            if let Some(b) = cur.as_mut() {
                b.frames.push(parse_frame(t));
            }
        } else if line.starts_with("giant allocation refused") {
            break;
        }
    }
    if let Some(b) = cur.take() {
        p.blocks.push(b);
    }
    kept.then_some(p)
}

fn bad_line<T>(line: &str) -> T {
    panic!("cannot parse text report line {line:?}")
}

/// The first number in parentheses followed by ` bytes`, e.g. `1.0 MiB (1100100 bytes, ...)`.
fn paren_bytes(s: &str) -> Option<u64> {
    let open = s.find('(')?;
    let rest = &s[open + 1..];
    let end = rest.find(" bytes")?;
    rest[..end].trim().parse().ok()
}

/// The number just before `word` (e.g. `in 100 allocations`).
fn number_before(s: &str, word: &str) -> Option<u64> {
    let i = s.find(word)?;
    s[..i].split_whitespace().last()?.parse().ok()
}

/// Splits `function (location)` where the location looks like a path or `file:line`.
fn parse_frame(line: &str) -> TextFrame {
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
            return TextFrame {
                function: s[..i].to_string(),
                location: Some(loc.to_string()),
                inlined,
            };
        }
    }
    TextFrame { function: s.to_string(), location: None, inlined }
}

/// Reads a block's `retained ...` or `allocated ...; freed ...` line (`t`, without its rank or
/// indentation) into `b`; false when `t` is neither.
fn parse_figures(b: &mut StackBlock, t: &str, line: &str) -> bool {
    if let Some(rest) = t.strip_prefix("retained ") {
        b.retained_bytes = paren_bytes(rest).unwrap_or_else(|| bad_line(line));
        b.retained_count = number_before(rest, " allocations").unwrap_or_else(|| bad_line(line));
        true
    } else if let Some(rest) = t.strip_prefix("allocated ") {
        let (alloc, freed) = rest.split_once("; freed ").unwrap_or_else(|| bad_line(line));
        b.allocated_bytes = paren_bytes(alloc).unwrap_or_else(|| bad_line(line));
        b.allocations = number_before(alloc, " allocations").unwrap_or_else(|| bad_line(line));
        b.freed_bytes = number_before(freed, " bytes").unwrap_or_else(|| bad_line(line));
        b.frees = number_before(freed, " frees").unwrap_or_else(|| bad_line(line));
        true
    } else {
        false
    }
}

impl TextReport {
    /// Parses the format written by `src/report/text.rs`: each block leads with the figure the
    /// report ranks by (retained, or allocated with `YING_MEASURE_ALLOCATED_NOT_RETAINED`).
    ///
    /// # Panics
    /// When a `#N` block's figures cannot be read.
    pub fn parse(text: &str) -> Self {
        let mut r = TextReport::default();
        let mut in_header = true;
        let mut cur: Option<StackBlock> = None;
        let mut in_frames = false;
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line == "PEAK" {
                r.peak = parse_peak(&mut lines);
                break;
            }
            if in_header {
                if line.trim().is_empty() {
                    in_header = false;
                } else if let Some((k, v)) = line.split_once(':') {
                    r.header.insert(k.trim().to_string(), v.trim().to_string());
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix('#') {
                if let Some(b) = cur.take() {
                    r.blocks.push(b);
                }
                let (rank, rest) = rest.split_once(' ').unwrap_or_else(|| bad_line(line));
                let mut b = StackBlock {
                    rank: rank.parse().unwrap_or_else(|_| bad_line(line)),
                    ..StackBlock::default()
                };
                // The figure the report ranks by comes first: retained or allocated.
                if !parse_figures(&mut b, rest, line) {
                    bad_line::<()>(line);
                }
                cur = Some(b);
                in_frames = false;
                continue;
            }
            let Some(b) = cur.as_mut() else { continue };
            let t = line.trim_start();
            if !in_frames && parse_figures(b, t, line) {
                continue;
            }
            if t == "frames:" {
                in_frames = true;
            } else if in_frames && !t.is_empty() && t != "[no frames]" {
                b.frames.push(parse_frame(t));
            } else if t.is_empty() {
                in_frames = false;
            }
        }
        if let Some(b) = cur.take() {
            r.blocks.push(b);
        }
        r
    }

    /// A header value's `(N bytes)` figure, e.g. `retained (exact)`.
    pub fn header_bytes(&self, key: &str) -> Option<u64> {
        paren_bytes(self.header.get(key)?)
    }

    /// The blocks whose stack goes through `func`.
    pub fn blocks_through<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a StackBlock> {
        self.blocks.iter().filter(move |b| b.goes_through(func))
    }

    /// The frames named `func` in any block.
    pub fn frames_named<'a>(&'a self, func: &'a str) -> impl Iterator<Item = &'a TextFrame> {
        self.blocks.iter().flat_map(|b| &b.frames).filter(move |f| frame_is(&f.function, func))
    }
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
    fn text_blocks_parse() {
        let t = "Ying memory profile\nretained (exact):   1.1 MiB (1107712 bytes)\n\n\
                 #1 retained 1.0 MiB (1100100 bytes, 99.4% of estimated) in 100 allocations\n   \
                 allocated 1.0 MiB (1100100 bytes, 97.0% of estimated) in 100 allocations; freed 5 bytes in 2 frees\n   \
                 samples: 100 (100 live)\n   frames:\n     marker_keep (/tmp/yt/m.c:5)\n     \
                 marker_new(unsigned long) (/x/cxx.cpp:9) [inlined]\n     operator new(unsigned long)\n     _start\n\n";
        let r = TextReport::parse(t);
        assert_eq!(r.header_bytes("retained (exact)"), Some(1107712));
        let b = &r.blocks[0];
        assert_eq!((b.rank, b.retained_bytes, b.retained_count), (1, 1100100, 100));
        assert_eq!(
            (b.allocated_bytes, b.allocations, b.freed_bytes, b.frees),
            (1100100, 100, 5, 2)
        );
        assert_eq!(b.frames[0].location.as_deref(), Some("/tmp/yt/m.c:5"));
        assert_eq!(b.frames[1].function, "marker_new(unsigned long)");
        assert!(b.frames[1].inlined);
        assert_eq!(b.frames[2].location, None);
        assert_eq!(b.frames[2].function, "operator new(unsigned long)");
        assert!(b.goes_through("marker_new"));
        // Ranked by allocated bytes, the allocated line leads.
        let t = "Ying memory profile\n\n\
                 #1 allocated 2.0 MiB (2097152 bytes, 99.4% of estimated) in 16 allocations; freed 2097152 bytes in 16 frees\n   \
                 retained 0 B (0 bytes, 0.0% of estimated) in 0 allocations\n   \
                 samples: 4 (0 live)\n   frames:\n     marker_churn (/tmp/yt/m.c:7)\n\n";
        let b = &TextReport::parse(t).blocks[0];
        assert_eq!((b.rank, b.retained_bytes, b.retained_count), (1, 0, 0));
        assert_eq!(
            (b.allocated_bytes, b.allocations, b.freed_bytes, b.frees),
            (2097152, 16, 2097152, 16)
        );
        assert!(b.goes_through("marker_churn"));
    }
}
