//! Reading profiles and reducing them to what `go tool pprof -top` shows: one node per
//! function name (inlined frames included, as pprof's default `functions` granularity does),
//! flat and cum values of one sample type, after pprof's `drop_frames` pruning.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use ying_profiler::report::SetName;
use ying_profiler::report::proto::{Function, Location, Profile, read_profile};

/// A profile read from a file.
#[derive(Debug)]
pub struct Loaded {
    /// The file that was read (a report set's `.pb.gz` when a set was named).
    pub path: PathBuf,
    /// Its profile.
    pub profile: Profile,
}

/// The file a command-line argument names: a pprof file, a file of a report set (its `.txt`,
/// `.svg`, `.folded` or `.json`, whose `.pb.gz` is read; its `.peak.svg` or `.peak.folded`, whose
/// `.peak.pb.gz` is read), or a report set's name (`<dir>/ying.<exe>.
/// <pid>.<seq>.<time>`, or with `.peak` for the peak's profile).
pub fn resolve(arg: &Path) -> Result<PathBuf, String> {
    let name = arg.to_string_lossy();
    if arg.is_file() {
        let file = arg.file_name().unwrap_or_default().to_string_lossy();
        let profile = match SetName::parse_file(&file) {
            Some((set, "txt" | "svg" | "folded" | "json")) => Some(set.file("pb.gz")),
            Some((set, "peak.svg" | "peak.folded")) => Some(set.file("peak.pb.gz")),
            _ => None,
        };
        if let Some(pb) = profile.map(|p| arg.with_file_name(p)).filter(|p| p.is_file()) {
            return Ok(pb);
        }
        return Ok(arg.to_path_buf());
    }
    let pb = PathBuf::from(format!("{name}.pb.gz"));
    if pb.is_file() {
        return Ok(pb);
    }
    // A short process's raw exit profile (`YING_SHORT_PROCESS_SECS`): its set is made first.
    let raw = PathBuf::from(format!("{name}.live"));
    if raw.is_file() {
        let dir = raw.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        ying_profiler::report::live::LiveProfile::read(&raw)
            .and_then(|p| p.write_report_set(&dir, None))
            .map_err(|e| format!("{}: {e}", raw.display()))?;
        if pb.is_file() {
            return Ok(pb);
        }
    }
    if arg.is_dir() {
        return Err(format!(
            "{name}: is a directory; name a report set in it (ying.<exe>.<pid>-<instance>.<seq>.<time>) or a .pb.gz file"
        ));
    }
    Err(format!("{name}: no such file, and no report set {name}.pb.gz"))
}

/// Reads the profile `arg` names (see [`resolve`]); the error is one line naming the file.
pub fn load(arg: &Path) -> Result<Loaded, String> {
    let path = resolve(arg)?;
    let bytes = ying_profiler::report::bounded::read_file(&path).map_err(|e| match e.kind() {
        // Its message names the path already.
        std::io::ErrorKind::InvalidData => e.to_string(),
        _ => format!("{}: {e}", path.display()),
    })?;
    let profile = read_profile(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Loaded { path, profile })
}

/// The index of the sample type to show: `wanted` (a name such as `inuse_space`, or an
/// index) or the profile's default (pprof's rule: `default_sample_type`, else the last).
pub fn sample_index(p: &Profile, path: &Path, wanted: Option<&str>) -> Result<usize, String> {
    match wanted {
        Some(name) => p.sample_type_index(name).ok_or_else(|| {
            format!(
                "{}: no sample type {name:?} (it has {})",
                path.display(),
                p.sample_type_names().join(", ")
            )
        }),
        None => p
            .default_sample_index()
            .ok_or_else(|| format!("{}: the profile has no sample types", path.display())),
    }
}

/// Function names as small integers, shared by the profiles of one command.
#[derive(Debug, Default)]
pub struct Names {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Names {
    /// The id of `name`, adding it on first sight.
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    /// The name of `id`.
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// One sample reduced to function nodes, root first, with the value of one sample type.
#[derive(Debug, Clone)]
pub struct Stack {
    /// Node ids (see [`Names`]), root (outermost caller) first, leaf last.
    pub nodes: Vec<u32>,
    /// For each node, whether it is an inlined callee (not the outermost line of its location).
    pub inlined: Vec<bool>,
    /// The sample's value.
    pub value: i64,
    /// The variance of its value from sampling (0 when unknown, see [`Noise`]).
    pub var: f64,
}

/// How the sampling noise of one sample type of a profile is known: from the samples'
/// standard errors the producer computed (Ying's: the `<type>_stderr` sample type, or the
/// `stderr:<type>` numeric labels of sets written before it), else from the bound
/// `Var ≤ |bytes|·period` (a count: `count²·period/bytes` with the bytes of the same samples),
/// which needs the profile's period in bytes.
#[derive(Debug, Clone)]
pub struct Noise {
    /// Where the profile keeps its samples' standard errors, when it does.
    stderrs: Option<ying_profiler::report::proto::Stderrs>,
    /// The sample interval in bytes (0: exact).
    period: f64,
    /// The index of the sample type holding the same samples' bytes.
    bytes_index: Option<usize>,
}

impl Noise {
    /// The noise of sample type `index` of `p`; None when neither the labels nor a period in
    /// bytes say it.
    pub fn of(p: &Profile, index: usize) -> Option<Noise> {
        let t = &p.sample_type[index];
        let (ty, unit) = (p.string(t.r#type), p.string(t.unit));
        let stderrs = p.stderrs_of(ty);
        let bytes_index = if unit == "bytes" {
            Some(index)
        } else {
            ty.strip_suffix("_objects").and_then(|prefix| {
                let space = format!("{prefix}_space");
                p.sample_type
                    .iter()
                    .position(|u| p.string(u.r#type) == space && p.string(u.unit) == "bytes")
            })
        };
        let period_in_bytes =
            p.period_type.is_some_and(|pt| p.string(pt.unit) == "bytes") && p.period >= 0;
        if !(stderrs.is_some() || (period_in_bytes && bytes_index.is_some())) {
            return None;
        }
        Some(Noise { stderrs, period: p.period.max(0) as f64, bytes_index })
    }

    /// Whether the profile gives its samples' standard errors (as Ying's do), rather than
    /// leaving them to the period's bound.
    pub fn labelled(&self) -> bool {
        self.stderrs.is_some()
    }

    /// The variance of sample `s`'s value `value` (see [`ying_profiler::report::noise::variance`]).
    fn variance(&self, p: &Profile, s: &ying_profiler::report::proto::Sample, value: i64) -> f64 {
        // A profile that gives them gives 0 (or, with labels, no label) where the value has no
        // sampling error (Ying's, for blocks sampled surely).
        let stderr = self.stderrs.as_ref().map(|e| e.of(p, s));
        let bytes = self.bytes_index.and_then(|i| s.value.get(i).copied()).unwrap_or(value);
        ying_profiler::report::noise::variance(value as f64, bytes as f64, self.period, stderr)
    }
}

/// pprof's `Profile.drop_frames` / `keep_frames` (whole function names, arguments stripped).
#[derive(Debug)]
pub struct Pruner {
    drop: Regex,
    keep: Option<Regex>,
}

impl Pruner {
    /// The pruner of `p`'s own `drop_frames` and `keep_frames`; None when it drops nothing.
    /// A regular expression this crate cannot compile is reported on stderr and ignored.
    pub fn of(p: &Profile, path: &Path) -> Option<Pruner> {
        let compile = |what: &str, re: &str| match Regex::new(&format!("^(?:{re})$")) {
            Ok(r) => Some(r),
            Err(_) => {
                eprintln!(
                    "ying: warning: {}: its {what} pattern is not a regular expression this \
                     command understands; frames are not dropped",
                    path.display()
                );
                None
            }
        };
        let drop = p.string(p.drop_frames);
        if drop.is_empty() {
            return None;
        }
        let drop = compile("drop_frames", drop)?;
        let keep = match p.string(p.keep_frames) {
            "" => None,
            re => Some(compile("keep_frames", re)?),
        };
        Some(Pruner { drop, keep })
    }

    fn matches(&self, function: &str) -> bool {
        let name = simplify(function);
        self.drop.is_match(name) && !self.keep.as_ref().is_some_and(|k| k.is_match(name))
    }
}

/// pprof's `simplifyFunc`: the name up to its first `(` that does not start `(anonymous
/// namespace)` or `operator()`, without a leading `.`.
fn simplify(name: &str) -> &str {
    let name = name.strip_prefix('.').unwrap_or(name);
    let mut from = 0;
    while let Some(off) = name[from..].find(['(', 'o']) {
        let at = from + off;
        let rest = &name[at..];
        if let Some(r) =
            ["(anonymous namespace)", "operator()"].iter().find(|r| rest.starts_with(**r))
        {
            from = at + r.len();
        } else if rest.starts_with('(') {
            return &name[..at];
        } else {
            from = at + 1;
        }
    }
    name
}

/// The name pprof shows for `f` (its symbolizer's `demangleSingleFunction`, default mode): the
/// name when a differing system name is given; otherwise the system name, and when that looks
/// like demangled C++ (`::`, or `<>[]` outside Java and Go forms), without its parameter and
/// template-argument lists (`std::vector<int>::push_back(int const&)` shows as
/// `std::vector::push_back`). pprof would first demangle a mangled (`_Z...`) system name; such
/// names are shown as they are here.
pub fn shown_name<'p>(p: &'p Profile, f: &Function) -> std::borrow::Cow<'p, str> {
    let (name, system) = (p.string(f.name), p.string(f.system_name));
    if !name.is_empty() && system != name {
        return name.into();
    }
    let looks_cxx = !system.contains(".<")
        && !system.contains("]).")
        && (system.contains(['<', '>', '[', ']']) || system.contains("::"));
    if !looks_cxx {
        return system.into();
    }
    remove_matching(&remove_matching(system, b'(', b')'), b'<', b'>').into()
}

/// pprof's `removeMatching`: `name` without its outermost `start`...`end` groups (unchanged
/// when a closing bracket has no opening one).
fn remove_matching(name: &str, start: u8, end: u8) -> String {
    let mut out = String::with_capacity(name.len());
    let mut nesting = 0usize;
    // Where the text not yet copied starts, and where the open group started.
    let (mut kept_from, mut group_from) = (0, 0);
    for (i, b) in name.bytes().enumerate() {
        if b == start {
            if nesting == 0 {
                out.push_str(&name[kept_from..i]);
                group_from = i;
            }
            nesting += 1;
        } else if b == end {
            if nesting == 0 {
                return name.to_string();
            }
            nesting -= 1;
            if nesting == 0 {
                kept_from = i + 1;
            }
        }
    }
    // An unclosed group stays, as in pprof.
    out.push_str(&name[if nesting > 0 { group_from } else { kept_from }..]);
    out
}

/// What each location shows: its lines' node ids, innermost first, after pruning; and the
/// pruning marks (`prune`: the whole location goes, `beneath`: the frames it calls go).
#[derive(Debug, Default, Clone)]
struct LocationNodes {
    nodes: Vec<u32>,
    prune: bool,
    beneath: bool,
}

fn location_nodes(
    p: &Profile,
    loc: &Location,
    pruner: Option<&Pruner>,
    names: &mut Names,
    functions: &HashMap<u64, usize>,
    mappings: &HashMap<u64, usize>,
) -> LocationNodes {
    // A line without a function, or a location without lines, is its module's `[name]`, as
    // pprof's nodes for unsymbolized addresses (the address itself is aggregated away).
    let unsymbolized = |names: &mut Names| {
        let file =
            mappings.get(&loc.mapping_id).map(|&m| p.string(p.mapping[m].filename)).unwrap_or("");
        match Path::new(file).file_name() {
            Some(base) if !file.is_empty() => names.id(&format!("[{}]", base.to_string_lossy())),
            _ => names.id("<unknown>"),
        }
    };
    let function_name = |line: &ying_profiler::report::proto::Line| {
        functions.get(&line.function_id).map(|&f| shown_name(p, &p.function[f])).unwrap_or_default()
    };
    let mut out = LocationNodes::default();
    let mut first_kept = 0;
    if let Some(pruner) = pruner {
        // The outermost matching line: it and every line it inlines are dropped.
        if let Some(i) = (0..loc.line.len()).rev().find(|&i| {
            let name = function_name(&loc.line[i]);
            !name.is_empty() && pruner.matches(&name)
        }) {
            out.beneath = true;
            if i == loc.line.len() - 1 {
                out.prune = true;
            }
            first_kept = i + 1;
        }
    }
    if loc.line.is_empty() {
        out.nodes.push(unsymbolized(names));
    }
    for line in &loc.line[first_kept..] {
        let name = function_name(line);
        let id = if name.is_empty() { unsymbolized(names) } else { names.id(&name) };
        out.nodes.push(id);
    }
    out
}

/// The samples of `p` as function stacks with the values of sample type `index`, pruned by
/// `pruner` as pprof prunes (see `Profile.Prune` in pprof: a sample keeps the frames from its
/// root down to the first dropped one, and at least its frames above any user frame).
/// Samples whose value is 0 are left out. Each stack's variance is set from `noise` (0 without).
pub fn stacks(
    p: &Profile,
    index: usize,
    pruner: Option<&Pruner>,
    noise: Option<&Noise>,
    names: &mut Names,
) -> Vec<Stack> {
    let functions: HashMap<u64, usize> =
        p.function.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let mappings: HashMap<u64, usize> =
        p.mapping.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    let locations: HashMap<u64, LocationNodes> = p
        .location
        .iter()
        .map(|l| (l.id, location_nodes(p, l, pruner, names, &functions, &mappings)))
        .collect();
    let empty = LocationNodes::default();
    let mut out = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        let value = s.value.get(index).copied().unwrap_or(0);
        if value == 0 {
            continue;
        }
        let locs: Vec<&LocationNodes> =
            s.location_id.iter().map(|id| locations.get(id).unwrap_or(&empty)).collect();
        // Leaf-first positions [start..] are kept.
        let mut start = 0;
        let mut found_user = false;
        for i in (0..locs.len()).rev() {
            let l = locs[i];
            if !l.prune && !l.beneath {
                found_user = true;
                continue;
            }
            if !found_user {
                continue;
            }
            start = if l.prune { i + 1 } else { i };
            break;
        }
        let (mut nodes, mut inlined) = (Vec::new(), Vec::new());
        for l in locs[start..].iter().rev() {
            let last = l.nodes.len().saturating_sub(1);
            for (j, &n) in l.nodes.iter().enumerate().rev() {
                nodes.push(n);
                inlined.push(j != last);
            }
        }
        let var = noise.map_or(0.0, |n| n.variance(p, s, value));
        out.push(Stack { nodes, inlined, value, var });
    }
    out
}

/// One row of a `-top` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The function's node id.
    pub node: u32,
    /// Its value as the leaf of a sample.
    pub flat: i64,
    /// Its value in every sample it is part of (once per sample, recursion included).
    pub cum: i64,
    /// pprof's mark: `(inline)` when every call into it is inlined, `(partial-inline)` when
    /// some are, empty otherwise.
    pub inline: &'static str,
    /// The variance of `flat` from sampling (of both profiles in a diff).
    pub flat_var: f64,
    /// The variance of `cum`.
    pub cum_var: f64,
}

/// What [`accumulate`] adds up per node.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Flat value.
    pub flat: i64,
    /// Cum value.
    pub cum: i64,
    /// Reached from its caller through an inlined call in some sample.
    pub inline_in: bool,
    /// Reached from its caller through a real call in some sample.
    pub call_in: bool,
    /// Variance of flat.
    pub flat_var: f64,
    /// Variance of cum.
    pub cum_var: f64,
}

/// Flat and cum per node of `stacks` (each sample's value times `sign`), added into `rows`,
/// with how each node is called (pprof's edges: from the caller above it, recursion aside).
/// Variances add whatever the sign: the samples of different stacks and profiles are
/// independent.
pub fn accumulate(stacks: &[Stack], sign: i64, rows: &mut HashMap<u32, Tally>) {
    let mut seen: Vec<u32> = Vec::new();
    for s in stacks {
        let v = s.value.saturating_mul(sign);
        seen.clear();
        for (i, &n) in s.nodes.iter().enumerate() {
            let t = rows.entry(n).or_default();
            if !seen.contains(&n) {
                seen.push(n);
                t.cum += v;
                t.cum_var += s.var;
            }
            if i > 0 && s.nodes[i - 1] != n {
                if s.inlined[i] {
                    t.inline_in = true;
                } else {
                    t.call_in = true;
                }
            }
        }
        if let Some(&leaf) = s.nodes.last() {
            let t = rows.entry(leaf).or_default();
            t.flat += v;
            t.flat_var += s.var;
        }
    }
}

/// The rows in pprof's order: by |flat| (or |cum| with `by_cum`), then by name, then by the
/// other value; rows that are zero in both are left out.
pub fn sorted_rows(rows: &HashMap<u32, Tally>, names: &Names, by_cum: bool) -> Vec<Row> {
    let mut out: Vec<Row> = rows
        .iter()
        .filter(|(_, t)| t.flat != 0 || t.cum != 0)
        .map(|(&node, t)| Row {
            node,
            flat: t.flat,
            cum: t.cum,
            inline: match (t.inline_in, t.call_in) {
                (true, false) => "(inline)",
                (true, true) => "(partial-inline)",
                _ => "",
            },
            flat_var: t.flat_var,
            cum_var: t.cum_var,
        })
        .collect();
    out.sort_by(|a, b| {
        let (ka, kb) = if by_cum {
            (
                (a.cum.unsigned_abs(), a.flat.unsigned_abs()),
                (b.cum.unsigned_abs(), b.flat.unsigned_abs()),
            )
        } else {
            (
                (a.flat.unsigned_abs(), a.cum.unsigned_abs()),
                (b.flat.unsigned_abs(), b.cum.unsigned_abs()),
            )
        };
        kb.0.cmp(&ka.0)
            .then_with(|| names.name(a.node).cmp(names.name(b.node)))
            .then_with(|| kb.1.cmp(&ka.1))
    });
    out
}

/// pprof's `-nodefraction` trimming: rows whose |cum| is below `fraction` of the sum of every
/// row's flat value are dropped (their values stay in the others' cum). Returns the kept rows,
/// in the same order, and the cutoff.
pub fn trim(rows: Vec<Row>, fraction: f64) -> (Vec<Row>, i64) {
    let flat_sum = rows.iter().map(|r| r.flat).fold(0i64, i64::saturating_add);
    let cutoff = ((flat_sum as f64 * fraction) as i64).saturating_abs();
    let kept = rows.into_iter().filter(|r| r.cum.saturating_abs() >= cutoff).collect();
    (kept, cutoff)
}

/// pprof's total of a sample type: the sum of the absolute values of every sample, or, in a
/// diff profile (samples labelled `pprof::base=true`, as `ying diff` and `pprof -proto
/// -diff_base` write them), of the base's samples alone.
pub fn total(p: &Profile, index: usize) -> i64 {
    let value = |s: &ying_profiler::report::proto::Sample| {
        s.value.get(index).copied().unwrap_or(0).saturating_abs()
    };
    let is_base = |s: &&ying_profiler::report::proto::Sample| {
        s.label.iter().any(|l| p.string(l.key) == "pprof::base" && p.string(l.str) == "true")
    };
    let base = p.sample.iter().filter(is_base).map(value).fold(0i64, i64::saturating_add);
    if base > 0 {
        return base;
    }
    p.sample.iter().map(value).fold(0i64, i64::saturating_add)
}

/// How values are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes in the largest binary unit below the value (`12.5 MiB`); counts as integers.
    Auto,
    /// Exact integers, with `B` after bytes.
    Exact,
}

/// `value` of a sample type measured in `unit` (profile.proto's unit string, e.g. `bytes`).
pub fn format_value(value: i64, unit: &str, how: Unit) -> String {
    let bytes = unit == "bytes";
    if !bytes || how == Unit::Exact || value.unsigned_abs() < 1024 {
        return if bytes { format!("{value}B") } else { value.to_string() };
    }
    let mut v = value as f64;
    let mut u = "B";
    for next in ["KiB", "MiB", "GiB", "TiB"] {
        if v.abs() < 1024.0 {
            break;
        }
        v /= 1024.0;
        u = next;
    }
    format!("{v:.2}{u}")
}

/// `part` as a percentage of `whole`, as pprof prints it (`12.34%`).
pub fn percent(part: i64, whole: i64) -> String {
    if whole == 0 {
        return "  -  ".to_string();
    }
    format!("{:.2}%", part as f64 * 100.0 / whole as f64)
}

/// A line of [`table`] cut before its function's name (the columns, then the name with its
/// leading spaces), where `ying diff` and `ying top` insert columns of their own.
pub fn split_before_name(line: &str) -> (&str, &str) {
    // flat (12), flat% (1 + 7), sum% (1 + 7), cum (1 + 12), cum% (1 + 7).
    line.split_at(line.len().min(12 + 8 + 8 + 13 + 8))
}

/// The `-top` table: a header line and one line per row, pprof's columns (flat, flat%, sum%,
/// cum, cum%, name).
pub fn table(rows: &[Row], names: &Names, total: i64, unit: &str, how: Unit) -> String {
    let mut out = format!(
        "{:>12} {:>7} {:>7} {:>12} {:>7}  {}\n",
        "flat", "flat%", "sum%", "cum", "cum%", "function"
    );
    let mut sum = 0i64;
    for r in rows {
        sum = sum.saturating_add(r.flat);
        out.push_str(&format!(
            "{:>12} {:>7} {:>7} {:>12} {:>7}  {}\n",
            format_value(r.flat, unit, how),
            percent(r.flat, total),
            percent(sum, total),
            format_value(r.cum, unit, how),
            percent(r.cum, total),
            if r.inline.is_empty() {
                names.name(r.node).to_string()
            } else {
                format!("{} {}", names.name(r.node), r.inline)
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simplify_strips_arguments_like_pprof() {
        assert_eq!(simplify("operator new(unsigned long)"), "operator new");
        assert_eq!(simplify("malloc"), "malloc");
        assert_eq!(simplify(".foo(int)"), "foo");
        assert_eq!(simplify("(anonymous namespace)::f(int)"), "(anonymous namespace)::f");
        assert_eq!(simplify("Foo::operator()(int) const"), "Foo::operator()");
        assert_eq!(simplify("std::vector<int>::push_back"), "std::vector<int>::push_back");
    }

    #[test]
    fn cxx_names_are_simplified_like_pprof() {
        assert_eq!(remove_matching("a<b<c>>::d(int)", b'<', b'>'), "a::d(int)");
        assert_eq!(remove_matching("f(int))", b'(', b')'), "f(int))");
        assert_eq!(remove_matching("f(g(x)) const", b'(', b')'), "f const");
        assert_eq!(remove_matching("a(b)c(d", b'(', b')'), "ac(d");
        let mut p = Profile { string_table: vec![String::new()], ..Default::default() };
        let mut named = |name: &str, system: &str| {
            p.string_table.push(name.into());
            p.string_table.push(system.into());
            let n = p.string_table.len() as i64;
            let f = Function { id: 1, name: n - 2, system_name: n - 1, ..Default::default() };
            shown_name(&p, &f).into_owned()
        };
        assert_eq!(
            named(
                "std::vector<int>::push_back(int const&)",
                "std::vector<int>::push_back(int const&)"
            ),
            "std::vector::push_back"
        );
        assert_eq!(named("keep_buffers()", "keep_buffers()"), "keep_buffers()");
        assert_eq!(named("main.(*T).M", "main.(*T).M"), "main.(*T).M");
        assert_eq!(named("main.F[...]", "main.F[...]"), "main.F[...]");
        assert_eq!(named("pretty", "_Z6prettyv"), "pretty");
        assert_eq!(named("Foo.<init>", "Foo.<init>"), "Foo.<init>");
    }

    #[test]
    fn values_format_exactly_or_in_binary_units() {
        assert_eq!(format_value(1536, "bytes", Unit::Auto), "1.50KiB");
        assert_eq!(format_value(-3 << 20, "bytes", Unit::Auto), "-3.00MiB");
        assert_eq!(format_value(1536, "bytes", Unit::Exact), "1536B");
        assert_eq!(format_value(100, "bytes", Unit::Auto), "100B");
        assert_eq!(format_value(123456, "count", Unit::Auto), "123456");
        assert_eq!(percent(1, 3), "33.33%");
        assert_eq!(percent(-150, 100), "-150.00%");
    }
}
