//! A snapshot as a pprof heap profile: one sample per stack with Go's four values
//! (`alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, already unbiased), one
//! location per address with its inlined frames as extra lines, and the loaded modules as
//! mappings (so unsymbolized addresses can still be resolved offline).
//!
//! Report sets stream it ([`write`]): each distinct address becomes a pprof location once, and
//! each stack is written as a sample of location ids as soon as it is built, so the profile of
//! 100,000 stacks is never held in memory.
//!
//! Each sample's labels: `span` (each span entered) and `span_path` with `profile_spans`, and
//! `task`, the Tokio task kind that allocated (`model/groups.rs`), so that `go tool pprof
//! -tagfocus=task=svc::handler` shows one kind of task's memory.

use std::io::{self, Write};
use std::time::UNIX_EPOCH;

use super::pprof::{
    INUSE_STDERR_SAMPLE_TYPES, Label, PprofLine, PprofLocation, PprofMapping, PprofProfile,
    ProfileWriter, RESIDENT_SAMPLE_TYPES, STDERR_SAMPLE_TYPES, stderr_values,
};
use crate::report::model::Report;
use crate::report::model::groups::task_of;
use crate::report::model::table::{Location, StackTable};
use crate::report::snapshot::Snapshot;
use crate::symbols::symbolize::{Module, module_of};

pub(crate) fn mappings(modules: &[Module]) -> Vec<PprofMapping> {
    modules
        .iter()
        .map(|m| PprofMapping {
            memory_start: m.start as u64,
            memory_limit: m.end as u64,
            file_offset: m.start.wrapping_sub(m.bias) as u64,
            filename: m.name.to_string(),
            build_id: m.build_id.clone(),
            has_functions: true,
        })
        .collect()
}

/// The pprof location of `loc`: its frames but the allocator plumbing as lines; None when
/// nothing is left.
pub(crate) fn location(loc: &Location, modules: &[Module]) -> Option<PprofLocation> {
    let empty: std::sync::Arc<str> = "".into();
    let lines: Vec<PprofLine> = loc
        .frames
        .iter()
        .filter(|f| !f.is_noise())
        .map(|f| PprofLine {
            function: f.function.clone(),
            // A system name unlike the name keeps pprof from taking the name for demangled
            // C++ and cutting out everything between `<` and `>`: a Python `<module>` down to
            // nothing, a Rust trait method `<Vec<T> as Extend<T>>::extend` down to `::extend`
            // (pprof leaves a function whose system name differs from its name as it is).
            system_name: if f.is_python() {
                format!("python:{}", f.function).into()
            } else if f.function.starts_with('<') {
                format!("rust:{}", f.function).into()
            } else {
                f.function.clone()
            },
            file: f.file.clone().unwrap_or_else(|| empty.clone()),
            line: f.line.map(i64::from).unwrap_or(0),
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let mapping =
        module_of(modules, loc.ip).and_then(|m| modules.iter().position(|x| x.start == m.start));
    Some(PprofLocation { address: loc.ip as u64, lines, mapping })
}

/// The comment of a heap profile of `r`: the profiler, the process, `what` and the interval.
pub(crate) fn comment(r: &Report, what: &str) -> String {
    let ctx = &r.facts.process;
    format!(
        "ying {} heap profile of {} (pid {}){what}, sample interval {} bytes",
        env!("CARGO_PKG_VERSION"),
        ctx.exe,
        ctx.pid,
        r.facts.sample_interval
    )
}

/// Streams the heap profile of `r` to `out`, with its modules as mappings.
pub(crate) fn write(r: &Report, out: impl Write) -> io::Result<()> {
    write_with(r, &comment(r, ""), out, Values::Now)
}

/// Streams the heap profile of the kept peak of `r` to `out`: Go's `inuse_objects` and
/// `inuse_space` at the peak (no allocated figures are kept for that moment), for the stacks
/// that retained something then.
pub(crate) fn write_peak(r: &Report, out: impl Write) -> io::Result<()> {
    write_with(r, &comment(r, " at its kept peak"), out, Values::Peak)
}

/// The values of each row a profile carries: Go's four of now, the two at the kept peak, or
/// four that a caller computes per row (None leaves the row out).
pub(crate) enum Values<'a> {
    Now,
    Peak,
    Custom {
        /// `Profile.default_sample_type`.
        default_type: &'a str,
        /// `Profile.duration_nanos`: the time the values span (a delta profile's).
        duration_nanos: i64,
        row: &'a mut dyn FnMut(u32) -> Option<[i64; 4]>,
    },
}

/// Streams a profile of `r` with Go's four sample types whose values `values` gives (see
/// [`Values`]) and the comment `comment`: the delta and allocation views of the in-memory
/// profiles (`crate::profiles`).
pub(crate) fn write_values(
    r: &Report,
    comment: &str,
    out: impl Write,
    values: Values<'_>,
) -> io::Result<()> {
    write_with(r, comment, out, values)
}

/// The frames a report set's heap profiles ask pprof to drop (`Profile.drop_frames`, matched
/// against whole function names, each with the frames it called): allocator entry points, which
/// say nothing about who allocated, as pprof itself drops them from C++ heap profiles. The
/// shim's stacks start at the caller of `malloc`, which is often such a wrapper: `operator
/// new`, CPython's `PyObject_Malloc` family, SQLite's `sqlite3Malloc`. With them dropped, a
/// profile's flat cost goes to the code that asked for the memory.
pub const ALLOCATOR_FRAMES: &str = concat!(
    r"(__libc_)?(malloc|calloc|realloc|reallocarray|free|cfree|memalign|posix_memalign|",
    r"aligned_alloc|valloc|pvalloc)|operator new.*|operator delete.*|",
    r"_?Py(Object|Mem)_(Raw)?(Malloc|Calloc|Realloc)|pymalloc_alloc|",
    r"sqlite3(Mem)?(Malloc|Realloc)(Zero)?|sqlite3DbMalloc\w*|sqlite3DbRealloc\w*|",
    // Rust's (`callstack::is_allocator_entry`): a Rust heap profile's flat view then opens on
    // the function that asked, not on `alloc::alloc::alloc (inline)`.
    r"alloc::alloc::.*|<alloc::alloc::Global as .*|alloc::raw_vec::.*|<alloc::raw_vec::.*|",
    r"(__rust|__rdl|__rg)_(alloc|alloc_zeroed|realloc|dealloc)|alloc::vec::from_elem|.* as alloc::vec::spec_from_elem::SpecFromElem>::from_elem|",
    r"alloc::vec::Vec(<.*>)?::(with_capacity|with_capacity_in|reserve|reserve_exact|push|insert|extend_from_slice|resize)|",
    r"alloc::string::String(<.*>)?::(with_capacity|push|push_str|reserve|reserve_exact|insert|insert_str)|",
    r"alloc::boxed::Box(<.*>)?::(new|new_uninit|new_zeroed|try_new)|",
    r"hashbrown::raw::.*::(reserve_rehash|resize|fallible_with_capacity|new_uninitialized|do_alloc)"
);

fn write_with(
    r: &Report,
    comment: &str,
    out: impl Write,
    mut values: Values<'_>,
) -> io::Result<()> {
    let (snap, modules) = (&r.table, &r.facts.modules[..]);
    let peak = matches!(values, Values::Peak);
    // The residency of now, when it was measured (every row has it then, or none does).
    let resident = matches!(values, Values::Now) && snap.len() > 0 && snap.row(0).fig.res.is_some();
    let mut w = match values {
        Values::Peak => {
            ProfileWriter::with_sample_types(mappings(modules), out, &INUSE_STDERR_SAMPLE_TYPES)?
        }
        Values::Now if resident => {
            ProfileWriter::with_sample_types(mappings(modules), out, &RESIDENT_SAMPLE_TYPES)?
        }
        Values::Now => {
            ProfileWriter::with_sample_types(mappings(modules), out, &STDERR_SAMPLE_TYPES)?
        }
        Values::Custom { .. } => ProfileWriter::new(mappings(modules), out)?,
    };
    w.drop_frames(ALLOCATOR_FRAMES);
    let mut duration_nanos = 0;
    if let Values::Custom { default_type, duration_nanos: d, .. } = &values {
        w.default_sample_type(default_type);
        duration_nanos = *d;
    }
    // The pprof id of each location of the snapshot (0: not yet written; u64::MAX: no lines).
    let mut ids = vec![0u64; snap.locations().len()];
    let mut stack: Vec<u64> = Vec::new();
    for row in 0..snap.len() as u32 {
        let peak_values = snap.row(row).fig.peak_pprof_values();
        if peak && peak_values == [0, 0] {
            continue;
        }
        let custom = match &mut values {
            Values::Custom { row: values_of, .. } => match values_of(row) {
                Some(v) => Some(v),
                None => continue,
            },
            _ => None,
        };
        stack.clear();
        for l in snap.location_ids_of(row) {
            let id = &mut ids[l as usize];
            if *id == 0 {
                *id = match location(&snap.locations()[l as usize], modules) {
                    Some(loc) => w.location_id(&loc),
                    None => u64::MAX,
                };
            }
            if *id != u64::MAX {
                stack.push(*id);
            }
        }
        // One `span` label per entered span (so -tagfocus=span=<name> matches any level) and
        // the whole path.
        let spans = snap.spans_of(row);
        let path = (!spans.is_empty()).then(|| {
            let names: Vec<String> = spans.iter().map(|sp| sp.to_string()).collect();
            names.join(" > ")
        });
        // And the Tokio task kind that allocated (`model/groups.rs`), for -tagfocus=task=...
        let task = r.task_of(row);
        let labels = spans
            .iter()
            .map(|sp| Label { key: "span", str: sp.name, num: 0, unit: "" })
            .chain(path.as_deref().map(|p| Label { key: "span_path", str: p, num: 0, unit: "" }))
            .chain(task.map(|t| Label { key: "task", str: t, num: 0, unit: "" }));
        let fig = &snap.row(row).fig;
        if peak {
            let [a, b] = peak_values;
            let [sa, sb] = stderr_values(fig.peak_pprof_stderrs());
            w.sample_values(&stack, &[a, b, sa, sb], labels)?;
        } else if let Some(v) = custom {
            w.sample(&stack, v, labels)?;
        } else {
            // Go's four values, the resident ones when measured, then the four's standard
            // errors (see `STDERR_SAMPLE_TYPES`).
            let [a, b, c, d] = fig.pprof_values();
            let [sa, sb, sc, sd] = stderr_values(fig.pprof_stderrs());
            if resident {
                let [res, swp] = fig.resident_pprof_values();
                w.sample_values(&stack, &[a, b, c, d, res, swp, sa, sb, sc, sd], labels)?;
            } else {
                w.sample_values(&stack, &[a, b, c, d, sa, sb, sc, sd], labels)?;
            }
        }
    }
    let taken_at = match (peak, r.facts.peak) {
        (true, Some(p)) => p.at,
        _ => r.facts.taken_at,
    };
    let time_nanos = taken_at
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let period = i64::try_from(r.facts.sample_interval).unwrap_or(i64::MAX);
    w.finish(period, time_nanos, duration_nanos, &[comment.to_string()])?;
    Ok(())
}

/// The pprof heap profile of `snap`, as a report set's `.pb.gz` holds it (Go's four values per
/// stack), without mappings, decoded into the public profile type [`super::proto::Profile`]
/// (what `ying` and the tests read).
pub fn build(snap: &Snapshot, comment: &str) -> super::proto::Profile {
    super::proto::read_profile(&build_raw(snap, &[], comment).encode())
        .expect("a profile this crate writes decodes")
}

/// Builds the profile of `snap` in memory; `modules` are the process's loaded modules (see
/// `symbolize::modules`).
fn build_raw(snap: &Snapshot, modules: &[Module], comment: &str) -> PprofProfile {
    let compact = StackTable::from_stacks(&snap.stacks);
    let samples = (0..compact.len() as u32)
        .map(|r| super::pprof::PprofSample {
            locations: compact.locations_of(r).filter_map(|l| location(l, modules)).collect(),
            values: compact.row(r).fig.pprof_values(),
            labels: {
                let spans = compact.spans_of(r);
                spans
                    .iter()
                    .map(|sp| ("span".to_string(), sp.name.to_string()))
                    .chain((!spans.is_empty()).then(|| {
                        let path: Vec<String> = spans.iter().map(|sp| sp.to_string()).collect();
                        ("span_path".to_string(), path.join(" > "))
                    }))
                    .chain(task_of(|| compact.frames_of(r)).map(|t| ("task".into(), t.into())))
                    .collect()
            },
            num_labels: Vec::new(),
        })
        .collect();
    let time_nanos = snap
        .taken_at
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    PprofProfile {
        samples,
        mappings: mappings(modules),
        period: i64::try_from(snap.sample_interval).unwrap_or(i64::MAX),
        time_nanos,
        duration_nanos: 0,
        comments: vec![comment.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report set's profile is streamed from a report and keeps every stack (the
    /// folded stacks and flamegraph are cut at 2,000; pprof is not), one location per address
    /// with its inlined frames as lines, recursion through one address included.
    #[test]
    fn streamed_heap_profile_keeps_every_stack() {
        use crate::callstack::{Frame, StackStats, StdCallstack};
        use crate::engine::histogram::MillisHistogram;
        use crate::report::model::Report;
        let frame = |ip: usize, name: &str, inlined: bool| Frame {
            ip,
            function: name.into(),
            file: None,
            line: None,
            inlined,
            module: None,
        };
        let n = 3000;
        let stacks: Vec<StackStats> = (0..n)
            .map(|i| {
                let frames = vec![
                    frame(0x10_0000 + i, &format!("leaf_{i}"), false),
                    frame(0x2000, "inlined_helper", true),
                    frame(0x2000, "caller", false),
                    frame(0x2000, "inlined_helper", true),
                    frame(0x2000, "caller", false),
                ];
                StackStats {
                    allocated_bytes: 100 + i as u64,
                    num_allocations: 2,
                    freed_bytes: 0,
                    num_frees: 0,
                    retained_bytes: i as u64,
                    retained_count: 1,
                    peak_retained_bytes: 0,
                    peak_retained_count: 0,
                    samples: 1,
                    live_samples: 1,
                    stack: StdCallstack::from_ips(&[0x10_0000 + i, 0x2000, 0x2000]),
                    frames,
                    lifetimes: MillisHistogram::new(),
                    retained_age: MillisHistogram::new(),
                    spans: Vec::new(),
                    variance: Default::default(),
                    residency: None,
                }
            })
            .collect();
        let r = Report::from_stacks(&stacks, &Default::default());
        let mut raw = Vec::new();
        let now = Values::Now;
        write_values(&r, "streamed", &mut raw, now).unwrap();
        let d = crate::report::proto::read_profile(&raw).expect("a valid profile");
        assert_eq!(d.sample.len(), n);
        let comments: Vec<&str> = d.comment.iter().map(|&c| d.string(c)).collect();
        assert_eq!(comments, ["streamed"]);
        let total: i64 = d.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(total, (0..n as i64).map(|i| 100 + i).sum::<i64>());
        // n leaves and one location for the shared caller address.
        assert_eq!(d.location.len(), n + 1);
        let names = |id: u64| -> Vec<&str> {
            let loc = d.location.iter().find(|l| l.id == id).expect("location");
            let name = |f: u64| d.function.iter().find(|x| x.id == f).map(|x| d.string(x.name));
            loc.line.iter().filter_map(|l| name(l.function_id)).collect()
        };
        let s = &d.sample[7];
        // Go's four values, then their standard errors (none: every block was sampled).
        assert_eq!(s.value, [2, 107, 1, 7, 0, 0, 0, 0]);
        assert_eq!(names(s.location_id[0]), ["leaf_7"]);
        assert_eq!(s.location_id.len(), 3, "{:?}", s.location_id);
        assert_eq!(s.location_id[1], s.location_id[2], "one address, one location");
        assert_eq!(names(s.location_id[1]), ["inlined_helper", "caller"]);
    }
}
