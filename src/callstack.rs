//! Stacks and their statistics, as data.
//!
//! A captured stack ([`Callstack`]) is raw instruction pointers; a [`StackStats`] is what the
//! profiler knows about one stack at report time: its symbolized [`Frame`]s (inlined frames
//! expanded), unbiased estimates of allocated, freed and retained bytes and counts, the raw
//! sample counts behind them, the lifetime histogram of its freed allocations and the age of its
//! retained bytes. Reports are rendered from these values; nobody has to parse report text.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::engine::histogram::MillisHistogram;

pub use crate::engine::capture::MAX_FRAMES;

/// Raw instruction pointers of one stack, innermost first (at most `NF`). Stored as long as
/// the stack is, not `NF` long: a snapshot holds one per stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callstack<const NF: usize> {
    frames: Box<[u64]>,
}

/// The callstack type the profiler uses.
pub type StdCallstack = Callstack<MAX_FRAMES>;

impl<const NF: usize> Callstack<NF> {
    /// A stack from raw addresses (extra addresses are cut off).
    pub fn from_ips(ips: &[usize]) -> Self {
        Self { frames: ips.iter().take(NF).map(|&ip| ip as u64).collect() }
    }

    /// A stack from an unresolved `backtrace::Backtrace` (0.3.0 compatibility).
    pub fn from_backtrace_unresolved(bt: &backtrace::Backtrace) -> Self {
        let ips: Vec<usize> = bt.frames().iter().map(|f| f.ip() as usize).collect();
        Self::from_ips(&ips)
    }

    /// The addresses, innermost first.
    pub fn ips(&self) -> &[u64] {
        &self.frames
    }

    /// A stable 64-bit hash of the addresses.
    pub fn compute_hash(&self) -> u64 {
        let mut h = crate::engine::tables::AddrHasher::default();
        self.ips().hash(&mut h);
        h.finish()
    }
}

/// Which figure ranks stacks.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Hash)]
pub enum Measurement {
    /// Total bytes allocated since start (churn).
    AllocatedBytes,
    /// Bytes still allocated (what the program holds now).
    RetainedBytes,
    /// Bytes retained at the kept peak of the retained total (see [`crate::Snapshot::peak`]).
    RetainedBytesAtPeak,
}

impl Measurement {
    /// `"allocated"`, `"retained"` or `"peak retained"`.
    pub fn label(self) -> &'static str {
        match self {
            Measurement::AllocatedBytes => "allocated",
            Measurement::RetainedBytes => "retained",
            Measurement::RetainedBytesAtPeak => "peak retained",
        }
    }
}

/// One symbolized frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The instruction pointer this frame was resolved from (shared by inlined frames).
    pub ip: usize,
    /// Demangled function name (never shortened), or `module+0xoffset` when unknown. Shared
    /// with every other frame of the same address: a report of thousands of deep stacks holds
    /// each name once.
    pub function: Arc<str>,
    /// Source file, when debug info has it.
    pub file: Option<Arc<str>>,
    /// Source line, when debug info has it.
    pub line: Option<u32>,
    /// Whether the function was inlined into the next frame of the same `ip`.
    pub inlined: bool,
    /// Path of the module (executable or shared library) holding `ip`.
    pub module: Option<Arc<str>>,
}

impl Frame {
    /// Inlined `::poll` glue of async code (`<... as Future>::poll`, `GenFuture`, ...), hidden
    /// in reports: the async functions around it say where the allocation comes from.
    pub fn is_poll_glue(&self) -> bool {
        self.inlined
            && (self.function.ends_with("::poll")
                || self.function.contains("as core::future::future::Future>::poll")
                || self.function.contains("GenFuture"))
    }

    /// Allocator plumbing between the program and the profiler (`__rust_alloc` and friends),
    /// which says nothing about who allocated.
    pub fn is_noise(&self) -> bool {
        let f = self.function.strip_prefix("__rustc::").unwrap_or(&self.function);
        f.starts_with("__rust_alloc")
            || f.starts_with("__rust_realloc")
            || f.starts_with("__rust_dealloc")
            || f.starts_with("__rg_")
            || f.starts_with("__rdl_")
            || f.starts_with("<ying_profiler::")
            || f.starts_with("ying_profiler::")
    }

    /// A function of Rust's standard library (`core`, `alloc`, `std`), including trait impls
    /// on its types.
    pub fn is_std_internal(&self) -> bool {
        fn std_path(s: &str) -> bool {
            let s = s.trim_start_matches(['<', '&', '*', '[', '(']).trim_start_matches("mut ");
            ["core::", "alloc::", "std::"].iter().any(|p| s.starts_with(p))
        }
        fn primitive(s: &str) -> bool {
            let s = s.trim_start_matches(['&', '*', '[', '(']).trim_start_matches("mut ");
            let head: String = s.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            matches!(
                head.as_str(),
                "u8" | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "usize"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
                    | "isize"
                    | "f32"
                    | "f64"
                    | "bool"
                    | "char"
                    | "str"
                    | ""
            )
        }
        match self.function.strip_prefix('<').and_then(|r| r.split_once(" as ")) {
            // `<Type as Trait>::method`: std's own impl of a std trait on a std or primitive
            // type; a program's type implementing a std trait is the program's code.
            Some((ty, tr)) => (std_path(ty) || primitive(ty)) && std_path(tr),
            None => std_path(&self.function),
        }
    }

    /// `file:line` when known.
    pub fn location(&self) -> Option<String> {
        let file = self.file.as_ref()?;
        Some(match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> Frame {
        Frame { ip: 1, function: name.into(), file: None, line: None, inlined: true, module: None }
    }

    #[test]
    fn std_internals_are_recognised() {
        assert!(f("alloc::vec::from_elem").is_std_internal());
        assert!(f("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem").is_std_internal());
        assert!(f("<alloc::vec::Vec<T> as core::clone::Clone>::clone").is_std_internal());
        assert!(f("<&str as core::fmt::Display>::fmt").is_std_internal());
        assert!(!f("<myapp::Config as core::fmt::Display>::fmt").is_std_internal());
        assert!(!f("ying_example::leak_loop::{{closure}}").is_std_internal());
        assert!(!f("tokio::runtime::task::core::Core<T,S>::poll").is_std_internal());
    }

    #[test]
    fn collapsed_view_names_the_programs_function() {
        let mut a = f("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem");
        a.ip = 7;
        let mut b = f("ying_example::leak_loop::{{closure}}");
        b.ip = 7;
        let mut c = f("tokio::runtime::task::harness::poll_future");
        c.ip = 7;
        c.inlined = false;
        let s = StackStats {
            allocated_bytes: 1,
            num_allocations: 1,
            freed_bytes: 0,
            num_frees: 0,
            retained_bytes: 1,
            retained_count: 1,
            peak_retained_bytes: 0,
            peak_retained_count: 0,
            samples: 1,
            live_samples: 1,
            frames: vec![a, b, c],
            lifetimes: MillisHistogram::new(),
            retained_age: MillisHistogram::new(),
            stack: StdCallstack::from_ips(&[7]),
            spans: Vec::new(),
        };
        let shown: Vec<&str> = s.display_frames(false).iter().map(|f| &*f.function).collect();
        assert_eq!(shown, ["ying_example::leak_loop::{{closure}}"]);
        assert_eq!(s.display_frames(true).len(), 3);
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.function)?;
        if let Some(loc) = self.location() {
            write!(f, " ({loc})")?;
        }
        if self.inlined {
            f.write_str(" [inlined]")?;
        }
        Ok(())
    }
}

/// What the profiler knows about one stack. Byte and count figures are unbiased estimates
/// (exact when the sample interval is 1).
#[derive(Debug, Clone)]
pub struct StackStats {
    /// Estimated bytes allocated at this stack since start (realloc growth included).
    pub allocated_bytes: u64,
    /// Estimated number of allocations at this stack since start (a realloc'd block is one).
    pub num_allocations: u64,
    /// Estimated bytes freed (realloc shrinks included: allocated = retained + freed).
    pub freed_bytes: u64,
    /// Estimated number of frees.
    pub num_frees: u64,
    /// Estimated bytes still retained.
    pub retained_bytes: u64,
    /// Estimated number of allocations still retained.
    pub retained_count: u64,
    /// Estimated bytes this stack retained at the kept peak of the retained total (0 before
    /// the first peak; see [`crate::Snapshot::peak`]).
    pub peak_retained_bytes: u64,
    /// Estimated number of allocations this stack retained at the kept peak.
    pub peak_retained_count: u64,
    /// Samples taken at this stack (raw, unweighted).
    pub samples: u64,
    /// Of those, samples still live.
    pub live_samples: u64,
    /// Symbolized frames, innermost first, inlined frames expanded. See
    /// [`StackStats::display_frames`] for the filtered view reports use.
    pub frames: Vec<Frame>,
    /// Lifetimes of the freed allocations (weighted counts).
    pub lifetimes: MillisHistogram,
    /// Age of the retained bytes (weighted by bytes).
    pub retained_age: MillisHistogram,
    /// The raw stack.
    pub stack: StdCallstack,
    /// The `tracing` spans entered when the samples were taken, outermost first (empty unless
    /// the `profile_spans` feature and [`crate::spans::YingSpanLayer`] are in use).
    pub spans: Vec<crate::spans::SpanInfo>,
}

impl StackStats {
    /// Estimated retained bytes (0.3.0 name).
    pub fn retained_profiled_bytes(&self) -> u64 {
        self.retained_bytes
    }

    /// The figure that `m` ranks by.
    pub fn measure(&self, m: Measurement) -> u64 {
        match m {
            Measurement::AllocatedBytes => self.allocated_bytes,
            Measurement::RetainedBytes => self.retained_bytes,
            Measurement::RetainedBytesAtPeak => self.peak_retained_bytes,
        }
    }

    /// The frames reports show: allocator plumbing and inlined `::poll` glue hidden. With
    /// `expand` every inlined frame is listed; otherwise one frame per address, the innermost
    /// one that is not a standard-library internal (so an async function inlined into `poll`
    /// is named by that function, not by `alloc::vec::from_elem` above it).
    pub fn display_frames(&self, expand: bool) -> Vec<&Frame> {
        display_frames(self.frames.iter(), expand)
    }
}

/// The frames reports show of a stack whose frames are `frames` (innermost first, inlined
/// frames expanded): see [`StackStats::display_frames`]. Reports of the profiler's own stacks
/// pass frames they share between stacks, without building a [`StackStats`].
pub(crate) fn display_frames<'a>(
    frames: impl Iterator<Item = &'a Frame>,
    expand: bool,
) -> Vec<&'a Frame> {
    let visible = frames.filter(|f| !f.is_noise() && !f.is_poll_glue());
    if expand {
        return visible.collect();
    }
    fn pick<'a>(group: &[&'a Frame]) -> Option<&'a Frame> {
        group.iter().find(|f| !f.is_std_internal()).or(group.first()).copied()
    }
    let mut out: Vec<&Frame> = Vec::new();
    let mut group: Vec<&Frame> = Vec::new();
    for f in visible {
        if group.first().is_some_and(|g| g.ip != f.ip) {
            out.extend(pick(&group));
            group.clear();
        }
        group.push(f);
    }
    out.extend(pick(&group));
    out
}
