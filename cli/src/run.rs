//! `ying run -- CMD ARGS...`: the program under the LD_PRELOAD shim, then a summary of the
//! report sets this run wrote (`scripts/run-with-ying.sh` is a wrapper over it).

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::summary;
use ying_profiler::config::{Config, LiveFile};

/// What `ying run` was asked for: its command line.
#[derive(Debug, clap::Args)]
pub struct Request {
    /// Seconds between the report thread's checks (YING_CHECK_INTERVAL_SECS; 0: reports at
    /// exit only).
    #[arg(long, value_name = "SECS")]
    pub interval: Option<u64>,
    /// The reporting directory (YING_REPORTING_PATH; default ./ying-profiles).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Mean bytes allocated between samples (YING_SAMPLE_INTERVAL_BYTES), e.g. 4KiB.
    #[arg(long, value_name = "BYTES")]
    pub sample_interval: Option<String>,
    /// Profile only executables of this file name (YING_ONLY_EXE).
    #[arg(long, value_name = "NAME")]
    pub only_exe: Option<String>,
    /// The shim to preload.
    #[arg(long, value_name = "PATH")]
    pub lib: Option<PathBuf>,
    /// Print no summary at the end.
    #[arg(long)]
    pub no_summary: bool,
    /// List every process in the summary, small ones too (by default processes whose peak is
    /// at most 1 MiB (two samples' worth at the default interval) and under 1 % of the
    /// largest are folded into one line).
    #[arg(long)]
    pub all_processes: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// The shim: `explicit` (`--lib`), else `$YING_LIB`, else `libying.so` next to this
/// executable (where `cargo build --release` puts both), else the workspace's
/// `target/release/libying.so` (this command built from a checkout, e.g. installed with
/// `cargo install --path cli`).
pub fn find_lib(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(absolute(p))
        } else {
            Err(format!("{}: no such file (--lib)", p.display()))
        };
    }
    if let Some(p) = std::env::var_os("YING_LIB").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(absolute(&p))
        } else {
            Err(format!("{}: no such file (YING_LIB)", p.display()))
        };
    }
    let mut tried = Vec::new();
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf))
    {
        tried.push(dir.join("libying.so"));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("."));
    tried.push(workspace.join("target/release/libying.so"));
    if let Some(found) = tried.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let names: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "libying.so not found (looked at {}); build it with `cargo build --release -p \
         ying-preload`, or name it with --lib or YING_LIB",
        names.join(", ")
    ))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The child's pid, for the signal handler (0: no child yet).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// A signal that arrived before the child's pid was known (0: none): the program can run, and
/// be signalled through `ying`, before `spawn` returns its pid.
static PENDING: AtomicI32 = AtomicI32::new(0);

/// The signals passed on to the child.
const FORWARDED: [libc::c_int; 6] =
    [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2];

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // A signal the terminal generated (Ctrl-C: si_code > 0, from the kernel) went to the whole
    // foreground process group, the child included: sending it again would deliver it twice.
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } > 0;
    if from_kernel {
        return;
    }
    // Left for `run` if the pid is not known yet; taken back here if it is (the handler runs
    // on the only thread, between two of `run`'s steps).
    PENDING.store(sig, Ordering::SeqCst);
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 && PENDING.swap(0, Ordering::SeqCst) != 0 {
        // SAFETY: kill is async-signal-safe and touches no memory; pid is the child's, not
        // yet reaped (`run` clears CHILD before it reaps), so it names no other process.
        unsafe { libc::kill(pid, sig) };
    }
}

fn install_forwarding() {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler only loads
        // an atomic and calls kill, both async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Waits until the child `pid` has ended, leaving it a zombie (`WNOWAIT`) so that its pid is
/// not reused before [`CHILD`] is cleared.
fn wait_without_reaping(pid: u32) {
    loop {
        // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Runs the program; returns its exit status (128 + the signal's number when a signal ended
/// it, as a shell reports it).
pub fn run(req: &Request) -> Result<u8, String> {
    let lib = find_lib(req.lib.as_deref())?;
    let program = &req.command[0];
    // `YING_*` as the library reads them in the program (its parsers, its defaults; a value
    // it refuses is the program's to warn about, and its default holds there as here).
    let (cfg, _) = Config::from_env();
    let reports = absolute(req.output.as_ref().unwrap_or(&cfg.reporting_path));
    let before: HashSet<OsString> =
        summary::entries(&reports).into_iter().map(|(name, _)| name).collect();
    // A live file kept elsewhere (`YING_LIVE_FILE=DIR`).
    let live_dir = match &cfg.live_file {
        LiveFile::Dir(d) => Some(absolute(d)).filter(|d| *d != reports),
        LiveFile::ReportingDir | LiveFile::Off => None,
    };
    let before_live: HashSet<OsString> = live_dir
        .as_deref()
        .map(summary::entries)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, _)| name)
        .collect();

    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = Command::new(program);
    cmd.args(&req.command[1..]).env("LD_PRELOAD", preload).env_remove("YING_LIB");
    // The heap at death: the program keeps its live file unless the user said otherwise.
    if std::env::var_os("YING_LIVE_FILE").is_none() {
        cmd.env("YING_LIVE_FILE", "on");
    }
    if let Some(secs) = req.interval {
        cmd.env("YING_CHECK_INTERVAL_SECS", secs.to_string());
    }
    if req.output.is_some() {
        cmd.env("YING_REPORTING_PATH", &reports);
    }
    if let Some(bytes) = &req.sample_interval {
        cmd.env("YING_SAMPLE_INTERVAL_BYTES", bytes);
    }
    if let Some(exe) = &req.only_exe {
        cmd.env("YING_ONLY_EXE", exe);
    }
    install_forwarding();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            // The status a shell gives a program it cannot start: 127 not found, 126 otherwise
            // (`scripts/run-with-ying.sh` kept it when it ran the program itself).
            eprintln!("ying: error: {}: {e}", Path::new(program).display());
            return Ok(if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 });
        }
    };
    let pid = child.id() as i32;
    CHILD.store(pid, Ordering::SeqCst);
    let early = PENDING.swap(0, Ordering::SeqCst);
    if early != 0 {
        // SAFETY: kill touches no memory; pid is our child's, not yet reaped.
        unsafe { libc::kill(pid, early) };
    }
    wait_without_reaping(child.id());
    // Only now may the pid be reused: the handler stops using it first.
    CHILD.store(0, Ordering::SeqCst);
    let status = child.wait();
    let status =
        status.map_err(|e| format!("waiting for {}: {e}", Path::new(program).display()))?;
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        _ => 1,
    };
    // Short processes wrote their exit reports raw: their sets are made here, once per
    // binary's symbols (one line for each that cannot be).
    let mut deaths = render_raw(&reports);
    deaths.extend(heaps_at_death(&reports, &before, pid as u32, &status, &reports));
    if let Some(live_dir) = &live_dir {
        deaths.extend(heaps_at_death(live_dir, &before_live, pid as u32, &status, &reports));
    }
    if !req.no_summary {
        summary::print(&reports, &before, program, req.all_processes, &cfg);
    }
    for line in deaths {
        eprintln!("{line}");
    }
    Ok(code)
}

/// Turns the raw exit profiles in `dir` into their sets (`YING_SHORT_PROCESS_SECS`); returns a
/// line for each that could not be, and each warning of those that were (a missing binary).
pub fn render_raw(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for (path, set) in ying_profiler::report::live::read::render_raw_sets(dir).unwrap_or_default() {
        match set {
            Ok(r) => lines.extend(r.warnings),
            Err(e) => lines.push(format!("ying: {}: {e}", path.display())),
        }
    }
    lines
}

/// `ying report DIR`: the set of every raw exit profile in `dir` that has none yet; returns
/// the text reports' paths, a line each, and whether every one was made (each failure said on
/// stderr).
pub fn report_dir(dir: &Path) -> Result<(String, bool), String> {
    let sets = ying_profiler::report::live::read::render_raw_sets(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if sets.is_empty() {
        return Err(format!(
            "{}: no raw exit profile without its set (ying.<exe>.<pid>-<instance>.<seq>.<time>.live without its .json)",
            dir.display()
        ));
    }
    let (mut text, mut ok) = (String::new(), true);
    for (path, set) in sets {
        match set {
            Ok(r) => {
                for w in &r.warnings {
                    eprintln!("{w}");
                }
                let at = r.paths.text.as_ref().map_or(r.stem.clone(), |p| p.display().to_string());
                text.push_str(&at);
                text.push('\n');
            }
            Err(e) => {
                eprintln!("ying: error: {}: {e}", path.display());
                ok = false;
            }
        }
    }
    Ok((text, ok))
}

/// How the process `pid` ended, as a report's header says it, from its wait status.
fn ending(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(sig)) => {
            let name = ying_profiler::config::signal_name(sig);
            if status.core_dumped() {
                format!("killed by {name} (core dumped)")
            } else {
                format!("killed by {name}")
            }
        }
        (Some(c), _) => format!("exited with status {c} without its exit report"),
        _ => "ended".to_string(),
    }
}

/// Writes into `out` the report set of every live file in `dir` that this run left behind (a
/// process that did not exit normally: killed, crashed, `_exit`), and returns one line for each:
/// "killed by SIGKILL: its heap at death is in ...". The program itself (`pid`) gets its wait
/// status as its ending; its children get what their file tells.
fn heaps_at_death(
    dir: &Path,
    before: &HashSet<OsString>,
    pid: u32,
    status: &std::process::ExitStatus,
    out: &Path,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut live: Vec<PathBuf> = summary::entries(dir)
        .into_iter()
        .filter(|(name, _)| {
            !before.contains(name)
                && name.to_str().is_some_and(ying_profiler::report::live::is_live_file_name)
        })
        .map(|(_, path)| path)
        .collect();
    live.sort();
    for path in live {
        let profile = match ying_profiler::report::live::LiveProfile::read(&path) {
            Ok(p) => p,
            Err(e) => {
                lines.push(format!("ying: {e}"));
                continue;
            }
        };
        if profile.is_running() {
            continue; // A daemon the program left running: its file is still its own.
        }
        let ended = (profile.pid() == pid).then(|| ending(status));
        let exe = profile.exe().rsplit('/').next().unwrap_or("?").to_string();
        match report_live(&path, Some(out), ended.as_deref()) {
            Ok(r) => {
                for w in &r.warnings {
                    lines.push(w.clone());
                }
                let at = r.paths.text.as_ref().map_or(r.stem.clone(), |p| p.display().to_string());
                lines.push(format!(
                    "ying: {exe} (pid {}) {}: its heap at death is in {at}",
                    profile.pid(),
                    r.ended
                ));
            }
            Err(e) => lines.push(format!("ying: {e}")),
        }
    }
    lines
}

/// `ying report`: the report set of the live file `file` into `out` (default: its directory).
pub fn report_live(
    file: &Path,
    out: Option<&Path>,
    ended: Option<&str>,
) -> Result<ying_profiler::report::live::LiveReport, String> {
    let profile =
        ying_profiler::report::live::LiveProfile::read(file).map_err(|e| e.to_string())?;
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => absolute(file).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    profile.write_report_set(&dir, ended).map_err(|e| format!("{}: {e}", dir.display()))
}
