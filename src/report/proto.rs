//! pprof's [`profile.proto`](https://github.com/google/pprof/blob/main/proto/profile.proto) as
//! message types, and a decoder for profiles of any producer.
//!
//! The types are written by hand from the `.proto` file with `prost`'s derive (no `protoc`, no
//! build script): field names, numbers and types are profile.proto's, so a [`Profile`] decodes
//! whatever `go tool pprof` reads (Ying's report sets, Go's `runtime/pprof` heap profiles,
//! jemalloc_pprof's, `pprof -proto` output) and encodes to bytes it reads. Every string field of
//! a message is an index into [`Profile::string_table`], whose entry 0 is `""`.
//!
//! [`read_profile`] takes a file's bytes, gzipped (`.pb.gz`, what every producer writes) or
//! plain, and checks what pprof's own parser checks after decoding (string indices in range,
//! as many values per sample as sample types, no dangling location, function or mapping id), so
//! that code reading a [`Profile`] may index with the ids it holds; its error says what is
//! wrong. [`encode_gzip`] writes a profile back. `tests/proto_round_trip.rs` checks both
//! directions on a report set's profile and on Go heap profiles: `go tool pprof -raw` prints
//! the re-encoded file exactly as it prints the original.
//!
//! The report sets' own profiles are still written by the streaming
//! `ProfileWriter` (`pprof.rs`), not by prost. Measured on one profile of 100,000 stacks of
//! 40 frames (250,000 distinct addresses, 50,000 functions, 19.8 MB before gzip; `cargo test
//! --release --lib writer_against_prost -- --ignored --nocapture` repeats it, each variant in a
//! process of its own, on a 2-core machine shared with other builds), the streaming writer took
//! 0.45 s and 0.52 s (0.83 s and 0.70 s in two later runs on a busier machine) and raised the
//! peak resident memory by 67 MiB every time; building the same [`Profile`] and encoding it
//! with prost took 0.58 s and 0.54 s (later 0.92 s and 0.84 s) and 100 MiB. Prost must hold
//! every sample and the whole encoded message at once (the samples are nearly all of the
//! profile), the writer sends each sample to the file as it is made. The writer runs inside the
//! profiled process, where that memory is the profiler's overhead at every report (the README's
//! limits give the report's budget: 27.5 MiB for 92,137 stacks), so it stays, with its own
//! tests against `go tool pprof`; prost serves where a whole profile is read or built anyway
//! (the `ying` command, the HTML report).

use std::fmt;
use std::io::{self, Write};

use prost::Message;

/// A whole profile (`perftools.profiles.Profile`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each value of a sample measures, in the order of [`Sample::value`]; e.g. Go's heap
    /// profiles have `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count`,
    /// `inuse_space/bytes`.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: one stack with its values (and labels) each.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The loaded modules the locations' addresses belong to.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The program addresses samples go through.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The source functions the locations' lines name.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; entry 0 is `""`. All other string fields index into it.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// A regular expression (string index) of the frames to drop from every sample, with the
    /// frames they called (0: none).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// A regular expression (string index) of the frames to keep even when `drop_frames`
    /// matches them (0: none).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was collected, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the collection took, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What [`Profile::period`] counts (for heap profiles: `space/bytes`).
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period (for heap profiles: the mean bytes between samples).
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices), shown by `go tool pprof -comments`.
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type (string index of its `type`) to show when none is asked for; 0: the last.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
    /// Documentation link for the profile (string index; 0: none).
    #[prost(int64, tag = "15")]
    pub doc_url: i64,
}

/// A kind of value and its unit, both string indices (`ValueType`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    /// The name, e.g. `inuse_space`.
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// The unit, e.g. `bytes`.
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values (`Sample`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The stack as [`Location::id`]s, leaf (innermost) first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per [`Profile::sample_type`], in that order.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels, e.g. Ying's `span`.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A label of a sample (`Label`): a string label (`str` set) or a numeric one (`num`, with an
/// optional unit).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    /// The key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// The string value (string index; 0 for a numeric label).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// The numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The unit of `num` (string index; 0: none).
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A loaded module (`Mapping`).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Mapping {
    /// Its id, unique and non-zero; [`Location::mapping_id`] refers to it.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Where it is loaded.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// The end (exclusive) of its address range.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// The offset in the file that `memory_start` maps.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// Its path or pseudo-name (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// Its build id (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Its locations have function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Its locations have file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Its locations have line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Its locations have their inlined frames as extra lines.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A program address (`Location`).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Location {
    /// Its id, unique and non-zero; [`Sample::location_id`] refers to it.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The [`Mapping::id`] of its module; 0: unknown.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The instruction address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Its source frames, innermost (inlined callee) first, the real function last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several addresses folded into this one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// One source frame of a location (`Line`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Line {
    /// The [`Function::id`] of its function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line number; 0: unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// The column; 0: unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A source function (`Function`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Function {
    /// Its id, unique and non-zero; [`Line::function_id`] refers to it.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its human-readable name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the system knows it, e.g. mangled (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its source file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// The line it starts at; 0: unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// Where a profile keeps its samples' standard errors ([`Profile::stderrs_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stderrs {
    /// A sample type of their own (its index).
    Type(usize),
    /// A numeric label (its key).
    Label(String),
}

impl Stderrs {
    /// The standard error of sample `s` of profile `p` (0 where the producer gave none).
    pub fn of(&self, p: &Profile, s: &Sample) -> f64 {
        match self {
            Stderrs::Type(i) => s.value.get(*i).copied().unwrap_or(0) as f64,
            Stderrs::Label(key) => {
                s.label.iter().find(|l| p.string(l.key) == key).map_or(0.0, |l| l.num as f64)
            }
        }
    }
}

impl Profile {
    /// The string at `index` of the string table; `""` when out of range (never the case in a
    /// profile from [`read_profile`]).
    pub fn string(&self, index: i64) -> &str {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.string_table.get(i))
            .map(String::as_str)
            .unwrap_or("")
    }

    /// The names of the sample types, in the order of [`Sample::value`].
    pub fn sample_type_names(&self) -> Vec<&str> {
        self.sample_type.iter().map(|t| self.string(t.r#type)).collect()
    }

    /// Where the producer put each sample's standard error of sample type `ty`, when it did:
    /// Ying's `<ty>_stderr` sample type, or the `stderr:<ty>` numeric labels of sets written
    /// before it (left out where a value had no sampling error). None for another producer's
    /// profile, whose noise is bounded from its period instead.
    pub fn stderrs_of(&self, ty: &str) -> Option<Stderrs> {
        let suffix = crate::report::noise::STDERR_SAMPLE_SUFFIX;
        if let Some(i) = self.sample_type_index(&format!("{ty}{suffix}")) {
            return Some(Stderrs::Type(i));
        }
        let key = format!("stderr:{ty}");
        let labelled =
            self.sample.iter().any(|s| s.label.iter().any(|l| self.string(l.key) == key));
        labelled.then_some(Stderrs::Label(key))
    }

    /// The position in [`Sample::value`] of the sample type named `name` (e.g.
    /// `inuse_space`), or, as `go tool pprof -sample_index` also accepts, a decimal index.
    pub fn sample_type_index(&self, name: &str) -> Option<usize> {
        if let Some(i) = self.sample_type.iter().position(|t| self.string(t.r#type) == name) {
            return Some(i);
        }
        name.parse::<usize>().ok().filter(|&i| i < self.sample_type.len())
    }

    /// The sample type pprof shows when none is asked for: [`Profile::default_sample_type`]
    /// when it names one, otherwise the last. `None` when the profile has no sample types.
    pub fn default_sample_index(&self) -> Option<usize> {
        let last = self.sample_type.len().checked_sub(1)?;
        if self.default_sample_type != 0 {
            let name = self.string(self.default_sample_type);
            if let Some(i) = self.sample_type.iter().position(|t| self.string(t.r#type) == name) {
                return Some(i);
            }
        }
        Some(last)
    }
}

/// Why bytes are not a profile.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadProfileError {
    /// Nothing to read.
    Empty,
    /// The bytes start like gzip but do not inflate.
    Gzip(io::Error),
    /// The (inflated) bytes are not a protobuf `Profile` message.
    Decode(prost::DecodeError),
    /// A `Profile` message that breaks one of profile.proto's rules; the text says which.
    Invalid(String),
    /// More to inflate or decode than the limit allows (`report/bounded.rs`); the text says
    /// how much and how to raise it.
    TooLarge(String),
}

impl fmt::Display for ReadProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadProfileError::Empty => f.write_str("empty: not a pprof profile"),
            ReadProfileError::Gzip(e) => write!(f, "corrupt gzip data: {e}"),
            ReadProfileError::Decode(e) => {
                write!(f, "not a pprof profile (protobuf decoding failed: {e})")
            }
            ReadProfileError::Invalid(why) => write!(f, "not a valid pprof profile: {why}"),
            ReadProfileError::TooLarge(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ReadProfileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadProfileError::Gzip(e) => Some(e),
            ReadProfileError::Decode(e) => Some(e),
            _ => None,
        }
    }
}

/// Decodes a profile from a file's bytes: gzipped (as `.pb.gz` files are, one or several
/// concatenated gzip members) or plain protobuf. The profile is checked as pprof checks it
/// (see the module documentation).
pub fn read_profile(bytes: &[u8]) -> Result<Profile, ReadProfileError> {
    if bytes.is_empty() {
        return Err(ReadProfileError::Empty);
    }
    let limit = super::bounded::max_decoded_bytes();
    let inflated;
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let out = super::bounded::inflate(bytes, limit).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData => ReadProfileError::TooLarge(e.to_string()),
            _ => ReadProfileError::Gzip(e),
        })?;
        if out.is_empty() {
            return Err(ReadProfileError::Empty);
        }
        inflated = out;
        &inflated[..]
    } else {
        bytes
    };
    // What decoding may take, bounded before it starts (a planted file of empty samples).
    let bound = super::bounded::decoded_bound(raw).saturating_add(inflated_len(raw, bytes));
    if bound > limit {
        let e = super::bounded::over_bound("the profile", bound, limit);
        return Err(ReadProfileError::TooLarge(e.to_string()));
    }
    let profile = Profile::decode(raw).map_err(ReadProfileError::Decode)?;
    check(&profile).map_err(ReadProfileError::Invalid)?;
    Ok(profile)
}

/// The inflated copy's size when `raw` is one (it is held while the profile decodes).
fn inflated_len(raw: &[u8], bytes: &[u8]) -> u64 {
    if std::ptr::eq(raw, bytes) { 0 } else { raw.len() as u64 }
}

/// Serialises `profile` and gzips it, as `.pb.gz` files are.
pub fn encode_gzip(profile: &Profile) -> io::Result<Vec<u8>> {
    let mut gz = super::pprof::gzip(Vec::new());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()
}

/// profile.proto's rules that pprof's parser enforces after decoding.
fn check(p: &Profile) -> Result<(), String> {
    use std::collections::HashSet;
    match p.string_table.first() {
        None => return Err("no string table".into()),
        Some(s) if !s.is_empty() => {
            return Err(format!("string_table[0] must be \"\", found {s:?}"));
        }
        Some(_) => {}
    }
    let n = p.string_table.len() as i64;
    let string = |what: &str, i: i64| {
        if (0..n).contains(&i) {
            Ok(())
        } else {
            Err(format!("{what} is string {i}, beyond the string table's {n} entries"))
        }
    };
    for t in p.sample_type.iter().chain(&p.period_type) {
        string("a sample or period type", t.r#type)?;
        string("a sample or period unit", t.unit)?;
    }
    for (what, i) in [
        ("drop_frames", p.drop_frames),
        ("keep_frames", p.keep_frames),
        ("default_sample_type", p.default_sample_type),
        ("doc_url", p.doc_url),
    ] {
        string(what, i)?;
    }
    for &c in &p.comment {
        string("a comment", c)?;
    }
    let unique = |what: &str, ids: &mut dyn Iterator<Item = u64>| {
        let mut seen = HashSet::new();
        for id in ids {
            if id == 0 {
                return Err(format!("a {what} has id 0"));
            }
            if !seen.insert(id) {
                return Err(format!("two {what}s have id {id}"));
            }
        }
        Ok(seen)
    };
    let mappings = unique("mapping", &mut p.mapping.iter().map(|m| m.id))?;
    let functions = unique("function", &mut p.function.iter().map(|f| f.id))?;
    let locations = unique("location", &mut p.location.iter().map(|l| l.id))?;
    for m in &p.mapping {
        string("a mapping's file name", m.filename)?;
        string("a mapping's build id", m.build_id)?;
    }
    for f in &p.function {
        string("a function's name", f.name)?;
        string("a function's system name", f.system_name)?;
        string("a function's file name", f.filename)?;
    }
    for l in &p.location {
        if l.mapping_id != 0 && !mappings.contains(&l.mapping_id) {
            return Err(format!(
                "location {} names mapping {}, which is absent",
                l.id, l.mapping_id
            ));
        }
        for line in &l.line {
            if !functions.contains(&line.function_id) {
                return Err(format!(
                    "location {} names function {}, which is absent",
                    l.id, line.function_id
                ));
            }
        }
    }
    let types = p.sample_type.len();
    for (i, s) in p.sample.iter().enumerate() {
        if s.value.len() != types {
            return Err(format!(
                "sample {i} has {} values for {types} sample types",
                s.value.len()
            ));
        }
        if let Some(id) = s.location_id.iter().find(|id| !locations.contains(id)) {
            return Err(format!("sample {i} names location {id}, which is absent"));
        }
        for l in &s.label {
            string("a label's key", l.key)?;
            string("a label's value", l.str)?;
            string("a label's unit", l.num_unit)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample's standard error comes from the `_stderr` sample type, else from the labels of
    /// older sets (0 where a sample has none), else not at all.
    #[test]
    fn stderrs_are_read_from_their_sample_type_or_from_older_labels() {
        let vt = |t: i64| ValueType { r#type: t, unit: 0 };
        let strings = ["", "inuse_space", "inuse_space_stderr", "stderr:inuse_space"];
        let mut p = Profile {
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            sample_type: vec![vt(1), vt(2)],
            ..Profile::default()
        };
        let sample =
            |value: Vec<i64>, label: Vec<Label>| Sample { value, label, ..Sample::default() };
        p.sample = vec![sample(vec![100, 7], vec![])];
        let e = p.stderrs_of("inuse_space").expect("the sample type");
        assert_eq!(e, Stderrs::Type(1));
        assert_eq!(e.of(&p, &p.sample[0]), 7.0);
        // An older set: one type, the standard error in a label where there is one.
        p.sample_type.truncate(1);
        let label = Label { key: 3, num: 9, ..Label::default() };
        p.sample = vec![sample(vec![100], vec![label]), sample(vec![5], vec![])];
        let e = p.stderrs_of("inuse_space").expect("the labels");
        assert_eq!((e.of(&p, &p.sample[0]), e.of(&p, &p.sample[1])), (9.0, 0.0));
        // Another producer's profile gives none.
        p.sample = vec![sample(vec![100], vec![])];
        assert_eq!(p.stderrs_of("inuse_space"), None);
    }
    use crate::report::pprof::{PprofLine, PprofLocation, PprofMapping, PprofProfile, PprofSample};

    fn line(function: &str, file: &str, line: i64) -> PprofLine {
        PprofLine { function: function.into(), system_name: "".into(), file: file.into(), line }
    }

    /// Two stacks through `main`, the second with `beta` inlined into `gamma`.
    fn ying_profile() -> PprofProfile {
        let main = PprofLocation {
            address: 0x5000,
            lines: vec![line("main", "main.c", 3)],
            mapping: Some(0),
        };
        PprofProfile {
            samples: vec![
                PprofSample {
                    locations: vec![
                        PprofLocation {
                            address: 0x2000,
                            lines: vec![line("alpha", "a.c", 10)],
                            mapping: Some(0),
                        },
                        main.clone(),
                    ],
                    values: [3, 3000, 3, 3000],
                    labels: vec![],
                    num_labels: vec![],
                },
                PprofSample {
                    locations: vec![
                        PprofLocation {
                            address: 0x3000,
                            lines: vec![line("beta", "b.c", 5), line("gamma", "g.c", 20)],
                            mapping: Some(0),
                        },
                        main,
                    ],
                    values: [5, 5000, 1, 1000],
                    labels: vec![("span".into(), "handler".into())],
                    num_labels: vec![("bytes".into(), -7, "bytes".into())],
                },
            ],
            mappings: vec![PprofMapping {
                memory_start: 0x1000,
                memory_limit: 0x9000,
                file_offset: 0,
                filename: "/usr/bin/ying-test".into(),
                build_id: "abc123".into(),
                has_functions: true,
            }],
            period: 512 * 1024,
            time_nanos: 1_700_000_000_000_000_000,
            duration_nanos: 0,
            comments: vec!["hello".into()],
        }
    }

    /// The function names of a location, innermost first.
    fn names(p: &Profile, location_id: u64) -> Vec<&str> {
        let loc = p.location.iter().find(|l| l.id == location_id).unwrap();
        loc.line
            .iter()
            .map(|l| {
                let f = p.function.iter().find(|f| f.id == l.function_id).unwrap();
                p.string(f.name)
            })
            .collect()
    }

    #[test]
    fn decodes_what_the_writer_emits_gzipped_and_plain() {
        let written = ying_profile();
        for bytes in [written.encode_gzip().unwrap(), written.encode()] {
            let p = read_profile(&bytes).unwrap();
            assert_eq!(
                p.sample_type_names(),
                ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]
            );
            assert_eq!(p.default_sample_index(), Some(3));
            assert_eq!(p.sample_type_index("alloc_space"), Some(1));
            assert_eq!(p.sample_type_index("2"), Some(2));
            assert_eq!(p.sample_type_index("4"), None);
            assert_eq!(p.sample_type_index("nothing"), None);
            let pt = p.period_type.unwrap();
            assert_eq!((p.string(pt.r#type), p.string(pt.unit)), ("space", "bytes"));
            assert_eq!(p.period, 512 * 1024);
            assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
            assert_eq!(p.comment.iter().map(|&c| p.string(c)).collect::<Vec<_>>(), ["hello"]);
            assert_eq!(p.sample.len(), 2);
            assert_eq!(p.sample[0].value, [3, 3000, 3, 3000]);
            assert_eq!(p.sample[1].value, [5, 5000, 1, 1000]);
            assert_eq!(names(&p, p.sample[0].location_id[0]), ["alpha"]);
            assert_eq!(names(&p, p.sample[1].location_id[0]), ["beta", "gamma"]);
            assert_eq!(p.sample[0].location_id[1], p.sample[1].location_id[1], "main shared");
            let labels: Vec<(&str, &str, i64, &str)> = p.sample[1]
                .label
                .iter()
                .map(|l| (p.string(l.key), p.string(l.str), l.num, p.string(l.num_unit)))
                .collect();
            assert_eq!(labels, [("span", "handler", 0, ""), ("bytes", "", -7, "bytes")]);
            let m = &p.mapping[0];
            assert_eq!((m.id, m.memory_start, m.memory_limit), (1, 0x1000, 0x9000));
            assert_eq!(
                (p.string(m.filename), p.string(m.build_id)),
                ("/usr/bin/ying-test", "abc123")
            );
            assert!(
                m.has_functions && m.has_filenames && m.has_line_numbers && m.has_inline_frames
            );
        }
    }

    #[test]
    fn prost_encoding_reads_back_the_same() {
        let p = read_profile(&ying_profile().encode()).unwrap();
        let again = read_profile(&encode_gzip(&p).unwrap()).unwrap();
        assert_eq!(p, again);
    }

    #[test]
    fn default_sample_type_falls_back_to_the_last() {
        let mut p = read_profile(&ying_profile().encode()).unwrap();
        p.default_sample_type = 0;
        assert_eq!(p.default_sample_index(), Some(3));
        p.default_sample_type = p.sample_type[1].r#type;
        assert_eq!(p.default_sample_index(), Some(1));
        p.sample_type.clear();
        assert_eq!(p.default_sample_index(), None);
    }

    #[test]
    fn bad_input_says_what_is_wrong() {
        let err = |bytes: &[u8]| read_profile(bytes).unwrap_err().to_string();
        assert_eq!(err(b""), "empty: not a pprof profile");
        assert!(err(b"\x1f\x8b\x08\x00garbage").starts_with("corrupt gzip data"));
        let gz = ying_profile().encode_gzip().unwrap();
        assert!(err(&gz[..gz.len() / 2]).starts_with("corrupt gzip data"), "{}", err(&gz[..20]));
        // A length prefix that runs past the end.
        assert!(err(b"\x0a\x7f\x01").starts_with("not a pprof profile (protobuf decoding failed"));
        // Text that happens to parse as protobuf (field 13, varints) but has no string table.
        assert_eq!(err(b"hihi"), "not a valid pprof profile: no string table");

        let valid = read_profile(&ying_profile().encode()).unwrap();
        let broken = |change: &dyn Fn(&mut Profile)| {
            let mut p = valid.clone();
            change(&mut p);
            read_profile(&p.encode_to_vec()).unwrap_err().to_string()
        };
        assert!(
            broken(&|p| p.sample[0].value.pop().map(drop).unwrap())
                .contains("sample 0 has 3 values for 4 sample types")
        );
        assert!(
            broken(&|p| p.sample[1].location_id.push(99))
                .contains("sample 1 names location 99, which is absent")
        );
        assert!(broken(&|p| p.function[0].name = 1000).contains("function's name is string 1000"));
        assert!(
            broken(&|p| p.location[0].line[0].function_id = 77)
                .contains("names function 77, which is absent")
        );
        assert!(broken(&|p| p.location[1].id = p.location[0].id).contains("two locations have id"));
        assert!(broken(&|p| p.string_table[0] = "x".into()).contains("string_table[0] must be"));
    }

    /// The streaming writer against building a prost `Profile` and encoding it, on one profile
    /// of 100,000 stacks (the module documentation's numbers). Memory is the process's peak
    /// resident growth, so each variant runs in a process of its own:
    /// `cargo test --release --lib writer_against_prost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check: run by hand"]
    fn writer_against_prost() {
        use std::process::Command;
        let exe = std::env::current_exe().unwrap();
        for variant in ["streaming", "prost"] {
            let out = Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "--nocapture",
                    "report::proto::tests::one_writer_run",
                ])
                .env("YING_PROTO_BENCH", variant)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().find(|l| l.starts_with("bench ")).unwrap_or("no result");
            println!("{line}");
        }
    }

    /// One run of [`writer_against_prost`] (the variant in `YING_PROTO_BENCH`).
    #[test]
    #[ignore = "run by writer_against_prost"]
    fn one_writer_run() {
        use crate::report::pprof::{Label as WLabel, ProfileWriter};
        use std::sync::Arc;
        let Ok(variant) = std::env::var("YING_PROTO_BENCH") else { return };
        const STACKS: usize = 100_000;
        const DEPTH: usize = 40;
        // 200,000 distinct addresses: each stack has 2 leaf addresses of its own and 38
        // shared frames picked from 50,000 functions.
        let functions: Vec<Arc<str>> = (0..50_000)
            .map(|i| Arc::from(format!("crate::module_{}::function_{i}", i % 97)))
            .collect();
        let files: Vec<Arc<str>> =
            (0..500).map(|i| Arc::from(format!("/src/project/module_{i}.rs"))).collect();
        let location = |addr: usize| PprofLocation {
            address: addr as u64 * 16 + 0x40_0000,
            lines: vec![PprofLine {
                function: functions[addr % functions.len()].clone(),
                system_name: "".into(),
                file: files[addr % files.len()].clone(),
                line: (addr % 1000) as i64,
            }],
            mapping: None,
        };
        let stack = |s: usize| -> Vec<usize> {
            (0..DEPTH)
                .map(|d| if d < 2 { 2 * s + d } else { 200_000 + (s * 7 + d * 13) % 50_000 })
                .collect()
        };
        let rss_kib = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        };
        let before = rss_kib();
        let start = std::time::Instant::now();
        let bytes = if variant == "streaming" {
            // The writer streams to a file in a report set: count the bytes, keep none.
            #[derive(Debug)]
            struct Count(usize);
            impl Write for Count {
                fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                    self.0 += b.len();
                    Ok(b.len())
                }
                fn flush(&mut self) -> io::Result<()> {
                    Ok(())
                }
            }
            let mut w = ProfileWriter::new(Vec::new(), Count(0)).unwrap();
            // As heap_profile::write does: each address becomes a location once.
            let mut known = vec![0u64; 250_000];
            let mut ids = Vec::new();
            for s in 0..STACKS {
                ids.clear();
                for a in stack(s) {
                    if known[a] == 0 {
                        known[a] = w.location_id(&location(a));
                    }
                    ids.push(known[a]);
                }
                w.sample(&ids, [1, s as i64, 1, s as i64], std::iter::empty::<WLabel<'_>>())
                    .unwrap();
            }
            w.finish(524288, 0, 0, &[]).unwrap().0
        } else {
            let mut p = Profile { string_table: vec![String::new()], ..Default::default() };
            let mut strings = std::collections::HashMap::<Arc<str>, i64>::new();
            let mut intern = |p: &mut Profile, s: &Arc<str>| {
                *strings.entry(s.clone()).or_insert_with(|| {
                    p.string_table.push(s.to_string());
                    p.string_table.len() as i64 - 1
                })
            };
            for t in ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"] {
                let ty = intern(&mut p, &Arc::from(t));
                p.sample_type.push(ValueType { r#type: ty, unit: 0 });
            }
            let mut location_ids = std::collections::HashMap::<usize, u64>::new();
            let mut function_ids = std::collections::HashMap::<(i64, i64), u64>::new();
            for s in 0..STACKS {
                let mut ids = Vec::with_capacity(DEPTH);
                for a in stack(s) {
                    let id = match location_ids.get(&a) {
                        Some(&id) => id,
                        None => {
                            let loc = location(a);
                            let l = &loc.lines[0];
                            let key = (intern(&mut p, &l.function), intern(&mut p, &l.file));
                            let next = p.function.len() as u64 + 1;
                            let fid = *function_ids.entry(key).or_insert(next);
                            if fid == next {
                                p.function.push(Function {
                                    id: fid,
                                    name: key.0,
                                    system_name: key.0,
                                    filename: key.1,
                                    start_line: 0,
                                });
                            }
                            let id = p.location.len() as u64 + 1;
                            p.location.push(Location {
                                id,
                                mapping_id: 0,
                                address: loc.address,
                                line: vec![Line { function_id: fid, line: l.line, column: 0 }],
                                is_folded: false,
                            });
                            location_ids.insert(a, id);
                            id
                        }
                    };
                    ids.push(id);
                }
                p.sample.push(Sample {
                    location_id: ids,
                    value: vec![1, s as i64, 1, s as i64],
                    label: vec![],
                });
            }
            p.encode_to_vec().len()
        };
        let elapsed = start.elapsed();
        println!(
            "bench {variant}: {bytes} bytes in {:.3} s, peak RSS +{:.1} MiB",
            elapsed.as_secs_f64(),
            (rss_kib() - before) as f64 / 1024.0
        );
    }
}
