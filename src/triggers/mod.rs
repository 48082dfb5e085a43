//! Dump triggers: report sets written because something asked for one now, rather than at a
//! periodic check: a signal (`YING_DUMP_SIGNAL`), a control file in the reporting directory
//! (`dump`, `dump.<pid>`), the process's resident set nearing its cgroup's memory limit
//! (`YING_MEMORY_LIMIT_PCT`), and new highs of the retained total (`YING_PEAK_DUMP_PCT`).
//!
//! All of them are looked at by the report thread ([`crate::runner`]), which wakes every
//! [`TICK`] while any of them is armed and the program's memory moves or a memory limit is
//! watched, every [`IDLE_TICK`] otherwise (an idle program is not woken ten times a second:
//! measured by `bench/idle_wakeups.sh`), and only at its check interval when none is armed. A set they
//! write names its reason in the text report's `reason:` header line. Nothing here runs in an
//! allocation hook; the signal handler only stores to an atomic (see [`signal`]).

pub(crate) mod control_file;
pub(crate) mod limit;
pub(crate) mod reason;
pub(crate) mod signal;

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How often the report thread looks at the triggers while one is armed.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// How often instead while nothing was allocated or freed since the last look and no memory
/// limit is watched: a signal or a control file is then served within a second. (With a
/// limit watched, every [`TICK`]: a burst after a quiet spell, measured by the triggers tests,
/// crossed the near-limit level 50 MiB past it when looked at a second late.)
pub(crate) const IDLE_TICK: Duration = Duration::from_secs(1);

/// The trigger settings of a runner (set by `ProfilerRunnerBuilder`, and from the `YING_*`
/// table by `ProfilerRunner::from_config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TriggerSettings {
    /// The dump signal's number, if any.
    pub(crate) dump_signal: Option<i32>,
    /// Whether the control files are watched.
    pub(crate) dump_control_file: bool,
    /// Percent of the memory limit that triggers the near-limit dump; 0: off.
    pub(crate) memory_limit_pct: u64,
    /// A limit that replaces the cgroup's (tests).
    pub(crate) memory_limit_bytes: Option<u64>,
    /// Percent beyond the last dumped high that triggers a new-peak dump; 0: off.
    pub(crate) peak_dump_pct: u64,
}

impl Default for TriggerSettings {
    fn default() -> Self {
        Self {
            dump_signal: None,
            dump_control_file: true,
            memory_limit_pct: 90,
            memory_limit_bytes: None,
            peak_dump_pct: 0,
        }
    }
}

impl TriggerSettings {
    /// Checks the settings given to the builder: the field at fault and what is wrong with it.
    pub(crate) fn validate(&self) -> Result<(), (&'static str, String)> {
        let err = |field, reason: String| Err((field, reason));
        if let Some(n) = self.dump_signal
            && let Err(why) = signal::parse(&n.to_string())
        {
            return err("dump_signal", why);
        }
        if self.memory_limit_pct > 100 {
            return err("memory_limit_pct", "must be from 0 (off) to 100".to_string());
        }
        Ok(())
    }
}

/// When the runner was prepared, and in which process (control files older than this are
/// ignored; a `fork` child counts from its own report thread's start instead).
static PREPARED_AT: Mutex<Option<(SystemTime, u32)>> = Mutex::new(None);

/// Sets the triggers up at the runner's start (before its report thread exists): installs the
/// signal handler. `thread` says whether a report thread will run; without one, nothing could
/// serve a trigger, and a dump signal set by the user gets a warning instead of a handler.
pub(crate) fn install(s: &TriggerSettings, thread: bool) {
    let mut at = PREPARED_AT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    at.get_or_insert_with(|| (SystemTime::now(), std::process::id()));
    drop(at);
    let Some(sig) = s.dump_signal else { return };
    if !thread {
        crate::sys::warn(&format!(
            "YING_DUMP_SIGNAL={} needs the report thread, which YING_CHECK_INTERVAL_SECS=0 turns off; no handler installed",
            signal::name(sig)
        ));
        return;
    }
    if let Err(why) = signal::install(sig) {
        crate::sys::warn(&format!("YING_DUMP_SIGNAL: {why}"));
    }
}

/// The report thread's view of the triggers.
#[derive(Debug)]
pub(crate) struct Triggers {
    signal: Option<i32>,
    control: Option<control_file::ControlFiles>,
    near: limit::NearLimit,
    peak: limit::NewPeak,
    /// The exact totals (allocated, freed bytes) at the last look, and whether they were the
    /// same as at the look before.
    last_totals: Option<(u64, u64)>,
    quiet: bool,
}

impl Triggers {
    /// The triggers of `s` for a report thread writing into `dir` (reads the memory limit).
    pub(crate) fn new(s: &TriggerSettings, dir: &Path) -> Self {
        let prepared = *PREPARED_AT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = match prepared {
            Some((t, pid)) if pid == std::process::id() => t,
            // A `fork` child: a `dump` touched before it existed was its parent's to serve.
            _ => SystemTime::now(),
        };
        Self {
            signal: s.dump_signal,
            control: s
                .dump_control_file
                .then(|| control_file::ControlFiles::new(dir, std::process::id(), since)),
            near: limit::NearLimit::new(s.memory_limit_pct, s.memory_limit_bytes),
            peak: limit::NewPeak::new(s.peak_dump_pct),
            last_totals: None,
            quiet: false,
        }
    }

    /// Whether any trigger needs a look every [`TICK`].
    pub(crate) fn armed(&self) -> bool {
        self.signal.is_some_and(signal::armed)
            || self.control.is_some()
            || self.near.armed()
            || self.peak.armed()
    }

    /// How long the report thread may wait now, with its next periodic check at `next_check`.
    pub(crate) fn wait(&self, next_check: Instant) -> Duration {
        let left = next_check.saturating_duration_since(Instant::now());
        // Near a memory limit a burst after a quiet spell must be seen at once (the OOM killer
        // does not wait): while that trigger is armed, every TICK.
        match (self.armed(), self.quiet && !self.near.armed()) {
            (false, _) => left,
            (true, false) => left.min(TICK),
            (true, true) => left.min(IDLE_TICK),
        }
    }

    /// One tick: the reasons of the triggers that fired (joined with `; `), if any.
    pub(crate) fn poll(&mut self) -> Option<String> {
        let t = crate::engine::totals::read();
        let now = (t.allocated_bytes, t.freed_bytes);
        self.quiet = self.last_totals == Some(now);
        self.last_totals = Some(now);
        let mut reasons: Vec<String> = Vec::new();
        if let Some(sig) = self.signal {
            match signal::tick(sig) {
                signal::Tick::Quiet => {}
                signal::Tick::Arrived => reasons.push(format!("signal {}", signal::name(sig))),
                signal::Tick::Replaced => {
                    let nm = signal::name(sig);
                    crate::sys::warn(&format!(
                        "the program installed its own handler for {nm}: its handler is kept, and {nm} no longer writes a report (touch <reporting path>/dump instead)"
                    ));
                    self.signal = None;
                }
            }
        }
        if let Some(c) = &mut self.control
            && let Some(r) = c.tick()
        {
            reasons.push(r);
        }
        if let Some(r) = self.near.tick() {
            reasons.push(r);
        }
        if self.peak.armed()
            && let Some(r) = self.peak.judge(t.retained_bytes())
        {
            reasons.push(r);
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }
}
