//! The thread and cancellation patterns that once crashed or hung programs under the shim,
//! looped with several seeds and sampling intervals for a bounded time (`YING_STRESS_SECS`,
//! default 40 s), so that a race shows up as a failure rather than as a flake. Every run is
//! compared with the plain run (same output, same exit status) under a timeout. The full cycle
//! of patterns always runs at least once; the failing pattern, seed and interval are printed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use preload_tests::{Run, TestDir, compare};

struct Pattern {
    name: &'static str,
    exe: PathBuf,
    args: &'static [&'static str],
    /// Extra variables (the refusal limit for the giant pattern).
    vars: &'static [(&'static str, &'static str)],
}

#[test]
fn thread_patterns_with_many_seeds() {
    let dir = TestDir::new("stress");
    let detached = dir.compile_c("detached_exit.c", &["-pthread"]);
    let getattr = dir.compile_c("getattr_threads.c", &["-pthread"]);
    let small = dir.compile_c("small_stack.c", &["-pthread"]);
    let cancel = dir.compile_c("cancel_alloc.c", &["-pthread"]);
    let threads = dir.compile_c("threads.c", &["-pthread"]);
    let fork = dir.compile_c("fork.c", &["-pthread"]);
    let none: &[(&str, &str)] = &[];
    let patterns = [
        Pattern { name: "detached", exe: detached.clone(), args: &["detached"], vars: none },
        Pattern { name: "late destructor", exe: detached, args: &["late"], vars: none },
        Pattern { name: "getattr", exe: getattr, args: &["400"], vars: none },
        Pattern { name: "small stacks", exe: small, args: &["run"], vars: none },
        Pattern {
            name: "cancel giant",
            exe: cancel.clone(),
            args: &["giant"],
            vars: &[("YING_MAX_ALLOC_BYTES", "1GiB")],
        },
        Pattern { name: "cancel sampled", exe: cancel, args: &["sampled"], vars: none },
        Pattern { name: "threads", exe: threads, args: &[], vars: none },
        Pattern { name: "forks", exe: fork, args: &["forkloop"], vars: none },
    ];
    let intervals = ["1", "4096", "524288"];
    let budget = std::env::var("YING_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(40));
    let start = Instant::now();
    let mut runs = 0usize;
    while runs < patterns.len() || start.elapsed() < budget {
        let p = &patterns[runs % patterns.len()];
        let seed = (runs / patterns.len() + 1).to_string();
        let interval = intervals[(runs / patterns.len()) % intervals.len()];
        let mut vars = vec![
            ("YING_SEED", seed.as_str()),
            ("YING_SAMPLE_INTERVAL_BYTES", interval),
            ("YING_CHECK_INTERVAL_SECS", "1"),
        ];
        vars.extend_from_slice(p.vars);
        let run = Run::new(&p.exe).args(p.args).timeout(Duration::from_secs(60));
        let c = compare(&run, &vars, &dir.reports(&format!("r{runs}")));
        c.check(
            c.with.success(),
            format!(
                "{} failed with YING_SEED={seed} YING_SAMPLE_INTERVAL_BYTES={interval}",
                p.name
            ),
        );
        runs += 1;
    }
    println!("{runs} runs in {:.1} s", start.elapsed().as_secs_f64());
}
