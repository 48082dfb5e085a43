//! How the shim plugs into the engine: where per-thread state lives (the C initial-exec TLS
//! block) and the few instructions that reach it on the hot paths, how thread exit is noticed
//! (a pthread key destructor), which frames are ours (anything inside `libying.so`), and the
//! sampling settings.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use ying_profiler::Settings;
use ying_profiler::front_end::hooks::{self, DEFAULT_MAX_ALLOC_BYTES, Host};
use ying_profiler::front_end::sampler::DEFAULT_SAMPLE_INTERVAL_BYTES;
use ying_profiler::front_end::thread_state::ThreadState;
use ying_profiler::front_end::thread_state::{
    BUDGET_OFFSET, FILTER_OFFSET, FREED_OFFSET, REJECT_OFFSET,
};

// The C block's layout (src/tls.c) names these offsets, and its all-ones map is 2^19 bytes.
const _: () =
    assert!(BUDGET_OFFSET == 0 && FREED_OFFSET == 16 && FILTER_OFFSET == 24 && REJECT_OFFSET == 32);
const _: () = assert!(ying_profiler::front_end::filter::CELL_BITS == 19);
const _: () = assert!(std::mem::size_of::<ThreadState>() <= 128);

#[cfg(not(target_arch = "x86_64"))]
unsafe extern "C" {
    /// Address of the calling thread's 128-byte initial-exec TLS block (src/tls.c).
    fn ying_tls_state() -> *mut c_void;
}

unsafe extern "C" {
    /// A map of all ones as long as the engine's filter (src/tls.c): a thread whose free
    /// filter it is sends every free to the slow path.
    static ying_reject_none: [u8; 1 << 19];
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    /// The calling thread's 128-byte initial-exec TLS block (src/tls.c); only its address is
    /// used, computed in `tls_block` and by `malloc`.
    pub(crate) static ying_tls_block: [u8; 128];
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
pub(crate) fn tls_offset() -> usize {
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

/// Reads the 8-byte field at `FIELD` of the calling thread's block (at TLS offset `o`, from
/// [`tls_offset`]), %fs-relative.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn tls_read<const FIELD: usize>(o: usize) -> u64 {
    let v: u64;
    // SAFETY: `o + FIELD` is an 8-byte-aligned field inside this thread's 128-byte TLS block
    // (FIELD is a ThreadState field offset, and the block holds a ThreadState); only this
    // thread writes it. `readonly`: it reads memory, so it is not moved across writes.
    unsafe {
        std::arch::asm!(
            "mov {v}, qword ptr fs:[{o} + {field}]",
            o = in(reg) o,
            field = const FIELD,
            v = out(reg) v,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    v
}

/// Whether byte `cell` of the filter map at `map` is non-zero (the block may be sampled): one
/// compare with memory. (Written out because an atomic byte load in Rust becomes a load and a
/// test; the asm read, like the engine's atomic loads, is a single byte access.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn filter_marked(map: usize, cell: usize) -> bool {
    // SAFETY: `map` is a thread's filter, a map of 2^CELL_BITS bytes (the engine's, or an
    // all-ones one), and the caller masks `cell` to that size; the asm only reads the byte.
    unsafe {
        std::arch::asm!(
            "cmp byte ptr [{map} + {cell}], 0",
            "jne {marked}",
            map = in(reg) map,
            cell = in(reg) cell,
            marked = label { return true; },
            options(nostack, readonly),
        );
    }
    false
}

/// Adds `bytes` to the calling thread's freed bytes (TLS offset `o`): one addition in memory.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn add_freed(o: usize, bytes: usize) {
    // SAFETY: as in `tls_read`, for the thread's `freed` field, which only this thread writes
    // (other threads read it as a whole word). Without `nomem`, the compiler assumes the asm
    // may change any memory and keeps no cached copy of the field across it.
    unsafe {
        std::arch::asm!(
            "add qword ptr fs:[{o} + {field}], {b}",
            o = in(reg) o,
            field = const FREED_OFFSET,
            b = in(reg) bytes,
            options(nostack),
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
    // glibc's chunks; a chained allocator's usable bytes instead (`ShimSource::unit`).
    const UNIT: ying_profiler::ByteUnit = ying_profiler::ByteUnit::Chunk;

    #[inline(always)]
    fn thread_state() -> &'static ThreadState {
        // SAFETY: `tls_block` gives this thread's 128-byte, 64-aligned TLS block, initialised
        // as ThreadState::new() (a valid ThreadState), which lives as long as the thread;
        // reaching it never allocates.
        unsafe { &*(tls_block() as *const ThreadState) }
    }

    fn register_thread_exit(ts: &ThreadState) -> bool {
        let Some(key) = exit_key() else { return false };
        // SAFETY: `key` is a created key; the value is only read back by our destructor.
        unsafe { libc::pthread_setspecific(key, ts as *const ThreadState as *const c_void) == 0 }
    }

    fn is_entry_frame(ip: usize, _function: impl FnOnce() -> usize) -> bool {
        Self::own_code().contains(&ip)
    }

    // Threads are set up when they start (`thread_start`), never at a first allocation.
    const SET_UP_AT_FIRST_ALLOCATION: bool = false;
    // Stack bounds are recorded at thread start: `pthread_getattr_np` allocates under the
    // thread's own lock, so a sample inside it must not ask it again.
    const LOOKS_UP_STACK_BOUNDS: bool = false;

    #[inline(always)]
    fn own_code() -> std::ops::Range<usize> {
        OWN_START.load(Ordering::Relaxed)..OWN_END.load(Ordering::Relaxed)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn budget() -> u64 {
        tls_read::<BUDGET_OFFSET>(tls_offset())
    }

    fn real_filter() -> *const u8 {
        if crate::chain::next().is_some() {
            // Every free of a chained allocator's block takes the slow path (see `chain`).
            // SAFETY: only the address of the C array is taken; it is read-only data.
            return std::ptr::addr_of!(ying_reject_none).cast();
        }
        ying_profiler::front_end::filter::byte_map()
    }

    #[inline(always)]
    fn may_be_sampled(map: *const u8, ptr: usize) -> bool {
        ying_profiler::front_end::filter::may_contain_in_bytes(map, ptr)
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

/// The bytes the exact totals count for a block: its chunk size (the usable size plus glibc's
/// 8-byte header, 16 bytes for mmapped chunks). The same value is computed at allocation and at
/// free, so totals stay exact; it costs a load and a mask.
///
/// # Safety
/// As for [`usable_size`].
#[inline(always)]
pub(crate) unsafe fn counted_size(p: *mut u8) -> usize {
    // SAFETY: as in `usable_size`.
    unsafe { header(p) & !7 }
}
