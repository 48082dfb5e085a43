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

    /// `file:line` when known, the path as debug info has it.
    pub fn location(&self) -> Option<String> {
        let file = self.file.as_ref()?;
        Some(match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        })
    }

    /// `file:line` as reports print it: a path in the cargo registry as
    /// `crate-version/src/file.rs`, one in Rust's standard library as `std/src/...` (see
    /// [`short_path`]).
    pub fn short_location(&self) -> Option<String> {
        let file = short_path(self.file.as_deref()?);
        Some(match self.line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        })
    }

    /// The framework crate this frame's code is in, judged by its source path: a crate from
    /// the cargo registry (`tokio`, `hyper`, ...) or Rust's standard library (`std`, `core`,
    /// `alloc`). None for the program's own code and for frames without a source file (C
    /// libraries without debug info, for instance).
    pub fn framework_crate(&self) -> Option<&str> {
        framework_crate(self.file.as_deref()?)
    }

    /// A Python frame (a code object's qualified name, file and line), read from the
    /// interpreter at sample time rather than named from an address.
    pub fn is_python(&self) -> bool {
        self.module.is_none() && crate::engine::python::decode(self.ip).is_some()
    }

    /// A native frame of a CPython interpreter's own code (`python3.11`, `libpython3.11.so`):
    /// the evaluation loop and call machinery between Python frames, which fold like a
    /// framework's frames in stacks that have Python frames.
    pub fn is_python_interpreter(&self) -> bool {
        let Some(m) = self.module.as_deref() else { return false };
        let name = m.rsplit('/').next().unwrap_or(m);
        let name = name.strip_prefix("lib").unwrap_or(name);
        name.strip_prefix("python").is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    }
}

/// Where the cargo registry keeps the sources of downloaded crates (under `$CARGO_HOME`):
/// `.../registry/src/index.crates.io-<hash>/<crate>-<version>/`.
const REGISTRY: &str = "/registry/src/";
/// Where the standard library's debug info says its sources are: `/rustc/<hash>/library/`.
const RUSTC: &str = "/rustc/";
/// Where it says the crates vendored into it are (`hashbrown` under `std::collections`):
/// `/rust/deps/<crate>-<version>/`.
const RUST_DEPS: &str = "/rust/deps/";

/// The part of a registry path after the index directory (`tokio-1.40.0/src/...`), or of a
/// standard-library path after `library/` (`std/src/...`).
fn framework_rest(file: &str) -> Option<&str> {
    if let Some(i) = find_registry(file) {
        let rest = &file[i + REGISTRY.len()..];
        let (_index, rest) = rest.split_once('/')?;
        return Some(rest);
    }
    if let Some(rest) = file.strip_prefix(RUST_DEPS) {
        return Some(rest);
    }
    let rest = file.strip_prefix(RUSTC)?;
    let (_hash, rest) = rest.split_once('/')?;
    Some(rest.strip_prefix("library/").unwrap_or(rest))
}

/// Where [`REGISTRY`] starts in `file`. Not `str::find`: it sets up a substring searcher at
/// each call, which was a fifth of the time a report of 888,000 stacks took (it runs for each
/// frame of each stack); the slashes are found with `memchr` instead.
fn find_registry(file: &str) -> Option<usize> {
    file.match_indices('/').map(|(i, _)| i).find(|&i| file[i..].starts_with(REGISTRY))
}

/// A source path as reports print it: `crate-version/src/file.rs` for a crate of the cargo
/// registry (the `.../.cargo/registry/src/index.crates.io-<hash>/` prefix cut off),
/// `std/src/...` (or `core/`, `alloc/`) for Rust's standard library (`/rustc/<hash>/library/`
/// cut off), `hashbrown-0.16.1/src/...` for a crate vendored into it (`/rust/deps/` cut off),
/// a path inside a versioned source tree as `name-1.2.3/...` (`Python-3.11.7/Objects/obmalloc.c`
/// for a file of an interpreter built in `/tmp/python-build.20261205/`: the tree a release
/// unpacks to is where its paths start), any other path as it is. pprof profiles keep the full
/// path.
pub fn short_path(file: &str) -> &str {
    framework_rest(file).or_else(|| versioned_tree(file)).unwrap_or(file)
}

/// `file` from its innermost directory named `<name>-<digits>.<digits>...` (a release's source
/// tree), when it has one.
fn versioned_tree(file: &str) -> Option<&str> {
    let dir_end = file.rfind('/')?;
    let mut found = None;
    let mut start = 0;
    for (i, _) in file[..=dir_end].match_indices('/') {
        let component = &file[start..i];
        if is_versioned(component) {
            found = Some(start);
        }
        start = i + 1;
    }
    found.map(|s| &file[s..])
}

/// Whether a path component is `<name>-<major>.<minor>[...]`: a name, a `-`, digits, a `.`, a
/// digit.
fn is_versioned(component: &str) -> bool {
    component.match_indices('-').any(|(i, _)| {
        let v = component.as_bytes()[i + 1..].as_ref();
        let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
        i > 0
            && digits > 0
            && v.get(digits) == Some(&b'.')
            && v.get(digits + 1).is_some_and(u8::is_ascii_digit)
    })
}

/// The framework crate of a source path (see [`Frame::framework_crate`]): `tokio` for
/// `.../registry/src/index.crates.io-<hash>/tokio-1.40.0/src/...`, `std` for
/// `/rustc/<hash>/library/std/src/...`.
pub fn framework_crate(file: &str) -> Option<&str> {
    let rest = framework_rest(file)?;
    let dir = rest.split('/').next().filter(|d| !d.is_empty())?;
    if find_registry(file).is_none() && !file.starts_with(RUST_DEPS) {
        return Some(dir);
    }
    // `<name>-<major>.<minor>.<patch>[-pre]`: the name ends at the first `-` followed by a
    // version (a name may hold `-` and digits: `sha-1-0.10.0`).
    let cut = dir.match_indices('-').map(|(i, _)| i).find(|&i| {
        let v = &dir[i + 1..];
        let digits = v.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && v.as_bytes().get(digits) == Some(&b'.')
    });
    Some(cut.map_or(dir, |i| &dir[..i]))
}

/// How reports show a stack's frames (see [`StackStats::shown_frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameView {
    /// Every frame, each inlined function with its own `file:line`, nothing collapsed or
    /// folded (`YING_EXPAND_FRAMES`).
    pub expand: bool,
    /// Runs of at least [`MIN_FOLDED_RUN`] framework frames fold into one line
    /// (`YING_FOLD_FRAMEWORK_FRAMES`; no effect with `expand`).
    pub fold_framework: bool,
}

impl FrameView {
    /// The default view: one line per function, framework runs folded.
    pub const DEFAULT: FrameView = FrameView { expand: false, fold_framework: true };

    /// `expand` with framework runs folded unless expanded.
    pub const fn expanded(expand: bool) -> FrameView {
        FrameView { expand, fold_framework: true }
    }
}

impl Default for FrameView {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The fewest consecutive framework frames that fold into one line.
pub const MIN_FOLDED_RUN: usize = 3;

/// One line of a stack as reports show it: a frame, or a folded run of framework frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShownFrame<'a> {
    /// A frame of its own.
    Frame(&'a Frame),
    /// Consecutive framework frames folded into one line.
    Folded {
        /// How many (shown) frames the line stands for; None for the allocation's own frames
        /// (the innermost run, below the library function the program called), shown as
        /// `... library internals ...`: their number and crates depend on the path taken
        /// inside the library (growing or not, which object it allocates) and would split one
        /// call site into several entries.
        frames: Option<usize>,
        /// Their crates, most frames first (empty for the allocation's own frames).
        crates: Vec<&'a str>,
    },
}

impl ShownFrame<'_> {
    /// The name the line has in folded stacks and flamegraphs: the function, or
    /// `... 27 frames in tokio, hyper, axum ...`.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self {
            ShownFrame::Frame(f) => std::borrow::Cow::Borrowed(&f.function),
            ShownFrame::Folded { frames: Some(n), crates } => {
                std::borrow::Cow::Owned(format!("... {n} frames in {} ...", crates.join(", ")))
            }
            ShownFrame::Folded { frames: None, .. } => {
                std::borrow::Cow::Borrowed("... library internals ...")
            }
        }
    }

    /// The line as the text report prints it: `function (file:line) [inlined]` (the location
    /// when `with_location`), or the folded run.
    pub fn text(&self, with_location: bool) -> String {
        let ShownFrame::Frame(f) = self else { return self.name().into_owned() };
        let mut o = f.function.to_string();
        if with_location {
            if let Some(loc) = f.short_location() {
                o.push_str(&format!(" ({loc})"));
            }
        }
        if f.inlined {
            o.push_str(" [inlined]");
        }
        o
    }
}

impl fmt::Display for ShownFrame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text(true))
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

    fn stats(frames: Vec<Frame>) -> StackStats {
        StackStats {
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
            frames,
            lifetimes: MillisHistogram::new(),
            retained_age: MillisHistogram::new(),
            stack: StdCallstack::from_ips(&[7]),
            spans: Vec::new(),
            variance: Default::default(),
            residency: None,
        }
    }

    /// A frame at `ip` in `file` (line 1).
    fn at(ip: usize, name: &str, file: &str, inlined: bool) -> Frame {
        Frame {
            ip,
            function: name.into(),
            file: Some(file.into()),
            line: Some(1),
            inlined,
            module: None,
        }
    }

    const TOKIO: &str =
        "/home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.40.0/src/rt.rs";
    const STD: &str = "/rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/library/std/src/thread.rs";
    const ALLOC: &str = "/rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/library/alloc/src/vec.rs";
    const APP: &str = "/src/app/src/main.rs";

    fn names(lines: &[ShownFrame<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.name().into_owned()).collect()
    }

    #[test]
    fn default_view_names_inlined_functions_once_each() {
        let mut a = f("<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem");
        a.ip = 7;
        let mut b = f("app::record_audit");
        b.ip = 7;
        let mut glue = f("<core::pin::Pin<P> as core::future::future::Future>::poll");
        glue.ip = 7;
        let mut h = f("app::handler::{{closure}}");
        h.ip = 7;
        // The same function again (a closure inlined into its namesake), then recursion.
        let mut h2 = f("app::handler::{{closure}}");
        h2.ip = 7;
        h2.inlined = false;
        let mut r1 = f("app::walk");
        r1.ip = 8;
        r1.inlined = false;
        let mut r2 = r1.clone();
        r2.ip = 9;
        let s = stats(vec![a, b, glue, h, h2, r1, r2]);
        let shown: Vec<&str> = s.display_frames(false).iter().map(|f| &*f.function).collect();
        assert_eq!(
            shown,
            [
                "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
                "app::record_audit",
                "app::handler::{{closure}}",
                "app::walk"
            ]
        );
        // The innermost frame of a collapsed function is the one shown.
        assert!(s.display_frames(false)[2].inlined);
        // Expanded: every frame but the glue.
        assert_eq!(s.display_frames(true).len(), 6);
        assert_eq!(s.shown_frames(FrameView::expanded(true)).len(), 6);
    }

    #[test]
    fn registry_and_std_paths_are_shortened() {
        assert_eq!(short_path(TOKIO), "tokio-1.40.0/src/rt.rs");
        assert_eq!(short_path(STD), "std/src/thread.rs");
        assert_eq!(short_path(APP), APP);
        assert_eq!(short_path("/usr/src/glibc/malloc.c"), "/usr/src/glibc/malloc.c");
        assert_eq!(framework_crate(TOKIO), Some("tokio"));
        assert_eq!(framework_crate(STD), Some("std"));
        assert_eq!(framework_crate(ALLOC), Some("alloc"));
        assert_eq!(framework_crate(APP), None);
        let dashed =
            "/c/.cargo/registry/src/index.crates.io-6f17d22bba15001f/sha-1-0.10.1/src/l.rs";
        assert_eq!(framework_crate(dashed), Some("sha-1"));
        let pre =
            "/c/.cargo/registry/src/index.crates.io-6f17d22bba15001f/h2-0.4.0-alpha.1/src/a.rs";
        assert_eq!(framework_crate(pre), Some("h2"));
        let vendored = "/rust/deps/hashbrown-0.16.1/src/raw/mod.rs";
        assert_eq!(framework_crate(vendored), Some("hashbrown"));
        assert_eq!(short_path(vendored), "hashbrown-0.16.1/src/raw/mod.rs");
        let fr = at(1, "tokio::rt::block_on", TOKIO, false);
        assert_eq!(fr.short_location().as_deref(), Some("tokio-1.40.0/src/rt.rs:1"));
        assert_eq!(fr.to_string(), "tokio::rt::block_on (tokio-1.40.0/src/rt.rs:1)");
        // A frame without a file is nobody's framework (C without debug info).
        assert_eq!(f("malloc").framework_crate(), None);
        // A release's source tree, wherever it was built: from the innermost versioned
        // directory; the program's own and other paths as they are.
        let python = "/tmp/python-build.20261205222102.17/Python-3.11.7/Objects/obmalloc.c";
        assert_eq!(short_path(python), "Python-3.11.7/Objects/obmalloc.c");
        let nested = "/build/sqlite3-AbC1/sqlite3-3.40.1/ext/zlib-1.2.13/inflate.c";
        assert_eq!(short_path(nested), "zlib-1.2.13/inflate.c");
        for kept in ["/work/app-v2/src/main.c", "/opt/x-1/y.c", "/srv/-1.2/a.c", "gcc-12.2.c"] {
            assert_eq!(short_path(kept), kept);
        }
    }

    /// In a stack with Python frames, the interpreter's C frames above the innermost Python
    /// frame fold; those below it (the allocating C code) and every frame of a stack without
    /// Python frames stay.
    #[test]
    fn interpreter_frames_fold_above_the_python_frames_only() {
        let c = |ip: usize, name: &str| Frame {
            ip,
            function: name.into(),
            file: None,
            line: None,
            inlined: false,
            module: Some("/usr/bin/python3.11".into()),
        };
        let py = |id: u32, name: &str| Frame {
            ip: crate::engine::python::encode(id, 4),
            function: name.into(),
            file: Some("/app/main.py".into()),
            line: Some(4),
            inlined: false,
            module: None,
        };
        let libc = Frame {
            module: Some("/lib/x86_64-linux-gnu/libc.so.6".into()),
            ..c(90, "__libc_start_main")
        };
        let frames = vec![
            c(1, "_PyObject_Malloc"),
            c(2, "PyUnicode_New"),
            c(3, "PyUnicode_Concat"),
            c(4, "PyUnicode_Join"),
            py(1, "make_value"),
            c(5, "_PyEval_EvalFrameDefault"),
            c(6, "_PyFunction_Vectorcall"),
            c(7, "map_next"),
            py(2, "<module>"),
            c(8, "_PyEval_EvalFrameDefault"),
            c(9, "PyEval_EvalCode"),
            c(10, "Py_RunMain"),
            libc,
        ];
        assert_eq!(
            names(&shown_frames(frames.iter(), FrameView::DEFAULT)),
            [
                "_PyObject_Malloc",
                "PyUnicode_New",
                "PyUnicode_Concat",
                "PyUnicode_Join",
                "make_value",
                "... 3 frames in python ...",
                "<module>",
                "... 3 frames in python ...",
                "__libc_start_main",
            ]
        );
        // Without Python frames nothing of the interpreter's folds.
        let native: Vec<Frame> = frames.iter().filter(|f| !f.is_python()).cloned().collect();
        assert_eq!(shown_frames(native.iter(), FrameView::DEFAULT).len(), native.len());
    }

    #[test]
    fn framework_runs_fold_between_the_programs_frames() {
        let frames = vec![
            at(1, "alloc::alloc::alloc", ALLOC, true),
            at(1, "alloc::raw_vec::RawVec::allocate", ALLOC, true),
            at(1, "alloc::vec::from_elem", ALLOC, true),
            at(1, "app::record_audit", APP, true),
            at(1, "app::handler::{{closure}}", APP, false),
            at(2, "tokio::task::poll_inner", TOKIO, false),
            at(3, "tokio::task::poll", TOKIO, false),
            at(4, "std::thread::start", STD, false),
            at(5, "tokio::runtime::run", TOKIO, false),
            at(6, "app::main", APP, false),
            at(7, "std::rt::lang_start", STD, false),
            at(8, "std::rt::lang_start_inner", STD, false),
            at(9, "main", "", false),
        ];
        let s = stats(frames);
        assert_eq!(
            names(&s.shown_frames(FrameView::DEFAULT)),
            [
                "... library internals ...",
                "alloc::vec::from_elem",
                "app::record_audit",
                "app::handler::{{closure}}",
                "... 4 frames in tokio, std ...",
                "app::main",
                // Two frames are not a run worth folding.
                "std::rt::lang_start",
                "std::rt::lang_start_inner",
                "main",
            ]
        );
        let off = FrameView { expand: false, fold_framework: false };
        assert_eq!(s.shown_frames(off).len(), 13);
        assert_eq!(s.shown_frames(FrameView::expanded(true)).len(), 13);
        // Nothing but framework frames: shown whole.
        let all_std = stats(vec![
            at(1, "std::a", STD, false),
            at(2, "std::b", STD, false),
            at(3, "std::c", STD, false),
        ]);
        assert_eq!(all_std.shown_frames(FrameView::DEFAULT).len(), 3);
        // A C program's frames (no registry or rustc paths) are untouched.
        let c = stats((1..6).map(|i| at(i, &format!("f{i}"), "/src/c/x.c", false)).collect());
        assert_eq!(names(&c.shown_frames(FrameView::DEFAULT)), ["f1", "f2", "f3", "f4", "f5"]);
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.function)?;
        if let Some(loc) = self.short_location() {
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
    /// The variance estimates of the figures above (all zero when exact).
    pub variance: Variances,
    /// How much of the retained bytes was in memory and in swap when the report was taken
    /// (`YING_RESIDENT`); None when not measured.
    pub residency: Option<Residency>,
}

/// Unbiased estimates of the variances of a [`StackStats`]'s estimated figures, in squared
/// bytes and squared counts (the Horvitz-Thompson estimate: every sample of a block sampled
/// with probability `p` adds `(1-p)/p²` times the square of what it counts). Variances of
/// different stacks add up: a stack's sampling is independent of another's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Variances {
    /// Of [`StackStats::allocated_bytes`].
    pub allocated_bytes: f64,
    /// Of [`StackStats::num_allocations`].
    pub num_allocations: f64,
    /// Of [`StackStats::freed_bytes`].
    pub freed_bytes: f64,
    /// Of [`StackStats::num_frees`].
    pub num_frees: f64,
    /// Of [`StackStats::retained_bytes`].
    pub retained_bytes: f64,
    /// Of [`StackStats::retained_count`].
    pub retained_count: f64,
    /// Of [`StackStats::peak_retained_bytes`].
    pub peak_retained_bytes: f64,
    /// Of [`StackStats::peak_retained_count`].
    pub peak_retained_count: f64,
}

/// Estimated bytes of a stack's retained blocks in pages present in memory and in swap, read
/// from `/proc/self/pagemap` at report time and weighted like the retained estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency {
    /// Estimated retained bytes in pages present in memory.
    pub resident_bytes: u64,
    /// Estimated retained bytes in pages in swap.
    pub swapped_bytes: u64,
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

    /// The standard error of the figure that `m` ranks by (its variance's square root; 0 when
    /// exact): the figure is within 1.96 standard errors of the truth 95 times in 100.
    pub fn stderr(&self, m: Measurement) -> f64 {
        let v = match m {
            Measurement::AllocatedBytes => self.variance.allocated_bytes,
            Measurement::RetainedBytes => self.variance.retained_bytes,
            Measurement::RetainedBytesAtPeak => self.variance.peak_retained_bytes,
        };
        v.max(0.0).sqrt()
    }

    /// The frames reports show, without folding: allocator plumbing and inlined `::poll` glue
    /// hidden. With `expand` every inlined frame is listed, each with its own `file:line`;
    /// otherwise inlined functions are listed too (an inlined helper of the program is named)
    /// but consecutive frames of one function are one line (the innermost, where that function
    /// leads to the allocation), so a recursion or a closure inlined into its namesake shows
    /// once. [`StackStats::shown_frames`] also folds runs of framework frames.
    pub fn display_frames(&self, expand: bool) -> Vec<&Frame> {
        display_frames(self.frames.iter(), expand)
    }

    /// The lines reports show of this stack in `view`: [`StackStats::display_frames`], and
    /// unless expanded, runs of framework frames folded (see [`shown_frames`]).
    pub fn shown_frames(&self, view: FrameView) -> Vec<ShownFrame<'_>> {
        shown_frames(self.frames.iter(), view)
    }
}

/// Whether `function` is an allocator's entry point (`malloc` and its family, `operator new`,
/// CPython's `PyObject_Malloc` family, SQLite's `sqlite3Malloc`...): the functions a report
/// set's heap profiles ask pprof to drop with what they call
/// (`report::heap_profile::ALLOCATOR_FRAMES`, the same list as a regular expression), so that
/// a stack is named by the code that asked for the memory, not by the allocator's insides
/// (`_PyObject_ArenaMmap` under `_PyObject_Malloc`).
pub fn is_allocator_entry(function: &str) -> bool {
    is_c_allocator_entry(function) || is_rust_allocator_entry(function)
}

/// Rust's allocation entry points, which call no code of the program's (so that dropping them
/// with what they call loses none of its frames): the `alloc::alloc` functions and the global
/// allocator's shims (`__rust_alloc`, `__rdl_*`, `__rg_*`), `RawVec`'s growth, `Vec`'s
/// reservations and `push`, `vec![x; n]`, `Box::new`, `String`'s growth, and hashbrown's table
/// growth. Iterator-driven growth (`Extend`, `collect`) is not among them: it calls the
/// program's closures. The same list as `report::heap_profile::RUST_ALLOCATOR_FRAMES`.
fn is_rust_allocator_entry(f: &str) -> bool {
    const PREFIXES: [&str; 4] =
        ["alloc::alloc::", "<alloc::alloc::Global as ", "alloc::raw_vec::", "<alloc::raw_vec::"];
    if PREFIXES.iter().any(|p| f.starts_with(p)) {
        return true;
    }
    // The global allocator's shims, and only them: `__rust_try` (under `catch_unwind`) and
    // `__rust_begin_short_backtrace` run the program's code.
    const SHIMS: [&str; 4] = ["alloc", "alloc_zeroed", "realloc", "dealloc"];
    let shim = ["__rust_", "__rdl_", "__rg_"].iter().find_map(|p| f.strip_prefix(p));
    if shim.is_some_and(|rest| SHIMS.contains(&rest)) {
        return true;
    }
    if f == "alloc::vec::from_elem"
        || f.ends_with(" as alloc::vec::spec_from_elem::SpecFromElem>::from_elem")
    {
        return true;
    }
    // `Type(<generics>)?::method`, the method one of `methods`.
    let method_of = |ty: &str, methods: &[&str]| {
        let Some(rest) = f.strip_prefix(ty) else { return false };
        let rest = match rest.strip_prefix('<') {
            Some(generic) => match generic.rfind(">::") {
                Some(end) => &generic[end + 1..],
                None => return false,
            },
            None => rest,
        };
        rest.strip_prefix("::").is_some_and(|m| methods.contains(&m))
    };
    const VEC: [&str; 8] = [
        "with_capacity",
        "with_capacity_in",
        "reserve",
        "reserve_exact",
        "push",
        "insert",
        "extend_from_slice",
        "resize",
    ];
    const STRING: [&str; 7] =
        ["with_capacity", "push", "push_str", "reserve", "reserve_exact", "insert", "insert_str"];
    const BOX: [&str; 4] = ["new", "new_uninit", "new_zeroed", "try_new"];
    if method_of("alloc::vec::Vec", &VEC)
        || method_of("alloc::string::String", &STRING)
        || method_of("alloc::boxed::Box", &BOX)
    {
        return true;
    }
    const HASHBROWN: [&str; 5] = [
        "::reserve_rehash",
        "::resize",
        "::fallible_with_capacity",
        "::new_uninitialized",
        "::do_alloc",
    ];
    f.starts_with("hashbrown::raw::") && HASHBROWN.iter().any(|m| f.ends_with(m))
}

/// The C (and C++, CPython, SQLite) entry points of [`is_allocator_entry`].
fn is_c_allocator_entry(function: &str) -> bool {
    const LIBC: [&str; 11] = [
        "malloc",
        "calloc",
        "realloc",
        "reallocarray",
        "free",
        "cfree",
        "memalign",
        "posix_memalign",
        "aligned_alloc",
        "valloc",
        "pvalloc",
    ];
    let f = function;
    if LIBC.contains(&f.strip_prefix("__libc_").unwrap_or(f)) {
        return true;
    }
    if f.starts_with("operator new") || f.starts_with("operator delete") || f == "pymalloc_alloc" {
        return true;
    }
    // `_?Py(Object|Mem)_(Raw)?(Malloc|Calloc|Realloc)`
    let py = f.strip_prefix('_').unwrap_or(f);
    if let Some(rest) = py.strip_prefix("PyObject_").or_else(|| py.strip_prefix("PyMem_")) {
        let rest = rest.strip_prefix("Raw").unwrap_or(rest);
        if matches!(rest, "Malloc" | "Calloc" | "Realloc") {
            return true;
        }
    }
    // `sqlite3(Mem)?(Malloc|Realloc)(Zero)?|sqlite3DbMalloc\w*|sqlite3DbRealloc\w*`
    if let Some(rest) = f.strip_prefix("sqlite3") {
        let word = |r: &str| r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if let Some(r) = rest.strip_prefix("DbMalloc").or_else(|| rest.strip_prefix("DbRealloc")) {
            return word(r);
        }
        let rest = rest.strip_prefix("Mem").unwrap_or(rest);
        let rest = rest.strip_suffix("Zero").unwrap_or(rest);
        return matches!(rest, "Malloc" | "Realloc");
    }
    false
}

/// The frames reports show of a stack whose frames are `frames` (innermost first, inlined
/// frames expanded): see [`StackStats::display_frames`]. Reports of the profiler's own stacks
/// pass frames they share between stacks, without building a [`StackStats`].
pub(crate) fn display_frames<'a>(
    frames: impl Iterator<Item = &'a Frame>,
    expand: bool,
) -> Vec<&'a Frame> {
    let mut scratch = ShownScratch { expand, ..ShownScratch::default() };
    for f in frames {
        scratch.push((f, FrameFacts::of(f)));
    }
    scratch.visible.into_iter().map(|v| v.0).collect()
}

/// The lines of a stack (innermost first, inlined frames expanded) in `view`.
///
/// Folding: a run of at least [`MIN_FOLDED_RUN`] consecutive shown frames whose code is in a
/// framework crate ([`Frame::framework_crate`]: the cargo registry, Rust's standard library)
/// becomes one line `... N frames in tokio, std ...`. The innermost run (the allocation's own
/// frames, in `alloc` or a collection crate) keeps its outermost frame, the library function
/// the program called (`alloc::vec::from_elem`, `hashbrown::map::HashMap::insert`), and
/// folds the frames below it into `... library internals ...`, without a count or crates
/// (they vary with the path inside the library and would split one call site). A stack with no frame outside the frameworks is shown whole:
/// there would be nothing left to read. Frames without a source file are never framework
/// frames, so C and C++ programs without such paths are shown as they are.
pub fn shown_frames<'a>(
    frames: impl Iterator<Item = &'a Frame>,
    view: FrameView,
) -> Vec<ShownFrame<'a>> {
    let mut scratch = ShownScratch::default();
    scratch.clear(view);
    for f in frames {
        scratch.push((f, FrameFacts::of(f)));
    }
    let mut out = Vec::new();
    shown_frames_of_scratch(view, &mut scratch, &mut out);
    out
}

/// What the lines of a stack depend on, of one of its frames: what [`shown_frames`] asks of
/// each frame. A report that shows a million stacks through a few thousand distinct frames
/// judges each frame once (`report/model/table.rs`'s `frame_facts`); judging them again for
/// every stack (a substring search in each source path) was most of the time such a report
/// took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameFacts<'a> {
    /// Allocator plumbing or `::poll` glue: never shown.
    pub(crate) hidden: bool,
    /// [`Frame::framework_crate`].
    pub(crate) framework: Option<&'a str>,
    /// [`Frame::is_python`].
    pub(crate) python: bool,
    /// [`Frame::is_python_interpreter`].
    pub(crate) interpreter: bool,
    /// A number for the frame's function, equal for frames of the same function name when
    /// the facts come from one table (0 when judged alone: compare the names).
    pub(crate) function: u32,
    /// A number for what the frame's line prints (name, short location, `[inlined]`), equal
    /// for frames that print the same line when the facts come from one table (0 when judged
    /// alone).
    pub(crate) line: u32,
}

impl<'a> FrameFacts<'a> {
    /// The facts of `f`, judged now.
    pub(crate) fn of(f: &'a Frame) -> Self {
        Self {
            hidden: f.is_noise() || f.is_poll_glue(),
            framework: f.framework_crate(),
            python: f.is_python(),
            interpreter: f.is_python_interpreter(),
            function: 0,
            line: 0,
        }
    }
}

/// The frames of one stack being shown, gathered one at a time ([`ShownScratch::push`]) and
/// turned into its lines ([`shown_frames_of_scratch`]); kept by a caller that shows many
/// stacks, so its arrays are reused.
#[derive(Debug, Default)]
pub(crate) struct ShownScratch<'a> {
    /// The frames shown so far, innermost first, with their facts.
    visible: Vec<(&'a Frame, FrameFacts<'a>)>,
    crates: Vec<Option<&'a str>>,
    /// Whether the view is expanded (runs of one function kept whole).
    expand: bool,
}

impl<'a> ShownScratch<'a> {
    /// The frames kept so far, innermost first, with their facts: every frame
    /// [`shown_frames_of_scratch`] shows as a line of its own is one of them, in the same order.
    pub(crate) fn kept(&self) -> &[(&'a Frame, FrameFacts<'a>)] {
        &self.visible
    }

    /// Empties it for the next stack, shown in `view`.
    pub(crate) fn clear(&mut self, view: FrameView) {
        self.visible.clear();
        self.expand = view.expand;
    }

    /// Adds the next frame (outward) of the stack, unless it is hidden or, unless the view
    /// is expanded, of the same function as the frame before it (the innermost frame of a
    /// function stands for its run).
    #[inline]
    pub(crate) fn push(&mut self, f: (&'a Frame, FrameFacts<'a>)) {
        if f.1.hidden {
            return;
        }
        if let Some(last) = self.visible.last().filter(|_| !self.expand) {
            let same = match (last.1.function, f.1.function) {
                (0, _) | (_, 0) => last.0.function == f.0.function,
                (a, b) => a == b,
            };
            if same {
                return;
            }
        }
        self.visible.push(f);
    }
}

/// The lines of the frames pushed into `scratch` (cleared for `view`), as [`shown_frames`]
/// gives them, into `out` (cleared first).
pub(crate) fn shown_frames_of_scratch<'a>(
    view: FrameView,
    scratch: &mut ShownScratch<'a>,
    out: &mut Vec<ShownFrame<'a>>,
) {
    out.clear();
    let ShownScratch { visible, crates, .. } = scratch;
    if view.expand || !view.fold_framework {
        out.extend(visible.iter().map(|v| ShownFrame::Frame(v.0)));
        return;
    }
    // In a stack with Python frames, the interpreter's C frames above the innermost Python
    // frame (the evaluation loop and call machinery) are its framework; those below it are
    // the allocating C code (`PyByteArray_Resize`, `PyUnicode_Concat`) and stay.
    let first_python = visible.iter().position(|f| f.1.python);
    crates.clear();
    crates.extend(visible.iter().enumerate().map(|(i, (_, f))| {
        let machinery = first_python.is_some_and(|p| i > p) && f.interpreter;
        f.framework.or_else(|| machinery.then_some("python"))
    }));
    if crates.iter().all(Option::is_some) {
        out.extend(visible.iter().map(|v| ShownFrame::Frame(v.0)));
        return;
    }
    let mut i = 0;
    while i < visible.len() {
        if crates[i].is_none() {
            out.push(ShownFrame::Frame(visible[i].0));
            i += 1;
            continue;
        }
        let mut end = i;
        while end < visible.len() && crates[end].is_some() {
            end += 1;
        }
        if end - i < MIN_FOLDED_RUN {
            out.extend(visible[i..end].iter().map(|f| ShownFrame::Frame(f.0)));
        } else {
            // The innermost run keeps the function the program called.
            let fold_end = if i == 0 { end - 1 } else { end };
            out.push(folded(&crates[i..fold_end], i == 0));
            out.extend(visible[fold_end..end].iter().map(|f| ShownFrame::Frame(f.0)));
        }
        i = end;
    }
}

/// The line of a folded run whose frames' crates are `crates`: the crates by frame count, ties
/// in the order they come (innermost first); for the allocation's own frames (`allocation`),
/// neither count nor crates (see [`ShownFrame::Folded`]).
fn folded<'a>(crates: &[Option<&'a str>], allocation: bool) -> ShownFrame<'a> {
    if allocation {
        return ShownFrame::Folded { frames: None, crates: Vec::new() };
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for c in crates.iter().flatten() {
        match counts.iter_mut().find(|(n, _)| n == c) {
            Some((_, k)) => *k += 1,
            None => counts.push((c, 1)),
        }
    }
    // Stable: equal counts keep their order.
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    ShownFrame::Folded {
        frames: Some(crates.len()),
        crates: counts.into_iter().map(|(n, _)| n).collect(),
    }
}
