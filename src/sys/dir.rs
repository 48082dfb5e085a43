//! Directory listings with the `getdents64` system call, not glibc's `opendir`: `opendir`
//! allocates its 32 KiB buffer on the program's glibc heap (and its first call on a thread of
//! Ying's made that thread a glibc arena of its own, 64 MiB of address space), where the
//! profiler must take nothing of the program's (a program at its `RLIMIT_AS`, or one that
//! checks `mallinfo2` for leaks). The buffer here is the caller's allocator's (the profiler's
//! heap). For report threads and `ying`: it opens a descriptor, close-on-exec, for the length of
//! the call.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The name (`.` and `..` are left out; names that are not UTF-8 too).
    pub(crate) name: String,
    /// Whether the entry is a directory (`DT_DIR`; `DT_UNKNOWN` counts as not).
    pub(crate) is_dir: bool,
}

/// The entries of the directory `name` in `at` (a directory descriptor, or `AT_FDCWD`).
pub(crate) fn entries_at(at: RawFd, name: &CStr) -> io::Result<Vec<Entry>> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated; `at` is an open directory or AT_FDCWD.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut buf = vec![0u8; 16 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: the raw system call writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len())
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(out);
        }
        parse(&buf[..n as usize], &mut out);
    }
}

/// The entries of the directory at `path`.
pub(crate) fn entries(path: &std::path::Path) -> io::Result<Vec<Entry>> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    entries_at(libc::AT_FDCWD, &c)
}

/// Appends the entries of one `getdents64` answer (`struct linux_dirent64` records: inode 8
/// bytes, offset 8, record length 2, type 1, then the NUL-terminated name).
fn parse(mut bytes: &[u8], out: &mut Vec<Entry>) {
    const DT_DIR: u8 = 4;
    while bytes.len() >= 19 {
        let reclen = u16::from_ne_bytes([bytes[16], bytes[17]]) as usize;
        if reclen < 19 || reclen > bytes.len() {
            return;
        }
        let kind = bytes[18];
        let raw = &bytes[19..reclen];
        let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
        if let Ok(name) = std::str::from_utf8(name)
            && name != "."
            && name != ".."
        {
            out.push(Entry { name: name.to_string(), is_dir: kind == DT_DIR });
        }
        bytes = &bytes[reclen..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_what_std_lists() {
        let dir = std::env::temp_dir().join(format!("ying-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for i in 0..700 {
            std::fs::write(dir.join(format!("file-with-a-long-name-{i:04}")), b"").unwrap();
        }
        let mut ours: Vec<(String, bool)> =
            entries(&dir).unwrap().into_iter().map(|e| (e.name, e.is_dir)).collect();
        ours.sort();
        let mut std: Vec<(String, bool)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), e.file_type().unwrap().is_dir())
            })
            .collect();
        std.sort();
        assert_eq!(ours.len(), 701, "more than one getdents64 buffer");
        assert_eq!(ours, std);
        assert!(entries(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
