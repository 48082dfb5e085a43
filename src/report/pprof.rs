//! Heap profiles in pprof's `profile.proto` format (`.pb.gz`).
//!
//! The format is defined by
//! [`profile.proto`](https://github.com/google/pprof/blob/main/proto/profile.proto). It needs
//! only three protobuf constructs — varints, length-delimited fields and packed repeated varints —
//! so the encoder is written by hand here instead of pulling in a protobuf code generator.
//!
//! Format choices:
//!
//! * **Go's four heap sample types.** Every sample carries `alloc_objects/count`,
//!   `alloc_space/bytes`, `inuse_objects/count` and `inuse_space/bytes`, in that order, with
//!   `period_type = space/bytes` and `period` = the sampling interval in bytes. This is exactly the
//!   shape of Go's `runtime/pprof` heap profile, so `go tool pprof`, Pyroscope, Parca, Grafana and
//!   other backends recognise it as a heap profile and offer `-sample_index` to switch between
//!   retained (`inuse_*`) and cumulative (`alloc_*`) views. `default_sample_type` is
//!   `inuse_space`, the view a leak hunt starts with. Values are expected to be already scaled up
//!   to estimates of the real (unsampled) totals, as profile.proto recommends. They are the text
//!   report's figures, in its unit (its `bytes counted:` line): an object is a block, however
//!   often it was reallocated, and `alloc_space` counts a realloc's growth.
//! * **Sequential ids.** profile.proto only asks for unique non-zero ids, but Go's decoder has a
//!   fast path (a dense table instead of a map) for ids `1..=n`, small ids are short varints, and
//!   numbering in first-seen order keeps the output deterministic. Mapping `i` of
//!   [`PprofProfile::mappings`] gets id `i + 1`.
//! * **Inlined frames are extra lines of one location.** When the compiler inlines a callee,
//!   a single machine address belongs to several source functions. profile.proto models this as
//!   one `Location` (one address) with several `Line`s, innermost callee first and the real
//!   (outermost) function last. pprof then shows the callees marked `(inline)`, charges flat
//!   cost to the innermost one, and keeps address-based views (`-addresses`, `-disasm`,
//!   re-symbolisation) correct; separate locations would pretend there were extra real calls.
//! * **Deduplication.** Strings are interned (`string_table[0]` is `""`), functions are shared
//!   by `(name, system_name, file)` and locations by `(address, mapping, lines)`, so samples that
//!   pass through the same address share one `Location`. (Including the lines in the key only
//!   matters if a caller gives one address two different symbolisations: both are kept instead
//!   of silently dropping the second.)
//! * **Determinism.** All tables are filled in first-seen order and looked up through
//!   `BTreeMap`s, so the same profile always encodes to the same bytes.
//! * **Streaming.** [`ProfileWriter`] writes each sample as it is given and keeps only the
//!   shared tables (strings, functions, locations) for the end, so a report of 100,000 stacks
//!   never holds its samples twice; [`PprofProfile`] is the same writer fed from memory.
//!
//! The encoder never panics: out-of-range mapping indices are treated as "no mapping", and every
//! integer is representable on the wire.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;

/// The four sample types, Go heap-profile style, as `(type, unit)` pairs; the order of
/// [`PprofSample::values`].
pub(crate) const SAMPLE_TYPES: [(&str, &str); 4] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
];

/// A report set's heap profile: Go's four sample types, then each one's standard error from
/// sampling, in its unit, per sample (0: no sampling error), as sample types of their own:
/// `ying diff` and `ying view` read them, `go tool pprof` opens on `inuse_space` as ever and
/// lists them only among `-sample_index`'s choices, and its `-tags` stays the program's labels
/// (they were `stderr:<type>` numeric labels on every sample once, which `-tags` listed).
/// Another producer's profile has none, and its noise is bounded from its period instead.
/// A tool that merges profiles (`go tool pprof -proto a b`) adds them up like any value: a
/// merged profile's standard errors are an upper bound.
pub(crate) const STDERR_SAMPLE_TYPES: [(&str, &str); 8] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
    ("alloc_objects_stderr", "count"),
    ("alloc_space_stderr", "bytes"),
    ("inuse_objects_stderr", "count"),
    ("inuse_space_stderr", "bytes"),
];

/// [`STDERR_SAMPLE_TYPES`] for the peak's profile, which keeps no allocated figures: Go's two
/// `inuse_*` types and their standard errors.
pub(crate) const INUSE_STDERR_SAMPLE_TYPES: [(&str, &str); 4] = [
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
    ("inuse_objects_stderr", "count"),
    ("inuse_space_stderr", "bytes"),
];

/// Standard errors as sample values (rounded; 0 when none).
pub(crate) fn stderr_values<const N: usize>(stderrs: [f64; N]) -> [i64; N] {
    stderrs.map(|se| se.round().clamp(0.0, i64::MAX as f64) as i64)
}

/// Go's four sample types, the estimated retained bytes in memory and in swap at report time
/// (`YING_RESIDENT`, see `model/resident.rs`), then the four's standard errors (see
/// [`STDERR_SAMPLE_TYPES`]): a report's heap profile when its residency was measured. `default_sample_type` stays `inuse_space`, so `go tool pprof` opens it as it
/// opens Go's; `-sample_index=resident_space` shows where the pages are.
pub(crate) const RESIDENT_SAMPLE_TYPES: [(&str, &str); 10] = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
    ("resident_space", "bytes"),
    ("swapped_space", "bytes"),
    ("alloc_objects_stderr", "count"),
    ("alloc_space_stderr", "bytes"),
    ("inuse_objects_stderr", "count"),
    ("inuse_space_stderr", "bytes"),
];

/// `Profile.period_type`: the period counts allocated bytes, as in Go heap profiles.
const PERIOD_TYPE: (&str, &str) = ("space", "bytes");

/// `Profile.default_sample_type`: the view pprof opens with.
const DEFAULT_SAMPLE_TYPE: &str = "inuse_space";

/// One source-level frame of a location; a location's lines go innermost (inlined callee) first,
/// the last one is the real (outermost) function, as profile.proto specifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PprofLine {
    /// Human-readable (demangled) function name (shared with the snapshot's frames).
    pub function: Arc<str>,
    /// Function name as the system knows it (e.g. the mangled symbol). When empty, `function`
    /// is written instead, as Go and pprof's own symbolizer do; pprof shows a differing
    /// system name in parentheses after the name.
    pub system_name: Arc<str>,
    /// Source file; may be empty when unknown.
    pub file: Arc<str>,
    /// Source line number; 0 when unknown.
    pub line: i64,
}

/// One program address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PprofLocation {
    /// Instruction address (return addresses for non-leaf frames, as captured).
    pub address: u64,
    /// Source frames at this address, innermost (inlined callee) first; empty if unsymbolised.
    pub lines: Vec<PprofLine>,
    /// Index into [`PprofProfile::mappings`] of the module containing `address`, if known.
    /// An out-of-range index is treated as `None`.
    pub mapping: Option<usize>,
}

/// A loaded module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PprofMapping {
    /// Address at which the module is loaded.
    pub memory_start: u64,
    /// End (exclusive) of the module's address range.
    pub memory_limit: u64,
    /// Offset in the file that corresponds to `memory_start`.
    pub file_offset: u64,
    /// Path of the module, or a pseudo-name such as `[vdso]`.
    pub filename: String,
    /// Build id (e.g. hex of `.note.gnu.build-id`); may be empty.
    pub build_id: String,
    /// Whether locations in this module are already symbolised. Sets all four of profile.proto's
    /// `has_functions`, `has_filenames`, `has_line_numbers` and `has_inline_frames`, which tells
    /// pprof not to try to re-symbolise them.
    pub has_functions: bool,
}

/// One stack with its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PprofSample {
    /// The stack, leaf (innermost) first.
    pub locations: Vec<PprofLocation>,
    /// Values in [`SAMPLE_TYPES`] order: alloc_objects, alloc_space, inuse_objects, inuse_space.
    pub values: [i64; 4],
    /// String labels as `(key, value)`, e.g. `("span", "handler")`.
    pub labels: Vec<(String, String)>,
    /// Numeric labels as `(key, value, unit)`, e.g. `("bytes", 4096, "bytes")`; the unit may be
    /// empty.
    pub num_labels: Vec<(String, i64, String)>,
}

/// A whole heap profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PprofProfile {
    /// The samples, written in this order.
    pub samples: Vec<PprofSample>,
    /// Loaded modules; [`PprofLocation::mapping`] indexes into this list.
    pub mappings: Vec<PprofMapping>,
    /// Sampling interval in bytes (`Profile.period`).
    pub period: i64,
    /// Collection start time in nanoseconds since the Unix epoch.
    pub time_nanos: i64,
    /// Duration of the collection in nanoseconds.
    pub duration_nanos: i64,
    /// Free-form comments, shown by `go tool pprof -comments`.
    pub comments: Vec<String>,
}

impl PprofProfile {
    /// Serialises to uncompressed profile.proto bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut raw = Vec::new();
        // Writing to a `Vec` cannot fail.
        let _ = self.write_to(&mut raw);
        raw
    }

    /// Serialises and gzips (what `go tool pprof` and every backend read; files end in .pb.gz).
    #[cfg(test)]
    pub(crate) fn encode_gzip(&self) -> io::Result<Vec<u8>> {
        let mut gz = gzip(Vec::new());
        self.write_to(&mut gz)?;
        gz.finish()
    }

    /// Serialises to `out`, through a [`ProfileWriter`].
    pub(crate) fn write_to(&self, out: impl Write) -> io::Result<()> {
        let mut w = ProfileWriter::new(self.mappings.clone(), out)?;
        let mut ids = Vec::new();
        for s in &self.samples {
            ids.clear();
            for loc in &s.locations {
                ids.push(w.location_id(loc));
            }
            let labels = s.labels.iter().map(|(k, v)| Label { key: k, str: v, num: 0, unit: "" });
            let nums =
                s.num_labels.iter().map(|(k, n, u)| Label { key: k, str: "", num: *n, unit: u });
            w.sample(&ids, s.values, labels.chain(nums))?;
        }
        w.finish(self.period, self.time_nanos, self.duration_nanos, &self.comments)?;
        Ok(())
    }
}

/// A gzip stream into `out` at the compression every profile uses: the fastest level, as Go's
/// `runtime/pprof` writes its profiles. At the default level, compressing took 38 % of an exit
/// report of 888,000 stacks (two profiles of about 10 MB each).
pub(crate) fn gzip<W: Write>(out: W) -> GzEncoder<W> {
    GzEncoder::new(out, Compression::fast())
}

/// Field numbers from profile.proto, one module per message.
mod field {
    pub(super) mod profile {
        pub(crate) const SAMPLE_TYPE: u32 = 1;
        pub(crate) const SAMPLE: u32 = 2;
        pub(crate) const MAPPING: u32 = 3;
        pub(crate) const LOCATION: u32 = 4;
        pub(crate) const FUNCTION: u32 = 5;
        pub(crate) const STRING_TABLE: u32 = 6;
        pub(crate) const DROP_FRAMES: u32 = 7;
        pub(crate) const TIME_NANOS: u32 = 9;
        pub(crate) const DURATION_NANOS: u32 = 10;
        pub(crate) const PERIOD_TYPE: u32 = 11;
        pub(crate) const PERIOD: u32 = 12;
        pub(crate) const COMMENT: u32 = 13;
        pub(crate) const DEFAULT_SAMPLE_TYPE: u32 = 14;
    }
    pub(super) mod value_type {
        pub(crate) const TYPE: u32 = 1;
        pub(crate) const UNIT: u32 = 2;
    }
    pub(super) mod sample {
        pub(crate) const LOCATION_ID: u32 = 1;
        pub(crate) const VALUE: u32 = 2;
        pub(crate) const LABEL: u32 = 3;
    }
    pub(super) mod label {
        pub(crate) const KEY: u32 = 1;
        pub(crate) const STR: u32 = 2;
        pub(crate) const NUM: u32 = 3;
        pub(crate) const NUM_UNIT: u32 = 4;
    }
    pub(super) mod mapping {
        pub(crate) const ID: u32 = 1;
        pub(crate) const MEMORY_START: u32 = 2;
        pub(crate) const MEMORY_LIMIT: u32 = 3;
        pub(crate) const FILE_OFFSET: u32 = 4;
        pub(crate) const FILENAME: u32 = 5;
        pub(crate) const BUILD_ID: u32 = 6;
        pub(crate) const HAS_FUNCTIONS: u32 = 7;
        pub(crate) const HAS_FILENAMES: u32 = 8;
        pub(crate) const HAS_LINE_NUMBERS: u32 = 9;
        pub(crate) const HAS_INLINE_FRAMES: u32 = 10;
    }
    pub(super) mod location {
        pub(crate) const ID: u32 = 1;
        pub(crate) const MAPPING_ID: u32 = 2;
        pub(crate) const ADDRESS: u32 = 3;
        pub(crate) const LINE: u32 = 4;
    }
    pub(super) mod line {
        pub(crate) const FUNCTION_ID: u32 = 1;
        pub(crate) const LINE: u32 = 2;
    }
    pub(super) mod function {
        pub(crate) const ID: u32 = 1;
        pub(crate) const NAME: u32 = 2;
        pub(crate) const SYSTEM_NAME: u32 = 3;
        pub(crate) const FILENAME: u32 = 4;
    }
}

/// Minimal protobuf writer. proto3 semantics: scalar fields equal to 0/false are omitted.
#[derive(Debug, Default)]
struct Writer {
    buf: Vec<u8>,
}

/// Bytes of samples [`ProfileWriter`] gathers before it writes them.
const SAMPLE_BATCH: usize = 64 * 1024;

/// The bytes of `v` as a varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Wire type of varint-encoded scalars.
const WIRE_VARINT: u32 = 0;
/// Wire type of strings, nested messages and packed repeated fields.
const WIRE_LEN: u32 = 2;

impl Writer {
    /// Base-128 varint, least significant group first.
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v & 0x7f) as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire_type: u32) {
        self.varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    /// `uint64` field.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, WIRE_VARINT);
            self.varint(v);
        }
    }

    /// `int64` field: two's complement, so negative values take ten bytes (not zig-zag).
    fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    fn bool(&mut self, field: u32, v: bool) {
        self.uint(field, u64::from(v));
    }

    /// Length-delimited field; always written, since an element of a repeated field (such as
    /// `string_table[0] == ""`) must be present even when empty.
    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, WIRE_LEN);
        self.varint(data.len() as u64);
        self.buf.extend_from_slice(data);
    }

    /// Nested message. Its length comes first but is known last: the message is built in
    /// place and its body moved up by the length's size (a buffer of its own per message was
    /// millions of allocations for a profile of a million stacks).
    fn message(&mut self, field: u32, build: impl FnOnce(&mut Writer)) {
        self.key(field, WIRE_LEN);
        let start = self.buf.len();
        build(self);
        let len = self.buf.len() - start;
        self.varint(len as u64);
        self.buf[start..].rotate_right(varint_len(len as u64));
    }

    /// Packed repeated varint field (proto3's default encoding); omitted when empty. Two
    /// passes over `values`: their length, then them.
    fn packed(&mut self, field: u32, values: impl Iterator<Item = u64> + Clone) {
        let len: usize = values.clone().map(varint_len).sum();
        if len > 0 {
            self.key(field, WIRE_LEN);
            self.varint(len as u64);
            for v in values {
                self.varint(v);
            }
        }
    }
}

/// The string table: index 0 is `""`, the rest in first-use order. Each string is held once,
/// shared with the table's index (and with the caller when it comes as an `Arc`).
#[derive(Debug)]
struct Strings {
    table: Vec<Arc<str>>,
    /// Hashed, not ordered, with the profiler's fast hasher: every sample's labels look up
    /// their keys and units here.
    index: HashMap<Arc<str>, i64, crate::engine::tables::Build>,
}

impl Strings {
    fn new() -> Self {
        let empty: Arc<str> = Arc::from("");
        let mut index = HashMap::default();
        index.insert(empty.clone(), 0);
        Strings { table: vec![empty], index }
    }

    fn intern(&mut self, s: &str) -> i64 {
        match self.index.get(s) {
            Some(&i) => i,
            None => self.insert(Arc::from(s)),
        }
    }

    fn intern_arc(&mut self, s: &Arc<str>) -> i64 {
        match self.index.get(&**s) {
            Some(&i) => i,
            None => self.insert(Arc::clone(s)),
        }
    }

    fn insert(&mut self, s: Arc<str>) -> i64 {
        let i = self.table.len() as i64;
        self.table.push(Arc::clone(&s));
        self.index.insert(s, i);
        i
    }
}

/// `Function` with string-table indices; its id is its position + 1.
#[derive(Debug)]
struct FunctionRow {
    name: i64,
    system_name: i64,
    filename: i64,
}

/// `Line`: function id and line number.
type LineRow = (u64, i64);

/// `Location`; its id is its position + 1.
#[derive(Debug)]
struct LocationRow {
    mapping_id: u64,
    address: u64,
    lines: Vec<LineRow>,
}

/// One label of a sample, as [`ProfileWriter::sample`] takes it: a string label (`num` 0,
/// `unit` empty) or a numeric one (`str` empty).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Label<'a> {
    /// The key, e.g. `span`.
    pub key: &'a str,
    /// The string value.
    pub str: &'a str,
    /// The numeric value.
    pub num: i64,
    /// The unit of `num`; may be empty.
    pub unit: &'a str,
}

/// Writes a profile one sample at a time: the samples go out as they come (in a profile of
/// 100,000 stacks they are nearly all of it) and only the tables samples share (strings,
/// functions, locations, mappings) are kept until [`ProfileWriter::finish`] appends them.
/// Fields still go out in field-number order: sample types, samples, mappings, locations,
/// functions, strings, then the scalars.
#[derive(Debug)]
pub(crate) struct ProfileWriter<W: Write> {
    out: W,
    strings: Strings,
    period_type: (i64, i64),
    default_sample_type: i64,
    /// `Profile.drop_frames` as a string-table index (0: none).
    drop_frames: i64,
    mappings: Vec<PprofMapping>,
    mapping_names: Vec<(i64, i64)>,
    functions: Vec<FunctionRow>,
    function_ids: BTreeMap<(i64, i64, i64), u64>,
    locations: Vec<LocationRow>,
    location_ids: BTreeMap<(u64, u64, Vec<LineRow>), u64>,
    /// Scratch buffer of one message.
    buf: Writer,
}

impl<W: Write> ProfileWriter<W> {
    /// Starts a profile of processes with the loaded modules `mappings` (indexed by
    /// [`PprofLocation::mapping`]) and writes its sample types to `out`.
    pub(crate) fn new(mappings: Vec<PprofMapping>, out: W) -> io::Result<Self> {
        Self::with_sample_types(mappings, out, &SAMPLE_TYPES)
    }

    /// [`ProfileWriter::new`] with other sample types (`(type, unit)` pairs, the order of the
    /// values given to [`ProfileWriter::sample_values`]), such as [`INUSE_SAMPLE_TYPES`].
    pub(crate) fn with_sample_types(
        mappings: Vec<PprofMapping>,
        mut out: W,
        types: &[(&str, &str)],
    ) -> io::Result<Self> {
        use field::{profile as prof, value_type};
        let mut strings = Strings::new();
        let sample_types: Vec<(i64, i64)> =
            types.iter().map(|(ty, unit)| (strings.intern(ty), strings.intern(unit))).collect();
        let period_type = (strings.intern(PERIOD_TYPE.0), strings.intern(PERIOD_TYPE.1));
        let default_sample_type = strings.intern(DEFAULT_SAMPLE_TYPE);
        let mapping_names = mappings
            .iter()
            .map(|m| (strings.intern(&m.filename), strings.intern(&m.build_id)))
            .collect();
        let mut w = Writer::default();
        for &(ty, unit) in &sample_types {
            w.message(prof::SAMPLE_TYPE, |w| {
                w.int(value_type::TYPE, ty);
                w.int(value_type::UNIT, unit);
            });
        }
        out.write_all(&w.buf)?;
        w.buf.clear();
        Ok(Self {
            out,
            strings,
            period_type,
            default_sample_type,
            drop_frames: 0,
            mappings,
            mapping_names,
            functions: Vec::new(),
            function_ids: BTreeMap::new(),
            locations: Vec::new(),
            location_ids: BTreeMap::new(),
            buf: w,
        })
    }

    /// Sets `Profile.drop_frames`: pprof drops the frames whose function name fully matches
    /// `regex` from every sample, with the frames they called (allocator entry points, so that
    /// the flat cost goes to the code that asked for the memory).
    pub(crate) fn drop_frames(&mut self, regex: &str) {
        self.drop_frames = self.strings.intern(regex);
    }

    /// Sets `Profile.default_sample_type`, the view pprof opens with (`inuse_space` unless
    /// set; `alloc_space` for an allocation profile such as `/debug/pprof/allocs`).
    pub(crate) fn default_sample_type(&mut self, name: &str) {
        self.default_sample_type = self.strings.intern(name);
    }

    /// Id of the location, adding it (and its functions) on first sight.
    pub(crate) fn location_id(&mut self, loc: &PprofLocation) -> u64 {
        let mapping_id = match loc.mapping {
            Some(index) if index < self.mappings.len() => index as u64 + 1,
            _ => 0,
        };
        let lines: Vec<LineRow> = loc.lines.iter().map(|l| (self.function(l), l.line)).collect();
        let key = (loc.address, mapping_id, lines);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(LocationRow { mapping_id, address: loc.address, lines: key.2.clone() });
        self.location_ids.insert(key, id);
        id
    }

    /// Id of the line's function, adding it on first sight.
    fn function(&mut self, line: &PprofLine) -> u64 {
        let name = self.strings.intern_arc(&line.function);
        let system_name = if line.system_name.is_empty() {
            name // pprof's convention for "no separate system name"; see `PprofLine`.
        } else {
            self.strings.intern_arc(&line.system_name)
        };
        let filename = self.strings.intern_arc(&line.file);
        let next_id = self.functions.len() as u64 + 1;
        let id = *self.function_ids.entry((name, system_name, filename)).or_insert(next_id);
        if id == next_id {
            self.functions.push(FunctionRow { name, system_name, filename });
        }
        id
    }

    /// Writes one sample: its stack as location ids (leaf first, from
    /// [`ProfileWriter::location_id`]), its values in [`SAMPLE_TYPES`] order and its labels.
    pub(crate) fn sample<'l>(
        &mut self,
        location_ids: &[u64],
        values: [i64; 4],
        labels: impl IntoIterator<Item = Label<'l>>,
    ) -> io::Result<()> {
        self.sample_values(location_ids, &values, labels)
    }

    /// [`ProfileWriter::sample`] with as many values as the profile has sample types.
    pub(crate) fn sample_values<'l>(
        &mut self,
        location_ids: &[u64],
        values: &[i64],
        labels: impl IntoIterator<Item = Label<'l>>,
    ) -> io::Result<()> {
        use field::{label, profile as prof, sample};
        let labels: Vec<(i64, i64, i64, i64)> = labels
            .into_iter()
            .map(|l| {
                (
                    self.strings.intern(l.key),
                    self.strings.intern(l.str),
                    l.num,
                    self.strings.intern(l.unit),
                )
            })
            .collect();
        self.buf.message(prof::SAMPLE, |w| {
            w.packed(sample::LOCATION_ID, location_ids.iter().copied());
            w.packed(sample::VALUE, values.iter().map(|&v| v as u64));
            for &(key, str, num, num_unit) in &labels {
                w.message(sample::LABEL, |w| {
                    w.int(label::KEY, key);
                    w.int(label::STR, str);
                    w.int(label::NUM, num);
                    w.int(label::NUM_UNIT, num_unit);
                });
            }
        });
        // Samples go out in batches: the compressor behind `out` prepares its output buffer at
        // each write, which at one write per sample was a tenth of a report's time.
        if self.buf.buf.len() >= SAMPLE_BATCH {
            self.out.write_all(&self.buf.buf)?;
            self.buf.buf.clear();
        }
        Ok(())
    }

    /// Writes everything after the samples and returns the output.
    pub(crate) fn finish(
        mut self,
        period: i64,
        time_nanos: i64,
        duration_nanos: i64,
        comments: &[String],
    ) -> io::Result<W> {
        use field::value_type;
        use field::{function as fun, line, location, mapping, profile as prof};

        let comments: Vec<i64> = comments.iter().map(|c| self.strings.intern(c)).collect();
        let mut w = std::mem::take(&mut self.buf);
        self.out.write_all(&w.buf)?;
        w.buf.clear();
        for (i, (&(filename, build_id), m)) in
            self.mapping_names.iter().zip(&self.mappings).enumerate()
        {
            w.message(prof::MAPPING, |w| {
                w.uint(mapping::ID, i as u64 + 1);
                w.uint(mapping::MEMORY_START, m.memory_start);
                w.uint(mapping::MEMORY_LIMIT, m.memory_limit);
                w.uint(mapping::FILE_OFFSET, m.file_offset);
                w.int(mapping::FILENAME, filename);
                w.int(mapping::BUILD_ID, build_id);
                w.bool(mapping::HAS_FUNCTIONS, m.has_functions);
                w.bool(mapping::HAS_FILENAMES, m.has_functions);
                w.bool(mapping::HAS_LINE_NUMBERS, m.has_functions);
                w.bool(mapping::HAS_INLINE_FRAMES, m.has_functions);
            });
        }
        for (i, loc) in self.locations.iter().enumerate() {
            w.message(prof::LOCATION, |w| {
                w.uint(location::ID, i as u64 + 1);
                w.uint(location::MAPPING_ID, loc.mapping_id);
                w.uint(location::ADDRESS, loc.address);
                for &(function_id, line_number) in &loc.lines {
                    w.message(location::LINE, |w| {
                        w.uint(line::FUNCTION_ID, function_id);
                        w.int(line::LINE, line_number);
                    });
                }
            });
        }
        for (i, f) in self.functions.iter().enumerate() {
            w.message(prof::FUNCTION, |w| {
                w.uint(fun::ID, i as u64 + 1);
                w.int(fun::NAME, f.name);
                w.int(fun::SYSTEM_NAME, f.system_name);
                w.int(fun::FILENAME, f.filename);
            });
        }
        for s in &self.strings.table {
            w.bytes(prof::STRING_TABLE, s.as_bytes());
        }
        w.int(prof::DROP_FRAMES, self.drop_frames);
        w.int(prof::TIME_NANOS, time_nanos);
        w.int(prof::DURATION_NANOS, duration_nanos);
        w.message(prof::PERIOD_TYPE, |w| {
            w.int(value_type::TYPE, self.period_type.0);
            w.int(value_type::UNIT, self.period_type.1);
        });
        w.int(prof::PERIOD, period);
        w.packed(prof::COMMENT, comments.iter().map(|&c| c as u64));
        w.int(prof::DEFAULT_SAMPLE_TYPE, self.default_sample_type);
        self.out.write_all(&w.buf)?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    // ---- A minimal protobuf decoder, independent of the encoder above. ----
    // Field numbers are written as literals from profile.proto on purpose, so that a wrong
    // constant in `field` would be caught.

    #[derive(Debug, Clone, Copy)]
    enum Val<'a> {
        Varint(u64),
        Bytes(&'a [u8]),
    }

    fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = buf[*pos];
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
        }
        panic!("varint longer than 10 bytes");
    }

    /// All `(field, value)` pairs of one message, in wire order.
    fn fields(buf: &[u8]) -> Vec<(u32, Val<'_>)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < buf.len() {
            let key = read_varint(buf, &mut pos);
            let field = u32::try_from(key >> 3).unwrap();
            match key & 7 {
                0 => out.push((field, Val::Varint(read_varint(buf, &mut pos)))),
                2 => {
                    let len = usize::try_from(read_varint(buf, &mut pos)).unwrap();
                    out.push((field, Val::Bytes(&buf[pos..pos + len])));
                    pos += len;
                }
                1 => pos += 8,
                5 => pos += 4,
                wire => panic!("unexpected wire type {wire}"),
            }
        }
        assert_eq!(pos, buf.len(), "message overran its buffer");
        out
    }

    /// Values of a repeated varint field, accepting packed and unpacked encodings.
    fn varints(msg: &[u8], field: u32) -> Vec<u64> {
        let mut out = Vec::new();
        for (f, v) in fields(msg) {
            if f != field {
                continue;
            }
            match v {
                Val::Varint(x) => out.push(x),
                Val::Bytes(b) => {
                    let mut pos = 0;
                    while pos < b.len() {
                        out.push(read_varint(b, &mut pos));
                    }
                }
            }
        }
        out
    }

    /// A singular varint field (0 when absent, as proto3 says).
    fn varint(msg: &[u8], field: u32) -> u64 {
        varints(msg, field).last().copied().unwrap_or(0)
    }

    fn submessages(msg: &[u8], field: u32) -> Vec<&[u8]> {
        fields(msg)
            .into_iter()
            .filter_map(|(f, v)| match v {
                Val::Bytes(b) if f == field => Some(b),
                _ => None,
            })
            .collect()
    }

    #[derive(Debug, PartialEq)]
    struct DLabel {
        key: String,
        str: String,
        num: i64,
        unit: String,
    }

    #[derive(Debug)]
    struct DSample {
        location_ids: Vec<u64>,
        values: Vec<i64>,
        labels: Vec<DLabel>,
    }

    #[derive(Debug)]
    struct DLocation {
        id: u64,
        mapping_id: u64,
        address: u64,
        /// (function id, line)
        lines: Vec<(u64, i64)>,
    }

    #[derive(Debug)]
    struct DFunction {
        id: u64,
        name: String,
        system_name: String,
        filename: String,
    }

    #[derive(Debug)]
    struct DMapping {
        id: u64,
        start: u64,
        limit: u64,
        offset: u64,
        filename: String,
        build_id: String,
        flags: [bool; 4],
    }

    #[derive(Debug)]
    struct Decoded {
        strings: Vec<String>,
        sample_types: Vec<(String, String)>,
        samples: Vec<DSample>,
        mappings: Vec<DMapping>,
        locations: Vec<DLocation>,
        functions: Vec<DFunction>,
        time_nanos: i64,
        duration_nanos: i64,
        period_type: (String, String),
        period: i64,
        comments: Vec<String>,
        default_sample_type: String,
    }

    impl Decoded {
        fn function(&self, id: u64) -> &DFunction {
            self.functions.iter().find(|f| f.id == id).expect("dangling function id")
        }

        fn location(&self, id: u64) -> &DLocation {
            self.locations.iter().find(|l| l.id == id).expect("dangling location id")
        }

        /// Function names of a location, in encoded (innermost-first) order.
        fn names(&self, location_id: u64) -> Vec<&str> {
            let loc = self.location(location_id);
            loc.lines.iter().map(|&(f, _)| self.function(f).name.as_str()).collect()
        }
    }

    fn decode(buf: &[u8]) -> Decoded {
        let strings: Vec<String> = submessages(buf, 6)
            .into_iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect();
        let s = |i: u64| strings[usize::try_from(i).unwrap()].clone();
        let value_type = |m: &[u8]| (s(varint(m, 1)), s(varint(m, 2)));
        let samples = submessages(buf, 2)
            .into_iter()
            .map(|m| DSample {
                location_ids: varints(m, 1),
                values: varints(m, 2).into_iter().map(|v| v as i64).collect(),
                labels: submessages(m, 3)
                    .into_iter()
                    .map(|l| DLabel {
                        key: s(varint(l, 1)),
                        str: s(varint(l, 2)),
                        num: varint(l, 3) as i64,
                        unit: s(varint(l, 4)),
                    })
                    .collect(),
            })
            .collect();
        let mappings = submessages(buf, 3)
            .into_iter()
            .map(|m| DMapping {
                id: varint(m, 1),
                start: varint(m, 2),
                limit: varint(m, 3),
                offset: varint(m, 4),
                filename: s(varint(m, 5)),
                build_id: s(varint(m, 6)),
                flags: [7, 8, 9, 10].map(|f| varint(m, f) != 0),
            })
            .collect();
        let locations = submessages(buf, 4)
            .into_iter()
            .map(|m| DLocation {
                id: varint(m, 1),
                mapping_id: varint(m, 2),
                address: varint(m, 3),
                lines: submessages(m, 4)
                    .into_iter()
                    .map(|l| (varint(l, 1), varint(l, 2) as i64))
                    .collect(),
            })
            .collect();
        let functions = submessages(buf, 5)
            .into_iter()
            .map(|m| DFunction {
                id: varint(m, 1),
                name: s(varint(m, 2)),
                system_name: s(varint(m, 3)),
                filename: s(varint(m, 4)),
            })
            .collect();
        let period_type = submessages(buf, 11);
        assert_eq!(period_type.len(), 1);
        Decoded {
            sample_types: submessages(buf, 1).into_iter().map(value_type).collect(),
            samples,
            mappings,
            locations,
            functions,
            time_nanos: varint(buf, 9) as i64,
            duration_nanos: varint(buf, 10) as i64,
            period_type: value_type(period_type[0]),
            period: varint(buf, 12) as i64,
            comments: varints(buf, 13).into_iter().map(s).collect(),
            default_sample_type: s(varint(buf, 14)),
            strings,
        }
    }

    // ---- Fixtures. ----

    fn line(function: &str, file: &str, line: i64) -> PprofLine {
        PprofLine { function: function.into(), system_name: "".into(), file: file.into(), line }
    }

    fn loc(address: u64, lines: Vec<PprofLine>) -> PprofLocation {
        PprofLocation { address, lines, mapping: Some(0) }
    }

    fn mapping() -> PprofMapping {
        PprofMapping {
            memory_start: 0x1000,
            memory_limit: 0x9000,
            file_offset: 0,
            filename: "/usr/bin/ying-test".to_string(),
            build_id: "abc123".to_string(),
            has_functions: true,
        }
    }

    /// `alpha` (a.c:10) with 3000 B in use; `beta` inlined into `gamma` with 1000 B in use and
    /// 5000 B allocated, labelled `span=handler`. Both are called from `main`.
    fn two_samples() -> PprofProfile {
        let main = loc(0x5000, vec![line("main", "main.c", 3)]);
        PprofProfile {
            samples: vec![
                PprofSample {
                    locations: vec![loc(0x2000, vec![line("alpha", "a.c", 10)]), main.clone()],
                    values: [3, 3000, 3, 3000],
                    labels: vec![],
                    num_labels: vec![],
                },
                PprofSample {
                    locations: vec![
                        loc(0x3000, vec![line("beta", "b.c", 5), line("gamma", "g.c", 20)]),
                        main,
                    ],
                    values: [5, 5000, 1, 1000],
                    labels: vec![("span".to_string(), "handler".to_string())],
                    num_labels: vec![("bytes".to_string(), 1000, "bytes".to_string())],
                },
            ],
            mappings: vec![mapping()],
            period: 512 * 1024,
            time_nanos: 1_700_000_000_000_000_000,
            duration_nanos: 60_000_000_000,
            comments: vec!["ying test profile".to_string()],
        }
    }

    // ---- Wire-level tests. ----

    #[test]
    fn varint_encoding_matches_protobuf_spec() {
        let enc = |v: u64| {
            let mut w = Writer::default();
            w.varint(v);
            w.buf
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(1), [0x01]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(128), [0x80, 0x01]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX), [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        // int64 -1 is ten bytes of two's complement, as protobuf's int64 (not sint64) requires.
        let mut w = Writer::default();
        w.int(1, -1);
        assert_eq!(w.buf.len(), 11);
        assert_eq!(decode_int_field(&w.buf), -1);
    }

    fn decode_int_field(buf: &[u8]) -> i64 {
        varint(buf, 1) as i64
    }

    /// A message is built in place and its body moved up by its length's size: bodies whose
    /// length takes one, two and three bytes, nested, and packed fields of every varint size,
    /// decode to what went in.
    #[test]
    fn messages_built_in_place_decode_whatever_their_length() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut w = Writer::default();
            w.varint(v);
            assert_eq!(varint_len(v), w.buf.len(), "{v}");
        }
        for body in [3usize, 130, 20_000] {
            let values: Vec<u64> = (0..body as u64).map(|i| i * 977).collect();
            let mut w = Writer::default();
            w.message(2, |w| {
                w.uint(1, 42);
                w.packed(3, values.iter().copied());
                w.message(4, |w| w.uint(1, body as u64));
            });
            let outer = submessages(&w.buf, 2);
            assert_eq!(outer.len(), 1, "one message of a {body}-value body");
            assert_eq!(varint(outer[0], 1), 42);
            assert_eq!(varints(outer[0], 3), values);
            assert_eq!(varint(submessages(outer[0], 4)[0], 1), body as u64);
        }
    }

    #[test]
    fn header_fields() {
        let d = decode(&two_samples().encode());
        assert_eq!(d.strings[0], "");
        let types: Vec<(&str, &str)> =
            d.sample_types.iter().map(|(t, u)| (t.as_str(), u.as_str())).collect();
        assert_eq!(types, SAMPLE_TYPES);
        assert_eq!(d.default_sample_type, "inuse_space");
        assert_eq!(d.period_type, ("space".to_string(), "bytes".to_string()));
        assert_eq!(d.period, 512 * 1024);
        assert_eq!(d.time_nanos, 1_700_000_000_000_000_000);
        assert_eq!(d.duration_nanos, 60_000_000_000);
        assert_eq!(d.comments, ["ying test profile"]);
    }

    #[test]
    fn strings_are_deduplicated() {
        let d = decode(&two_samples().encode());
        let mut sorted = d.strings.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), d.strings.len(), "duplicate strings in {:?}", d.strings);
        // "bytes" is a sample-type unit, the period unit, a label key and a label unit.
        assert_eq!(d.strings.iter().filter(|s| *s == "bytes").count(), 1);
    }

    #[test]
    fn locations_are_sequential_and_shared() {
        let d = decode(&two_samples().encode());
        let ids: Vec<u64> = d.locations.iter().map(|l| l.id).collect();
        assert_eq!(ids, [1, 2, 3], "alpha, main, beta/gamma: main is shared");
        assert_eq!(d.samples[0].location_ids, [1, 2]);
        assert_eq!(d.samples[1].location_ids, [3, 2]);
        assert_eq!(d.names(2), ["main"]);
        let addresses: Vec<u64> = d.locations.iter().map(|l| l.address).collect();
        assert_eq!(addresses, [0x2000, 0x5000, 0x3000]);
        assert!(d.locations.iter().all(|l| l.mapping_id == 1));
        let function_ids: Vec<u64> = d.functions.iter().map(|f| f.id).collect();
        assert_eq!(function_ids, [1, 2, 3, 4]);
    }

    #[test]
    fn inlined_frames_stay_innermost_first() {
        let d = decode(&two_samples().encode());
        let leaf = d.location(d.samples[1].location_ids[0]);
        assert_eq!(d.names(leaf.id), ["beta", "gamma"]);
        let lines: Vec<i64> = leaf.lines.iter().map(|&(_, l)| l).collect();
        assert_eq!(lines, [5, 20]);
        let gamma = d.function(leaf.lines[1].0);
        assert_eq!((gamma.filename.as_str(), gamma.system_name.as_str()), ("g.c", "gamma"));
    }

    #[test]
    fn labels_round_trip() {
        let d = decode(&two_samples().encode());
        assert!(d.samples[0].labels.is_empty());
        assert_eq!(
            d.samples[1].labels,
            [
                DLabel { key: "span".into(), str: "handler".into(), num: 0, unit: String::new() },
                DLabel { key: "bytes".into(), str: String::new(), num: 1000, unit: "bytes".into() },
            ]
        );
    }

    #[test]
    fn values_round_trip_including_large_zero_and_negative() {
        let mut p = two_samples();
        p.samples[0].values = [0, 1 << 40, i64::MAX, 0];
        p.samples[1].values = [-1, 0, 0, 0];
        let d = decode(&p.encode());
        assert_eq!(d.samples[0].values, [0, 1 << 40, i64::MAX, 0]);
        assert_eq!(d.samples[1].values, [-1, 0, 0, 0]);
        assert_eq!(d.samples[1].values.len(), 4, "all-zero values still encode four values");
    }

    #[test]
    fn mappings_round_trip() {
        let mut p = two_samples();
        p.mappings.push(PprofMapping {
            memory_start: 0x7f00_0000_0000,
            memory_limit: 0x7f00_0010_0000,
            file_offset: 0x2000,
            filename: "[vdso]".into(),
            build_id: String::new(),
            has_functions: false,
        });
        p.samples[0].locations[0].mapping = Some(1);
        let d = decode(&p.encode());
        assert_eq!(d.mappings.len(), 2);
        let m = &d.mappings[0];
        assert_eq!((m.id, m.start, m.limit, m.offset), (1, 0x1000, 0x9000, 0));
        assert_eq!((m.filename.as_str(), m.build_id.as_str()), ("/usr/bin/ying-test", "abc123"));
        assert_eq!(m.flags, [true; 4]);
        let m = &d.mappings[1];
        assert_eq!(
            (m.id, m.start, m.limit, m.offset),
            (2, 0x7f00_0000_0000, 0x7f00_0010_0000, 0x2000)
        );
        assert_eq!((m.filename.as_str(), m.build_id.as_str()), ("[vdso]", ""));
        assert_eq!(m.flags, [false; 4]);
        assert_eq!(d.location(d.samples[0].location_ids[0]).mapping_id, 2);
    }

    #[test]
    fn same_address_in_another_mapping_is_another_location() {
        let mut p = two_samples();
        p.mappings.push(mapping());
        p.samples[1].locations[1].mapping = Some(1); // main's address, but in mapping 2
        let d = decode(&p.encode());
        assert_eq!(d.samples[0].location_ids, [1, 2]);
        assert_eq!(d.samples[1].location_ids, [3, 4]);
        assert_eq!(d.names(4), ["main"]);
        assert_eq!(d.functions.len(), 4, "the function is still shared");
    }

    #[test]
    fn functions_are_shared_by_name_system_name_and_file() {
        let mut p = two_samples();
        let mut mangled = line("alpha", "a.c", 10);
        mangled.system_name = "_Z5alphav".into();
        p.samples[0].locations.extend([
            loc(0x6000, vec![line("alpha", "a.c", 11)]),
            loc(0x7000, vec![mangled]),
            loc(0x8000, vec![line("alpha", "other.c", 10)]),
        ]);
        let d = decode(&p.encode());
        assert_eq!(d.samples[0].location_ids, [1, 2, 3, 4, 5]);
        let function_of = |location_id| d.location(location_id).lines[0].0;
        assert_eq!(function_of(3), function_of(1), "same function, another line");
        assert_ne!(function_of(4), function_of(1));
        assert_ne!(function_of(5), function_of(1));
        assert_eq!(d.function(function_of(4)).system_name, "_Z5alphav");
        let ids: Vec<u64> = d.functions.iter().map(|f| f.id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn one_address_with_two_symbolisations_keeps_both() {
        let mut p = two_samples();
        p.samples[1].locations[1].lines = vec![line("not_main", "x.c", 1)]; // main's address
        let d = decode(&p.encode());
        assert_eq!(d.samples[1].location_ids, [3, 4]);
        assert_eq!(d.location(4).address, d.location(2).address);
        assert_eq!(d.names(4), ["not_main"]);
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let mut p = two_samples();
        p.samples[0].locations[0].mapping = Some(7); // out of range: becomes "no mapping"
        p.samples[0].locations.push(PprofLocation { address: 0, lines: vec![], mapping: None });
        p.samples.push(PprofSample {
            locations: vec![],
            values: [i64::MIN, -1, 0, i64::MAX],
            labels: vec![(String::new(), String::new())],
            num_labels: vec![("n".into(), i64::MIN, String::new())],
        });
        p.period = -1;
        let d = decode(&p.encode());
        assert_eq!(d.location(d.samples[0].location_ids[0]).mapping_id, 0);
        assert!(d.location(d.samples[0].location_ids[2]).lines.is_empty());
        assert_eq!(d.samples[2].values, [i64::MIN, -1, 0, i64::MAX]);
        assert_eq!(d.samples[2].labels[1].num, i64::MIN);
        assert_eq!(d.period, -1);

        let empty = decode(&PprofProfile::default().encode());
        assert_eq!(empty.sample_types.len(), 4);
        assert!(empty.samples.is_empty() && empty.locations.is_empty());
        assert_eq!(empty.default_sample_type, "inuse_space");
    }

    #[test]
    fn output_is_deterministic() {
        let p = two_samples();
        let bytes = p.encode();
        assert_eq!(bytes, p.clone().encode());
        assert_eq!(bytes, two_samples().encode());
        assert_eq!(p.encode_gzip().unwrap(), p.encode_gzip().unwrap());
    }

    #[test]
    fn gzip_round_trip() {
        let p = two_samples();
        let gz = p.encode_gzip().unwrap();
        assert_eq!(&gz[..2], [0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut raw).unwrap();
        assert_eq!(raw, p.encode());
    }

    // ---- The real client: `go tool pprof`. ----

    /// A temporary file removed on drop.
    struct TempFile(PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn go_pprof(file: &Path, args: &[&str]) -> String {
        let out = Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(file)
            .output()
            .expect("running go tool pprof");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "go tool pprof {args:?} failed:\n{stderr}\n{stdout}");
        println!("$ go tool pprof {}\n{stdout}", args.join(" "));
        stdout
    }

    /// The `(flat, cum, name)` rows of `-top` output, e.g. `("0", "1000B", "gamma")`.
    fn top_rows(top: &str) -> Vec<(String, String, String)> {
        top.lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                [flat, flat_pct, _, cum, _, name, ..]
                    if flat_pct.ends_with('%') && *flat != "flat" =>
                {
                    Some((flat.to_string(), cum.to_string(), name.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    fn row(flat: &str, cum: &str, name: &str) -> (String, String, String) {
        (flat.to_string(), cum.to_string(), name.to_string())
    }

    #[test]
    fn go_tool_pprof_reads_the_profile() {
        if Command::new("go").arg("version").output().is_err() {
            println!("skipped: go not found");
            return;
        }
        let path =
            std::env::temp_dir().join(format!("ying-pprof-test-{}.pb.gz", std::process::id()));
        let file = TempFile(path);
        std::fs::write(&file.0, two_samples().encode_gzip().unwrap()).unwrap();
        // Byte units are pinned so that the totals are exact numbers.
        let top = |index: &str| {
            go_pprof(&file.0, &["-top", &format!("-sample_index={index}"), "-unit=B"])
        };

        let inuse = top("inuse_space");
        assert!(inuse.contains("of 4000B total"), "{inuse}");
        let rows = top_rows(&inuse);
        // Flat cost goes to the innermost inlined frame; gamma and main only have cum.
        assert!(rows.contains(&row("3000B", "3000B", "alpha")), "{rows:?}");
        assert!(rows.contains(&row("1000B", "1000B", "beta")), "{rows:?}");
        assert!(rows.contains(&row("0", "1000B", "gamma")), "{rows:?}");
        assert!(rows.contains(&row("0", "4000B", "main")), "{rows:?}");
        assert!(inuse.contains("beta (inline)"), "{inuse}");

        let alloc = top("alloc_space");
        assert!(alloc.contains("of 8000B total"), "{alloc}");
        let rows = top_rows(&alloc);
        assert!(rows.contains(&row("5000B", "5000B", "beta")), "{rows:?}");
        assert!(rows.contains(&row("3000B", "3000B", "alpha")), "{rows:?}");
        assert!(rows.contains(&row("0", "8000B", "main")), "{rows:?}");

        // Without -sample_index, default_sample_type (inuse_space) is used.
        let default = go_pprof(&file.0, &["-top", "-unit=B"]);
        assert!(default.contains("of 4000B total"), "{default}");

        // -raw aligns columns; compare with whitespace collapsed.
        let raw = go_pprof(&file.0, &["-raw"]).split_whitespace().collect::<Vec<_>>().join(" ");
        for needle in [
            "PeriodType: space bytes",
            "Period: 524288",
            "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes[dflt]",
            "3 3000 3 3000: 1 2",
            "5 5000 1 1000: 3 2 span:[handler] bytes:[1000 bytes]",
            "1: 0x2000 M=1 alpha a.c:10",
            "2: 0x5000 M=1 main main.c:3",
            "3: 0x3000 M=1 beta b.c:5",
            "/usr/bin/ying-test abc123 [FN][FL][LN][IN]",
        ] {
            assert!(raw.contains(needle), "-raw output lacks {needle:?}:\n{raw}");
        }
        let (beta, gamma) = (raw.find("beta b.c:5"), raw.find("gamma g.c:20"));
        assert!(beta.is_some() && gamma > beta, "gamma must follow beta as its caller: {raw}");

        let focused = go_pprof(&file.0, &["-top", "-unit=B", "-tagfocus=span=handler"]);
        assert!(focused.contains("accounting for 1000B"), "{focused}");
        assert!(top_rows(&focused).contains(&row("1000B", "1000B", "beta")), "{focused}");
        assert!(!top_rows(&focused).iter().any(|(_, _, n)| n == "alpha"), "{focused}");

        let tags = go_pprof(&file.0, &["-tags"]);
        assert!(tags.contains("span: Total 1000") && tags.contains("handler"), "{tags}");
    }
}
