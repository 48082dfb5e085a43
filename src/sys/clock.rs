//! Monotonic time for allocation birth and lifetime. Read only on sampled paths (a vDSO call,
//! no syscall); 0.3.0 read a coarse clock that was never updated, so every lifetime was 0 s.

/// Nanoseconds on the monotonic clock.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
