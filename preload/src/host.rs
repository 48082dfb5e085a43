//! How the shim plugs into the engine: where per-thread state lives (the C initial-exec TLS
//! block), how thread exit is noticed (a pthread key destructor), which frames are ours
//! (anything inside `libying.so`), and the sampling settings.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use ying_profiler::hooks::{self, DEFAULT_MAX_ALLOC_BYTES, Host, Settings};
use ying_profiler::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
use ying_profiler::thread_state::ThreadState;

unsafe extern "C" {
    /// Address of the calling thread's 64-byte initial-exec TLS block (src/tls.c).
    fn ying_tls_state() -> *mut c_void;
}

/// Sampling is off until the constructor has read the configuration.
pub(crate) static SETTINGS: Settings = {
    let s = Settings::new(DEFAULT_SAMPLE_INTERVAL_BYTES, DEFAULT_MAX_ALLOC_BYTES);
    s.enabled_at_start(false)
};

/// Code range of libying.so, filled at start-up.
pub(crate) static OWN_START: AtomicUsize = AtomicUsize::new(0);
pub(crate) static OWN_END: AtomicUsize = AtomicUsize::new(0);

/// The thread-exit key: 0 = not created, 1 = being created, otherwise key + 2.
static EXIT_KEY: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_thread_exit(value: *mut c_void) {
    // SAFETY: the value stored under the key is the exiting thread's own TLS block.
    if let Some(ts) = unsafe { (value as *const ThreadState).as_ref() } {
        hooks::thread_exit(ts);
    }
}

fn exit_key() -> Option<libc::pthread_key_t> {
    match EXIT_KEY.load(Ordering::Acquire) {
        0 => {
            if EXIT_KEY.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return None;
            }
            let mut key: libc::pthread_key_t = 0;
            // SAFETY: `key` is a valid out-pointer; the destructor is an extern "C" fn.
            let rc = unsafe { libc::pthread_key_create(&mut key, Some(on_thread_exit)) };
            if rc != 0 {
                EXIT_KEY.store(0, Ordering::Release);
                return None;
            }
            EXIT_KEY.store(key + 2, Ordering::Release);
            Some(key)
        }
        1 => None,
        k => Some(k - 2),
    }
}

/// The shim's [`Host`].
#[derive(Debug)]
pub(crate) struct ShimHost;

impl Host for ShimHost {
    #[inline(always)]
    fn thread_state() -> &'static ThreadState {
        // SAFETY: the C accessor returns this thread's 64-byte, 16-aligned, zero-initialised TLS
        // block (a valid ThreadState), which lives as long as the thread; it never allocates.
        unsafe { &*(ying_tls_state() as *const ThreadState) }
    }

    fn register_thread_exit(ts: &ThreadState) {
        if let Some(key) = exit_key() {
            // SAFETY: `key` is a created key; the value is only read back by our destructor.
            unsafe {
                libc::pthread_setspecific(key, ts as *const ThreadState as *const c_void);
            }
        }
    }

    fn is_entry_frame(frame: &ying_profiler::__private::backtrace::Frame) -> bool {
        let ip = frame.ip() as usize;
        ip >= OWN_START.load(Ordering::Relaxed) && ip < OWN_END.load(Ordering::Relaxed)
    }
}

/// The calling thread's state.
pub(crate) fn thread_state() -> &'static ThreadState {
    ShimHost::thread_state()
}

/// Usable size of a block from glibc's chunk header: the size word sits just before the
/// block; its low three bits are flags (bit 1: mmapped chunk, whose header is 16 bytes).
///
/// # Safety
/// `p` must be a live, non-null block from glibc's malloc family.
#[inline(always)]
pub(crate) unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: glibc places the chunk's size word immediately before every block it returns.
    let word = unsafe { *(p as *const usize).sub(1) };
    let chunk = word & !7;
    if word & 2 != 0 { chunk.saturating_sub(16) } else { chunk.saturating_sub(8) }
}

/// The bytes the exact totals count for a block: its chunk size minus one header word. The same
/// value is computed at allocation and at free, so totals stay exact; it equals the usable size
/// except for mmapped chunks (8 bytes more), and costs three instructions.
///
/// # Safety
/// As for [`usable_size`].
#[inline(always)]
pub(crate) unsafe fn counted_size(p: *mut u8) -> usize {
    // SAFETY: as in `usable_size`.
    let word = unsafe { *(p as *const usize).sub(1) };
    (word & !7).wrapping_sub(8)
}
