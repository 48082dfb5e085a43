//! Where the things under test are: the shim (`libying.so`, found, never built here), the
//! workspace and its test programs, the optional tools a test may need; and the `YING_*`
//! settings most tests run the shim with.

use std::path::{Path, PathBuf};

use crate::Run;

/// The workspace root (the parent of this package).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// This package's directory.
pub fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of the C/C++ test programs.
pub fn programs_dir() -> PathBuf {
    package_dir().join("programs")
}

/// The shim under test: `$YING_TEST_PRELOAD`, or `<workspace>/target/release/libying.so`.
///
/// # Panics
/// When the file does not exist, with instructions to build it (tests never build it).
pub fn preload_lib() -> PathBuf {
    let (path, origin) = match std::env::var_os("YING_TEST_PRELOAD") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), "YING_TEST_PRELOAD"),
        _ => (workspace_root().join("target/release/libying.so"), "the default location"),
    };
    let path = if path.is_relative() {
        std::env::current_dir().map(|d| d.join(&path)).unwrap_or(path)
    } else {
        path
    };
    if !path.is_file() {
        let target_dir = match std::env::var("CARGO_TARGET_DIR") {
            Ok(d) if !d.is_empty() => format!(
                " CARGO_TARGET_DIR is set: with it the shim is built as {d}/release/libying.so, \
                 so set YING_TEST_PRELOAD to that path."
            ),
            _ => String::new(),
        };
        panic!(
            "libying.so not found at {} ({origin}).\n\
             Build the shim first: run `cargo build --release` at the workspace root \
             (or `cargo build --release -p ying-preload`), or point YING_TEST_PRELOAD at a \
             built libying.so. The preload tests do not build it themselves.{target_dir}",
            path.display()
        );
    }
    path
}

/// Looks `name` up in `PATH` (like `command -v`), returning the first executable file.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    })
}

/// Like [`find_in_path`], but a missing tool is a reason to skip the calling test: prints a
/// loud notice and returns `None`.
pub fn require_tool(name: &str) -> Option<PathBuf> {
    let found = find_in_path(name);
    if found.is_none() {
        eprintln!("SKIPPED: `{name}` is not installed (not in PATH); this test needs it");
    }
    found
}

/// The real python3 interpreter (`sys.executable` with symlinks resolved, not a wrapper script
/// such as a pyenv shim) and its file name as reports name it; `None` (skip) when not installed.
pub fn python3() -> Option<(PathBuf, String)> {
    let p = require_tool("python3")?;
    let o =
        Run::new(&p).args(&["-c", "import os, sys; print(os.path.realpath(sys.executable))"]).run();
    o.assert_success("asking python3 for its executable");
    let real = PathBuf::from(o.stdout_str().trim());
    let file = real.file_name()?.to_string_lossy().into_owned();
    Some((real, file))
}

/// The `YING_*` settings of a quiet, deterministic profile in exact mode: every allocation
/// sampled, no report thread, a fixed seed, many stacks listed.
pub const EXACT: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
    ("YING_CHECK_INTERVAL_SECS", "0"),
    ("YING_SEED", "1"),
    ("YING_TOP_K", "1000"),
];

/// Exact mode, ranked (and folded) by allocated bytes.
pub const EXACT_ALLOCATED: &[(&str, &str)] = &[
    ("YING_SAMPLE_INTERVAL_BYTES", "1"),
    ("YING_CHECK_INTERVAL_SECS", "0"),
    ("YING_SEED", "1"),
    ("YING_TOP_K", "1000"),
    ("YING_MEASURE_ALLOCATED_NOT_RETAINED", "true"),
];

/// Default sampling, no report thread.
pub const QUIET: &[(&str, &str)] = &[("YING_CHECK_INTERVAL_SECS", "0"), ("YING_SEED", "1")];

/// `target/release/ying` (or beside `YING_TEST_PRELOAD`), built with the shim
/// (`scripts/run-with-ying.sh` and `scripts/test.sh` build both).
pub fn ying_bin() -> PathBuf {
    let bin = preload_lib().with_file_name("ying");
    assert!(bin.exists(), "{} is missing: cargo build --release -p ying-cli", bin.display());
    bin
}
