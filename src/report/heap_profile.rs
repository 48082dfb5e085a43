//! A [`Snapshot`] as a pprof heap profile: one sample per stack with Go's four values
//! (`alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`, already unbiased), one
//! location per address with its inlined frames as extra lines, and the loaded modules as
//! mappings (so unsymbolized addresses can still be resolved offline).

use std::time::UNIX_EPOCH;

use super::pprof::{PprofLine, PprofLocation, PprofMapping, PprofProfile, PprofSample};
use crate::snapshot::Snapshot;
use crate::symbolize::{Module, module_of};

/// Builds the profile; `modules` are the process's loaded modules (see `symbolize::modules`).
pub fn build(snap: &Snapshot, modules: &[Module], comment: &str) -> PprofProfile {
    let mappings: Vec<PprofMapping> = modules
        .iter()
        .map(|m| PprofMapping {
            memory_start: m.start as u64,
            memory_limit: m.end as u64,
            file_offset: m.start.wrapping_sub(m.bias) as u64,
            filename: m.name.to_string(),
            build_id: m.build_id.clone(),
            has_functions: true,
        })
        .collect();
    let mapping_index = |ip: usize| {
        let m = module_of(modules, ip)?;
        modules.iter().position(|x| x.start == m.start)
    };
    let empty: std::sync::Arc<str> = "".into();
    let mut samples = Vec::with_capacity(snap.stacks.len());
    for s in &snap.stacks {
        let mut locations: Vec<PprofLocation> = Vec::new();
        for f in &s.frames {
            if f.is_noise() {
                continue;
            }
            let line = PprofLine {
                function: f.function.clone(),
                system_name: f.function.clone(),
                file: f.file.clone().unwrap_or_else(|| empty.clone()),
                line: f.line.map(i64::from).unwrap_or(0),
            };
            match locations.last_mut() {
                Some(loc) if loc.address == f.ip as u64 => loc.lines.push(line),
                _ => locations.push(PprofLocation {
                    address: f.ip as u64,
                    lines: vec![line],
                    mapping: mapping_index(f.ip),
                }),
            }
        }
        let v = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
        samples.push(PprofSample {
            locations,
            values: [
                v(s.num_allocations),
                v(s.allocated_bytes),
                v(s.retained_count),
                v(s.retained_bytes),
            ],
            // One `span` label per entered span (so -tagfocus=span=<name> matches any level)
            // and the whole path.
            labels: s
                .spans
                .iter()
                .map(|sp| ("span".to_string(), sp.name.to_string()))
                .chain((!s.spans.is_empty()).then(|| {
                    let path: Vec<String> = s.spans.iter().map(|sp| sp.to_string()).collect();
                    ("span_path".to_string(), path.join(" > "))
                }))
                .collect(),
            num_labels: Vec::new(),
        });
    }
    let time_nanos = snap
        .taken_at
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    PprofProfile {
        samples,
        mappings,
        period: i64::try_from(snap.sample_interval).unwrap_or(i64::MAX),
        time_nanos,
        duration_nanos: 0,
        comments: vec![comment.to_string()],
    }
}
