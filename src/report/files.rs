//! Writing report files so that a reader never sees half a file and a planted symlink is never
//! followed: each file is created under a fresh temporary name in the target directory with
//! `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC`, written, flushed, then renamed into place.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `dir/name` atomically. Errors name the path at fault.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    write_atomic_with(dir, name, |w| w.write_all(bytes))
}

/// Writes `dir/name` atomically with what `write` writes to it, through a buffer: the file
/// does not have to be held in memory first. Errors name the path at fault.
pub fn write_atomic_with(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<PathBuf> {
    let target = dir.join(name);
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let with_path =
        |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| with_path(e, &tmp))?;
    let mut out = io::BufWriter::with_capacity(64 << 10, f);
    let res = write(&mut out).and_then(|_| out.flush());
    drop(out);
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(with_path(e, &tmp));
    }
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        with_path(e, &target)
    })?;
    Ok(target)
}

/// Makes a name safe as one path component: anything but `[A-Za-z0-9._-]` becomes `_`, at most
/// 64 characters, never empty or a dot name.
pub fn sanitize_component(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(64)
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = "unknown".to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_replaces_atomically_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("ying-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = write_atomic(&dir, "a.txt", b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&dir, "a.txt", b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn planted_symlink_is_replaced_not_followed() {
        let dir = std::env::temp_dir().join(format!("ying-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("r.txt")).unwrap();
        write_atomic(&dir, "r.txt", b"report").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(dir.join("r.txt")).unwrap(), b"report");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sanitizes_hostile_names() {
        assert_eq!(sanitize_component("../../etc/passwd"), ".._.._etc_passwd");
        assert_eq!(sanitize_component("a b;c\n"), "a_b_c_");
        assert_eq!(sanitize_component(".."), "unknown");
        assert_eq!(sanitize_component(""), "unknown");
        assert_eq!(sanitize_component(&"x".repeat(100)).len(), 64);
    }
}
