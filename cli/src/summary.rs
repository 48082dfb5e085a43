//! The summary `ying run` prints on stderr at the end (`scripts/run-with-ying.sh` runs `ying run`):
//! the report sets this run wrote, one line per process, and the largest one's text report;
//! when nothing was written, why it seems so.
//!
//! It leads with what matters: processes whose peak is at most [`SMALL`] and under 1 % of the
//! largest (a shell wrapper, a helper that took a sample or two at the default interval) are
//! folded into one line, unless `--all-processes` asks for them.

use std::collections::{BTreeMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ying_profiler::config::Config;
use ying_profiler::report::SetName;
use ying_profiler::report::set_name::uid_of_dir;

fn say(line: &str) {
    if line.is_empty() {
        eprintln!("ying:");
    } else {
        eprintln!("ying: {line}");
    }
}

const UNITS: [(&str, u64); 5] =
    [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

fn human(n: u64) -> String {
    for (unit, size) in &UNITS[..4] {
        if n >= *size {
            return format!("{:.1} {unit}", n as f64 / *size as f64);
        }
    }
    format!("{n} B")
}

/// One report set, as the summary needs it.
#[derive(Debug)]
struct Set {
    pid: u32,
    seq: u64,
    /// Its text report, which the summary names.
    path: PathBuf,
    exe: String,
    retained: Option<u64>,
    peak: Option<u64>,
    /// The exact retained total at the kept peak.
    peak_exact: Option<u64>,
}

/// A set's manifest, as the summary needs it.
#[derive(Debug, PartialEq)]
struct Read {
    exe: String,
    /// Exact retained bytes at this report.
    retained: Option<u64>,
    /// The sampled peak's high-water mark (an estimate).
    peak: Option<u64>,
    /// The exact retained total at the kept peak.
    peak_exact: Option<u64>,
}

/// The figures of a set's manifest (`<set>.json`, see `ying_profiler::report::manifest`); None
/// when the file is not a Ying manifest.
fn read_set(path: &Path) -> Option<Read> {
    let text = ying_profiler::report::bounded::read_manifest(path).ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&text).ok()?;
    if doc["format"] != "ying-report-set" {
        return None;
    }
    let exe = doc["exe"].as_str().unwrap_or("?").to_string();
    Some(Read {
        exe,
        retained: doc["totals"]["retained_bytes"].as_u64(),
        peak: doc["peak"]["high_water_bytes"].as_u64(),
        peak_exact: doc["peak"]["exact_bytes"].as_u64(),
    })
}

/// The entries of the reporting directory and of its `uid-<N>` subdirectories (where the shim
/// puts the sets of a worker that changed user to one that may not write in the directory),
/// as names relative to it (`uid-65534/ying....txt`) with their paths.
pub fn entries(reports: &Path) -> Vec<(OsString, PathBuf)> {
    let list = |dir: &Path, prefix: &str| -> Vec<(OsString, PathBuf)> {
        let Ok(d) = std::fs::read_dir(dir) else { return Vec::new() };
        d.flatten()
            .map(|e| {
                let mut name = OsString::from(prefix);
                name.push(e.file_name());
                (name, e.path())
            })
            .collect()
    };
    let mut all = list(reports, "");
    let subs: Vec<(OsString, PathBuf)> = all
        .iter()
        .filter(|(n, p)| uid_of_dir(&n.to_string_lossy()).is_some() && p.is_dir())
        .cloned()
        .collect();
    for (name, path) in subs {
        all.extend(list(&path, &format!("{}/", name.to_string_lossy())));
    }
    all
}

fn new_sets(reports: &Path, before: &HashSet<OsString>) -> Vec<Set> {
    let mut found = Vec::new();
    for (name, path) in entries(reports) {
        if before.contains(&name) {
            continue;
        }
        let name = name.to_string_lossy();
        let file = name.rsplit('/').next().unwrap_or(&name);
        let Some((set, "json")) = SetName::parse_file(file) else { continue };
        if !path.is_file() {
            continue;
        }
        if let Some(r) = read_set(&path) {
            let path = path.with_file_name(set.file("txt"));
            let (pid, seq, exe) = (set.pid, set.seq, r.exe);
            let (retained, peak, peak_exact) = (r.retained, r.peak, r.peak_exact);
            found.push(Set { pid, seq, path, exe, retained, peak, peak_exact });
        }
    }
    found
}

/// The highest exact figure of a process's life among its sets, with what it is: each set's
/// exact retained total (the last one's is `last`, at exit or at its last report) and the
/// exact total at each kept peak. The process's peak was at least that much.
fn exact_floor(group: &[Set], last: &'static str) -> Option<(u64, &'static str)> {
    let n = group.len();
    let mut best: Option<(u64, &'static str)> = None;
    for (i, s) in group.iter().enumerate() {
        let retained = s
            .retained
            .map(|r| (r, if i + 1 == n { last } else { "retained at an earlier report" }));
        let kept = s.peak_exact.map(|b| (b, "retained at the kept peak"));
        for c in [retained, kept].into_iter().flatten() {
            if best.is_none_or(|b| c.0 > b.0) {
                best = Some(c);
            }
        }
    }
    best
}

/// The peak as a headline says it: the sampled high-water mark, an estimate (`peak ≈29.8 MiB
/// (sampled)`), unless an exact figure of the same life (`floor`) is above it: the peak was at
/// least that, which is printed instead, saying so.
fn peak_part(sampled: u64, floor: Option<(u64, &str)>) -> String {
    match floor {
        Some((exact, what)) if exact > sampled => format!(
            "peak ≥{} (exact, {what}; the sampled high-water ≈{} is below it)",
            human(exact),
            human(sampled)
        ),
        _ => format!("peak ≈{} (sampled)", human(sampled)),
    }
}

/// A process's figures after its executable and pid: the peak (see [`peak_part`]) and the exact
/// retained total of its last set, at exit or at its last report when it is `alive`.
fn figures(group: &[Set], peak: Option<u64>, alive: bool) -> String {
    let what =
        if alive { "retained at its last report (still running)" } else { "retained at exit" };
    let mut parts = Vec::new();
    if let Some(p) = peak {
        parts.push(peak_part(p, exact_floor(group, what)));
    }
    if let Some(r) = group.last().and_then(|s| s.retained) {
        parts.push(format!("{what} {} (exact)", human(r)));
    }
    parts.join(", ")
}

/// A process of at most this peak (and under 1 % of the largest) is folded into the summary's
/// "small processes" line.
pub const SMALL: u64 = 1 << 20;

/// Whether a process of peak `size` is folded, beside the largest one's `largest`.
fn is_small(size: u64, largest: u64) -> bool {
    size <= SMALL && size.saturating_mul(100) < largest
}

/// The line that stands for the folded processes `exes` (their executables' names).
fn folded_line(exes: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in exes {
        *counts.entry(e.as_str()).or_default() += 1;
    }
    let names: Vec<String> = counts
        .iter()
        .map(|(e, n)| if *n == 1 { e.to_string() } else { format!("{e} ×{n}") })
        .collect();
    format!(
        "  and {} small process{} of at most {} each ({}); --all-processes lists them",
        exes.len(),
        if exes.len() == 1 { "" } else { "es" },
        human(SMALL),
        names.join(", ")
    )
}

fn summarize(reports: &Path, sets: Vec<Set>, all_processes: bool) {
    let count = sets.len();
    let mut by_pid: BTreeMap<u32, Vec<Set>> = BTreeMap::new();
    for s in sets {
        by_pid.entry(s.pid).or_default().push(s);
    }
    // (size, pid, exe, figures, sets, path of the last set)
    let mut rows = Vec::new();
    for (pid, mut group) in by_pid {
        group.sort_by_key(|s| s.seq);
        let peak = group.iter().filter_map(|s| s.peak).max();
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        let text = figures(&group, peak, alive);
        let n = group.len();
        let floor = exact_floor(&group, "").map_or(0, |f| f.0);
        let last = group.pop().expect("a group has a set");
        let size = peak.unwrap_or(0).max(floor);
        rows.push((size, pid, last.exe, text, n, last.path));
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let procs = rows.len();
    say(&format!(
        "this run wrote {count} report set{} ({procs} process{}) in {}:",
        if count == 1 { "" } else { "s" },
        if procs == 1 { "" } else { "es" },
        reports.display()
    ));
    let base = |exe: &str| Path::new(exe).file_name().map(|n| n.to_string_lossy().into_owned());
    let largest = rows[0].0;
    let (listed, small): (Vec<_>, Vec<_>) = rows
        .iter()
        .enumerate()
        .partition(|(i, r)| all_processes || *i == 0 || !is_small(r.0, largest));
    let listed: Vec<_> = listed.into_iter().map(|(_, r)| r).collect();
    let shown = &listed[..listed.len().min(10)];
    let width = shown.iter().map(|r| base(&r.2).unwrap_or_default().len()).max().unwrap_or(0);
    for (_, pid, exe, text, n, _) in shown.iter().copied() {
        say(&format!(
            "  {:<width$}  pid {pid:<7} {text}  ({n} set{})",
            base(exe).unwrap_or_default(),
            if *n == 1 { "" } else { "s" }
        ));
    }
    if listed.len() > shown.len() {
        say(&format!("  ... and {} more processes", listed.len() - shown.len()));
    }
    if !small.is_empty() {
        let exes: Vec<String> =
            small.iter().map(|(_, r)| base(&r.2).unwrap_or_else(|| r.2.clone())).collect();
        say(&folded_line(&exes));
    }
    say(&format!("largest: {}", rows[0].5.display()));
}

fn resolve(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.to_string_lossy().contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(p))
        .find(|c| c.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Some(true) for a dynamically linked ELF file (it has a PT_INTERP program header), Some(false)
/// for a static one, None when it is not ELF or cannot be read.
fn elf_dynamic(path: &Path) -> Option<bool> {
    let data = std::fs::read(path).ok()?;
    if data.len() < 64 || &data[..4] != b"\x7fELF" {
        return None;
    }
    let wide = data[4] == 2;
    let le = data[5] == 1;
    let u16_at = |o: usize| {
        let b = [*data.get(o)?, *data.get(o + 1)?];
        Some(if le { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) } as usize)
    };
    let u32_at = |o: usize| {
        let b: [u8; 4] = data.get(o..o + 4)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) } as u64)
    };
    let u64_at = |o: usize| {
        let b: [u8; 8] = data.get(o..o + 8)?.try_into().ok()?;
        Some(if le { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) })
    };
    let (phoff, phentsize, phnum) = if wide {
        (u64_at(32)? as usize, u16_at(54)?, u16_at(56)?)
    } else {
        (u32_at(28)? as usize, u16_at(42)?, u16_at(44)?)
    };
    for i in 0..phnum {
        if u32_at(phoff + i * phentsize)? == 3 {
            return Some(true); // PT_INTERP
        }
    }
    Some(false)
}

fn shebang(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut first = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut first).ok()?;
    let line = first[..n].split(|&b| b == b'\n').next()?;
    let words = String::from_utf8_lossy(line.strip_prefix(b"#!")?).into_owned();
    let words: Vec<&str> = words.split_whitespace().collect();
    match words.as_slice() {
        [env, prog, ..] if Path::new(env).file_name() == Some(OsStr::new("env")) => {
            resolve(OsStr::new(prog))
        }
        [interp, ..] => Some(PathBuf::from(interp)),
        [] => None,
    }
}

/// Why files cannot be created in `path`, or None when it looks usable: checked component by
/// component, no symbolic link followed, as the shim opens it.
fn directory_problem(path: &Path) -> Option<String> {
    let writable = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok();
        // SAFETY: access reads the NUL-terminated path and nothing else.
        c.is_some_and(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0)
    };
    let mut cur = PathBuf::from("/");
    for part in path.components().skip(1) {
        let next = cur.join(part);
        match std::fs::symlink_metadata(&next) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !writable(&cur) {
                    return Some(format!(
                        "{} does not exist and {} is not writable",
                        next.display(),
                        cur.display()
                    ));
                }
                return None;
            }
            Err(e) => return Some(format!("{}: {e}", next.display())),
            Ok(m) if m.file_type().is_symlink() => {
                return Some(format!(
                    "{} is a symbolic link (Ying refuses a reporting path through one)",
                    next.display()
                ));
            }
            Ok(m) if !m.is_dir() => return Some(format!("{} is not a directory", next.display())),
            Ok(_) => cur = next,
        }
    }
    if !writable(&cur) {
        return Some(format!("{} is not writable", cur.display()));
    }
    None
}

/// Why `reports` got no set from `program`, as far as can be told from outside; `cfg` is
/// `YING_*` as the library reads them.
fn explain(reports: &Path, program: &OsStr, cfg: &Config) {
    say(&format!("no report set was written to {} by this run:", reports.display()));
    if !cfg.enabled {
        say("  YING_ENABLED=false switched profiling off.");
        return;
    }
    if !cfg.report_at_exit && cfg.check_interval_secs == 0 {
        say("  YING_REPORT_AT_EXIT=false and YING_CHECK_INTERVAL_SECS=0 switched reports off.");
        return;
    }
    let Some(exe) = resolve(program) else {
        say(&format!("  {} was not found.", Path::new(program).display()));
        return;
    };
    let interp = shebang(&exe);
    let target = interp.clone().unwrap_or_else(|| exe.clone());
    if elf_dynamic(&target) == Some(false) {
        let what = match &interp {
            Some(i) => format!("{} (the interpreter of {})", i.display(), exe.display()),
            None => exe.display().to_string(),
        };
        say(&format!(
            "  {what} is a static executable (its ELF header names no program interpreter,"
        ));
        say("  PT_INTERP): without the dynamic loader, LD_PRELOAD is ignored and Ying never ran.");
        return;
    }
    if let Ok(m) = std::fs::metadata(&target) {
        // SAFETY: geteuid has no preconditions.
        if m.permissions().mode() & 0o6000 != 0 && unsafe { libc::geteuid() } != 0 {
            say(&format!(
                "  {} is setuid/setgid: the loader ignores LD_PRELOAD for it.",
                target.display()
            ));
            return;
        }
    }
    if let Some(only) = cfg.only_exe.as_deref().filter(|_| !reports.is_dir()) {
        say(&format!("  YING_ONLY_EXE={only}: no executable of that name ran."));
        return;
    }
    let problem = directory_problem(reports).or_else(|| {
        (!reports.is_dir())
            .then(|| "it does not exist after the run, so Ying could not create it".to_string())
    });
    if let Some(problem) = problem {
        say(&format!("  the reporting directory is not writable: {problem}."));
        say("  Set YING_REPORTING_PATH (or --output) to a directory this program can write to.");
        return;
    }
    let bytes = cfg.sample_interval_bytes;
    let interval = if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    };
    say(&format!(
        "  no process took a sample, it seems: Ying samples about once per {interval} allocated"
    ));
    say("  (YING_SAMPLE_INTERVAL_BYTES) and a process that took no sample writes no report.");
    say("  For a small program try --sample-interval 4KiB. (A process that ends by");
    say("  _exit, a signal or the OOM killer writes no exit report either.)");
}

/// Prints the summary of the sets written in `reports` since its listing was `before`.
/// `all_processes` lists small processes too (see [`SMALL`]); `cfg` is `YING_*` as the
/// library reads them (what explains a run without sets).
pub fn print(
    reports: &Path,
    before: &HashSet<OsString>,
    program: &OsStr,
    all_processes: bool,
    cfg: &Config,
) {
    let sets = new_sets(reports, before);
    if sets.is_empty() {
        explain(reports, program, cfg);
    } else {
        summarize(reports, sets, all_processes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_read_and_other_files_refused() {
        let dir = std::env::temp_dir().join(format!("ying-summary-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(
            &good,
            r#"{"format":"ying-report-set","version":1,"exe":"/bin/app",
                "totals":{"retained_bytes":29209462},"peak":{"high_water_bytes":1536}}"#,
        )
        .unwrap();
        let no_peak = dir.join("no_peak.json");
        std::fs::write(&no_peak, r#"{"format":"ying-report-set","exe":"x","peak":null}"#).unwrap();
        let other = dir.join("other.json");
        std::fs::write(&other, r#"{"format":"something else"}"#).unwrap();
        let read = |exe: &str, retained, peak, peak_exact| Read {
            exe: exe.into(),
            retained,
            peak,
            peak_exact,
        };
        assert_eq!(read_set(&good), Some(read("/bin/app", Some(29209462), Some(1536), None)));
        assert_eq!(read_set(&no_peak), Some(read("x", None, None, None)));
        assert_eq!(read_set(&other), None);
        assert_eq!(read_set(&dir.join("missing.json")), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(100), "100 B");
    }

    fn set(seq: u64, retained: u64, peak: u64, peak_exact: Option<u64>) -> Set {
        Set {
            pid: 7,
            seq,
            path: PathBuf::from("x.txt"),
            exe: "app".into(),
            retained: Some(retained),
            peak: Some(peak),
            peak_exact,
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn every_headline_figure_says_exact_or_sampled_and_the_peak_is_never_below_an_exact_one() {
        // The sampled high-water mark above everything exact: printed as the estimate it is.
        let g = [set(0, 3 * MIB, 28 * MIB, Some(26 * MIB))];
        assert_eq!(
            figures(&g, Some(28 * MIB), false),
            "peak ≈28.0 MiB (sampled), retained at exit 3.0 MiB (exact)"
        );
        // A program that keeps its memory to the end: the estimate fell below the exact total
        // at exit, which the peak includes; that is printed, and said.
        let hw = 29 * MIB + 820 * 1024;
        let g = [set(0, 30 * MIB, hw, Some(29 * MIB))];
        assert_eq!(
            figures(&g, Some(hw), false),
            "peak ≥30.0 MiB (exact, retained at exit; the sampled high-water ≈29.8 MiB is below \
             it), retained at exit 30.0 MiB (exact)"
        );
        // The exact total at the kept peak, or at an earlier report, counts too.
        let g = [set(0, 5 * MIB, 20 * MIB, Some(21 * MIB)), set(1, 2 * MIB, 20 * MIB, None)];
        assert!(figures(&g, Some(20 * MIB), true).starts_with(
            "peak ≥21.0 MiB (exact, retained at the kept peak; the sampled high-water ≈20.0 MiB"
        ));
        let g = [set(0, 22 * MIB, 20 * MIB, None), set(1, 2 * MIB, 20 * MIB, None)];
        let f = figures(&g, Some(20 * MIB), true);
        assert!(f.starts_with("peak ≥22.0 MiB (exact, retained at an earlier report;"), "{f}");
        assert!(f.ends_with("retained at its last report (still running) 2.0 MiB (exact)"), "{f}");
    }

    #[test]
    fn small_processes_beside_a_large_one_are_folded_into_one_line() {
        let kib = 1024;
        assert!(is_small(512 * kib, 240 * MIB));
        // Two samples' worth at the default interval is still small.
        assert!(is_small(MIB, 240 * MIB));
        // Under 1 MiB but not under 1 % of the largest: a run of small processes lists them.
        assert!(!is_small(512 * kib, 40 * MIB));
        assert!(!is_small(2 * MIB, 1000 * MIB));
        assert_eq!(
            folded_line(&["bash".into(), "sh".into(), "bash".into()]),
            "  and 3 small processes of at most 1.0 MiB each (bash ×2, sh); --all-processes lists them"
        );
    }

    #[test]
    fn elf_interpreter_tells_dynamic_from_static() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(elf_dynamic(&me), Some(true), "the test binary is dynamically linked");
        assert_eq!(elf_dynamic(Path::new("/etc/hostname")), None);
    }
}
