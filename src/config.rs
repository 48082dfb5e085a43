//! Ying's settings: the `YING_*` environment variables, typed, documented and leniently parsed.
//!
//! Ying is configured only through environment variables, because its usual host is a program
//! it knows nothing about (it is injected with `LD_PRELOAD`), which has no other channel to
//! carry settings in.
//!
//! # Why parsing never fails
//!
//! A profiler must never break or stop the host program because of a typo. An unparsable or
//! out-of-range value therefore yields exactly one warning line, naming the variable, the value,
//! what is wrong with it and the default used instead, and the rest of the configuration still
//! applies:
//!
//! ```text
//! ying: warning: YING_TOP_K=0 is invalid (must be at least 1); using 20
//! ```
//!
//! A `YING_*` variable that is not in the table (usually a misspelling) gets one warning too,
//! listing the known names, so that a setting which silently did nothing is noticed. Variables
//! starting with `YING_TEST_` or `YING_EXAMPLE_`, and `YING_BLESS`, belong to Ying's own tests
//! and examples and are ignored. Warnings are returned, not printed: the caller decides where
//! they go (the preload shim writes them to stderr without allocating through itself).
//!
//! # Why one row per setting
//!
//! Each setting is written once, as one row of the `settings!` table below: its [`Config`]
//! field and type, its default (a named constant where other modules use the default too, such
//! as [`DEFAULT_TOP_K`]), its variable's name, its parser and its README sentence. The macro
//! makes from the rows the struct, its `Default`, the parsing of the environment, and
//! [`VARIABLES`], the documentation table (and thus the README table made by
//! [`Config::markdown_table`]). So a variable cannot be parsed without being documented, nor
//! documented with a default other than the one used: the default's text in the README and in
//! warnings is the default value itself, written back as the variable would spell it (the
//! tests check that this text parses, with the row's own parser, to the default).
//!
//! # Why not `envy`
//!
//! The design card names `envy`, which deserialized the variables into a struct of strings.
//! With one row per setting, that struct was a fifth copy of every name, and all `envy` still
//! did was move each string into its field: finding the row by the variable's exact name does
//! the same. It also had to be kept from acting on its own (it lower-cases names and strips the
//! prefix repeatedly, so other spellings had to be filtered out before it), and it could not
//! read a non-UTF-8 environment. So the rows are looked up directly, and `envy` is not used.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::engine::hooks::DEFAULT_MAX_ALLOC_BYTES;
use crate::engine::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;

/// The prefix every Ying variable starts with.
const PREFIX: &str = "YING_";

/// The largest sampling interval accepted: 1 TiB.
const MAX_SAMPLE_INTERVAL: u64 = 1 << 40;

/// Default reporting directory.
pub const DEFAULT_REPORTING_PATH: &str = "ying-profiles";
/// Default seconds between checks.
pub const DEFAULT_CHECK_INTERVAL_SECS: usize = 300;
/// Default percentage change of retained memory that triggers a report.
pub const DEFAULT_PCT_CHANGE_TRIGGER: usize = 10;
/// Default number of stacks in a text report.
pub const DEFAULT_TOP_K: usize = 20;
/// Default number of report sets of one process kept in the reporting directory (0 keeps all).
///
/// A set is a few kilobytes to a few megabytes (the flamegraphs and folded stacks hold at most
/// 2,000 stacks each, twice with the peak's), so 50 sets stay within a few hundred megabytes
/// even for a large program; and as periodic reports are written only when retained memory
/// moved by the trigger (10 %) at a check (every 5 minutes), 50 sets span at least four hours
/// of a program whose memory changes at every check, and usually days. Older sets are what a
/// long-running service no longer needs; the newest ones, and the exit report, are kept.
pub const DEFAULT_MAX_REPORT_SETS: usize = 50;
/// Default of `YING_SHORT_PROCESS_SECS`: a process that ends within 5 seconds writes its exit
/// report raw (a full set costs it tens of milliseconds of symbolization, more than 1 % of such a
/// life).
pub const DEFAULT_SHORT_PROCESS_SECS: u64 = 5;
/// Default number of report sets of one executable kept across its processes
/// (`YING_RETAIN_SETS`): two processes' worth of [`DEFAULT_MAX_REPORT_SETS`], so that a
/// restarted service keeps its last run's sets beside its own, and a short program run from
/// cron or a build (one set a run) keeps its last hundred runs.
pub const DEFAULT_RETAIN_SETS: usize = 100;
/// Default bytes of one executable's sets kept across its processes (`YING_RETAIN_BYTES`).
pub const DEFAULT_RETAIN_BYTES: u64 = 512 << 20;
/// Default milliseconds between versions of the live file (`YING_LIVE_INTERVAL_MS`).
pub const DEFAULT_LIVE_INTERVAL_MS: u64 = 500;

/// Where the live file goes (`YING_LIVE_FILE`; see `report/live/`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LiveFile {
    /// In the reporting directory (the default).
    #[default]
    ReportingDir,
    /// Not written.
    Off,
    /// In this directory (created if missing, under the same rules as the reporting path).
    Dir(PathBuf),
}

impl Shown for LiveFile {
    fn shown(&self) -> String {
        match self {
            LiveFile::ReportingDir => "on".to_string(),
            LiveFile::Off => "off".to_string(),
            LiveFile::Dir(p) => p.display().to_string(),
        }
    }
}

/// `YING_LIVE_FILE`: `on`/`true`/`1`, `off`/`false`/`0`, or a directory.
fn parse_live_file(s: &str) -> Result<LiveFile, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" => Err(NumError::Empty.to_string()),
        "on" | "true" | "1" | "yes" => Ok(LiveFile::ReportingDir),
        "off" | "false" | "0" | "no" => Ok(LiveFile::Off),
        _ => Ok(LiveFile::Dir(PathBuf::from(s))),
    }
}

/// The endpoint's bearer token (`YING_HTTP_TOKEN`): never printed (its `Debug` and the
/// README's default show no character of it).
#[derive(Clone, PartialEq, Eq)]
pub struct HttpToken(pub(crate) String);

impl std::fmt::Debug for HttpToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpToken(..)")
    }
}

impl Shown for HttpToken {
    fn shown(&self) -> String {
        "(set)".to_string()
    }
}

impl HttpToken {
    /// A token for the endpoint: at least 16 visible ASCII characters (no spaces).
    pub fn new(token: &str) -> Result<Self, String> {
        if token.len() < 16 {
            return Err("a token of at least 16 characters".to_string());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token of visible ASCII characters, no spaces".to_string());
        }
        Ok(Self(token.to_string()))
    }
}

/// `YING_HTTP_TOKEN`: the token, or `@PATH` for a file holding it (a trailing newline
/// removed); empty means unset.
fn parse_http_token(s: &str) -> Result<Option<HttpToken>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    match s.strip_prefix('@') {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("token file {}: {e}", one_line(path)))?;
            HttpToken::new(text.trim_end_matches(['\n', '\r'])).map(Some)
        }
        None => HttpToken::new(s).map(Some),
    }
}

/// The free space a reporting directory's filesystem keeps (`YING_MIN_FREE_SPACE`): Ying writes
/// a report set or a live-file version only while the space free to unprivileged writers is at
/// least the largest of `bytes`, `percent` % of the filesystem's size and four times the size of
/// the last such file or set written; [`DiskFloor::NONE`] asks for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFloor {
    /// Bytes that stay free (0: no floor in bytes).
    pub bytes: u64,
    /// Per cent of the filesystem that stays free (0 to 100; 0: none).
    pub percent: u8,
}

/// Default of `YING_MIN_FREE_SPACE`: 64 MiB, and 1 % of the filesystem.
pub const DEFAULT_DISK_FLOOR: DiskFloor = DiskFloor { bytes: 64 << 20, percent: 1 };

impl DiskFloor {
    /// No floor: write while anything is free (as before `YING_MIN_FREE_SPACE`).
    pub const NONE: DiskFloor = DiskFloor { bytes: 0, percent: 0 };

    /// The free bytes a filesystem of `total` bytes must keep, with the last file or set
    /// written `last` bytes long.
    pub fn need(&self, total: u64, last: u64) -> u64 {
        if *self == Self::NONE {
            return 0;
        }
        let pct = (total as u128 * self.percent as u128 / 100) as u64;
        self.bytes.max(pct).max(last.saturating_mul(4))
    }
}

impl Shown for DiskFloor {
    fn shown(&self) -> String {
        match (self.bytes, self.percent) {
            (0, 0) => "0".to_string(),
            (b, 0) => in_binary_units(&b),
            (0, p) => format!("{p}%"),
            (b, p) => format!("{},{p}%", in_binary_units(&b)),
        }
    }
}

/// A floor as `YING_MIN_FREE_SPACE` spells it, e.g. `64MiB,1%`.
pub(crate) fn shown(floor: &DiskFloor) -> String {
    floor.shown()
}

/// `YING_MIN_FREE_SPACE`: a byte size, a percentage, or both separated by a comma; `0` is none.
fn parse_disk_floor(s: &str) -> Result<DiskFloor, String> {
    let mut floor = DiskFloor::NONE;
    let (mut bytes_seen, mut pct_seen) = (false, false);
    for part in s.split(',').map(str::trim) {
        if let Some(p) = part.strip_suffix('%') {
            if pct_seen {
                return Err("two percentages".to_string());
            }
            pct_seen = true;
            floor.percent = uint_in(p.trim(), 0, 100)? as u8;
        } else {
            if bytes_seen {
                return Err("two sizes".to_string());
            }
            bytes_seen = true;
            floor.bytes = byte_size_in(part, 0, u64::MAX)?;
        }
    }
    Ok(floor)
}

/// The name of signal `n` as messages give it (`SIGKILL`, `SIGRTMIN+3`, `signal 99`): the
/// same names `YING_DUMP_SIGNAL` takes, for `ying run`'s report of how a program ended.
pub fn signal_name(n: i32) -> String {
    crate::triggers::signal::name(n)
}

/// `YING_SYMBOLIZE`: `in-process` (false) or `offline` (true).
fn parse_symbolize(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" => Err(NumError::Empty.to_string()),
        "in-process" | "inprocess" => Ok(false),
        "offline" => Ok(true),
        _ => Err("expected in-process or offline".to_string()),
    }
}

/// Default permission bits of report files: owner read and write only.
pub const DEFAULT_FILE_MODE: u32 = 0o600;
/// Default seconds between pushes.
pub const DEFAULT_PUSH_INTERVAL_SECS: u64 = 15;

/// Parses a value (already trimmed) into its field of a [`Config`].
type Setter = fn(&mut Config, &str) -> Result<(), String>;

/// One row of the variables table: what the README documents for one `YING_*` variable, and
/// (privately) how its value is parsed.
#[derive(Clone, Copy)]
pub struct VarDoc {
    /// The variable's full name, e.g. `YING_TOP_K`.
    pub name: &'static str,
    /// One sentence of README prose: what the variable does, its unit and its special values.
    pub meaning: &'static str,
    default: fn() -> String,
    set: Setter,
}

impl VarDoc {
    /// The default as text, itself a valid value of the variable, or `unset` for a variable
    /// whose default is to be absent. Warnings quote it after "using". Made from the default
    /// value, so it cannot disagree with [`Config::default`].
    #[must_use]
    pub fn default_text(&self) -> String {
        (self.default)()
    }
}

impl fmt::Debug for VarDoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VarDoc")
            .field("name", &self.name)
            .field("default", &self.default_text())
            .field("meaning", &self.meaning)
            .finish()
    }
}

/// How a default is written in the README and in warnings: as the variable would spell it.
trait Shown {
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
shown_by_display!(bool, u64, usize, i32, String, SocketAddr);

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref().map_or_else(|| "unset".to_string(), Shown::shown)
    }
}

impl Shown for Vec<(String, String)> {
    fn shown(&self) -> String {
        if self.is_empty() {
            return "unset".to_string();
        }
        self.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }
}

/// A permission mode as `YING_REPORT_FILE_MODE` spells it, e.g. `0600`.
fn octal_mode(mode: &u32) -> String {
    format!("{mode:04o}")
}

/// A byte size in the largest binary unit that divides it, e.g. `64GiB`.
fn in_binary_units(n: &u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    for (shift, unit) in UNITS {
        if *n != 0 && n.trailing_zeros() >= shift {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// Makes, from one row per setting, the [`Config`] struct, its `Default`, and [`VARIABLES`].
///
/// A row: `field: Type = default, "YING_NAME", parser, [shown as fn,] "README sentence.";`
/// where `parser` is a `fn(&str) -> Result<Type, String>` (the reason of a bad value) and the
/// optional `shown as` names how the default is written when `Type`'s own way does not match
/// how the variable is spelled (an octal mode, a size in binary units).
macro_rules! settings {
    ($(
        $field:ident: $ty:ty = $default:expr, $name:literal, $parse:expr,
        $(shown as $show:expr,)? $meaning:literal;
    )*) => {
        /// Every setting, typed.
        ///
        /// Fields are in the order of [`VARIABLES`], which documents each one; [`Config::default`]
        /// gives the value used when a variable is unset or invalid.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Config {
            $(
                #[doc = concat!("`", $name, "`: ", $meaning)]
                pub $field: $ty,
            )*
        }

        impl Default for Config {
            /// The defaults documented in [`VARIABLES`].
            fn default() -> Self {
                Config { $($field: $default,)* }
            }
        }

        /// Every `YING_*` variable, one row per [`Config`] field, in README order: whether and
        /// what to profile, then how to sample, then where, when and what to report, then
        /// safety limits.
        pub const VARIABLES: &[VarDoc] = &[$(
            VarDoc {
                name: $name,
                meaning: $meaning,
                default: || {
                    let default: $ty = $default;
                    settings!(@show default $(, $show)?)
                },
                set: |c, v| {
                    let parse: fn(&str) -> Result<$ty, String> = $parse;
                    c.$field = parse(v)?;
                    Ok(())
                },
            },
        )*];
    };
    (@show $v:ident) => { Shown::shown(&$v) };
    (@show $v:ident, $show:expr) => { ($show)(&$v) };
}

settings! {
    enabled: bool = true, "YING_ENABLED", parse_bool,
        "Whether to profile at all; `false` makes Ying a pass-through that samples nothing and \
         writes no reports.";
    only_exe: Option<String> = None, "YING_ONLY_EXE", parse_exe_name,
        "Profile only executables with this file name (the last component of \
         `/proc/self/exe`, e.g. `my-server`, without any `/`) and pass through in all others; \
         unset or empty profiles every program.";
    sample_interval_bytes: u64 = DEFAULT_SAMPLE_INTERVAL_BYTES, "YING_SAMPLE_INTERVAL_BYTES",
        |v| byte_size_in(v, 1, MAX_SAMPLE_INTERVAL),
        "Mean bytes allocated between samples, from 1 to 1TiB; 1 records every allocation \
         (exact, slow), larger values cost less and see less, and KiB/MiB/GiB/TiB suffixes are \
         accepted.";
    seed: Option<u64> = None, "YING_SEED",
        |v| if v.is_empty() { Ok(None) } else { uint_in(v, 0, u64::MAX).map(Some) },
        "Seed of the random sampling points, any integer from 0 to 18446744073709551615, to \
         make runs repeatable; unset or empty seeds from the clock.";
    track_mmap: bool = true, "YING_TRACK_MMAP", parse_bool,
        "Count the program's anonymous `mmap` regions (not file mappings, not `PROT_NONE` \
         reservations, not glibc malloc's own) as allocations at the stack that mapped them, \
         sampled like `malloc` and part of every total, so that arena allocators such as \
         Python's pymalloc are seen; `false` counts only the malloc family (LD_PRELOAD shim \
         only).";
    measure_allocated_not_retained: bool = false, "YING_MEASURE_ALLOCATED_NOT_RETAINED",
        parse_bool,
        "Rank stacks by bytes allocated since the start, freed or not, instead of by bytes \
         still retained, to find churn rather than leaks.";
    reporting_path: PathBuf = PathBuf::from(DEFAULT_REPORTING_PATH), "YING_REPORTING_PATH",
        parse_reporting_path,
        "Directory the reports are written to, created if missing; a relative path is resolved \
         against the working directory once, at start (a later `chdir` does not move the \
         reports), and a path with a symbolic link in any component is refused; no descriptor \
         of it stays open between reports (a directory later replaced by another or by a link \
         gets no reports); it must not be empty.";
    report_file_mode: u32 = DEFAULT_FILE_MODE, "YING_REPORT_FILE_MODE", parse_file_mode,
        shown as octal_mode,
        "Permission bits of the report files, in octal, set exactly whatever the umask; from \
         0600 (owner only) to 0666, owner read and write always included, e.g. 0640 to let the \
         file's group read them.";
    report_at_exit: bool = true, "YING_REPORT_AT_EXIT", parse_bool,
        "Write a final report when the program exits.";
    check_interval_secs: u64 = DEFAULT_CHECK_INTERVAL_SECS as u64, "YING_CHECK_INTERVAL_SECS",
        |v| uint_in(v, 0, 31_536_000),
        "Seconds between periodic checks of the exact retained total, from 0 to 31536000 (one \
         year); 0 turns periodic reports off and starts no background thread \
         (`ProfilerRunnerBuilder::check_interval_secs(0)` means the same).";
    report_pct_change_trigger: u64 = DEFAULT_PCT_CHANGE_TRIGGER as u64,
        "YING_REPORT_PCT_CHANGE_TRIGGER", |v| uint_in(v, 0, 1_000_000),
        "A periodic check writes a report only if the exact retained total changed by at least \
         this many percent (0 to 1000000) since the last report; 0 reports at every check.";
    gen_flamegraphs: bool = true, "YING_GEN_FLAMEGRAPHS", parse_bool,
        "Write an SVG flamegraph next to each text report.";
    expand_frames: bool = false, "YING_EXPAND_FRAMES", parse_bool,
        "List every frame in reports, each inlined frame with its own file and line, nothing \
         collapsed or folded; by default inlined functions are named too, but one line per \
         function.";
    fold_framework_frames: bool = true, "YING_FOLD_FRAMEWORK_FRAMES", parse_bool,
        "Fold each run of 3 or more consecutive frames in crates from the cargo registry or in \
         Rust's standard library into one line such as `... 27 frames in tokio, hyper, axum \
         ...` in text reports, folded stacks and flamegraphs (not in pprof profiles), and in \
         stacks with Python frames the interpreter's own C frames above the innermost Python \
         frame (`... 9 frames in python ...`); `false` shows them all.";
    python_frames: bool = true, "YING_PYTHON_FRAMES", parse_bool,
        "In a CPython 3.11 to 3.13 interpreter (the shim only), put each thread's Python frames \
         (qualified function name, file and line) into its sampled stacks, at the place of the \
         evaluation loop that runs them; `false` keeps native frames only.";
    top_k: usize = DEFAULT_TOP_K, "YING_TOP_K", |v| to_usize(uint_in(v, 1, 100_000)?),
        "Number of stacks listed in each text report, from 1 to 100000, largest first.";
    max_report_sets: usize = DEFAULT_MAX_REPORT_SETS, "YING_MAX_REPORT_SETS",
        |v| to_usize(uint_in(v, 0, 1_000_000)?),
        "Report sets of this process (same executable and pid) kept in the reporting \
         directory, from 0 to 1000000: after each report the oldest sets beyond this number \
         are removed, every file of a set, and nothing else (other processes' sets and other \
         files stay); 0 keeps every set.";
    short_process_secs: u64 = DEFAULT_SHORT_PROCESS_SECS, "YING_SHORT_PROCESS_SECS",
        |v| uint_in(v, 0, 31_536_000),
        "A process that exits within this many seconds of its start (a `fork` child: of its \
         fork), having written no report set before, writes its exit report as a raw profile, `<set>.live` (addresses and modules, no \
         debug info read: a fraction of a full set's cost), which `ying run`, `ying view` and \
         `ying report DIR` turn into the full set outside the process, naming each binary's \
         frames once; compilers in a build, a shell's helpers and a fork storm's children then \
         cost what their work costs; 0 writes every exit report in full (what \
         `ProfilerRunnerBuilder` does unless told).";
    retain_sets: usize = DEFAULT_RETAIN_SETS, "YING_RETAIN_SETS",
        |v| to_usize(uint_in(v, 0, 1_000_000)?),
        "Report sets of one executable kept in the reporting directory across its processes, \
         from 0 to 1000000: after each set a process writes, the oldest sets of ended \
         processes of the same executable beyond this number are removed (with the live files \
         of dead processes, each counted as a set, and temporary files that dead processes or \
         crashes left); a running process's own sets are bounded by `YING_MAX_REPORT_SETS`; 0 \
         keeps every set.";
    retain_bytes: u64 = DEFAULT_RETAIN_BYTES, "YING_RETAIN_BYTES",
        |v| byte_size_in(v, 0, u64::MAX), shown as in_binary_units,
        "Bytes of one executable's report sets and live files kept in the reporting directory \
         across its processes (KiB/MiB/GiB/TiB suffixes accepted): beyond it, the oldest sets \
         of ended processes are removed as for `YING_RETAIN_SETS`; 0 keeps every byte.";
    min_free_space: DiskFloor = DEFAULT_DISK_FLOOR, "YING_MIN_FREE_SPACE", parse_disk_floor,
        "Free space the reporting directory's filesystem keeps, as bytes (KiB/MiB/GiB/TiB \
         suffixes), a percentage of the filesystem, or both (`64MiB,1%`): a report set or a \
         live-file version is written only while the space free to unprivileged writers is at \
         least the larger of them and four times the last one written; below it, one warning, \
         profiling goes on in memory, and writing resumes when space is back; `0` turns the \
         floor off.";
    max_alloc_bytes: u64 = DEFAULT_MAX_ALLOC_BYTES, "YING_MAX_ALLOC_BYTES",
        |v| byte_size_in(v, 1, u64::MAX), shown as in_binary_units,
        "A single allocation request of at least this many bytes (1 or more, KiB/MiB/GiB/TiB \
         suffixes accepted) is refused with a null pointer and its stack printed to stderr, to \
         catch runaway sizes. A limit near the sampling interval leaves the estimates unbiased \
         (a thread's countdown longer than the limit is spent in several legs, each a \
         slow-path call).";
    max_stacks: usize = 400_000, "YING_MAX_STACKS", |v| to_usize(uint_in(v, 16, 10_000_000)?),
        "Stack entries kept, from 16 to 10000000, before samples at new stacks are folded into \
         one `[stack table full]` entry, bounding Ying's own memory: an entry takes about 170 \
         bytes and one or two a frame, 240 to 300 bytes for a stack of 46 frames, so the \
         default holds at most about 120 MB (each thread counts its samples in one of 8 \
         stripes, so a stack sampled on several threads can take up to 8 entries).";
    http_addr: Option<HttpAddr> = None, "YING_HTTP_ADDR", parse_http_addr,
        "Serve `/debug/pprof/heap`, `/debug/pprof/allocs` and Ying's own routes over HTTP at \
         this address, e.g. `127.0.0.1:6060` (a bare port or `localhost:PORT` means loopback; \
         an address other than loopback is served only when given explicitly and with \
         `YING_HTTP_TOKEN` set, and said on stderr), or `unix:PATH` for a unix socket (made \
         mode 0600; a stale socket there is replaced, any other file is not); unset or empty \
         serves nothing. It answers the process's own user and root (see `YING_HTTP_TOKEN`). \
         Its listening socket and connections are in the endpoint thread's own descriptor \
         table: the program never sees them.";
    http_token: Option<HttpToken> = None, "YING_HTTP_TOKEN", parse_http_token,
        "A bearer token for the endpoint (`Authorization: Bearer TOKEN`), at least 16 \
         characters, or `@PATH` for a file holding it: with it, a request that carries it may \
         read the profiles (`GET`) from any peer. Without it only the process's own user and \
         root may use the endpoint (the peer's user is read from the kernel's socket table), \
         and an address other than loopback is refused. `POST` routes (a dump) answer only the \
         process's own user and root, token or not.";
    push_url: Option<String> = None, "YING_PUSH_URL", parse_push_url,
        "Push the heap profile (allocations as a delta since the last push) every \
         `YING_PUSH_INTERVAL_SECS` to this Pyroscope-compatible server's `/ingest` API, e.g. \
         `http://127.0.0.1:4040` (Grafana Pyroscope, or Grafana Alloy's \
         `pyroscope.receive_http`); `http://` only; unset or empty pushes nothing.";
    push_interval_secs: u64 = DEFAULT_PUSH_INTERVAL_SECS, "YING_PUSH_INTERVAL_SECS",
        |v| uint_in(v, 1, 86_400),
        "Seconds between pushes to `YING_PUSH_URL` and `YING_OTLP_URL`, from 1 to 86400.";
    push_labels: Vec<(String, String)> = Vec::new(), "YING_PUSH_LABELS", parse_labels,
        "Labels of pushed profiles, `key=value` pairs separated by commas, e.g. \
         `service_name=checkout,env=prod`; `service_name` names the application (the \
         executable's name by default; OTLP's `service.name`, the others resource attributes \
         as they are); keys are letters, digits and `_`, values have no \
         `,{}=\"` characters.";
    otlp_url: Option<String> = None, "YING_OTLP_URL", parse_otlp_url,
        "Push OpenTelemetry profiles every `YING_PUSH_INTERVAL_SECS` to this receiver: over \
         HTTP (protobuf, gzipped) to an OpenTelemetry Collector's OTLP/HTTP port \
         (`http://127.0.0.1:4318`, to which `/v1development/profiles` is added) or a full URL \
         with its path, or over gRPC to `grpc://127.0.0.1:4317` (HTTP/2); allocations as a \
         delta since the last push, retained memory as of the push, the labels of \
         `YING_PUSH_LABELS` as resource attributes; no TLS; unset or empty pushes nothing.";
    push_headers: Vec<(String, String)> = Vec::new(), "YING_PUSH_HEADERS", parse_headers,
        "Headers of every push, to `YING_PUSH_URL` and to `YING_OTLP_URL` (a token, a \
         tenant), `name=value` pairs separated by commas, as `OTEL_EXPORTER_OTLP_HEADERS` \
         writes them (values percent-decoded), e.g. \
         `authorization=Bearer%20abc,x-scope-orgid=team1`.";
    dump_signal: Option<i32> = None, "YING_DUMP_SIGNAL", crate::triggers::signal::parse,
        "A signal (`SIGUSR2`, `USR2`, `12`, `SIGRTMIN+3`) on which the report thread writes a \
         report set within 100 ms; the handler is installed at start only if the program has \
         none for that signal, and a handler the program installs later wins (Ying says so on \
         stderr); `SIGKILL`, `SIGSTOP`, fault signals and `SIGCHLD` are refused; unset or \
         empty: none.";
    live_file: LiveFile = LiveFile::ReportingDir, "YING_LIVE_FILE", parse_live_file,
        "On by default. Keep the live profile in `ying.<exe>.<pid>-<instance>.live`, written by the report thread \
         within 100 ms of the first sample, then every `YING_LIVE_INTERVAL_MS` while memory \
         changes (sooner while it grows fast), so that a process killed by the \
         OOM killer or `SIGKILL`, or ended by a crash or a signal, leaves its heap at death for \
         `ying report FILE`: `on` writes it in the reporting directory, `off` writes none, any \
         other value is the directory to write it in (e.g. on a tmpfs), under the reporting \
         path's rules; needs the report thread (`YING_CHECK_INTERVAL_SECS` above 0).";
    live_interval_ms: u64 = DEFAULT_LIVE_INTERVAL_MS, "YING_LIVE_INTERVAL_MS",
        |v| uint_in(v, 50, 3_600_000),
        "Milliseconds between versions of the live file while memory changes, from 50 to \
         3600000; a version that took longer than a 20th of this delays the next one, so \
         writing never takes more than 5 % of the report thread.";
    keep_live_file: bool = false, "YING_KEEP_LIVE_FILE", parse_bool,
        "Keep the live file after a normal exit (by default the exit report replaces it and it \
         is removed).";
    symbolize_offline: bool = false, "YING_SYMBOLIZE", parse_symbolize,
        shown as |v: &bool| if *v { "offline".to_string() } else { "in-process".to_string() },
        "`in-process`: reports name every frame (function, file, line) from the binaries' debug \
         info and symbol tables, read by the profiler; `offline`: the process reads no debug \
         info or symbol table at all (the profiler's memory holds none), its reports show \
         frames as `module+0xoffset`, its pprof profiles carry the modules' build ids for \
         `go tool pprof` to symbolize, and each report set gets a `.live` file that `ying \
         report` turns into a set with every frame named, outside the process.";
    resident: bool = true, "YING_RESIDENT", parse_bool,
        "Give each stack in a report the estimated share of its retained bytes in memory and \
         in swap, read from `/proc/self/pagemap` for the pages of its live sampled blocks when \
         the report is taken (text: `N resident`; HTML: a column; pprof: `resident_space` and \
         `swapped_space` sample types, `inuse_space` still the default); `off` reads no \
         pagemap.";
    dump_control_file: bool = true, "YING_DUMP_CONTROL_FILE", parse_bool,
        "Watch the reporting directory every 100 ms: touching `dump.<pid>` makes that process \
         write one report set and remove the file; touching `dump` makes every process writing \
         there write one set each (the file is left in place; a `dump` older than the process \
         is ignored).";
    memory_limit_pct: u64 = 90, "YING_MEMORY_LIMIT_PCT", |v| uint_in(v, 0, 100),
        "Write one report set (reason `near memory limit`) when the process's resident set \
         first reaches this percentage (0 to 100) of its cgroup's memory limit (v2 \
         `memory.max`, v1 `memory.limit_in_bytes`, the smallest up the hierarchy), again only \
         after it fell below 95 % of that level; 0 turns it off, and no limit means no such \
         set.";
    memory_limit_bytes: Option<u64> = None, "YING_MEMORY_LIMIT_BYTES",
        |v| if v.is_empty() { Ok(None) } else { byte_size_in(v, 1, u64::MAX).map(Some) },
        "For tests: a memory limit (KiB/MiB/GiB/TiB suffixes accepted) that replaces the \
         cgroup's for `YING_MEMORY_LIMIT_PCT`; unset or empty uses the cgroup's.";
    peak_dump_pct: u64 = 0, "YING_PEAK_DUMP_PCT", |v| uint_in(v, 0, 1_000_000),
        "Write a report set (reason `new peak`) each time the exact retained total exceeds the \
         last high dumped (at first, the total when the report thread started) by more than \
         this many percent, from 0 to 1000000, looked at every 100 ms; 0 turns it off.";
}

impl Config {
    /// Whether a service that runs beside the report thread is asked for: the endpoint, or
    /// pushes of either kind.
    pub fn wants_services(&self) -> bool {
        self.http_addr.is_some() || self.push_url.is_some() || self.otlp_url.is_some()
    }

    /// Reads the process environment (only `YING_*` variables; nothing else is looked at).
    ///
    /// Returns the configuration and the warning lines, without trailing newlines, each either
    /// `ying: warning: YING_X=<value> is invalid (<why>); using <default>` or
    /// `ying: warning: YING_FOO is not a Ying variable (known: ...)`. Never panics, even on an
    /// environment holding names or values that are not UTF-8: a non-UTF-8 value of a Ying
    /// variable is reported as invalid and its default used.
    #[must_use = "the warnings should be shown to the user"]
    pub fn from_env() -> (Config, Vec<String>) {
        Self::from_env_over(Config::default())
    }

    /// [`Config::from_env`] over `base` (see [`Config::from_vars_over`]).
    #[must_use = "the warnings should be shown to the user"]
    pub fn from_env_over(base: Config) -> (Config, Vec<String>) {
        // Not `std::env::vars()`, which panics if any variable at all (Ying's or not) is not
        // valid UTF-8.
        let mut warnings = Vec::new();
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            if !name.as_encoded_bytes().starts_with(PREFIX.as_bytes()) {
                continue;
            }
            let name = name.to_string_lossy().into_owned();
            match value.into_string() {
                Ok(value) => vars.push((name, value)),
                Err(value) => match VARIABLES.iter().find(|v| v.name == name) {
                    Some(var) => warnings.push(invalid_warning(
                        var,
                        &value.to_string_lossy(),
                        "not valid UTF-8",
                    )),
                    // Unknown or ignored names: the value does not matter.
                    None => vars.push((name, value.to_string_lossy().into_owned())),
                },
            }
        }
        let (config, more) = Self::from_vars_over(base, vars);
        warnings.extend(more);
        (config, warnings)
    }

    /// Like [`Config::from_env`], from an explicit list of `(name, value)` pairs instead of the
    /// process environment; pairs whose name does not start with `YING_` are skipped.
    ///
    /// If a name occurs more than once, the last value wins. Warnings for unknown variables
    /// come first, in input order, then warnings for invalid values, in [`VARIABLES`] order.
    #[must_use = "the warnings should be shown to the user"]
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(vars: I) -> (Config, Vec<String>) {
        Self::from_vars_over(Config::default(), vars)
    }

    /// [`Config::from_vars`] over `base` instead of the defaults: a variable set replaces its
    /// field of `base` (an invalid value keeps `base`'s, with its warning); the others stay
    /// `base`'s. `start_profiling()` reads the environment so over the seed's values.
    pub fn from_vars_over<I: IntoIterator<Item = (String, String)>>(
        base: Config,
        vars: I,
    ) -> (Config, Vec<String>) {
        let mut warnings = Vec::new();
        // Only exact names are known: not another case, not the prefix twice.
        let mut values: Vec<Option<String>> = vec![None; VARIABLES.len()];
        for (name, value) in vars {
            if !name.starts_with(PREFIX) || is_ignored(&name) {
                continue;
            }
            match VARIABLES.iter().position(|v| v.name == name) {
                Some(i) => values[i] = Some(value),
                None => warnings.push(unknown_warning(&name)),
            }
        }
        let mut config = base;
        for (var, value) in VARIABLES.iter().zip(values) {
            let Some(value) = value else { continue };
            if let Err(why) = (var.set)(&mut config, value.trim()) {
                warnings.push(invalid_warning(var, &value, &why));
            }
        }
        (config, warnings)
    }

    /// The README table of [`VARIABLES`]: a header `| Variable | Default | Meaning |`, the
    /// separator `|---|---|---|`, then one row per variable, name in backticks, e.g.
    /// ``| `YING_TOP_K` | 20 | Number of stacks ... |``; ends with a newline.
    #[must_use]
    pub fn markdown_table() -> String {
        let mut out = String::from("| Variable | Default | Meaning |\n|---|---|---|\n");
        for v in VARIABLES {
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "| `{}` | {} | {} |",
                v.name,
                table_cell(&v.default_text()),
                table_cell(v.meaning)
            );
        }
        out
    }
}

/// Variables that start with `YING_` but belong to Ying's tests and examples.
fn is_ignored(name: &str) -> bool {
    name.starts_with("YING_TEST_") || name.starts_with("YING_EXAMPLE_") || name == "YING_BLESS"
}

fn invalid_warning(var: &VarDoc, value: &str, why: &str) -> String {
    format!(
        "ying: warning: {}={} is invalid ({}); using {}",
        var.name,
        one_line(value),
        why,
        var.default_text()
    )
}

fn unknown_warning(name: &str) -> String {
    let known: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    format!(
        "ying: warning: {} is not a Ying variable (known: {})",
        one_line(name),
        known.join(", ")
    )
}

/// Text from the environment made safe for a single warning line: control characters escaped,
/// and very long text shortened.
fn one_line(s: &str) -> String {
    const MAX_CHARS: usize = 200;
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == MAX_CHARS {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Escapes the one character that would break a markdown table row.
fn table_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// Why a number (or byte size) did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NumError {
    Empty,
    Negative,
    Fraction,
    NotANumber,
    TooLarge,
    Suffix(String),
}

impl fmt::Display for NumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumError::Empty => f.write_str("empty"),
            NumError::Negative => f.write_str("must not be negative"),
            NumError::Fraction => f.write_str("not a whole number"),
            NumError::NotANumber => f.write_str("not a number"),
            NumError::TooLarge => f.write_str("too large"),
            NumError::Suffix(s) => write!(f, "unknown size suffix \"{}\"", one_line(s)),
        }
    }
}

/// Splits trimmed text into its leading ASCII digits and the rest, rejecting text that has no
/// leading digits.
fn split_number(s: &str) -> Result<(u64, &str), NumError> {
    if s.is_empty() {
        return Err(NumError::Empty);
    }
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, rest) = s.split_at(end);
    if digits.is_empty() {
        let after_sign = s.strip_prefix('-').unwrap_or("");
        return Err(if after_sign.starts_with(|c: char| c.is_ascii_digit()) {
            NumError::Negative
        } else {
            NumError::NotANumber
        });
    }
    if rest.starts_with('.') {
        return Err(NumError::Fraction);
    }
    // Only ASCII digits remain, so the only possible failure is overflow.
    let n = digits.parse::<u64>().map_err(|_| NumError::TooLarge)?;
    Ok((n, rest))
}

/// A plain non-negative integer.
fn parse_uint(s: &str) -> Result<u64, NumError> {
    let (n, rest) = split_number(s.trim())?;
    if rest.is_empty() { Ok(n) } else { Err(NumError::NotANumber) }
}

/// A byte size, see [`parse_bytes`].
fn parse_size(s: &str) -> Result<u64, NumError> {
    let (n, rest) = split_number(s.trim())?;
    let suffix = rest.strip_prefix(' ').unwrap_or(rest);
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(NumError::Suffix(suffix.to_string())),
    };
    n.checked_mul(1 << shift).ok_or(NumError::TooLarge)
}

/// Parses a byte size: a plain integer, or one with a binary suffix, e.g. `512`, `64KiB`, `64k`,
/// `1 MiB`, `2G`.
///
/// The suffixes are K/KB/KiB, M/MB/MiB, G/GB/GiB and T/TB/TiB, in any case, all binary
/// multiples (`K` = 1024), optionally after a single space. Surrounding whitespace is ignored.
///
/// # Errors
///
/// A short reason (e.g. `too large`, `unknown size suffix "X"`) for empty text, a negative
/// number, a fraction, any other suffix, or a size above `u64::MAX`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Parses a boolean: `true`/`false`, `1`/`0`, `yes`/`no` or `on`/`off`, in any case, ignoring
/// surrounding whitespace.
///
/// # Errors
///
/// A short reason (`empty` or `expected true/false/1/0`) for anything else.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        "" => Err(NumError::Empty.to_string()),
        _ => Err("expected true/false/1/0".to_string()),
    }
}

/// Where the endpoint listens (`YING_HTTP_ADDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket at this path (`unix:PATH`), made mode 0600; the peer's user (its
    /// credentials) decides access, as on loopback.
    Unix(PathBuf),
}

impl std::fmt::Display for HttpAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpAddr::Tcp(a) => write!(f, "{a}"),
            HttpAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Shown for HttpAddr {
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// `YING_HTTP_ADDR`: an IP address and port, `localhost:PORT` or a bare port (both loopback),
/// or `unix:PATH`; empty means unset.
fn parse_http_addr(s: &str) -> Result<Option<HttpAddr>, String> {
    use std::net::Ipv4Addr;
    if s.is_empty() {
        return Ok(None);
    }
    if let Some(path) = s.strip_prefix("unix:") {
        if path.is_empty() || path.len() > 100 {
            return Err("a unix socket path of 1 to 100 bytes after unix:".to_string());
        }
        return Ok(Some(HttpAddr::Unix(PathBuf::from(path))));
    }
    let port = |p: &str| p.parse::<u16>().map_err(|_| format!("bad port \"{}\"", one_line(p)));
    let tcp = |a| Ok(Some(HttpAddr::Tcp(a)));
    if let Some(p) = s.strip_prefix("localhost:").or_else(|| s.strip_prefix(':')) {
        return tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port(p)?)));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port(s)?)));
    }
    s.parse::<SocketAddr>()
        .map(|a| Some(HttpAddr::Tcp(a)))
        .map_err(|_| "expected IP:PORT such as 127.0.0.1:6060, a port, or unix:PATH".to_string())
}

/// `YING_PUSH_URL`: `http://host[:port][/path]`; empty means unset.
fn parse_push_url(s: &str) -> Result<Option<String>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    if s.starts_with("https://") {
        return Err("https is not supported: push to a local Grafana Alloy or proxy over http://"
            .to_string());
    }
    let rest = s.strip_prefix("http://").ok_or("expected http://host:port")?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty()
        || host.contains('@')
        || s.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("expected http://host:port".to_string());
    }
    Ok(Some(s.trim_end_matches('/').to_string()))
}

/// `YING_OTLP_URL`: as `YING_PUSH_URL` (a URL without a path gets OTLP's profiles path), or
/// `grpc://host:port` for OTLP/gRPC.
fn parse_otlp_url(s: &str) -> Result<Option<String>, String> {
    if let Some(authority) = s.strip_prefix("grpc://") {
        let authority = authority.trim_end_matches('/');
        let port_ok = authority.rsplit_once(':').is_some_and(|(h, p)| {
            !h.is_empty() && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())
        });
        if !port_ok
            || authority.contains(['/', '@'])
            || authority.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err("expected grpc://host:port (OTLP/gRPC, no path)".to_string());
        }
        return Ok(Some(format!("grpc://{authority}")));
    }
    Ok(parse_push_url(s)?.map(with_otlp_path))
}

/// `url`, with OTLP's profiles path added when it is an `http://` URL without a path (a
/// `grpc://` one names no path).
pub(crate) fn with_otlp_path(url: String) -> String {
    match url.strip_prefix("http://") {
        Some(rest) if !rest.contains('/') => format!("{url}{OTLP_PROFILES_PATH}"),
        _ => url,
    }
}

/// The path of OTLP/HTTP's profiles export on a receiver (the Collector's, Pyroscope's).
pub const OTLP_PROFILES_PATH: &str = "/v1development/profiles";

/// `YING_PUSH_HEADERS`: `name=value` pairs separated by commas, values percent-decoded (the
/// form of `OTEL_EXPORTER_OTLP_HEADERS`); names are HTTP tokens, values one line.
fn parse_headers(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err("a header has no =".to_string());
        };
        let k = k.trim();
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if k.is_empty() || !k.chars().all(token) {
            return Err(format!("bad header name \"{}\"", one_line(k)));
        }
        let v = percent_decode(v.trim()).ok_or_else(|| format!("bad value of header {k}"))?;
        if v.chars().any(|c| c.is_control()) {
            return Err(format!("bad value of header {k}"));
        }
        out.push((k.to_string(), v));
    }
    Ok(out)
}

/// `s` with its `%XX` escapes decoded; None when one is malformed or the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `YING_PUSH_LABELS`: `key=value` pairs separated by commas; empty means none.
fn parse_labels(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) =
            pair.split_once('=').ok_or_else(|| format!("\"{}\" has no =", one_line(pair)))?;
        let (k, v) = (k.trim(), v.trim());
        let key_ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !key_ok {
            return Err(format!("bad label name \"{}\"", one_line(k)));
        }
        if v.is_empty() || v.chars().any(|c| ",{}=\"".contains(c) || c.is_control()) {
            return Err(format!("bad value of label {k}"));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// `YING_REPORTING_PATH`: any non-empty path.
fn parse_reporting_path(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err(NumError::Empty.to_string());
    }
    Ok(PathBuf::from(s))
}

/// An executable's file name; empty means unset.
fn parse_exe_name(s: &str) -> Result<Option<String>, String> {
    if s.is_empty() {
        Ok(None)
    } else if s.contains('/') {
        Err("must be a file name without '/'".to_string())
    } else {
        Ok(Some(s.to_string()))
    }
}

/// An integer within `min..=max`.
fn uint_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    in_range(parse_uint(s), min, max, false)
}

/// A byte size within `min..=max`.
fn byte_size_in(s: &str, min: u64, max: u64) -> Result<u64, String> {
    in_range(parse_size(s), min, max, true)
}

fn in_range(n: Result<u64, NumError>, min: u64, max: u64, bytes: bool) -> Result<u64, String> {
    match n {
        Ok(n) if n < min => Err(format!("must be at least {}", limit(min, bytes))),
        Ok(n) if n > max => Err(format!("must be at most {}", limit(max, bytes))),
        Ok(n) => Ok(n),
        Err(NumError::TooLarge) if max < u64::MAX => {
            Err(format!("must be at most {}", limit(max, bytes)))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A range limit as text; a byte size that is a whole number of KiB or more also in binary
/// units, e.g. `1099511627776 (1TiB)`.
fn limit(n: u64, bytes: bool) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    if bytes && n != 0 {
        for (shift, unit) in UNITS {
            if n.trailing_zeros() >= shift {
                return format!("{n} ({}{unit})", n >> shift);
            }
        }
    }
    n.to_string()
}

/// An octal permission mode for report files: digits 0-7 only (an optional leading `0o` is
/// accepted), no execute or special bits, owner read and write included.
fn parse_file_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() {
        return Err(NumError::Empty.to_string());
    }
    if !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err("not an octal mode such as 0640".to_string());
    }
    let mode = u32::from_str_radix(digits, 8).map_err(|_| NumError::TooLarge.to_string())?;
    if mode & !0o666 != 0 {
        return Err("must be at most 0666 (no execute or special bits)".to_string());
    }
    if mode & 0o600 != 0o600 {
        return Err("must include owner read and write (0600)".to_string());
    }
    Ok(mode)
}

fn to_usize(n: u64) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| NumError::TooLarge.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_floors_parse_as_bytes_percent_or_both() {
        let f = |s| parse_disk_floor(s);
        assert_eq!(f("64MiB,1%"), Ok(DEFAULT_DISK_FLOOR));
        assert_eq!(f(" 5 % , 1GiB "), Ok(DiskFloor { bytes: 1 << 30, percent: 5 }));
        assert_eq!(f("0"), Ok(DiskFloor::NONE));
        assert_eq!(f("10%"), Ok(DiskFloor { bytes: 0, percent: 10 }));
        for bad in ["", "101%", "1%,2%", "1MiB,2MiB", "x", "-1%"] {
            assert!(f(bad).is_err(), "{bad:?}");
        }
        let d = DEFAULT_DISK_FLOOR;
        assert_eq!(d.need(1 << 40, 0), (1u64 << 40) / 100, "1 % of a TiB");
        assert_eq!(d.need(1 << 30, 0), 64 << 20, "64 MiB of a GiB");
        assert_eq!(d.need(1 << 30, 100 << 20), 400 << 20, "four times the last set");
        assert_eq!(DiskFloor::NONE.need(1 << 30, 100 << 20), 0, "none asks for nothing");
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        Config::from_vars(vars(pairs))
    }

    /// A valid, non-default value for every variable, and the config they make.
    fn all_set() -> (Vec<(&'static str, &'static str)>, Config) {
        let pairs = vec![
            ("YING_ENABLED", "false"),
            ("YING_ONLY_EXE", "my-server"),
            ("YING_SAMPLE_INTERVAL_BYTES", "64KiB"),
            ("YING_SEED", "18446744073709551615"),
            ("YING_TRACK_MMAP", "no"),
            ("YING_MEASURE_ALLOCATED_NOT_RETAINED", "yes"),
            ("YING_REPORTING_PATH", "/var/tmp/profiles"),
            ("YING_REPORT_FILE_MODE", "0640"),
            ("YING_REPORT_AT_EXIT", "0"),
            ("YING_CHECK_INTERVAL_SECS", "0"),
            ("YING_REPORT_PCT_CHANGE_TRIGGER", "1000000"),
            ("YING_GEN_FLAMEGRAPHS", "OFF"),
            ("YING_EXPAND_FRAMES", "True"),
            ("YING_FOLD_FRAMEWORK_FRAMES", "false"),
            ("YING_PYTHON_FRAMES", "off"),
            ("YING_TOP_K", "100000"),
            ("YING_MAX_REPORT_SETS", "0"),
            ("YING_SHORT_PROCESS_SECS", "0"),
            ("YING_RETAIN_SETS", "7"),
            ("YING_RETAIN_BYTES", "3MiB"),
            ("YING_MIN_FREE_SPACE", "1GiB,2%"),
            ("YING_MAX_ALLOC_BYTES", "1 TiB"),
            ("YING_MAX_STACKS", "16"),
            ("YING_HTTP_ADDR", "6061"),
            ("YING_HTTP_TOKEN", "a-token-of-16-chars"),
            ("YING_PUSH_URL", "http://127.0.0.1:4040/"),
            ("YING_PUSH_INTERVAL_SECS", "60"),
            ("YING_PUSH_LABELS", "service_name=api, env=prod"),
            ("YING_OTLP_URL", "http://collector:4318"),
            ("YING_PUSH_HEADERS", "authorization=Bearer%20abc, x-scope-orgid=t1"),
            ("YING_DUMP_SIGNAL", "SIGUSR2"),
            ("YING_LIVE_FILE", "/dev/shm/ying"),
            ("YING_LIVE_INTERVAL_MS", "50"),
            ("YING_KEEP_LIVE_FILE", "yes"),
            ("YING_SYMBOLIZE", "offline"),
            ("YING_RESIDENT", "off"),
            ("YING_DUMP_CONTROL_FILE", "off"),
            ("YING_MEMORY_LIMIT_PCT", "75"),
            ("YING_MEMORY_LIMIT_BYTES", "200MiB"),
            ("YING_PEAK_DUMP_PCT", "25"),
        ];
        let config = Config {
            enabled: false,
            only_exe: Some("my-server".to_string()),
            sample_interval_bytes: 65536,
            seed: Some(u64::MAX),
            track_mmap: false,
            measure_allocated_not_retained: true,
            reporting_path: PathBuf::from("/var/tmp/profiles"),
            report_file_mode: 0o640,
            report_at_exit: false,
            check_interval_secs: 0,
            report_pct_change_trigger: 1_000_000,
            gen_flamegraphs: false,
            expand_frames: true,
            fold_framework_frames: false,
            python_frames: false,
            top_k: 100_000,
            max_report_sets: 0,
            short_process_secs: 0,
            retain_sets: 7,
            retain_bytes: 3 << 20,
            min_free_space: DiskFloor { bytes: 1 << 30, percent: 2 },
            max_alloc_bytes: 1 << 40,
            max_stacks: 16,
            http_addr: Some(HttpAddr::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 6061)))),
            http_token: Some(HttpToken("a-token-of-16-chars".to_string())),
            push_url: Some("http://127.0.0.1:4040".to_string()),
            push_interval_secs: 60,
            push_labels: vec![
                ("service_name".to_string(), "api".to_string()),
                ("env".to_string(), "prod".to_string()),
            ],
            otlp_url: Some("http://collector:4318/v1development/profiles".to_string()),
            push_headers: vec![
                ("authorization".to_string(), "Bearer abc".to_string()),
                ("x-scope-orgid".to_string(), "t1".to_string()),
            ],
            dump_signal: Some(libc::SIGUSR2),
            live_file: LiveFile::Dir(PathBuf::from("/dev/shm/ying")),
            live_interval_ms: 50,
            keep_live_file: true,
            symbolize_offline: true,
            resident: false,
            dump_control_file: false,
            memory_limit_pct: 75,
            memory_limit_bytes: Some(200 << 20),
            peak_dump_pct: 25,
        };
        (pairs, config)
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let (config, warnings) = parse(&[]);
        assert_eq!(config, Config::default());
        assert!(warnings.is_empty());
        // Variables without the prefix are not looked at.
        let (config, warnings) = parse(&[("PATH", "/bin"), ("ENABLED", "nonsense")]);
        assert_eq!(config, Config::default());
        assert!(warnings.is_empty());
        let d = Config::default();
        assert!(d.enabled && d.report_at_exit && d.gen_flamegraphs);
        assert!(!d.measure_allocated_not_retained && !d.expand_frames);
        assert!(d.fold_framework_frames);
        assert_eq!(d.sample_interval_bytes, 524_288);
        assert_eq!(d.reporting_path, PathBuf::from("ying-profiles"));
        assert_eq!((d.check_interval_secs, d.report_pct_change_trigger), (300, 10));
        assert_eq!(d.max_alloc_bytes, 68_719_476_736);
        assert_eq!((d.top_k, d.max_stacks), (20, 400_000));
        assert_eq!(d.max_report_sets, 50);
        assert_eq!((d.seed, d.only_exe), (None, None));
    }

    #[test]
    fn service_values() {
        use std::net::SocketAddr;
        let addr = |v: &str| parse_http_addr(v);
        let tcp = |a: ([u8; 4], u16)| Ok(Some(HttpAddr::Tcp(SocketAddr::from(a))));
        assert_eq!(addr(""), Ok(None));
        assert_eq!(addr("localhost:6060"), tcp(([127, 0, 0, 1], 6060)));
        assert_eq!(addr(":6060"), tcp(([127, 0, 0, 1], 6060)));
        assert_eq!(addr("0.0.0.0:80"), tcp(([0, 0, 0, 0], 80)));
        assert!(matches!(addr("[::1]:80"), Ok(Some(HttpAddr::Tcp(a))) if a.port() == 80));
        assert_eq!(
            addr("unix:/run/app/ying.sock"),
            Ok(Some(HttpAddr::Unix("/run/app/ying.sock".into())))
        );
        assert!(addr("unix:").is_err() && addr(&format!("unix:/{}", "x".repeat(100))).is_err());
        assert!(addr("host:80").is_err() && addr("70000").is_err() && addr("1.2.3.4").is_err());
        assert!(parse_push_url("https://x:1").unwrap_err().contains("https"));
        assert!(parse_push_url("ftp://x").is_err() && parse_push_url("http://").is_err());
        assert!(parse_push_url("http://u:p@x").is_err());
        assert_eq!(
            parse_otlp_url("http://c:4318/").unwrap().as_deref(),
            Some("http://c:4318/v1development/profiles"),
            "a receiver's address gets OTLP's path"
        );
        assert_eq!(
            parse_otlp_url("http://c/otlp/v1/p").unwrap().as_deref(),
            Some("http://c/otlp/v1/p")
        );
        assert_eq!(parse_otlp_url("").unwrap(), None);
        assert_eq!(parse_otlp_url("grpc://c:4317/").unwrap().as_deref(), Some("grpc://c:4317"));
        assert!(parse_otlp_url("grpc://c").is_err() && parse_otlp_url("grpc://c:4317/x").is_err());
        assert!(parse_otlp_url("https://c:4318").is_err());
        assert!(parse_headers("a=b%2").is_err(), "a cut escape");
        assert!(parse_headers("a=b%0D%0AX: y").is_err(), "a decoded line break");
        assert!(parse_headers("bad name=v").is_err() && parse_headers("novalue").is_err());
        assert_eq!(parse_headers(" k = a=b ").unwrap(), [("k".to_string(), "a=b".to_string())]);
        assert_eq!(
            parse_labels(" a=1 ,b_c=x.y,"),
            Ok(vec![("a".to_string(), "1".to_string()), ("b_c".to_string(), "x.y".to_string()),])
        );
        for bad in ["a", "1a=b", "a=", "a=b}", "a=b=c", "a b=c"] {
            assert!(parse_labels(bad).is_err(), "{bad}");
        }
        let (c, w) = parse(&[("YING_PUSH_LABELS", "x")]);
        assert_eq!(c.push_labels, Vec::new());
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("ying: warning: YING_PUSH_LABELS=x is invalid"), "{w:?}");
    }

    #[test]
    fn every_variable_set_to_a_valid_value() {
        let (pairs, expected) = all_set();
        let (config, warnings) = parse(&pairs);
        assert_eq!(warnings, Vec::<String>::new());
        assert_eq!(config, expected);
    }

    #[test]
    fn each_variable_reaches_its_own_field() {
        // Catches a row whose parser sets another row's field.
        let (pairs, _) = all_set();
        let names: Vec<&str> = pairs.iter().map(|(n, _)| *n).collect();
        let documented: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(names, documented);
        for pair in pairs {
            let (config, warnings) = parse(&[pair]);
            assert!(warnings.is_empty(), "{pair:?}: {warnings:?}");
            assert_ne!(config, Config::default(), "{pair:?} changed nothing");
        }
    }

    #[test]
    fn values_are_trimmed() {
        let (config, warnings) = parse(&[
            ("YING_TOP_K", " 42\t"),
            ("YING_ENABLED", "  off "),
            ("YING_REPORTING_PATH", " out "),
            ("YING_SAMPLE_INTERVAL_BYTES", "\n1 MiB "),
        ]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.top_k, 42);
        assert!(!config.enabled);
        assert_eq!(config.reporting_path, PathBuf::from("out"));
        assert_eq!(config.sample_interval_bytes, 1 << 20);
    }

    #[test]
    fn each_kind_of_bad_value_warns_once_and_uses_the_default() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("YING_ENABLED", "maybe", "expected true/false/1/0", "true"),
            ("YING_ENABLED", "", "empty", "true"),
            ("YING_GEN_FLAMEGRAPHS", "2", "expected true/false/1/0", "true"),
            ("YING_EXPAND_FRAMES", " ", "empty", "false"),
            ("YING_FOLD_FRAMEWORK_FRAMES", "some", "expected true/false/1/0", "true"),
            ("YING_SAMPLE_INTERVAL_BYTES", "lots", "not a number", "524288"),
            ("YING_SAMPLE_INTERVAL_BYTES", "-5", "must not be negative", "524288"),
            ("YING_SAMPLE_INTERVAL_BYTES", "0", "must be at least 1", "524288"),
            (
                "YING_SAMPLE_INTERVAL_BYTES",
                "2TiB",
                "must be at most 1099511627776 (1TiB)",
                "524288",
            ),
            ("YING_SAMPLE_INTERVAL_BYTES", "5XB", "unknown size suffix \"XB\"", "524288"),
            ("YING_SAMPLE_INTERVAL_BYTES", "1.5M", "not a whole number", "524288"),
            ("YING_SAMPLE_INTERVAL_BYTES", "", "empty", "524288"),
            ("YING_CHECK_INTERVAL_SECS", "31536001", "must be at most 31536000", "300"),
            (
                "YING_CHECK_INTERVAL_SECS",
                "99999999999999999999999",
                "must be at most 31536000",
                "300",
            ),
            ("YING_CHECK_INTERVAL_SECS", "5m", "not a number", "300"),
            ("YING_CHECK_INTERVAL_SECS", "-1", "must not be negative", "300"),
            ("YING_REPORT_PCT_CHANGE_TRIGGER", "1000001", "must be at most 1000000", "10"),
            ("YING_REPORT_PCT_CHANGE_TRIGGER", "2.5", "not a whole number", "10"),
            ("YING_DUMP_SIGNAL", "USR3", "not a signal name such as SIGUSR2, USR2 or 12", "unset"),
            ("YING_DUMP_SIGNAL", "SIGKILL", "SIGKILL cannot be used", "unset"),
            ("YING_MEMORY_LIMIT_PCT", "101", "must be at most 100", "90"),
            ("YING_TOP_K", "0", "must be at least 1", "20"),
            ("YING_TOP_K", "100001", "must be at most 100000", "20"),
            ("YING_TOP_K", "+5", "not a number", "20"),
            ("YING_MAX_STACKS", "15", "must be at least 16", "400000"),
            ("YING_MAX_REPORT_SETS", "-1", "must not be negative", "50"),
            ("YING_MAX_REPORT_SETS", "1000001", "must be at most 1000000", "50"),
            ("YING_MAX_STACKS", "10000001", "must be at most 10000000", "400000"),
            ("YING_MAX_ALLOC_BYTES", "0", "must be at least 1", "64GiB"),
            ("YING_MAX_ALLOC_BYTES", "99999999999TiB", "too large", "64GiB"),
            ("YING_MAX_ALLOC_BYTES", "18446744073709551616", "too large", "64GiB"),
            ("YING_MAX_ALLOC_BYTES", "1  MiB", "unknown size suffix \" MiB\"", "64GiB"),
            ("YING_TRACK_MMAP", "maybe", "expected true/false/1/0", "true"),
            ("YING_SEED", "abc", "not a number", "unset"),
            ("YING_SEED", "-1", "must not be negative", "unset"),
            ("YING_SEED", "18446744073709551616", "too large", "unset"),
            ("YING_REPORTING_PATH", "", "empty", "ying-profiles"),
            ("YING_REPORTING_PATH", "   ", "empty", "ying-profiles"),
            ("YING_ONLY_EXE", "/usr/bin/app", "must be a file name without '/'", "unset"),
            ("YING_REPORT_FILE_MODE", "0400", "must include owner read and write (0600)", "0600"),
            (
                "YING_REPORT_FILE_MODE",
                "0755",
                "must be at most 0666 (no execute or special bits)",
                "0600",
            ),
            (
                "YING_REPORT_FILE_MODE",
                "4600",
                "must be at most 0666 (no execute or special bits)",
                "0600",
            ),
            ("YING_REPORT_FILE_MODE", "rw-r-----", "not an octal mode such as 0640", "0600"),
            ("YING_REPORT_FILE_MODE", "0x1a4", "not an octal mode such as 0640", "0600"),
            ("YING_REPORT_FILE_MODE", "0800", "not an octal mode such as 0640", "0600"),
            ("YING_REPORT_FILE_MODE", "", "empty", "0600"),
            ("YING_REPORT_FILE_MODE", "77777777777777777777777", "too large", "0600"),
        ];
        for &(name, value, why, default) in cases {
            let (config, warnings) = parse(&[(name, value)]);
            let expected =
                format!("ying: warning: {name}={value} is invalid ({why}); using {default}");
            assert_eq!(warnings, vec![expected], "{name}={value:?}");
            assert_eq!(config, Config::default(), "{name}={value:?}");
        }
    }

    #[test]
    fn report_file_modes_are_octal_and_private_by_default() {
        assert_eq!(Config::default().report_file_mode, 0o600);
        for (text, mode) in [("0600", 0o600), ("640", 0o640), ("0o644", 0o644), ("0666", 0o666)] {
            let (config, warnings) = parse(&[("YING_REPORT_FILE_MODE", text)]);
            assert!(warnings.is_empty(), "{text}: {warnings:?}");
            assert_eq!(config.report_file_mode, mode, "{text}");
        }
    }

    #[test]
    fn a_bad_value_leaves_the_other_settings_alone() {
        let (config, warnings) =
            parse(&[("YING_TOP_K", "many"), ("YING_ENABLED", "no"), ("YING_MAX_STACKS", "7")]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("ying: warning: YING_TOP_K=many is invalid"));
        assert!(warnings[1].starts_with("ying: warning: YING_MAX_STACKS=7 is invalid"));
        assert_eq!(config, Config { enabled: false, ..Config::default() });
    }

    #[test]
    fn warnings_stay_on_one_line() {
        let (_, warnings) = parse(&[("YING_TOP_K", "1\n2")]);
        assert_eq!(
            warnings,
            vec!["ying: warning: YING_TOP_K=1\\n2 is invalid (not a number); using 20".to_string()]
        );
        let long = "x".repeat(10_000);
        let (_, warnings) = parse(&[("YING_SEED", &long)]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].len() < 400, "{}", warnings[0]);
        assert!(!warnings[0].contains('\n'));
    }

    #[test]
    fn empty_options_are_unset_without_warning() {
        let (config, warnings) = parse(&[("YING_ONLY_EXE", ""), ("YING_SEED", " ")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!((config.only_exe, config.seed), (None, None));
        let (config, _) = parse(&[("YING_SEED", "0")]);
        assert_eq!(config.seed, Some(0));
    }

    #[test]
    fn the_last_of_repeated_variables_wins() {
        let (config, warnings) = parse(&[("YING_TOP_K", "5"), ("YING_TOP_K", "7")]);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.top_k, 7);
    }

    #[test]
    fn parse_bytes_accepts_integers_and_binary_suffixes() {
        assert_eq!(parse_bytes("512"), Ok(512));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_bytes("64k"), Ok(64 * 1024));
        assert_eq!(parse_bytes("64KB"), Ok(64 * 1024));
        assert_eq!(parse_bytes("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_bytes("3mb"), Ok(3 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("64gib"), Ok(64 << 30));
        assert_eq!(parse_bytes("1TiB"), Ok(1 << 40));
        assert_eq!(parse_bytes("5 t"), Ok(5 << 40));
        assert_eq!(parse_bytes(" 7 "), Ok(7));
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_bytes("16777215TiB"), Ok(16_777_215 << 40));
    }

    #[test]
    fn parse_bytes_rejects_everything_else() {
        assert_eq!(parse_bytes("99999999999TiB"), Err("too large".to_string()));
        assert_eq!(parse_bytes("16777216TiB"), Err("too large".to_string()));
        assert_eq!(parse_bytes("18446744073709551616"), Err("too large".to_string()));
        assert_eq!(parse_bytes("1.5M"), Err("not a whole number".to_string()));
        assert_eq!(parse_bytes("-1"), Err("must not be negative".to_string()));
        assert_eq!(parse_bytes(""), Err("empty".to_string()));
        assert_eq!(parse_bytes("  "), Err("empty".to_string()));
        assert_eq!(parse_bytes("MiB"), Err("not a number".to_string()));
        assert_eq!(parse_bytes("-"), Err("not a number".to_string()));
        assert_eq!(parse_bytes("12PiB"), Err("unknown size suffix \"PiB\"".to_string()));
        assert_eq!(parse_bytes("12B"), Err("unknown size suffix \"B\"".to_string()));
        assert_eq!(parse_bytes("1_000"), Err("unknown size suffix \"_000\"".to_string()));
        assert!(parse_bytes("1  MiB").is_err());
        assert!(parse_bytes("1e6").is_err());
        assert!(parse_bytes("0x10").is_err());
    }

    #[test]
    fn parse_bool_variants() {
        for s in ["true", "TRUE", "True", "1", "yes", "Yes", "on", "ON", " true "] {
            assert_eq!(parse_bool(s), Ok(true), "{s:?}");
        }
        for s in ["false", "FALSE", "0", "no", "NO", "off", "Off", "\tfalse"] {
            assert_eq!(parse_bool(s), Ok(false), "{s:?}");
        }
        for s in ["2", "maybe", "t", "f", "y", "n", "enabled", "01", "-1"] {
            assert_eq!(parse_bool(s), Err("expected true/false/1/0".to_string()), "{s:?}");
        }
        assert_eq!(parse_bool(""), Err("empty".to_string()));
    }

    #[test]
    fn unknown_ying_variables_warn_and_test_variables_are_ignored() {
        let known = VARIABLES.iter().map(|v| v.name).collect::<Vec<_>>().join(", ");
        let (config, warnings) = parse(&[
            ("YING_FOO", "1"),
            ("YING_TEST_WHATEVER", "x"),
            ("YING_EXAMPLE_ROUNDS", "3"),
            ("YING_BLESS", "1"),
            ("YING_TOPK", "5"),
        ]);
        assert_eq!(config, Config::default());
        assert_eq!(
            warnings,
            vec![
                format!("ying: warning: YING_FOO is not a Ying variable (known: {known})"),
                format!("ying: warning: YING_TOPK is not a Ying variable (known: {known})"),
            ]
        );
        assert!(known.starts_with("YING_ENABLED, YING_ONLY_EXE, "));
        assert!(known.ends_with(", YING_PEAK_DUMP_PCT"));
    }

    #[test]
    fn only_exact_names_are_applied() {
        // Not another case, not the prefix twice.
        let (config, warnings) =
            parse(&[("YING_top_k", "5"), ("YING_YING_TOP_K", "6"), ("ying_top_k", "7")]);
        assert_eq!(config, Config::default());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("ying: warning: YING_top_k is not a Ying variable"));
        assert!(warnings[1].starts_with("ying: warning: YING_YING_TOP_K is not a Ying variable"));
    }

    #[test]
    fn unknown_and_invalid_warnings_together() {
        let (config, warnings) =
            parse(&[("YING_TOP_K", "x"), ("YING_NOPE", ""), ("YING_SEED", "9")]);
        assert_eq!(config, Config { seed: Some(9), ..Config::default() });
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("ying: warning: YING_NOPE is not a Ying variable"));
        assert_eq!(warnings[1], "ying: warning: YING_TOP_K=x is invalid (not a number); using 20");
    }

    #[test]
    fn from_env_reads_the_process_environment() {
        // The environment is only read, never changed: its YING_* variables (normally none)
        // must give the same result as passing them explicitly.
        let ours: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with(PREFIX))
            .collect();
        assert_eq!(Config::from_env(), Config::from_vars(ours));
    }

    #[test]
    fn variables_have_one_unique_row_per_field_in_documented_order() {
        let names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        // The README order: whether and what to profile, how to sample, where/when/what to
        // report, then safety limits. Same order as the fields of `Config`.
        assert_eq!(
            names,
            [
                "YING_ENABLED",
                "YING_ONLY_EXE",
                "YING_SAMPLE_INTERVAL_BYTES",
                "YING_SEED",
                "YING_TRACK_MMAP",
                "YING_MEASURE_ALLOCATED_NOT_RETAINED",
                "YING_REPORTING_PATH",
                "YING_REPORT_FILE_MODE",
                "YING_REPORT_AT_EXIT",
                "YING_CHECK_INTERVAL_SECS",
                "YING_REPORT_PCT_CHANGE_TRIGGER",
                "YING_GEN_FLAMEGRAPHS",
                "YING_EXPAND_FRAMES",
                "YING_FOLD_FRAMEWORK_FRAMES",
                "YING_PYTHON_FRAMES",
                "YING_TOP_K",
                "YING_MAX_REPORT_SETS",
                "YING_SHORT_PROCESS_SECS",
                "YING_RETAIN_SETS",
                "YING_RETAIN_BYTES",
                "YING_MIN_FREE_SPACE",
                "YING_MAX_ALLOC_BYTES",
                "YING_MAX_STACKS",
                "YING_HTTP_ADDR",
                "YING_HTTP_TOKEN",
                "YING_PUSH_URL",
                "YING_PUSH_INTERVAL_SECS",
                "YING_PUSH_LABELS",
                "YING_OTLP_URL",
                "YING_PUSH_HEADERS",
                "YING_DUMP_SIGNAL",
                "YING_LIVE_FILE",
                "YING_LIVE_INTERVAL_MS",
                "YING_KEEP_LIVE_FILE",
                "YING_SYMBOLIZE",
                "YING_RESIDENT",
                "YING_DUMP_CONTROL_FILE",
                "YING_MEMORY_LIMIT_PCT",
                "YING_MEMORY_LIMIT_BYTES",
                "YING_PEAK_DUMP_PCT",
            ]
        );
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        // One row per field: a Config literal must name all 40 fields (checked by the
        // compiler in `all_set`), and each row sets a different one.
        assert_eq!(VARIABLES.len(), 40);
        for v in VARIABLES {
            assert!(v.name.starts_with(PREFIX) && !is_ignored(v.name), "{}", v.name);
            assert!(v.name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'), "{}", v.name);
            assert!(!v.default_text().is_empty(), "{}", v.name);
            assert!(v.meaning.ends_with('.'), "{}", v.name);
            assert!(!v.meaning.contains("  "), "{}: {}", v.name, v.meaning);
        }
    }

    #[test]
    fn markdown_table_lists_every_variable() {
        let table = Config::markdown_table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(table.ends_with('\n'));
        assert_eq!(lines.len(), 2 + VARIABLES.len());
        assert_eq!(lines[0], "| Variable | Default | Meaning |");
        assert_eq!(lines[1], "|---|---|---|");
        for (line, v) in lines[2..].iter().zip(VARIABLES) {
            assert_eq!(*line, format!("| `{}` | {} | {} |", v.name, v.default_text(), v.meaning));
        }
        assert!(lines[2].starts_with("| `YING_ENABLED` | true | "));
    }

    #[test]
    fn documented_defaults_agree_with_config_default() {
        // Start from a config where every field differs from its default, then apply each
        // row's default text with that row's own parser.
        let (_, mut config) = all_set();
        for v in VARIABLES {
            let default = v.default_text();
            let text = if default == "unset" { "" } else { &default };
            assert_eq!((v.set)(&mut config, text), Ok(()), "{}", v.name);
        }
        assert_eq!(config, Config::default());
        // And each default text is accepted as a value, silently.
        let defaults: Vec<(String, String)> = VARIABLES
            .iter()
            .filter(|v| v.default_text() != "unset")
            .map(|v| (v.name.to_string(), v.default_text()))
            .collect();
        assert_eq!(Config::from_vars(defaults), (Config::default(), Vec::new()));
    }

    #[test]
    fn defaults_are_written_as_the_variables_spell_them() {
        // The README's Default column, made from the default values.
        let shown: Vec<String> = VARIABLES.iter().map(VarDoc::default_text).collect();
        assert_eq!(
            shown,
            [
                "true",
                "unset",
                "524288",
                "unset",
                "true",
                "false",
                "ying-profiles",
                "0600",
                "true",
                "300",
                "10",
                "true",
                "false",
                "true",
                "true",
                "20",
                "50",
                "5",
                "100",
                "512MiB",
                "64MiB,1%",
                "64GiB",
                "400000",
                "unset",
                "unset",
                "unset",
                "15",
                "unset",
                "unset",
                "unset",
                "unset",
                "on",
                "500",
                "false",
                "in-process",
                "true",
                "true",
                "90",
                "unset",
                "0",
            ]
        );
        assert_eq!(in_binary_units(&0), "0");
        assert_eq!(in_binary_units(&1536), "1536");
        assert_eq!(in_binary_units(&(3 << 20)), "3MiB");
        assert_eq!(octal_mode(&0o640), "0640");
        let labels = vec![("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())];
        assert_eq!(labels.shown(), "a=1,b=2");
        assert_eq!(parse_labels(&labels.shown()), Ok(labels));
        assert_eq!(Some(12).shown(), "12");
    }
}
