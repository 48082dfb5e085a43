//! `scripts/run-with-ying.sh`, run for real (with `YING_LIB` naming the shim under test): its
//! closing summary names only the report sets this run wrote, one line per process with the
//! retained bytes at exit and the largest set's text report; when nothing was written it says
//! why (a static executable, a reporting directory that cannot be written, profiling switched
//! off, no sample taken); the program's output and exit status pass through unchanged.
//!
//! A shell wrapper (like a version manager's `python3` shim) runs helper processes before the
//! real program: each helper loads the shim too, takes no sample and must write no report set
//! (the engine's rule: a process that took no sample writes no report). `YING_SEED` fixes the
//! sampling points, so whether a helper's few KiB reach the first one does not change from run
//! to run (with a random seed, a helper allocating ~4 KiB would sample about once in 130 runs).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use preload_tests::{Outcome, Run, TestDir, preload_lib, report_sets, workspace_root};

/// What big_alloc.c keeps until it exits (mirrored from there).
const KEPT_MIB: u64 = 64;

fn script() -> PathBuf {
    workspace_root().join("scripts/run-with-ying.sh")
}

/// Runs `program args` through the script in `cwd`, reporting to `reports`.
fn run_script(
    cwd: &Path,
    reports: &Path,
    program: &Path,
    args: &[&str],
    vars: &[(&str, &str)],
) -> Outcome {
    Run::new("bash")
        .arg(script())
        .arg(program)
        .args(args)
        .env("YING_LIB", preload_lib().display().to_string())
        .env("YING_REPORTING_PATH", reports.display().to_string())
        .envs(vars)
        .cwd(cwd)
        .run()
}

/// The script's (and the shim's) `ying:` lines on stderr.
fn ying_lines(o: &Outcome) -> Vec<String> {
    o.ying_lines()
}

fn summary_has(o: &Outcome, needle: &str) -> bool {
    ying_lines(o).iter().any(|l| l.contains(needle))
}

/// Asserts that the run printed what the program prints without the shim and exited as it does.
fn assert_same_as_plain(o: &Outcome, plain: &Outcome) {
    assert!(!o.timed_out, "the script timed out\n{}", o.describe());
    assert_eq!(o.code(), plain.code(), "exit status changed\n{}", o.describe());
    assert_eq!(o.stdout_str(), plain.stdout_str(), "stdout changed\n{}", o.describe());
}

/// Asserts the summary of a run that wrote exactly the one set `pid` of `exe` wrote in
/// `reports`, with `KEPT_MIB` retained at exit, and returns that set's text path.
fn assert_summary_names_only(o: &Outcome, reports: &Path, exe: &str, pid: u32) -> PathBuf {
    let sets = report_sets(reports);
    let set = sets.iter().find(|s| s.pid == pid).expect("the set");
    let txt = set.path("txt");
    let lines = ying_lines(o);
    let head = format!("ying: this run wrote 1 report set (1 process) in {}:", reports.display());
    assert!(lines.contains(&head), "no `{head}`\n{}", o.describe());
    let rows: Vec<&String> = lines.iter().filter(|l| l.contains(" pid ")).collect();
    assert_eq!(rows.len(), 1, "one process line expected\n{}", o.describe());
    let row = rows[0];
    assert!(row.contains(exe) && row.contains(&format!("pid {pid} ")), "{row}");
    // The retained figure at exit: the program's 64 MiB plus a little (its other blocks).
    let retained = row.split("retained at exit ").nth(1).unwrap_or("");
    assert!(retained.starts_with(&format!("{KEPT_MIB}.")) && retained.contains(" MiB"), "{row}");
    let largest = format!("ying: largest: {}", txt.display());
    assert!(lines.contains(&largest), "no `{largest}`\n{}", o.describe());
    txt
}

#[test]
fn wrapper_script_writes_one_set_for_the_program_and_none_for_its_helpers() {
    let dir = TestDir::new("script-wrapper");
    let big = dir.compile_c("big_alloc.c", &[]);
    let wrapper = dir.join("wrapper.sh");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\n\
         # Like a version manager's shim: helper processes first, then the real program.\n\
         name=$(basename \"$0\")\n\
         /bin/true\n\
         here=$(dirname \"$0\")\n\
         \"$here/big_alloc\" \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = Run::new(&wrapper).run();
    plain.assert_success("the wrapper without the shim");
    let reports = dir.reports("wrapper");
    let o = run_script(dir.path(), &reports, &wrapper, &[], &[("YING_SEED", "1")]);
    assert_same_as_plain(&o, &plain);
    let sets = report_sets(&reports);
    assert_eq!(sets.len(), 1, "exactly one report set (the program's)\n{}", o.describe());
    assert_eq!(sets[0].exe, "big_alloc", "{sets:?}");
    for ext in ["txt", "folded", "svg", "pb.gz"] {
        assert!(sets[0].has(ext), "{ext} missing: {sets:?}");
    }
    let m = sets[0].manifest();
    assert!(
        m.entries.iter().flat_map(|e| &e.frames).any(|f| f.function.contains("marker_big_alloc")),
        "{m:#?}"
    );
    assert_summary_names_only(&o, &reports, "big_alloc", sets[0].pid);
    assert!(!summary_has(&o, "warning"), "{}", o.describe());
    // The binary itself exists beside the reports' parent: never named as a report.
    assert!(!summary_has(&o, &big.display().to_string()), "{}", o.describe());
}

#[test]
fn stale_reports_in_the_directory_are_never_named() {
    let dir = TestDir::new("script-stale");
    let big = dir.compile_c("big_alloc.c", &[]);
    let plain = Run::new(&big).run();
    let reports = dir.reports("stale");
    // An earlier run's set.
    let first = run_script(dir.path(), &reports, &big, &[], &[]);
    assert_same_as_plain(&first, &plain);
    let earlier = report_sets(&reports);
    assert_eq!(earlier.len(), 1, "{}", first.describe());
    // And a planted one that would win every comparison: larger, and dated in the future.
    let planted = reports.join("ying.big_alloc.1.0.20991231T235959Z.txt");
    std::fs::write(
        &planted,
        "Ying memory profile\nexecutable:         /big_alloc\n\
         retained (exact):   1.0 TiB (1099511627776 bytes)\n",
    )
    .unwrap();
    let future = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&planted).unwrap().set_modified(future).unwrap();

    let o = run_script(dir.path(), &reports, &big, &[], &[]);
    assert_same_as_plain(&o, &plain);
    let now: Vec<_> =
        report_sets(&reports).into_iter().filter(|s| s.pid != earlier[0].pid).collect();
    let ours: Vec<_> = now.iter().filter(|s| s.pid != 1).collect();
    assert_eq!(ours.len(), 1, "{}", o.describe());
    assert_summary_names_only(&o, &reports, "big_alloc", ours[0].pid);
    for stale in [&earlier[0].stem, &"ying.big_alloc.1.0.20991231T235959Z".to_string()] {
        assert!(!summary_has(&o, stale), "stale {stale} named\n{}", o.describe());
    }
    assert!(!summary_has(&o, &format!("pid {} ", earlier[0].pid)), "{}", o.describe());
}

#[test]
fn a_static_binary_is_named_as_the_reason() {
    let dir = TestDir::new("script-static");
    let reports = dir.reports("static");
    std::fs::create_dir_all(&reports).unwrap();
    // The program binary lies in the reporting directory itself: it is never taken for a report.
    let exe = reports.join("hello_static");
    let src = preload_tests::programs_dir().join("hello.c");
    let cc = Run::new("cc").args(&["-static", "-O1", "-o"]).arg(&exe).arg(&src).run();
    assert!(
        cc.success(),
        "`cc -static` failed: the C library's static archive (libc.a, Debian's libc6-dev) is \
         needed\n{}",
        cc.describe()
    );
    let plain = Run::new(&exe).args(&["3"]).run();
    assert_eq!(plain.code(), Some(3), "{}", plain.describe());
    let o = run_script(dir.path(), &reports, &exe, &["3"], &[]);
    assert_same_as_plain(&o, &plain);
    assert!(report_sets(&reports).is_empty(), "{}", o.describe());
    let lines = ying_lines(&o);
    let head = format!("ying: no report set was written to {} by this run:", reports.display());
    assert!(lines.contains(&head), "{}", o.describe());
    assert!(
        summary_has(&o, &format!("{} is a static executable", exe.display())),
        "{}",
        o.describe()
    );
    assert!(!summary_has(&o, "largest") && !summary_has(&o, "reports in"), "{}", o.describe());
}

#[test]
fn an_unwritable_reporting_directory_is_named_as_the_reason() {
    // Tests may run as root, which writes into any directory whatever its mode: the reporting
    // path goes through a regular file instead, which no one can create a directory in.
    let dir = TestDir::new("script-unwritable");
    let big = dir.compile_c("big_alloc.c", &[]);
    let plain = Run::new(&big).run();
    let file = dir.join("plain-file");
    std::fs::write(&file, "not a directory\n").unwrap();
    let reports = file.join("reports");
    let o = run_script(dir.path(), &reports, &big, &[], &[]);
    assert_same_as_plain(&o, &plain);
    let lines = ying_lines(&o);
    // The shim's own warning, once (one process).
    let warnings: Vec<_> = lines.iter().filter(|l| l.starts_with("ying: warning:")).collect();
    assert_eq!(warnings.len(), 1, "{}", o.describe());
    assert!(warnings[0].contains("cannot be created"), "{}", o.describe());
    let why =
        format!("the reporting directory is not writable: {} is not a directory.", file.display());
    assert!(summary_has(&o, &why), "no `{why}`\n{}", o.describe());
}

#[test]
fn nothing_written_says_whether_profiling_was_off_or_nothing_was_sampled() {
    let dir = TestDir::new("script-nothing");
    let Some(true_bin) = preload_tests::find_in_path("true") else { return };
    let big = dir.compile_c("big_alloc.c", &[]);
    let reports = dir.reports("off");
    let o = run_script(dir.path(), &reports, &big, &[], &[("YING_ENABLED", "false")]);
    assert!(o.success(), "{}", o.describe());
    assert!(report_sets(&reports).is_empty());
    assert!(summary_has(&o, "YING_ENABLED=false switched profiling off."), "{}", o.describe());

    // `true` allocates a few KiB at most: with this seed it takes no sample.
    let reports = dir.reports("tiny");
    let o = run_script(dir.path(), &reports, &true_bin, &[], &[("YING_SEED", "1")]);
    assert!(o.success(), "{}", o.describe());
    assert!(reports.is_dir(), "the shim opens the reporting directory at start");
    assert!(report_sets(&reports).is_empty(), "{}", o.describe());
    assert!(summary_has(&o, "no process took a sample"), "{}", o.describe());
    assert!(!summary_has(&o, "static") && !summary_has(&o, "not writable"), "{}", o.describe());
}

/// A copy of the script in a checkout of its own (`<dir>/checkout/scripts/`), with a stand-in
/// `cargo` first in `PATH` that prints a progress line on stderr, records its arguments and
/// its working directory, and leaves a `ying` that prints its arguments and a `libying.so` in
/// `$CARGO_TARGET_DIR/release` (or the working directory's `target/release`), as cargo does.
/// Returns (the script, the `PATH` to use, the file of the recorded arguments).
fn script_with_fake_cargo(dir: &TestDir) -> (PathBuf, String, PathBuf) {
    let scripts = dir.join("checkout/scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    let copy = scripts.join("run-with-ying.sh");
    std::fs::copy(script(), &copy).unwrap();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let args = dir.join("cargo-args");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\n\
             echo \"$PWD: $*\" >> '{}'\n\
             echo '   Compiling ying-cli v0.0.0 (stand-in cargo)' >&2\n\
             out=\"${{CARGO_TARGET_DIR:-target}}/release\"\n\
             mkdir -p \"$out\"\n\
             printf '#!/bin/sh\\necho \"stand-in ying $*\"\\n' > \"$out/ying\"\n\
             chmod +x \"$out/ying\"\n\
             : > \"$out/libying.so\"\n",
            args.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    (copy, path, args)
}

/// Runs `script program` with `PATH` and, when given, `CARGO_TARGET_DIR`.
fn run_copy(script: &Path, path: &str, target: Option<&Path>) -> std::process::Output {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(script).arg("/bin/true").env("PATH", path).env_remove("YING_LIB");
    match target {
        Some(t) => cmd.env("CARGO_TARGET_DIR", t),
        None => cmd.env_remove("CARGO_TARGET_DIR"),
    };
    cmd.output().unwrap()
}

#[test]
fn first_run_builds_ying_and_the_shim_in_one_command_with_its_progress_on_stderr() {
    let dir = TestDir::new("script-first-build");
    let (copy, path, args) = script_with_fake_cargo(&dir);
    let checkout = dir.join("checkout");

    let o = run_copy(&copy, &path, None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{o:?}");
    // cargo's progress reaches the terminal (no --quiet), after one line saying what is built.
    assert!(err.contains("ying: first run: building"), "{err}");
    assert!(err.contains("Compiling ying-cli"), "cargo's progress is hidden:\n{err}");
    let calls = std::fs::read_to_string(&args).unwrap();
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls.len(), 1, "one cargo command: {calls:?}");
    assert!(calls[0].starts_with(&format!("{}: build --release", checkout.display())), "{calls:?}");
    assert!(calls[0].contains("-p ying-cli") && calls[0].contains("-p ying-preload"), "{calls:?}");
    assert!(!calls[0].contains("--quiet"), "{calls:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "stand-in ying run -- /bin/true\n");

    // Built once: the next run builds nothing.
    let o = run_copy(&copy, &path, None);
    assert!(o.status.success() && o.stderr.is_empty(), "{o:?}");
    assert_eq!(std::fs::read_to_string(&args).unwrap().lines().count(), 1);

    // With CARGO_TARGET_DIR set, cargo builds there and the script runs the `ying` it built.
    let elsewhere = dir.join("elsewhere");
    let o = run_copy(&copy, &path, Some(&elsewhere));
    assert!(o.status.success(), "{o:?}");
    assert!(
        elsewhere.join("release/ying").is_file() && elsewhere.join("release/libying.so").is_file()
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "stand-in ying run -- /bin/true\n", "{o:?}");
}
