//! Support shared by the root integration tests: building the example program, running this
//! test binary again as a child case (with its `YING_*` variables cleared when the case must not
//! inherit them) and waiting for a child under a timeout, scratch directories, and reading `go
//! tool pprof -top`.
//!
//! A module each test file includes with `mod common;` rather than a dev-only crate: every file
//! in `tests/` is its own crate, and this code needs that crate's own features (`profile_spans`
//! decides how the example is built) and `CARGO_MANIFEST_DIR`, which a separate crate would see
//! as its own. Each test uses only part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Builds `examples/ying_example.rs` with `cargo build --profile bench` (as its documentation
/// says), with the same features as the calling test, and returns its executable.
pub fn build_example() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(cargo)
        .args(["build", "--profile", "bench", "--example", "ying_example"])
        // Built with the same features as the test, so the span assertions apply.
        .args(if cfg!(feature = "profile_spans") {
            &["--features", "profile_spans"][..]
        } else {
            &[]
        })
        .args(["--message-format=json", "--manifest-path"])
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo build runs");
    assert!(out.status.success(), "cargo build --example ying_example failed: {:?}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains("\"example\""))
        .filter(|l| l.contains("\"name\":\"ying_example\""))
        .find_map(|l| {
            let start = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            let len = l[start..].find('"')?;
            Some(PathBuf::from(&l[start..start + len]))
        })
        .expect("cargo reports the example's executable")
}

/// The cumulative bytes `go tool pprof -top -unit=B` shows for the function containing `name`
/// (flat bytes belong to the innermost, inlined allocation frames of std).
pub fn cum_bytes(top: &str, name: &str) -> Option<u64> {
    top.lines()
        .find(|l| l.contains(name))
        .and_then(|l| l.split_whitespace().nth(3)?.strip_suffix('B')?.parse().ok())
}

/// `<tmp>/ying-<name>-<pid>`, with whatever an earlier run left there removed; not created
/// (for a reporting path the code under test creates).
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ying-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// [`fresh_dir`], created empty.
pub fn scratch(name: &str) -> PathBuf {
    let dir = fresh_dir(name);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create scratch dir {}: {e}", dir.display()));
    dir
}

/// A command running this test binary again: a child case selected by an environment variable
/// or by `--exact <test>`.
pub fn this_test_binary() -> Command {
    Command::new(std::env::current_exe().expect("the test binary's path"))
}

/// Removes every inherited `YING_*` variable from `cmd`'s environment, so that a developer's
/// settings cannot change what a child case does.
pub fn without_ying_vars(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("YING_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Waits for `child` to end and returns its output; kills it and panics, naming `what` and what
/// it printed, once it runs longer than `timeout` (a hang fails the test instead of the suite).
pub fn wait_or_kill(mut child: Child, timeout: Duration, what: &str) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("waiting for a child process").is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            let out = child.wait_with_output();
            panic!("{what} ran longer than {timeout:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("a child's output")
}
