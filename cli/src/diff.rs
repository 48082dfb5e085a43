//! `ying diff A B`: what changed from profile A (the base) to profile B, as `go tool pprof
//! -diff_base A B` shows it, written three ways: a text table, a differential flamegraph and a
//! pprof profile of B's samples plus A's negated. The table marks each function's change as
//! beyond sampling noise or within it and ranks by that ([`crate::significance`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use inferno::flamegraph::{self, Options};
use ying_profiler::report::proto::{
    Function, Label, Line, Location, Mapping, Profile, Sample, ValueType, encode_gzip,
};

use crate::profile::{self, Loaded, Names, Noise, Pruner, Stack, Unit};
use crate::significance;

/// What `ying diff` was asked for.
#[derive(Debug)]
pub struct Request<'a> {
    /// The base.
    pub a: &'a Loaded,
    /// The profile compared with the base.
    pub b: &'a Loaded,
    /// The sample type (name or index), or None for B's default.
    pub sample: Option<&'a str>,
    /// Rows shown on standard output (the `.txt` file has all).
    pub rows: usize,
    /// List every row in pprof's order, none folded (see [`crate::significance`]).
    pub all: bool,
    /// Sort by cum instead of flat.
    pub by_cum: bool,
    /// pprof's `-nodefraction` (see [`profile::trim`]).
    pub node_fraction: f64,
    /// How values are shown.
    pub unit: Unit,
    /// The output files are `<prefix>.txt`, `<prefix>.svg`, `<prefix>.pb.gz`.
    pub prefix: &'a Path,
}

/// What `ying diff` wrote.
#[derive(Debug)]
pub struct Written {
    /// The top rows, as printed.
    pub top: String,
    /// The files written, text, flamegraph and profile.
    pub files: [PathBuf; 3],
}

/// Runs the diff and writes its files.
pub fn diff(req: &Request<'_>) -> Result<Written, String> {
    let (a, b) = (&req.a.profile, &req.b.profile);
    let bi = profile::sample_index(b, &req.b.path, req.sample)?;
    let (b_type, b_unit) = value_type(b, bi);
    let ai = a
        .sample_type
        .iter()
        .position(|t| a.string(t.r#type) == b_type && a.string(t.unit) == b_unit)
        .ok_or_else(|| {
            format!(
                "{}: no sample type {b_type} ({b_unit}) to compare with {}'s (it has {})",
                req.a.path.display(),
                req.b.path.display(),
                a.sample_type_names().join(", ")
            )
        })?;

    // As pprof: B's drop_frames apply to both (a merged profile keeps its first profile's).
    let pruner = Pruner::of(b, &req.b.path);
    let mut names = Names::default();
    // Both profiles' noise must be known for a change's to be.
    let (b_noise, a_noise) = (Noise::of(b, bi), Noise::of(a, ai));
    let known = a_noise.is_some() && b_noise.is_some();
    let b_stacks = profile::stacks(b, bi, pruner.as_ref(), b_noise.as_ref(), &mut names);
    let a_stacks = profile::stacks(a, ai, pruner.as_ref(), a_noise.as_ref(), &mut names);
    let mut rows = HashMap::new();
    profile::accumulate(&b_stacks, 1, &mut rows);
    profile::accumulate(&a_stacks, -1, &mut rows);
    let sorted = profile::sorted_rows(&rows, &names, req.by_cum);
    let all = sorted.len();
    let (sorted, cutoff) = profile::trim(sorted, req.node_fraction);
    let left_out = format!(
        "{} with |cum| < {} left out",
        all - sorted.len(),
        profile::format_value(cutoff, b_unit, req.unit)
    );
    // pprof's percentages of a diff are of the base's total.
    let (a_total, b_total) = (profile::total(a, ai), profile::total(b, bi));
    let header = format!(
        "ying diff: {} against the base {}\n\
         Type: {b_type}\n\
         base total {}, new total {}, change {}; percentages are of the base's total, as in \
         go tool pprof -diff_base\n",
        req.b.path.display(),
        req.a.path.display(),
        profile::format_value(a_total, b_unit, req.unit),
        profile::format_value(b_total, b_unit, req.unit),
        profile::format_value(b_total.saturating_sub(a_total), b_unit, req.unit),
    );
    let judged = significance::judge(sorted, req.by_cum, known, req.all);
    let render = |limit| judged.render(limit, &left_out, &names, a_total, b_unit, req.unit);
    let top = format!("{header}{}", render(Some(req.rows)));
    let text = format!("{header}{}", render(None));

    let title = format!(
        "ying diff: {} against {} ({b_type})",
        file_name(&req.b.path),
        file_name(&req.a.path)
    );
    let svg = flamegraph_svg(&a_stacks, &b_stacks, &names, &title, b_unit)?;
    let merged = merged_profile(req, bi, ai)?;

    let prefix = req.prefix.to_string_lossy();
    let files = [
        PathBuf::from(format!("{prefix}.txt")),
        PathBuf::from(format!("{prefix}.svg")),
        PathBuf::from(format!("{prefix}.pb.gz")),
    ];
    let contents = [text.into_bytes(), svg, merged];
    for (path, bytes) in files.iter().zip(&contents) {
        std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Written { top, files })
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn value_type(p: &Profile, index: usize) -> (&str, &str) {
    let t = &p.sample_type[index];
    (p.string(t.r#type), p.string(t.unit))
}

/// Folded stacks (`root;...;leaf value`) of the samples with a positive value, merged.
fn folded(stacks: &[Stack], names: &Names) -> String {
    let mut merged: BTreeMap<String, i64> = BTreeMap::new();
    for s in stacks.iter().filter(|s| s.value > 0 && !s.nodes.is_empty()) {
        let line: Vec<String> = s.nodes.iter().map(|&n| names.name(n).replace(';', ":")).collect();
        *merged.entry(line.join(";")).or_default() += s.value;
    }
    merged.iter().map(|(stack, v)| format!("{stack} {v}\n")).collect()
}

/// inferno's differential flamegraph: widths are B's values, red frames grew since A, blue
/// ones shrank (a stack that is gone from B has no width, and shows in the table).
fn flamegraph_svg(
    a: &[Stack],
    b: &[Stack],
    names: &Names,
    title: &str,
    unit: &str,
) -> Result<Vec<u8>, String> {
    let (before, after) = (folded(a, names), folded(b, names));
    if after.is_empty() {
        let note = "nothing to draw: the new profile has no positive values of this sample type";
        return Ok(placeholder(title, note).into_bytes());
    }
    let mut lines = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        before.as_bytes(),
        after.as_bytes(),
        &mut lines,
    )
    .map_err(|e| format!("differential folding: {e}"))?;
    let mut opts = Options::default();
    opts.title = title.to_string();
    opts.subtitle = Some("width: the new profile; red: grew since the base, blue: shrank".into());
    opts.count_name = if unit.is_empty() { "samples".into() } else { unit.to_string() };
    opts.deterministic = true;
    let text = String::from_utf8_lossy(&lines).into_owned();
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opts, text.lines(), &mut out)
        .map_err(|e| format!("flamegraph: {e}"))?;
    Ok(out)
}

fn placeholder(title: &str, note: &str) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
    };
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"80\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"600\" y=\"24\" text-anchor=\"middle\" font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"56\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n</svg>\n",
        esc(title),
        esc(note)
    )
}

/// The profile `go tool pprof -proto -diff_base A B` would write: B's samples, then A's with
/// every value negated and the label `pprof::base=true` (which tells pprof that A is the base,
/// so `go tool pprof -top` on this file prints what `-diff_base` prints). The sample types are
/// those both profiles have, in B's order; the chosen one is the default.
fn merged_profile(req: &Request<'_>, bi: usize, ai: usize) -> Result<Vec<u8>, String> {
    let (a, b) = (&req.a.profile, &req.b.profile);
    // (index in B, index in A) of each common sample type.
    let mut common: Vec<(usize, usize)> = Vec::new();
    for (i, t) in b.sample_type.iter().enumerate() {
        let (ty, unit) = (b.string(t.r#type), b.string(t.unit));
        let in_a =
            a.sample_type.iter().position(|u| a.string(u.r#type) == ty && a.string(u.unit) == unit);
        if let Some(j) = in_a {
            common.push((i, j));
        }
    }
    debug_assert!(common.contains(&(bi, ai)));
    let mut m = Merger::default();
    m.out.string_table.push(String::new());
    for &(i, _) in &common {
        let t = b.sample_type[i];
        let vt =
            ValueType { r#type: m.string(b.string(t.r#type)), unit: m.string(b.string(t.unit)) };
        m.out.sample_type.push(vt);
    }
    m.out.default_sample_type = m.string(b.string(b.sample_type[bi].r#type));
    let b_indices: Vec<usize> = common.iter().map(|&(i, _)| i).collect();
    let a_indices: Vec<usize> = common.iter().map(|&(_, j)| j).collect();
    m.add(b, &b_indices, 1, None);
    m.add(a, &a_indices, -1, Some(("pprof::base", "true")));
    let drop = m.string(b.string(b.drop_frames));
    let keep = m.string(b.string(b.keep_frames));
    m.out.drop_frames = drop;
    m.out.keep_frames = keep;
    m.out.period_type = b.period_type.map(|t| ValueType {
        r#type: m.string(b.string(t.r#type)),
        unit: m.string(b.string(t.unit)),
    });
    m.out.period = a.period.max(b.period);
    // As pprof merges: the earliest start, the durations summed.
    m.out.time_nanos = match (a.time_nanos, b.time_nanos) {
        (0, t) | (t, 0) => t,
        (x, y) => x.min(y),
    };
    m.out.duration_nanos = a.duration_nanos.saturating_add(b.duration_nanos);
    let comment =
        format!("ying diff: {} against the base {}", req.b.path.display(), req.a.path.display());
    let c = m.string(&comment);
    m.out.comment.push(c);
    encode_gzip(&m.out).map_err(|e| format!("encoding the diff profile: {e}"))
}

/// A location as the merged profile shares it: mapping id, address, lines as (function id,
/// line, column), folded or not.
type LocationKey = (u64, u64, Vec<(u64, i64, i64)>, bool);

/// Copies profiles into one, sharing strings, functions, mappings and locations.
#[derive(Debug, Default)]
struct Merger {
    out: Profile,
    strings: HashMap<String, i64>,
    functions: HashMap<(i64, i64, i64, i64), u64>,
    mappings: HashMap<(u64, u64, u64, i64, i64), u64>,
    locations: HashMap<LocationKey, u64>,
}

impl Merger {
    fn string(&mut self, s: &str) -> i64 {
        if s.is_empty() {
            return 0;
        }
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.out.string_table.len() as i64;
        self.out.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// Adds `p`'s samples with the values at `indices`, times `sign`, and `label` if any.
    fn add(&mut self, p: &Profile, indices: &[usize], sign: i64, label: Option<(&str, &str)>) {
        let mut mapping_ids = HashMap::new();
        for mp in &p.mapping {
            let (file, build) =
                (self.string(p.string(mp.filename)), self.string(p.string(mp.build_id)));
            let key = (mp.memory_start, mp.memory_limit, mp.file_offset, file, build);
            let next = self.out.mapping.len() as u64 + 1;
            let id = *self.mappings.entry(key).or_insert(next);
            if id == next {
                self.out.mapping.push(Mapping {
                    id,
                    filename: file,
                    build_id: build,
                    ..mp.clone()
                });
            }
            mapping_ids.insert(mp.id, id);
        }
        let mut function_ids = HashMap::new();
        for f in &p.function {
            let key = (
                self.string(p.string(f.name)),
                self.string(p.string(f.system_name)),
                self.string(p.string(f.filename)),
                f.start_line,
            );
            let next = self.out.function.len() as u64 + 1;
            let id = *self.functions.entry(key).or_insert(next);
            if id == next {
                self.out.function.push(Function {
                    id,
                    name: key.0,
                    system_name: key.1,
                    filename: key.2,
                    start_line: key.3,
                });
            }
            function_ids.insert(f.id, id);
        }
        let mut location_ids = HashMap::new();
        for l in &p.location {
            let mapping_id = mapping_ids.get(&l.mapping_id).copied().unwrap_or(0);
            let lines: Vec<(u64, i64, i64)> = l
                .line
                .iter()
                .map(|ln| {
                    (function_ids.get(&ln.function_id).copied().unwrap_or(0), ln.line, ln.column)
                })
                .collect();
            let key = (mapping_id, l.address, lines, l.is_folded);
            let next = self.out.location.len() as u64 + 1;
            let id = *self.locations.entry(key.clone()).or_insert(next);
            if id == next {
                self.out.location.push(Location {
                    id,
                    mapping_id,
                    address: l.address,
                    line: key
                        .2
                        .iter()
                        .map(|&(function_id, line, column)| Line { function_id, line, column })
                        .collect(),
                    is_folded: l.is_folded,
                });
            }
            location_ids.insert(l.id, id);
        }
        let extra = label.map(|(k, v)| Label {
            key: self.string(k),
            str: self.string(v),
            num: 0,
            num_unit: 0,
        });
        for s in &p.sample {
            let mut labels: Vec<Label> = s
                .label
                .iter()
                .map(|l| Label {
                    key: self.string(p.string(l.key)),
                    str: self.string(p.string(l.str)),
                    num: l.num,
                    num_unit: self.string(p.string(l.num_unit)),
                })
                .collect();
            labels.extend(extra);
            self.out.sample.push(Sample {
                location_id: s
                    .location_id
                    .iter()
                    .map(|id| location_ids.get(id).copied().unwrap_or(0))
                    .collect(),
                value: indices.iter().map(|&i| s.value[i].saturating_mul(sign)).collect(),
                label: labels,
            });
        }
    }
}
