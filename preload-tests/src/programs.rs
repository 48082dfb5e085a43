//! The test programs: a per-test scratch directory that compiles `programs/*.c`, `*.cpp` and
//! `*.rs` into itself, the `TAG:` lines tests point at, and the counts a program writes about
//! itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{Run, programs_dir};

static DIR_SEQ: AtomicU64 = AtomicU64::new(0);

/// A per-test scratch directory under [`std::env::temp_dir`], unique per test and process.
/// Removed on drop if the test passed; kept (and its path printed) if the test panicked.
#[derive(Debug)]
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// Creates `<tmp>/ying-preload-tests/<name>-<pid>-<n>`.
    pub fn new(name: &str) -> Self {
        let n = DIR_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir()
            .join("ying-preload-tests")
            .join(format!("{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create test dir {}: {e}", path.display()));
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// A fresh, not yet existing reporting directory inside this one.
    pub fn reports(&self, name: &str) -> PathBuf {
        let p = self.path.join(format!("reports-{name}"));
        assert!(!p.exists(), "reporting dir {} used twice", p.display());
        p
    }

    /// Compiles `programs/<source>` with `cc -g -O1` (plus `extra` flags) into this directory
    /// and returns the executable's path (named after the source file, without extension).
    pub fn compile_c(&self, source: &str, extra: &[&str]) -> PathBuf {
        self.compile("cc", &[], source, extra)
    }

    /// Compiles `programs/<source>` with `c++ -std=c++17 -g -O1` (plus `extra`).
    pub fn compile_cxx(&self, source: &str, extra: &[&str]) -> PathBuf {
        self.compile("c++", &["-std=c++17"], source, extra)
    }

    /// Compiles `programs/<source>`, a one-file Rust program, with `rustc -O` (the toolchain
    /// that runs the tests) and returns the executable's path.
    pub fn compile_rust(&self, source: &str) -> PathBuf {
        let src = programs_dir().join(source);
        assert!(src.is_file(), "missing test program {}", src.display());
        let stem = Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
        let out = self.path.join(stem);
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let o = Run::new(rustc)
            .args(&["-O", "--edition", "2021", "-g", "-o"])
            .arg(&out)
            .arg(&src)
            .timeout(Duration::from_secs(300))
            .run();
        if !o.success() {
            panic!("compiling {} failed\n{}", src.display(), o.describe());
        }
        out
    }

    fn compile(&self, compiler: &str, pre: &[&str], source: &str, extra: &[&str]) -> PathBuf {
        let src = programs_dir().join(source);
        assert!(src.is_file(), "missing test program {}", src.display());
        let stem = Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
        let shared = extra.contains(&"-shared");
        let out = self.path.join(if shared { format!("lib{stem}.so") } else { stem.to_string() });
        let mut args: Vec<String> = pre.iter().map(|s| s.to_string()).collect();
        args.extend(["-g", "-O1", "-Wall"].iter().map(|s| s.to_string()));
        args.push(src.display().to_string());
        args.push("-o".into());
        args.push(out.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = Run::new(compiler).args(&args).run();
        if !o.success() {
            panic!("compiling {} failed\n{}", src.display(), o.describe());
        }
        out
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed: its files are kept in {}", self.path.display());
            return;
        }
        // Undo read-only permissions a test may have set, then remove everything.
        make_writable(&self.path);
        let _ = std::fs::remove_dir_all(&self.path);
        // The common parent goes too once the last test is done with it.
        if let Some(parent) = self.path.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            make_writable(&p);
        }
    }
}

/// The 1-based line of `programs/<source>` containing `tag` (a `TAG:<name>` comment).
///
/// # Panics
/// When the tag is missing or appears twice.
pub fn tagged_line(source: &str, tag: &str) -> u32 {
    let path = programs_dir().join(source);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let hits: Vec<usize> =
        text.lines().enumerate().filter(|(_, l)| l.contains(tag)).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1, "tag {tag:?} must appear exactly once in {}", path.display());
    hits[0] as u32
}

/// The `chunks <marker> <allocated> <freed>` line for `marker` in `file`, which a test program
/// writes when `$CHUNKS_FILE` names it: the glibc chunk bytes (what the shim counts) the program
/// allocated and freed under the marker, counted by the program itself.
pub fn chunk_counts(file: &Path, marker: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.split_whitespace().nth(1) == Some(marker))?;
    let mut f = line.split_whitespace().skip(2).map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}
