//! Heap profiles as OpenTelemetry profiles (OTLP `profiles/v1development`), for pushes to an
//! OpenTelemetry Collector, Grafana Pyroscope or any OTLP profiles receiver
//! (`serve/otlp.rs`). The message types are the OpenTelemetry project's own (the
//! `opentelemetry-proto` crate, generated from its `.proto` files).
//!
//! Ying writes OTLP itself rather than leaving a collector to convert its pprof profiles: the
//! collector's pprof converter dropped or garbled sample labels until mid-2026, and a
//! conversion cannot know which frames are the allocator's.
//!
//! Layout, as the specification asks of a profiles message:
//! * **One profile per sample type**, Go's four heap types (`alloc_objects`, `alloc_space`,
//!   `inuse_objects`, `inuse_space`, period `space/bytes`, the sampling interval), so that a
//!   receiver that knows Go's heap profiles names them as it does Go's; the four share **one
//!   dictionary** (strings, mappings, locations, functions, stacks, attributes), each table
//!   starting with its zero value. A profile leaves out the stacks whose value is 0 in it.
//! * **One resource**: the process (`service.name`, `process.pid`, `process.executable.name`,
//!   `process.executable.path`, `host.name`, and the labels the user set), one scope (`ying`
//!   and its version).
//! * **Stacks as the text report names them**: a location is an address with its inlined
//!   frames as extra lines, innermost first, as in the pprof profiles; the allocator's entry
//!   points and what they call (`malloc`, `operator new`, `alloc::alloc::*`,
//!   [`crate::callstack::is_allocator_entry`]) are left out of each stack, which pprof
//!   profiles ask their reader to do with `drop_frames` and OTLP has no field for: a stack's
//!   first frame is the code that asked for the memory. A module's build id is its mapping's
//!   `process.executable.build_id.gnu` attribute.
//! * **Spans and tasks as sample attributes**: `span` (the innermost entered span) and
//!   `span_path` (the whole path, outermost first, `a > b`), with `profile_spans`; `task`, the
//!   Tokio task kind that allocated (`model/groups.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, KeyValueAndUnit, Line, Location, Mapping, Profile, ProfilesDictionary,
    ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::heap_profile::{location, mappings};
use super::pprof::{PprofLocation, SAMPLE_TYPES};
use crate::callstack::is_allocator_entry;
use crate::report::model::Report;

/// The period type of every profile: the interval counts allocated bytes, as in Go's.
const PERIOD_TYPE: (&str, &str) = ("space", "bytes");

/// The semantic-convention attribute a mapping's GNU build id goes in.
const BUILD_ID_KEY: &str = "process.executable.build_id.gnu";

/// What a request is about besides its stacks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    /// The resource's attributes, in order (`service.name` first); string values.
    pub(crate) resource: Vec<(String, String)>,
    /// When the profiles' time range starts.
    pub(crate) start: Option<SystemTime>,
    /// How long it is, nanoseconds.
    pub(crate) duration_nanos: u64,
}

/// A location's identity: its address, its mapping's index and its lines (function index, line).
type LocationKey = (u64, i32, Vec<(i32, i64)>);

/// The tables the four profiles share, each interning its values (index 0: the zero value).
#[derive(Default)]
struct Dictionary {
    d: ProfilesDictionary,
    strings: HashMap<Arc<str>, i32>,
    functions: HashMap<(i32, i32, i32), i32>,
    locations: HashMap<LocationKey, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, String), i32>,
}

impl Dictionary {
    fn new() -> Self {
        let mut me = Self::default();
        me.d.mapping_table.push(Mapping::default());
        me.d.location_table.push(Location::default());
        me.d.function_table.push(Function::default());
        me.d.link_table.push(Default::default());
        me.d.attribute_table.push(KeyValueAndUnit::default());
        me.d.stack_table.push(Stack::default());
        me.string("");
        me
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.into(), i);
        i
    }

    fn attribute(&mut self, key: &str, value: &str) -> i32 {
        let key = self.string(key);
        if let Some(&i) = self.attributes.get(&(key, value.to_string())) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(KeyValueAndUnit {
            key_strindex: key,
            value: Some(string_value(value)),
            unit_strindex: 0,
        });
        self.attributes.insert((key, value.to_string()), i);
        i
    }

    fn function(&mut self, name: &str, system_name: &str, file: &str) -> i32 {
        let key = (self.string(name), self.string(system_name), self.string(file));
        if let Some(&i) = self.functions.get(&key) {
            return i;
        }
        let i = self.d.function_table.len() as i32;
        self.d.function_table.push(Function {
            name_strindex: key.0,
            system_name_strindex: key.1,
            filename_strindex: key.2,
            start_line: 0,
        });
        self.functions.insert(key, i);
        i
    }

    /// The index of `loc` with only its lines from `first` on (innermost first).
    fn location(&mut self, loc: &PprofLocation, first: usize) -> i32 {
        let lines: Vec<(i32, i64)> = loc.lines[first..]
            .iter()
            .map(|l| {
                let system = if l.system_name.is_empty() { &l.function } else { &l.system_name };
                (self.function(&l.function, system, &l.file), l.line)
            })
            .collect();
        // Mapping `i` of the profile's list is entry `i + 1` of the table.
        let mapping = loc.mapping.map_or(0, |m| m as i32 + 1);
        let key = (loc.address, mapping, lines);
        if let Some(&i) = self.locations.get(&key) {
            return i;
        }
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(Location {
            mapping_index: mapping,
            address: loc.address,
            lines: key
                .2
                .iter()
                .map(|&(function_index, line)| Line { function_index, line, column: 0 })
                .collect(),
            attribute_indices: Vec::new(),
        });
        self.locations.insert(key, i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(Stack { location_indices: locations.clone() });
        self.stacks.insert(locations, i);
        i
    }
}

fn string_value(s: &str) -> AnyValue {
    AnyValue { value: Some(Value::StringValue(s.to_string())) }
}

/// Where a stack starts once the allocator's entry points and what they call are left out:
/// `(location, line)` of its first kept line, leaf-first order; `(0, 0)` when it has none, or
/// nothing but them (the stack is kept whole then).
fn past_allocator(stack: &[&PprofLocation]) -> (usize, usize) {
    let mut last = None;
    for (i, loc) in stack.iter().enumerate() {
        for (j, line) in loc.lines.iter().enumerate() {
            if is_allocator_entry(&line.function) {
                last = Some((i, j));
            }
        }
    }
    let Some((i, j)) = last else { return (0, 0) };
    let next = if j + 1 < stack[i].lines.len() { (i, j + 1) } else { (i + 1, 0) };
    if next.0 >= stack.len() { (0, 0) } else { next }
}

/// The OTLP request of `r`'s stacks, each with the values `values` gives (Go's four, in
/// [`SAMPLE_TYPES`] order; None leaves the stack out), described by `meta`.
pub(crate) fn request(
    r: &Report,
    meta: &Meta,
    values: &mut dyn FnMut(u32) -> Option<[i64; 4]>,
) -> ExportProfilesServiceRequest {
    let (table, modules) = (&r.table, &r.facts.modules[..]);
    let mut dict = Dictionary::new();
    for m in mappings(modules) {
        let filename = dict.string(&m.filename);
        let attribute_indices = if m.build_id.is_empty() {
            Vec::new()
        } else {
            vec![dict.attribute(BUILD_ID_KEY, &m.build_id)]
        };
        dict.d.mapping_table.push(Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex: filename,
            attribute_indices,
        });
    }
    // Each of the table's locations as pprof writes it, built on first use (None: no frame
    // left but the profiler's own plumbing).
    let mut built: Vec<Option<Option<PprofLocation>>> = vec![None; table.locations().len()];
    let mut profiles: Vec<Profile> = SAMPLE_TYPES
        .iter()
        .map(|(ty, unit)| Profile {
            sample_type: Some(ValueType {
                type_strindex: dict.string(ty),
                unit_strindex: dict.string(unit),
            }),
            ..Default::default()
        })
        .collect();
    for row in 0..table.len() as u32 {
        let Some(v) = values(row) else { continue };
        if v == [0; 4] {
            continue;
        }
        for l in table.location_ids_of(row) {
            let slot = &mut built[l as usize];
            if slot.is_none() {
                *slot = Some(location(&table.locations()[l as usize], modules));
            }
        }
        let stack: Vec<&PprofLocation> = table
            .location_ids_of(row)
            .filter_map(|l| built[l as usize].as_ref().and_then(Option::as_ref))
            .collect();
        let (from, line) = past_allocator(&stack);
        let locations: Vec<i32> = stack[from..]
            .iter()
            .enumerate()
            .map(|(i, loc)| dict.location(loc, if i == 0 { line } else { 0 }))
            .collect();
        let stack_index = dict.stack(locations);
        let spans = table.spans_of(row);
        let mut attribute_indices = Vec::new();
        if let Some(inner) = spans.last() {
            attribute_indices.push(dict.attribute("span", inner.name));
            let path: Vec<String> = spans.iter().map(|sp| sp.to_string()).collect();
            attribute_indices.push(dict.attribute("span_path", &path.join(" > ")));
        }
        if let Some(task) = r.task_of(row) {
            attribute_indices.push(dict.attribute("task", task));
        }
        for (p, &value) in profiles.iter_mut().zip(&v) {
            if value != 0 {
                p.samples.push(Sample {
                    stack_index,
                    attribute_indices: attribute_indices.clone(),
                    link_index: 0,
                    values: vec![value],
                    timestamps_unix_nano: Vec::new(),
                });
            }
        }
    }
    let start = meta.start.unwrap_or(r.facts.taken_at);
    let time_unix_nano = start.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let period_type = ValueType {
        type_strindex: dict.string(PERIOD_TYPE.0),
        unit_strindex: dict.string(PERIOD_TYPE.1),
    };
    for p in &mut profiles {
        p.time_unix_nano = time_unix_nano;
        p.duration_nano = meta.duration_nanos;
        p.period_type = Some(period_type);
        p.period = i64::try_from(r.facts.sample_interval).unwrap_or(i64::MAX);
    }
    let resource = Resource {
        attributes: meta
            .resource
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: Some(string_value(v)),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "ying".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::pprof::PprofLine;

    fn loc(names: &[&str]) -> PprofLocation {
        PprofLocation {
            address: 0x1000,
            lines: names
                .iter()
                .map(|n| PprofLine {
                    function: (*n).into(),
                    system_name: "".into(),
                    file: "".into(),
                    line: 0,
                })
                .collect(),
            mapping: None,
        }
    }

    #[test]
    fn stacks_start_past_the_allocator() {
        let (malloc, new, user, main) =
            (loc(&["malloc"]), loc(&["operator new(unsigned long)"]), loc(&["f"]), loc(&["main"]));
        assert_eq!(past_allocator(&[&user, &main]), (0, 0), "nothing to leave out");
        assert_eq!(past_allocator(&[&malloc, &new, &user, &main]), (2, 0));
        // An inlined allocator entry: the location keeps its caller's line.
        let inlined = loc(&["alloc::alloc::alloc", "alloc::raw_vec::RawVec<T>::grow", "g"]);
        assert_eq!(past_allocator(&[&inlined, &main]), (0, 2));
        // Nothing but the allocator: kept whole.
        assert_eq!(past_allocator(&[&malloc, &new]), (0, 0));
    }

    #[test]
    fn tables_start_with_their_zero_values_and_intern() {
        let mut d = Dictionary::new();
        assert_eq!(d.d.string_table, [""]);
        let a = d.attribute("span", "x");
        assert_eq!((a, d.attribute("span", "x"), d.attribute("span", "y")), (1, 1, 2));
        let l = loc(&["f", "g"]);
        let (one, two) = (d.location(&l, 0), d.location(&l, 1));
        assert_eq!((one, d.location(&l, 0)), (1, 1));
        assert_ne!(one, two, "a location with fewer lines is another location");
        assert_eq!(d.d.location_table[two as usize].lines.len(), 1);
        assert_eq!(
            (d.stack(vec![one, two]), d.stack(vec![one, two]), d.stack(vec![two])),
            (1, 1, 2)
        );
        for t in [
            d.d.mapping_table.len(),
            d.d.function_table.len(),
            d.d.link_table.len(),
            d.d.stack_table.len(),
        ] {
            assert!(t >= 1);
        }
        assert_eq!(d.d.mapping_table[0], Mapping::default());
        assert_eq!(d.d.stack_table[0], Stack::default());
        assert_eq!(d.d.attribute_table[0], KeyValueAndUnit::default());
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use crate::report::ReportOptions;
    use crate::report::model::fixtures::{frame, stack};
    use crate::spans::SpanInfo;
    use prost::Message;

    /// A hand-built report: one stack of a Tokio task under two spans whose leaf is `malloc`,
    /// one without either.
    /// The request, encoded and decoded, resolves back to the report's figures.
    #[test]
    fn a_report_round_trips_through_the_wire_form() {
        let mut a = stack(0x10, 7, 1);
        a.frames.insert(0, frame(0x5, "malloc", 0, false));
        a.frames.push(frame(0x20, "tokio::runtime::task::core::Core::poll", 0, false));
        a.spans = vec![
            SpanInfo { name: "request", target: "svc" },
            SpanInfo { name: "get_item", target: "svc::cache" },
        ];
        let b = stack(0x11, 8, 4);
        let r = Report::from_stacks(&[a, b], &ReportOptions::default());
        let meta = Meta {
            resource: vec![("service.name".into(), "svc".into())],
            start: Some(UNIX_EPOCH + std::time::Duration::from_secs(7)),
            duration_nanos: 5,
        };
        let mut values = |row: u32| Some(r.table.row(row).fig.pprof_values());
        let bytes = request(&r, &meta, &mut values).encode_to_vec();
        let req = ExportProfilesServiceRequest::decode(&bytes[..]).unwrap();
        let d = req.dictionary.as_ref().unwrap();
        let s = |i: i32| d.string_table[i as usize].as_str();
        let rp = &req.resource_profiles[0];
        assert_eq!(rp.resource.as_ref().unwrap().attributes[0].key, "service.name");
        let profiles = &rp.scope_profiles[0].profiles;
        let types: Vec<&str> =
            profiles.iter().map(|p| s(p.sample_type.unwrap().type_strindex)).collect();
        assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
        assert!(profiles.iter().all(|p| p.time_unix_nano == 7_000_000_000 && p.duration_nano == 5));
        let inuse = &profiles[3];
        assert_eq!(inuse.samples.len(), 2);
        let mut total = 0;
        for smp in &inuse.samples {
            total += smp.values[0];
            let stack = &d.stack_table[smp.stack_index as usize];
            let first = &d.location_table[stack.location_indices[0] as usize];
            let name = s(d.function_table[first.lines[0].function_index as usize].name_strindex);
            assert_eq!(name, "app::alloc_site", "the stack opens past malloc");
            let attrs: Vec<(&str, &str)> = smp
                .attribute_indices
                .iter()
                .map(|&i| {
                    let a = &d.attribute_table[i as usize];
                    let Some(Value::StringValue(v)) = &a.value.as_ref().unwrap().value else {
                        panic!("a string attribute")
                    };
                    (s(a.key_strindex), v.as_str())
                })
                .collect();
            if !attrs.is_empty() {
                assert_eq!(
                    attrs,
                    [
                        ("span", "get_item"),
                        ("span_path", "svc::request > svc::cache::get_item"),
                        ("task", "app::handler"),
                    ]
                );
            }
        }
        let expected: i64 =
            (0..r.table.len() as u32).map(|row| r.table.row(row).fig.pprof_values()[3]).sum();
        assert_eq!(total, expected);
        assert_eq!(inuse.samples.iter().filter(|x| !x.attribute_indices.is_empty()).count(), 1);
    }
}
