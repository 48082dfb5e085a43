//! The few raw system calls the profiler makes outside the `libc` crate's safe-ish surface.

/// Writes all of `bytes` to standard error with `write(2)`: no locks, no allocation, usable
/// inside allocation hooks and at exit. Errors are ignored (there is nowhere to report them).
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable slice for its length; fd 2 may be closed, in
        // which case write returns -1 and we stop.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            let interrupted =
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if n < 0 && interrupted {
                continue;
            }
            return;
        }
        bytes = bytes.get(n as usize..).unwrap_or(&[]);
    }
}

/// Prints one `ying: warning: ...` line to standard error.
pub fn warn(msg: &str) {
    let line = format!("ying: warning: {msg}\n");
    write_stderr(line.as_bytes());
}

/// Saves `errno` and restores it when dropped: the profiler's own work on slow paths (clock
/// reads, writes, unwinding) must not change what the program sees.
#[derive(Debug)]
pub(crate) struct ErrnoGuard(i32);

impl ErrnoGuard {
    pub(crate) fn save() -> Self {
        // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
        Self(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 }
    }
}
