//! How the shim plugs into the engine: where per-thread state lives (the C initial-exec TLS
//! block), how thread exit is noticed (a pthread key destructor), which frames are ours
//! (anything inside `libying.so`), and the sampling settings.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use ying_profiler::hooks::{self, DEFAULT_MAX_ALLOC_BYTES, Host, Settings};
use ying_profiler::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
use ying_profiler::thread_state::ThreadState;
#[cfg(target_arch = "x86_64")]
use ying_profiler::thread_state::{BUDGET_OFFSET, SLOT_OFFSET};

#[cfg(not(target_arch = "x86_64"))]
unsafe extern "C" {
    /// Address of the calling thread's 64-byte initial-exec TLS block (src/tls.c).
    fn ying_tls_state() -> *mut c_void;
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    /// The calling thread's 64-byte initial-exec TLS block (src/tls.c); only its address is
    /// used, computed in `tls_block`.
    static ying_tls_block: [u8; 64];
}

/// Address of the calling thread's TLS block: the thread pointer plus the block's offset,
/// which the dynamic linker stores in a GOT entry at load time (the initial-exec model, written
/// out because stable Rust cannot ask for it). Two instructions, no call.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls_block() -> *mut c_void {
    let p: usize;
    // SAFETY: reads the GOT entry holding the block's TLS offset (R_X86_64_TPOFF64, filled at
    // load) and the thread pointer at %fs:0, exactly the initial-exec access sequence a C
    // compiler emits; both are constant for the calling thread, hence `pure, readonly`.
    unsafe {
        std::arch::asm!(
            "mov {p}, qword ptr [rip + {blk}@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            blk = sym ying_tls_block,
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    p as *mut c_void
}

/// The block's offset from the thread pointer (the GOT entry of `tls_block`), for the
/// %fs-relative accesses of the hot fields below.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls_offset() -> usize {
    let o: usize;
    // SAFETY: reads the GOT entry holding the block's TLS offset, written once by the dynamic
    // linker before any code of ours runs and constant afterwards, hence `pure, nomem`.
    unsafe {
        std::arch::asm!(
            "mov {o}, qword ptr [rip + {blk}@GOTTPOFF]",
            blk = sym ying_tls_block,
            o = out(reg) o,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    o
}

/// Reads the 8-byte field at `FIELD` of the calling thread's block, %fs-relative.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls_read<const FIELD: usize>() -> u64 {
    let v: u64;
    // SAFETY: `tls_offset() + FIELD` is an 8-byte-aligned field inside this thread's 64-byte
    // TLS block (FIELD is a ThreadState field offset, and the block holds a ThreadState); only
    // this thread accesses it. `readonly`: it reads memory, so it is not moved across writes.
    unsafe {
        std::arch::asm!(
            "mov {v}, qword ptr fs:[{o} + {field}]",
            o = in(reg) tls_offset(),
            field = const FIELD,
            v = out(reg) v,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    v
}

/// Writes the 8-byte field at `FIELD` of the calling thread's block, %fs-relative.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tls_write<const FIELD: usize>(v: u64) {
    // SAFETY: as in `tls_read`; the field belongs to this thread alone. Without `nomem` or
    // `readonly`, the compiler assumes the store may change any memory, so no cached read of
    // the same field (through `&ThreadState` or `tls_read`) is reused across it.
    unsafe {
        std::arch::asm!(
            "mov qword ptr fs:[{o} + {field}], {v}",
            o = in(reg) tls_offset(),
            field = const FIELD,
            v = in(reg) v,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn tls_block() -> *mut c_void {
    // SAFETY: the accessor only computes an address; it never allocates.
    unsafe { ying_tls_state() }
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
        // SAFETY: `tls_block` gives this thread's 64-byte, 64-aligned, zero-initialised TLS block
        // (a valid ThreadState), which lives as long as the thread; reaching it never allocates.
        unsafe { &*(tls_block() as *const ThreadState) }
    }

    fn register_thread_exit(ts: &ThreadState) {
        if let Some(key) = exit_key() {
            // SAFETY: `key` is a created key; the value is only read back by our destructor.
            unsafe {
                libc::pthread_setspecific(key, ts as *const ThreadState as *const c_void);
            }
        }
    }

    fn is_entry_frame(ip: usize, _function: impl FnOnce() -> usize) -> bool {
        ip >= OWN_START.load(Ordering::Relaxed) && ip < OWN_END.load(Ordering::Relaxed)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn budget() -> u64 {
        tls_read::<BUDGET_OFFSET>()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn set_budget(bytes: u64) {
        tls_write::<BUDGET_OFFSET>(bytes)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn slot() -> usize {
        tls_read::<SLOT_OFFSET>() as usize
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
    // SAFETY: `p` is a live glibc block (caller contract).
    let word = unsafe { header(p) };
    let chunk = word & !7;
    if word & 2 != 0 { chunk.saturating_sub(16) } else { chunk.saturating_sub(8) }
}

/// glibc's chunk-header word of a block (its size and three flag bits).
///
/// # Safety
/// As for [`usable_size`].
#[inline(always)]
unsafe fn header(p: *mut u8) -> usize {
    // SAFETY: glibc places the chunk's size word immediately before every block it returns.
    unsafe { *(p as *const usize).sub(1) }
}

/// Allocator overhead included in [`counted_size`]: one header word, which the totals subtract
/// per block when they are read (see `hooks::set_block_overhead`).
pub(crate) const COUNTED_OVERHEAD: u64 = 8;

/// The bytes the exact totals count for a block: its chunk size (the usable size plus
/// [`COUNTED_OVERHEAD`], or 8 bytes more for mmapped chunks). The same value is computed at
/// allocation and at free, so totals stay exact; it costs a load and a mask.
///
/// # Safety
/// As for [`usable_size`].
#[inline(always)]
pub(crate) unsafe fn counted_size(p: *mut u8) -> usize {
    // SAFETY: as in `usable_size`.
    unsafe { header(p) & !7 }
}
