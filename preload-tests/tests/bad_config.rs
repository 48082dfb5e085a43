//! Bad configuration never harms the host program: an invalid value or an unusable reporting
//! path gives exactly one `ying:` warning line, and stdout and the exit status stay the same; a
//! giant request is refused (NULL, ENOMEM) with `ying: refused` lines naming the caller, and
//! the program carries on.

use preload_tests::{Comparison, QUIET, Run, TestDir, compare, tagged_line};

/// Runs hello.c (exit status 7, so that the status is compared too) with `vars`.
fn hello(dir: &TestDir, name: &str, vars: &[(&str, &str)]) -> Comparison {
    let exe = dir.join("hello");
    let exe = if exe.exists() { exe } else { dir.compile_c("hello.c", &[]) };
    let c = compare(&Run::new(&exe).arg("7"), vars, &dir.reports(name));
    c.check(c.with.code() == Some(7), "expected exit status 7");
    c.check(c.with.stdout_str() == "hello 21828\n", "unexpected output");
    c
}

/// Asserts stderr is exactly one line, starting with `prefix` and containing every `parts`.
fn one_warning(c: &Comparison, prefix: &str, parts: &[&str]) {
    let err = c.with.stderr_str();
    let lines: Vec<&str> = err.lines().collect();
    c.check(
        lines.len() == 1 && err.ends_with('\n'),
        format!("expected exactly one line on stderr, got {}", lines.len()),
    );
    c.check(lines[0].starts_with(prefix), format!("the warning does not start with {prefix:?}"));
    for p in parts {
        c.check(lines[0].contains(p), format!("the warning does not mention {p:?}"));
    }
}

#[test]
fn invalid_sample_interval_warns_once_and_uses_the_default() {
    let dir = TestDir::new("banana");
    let c = hello(&dir, "banana", &[("YING_SAMPLE_INTERVAL_BYTES", "banana")]);
    c.check(
        c.with.stderr_str()
            == "ying: warning: YING_SAMPLE_INTERVAL_BYTES=banana is invalid (not a number); using 524288\n",
        "expected exactly the one warning line about YING_SAMPLE_INTERVAL_BYTES=banana",
    );
    // The rest of the configuration still applies: the report is written, with the default.
    c.check(
        c.main_report().manifest().sample_interval_bytes == 524288,
        "the report does not use the default interval",
    );
}

#[test]
fn other_invalid_values_warn_once_each() {
    let dir = TestDir::new("bad-values");
    let c = hello(&dir, "typo", &[("YING_SAMPLE_INTERVAL", "1")]);
    one_warning(&c, "ying: warning: YING_SAMPLE_INTERVAL is not a Ying variable", &[]);
    let c = hello(&dir, "zero", &[("YING_TOP_K", "0"), ("YING_CHECK_INTERVAL_SECS", "0")]);
    one_warning(&c, "ying: warning: YING_TOP_K=0 is invalid (", &["using 20"]);
    let c = hello(&dir, "bool", &[("YING_REPORT_AT_EXIT", "sometimes")]);
    one_warning(&c, "ying: warning: YING_REPORT_AT_EXIT=sometimes is invalid (", &["using true"]);
    c.main_report();
}

#[test]
fn uncreatable_reporting_path_under_proc() {
    let dir = TestDir::new("proc-forbidden");
    let c = hello(&dir, "unused", &[("YING_REPORTING_PATH", "/proc/forbidden")]);
    one_warning(
        &c,
        "ying: warning: YING_REPORTING_PATH=/proc/forbidden ",
        &["reporting is skipped"],
    );
    c.check(!std::path::Path::new("/proc/forbidden").exists(), "/proc/forbidden exists?");
}

#[test]
fn reporting_path_below_a_regular_file() {
    let dir = TestDir::new("path-below-file");
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").expect("write a-file");
    let sub = file.join("reports");
    let c = hello(&dir, "unused-1", &[("YING_REPORTING_PATH", &sub.display().to_string())]);
    one_warning(
        &c,
        &format!("ying: warning: YING_REPORTING_PATH={} ", sub.display()),
        &["reporting is skipped"],
    );
    // A regular file as the reporting path itself.
    let c = hello(&dir, "unused-2", &[("YING_REPORTING_PATH", &file.display().to_string())]);
    one_warning(
        &c,
        &format!("ying: warning: YING_REPORTING_PATH={} ", file.display()),
        &["reporting is skipped"],
    );
    c.check(
        std::fs::read(&file).ok().as_deref() == Some(&b"not a directory"[..]),
        "the regular file was changed",
    );
}

#[test]
fn existing_directory_that_cannot_take_files() {
    // /proc exists and passes access(W_OK) for root, but no file can be created in it: the
    // final report fails, with one warning, at exit.
    let dir = TestDir::new("proc-root");
    let c = hello(&dir, "unused", &[("YING_REPORTING_PATH", "/proc")]);
    one_warning(&c, "ying: warning: ", &["/proc"]);
}

#[test]
fn read_only_reporting_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TestDir::new("read-only");
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).expect("mkdir ro");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod 0555");
    // Root (CAP_DAC_OVERRIDE) may write into a 0555 directory anyway.
    let probe = ro.join("probe");
    let writable_anyway = std::fs::write(&probe, b"x").is_ok();
    let _ = std::fs::remove_file(&probe);
    let vars = [("YING_REPORTING_PATH", ro.display().to_string())];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = hello(&dir, "unused", &vars);
    let sets = preload_tests::report_sets(&ro);
    if writable_anyway {
        // Running as root: the directory is writable for us, so reports are written.
        c.assert_no_ying_lines();
        c.check(sets.iter().any(|s| s.pid == c.with.pid), "no report in the 0555 dir (as root)");
    } else {
        one_warning(
            &c,
            &format!("ying: warning: YING_REPORTING_PATH={} ", ro.display()),
            &["not writable", "reporting is skipped"],
        );
        c.check(sets.is_empty(), "reports were written into a read-only directory");
    }
}

#[test]
fn giant_allocation_is_refused_and_the_program_continues() {
    let dir = TestDir::new("giant");
    let exe = dir.compile_c("giant.c", &[]);
    let mut vars = QUIET.to_vec();
    vars.push(("YING_MAX_ALLOC_BYTES", "1GiB"));
    let c = compare(&Run::new(&exe), &vars, &dir.reports("giant"));
    c.check(c.with.success(), "giant.c failed");
    c.check(
        c.with.stdout_str().starts_with("malloc(1 TiB): NULL errno=ENOMEM\ncontinued: "),
        "the giant request did not fail with ENOMEM, or the program did not continue",
    );
    let lines = c.with.ying_lines();
    c.check(
        lines.first().is_some_and(|l| {
            l.starts_with(
                "ying: refused a single allocation of 1099511627776 bytes (limit 1073741824 bytes",
            )
        }),
        "no `ying: refused` line for the 1 TiB request",
    );
    let line = tagged_line("giant.c", "TAG:marker_giant");
    // At once: raw frames (nothing inside malloc reads debug info); the report names them.
    c.check(
        lines.iter().any(|l| l.starts_with("ying:   giant+0x")),
        "the refusal does not print its raw frames at once",
    );
    c.check(
        lines.iter().any(|l| {
            l.starts_with("ying:   marker_giant (") && l.ends_with(&format!("giant.c:{line})"))
        }),
        format!("no report named the refusal `marker_giant (.../giant.c:{line})`"),
    );
    c.check(
        lines.iter().filter(|l| l.starts_with("ying: refused")).count() == 1,
        "expected exactly one refusal",
    );
    c.check(
        c.main_report().manifest().stacks.giant_refused == 1,
        "the report does not count the refusal",
    );
    // The refusal's listing is for humans: its wording is what is tested.
    let text = c.main_report().text();
    c.check(
        text.contains("giant allocation refused (refusal #1): 1.0 TiB (1099511627776 bytes)")
            && text.contains("    marker_giant ("),
        "the report does not list the refusal with its stack",
    );
}
