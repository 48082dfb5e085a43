//! The runner's settings: [`ProfilerRunner`]'s fields, their defaults, the one builder that
//! sets every one of them (the report's, the services' and the triggers'), its validation, and
//! the conversion from a parsed [`Config`] (the `YING_*` variables), including what a
//! configuration sets on the engine (one function for both front ends).
//!
//! The services (`serve/`) and the triggers (`triggers/`) own the structs of their settings;
//! they are fields here and their setters are here, so that neither module imports the runner.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use crate::callstack::Measurement;
use crate::config::{
    Config, DEFAULT_DISK_FLOOR, DEFAULT_LIVE_INTERVAL_MS, DEFAULT_RETAIN_BYTES,
    DEFAULT_RETAIN_SETS, DiskFloor, HttpAddr, HttpToken, LiveFile,
};
use crate::report::ReportOptions;
use crate::report::files::{DEFAULT_FILE_MODE, ReportDir, Retention};
use crate::serve::Services;
use crate::triggers::TriggerSettings;

// The defaults are declared once, beside their settings' rows in `config.rs`.
pub use crate::config::{
    DEFAULT_CHECK_INTERVAL_SECS, DEFAULT_MAX_REPORT_SETS, DEFAULT_PCT_CHANGE_TRIGGER,
    DEFAULT_REPORTING_PATH, DEFAULT_TOP_K,
};

/// Decides how collected stats are reported: how often to look, how much change is worth a
/// report, what to measure, where output goes and in what form.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfilerRunner {
    pub(super) check_interval_secs: usize,
    pub(super) report_pct_change_trigger: usize,
    pub(super) reporting_path: String,
    pub(super) expand_frames: bool,
    pub(super) fold_framework_frames: bool,
    pub(super) gen_flamegraphs: bool,
    pub(super) measure_allocated_not_retained: bool,
    pub(super) top_k: usize,
    pub(super) report_at_exit: bool,
    /// Say on stderr where the exit report went (see the builder's setter).
    pub(super) announce_exit_report: bool,
    pub(super) report_file_mode: u32,
    pub(super) max_report_sets: usize,
    /// A process that exits within this many seconds of its start writes its exit report raw
    /// (`YING_SHORT_PROCESS_SECS`; 0: always in full).
    pub(super) short_process_secs: u64,
    /// How much of the executable's output the reporting directory keeps across its
    /// processes (`YING_RETAIN_SETS`, `YING_RETAIN_BYTES`).
    pub(super) retention: Retention,
    /// The free space the reporting filesystem keeps (`YING_MIN_FREE_SPACE`).
    pub(super) min_free_space: DiskFloor,
    pub(super) dir: SharedDir,
    /// The endpoint and pushes (`crate::serve`).
    pub(super) services: Services,
    /// Dump triggers (signal, control files, memory limit, new highs): `src/triggers/`.
    pub(super) triggers: TriggerSettings,
    /// The live file (`report/live/`).
    pub(super) live: LiveSettings,
}

/// The live file's settings (`YING_LIVE_FILE`, `YING_LIVE_INTERVAL_MS`, `YING_KEEP_LIVE_FILE`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LiveSettings {
    pub(super) file: LiveFile,
    pub(super) interval_ms: u64,
    pub(super) keep: bool,
    /// `YING_SYMBOLIZE=offline`: name nothing in the process, leave it to `ying report`.
    pub(super) symbolize_offline: bool,
}

impl Default for LiveSettings {
    fn default() -> Self {
        Self {
            file: LiveFile::default(),
            interval_ms: DEFAULT_LIVE_INTERVAL_MS,
            keep: false,
            symbolize_offline: false,
        }
    }
}

/// The reporting directory of a runner, resolved and identified once and shared by all its clones
/// (the copy kept for a `fork` child, the exit report's). Not part of a runner's settings: two
/// runners with the same settings are equal whether or not they have started.
#[derive(Clone, Default)]
pub(super) struct SharedDir(pub(super) Arc<DirSlot>);

#[derive(Default)]
pub(super) struct DirSlot {
    /// The reporting path made absolute, at the first use.
    pub(super) absolute: OnceLock<PathBuf>,
    /// The directory's identity, once creating or opening it succeeded.
    pub(super) open: OnceLock<ReportDir>,
    /// The live file's directory when it is not the reporting directory, once opened.
    pub(super) live: OnceLock<ReportDir>,
}

impl PartialEq for SharedDir {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for SharedDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.open.get() {
            Some(d) => write!(f, "identified({})", d.path().display()),
            None => f.write_str("not open"),
        }
    }
}

impl Default for ProfilerRunner {
    fn default() -> Self {
        Self {
            check_interval_secs: DEFAULT_CHECK_INTERVAL_SECS,
            report_pct_change_trigger: DEFAULT_PCT_CHANGE_TRIGGER,
            reporting_path: DEFAULT_REPORTING_PATH.to_string(),
            expand_frames: false,
            fold_framework_frames: true,
            gen_flamegraphs: true,
            measure_allocated_not_retained: false,
            top_k: DEFAULT_TOP_K,
            report_at_exit: true,
            announce_exit_report: true,
            report_file_mode: DEFAULT_FILE_MODE,
            max_report_sets: DEFAULT_MAX_REPORT_SETS,
            short_process_secs: 0,
            retention: Retention { sets: DEFAULT_RETAIN_SETS, bytes: DEFAULT_RETAIN_BYTES },
            min_free_space: DEFAULT_DISK_FLOOR,
            dir: SharedDir::default(),
            services: Services::default(),
            triggers: TriggerSettings::default(),
            live: LiveSettings::default(),
        }
    }
}

/// Why [`ProfilerRunnerBuilder::build`] refused a setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilerRunnerBuilderError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for ProfilerRunnerBuilderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProfilerRunner: `{}` {}", self.field, self.reason)
    }
}

impl std::error::Error for ProfilerRunnerBuilderError {}

/// Builds a [`ProfilerRunner`]; anything left out takes the default.
#[derive(Clone, Debug, Default)]
pub struct ProfilerRunnerBuilder {
    inner: Option<ProfilerRunner>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty),* $(,)?) => {
        impl ProfilerRunnerBuilder {
            $(
                $(#[$doc])*
                pub fn $name(&mut self, value: $ty) -> &mut Self {
                    self.runner_mut().$name = value;
                    self
                }
            )*
        }
    };
}

// Numbers and switches take their own type, so that a plain literal (`.check_interval_secs(60)`,
// `.report_file_mode(0o640)`) compiles; the path takes anything that becomes a `String`.
setters! {
    /// Seconds between checks of retained memory. 0 means no periodic checks and no report
    /// thread, as `YING_CHECK_INTERVAL_SECS=0` does: the exit report (if
    /// [`report_at_exit`](Self::report_at_exit)) and [`RunnerHandle::dump_now`] (written on the
    /// calling thread) still work, the endpoint and pushes still start, and the dump triggers
    /// that need the report thread (signal, control files, memory limit, new highs) are not
    /// installed.
    ///
    /// [`RunnerHandle::dump_now`]: super::RunnerHandle::dump_now
    check_interval_secs: usize,
    /// Percent change of retained memory (since the last report) that triggers a report.
    report_pct_change_trigger: usize,
    /// Rank stacks by total allocated bytes instead of retained bytes.
    measure_allocated_not_retained: bool,
    /// Also write an SVG flamegraph with each report.
    gen_flamegraphs: bool,
    /// List every frame in reports, each inlined frame with its own `file:line`, nothing
    /// collapsed or folded.
    expand_frames: bool,
    /// Fold runs of framework frames (crates from the cargo registry, Rust's standard library)
    /// into one line such as `... 27 frames in tokio, hyper, axum ...` (true by default).
    fold_framework_frames: bool,
    /// Stacks listed in each text report.
    top_k: usize,
    /// Write a final report set when the process exits through `exit()` or a return from
    /// `main` (true by default; only in the process that started the runner, and not when the
    /// process took no sample).
    report_at_exit: bool,
    /// Say once on stderr, after the exit report, where it went:
    /// `ying: exit report: DIR/ying.EXE.PID.SEQ.TIME.txt (page: DIR/ying.EXE.PID.html)` (true
    /// by default; false writes it silently). The `LD_PRELOAD` shim writes its processes' exit
    /// reports silently: `ying run` and `scripts/run-with-ying.sh` sum them up instead.
    announce_exit_report: bool,
    /// Permission bits of report files (0600 by default; owner read and write are always
    /// kept, execute and special bits never set).
    report_file_mode: u32,
    /// Report sets of this process kept in the reporting directory: after each set the runner
    /// writes, the oldest sets of the same process (same executable and pid) beyond this
    /// number are removed, every file of a set, and nothing else is touched. 0 keeps every
    /// set. Default: [`DEFAULT_MAX_REPORT_SETS`].
    max_report_sets: usize,
}

impl ProfilerRunnerBuilder {
    /// The runner being built.
    fn runner_mut(&mut self) -> &mut ProfilerRunner {
        self.inner.get_or_insert_with(ProfilerRunner::default)
    }

    /// A process that exits within `secs` seconds of its start (a `fork` child: of its fork)
    /// writes its exit report as a raw profile (`<set>.live`) that `ying report DIR`, `ying
    /// view` and `ying run` turn into the full set outside the process (`YING_SHORT_PROCESS_SECS`,
    /// 5 by default in the environment). 0, the builder's default, writes every exit report in
    /// full: a program that builds its runner knows how long it runs.
    pub fn short_process_secs(&mut self, secs: u64) -> &mut Self {
        self.runner_mut().short_process_secs = secs;
        self
    }

    /// Report sets (and live files) of one executable the reporting directory keeps across
    /// its processes (`YING_RETAIN_SETS`, default 100; 0 keeps all): after each set, the oldest
    /// of ended processes beyond this number are removed.
    pub fn retain_sets(&mut self, sets: usize) -> &mut Self {
        self.runner_mut().retention.sets = sets;
        self
    }

    /// Bytes of one executable's sets and live files the reporting directory keeps across its
    /// processes (`YING_RETAIN_BYTES`, default 512 MiB; 0 keeps all).
    pub fn retain_bytes(&mut self, bytes: u64) -> &mut Self {
        self.runner_mut().retention.bytes = bytes;
        self
    }

    /// The free space the reporting directory's filesystem keeps (`YING_MIN_FREE_SPACE`;
    /// default 64 MiB and 1 %): a report set or a live-file version is written only while the
    /// space free to unprivileged writers is at least the larger of the floor's bytes, its
    /// percentage of the filesystem and four times the last one written. [`DiskFloor::NONE`]
    /// turns it off.
    pub fn min_free_space(&mut self, floor: DiskFloor) -> &mut Self {
        self.runner_mut().min_free_space = floor;
        self
    }

    /// Where the live file goes ([`LiveFile`], `YING_LIVE_FILE`; see `ying report`): in the
    /// reporting directory (the default), nowhere, or in another directory.
    pub fn live_file(&mut self, value: LiveFile) -> &mut Self {
        self.runner_mut().live.file = value;
        self
    }

    /// Milliseconds between versions of the live file while memory changes
    /// (`YING_LIVE_INTERVAL_MS`, 500 by default).
    pub fn live_interval_ms(&mut self, value: u64) -> &mut Self {
        self.runner_mut().live.interval_ms = value;
        self
    }

    /// Keep the live file after a normal exit (`YING_KEEP_LIVE_FILE`).
    pub fn keep_live_file(&mut self, value: bool) -> &mut Self {
        self.runner_mut().live.keep = value;
        self
    }

    /// Name no frame in the process (`YING_SYMBOLIZE=offline`): no debug info or symbol table
    /// is read, reports show `module+0xoffset`, and each set gets a `.live` raw profile that
    /// `ying report` names outside the process. Applies to the whole process from the runner's
    /// start.
    pub fn symbolize_offline(&mut self, value: bool) -> &mut Self {
        self.runner_mut().live.symbolize_offline = value;
        self
    }

    /// Directory for report sets; created if missing.
    pub fn reporting_path(&mut self, value: impl Into<String>) -> &mut Self {
        self.runner_mut().reporting_path = value.into();
        self
    }

    /// Serve `/debug/pprof/heap`, `/debug/pprof/allocs` and Ying's own routes (see
    /// [`crate::serve`]) at `addr` from the runner's start, e.g. `127.0.0.1:6060`
    /// (`YING_HTTP_ADDR` for [`ProfilerRunner::from_env`]). An address other than loopback is
    /// said on stderr.
    pub fn http_addr(&mut self, addr: SocketAddr) -> &mut Self {
        self.runner_mut().services.http_addr = Some(HttpAddr::Tcp(addr));
        self
    }

    /// Serve the same routes on a unix socket at `path` (`YING_HTTP_ADDR=unix:PATH`), made mode
    /// 0600: the peer's credentials decide access, as on loopback. A stale socket there is
    /// replaced; any other file is left, and the endpoint not started (one line).
    pub fn http_unix(&mut self, path: impl Into<PathBuf>) -> &mut Self {
        self.runner_mut().services.http_addr = Some(HttpAddr::Unix(path.into()));
        self
    }

    /// A bearer token for the endpoint (`YING_HTTP_TOKEN`): requests carrying
    /// `Authorization: Bearer TOKEN` may read the profiles from any peer, and an address other
    /// than loopback is served only with one. Without it the endpoint answers the process's
    /// own user and root only; `POST` routes answer only them, token or not.
    pub fn http_token(&mut self, token: HttpToken) -> &mut Self {
        self.runner_mut().services.http_token = Some(token);
        self
    }

    /// Push the heap profile every [`push_interval_secs`](Self::push_interval_secs) to the
    /// Pyroscope-compatible server at `url` (`http://host:port`, see [`crate::serve::push`];
    /// `YING_PUSH_URL`).
    pub fn push_url(&mut self, url: impl Into<String>) -> &mut Self {
        self.runner_mut().services.push_url = Some(url.into());
        self
    }

    /// Seconds between pushes (at least 1; default [`DEFAULT_PUSH_INTERVAL_SECS`](crate::serve::DEFAULT_PUSH_INTERVAL_SECS)).
    pub fn push_interval_secs(&mut self, secs: u64) -> &mut Self {
        self.runner_mut().services.push_interval_secs = secs.max(1);
        self
    }

    /// Push OpenTelemetry profiles every [`push_interval_secs`](Self::push_interval_secs) to
    /// the OTLP/HTTP receiver at `url` (`http://host:port`, to which OTLP's profiles path is
    /// added, or a full URL), or over OTLP/gRPC to `grpc://host:port` with the `otlp-grpc`
    /// feature; see [`crate::serve::otlp`]; `YING_OTLP_URL`.
    pub fn otlp_url(&mut self, url: impl Into<String>) -> &mut Self {
        self.runner_mut().services.otlp_url = Some(crate::config::with_otlp_path(url.into()));
        self
    }

    /// Headers of every push, Pyroscope's and OTLP's (`YING_PUSH_HEADERS`): an
    /// `authorization` token, a tenant.
    pub fn push_headers<K: Into<String>, V: Into<String>>(
        &mut self,
        headers: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        self.runner_mut().services.push_headers =
            headers.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        self
    }

    /// Labels of pushed profiles; `service_name` names the application.
    pub fn push_labels<K: Into<String>, V: Into<String>>(
        &mut self,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        self.runner_mut().services.push_labels =
            labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        self
    }

    /// Writes a report set when the process receives signal `sig` (e.g. `libc::SIGUSR2`),
    /// within 100 ms; 0 means none (the default). The handler is installed when the runner
    /// starts, only if the program has not set its own disposition for the signal; a handler
    /// the program installs later wins (Ying says so on stderr). Refused at `build`:
    /// `SIGKILL`, `SIGSTOP`, fault signals, `SIGCHLD`, 32 and 33.
    pub fn dump_signal(&mut self, sig: i32) -> &mut Self {
        self.runner_mut().triggers.dump_signal = (sig != 0).then_some(sig);
        self
    }

    /// Watches the control files `<reporting path>/dump` (every process writing there) and
    /// `<reporting path>/dump.<pid>` (one process, which removes it) and writes a report set
    /// within 100 ms of a touch (true by default).
    pub fn dump_control_file(&mut self, on: bool) -> &mut Self {
        self.runner_mut().triggers.dump_control_file = on;
        self
    }

    /// Writes one report set when the process's resident set first reaches `pct` percent of
    /// its cgroup's memory limit, again only after it fell below (95 % of that level); 0
    /// turns it off, default 90. No limit, no dump.
    pub fn memory_limit_pct(&mut self, pct: u64) -> &mut Self {
        self.runner_mut().triggers.memory_limit_pct = pct;
        self
    }

    /// A memory limit in bytes that replaces the cgroup's for the near-limit dump (meant for
    /// tests); 0 uses the cgroup's (the default).
    pub fn memory_limit_bytes(&mut self, bytes: u64) -> &mut Self {
        self.runner_mut().triggers.memory_limit_bytes = (bytes != 0).then_some(bytes);
        self
    }

    /// Writes a report set each time the exact retained total exceeds the last high dumped
    /// (at first, the total when the report thread started) by more than `pct` percent; 0
    /// (the default) turns it off.
    pub fn peak_dump_pct(&mut self, pct: u64) -> &mut Self {
        self.runner_mut().triggers.peak_dump_pct = pct;
        self
    }

    /// Validates and returns the runner. Errors name the field: a zero top-k, an empty path, or
    /// a path that exists and is not a directory.
    pub fn build(&self) -> Result<ProfilerRunner, ProfilerRunnerBuilderError> {
        let mut r = self.inner.clone().unwrap_or_default();
        r.dir = SharedDir::default();
        r.validate()?;
        Ok(r)
    }
}

/// Sets what `cfg` says of sampling on the engine's `settings` (interval, giant limit, stack
/// table bound, seed): the same for both front ends (`ProfilerRunner::from_env` and the
/// preload shim's constructor), which each decide when sampling is turned on.
#[doc(hidden)]
pub fn apply_sampling_config(cfg: &Config, settings: &crate::engine::hooks::Settings) {
    // Every one, as if each variable were set (`enabled` is the caller's to apply).
    apply_sampling_config_set(cfg, settings, &|name| name != "YING_ENABLED");
}

/// [`apply_sampling_config`] for the variables set only (`is_set` says which, by name): the
/// sampling settings a program gave its profiler in code stay unless a variable replaces them.
pub(crate) fn apply_sampling_config_set(
    cfg: &Config,
    settings: &crate::engine::hooks::Settings,
    is_set: &dyn Fn(&str) -> bool,
) {
    if is_set("YING_SYMBOLIZE") {
        crate::symbols::symbolize::set_offline(cfg.symbolize_offline);
    }
    if is_set("YING_RESIDENT") {
        crate::report::model::resident::set_enabled(cfg.resident);
    }
    if is_set("YING_SAMPLE_INTERVAL_BYTES") {
        settings.set_sample_interval(cfg.sample_interval_bytes);
    }
    if is_set("YING_MAX_ALLOC_BYTES") {
        settings.set_max_alloc_bytes(cfg.max_alloc_bytes);
    }
    if is_set("YING_MAX_STACKS") {
        settings.set_max_stacks(cfg.max_stacks);
    }
    if let (true, Some(seed)) = (is_set("YING_SEED"), cfg.seed) {
        settings.set_seed(seed);
    }
    if is_set("YING_ENABLED") {
        settings.set_enabled(cfg.enabled);
    }
}

/// The service settings of a parsed configuration.
fn services_from_config(cfg: &Config) -> Services {
    Services {
        http_addr: cfg.http_addr.clone(),
        http_token: cfg.http_token.clone(),
        push_url: cfg.push_url.clone(),
        push_interval_secs: cfg.push_interval_secs.max(1),
        push_labels: cfg.push_labels.clone(),
        otlp_url: cfg.otlp_url.clone(),
        push_headers: cfg.push_headers.clone(),
    }
}

/// The trigger settings of a parsed configuration.
fn triggers_from_config(cfg: &Config) -> TriggerSettings {
    TriggerSettings {
        dump_signal: cfg.dump_signal,
        dump_control_file: cfg.dump_control_file,
        memory_limit_pct: cfg.memory_limit_pct,
        memory_limit_bytes: cfg.memory_limit_bytes,
        peak_dump_pct: cfg.peak_dump_pct,
    }
}

impl ProfilerRunner {
    /// A runner from explicit settings (0.3.0 signature).
    pub fn new(
        check_interval_secs: usize,
        report_pct_change_trigger: usize,
        reporting_path: &str,
        expand_frames: bool,
        gen_flamegraphs: bool,
        measure_allocated_not_retained: bool,
    ) -> Self {
        Self {
            check_interval_secs,
            report_pct_change_trigger,
            reporting_path: reporting_path.to_string(),
            expand_frames,
            gen_flamegraphs,
            measure_allocated_not_retained,
            ..Self::default()
        }
    }

    /// The seed's `start_profiling` values: 300 s, 10 %, flamegraphs, retained, `ying-profiles`,
    /// and a report at exit.
    pub fn seed_defaults() -> Self {
        Self::new(300, 10, DEFAULT_REPORTING_PATH, false, true, false)
    }

    /// The seed's values as a configuration: the table's defaults, but a short process's exit
    /// report written whole (`YING_SHORT_PROCESS_SECS=0`: a Rust program's exit report is read
    /// without `ying report`). `ProfilerRunner::from_config` of it is [`seed_defaults`](Self::seed_defaults).
    pub fn seed_config() -> Config {
        Config { short_process_secs: 0, ..Config::default() }
    }

    /// A runner from a parsed [`crate::config::Config`].
    pub fn from_config(cfg: &Config) -> Self {
        Self {
            check_interval_secs: cfg.check_interval_secs as usize,
            report_pct_change_trigger: cfg.report_pct_change_trigger as usize,
            reporting_path: cfg.reporting_path.display().to_string(),
            expand_frames: cfg.expand_frames,
            fold_framework_frames: cfg.fold_framework_frames,
            gen_flamegraphs: cfg.gen_flamegraphs,
            measure_allocated_not_retained: cfg.measure_allocated_not_retained,
            top_k: cfg.top_k,
            report_at_exit: cfg.report_at_exit,
            announce_exit_report: true,
            report_file_mode: cfg.report_file_mode,
            max_report_sets: cfg.max_report_sets,
            short_process_secs: cfg.short_process_secs,
            retention: Retention { sets: cfg.retain_sets, bytes: cfg.retain_bytes },
            min_free_space: cfg.min_free_space,
            dir: SharedDir::default(),
            services: services_from_config(cfg),
            triggers: triggers_from_config(cfg),
            live: LiveSettings {
                file: cfg.live_file.clone(),
                interval_ms: cfg.live_interval_ms,
                keep: cfg.keep_live_file,
                symbolize_offline: cfg.symbolize_offline,
            },
        }
    }

    pub(super) fn validate(&self) -> Result<(), ProfilerRunnerBuilderError> {
        let err = |field, reason: &str| {
            Err(ProfilerRunnerBuilderError { field, reason: reason.to_string() })
        };
        if self.top_k == 0 {
            return err("top_k", "must be at least 1");
        }
        if !(50..=3_600_000).contains(&self.live.interval_ms) {
            return err("live_interval_ms", "must be from 50 to 3600000");
        }
        self.triggers
            .validate()
            .map_err(|(field, reason)| ProfilerRunnerBuilderError { field, reason })?;
        if self.reporting_path.is_empty() {
            return err("reporting_path", "must not be empty");
        }
        if self.report_file_mode & !0o666 != 0 || self.report_file_mode & 0o600 != 0o600 {
            return err(
                "report_file_mode",
                "must be from 0o600 to 0o666 (owner read and write, no execute or special bits)",
            );
        }
        let p = std::path::Path::new(&self.reporting_path);
        if p.exists() && !p.is_dir() {
            return Err(ProfilerRunnerBuilderError {
                field: "reporting_path",
                reason: format!("{} exists and is not a directory", p.display()),
            });
        }
        Ok(())
    }

    /// Seconds between checks.
    pub fn check_interval_secs(&self) -> usize {
        self.check_interval_secs
    }
    /// Percent change that triggers a report.
    pub fn report_pct_change_trigger(&self) -> usize {
        self.report_pct_change_trigger
    }
    /// Directory for report sets.
    pub fn reporting_path(&self) -> &str {
        &self.reporting_path
    }
    /// Whether stacks are ranked by allocated bytes.
    pub fn measure_allocated_not_retained(&self) -> bool {
        self.measure_allocated_not_retained
    }
    /// Whether flamegraphs are written.
    pub fn gen_flamegraphs(&self) -> bool {
        self.gen_flamegraphs
    }
    /// Whether every frame is listed (inlined frames with their own `file:line`).
    pub fn expand_frames(&self) -> bool {
        self.expand_frames
    }
    /// Whether runs of framework frames fold into one line.
    pub fn fold_framework_frames(&self) -> bool {
        self.fold_framework_frames
    }
    /// Whether a final report is written at exit.
    pub fn report_at_exit(&self) -> bool {
        self.report_at_exit
    }
    /// Permission bits of report files.
    pub fn report_file_mode(&self) -> u32 {
        self.report_file_mode
    }
    /// Report sets of this process kept in the reporting directory (0: all).
    pub fn max_report_sets(&self) -> usize {
        self.max_report_sets
    }
    /// The endpoint's address, if it serves one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        match &self.services.http_addr {
            Some(HttpAddr::Tcp(a)) => Some(*a),
            _ => None,
        }
    }

    /// The unix socket the endpoint listens on, if that is where.
    pub fn http_unix(&self) -> Option<&std::path::Path> {
        match &self.services.http_addr {
            Some(HttpAddr::Unix(p)) => Some(p),
            _ => None,
        }
    }
    /// The push target, if profiles are pushed.
    pub fn push_url(&self) -> Option<&str> {
        self.services.push_url.as_deref()
    }

    /// What to rank by.
    pub fn measurement(&self) -> Measurement {
        if self.measure_allocated_not_retained {
            Measurement::AllocatedBytes
        } else {
            Measurement::RetainedBytes
        }
    }

    /// The report options these settings imply.
    pub fn report_options(&self) -> ReportOptions {
        ReportOptions {
            measurement: self.measurement(),
            top_k: self.top_k.max(1),
            expand_frames: self.expand_frames,
            fold_framework_frames: self.fold_framework_frames,
            gen_flamegraphs: self.gen_flamegraphs,
        }
    }

    /// Whether a change from `last` to `now` retained bytes is worth a report.
    pub fn should_report(&self, last: Option<u64>, now: u64) -> bool {
        match last {
            None => true,
            Some(0) => now > 0,
            Some(l) => {
                let delta = now.abs_diff(l) as u128 * 100;
                delta >= self.report_pct_change_trigger as u128 * l as u128
            }
        }
    }

    /// The same runner without the exit report (a `fork` child inherits the parent's).
    pub fn without_exit_report(&self) -> Self {
        Self { report_at_exit: false, ..self.clone() }
    }

    /// The same runner writing its exit report without saying where (the `LD_PRELOAD` shim's:
    /// `ying run` sums up the sets of every process it ran).
    #[doc(hidden)]
    pub fn exit_report_unannounced(&self) -> Self {
        Self { announce_exit_report: false, ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_left_alone_builds_the_defaults() {
        let r = ProfilerRunnerBuilder::default().build().unwrap();
        assert_eq!(r, ProfilerRunner::default());
        assert_eq!(r.check_interval_secs(), DEFAULT_CHECK_INTERVAL_SECS);
        assert_eq!(r.report_pct_change_trigger(), DEFAULT_PCT_CHANGE_TRIGGER);
        assert_eq!(r.reporting_path(), DEFAULT_REPORTING_PATH);
        assert_eq!(r.max_report_sets(), DEFAULT_MAX_REPORT_SETS);
        assert_eq!(r.report_file_mode(), 0o600);
        assert!(r.report_at_exit() && r.gen_flamegraphs() && r.fold_framework_frames());
        assert!(!r.expand_frames() && !r.measure_allocated_not_retained());
        assert_eq!(r.services.push_interval_secs, crate::serve::DEFAULT_PUSH_INTERVAL_SECS);
        assert_eq!(r.http_addr(), None);
        assert_eq!(r.triggers, TriggerSettings::default());
        assert_eq!(ProfilerRunner::seed_defaults(), r, "the seed's values are the defaults");
    }

    #[test]
    fn services_and_triggers_are_set_by_the_one_builder() {
        let addr: SocketAddr = "127.0.0.1:6060".parse().unwrap();
        let r = ProfilerRunnerBuilder::default()
            .http_addr(addr)
            .push_url("http://p:4040")
            .push_interval_secs(0)
            .push_labels([("service_name", "x")])
            .otlp_url("http://c:4318")
            .push_headers([("authorization", "Bearer t")])
            .dump_signal(libc::SIGUSR2)
            .dump_control_file(false)
            .memory_limit_pct(50)
            .memory_limit_bytes(0)
            .peak_dump_pct(20)
            .build()
            .unwrap();
        assert_eq!(r.http_addr(), Some(addr));
        assert_eq!(r.push_url(), Some("http://p:4040"));
        assert_eq!(r.services.push_interval_secs, 1, "at least one second");
        assert_eq!(r.services.push_labels, [("service_name".to_string(), "x".to_string())]);
        let otlp = r.services.otlp_url.as_deref();
        assert_eq!(otlp, Some("http://c:4318/v1development/profiles"), "OTLP's path added");
        let grpc = ProfilerRunnerBuilder::default().otlp_url("grpc://c:4317").build().unwrap();
        assert_eq!(grpc.services.otlp_url.as_deref(), Some("grpc://c:4317"), "no path for gRPC");
        assert_eq!(r.services.push_headers, [("authorization".into(), "Bearer t".into())]);
        assert_eq!(r.triggers.dump_signal, Some(libc::SIGUSR2));
        assert!(!r.triggers.dump_control_file);
        assert_eq!(r.triggers.memory_limit_pct, 50);
        assert_eq!(r.triggers.memory_limit_bytes, None, "0 is the cgroup's");
        assert_eq!(r.triggers.peak_dump_pct, 20);
    }

    #[test]
    fn build_names_the_field_at_fault() {
        let field = |b: &mut ProfilerRunnerBuilder| b.build().unwrap_err().field;
        assert_eq!(field(ProfilerRunnerBuilder::default().top_k(0)), "top_k");
        assert_eq!(field(ProfilerRunnerBuilder::default().reporting_path("")), "reporting_path");
        assert_eq!(
            field(ProfilerRunnerBuilder::default().report_file_mode(0o700)),
            "report_file_mode"
        );
        assert_eq!(
            field(ProfilerRunnerBuilder::default().report_file_mode(0o400)),
            "report_file_mode"
        );
        assert_eq!(
            field(ProfilerRunnerBuilder::default().memory_limit_pct(101)),
            "memory_limit_pct"
        );
        assert_eq!(
            field(ProfilerRunnerBuilder::default().dump_signal(libc::SIGKILL)),
            "dump_signal"
        );
        let file = std::env::temp_dir().join(format!("ying-settings-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let e = ProfilerRunnerBuilder::default()
            .reporting_path(file.to_str().unwrap())
            .build()
            .unwrap_err();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(e.field, "reporting_path");
        assert!(e.to_string().contains("exists and is not a directory"), "{e}");
    }

    #[test]
    fn a_change_is_worth_a_report_from_the_trigger_on() {
        let r = ProfilerRunner::default(); // 10 %
        assert!(r.should_report(None, 0), "the first check always reports");
        assert!(!r.should_report(Some(0), 0));
        assert!(r.should_report(Some(0), 1));
        assert!(!r.should_report(Some(1000), 1099));
        assert!(r.should_report(Some(1000), 1100));
        assert!(r.should_report(Some(1000), 900), "down as well as up");
    }

    #[test]
    fn a_configuration_sets_the_engine_and_the_runner() {
        let cfg = Config {
            sample_interval_bytes: 4096,
            max_alloc_bytes: 1 << 30,
            // (`max_stacks` is process-wide: left at its default in this test binary.)
            seed: Some(99),
            check_interval_secs: 7,
            push_interval_secs: 0,
            ..Config::default()
        };
        let settings = crate::engine::hooks::Settings::new(1, 1);
        apply_sampling_config(&cfg, &settings);
        assert_eq!(settings.sample_interval(), 4096);
        assert_eq!(settings.max_alloc_bytes(), 1 << 30);
        let r = ProfilerRunner::from_config(&cfg);
        assert_eq!(r.check_interval_secs(), 7);
        assert_eq!(r.services.push_interval_secs, 1);
    }

    /// `start_profiling()` reads the environment over the seed's values as a configuration:
    /// that configuration must make the seed's runner.
    #[test]
    fn the_seed_config_makes_the_seed_runner() {
        let seed = ProfilerRunner::seed_config();
        assert_eq!(ProfilerRunner::seed_defaults(), ProfilerRunner::from_config(&seed));
    }
}
