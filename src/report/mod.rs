//! Reports: from the engine's tables to files people and tools can open.
//!
//! Code here runs on the report thread, or on a program thread that holds the profiler's guard
//! (a direct call such as [`crate::YingProfiler::top_k_stacks_by_retained`]). It may allocate
//! (profiler memory), read and write files, and take its time. It reads the engine's tables
//! (`src/engine/`) through a snapshot (`src/report/snapshot.rs`), names frames with
//! `src/symbols/`, and is never called from an allocation hook. The formatting of stack
//! statistics lives here, with the formats, not with the data types ([`crate::StackStats`],
//! [`crate::engine::histogram`]).
//!
//! One dump writes a *report set*, every file with the same stem
//! `ying.<exe>.<pid>.<seq>.<UTC yyyymmddThhmmssZ>`:
//!
//! | file | what |
//! |---|---|
//! | `.txt` | the human report ([`text`]) |
//! | `.folded` | collapsed stacks, bytes as weights ([`folded`]) |
//! | `.svg` | flamegraph of the folded stacks, when flamegraphs are on ([`flamegraph`]) |
//! | `.pb.gz` | gzipped pprof heap profile with Go's four sample types ([`heap_profile`]) |
//! | `.peak.folded`, `.peak.svg`, `.peak.pb.gz` | the same of the kept peak of the retained total (`peak.rs`) |
//! | `.json` | the manifest: the set's figures, files and listed entries, for programs ([`manifest`]) |
//! | `.live` | with `YING_SYMBOLIZE=offline` only: the raw profile, for `ying report` to name ([`live`]) |
//!
//! The `.txt` has a PEAK section: when the retained total was at its kept peak, how high, and
//! the stacks that held it (see [`crate::Snapshot::peak`]).
//!
//! Files are written atomically (`files.rs`), so a reader never sees half a report.

pub mod bounded;
pub(crate) mod files;
pub mod flamegraph;
pub mod folded;
pub mod heap_profile;
pub mod html;
pub mod leaks;
pub mod live;
pub mod manifest;
pub(crate) mod model;
pub mod noise;
pub(crate) mod otlp;
pub(crate) mod peak;
pub(crate) mod pprof;
pub mod proto;
pub mod set_name;
pub(crate) mod snapshot;
pub mod text;
// The HTML report's data, built by every dump of the runner; public only for
// tests/html_report.rs's scale test, which builds a 100-dump timeline of 10,000 stacks in-process
// (`html::render` of it) without running a program that long. Not an API.
#[doc(hidden)]
pub mod timeline;
pub(crate) mod trust;

#[cfg(test)]
mod render_tests;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::callstack::{FrameView, Measurement};
use model::Report;
pub use set_name::{ProcessId, SetName};
use snapshot::Snapshot;

/// Facts about the process that go into report headers and file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportContext {
    /// Process id.
    pub pid: u32,
    /// The process's instance (see [`ProcessId`]): this process's for [`ReportContext::current`],
    /// the one a live file carries for a dead process's (`None` for files from before).
    pub instance: Option<u32>,
    /// Path of the executable.
    pub exe: String,
    /// Resident set size in KiB (`VmRSS`).
    pub rss_kib: Option<u64>,
    /// Anonymous resident memory in KiB (`RssAnon`).
    pub anon_rss_kib: Option<u64>,
}

impl ReportContext {
    /// The context of the current process, read now.
    pub fn current() -> Self {
        // Once the main thread has ended (`pthread_exit`), the process's own entries no longer
        // show its memory or executable; the calling thread's do.
        let exe = std::fs::read_link("/proc/self/exe")
            .or_else(|_| std::fs::read_link("/proc/thread-self/exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let status = std::fs::read_to_string("/proc/self/status")
            .ok()
            .filter(|s| s.contains("VmRSS:"))
            .or_else(|| std::fs::read_to_string("/proc/thread-self/status").ok())
            .unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| {
                let rest = l.strip_prefix(name)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
        };
        Self {
            pid: std::process::id(),
            instance: Some(instance()),
            exe,
            rss_kib: field("VmRSS"),
            anon_rss_kib: field("RssAnon"),
        }
    }

    /// A process nothing is known of (a report of stacks someone built).
    pub(crate) fn unknown() -> Self {
        Self { pid: 0, instance: None, exe: String::new(), rss_kib: None, anon_rss_kib: None }
    }

    /// The process as file names carry it.
    pub fn process(&self) -> ProcessId {
        ProcessId { pid: self.pid, instance: self.instance }
    }

    /// The executable's file name, safe for use in a path.
    pub fn exe_name(&self) -> String {
        files::sanitize_component(self.exe.rsplit('/').next().unwrap_or(&self.exe))
    }
}

/// This process's instance (see [`ProcessId`]): drawn from the kernel's entropy the first time
/// a process asks (the report thread, naming a file; nothing at start-up), drawn again in a
/// `fork` child (its pid differs). Lock-free.
pub(crate) fn instance() -> u32 {
    static OF: AtomicU64 = AtomicU64::new(0);
    let pid = u64::from(std::process::id());
    let v = OF.load(Ordering::Relaxed);
    if v >> 32 == pid {
        return v as u32;
    }
    let mut buf = [0u8; 4];
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`; a failure leaves it zero.
    let got = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), libc::GRND_NONBLOCK) };
    let mut i = u32::from_ne_bytes(buf);
    if got != 4 {
        // No entropy yet (early boot): the clock's nanoseconds and the pid.
        let t = crate::sys::clock::wall().duration_since(UNIX_EPOCH).unwrap_or_default();
        i = t.subsec_nanos() ^ (pid as u32).rotate_left(16);
    }
    // The first to store wins: every thread of the process names it the same.
    match OF.compare_exchange(v, (pid << 32) | u64::from(i), Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => i,
        Err(now) if now >> 32 == pid => now as u32,
        Err(_) => i,
    }
}

/// What a report set contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    /// Rank stacks by allocated rather than retained bytes.
    pub measurement: Measurement,
    /// Stacks in the text report.
    pub top_k: usize,
    /// List every frame, each inlined frame with its own `file:line`, in the text report,
    /// folded stacks and flamegraph; otherwise one line per function (inlined functions
    /// named, consecutive frames of one function one line).
    pub expand_frames: bool,
    /// Fold runs of framework frames (the cargo registry's crates, Rust's standard library)
    /// into one line such as `... 27 frames in tokio, hyper, axum ...` (see
    /// [`crate::callstack::shown_frames`]); no effect with `expand_frames`.
    pub fold_framework_frames: bool,
    /// Also write the SVG flamegraph.
    pub gen_flamegraphs: bool,
}

impl ReportOptions {
    /// How these options show frames.
    pub fn view(&self) -> FrameView {
        FrameView { expand: self.expand_frames, fold_framework: self.fold_framework_frames }
    }
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            measurement: Measurement::RetainedBytes,
            top_k: 20,
            expand_frames: false,
            fold_framework_frames: true,
            gen_flamegraphs: true,
        }
    }
}

/// The files one dump wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportPaths {
    /// The human report.
    pub text: Option<PathBuf>,
    /// Folded stacks.
    pub folded: Option<PathBuf>,
    /// The flamegraph.
    pub svg: Option<PathBuf>,
    /// The pprof profile.
    pub pprof: Option<PathBuf>,
    /// Folded stacks of the kept peak (`.peak.folded`).
    pub peak_folded: Option<PathBuf>,
    /// The flamegraph of the kept peak (`.peak.svg`).
    pub peak_svg: Option<PathBuf>,
    /// The pprof heap profile of the kept peak (`.peak.pb.gz`).
    pub peak_pprof: Option<PathBuf>,
    /// The manifest (`.json`): the set's figures, files and listed entries for programs
    /// ([`manifest`]).
    pub manifest: Option<PathBuf>,
    /// The process's HTML report (`ying.<exe>.<pid>.html`, rewritten at each dump of the
    /// runner; not a file of the set, kept by the report-set limit).
    pub html: Option<PathBuf>,
    /// The set's raw profile (`.live`, addresses and modules for `ying report` to name), with
    /// `YING_SYMBOLIZE=offline` only.
    pub raw: Option<PathBuf>,
}

impl ReportPaths {
    /// The files of the set (the HTML page, the process's own, is not one of them).
    pub(crate) fn set_files(&self) -> impl Iterator<Item = &PathBuf> {
        [
            &self.pprof,
            &self.peak_pprof,
            &self.folded,
            &self.svg,
            &self.peak_folded,
            &self.peak_svg,
            &self.text,
            &self.raw,
            &self.manifest,
        ]
        .into_iter()
        .flatten()
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The number this process's next report set will have.
pub(crate) fn next_seq() -> u64 {
    SEQ.load(Ordering::Relaxed)
}

/// The number of the report set about to be written (the next one's is one more).
pub(crate) fn take_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// The number of the last giant refusal named on stderr.
static REFUSALS_NAMED: AtomicU64 = AtomicU64::new(0);

/// Names on stderr, once each, the giant refusals that only had raw frames when they happened.
fn print_new_refusals(refusals: &[crate::report::snapshot::GiantRefusal]) {
    let named = REFUSALS_NAMED.load(Ordering::Relaxed);
    let mut out = String::new();
    for r in refusals.iter().filter(|r| r.number > named) {
        out.push_str(&format!(
            "ying: refusal #{} ({} bytes) was requested at:\n",
            r.number, r.size
        ));
        for f in r.frames.iter().filter(|f| !f.is_noise()) {
            out.push_str(&format!("ying:   {f}\n"));
        }
    }
    if let Some(last) = refusals.last() {
        REFUSALS_NAMED.fetch_max(last.number, Ordering::Relaxed);
    }
    crate::sys::write_stderr(out.as_bytes());
}

/// Writes a full report set for `snap` into `dir` (created if missing, relative to the working
/// directory now), each file atomically. Every file is attempted; the first error is returned
/// after the others were written.
pub fn write_report_set(
    snap: &Snapshot,
    ctx: &ReportContext,
    opts: &ReportOptions,
    dir: &Path,
) -> io::Result<ReportPaths> {
    let dir = files::ReportDir::open(dir, files::DEFAULT_FILE_MODE)?;
    write_set(&mut crate::report::snapshot::report_of(snap, ctx.clone(), opts), &dir, false)
}

/// Writes a full report set of `r` into `dir`, one output at a time: the pprof profiles
/// (current and peak) streamed to their files from every raw stack (pprof's locations are
/// addresses; its tools fold on their own), the folded stacks and the flamegraphs of the top
/// [`folded::MAX_FOLDED_STACKS`] entries, each built, written and dropped before the next, and
/// the text last. With `in_timeline` (a dump of the process's own tables, the runner's) the
/// dump also joins the process's [`timeline`] and the HTML report `ying.<exe>.<pid>.html`
/// ([`html`]) is rewritten. Every file is attempted; the first error is returned after the
/// others were written.
pub(crate) fn write_set(
    r: &mut Report,
    dir: &files::ReportDir,
    in_timeline: bool,
) -> io::Result<ReportPaths> {
    let mut seq = take_seq();
    // A number whose files someone else put there first (planted in a shared directory) is
    // passed over, said once: the set is written under the next free one, never over them.
    for _ in 0..16 {
        let stem = set_stem(r, seq);
        if !dir.has_set_file(&stem) {
            break;
        }
        static SAID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        if SAID.swap(std::process::id(), Ordering::Relaxed) != std::process::id() {
            crate::sys::warn(&format!(
                "{}: files named {stem}.* are there and were not written by this process: \
                 the set takes the next free number",
                dir.path().display()
            ));
        }
        seq = take_seq();
    }
    print_new_refusals(&r.facts.giant_refusals);
    let page = if in_timeline { Page::Process } else { Page::None };
    write_set_numbered(r, dir, seq, true, page)
}

/// The stem of the set numbered `seq` of `r`: `ying.<exe>.<pid>.<seq>.<time>`.
pub(crate) fn set_stem(r: &Report, seq: u64) -> String {
    let ctx = &r.facts.process;
    let stamp = utc_timestamp(r.facts.taken_at, false);
    SetName { exe: ctx.exe_name(), pid: ctx.pid, instance: ctx.instance, seq, stamp }.to_string()
}

/// The HTML page a set comes with.
pub(crate) enum Page {
    /// None.
    None,
    /// The process's own page: the dump joins its [`timeline`].
    Process,
    /// The page of this timeline (another process's, read back), titled `title`, with the
    /// dump added at the point given.
    Of(Box<timeline::Timeline>, timeline::Point, String),
}

/// [`write_set`] with the set's number `seq`. `own`: the report is of this process (its text
/// shows the profiler's peak memory as of the end of the writing); false for a report of
/// another process (from its live file, `live`).
///
/// A set is complete or absent: the first file that cannot be written (a full disk, an I/O
/// error) ends the set, the files of it already written are removed, and the error is
/// returned. The manifest is written last of the set's files, so a reader that finds it finds
/// every file it lists. The HTML page is not a file of the set (it is the process's, rewritten
/// by each dump): it is written after the set, and when it cannot be, the set stays and the
/// page keeps its last version.
pub(crate) fn write_set_numbered(
    r: &mut Report,
    dir: &files::ReportDir,
    seq: u64,
    own: bool,
    page: Page,
) -> io::Result<ReportPaths> {
    let ctx = r.facts.process.clone();
    let stem = set_stem(r, seq);
    let mut paths = ReportPaths::default();
    let (html, set) = match write_set_files(r, dir, &stem, seq, own, page, &mut paths) {
        Ok(html) => (html, Ok(())),
        Err(e) => (None, Err(e)),
    };
    if let Err(e) = set {
        for p in paths.set_files() {
            if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
                let _ = dir.remove(name);
            }
        }
        return Err(e);
    }
    if let Some(page) = html {
        let name = html::file_name(&ctx.exe_name(), ctx.process());
        match dir.rewrite_atomic_with(&name, |w| w.write_all(page.as_bytes())) {
            Ok(p) => paths.html = Some(p),
            Err(e) => page_not_written(&e),
        }
    }
    Ok(paths)
}

/// Says once per process that the HTML page could not be written (its set was).
fn page_not_written(e: &io::Error) {
    static WARNED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = std::process::id();
    if WARNED.swap(pid, Ordering::Relaxed) != pid {
        crate::sys::warn(&format!("HTML page not written: {e}; its report sets are"));
    }
}

/// Writes the files of the set `stem` of `r`, each recorded in `paths` once written, and
/// returns the page to write after them; stops at the first file that cannot be written.
fn write_set_files(
    r: &mut Report,
    dir: &files::ReportDir,
    stem: &str,
    seq: u64,
    own: bool,
    page: Page,
    paths: &mut ReportPaths,
) -> io::Result<Option<String>> {
    let ctx = r.facts.process.clone();
    let m = r.opts.measurement;
    paths.pprof = Some(
        dir.write_atomic_with(&format!("{stem}.pb.gz"), |w| {
            let mut gz = pprof::gzip(w);
            heap_profile::write(r, &mut gz)?;
            gz.finish().map(drop)
        })
        .map_err(|e| io::Error::new(e.kind(), format!("pprof: {e}")))?,
    );
    paths.peak_pprof = Some(peak::write_pprof(r, dir, stem)?);
    let fold = folded::render_report(r, m, folded::MAX_FOLDED_STACKS);
    paths.folded = Some(files::write_atomic(dir, &format!("{stem}.folded"), fold.as_bytes())?);
    if r.opts.gen_flamegraphs {
        let svg = flamegraph::svg(r, &fold, Some(stem))?;
        paths.svg = Some(files::write_atomic(dir, &format!("{stem}.svg"), &svg)?);
    }
    drop(fold);
    let at_peak = peak::write_files(r, dir, stem);
    paths.peak_folded = Some(at_peak.folded?);
    if let Some(svg) = at_peak.svg {
        paths.peak_svg = Some(svg?);
    }
    // The dump joins the process's timeline first: its page and its leak test are written
    // with this set (the page after the set, the leak suspects at the end of the text).
    let (html, leak_test) = match page {
        Page::None => (None, None),
        Page::Process => {
            let title = format!("Ying memory report: {} (pid {})", ctx.exe_name(), ctx.pid);
            match timeline::record_dump(r, seq, stem, |t| {
                let leaks = html::suspects::of_timeline(t);
                (html::render_with(&[t], &[Some(leaks.clone())], &title), leaks)
            }) {
                Some((page, leaks)) => (Some(page), Some(leaks)),
                None => (None, None),
            }
        }
        Page::Of(mut t, at, title) => {
            t.push_point(at);
            t.add_dump(r, seq, stem, at);
            let leaks = html::suspects::of_timeline(&t);
            (Some(html::render_with(&[&t], &[Some(leaks.clone())], &title)), Some(leaks))
        }
    };
    // The text goes last: its header shows the profiler's peak memory, which the other files
    // just set.
    if own {
        r.facts.totals.profiler_peak_bytes = crate::engine::totals::read().profiler_peak_bytes;
    }
    let mut txt = text::render_report(r);
    if let Some(a) = &leak_test {
        txt.push_str(&leak_section(&ctx.exe_name(), a));
    }
    paths.text = Some(files::write_atomic(dir, &format!("{stem}.txt"), txt.as_bytes())?);
    drop(txt);
    // With `YING_SYMBOLIZE=offline`, the set's raw profile, for `ying report` to name.
    if own && crate::symbols::symbolize::offline() {
        let mut w = live::write::LiveWriter::default();
        // Numbered as this set, so that `ying report` writes its named files over these.
        paths.raw = Some(
            dir.write_atomic_with(&format!("{stem}.live"), |out| w.encode_report(r, seq, out))?,
        );
    }
    // The manifest after every file of the set, which it lists.
    paths.manifest = Some(
        dir.write_atomic_with(&format!("{stem}.json"), |w| manifest::write(r, stem, paths, w))?,
    );
    Ok(html)
}

/// The text report's LEAK SUSPECTS section, from the leak test `a` on the process's timeline
/// (this dump included): the suspects, or why there are none yet.
fn leak_section(who: &str, a: &leaks::Analysis) -> String {
    if a.dumps < leaks::MIN_POINTS {
        return format!(
            "LEAK SUSPECTS of {who}: none tested yet (a stack is tested once {} dumps of this \
             process list it; this is dump {})\n",
            leaks::MIN_POINTS,
            a.dumps
        );
    }
    leaks::text(who, a)
}

/// The owner of the `malloc` the program's calls reach, when it is not the profiler's (a
/// program or library exporting its own allocator), set at start by the preload shim.
static FOREIGN_MALLOC: OnceLock<String> = OnceLock::new();

/// Records that the program's `malloc` is defined by `owner` (an object's path), not by the
/// profiler: reports then say that the profiler saw nothing of that heap (the shim's start-up,
/// through `crate::front_end::set_foreign_malloc`).
pub(crate) fn set_foreign_malloc(owner: String) {
    let _ = FOREIGN_MALLOC.set(owner);
}

/// The object that owns the program's `malloc`, when it is not the profiler's.
pub(crate) fn foreign_malloc() -> Option<&'static str> {
    FOREIGN_MALLOC.get().map(String::as_str)
}

/// The allocator under the shim, as the header names it, set at start by the preload shim.
static ALLOCATOR: OnceLock<String> = OnceLock::new();

/// Records which allocator the shim forwards to (through `crate::front_end::set_allocator`):
/// reports name it, and a chained allocator's heap is not glibc's to the resident-set
/// breakdown.
pub(crate) fn set_allocator(description: String, glibc: bool) {
    if !glibc {
        crate::report::model::rss::set_inner_allocator_is_system(false);
    }
    let _ = ALLOCATOR.set(description);
}

/// The allocator under the shim, as the header names it.
pub(crate) fn allocator() -> Option<&'static str> {
    ALLOCATOR.get().map(String::as_str)
}

/// When a peak was kept: `2.3s after start (2026-12-03T16:47:59Z)`.
pub(crate) fn peak_when(p: &snapshot::Peak) -> String {
    let since = match p.since_start {
        Some(d) => format!("{} after start", human_millis(d.as_secs_f64() * 1000.0)),
        None => "time since start unknown".to_string(),
    };
    format!("{since} ({})", utc_timestamp(p.at, true))
}

/// How many standard errors each side of an estimate its printed 95 % interval spans.
pub const Z95: f64 = 1.96;

/// ` ± 1.2 MiB`: the half-width of the 95 % interval of an estimate of bytes whose standard
/// error is `stderr` (the estimate is within it of the truth 95 times in 100), or nothing when
/// the estimate has no sampling error (exact, or made of blocks sampled surely).
pub fn plus_minus_bytes(stderr: f64) -> String {
    let half = (Z95 * stderr).round();
    if half >= 1.0 { format!(" ± {}", human_bytes(half as u64)) } else { String::new() }
}

/// ` ± 12`: [`plus_minus_bytes`] for a count.
pub fn plus_minus_count(stderr: f64) -> String {
    let half = (Z95 * stderr).round();
    if half >= 1.0 { format!(" ± {}", half as u64) } else { String::new() }
}

/// `12.3 MiB`-style sizes.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// `850ms` / `12.5s` / `3.2m` / `1.5h`.
pub fn human_millis(ms: f64) -> String {
    if !ms.is_finite() {
        "n/a".to_string()
    } else if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 60_000.0 {
        format!("{:.1}s", ms / 1000.0)
    } else if ms < 3_600_000.0 {
        format!("{:.1}m", ms / 60_000.0)
    } else {
        format!("{:.1}h", ms / 3_600_000.0)
    }
}

/// UTC time as `2026-12-02T11:30:11Z` (`extended`) or `20261202T113011Z` (file names: no `:`).
pub fn utc_timestamp(t: SystemTime, extended: bool) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    if extended {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_and_colon_free_in_names() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_214_611); // date -u -d @1796214611
        assert_eq!(utc_timestamp(t, true), "2026-12-02T12:30:11Z");
        assert_eq!(utc_timestamp(t, false), "20261202T123011Z");
        assert_eq!(
            utc_timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400), true),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(64 << 20), "64.0 MiB");
        assert_eq!(human_millis(1500.0), "1.5s");
    }
}
