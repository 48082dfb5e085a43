//! Small filesystems for the tests of Ying at a full disk: a tmpfs of a few MiB mounted on a
//! directory of the test (root only; a test prints `SKIPPED` elsewhere), filled to a given free
//! space, unmounted when dropped.

use std::path::{Path, PathBuf};

use crate::Run;

/// A tmpfs mounted for one test; unmounted (lazily, should a process still use it) on drop.
#[derive(Debug)]
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `path` (created if missing). `Err` says why it could not
    /// (not root, no `mount`): the caller skips.
    pub fn mount(path: &Path, bytes: u64) -> Result<Self, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let o = Run::new("mount")
            .args(&["-t", "tmpfs", "-o", &format!("size={bytes},mode=0777"), "tmpfs"])
            .arg(path)
            .run();
        if !o.success() {
            return Err(format!("cannot mount a tmpfs: {}", o.stderr_str().trim()));
        }
        Ok(Self { path: path.to_path_buf() })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes free for an unprivileged writer now.
    pub fn free(&self) -> u64 {
        free_bytes(&self.path)
    }

    /// Writes a file `name` of zeros that leaves about `free` bytes free.
    pub fn fill_to(&self, name: &str, free: u64) {
        let have = self.free();
        let size = have.saturating_sub(free);
        std::fs::write(self.path.join(name), vec![0u8; size as usize])
            .unwrap_or_else(|e| panic!("filling {}: {e}", self.path.display()));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Run::new("umount").arg("-l").arg(&self.path).run();
    }
}

/// Bytes free for an unprivileged writer in the filesystem of `path` (`statvfs`).
pub fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
    // SAFETY: an all-zero statvfs is a valid value for the call to fill; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        panic!("statvfs {}: {}", path.display(), std::io::Error::last_os_error());
    }
    st.f_bavail * st.f_frsize
}
