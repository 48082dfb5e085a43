//! `ying leaks DIR-or-SETS`: the leak suspects of each process whose report sets are named, from
//! their manifests over time (the test is the library's, `ying_profiler::report::leaks`, the
//! same the HTML page's panel makes).

use std::path::PathBuf;

use ying_profiler::report::leaks::{self, sets};

/// The text of every process's suspects; an error when no manifest is named.
pub fn leaks(args: &[PathBuf]) -> Result<String, String> {
    let manifests = sets::manifests(args).map_err(|e| e.to_string())?;
    if manifests.is_empty() {
        return Err(format!(
            "no report set manifest (ying.<exe>.<pid>-<instance>.<seq>.<time>.json) in {}",
            args.iter().map(|a| a.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let (processes, warnings) = sets::read(&manifests);
    for w in warnings {
        eprintln!("ying: warning: {w}");
    }
    let mut out = String::new();
    for p in &processes {
        out.push_str(&leaks::text(&format!("{} (pid {})", p.exe, p.pid), &p.analysis));
    }
    Ok(out)
}
