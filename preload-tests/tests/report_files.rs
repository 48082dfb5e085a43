//! Where and how the shim writes its files and messages, against what a program (or another
//! local user) may do: report files are private (0600) unless `YING_REPORT_FILE_MODE` widens
//! them, a symbolic link anywhere on the reporting path is refused rather than followed,
//! temporary names planted in advance cannot block a report, a `chdir` does not move the
//! reports, and Ying's messages keep going to the stderr of the start even after the program
//! reopened fd 2 onto a file of its own. Each runs the program plain as well (the control).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use preload_tests::{Comparison, QUIET, Run, TestDir, compare, report_sets};

fn hello(dir: &TestDir, vars: &[(&str, &str)], reports: &Path) -> Comparison {
    let exe = dir.join("hello");
    let exe = if exe.exists() { exe } else { dir.compile_c("hello.c", &[]) };
    let c = compare(&Run::new(&exe).cwd(dir.path()), vars, reports);
    c.check(c.with.success(), "hello.c failed");
    c.check(c.with.stdout_str() == "hello 21828\n", "unexpected output");
    c
}

fn hazards(dir: &TestDir) -> std::path::PathBuf {
    let exe = dir.join("report_hazards");
    if exe.exists() { exe } else { dir.compile_c("report_hazards.c", &[]) }
}

/// The permission bits of every file of the main report set.
fn report_modes(c: &Comparison) -> Vec<(String, u32)> {
    let set = c.main_report();
    set.extensions
        .iter()
        .map(|ext| {
            let meta = std::fs::metadata(set.path(ext)).expect("report file metadata");
            (
                format!("{ext} {:o}", meta.permissions().mode() & 0o7777),
                meta.permissions().mode() & 0o7777,
            )
        })
        .collect()
}

/// No report thread, every allocation sampled: report_hazards.c allocates too little for the
/// default interval, and a process that took no sample writes no report.
const SAMPLED: &[(&str, &str)] =
    &[("YING_CHECK_INTERVAL_SECS", "0"), ("YING_SEED", "1"), ("YING_SAMPLE_INTERVAL_BYTES", "1")];

#[test]
fn report_files_are_private_unless_widened() {
    let dir = TestDir::new("modes");
    let c = hello(&dir, QUIET, &dir.reports("default"));
    c.assert_no_ying_lines();
    let modes = report_modes(&c);
    c.check(modes.len() >= 3, format!("expected txt, folded, svg and pb.gz: {modes:?}"));
    c.check(modes.iter().all(|(_, m)| *m == 0o600), format!("modes {modes:?}, expected 0600"));

    let mut vars = QUIET.to_vec();
    vars.push(("YING_REPORT_FILE_MODE", "0640"));
    let c = hello(&dir, &vars, &dir.reports("group"));
    c.assert_no_ying_lines();
    let modes = report_modes(&c);
    c.check(modes.iter().all(|(_, m)| *m == 0o640), format!("modes {modes:?}, expected 0640"));

    let mut vars = QUIET.to_vec();
    vars.push(("YING_REPORT_FILE_MODE", "0755"));
    let c = hello(&dir, &vars, &dir.reports("bad"));
    c.check(
        c.with.ying_lines()
            == ["ying: warning: YING_REPORT_FILE_MODE=0755 is invalid (must be at most 0666 \
                 (no execute or special bits)); using 0600"],
        "expected exactly one warning naming YING_REPORT_FILE_MODE",
    );
    let modes = report_modes(&c);
    c.check(modes.iter().all(|(_, m)| *m == 0o600), format!("modes {modes:?}, expected 0600"));
}

#[test]
fn a_symbolic_link_on_the_reporting_path_is_not_followed() {
    let dir = TestDir::new("symlinks");
    // A link in the middle of the path, as another user could plant one in /tmp.
    let victim = dir.join("victim");
    std::fs::create_dir(&victim).expect("mkdir victim");
    std::os::unix::fs::symlink(&victim, dir.join("link")).expect("symlink");
    let path = dir.join("link/reports");
    let vars = [("YING_REPORTING_PATH", path.display().to_string())];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = hello(&dir, &vars, &path);
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1
            && lines[0]
                .starts_with(&format!("ying: warning: YING_REPORTING_PATH={} ", path.display()))
            && lines[0].contains(&format!("{} is a symbolic link", dir.join("link").display()))
            && lines[0].ends_with("reporting is skipped"),
        format!("expected one warning naming the link: {lines:#?}"),
    );
    let inside: Vec<_> = std::fs::read_dir(&victim).expect("read victim").collect();
    c.check(inside.is_empty(), format!("something was created through the link: {inside:?}"));

    // The reporting directory itself a link.
    let victim2 = dir.join("victim2");
    std::fs::create_dir(&victim2).expect("mkdir victim2");
    let link2 = dir.join("link2");
    std::os::unix::fs::symlink(&victim2, &link2).expect("symlink");
    let vars = [("YING_REPORTING_PATH", link2.display().to_string())];
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = hello(&dir, &vars, &link2);
    let lines = c.with.ying_lines();
    c.check(
        lines.len() == 1 && lines[0].contains("is a symbolic link"),
        format!("expected one warning about the link: {lines:#?}"),
    );
    c.check(report_sets(&victim2).is_empty(), "reports were written through the link");
}

#[test]
fn planted_temporary_names_do_not_block_a_report() {
    let dir = TestDir::new("planted");
    let exe = hazards(&dir);
    let reports = dir.reports("planted");
    std::fs::create_dir(&reports).expect("mkdir reports");
    let run = Run::new(&exe).arg("plant").arg(&reports);
    let c = compare(&run, SAMPLED, &reports);
    c.check(c.with.success(), "report_hazards plant failed");
    c.check(c.with.stdout_str() == "planted all\n", "the program could not plant its files");
    c.assert_no_ying_lines();
    let set = c.main_report();
    c.check(
        ["folded", "pb.gz", "svg", "txt"].iter().all(|e| set.has(e)),
        format!("incomplete report set: {:?}", set.extensions),
    );
    let planted = std::fs::read_dir(&reports)
        .expect("read reports")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .count();
    // Both runs planted (the plain one too, with its own pid): 2 x 128, all left in place.
    c.check(planted == 2 * 128, format!("{planted} planted files left, expected 256"));
}

#[test]
fn a_relative_reporting_path_is_fixed_at_start_despite_chdir() {
    let dir = TestDir::new("chdir");
    let exe = hazards(&dir);
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir elsewhere");
    let run = Run::new(&exe).arg("chdir").arg(&elsewhere).cwd(dir.path());
    let mut vars = SAMPLED.to_vec();
    vars.push(("YING_REPORTING_PATH", "rel-reports"));
    let c = compare(&run, &vars, &dir.join("rel-reports"));
    c.check(c.with.success() && c.with.stdout_str() == "moved\n", "report_hazards chdir failed");
    c.assert_no_ying_lines();
    c.main_report();
    c.check(
        !elsewhere.join("rel-reports").exists(),
        "the final report went to the directory the program moved to",
    );
}

/// Ying keeps no duplicate of fd 2 (issue #25: no descriptor of Ying's in the program's table):
/// its lines go to fd 2 only while it is the file it was at start. A program that reopens fd 2
/// onto a log of its own gets none of Ying's lines in it (they are dropped from then on); the
/// refusal is still in the report set.
#[test]
fn messages_never_go_into_a_reopened_fd_2() {
    let dir = TestDir::new("stderr");
    let exe = hazards(&dir);
    let log = dir.join("program.log");
    let run = Run::new(&exe).arg("reopen-stderr").arg(&log);
    let mut vars = QUIET.to_vec();
    vars.push(("YING_MAX_ALLOC_BYTES", "1GiB"));
    let c = compare(&run, &vars, &dir.reports("stderr"));
    c.check(c.with.success(), "report_hazards reopen-stderr failed");
    c.check(c.with.stdout_str() == "malloc(1 TiB): NULL ENOMEM\n", "the request was not refused");
    let logged = std::fs::read_to_string(&log).expect("read the program's log");
    c.check(
        logged == "the program's own line\n",
        format!("the program's file got Ying's lines: {logged:?}"),
    );
    c.check(
        c.main_report().manifest().stacks.giant_refused == 1,
        "the refusal is not in the report",
    );
}
