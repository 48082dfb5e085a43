//! `libying.so`: the `LD_PRELOAD` front end of the Ying memory profiler.
//!
//! This file holds every symbol the library exports: the whole glibc allocation family, each a
//! few lines that call glibc's own allocator (`__libc_*`, no `dlsym`) through the engine's hooks.
//! On x86-64 the unsampled paths of `malloc`, `calloc`, `realloc`, `memalign`, `aligned_alloc`
//! and `free` are written out (in assembly, or in Rust that compiles to the same), because every
//! instruction of them counts (`bench/README.md`, `bench/family.sh`).
//! Allocations keep glibc's layout (no headers), so a call we do not see costs accounting, never
//! heap corruption. `pthread_create` is exported too, so that every thread is set up when it
//! starts (`thread_start`), and the blocking calls tell when the report thread can start
//! (`safe_points`), with `sigaction` and the `signal` family, which say whether a thread is
//! inside a signal handler (`signals`). `exit` is exported so that threads calling it at once
//! cannot end the process under the exit report (`ying_profiler::front_end::before_exit`);
//! `setuid` and its relatives so that a worker dropping privileges keeps a directory it may
//! write in (`start::change_user`). `mmap`, `mmap64`, `munmap` and `mremap` count the program's anonymous
//! mappings (the engine's `mapped`) around the system calls (`maps`). Everything else lives in `host` (per-thread state, our frames),
//! `start` (configuration, fork, reports) and `heap` (the library's own allocator).
//! `prctl` and `syscall` are exported to see a seccomp filter being installed (`seccomp`), and
//! the `exec` family to remove the live file of an image that ends by `exec` (`exec`).

mod chain;
mod cxx;
mod exec;
mod glibc_next;
mod heap;
mod host;
mod maps;
mod safe_points;
mod seccomp;
mod signals;
mod start;
mod thread_start;

use std::ffi::c_void;

use ying_profiler::front_end::hooks::{self, on_alloc, on_realloc};
use ying_profiler::front_end::mapped;

use host::{SETTINGS, ShimHost, counted_size, usable_size};
#[cfg(target_arch = "x86_64")]
use host::{add_freed, filter_marked, tls_offset, tls_read};
#[cfg(target_arch = "x86_64")]
use ying_profiler::front_end::filter::{CELL_BITS, CELL_SHIFT};
#[cfg(target_arch = "x86_64")]
use ying_profiler::front_end::thread_state::{BUDGET_OFFSET, FILTER_OFFSET, FREED_OFFSET};

#[global_allocator]
static INTERNAL: heap::OwnHeap = heap::OwnHeap;

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// Every symbol this library exports (checked against `nm -D` by the preload tests).
pub const EXPORTED_SYMBOLS: [&str; 84] = [
    "_ZdaPv",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdaPvSt11align_val_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvm",
    "_ZdaPvmSt11align_val_t",
    "_ZdlPv",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdlPvm",
    "_ZdlPvmSt11align_val_t",
    "_Znam",
    "_ZnamRKSt9nothrow_t",
    "_ZnamSt11align_val_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_Znwm",
    "_ZnwmRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "accept",
    "accept4",
    "aligned_alloc",
    "bsd_signal",
    "calloc",
    "cfree",
    "clock_nanosleep",
    "dlclose",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "execv",
    "execve",
    "execveat",
    "execvp",
    "execvpe",
    "exit",
    "fexecve",
    "free",
    "free_aligned_sized",
    "free_sized",
    "malloc",
    "malloc_usable_size",
    "memalign",
    "mmap",
    "mmap64",
    "mremap",
    "munmap",
    "nanosleep",
    "pause",
    "poll",
    "posix_memalign",
    "ppoll",
    "prctl",
    "pselect",
    "pthread_cond_timedwait",
    "pthread_cond_wait",
    "pthread_create",
    "pvalloc",
    "read",
    "realloc",
    "reallocarray",
    "select",
    "seteuid",
    "setresuid",
    "setreuid",
    "setuid",
    "sigaction",
    "signal",
    "sigset",
    "sigsuspend",
    "sigtimedwait",
    "sigwait",
    "sigwaitinfo",
    "sleep",
    "syscall",
    "sysv_signal",
    "thrd_sleep",
    "usleep",
    "valloc",
    "wait",
    "wait4",
    "waitid",
    "waitpid",
];

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e }
}

/// Counts a block returned by glibc.
fn counted(p: *mut u8) -> usize {
    // SAFETY: only called with non-null blocks glibc just returned.
    unsafe { counted_size(p) }
}

/// One allocation through the hooks; `real` is the glibc call.
#[inline(always)]
fn alloc_with(size: usize, real: impl FnOnce() -> *mut c_void + Copy) -> *mut c_void {
    let p = on_alloc::<ShimHost>(&SETTINGS, size, move || real().cast(), counted);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn ying_init() {
        start::init();
    }
    ying_init
};

// SAFETY (all exports below): no other global function of these names exists in this
// library; the dynamic linker resolves the program's calls to them because the library is
// preloaded, which is the purpose of the library.

/// The body of the hand-written allocating entries (`malloc`, `calloc`, `memalign`,
/// `aligned_alloc`). `test` tests the arguments, branching to `slow` for whatever the fast path
/// does not take, and ends by pushing the request, which waits on the stack in the slot that
/// keeps it aligned for the call. Then glibc's `real` is called with the arguments untouched,
/// and the block's chunk size is subtracted from the thread's budget, one instruction that
/// counts the block and decides whether it is sampled (see `ThreadState`). A block that used the budget up
/// (a sample, or a thread that is not sampling, whose budget is zero) goes on to
/// `alloc_charge_missed` with the request, the chunk size, the entry stack pointer and the
/// program's `rbp`. A failed allocation returns glibc's NULL and `errno`. The call frame
/// information (the `.cfi` lines) describes the push: a debugger or an unwinder stopped inside
/// glibc's allocator (a crash in a corrupted heap, a profiler's interrupt) walks through these
/// entries to the program's frames, where without it gdb read the pushed request as a return
/// address (`tests/debugger.rs`).
#[cfg(target_arch = "x86_64")]
macro_rules! alloc_fast_path {
    (test: [$($test:literal),* $(,)?], slow: $slow:path, real: $real:path $(,)?) => {
        std::arch::naked_asm!(
            ".cfi_startproc",
            $($test,)*
            // `test` ended with the push.
            ".cfi_adjust_cfa_offset 8",
            "call qword ptr [rip + {real}@GOTPCREL]",
            "test rax, rax",
            "je 5f",
            "mov rcx, qword ptr [rip + {tls}@GOTTPOFF]",
            "mov rdx, qword ptr [rax - 8]",
            "and rdx, -8",
            "sub qword ptr fs:[rcx + {budget}], rdx",
            "jbe 4f",
            "pop rcx",
            ".cfi_adjust_cfa_offset -8",
            "ret",
            "4:",
            ".cfi_adjust_cfa_offset 8",
            "pop rsi",
            ".cfi_adjust_cfa_offset -8",
            "mov rdi, rax",
            "mov rcx, rsp",
            "mov r8, rbp",
            "jmp {missed}",
            "5:",
            ".cfi_adjust_cfa_offset 8",
            "pop rcx",
            ".cfi_adjust_cfa_offset -8",
            "jmp {failed}",
            ".cfi_endproc",
            failed = sym null_after_failure,
            fast_below = sym chain::MALLOC_FAST_BELOW,
            slow = sym $slow,
            real = sym $real,
            tls = sym host::ying_tls_block,
            budget = const BUDGET_OFFSET,
            missed = sym alloc_charge_missed,
        )
    };
}

/// `memalign`'s and `aligned_alloc`'s body: a power-of-two alignment (or zero, which glibc
/// takes as the smallest) and a request below the giant limit go to glibc's `memalign` and are
/// charged as `malloc` charges its blocks; any other alignment or size takes `memalign_slow`.
#[cfg(target_arch = "x86_64")]
macro_rules! memalign_fast_path {
    () => {
        alloc_fast_path!(
            test: [
                "lea rax, [rdi - 1]",
                "test rax, rdi",
                "jne {slow}",
                "cmp rsi, qword ptr [rip + {fast_below}]",
                "jae {slow}",
                "push rsi",
            ],
            slow: memalign_slow,
            real: __libc_memalign,
        )
    };
}

/// C `malloc`, written out in assembly because every instruction of it counts (see
/// bench/README.md): `alloc_fast_path`'s body after one test. A request below the giant limit
/// goes to glibc (the limit is read from `chain::MALLOC_FAST_BELOW`, zero while the allocator
/// under Ying is not known to be glibc's, which sends every call to `malloc_slow`). Giant
/// requests take the hooks' path before any allocation, which refuses them.
///
/// # Safety
/// As for glibc's `malloc`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: a System V function body: it reads its argument from rdi and returns in rax,
    // clobbers only caller-saved registers (rax, rcx, rdx, rsi, rdi, r8), calls glibc with the stack
    // 16-byte aligned (the push), leaves the stack as it found it on every path, and its tail
    // jumps reach extern "C" functions with the stack as at entry, so they return to our
    // caller. It reads the fast path's limit (an 8-byte atomic static), the thread's own TLS
    // block at its initial-exec offset and the chunk header of glibc's non-null block, and
    // writes only the thread's budget, which no other thread writes.
    alloc_fast_path!(
        test: ["cmp rdi, qword ptr [rip + {fast_below}]", "jae {slow}", "push rdi"],
        slow: malloc_slow,
        real: __libc_malloc,
    )
}

/// `malloc` of a request at or above the giant limit (the hooks refuse it), or any request
/// while the allocator under Ying is not glibc's.
#[cfg(target_arch = "x86_64")]
extern "C" fn malloc_slow(size: usize) -> *mut c_void {
    malloc_any(size)
}

/// `malloc` through the hooks, to whichever allocator is under Ying.
#[inline(always)]
pub(crate) fn malloc_any(size: usize) -> *mut c_void {
    match chain::next() {
        // SAFETY: forwards to the chained allocator with the caller's argument.
        Some(n) => chained_alloc(n, size, move || unsafe { (n.malloc)(size) }),
        // SAFETY: forwards to glibc with the caller's argument.
        None => alloc_with(size, move || unsafe { __libc_malloc(size) }),
    }
}

/// One allocation through the hooks to the chained allocator `n`, counted in its usable bytes.
#[inline(always)]
fn chained_alloc(
    n: &'static chain::Next,
    size: usize,
    real: impl FnOnce() -> *mut c_void + Copy,
) -> *mut c_void {
    if chain::reentered() {
        return real();
    }
    let p =
        on_alloc::<ShimHost>(&SETTINGS, size, move || chain::inside(real).cast(), chained_size(n));
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// The counted size of a chained allocator's live, non-null block: its usable size.
#[inline(always)]
fn chained_size(n: &'static chain::Next) -> impl Fn(*mut u8) -> usize + Copy {
    // SAFETY: only called with non-null blocks of that allocator (the hooks' contract).
    move |p| unsafe { chain::counted(n, p.cast()) }
}

/// `malloc`'s or `calloc`'s block `p` used up the budget with `charged` bytes (see
/// `hooks::charge_missed`). (`_request`, the size asked for, is the stack slot the fast path pops
/// into the second argument register: the figures count `charged` bytes.) The fast path
/// tail-jumps here with its own entry stack pointer and the program's `rbp` untouched: see
/// [`caller_frame`].
#[cfg(target_arch = "x86_64")]
extern "C" fn alloc_charge_missed(
    p: *mut c_void,
    _request: usize,
    charged: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    // SAFETY: `sp` and `bp` are as `caller_frame` requires (the fast paths' contract above).
    let caller = unsafe { caller_frame(sp, bp) };
    hooks::charge_missed::<ShimHost>(&SETTINGS, p.cast(), charged as u64, Some(caller)).cast()
}

/// glibc failed an allocation of the fast paths (a memory limit, strict overcommit): counted,
/// so that reports keep off the program's last memory (`hooks::alloc_failed`), and NULL
/// returned with glibc's `errno` untouched. The fast paths tail-jump here with the stack as at
/// their entry.
#[cfg(target_arch = "x86_64")]
extern "C" fn null_after_failure() -> *mut c_void {
    hooks::alloc_failed();
    std::ptr::null_mut()
}

/// `realloc`'s fast path resized an unsampled block to `p` (`new_counted` bytes) and its
/// growth, `growth` bytes, used up the budget (see `hooks::growth_missed`); `sp` and `bp` as for
/// [`alloc_charge_missed`].
#[cfg(target_arch = "x86_64")]
extern "C" fn realloc_growth_missed(
    p: *mut c_void,
    new_counted: usize,
    growth: usize,
    sp: usize,
    bp: usize,
) -> *mut c_void {
    // SAFETY: `sp` and `bp` are as `caller_frame` requires (`realloc`'s contract above).
    let caller = unsafe { caller_frame(sp, bp) };
    hooks::growth_missed::<ShimHost>(
        &SETTINGS,
        p.cast(),
        new_counted as u64,
        growth as u64,
        Some(caller),
    )
    .cast()
}

/// The program's innermost frame, where a sample's unwind starts, from a fast path's own entry
/// stack pointer `sp` (where the return address into the program lies) and the program's `rbp`
/// (`bp`), which the fast path leaves untouched.
///
/// # Safety
/// `sp` is the stack pointer the fast path was entered with, restored before its tail jump to
/// the caller of this function: it points at the return address its caller's `call` pushed, on
/// this thread's stack, which is the caller's own return address and is mapped while it runs.
#[cfg(target_arch = "x86_64")]
unsafe fn caller_frame(sp: usize, bp: usize) -> hooks::CallerFrame {
    // SAFETY: the function's contract.
    let return_address = unsafe { (sp as *const usize).read() };
    hooks::CallerFrame { return_address, stack_pointer: sp + 8, frame_pointer: bp }
}

/// C `malloc` (targets without the %fs-relative fast path).
///
/// # Safety
/// As for glibc's `malloc`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    malloc_any(size)
}

/// C `calloc`, written out in assembly as `malloc` is, with the same contract: the product
/// `n * size` is the request, and an overflowing product takes the slow path, which gives NULL
/// and `ENOMEM`.
///
/// # Safety
/// As for glibc's `calloc`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: as for `malloc` (the same body after the product, which `mul` leaves in rax,
    // clobbering only rdx, and which waits on the stack where `malloc`'s request does); the
    // arguments in rdi and rsi reach glibc's `calloc`, or the slow path, untouched.
    alloc_fast_path!(
        test: [
            "mov rax, rdi",
            "mul rsi",
            "jo {slow}",
            "cmp rax, qword ptr [rip + {fast_below}]",
            "jae {slow}",
            "push rax",
        ],
        slow: calloc_slow,
        real: __libc_calloc,
    )
}

/// `calloc` of an overflowing product, of a request at or above the giant limit, or of any
/// request while the allocator under Ying is not glibc's.
#[cfg(target_arch = "x86_64")]
extern "C" fn calloc_slow(n: usize, size: usize) -> *mut c_void {
    calloc_any(n, size)
}

/// C `calloc` (targets without the %fs-relative fast path).
///
/// # Safety
/// As for glibc's `calloc`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    calloc_any(n, size)
}

/// `calloc` through the hooks, to whichever allocator is under Ying: an overflowing
/// `n * size` gives NULL and `ENOMEM`.
fn calloc_any(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    match chain::next() {
        // SAFETY: forwards to the chained allocator with the caller's arguments.
        Some(next) => chained_alloc(next, total, move || unsafe { (next.calloc)(n, size) }),
        // SAFETY: forwards to glibc with the caller's arguments.
        None => alloc_with(total, move || unsafe { __libc_calloc(n, size) }),
    }
}

/// C `free`: the record of a sampled block is removed before the block is released. The
/// unsampled path is written out here: the calling thread's filter map says the block is
/// certainly not sampled, its chunk size is added to the thread's freed bytes and glibc frees
/// it. Anything else takes the hooks' slow path (null among them: its cell is always marked).
///
/// # Safety
/// `p` is null or a live block from this allocator family.
#[cfg(target_arch = "x86_64")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    let o = tls_offset();
    let map = tls_read::<FILTER_OFFSET>(o) as usize;
    if !filter_marked(map, (p as usize >> CELL_SHIFT) & ((1 << CELL_BITS) - 1)) {
        add_freed(o, counted(p.cast()));
        // SAFETY: `p` is a live glibc block (the caller's contract); glibc's free preserves
        // errno.
        return unsafe { __libc_free(p) };
    }
    free_slow(p)
}

/// C `free` (targets without the %fs-relative fast path).
///
/// # Safety
/// `p` is null or a live block from this allocator family.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if chain::next().is_some() {
        return free_slow(p);
    }
    ying_profiler::front_end::hooks::on_free::<ShimHost>(
        p.cast(),
        // SAFETY: called only for a non-null `p`, a live glibc block (caller contract), so its
        // header is readable.
        |p| unsafe { counted_size(p) },
        // SAFETY: as above; glibc's free preserves errno.
        |p| unsafe { __libc_free(p.cast()) },
    )
}

/// Everything but the unsampled path of `free` (and all of `cfree`, and every `free` to a
/// chained allocator: its threads' filters send every free here).
#[inline(never)]
fn free_slow(p: *mut c_void) {
    if let Some(n) = chain::next() {
        if chain::reentered() {
            // SAFETY: the allocator's own block, freed from inside it (see `chain::reentered`).
            return unsafe { (n.free)(p) };
        }
        return hooks::free_slow::<ShimHost>(p.cast(), chained_size(n), |p| {
            // SAFETY: `p` is null or a live block of the chained allocator (caller contract).
            chain::inside(|| unsafe { (n.free)(p.cast()) })
        });
    }
    hooks::free_slow::<ShimHost>(
        p.cast(),
        // SAFETY: called only for a non-null `p`, a live glibc block (caller contract), so its
        // header is readable.
        |p| unsafe { counted_size(p) },
        // SAFETY: as above; glibc's free preserves errno.
        |p| unsafe { __libc_free(p.cast()) },
    )
}

/// Old alias of `free` (rare: it always takes the hooks' path).
///
/// # Safety
/// As for `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    free_slow(p)
}

/// C `realloc`, written out in assembly as `malloc` and `free` are. The unsampled path: the
/// calling thread's filter map says the old block is certainly not sampled (which also means
/// the thread is set up and outside profiler code, and that the block is not null: null's cell
/// is always marked), the new size is neither zero nor giant (one compare, see
/// `chain::REALLOC_FAST_BELOW`), and glibc's `realloc` succeeds. The block's chunk sizes before
/// and after give its growth, charged to the budget (a growth that uses it up makes the new
/// block a sample, `realloc_growth_missed`), or its shrink, added to the freed bytes. The old
/// chunk size waits on the stack in the slot that aligns it for the call. A failure returns
/// glibc's NULL and `errno`, the old block untouched and uncounted. Everything else takes the
/// hooks' path (`realloc_slow`).
///
/// # Safety
/// `p` is null or a live block from this allocator family.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: a System V function body, as `malloc`'s: arguments in rdi and rsi, result in rax,
    // only caller-saved registers clobbered (rax, rcx, rdx, rsi, rdi, r8), the stack aligned by
    // the push for the call and left as found on every path, tail jumps with the stack as at
    // entry. It reads the thread's own TLS block (budget, freed bytes, filter pointer) at its
    // initial-exec offset, the filter map that pointer names (a byte per cell, within its
    // 2^CELL_BITS bytes by the mask), the limit (an 8-byte atomic static), and the chunk
    // headers of the live block `p` (past the filter test, which rejects null) and of glibc's
    // non-null result; it writes only the thread's budget or freed bytes, which no other
    // thread writes.
    std::arch::naked_asm!(
        ".cfi_startproc",
        "mov rax, qword ptr [rip + {tls}@GOTTPOFF]",
        "mov rcx, qword ptr fs:[rax + {filter}]",
        "mov edx, edi",
        "shr edx, {cell_shift}",
        "and edx, {cell_mask}",
        "cmp byte ptr [rcx + rdx], 0",
        "jne {slow}",
        "lea rdx, [rsi - 1]",
        "cmp rdx, qword ptr [rip + {fast_below}]",
        "jae {slow}",
        "mov rdx, qword ptr [rdi - 8]",
        "and rdx, -8",
        "push rdx",
        ".cfi_adjust_cfa_offset 8",
        "call qword ptr [rip + {real}@GOTPCREL]",
        "pop rsi",
        ".cfi_adjust_cfa_offset -8",
        "test rax, rax",
        "je {failed}",
        "mov rcx, qword ptr [rip + {tls}@GOTTPOFF]",
        "mov rdx, qword ptr [rax - 8]",
        "and rdx, -8",
        "sub rdx, rsi",
        "jb 5f",
        "sub qword ptr fs:[rcx + {budget}], rdx",
        "jbe 4f",
        "ret",
        "5:",
        "neg rdx",
        "add qword ptr fs:[rcx + {freed}], rdx",
        "ret",
        "4:",
        "add rsi, rdx",
        "mov rdi, rax",
        "mov rcx, rsp",
        "mov r8, rbp",
        "jmp {missed}",
        ".cfi_endproc",
        tls = sym host::ying_tls_block,
        filter = const FILTER_OFFSET,
        cell_shift = const CELL_SHIFT,
        cell_mask = const (1u32 << CELL_BITS) - 1,
        fast_below = sym chain::REALLOC_FAST_BELOW,
        slow = sym realloc_slow,
        real = sym __libc_realloc,
        budget = const BUDGET_OFFSET,
        freed = const FREED_OFFSET,
        missed = sym realloc_growth_missed,
        failed = sym null_after_failure,
    )
}

/// Everything but `realloc`'s unsampled path.
///
/// # Safety
/// As for `realloc`.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn realloc_slow(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller's contract, passed on.
    unsafe { realloc_any(p, size) }
}

/// C `realloc` (targets without the %fs-relative fast path).
///
/// # Safety
/// `p` is null or a live block from this allocator family.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: the caller's contract, passed on.
    unsafe { realloc_any(p, size) }
}

/// `realloc` through the hooks, to whichever allocator is under Ying: `realloc(NULL, n)` is
/// `malloc(n)`; `realloc(p, 0)` frees `p` and returns NULL (glibc); on failure the old block
/// stays valid and keeps its record.
///
/// # Safety
/// `p` is null or a live block from this allocator family.
unsafe fn realloc_any(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: `malloc` has no preconditions.
        return unsafe { malloc(size) };
    }
    if let Some(n) = chain::next() {
        if chain::reentered() {
            // SAFETY: the allocator's own block, from inside it (see `chain::reentered`).
            return unsafe { (n.realloc)(p, size) };
        }
        // SAFETY: `p` is a live block of the chained allocator (caller contract).
        let old = unsafe { chain::counted(n, p) };
        let q = on_realloc::<ShimHost>(
            &SETTINGS,
            p.cast(),
            old,
            size,
            // SAFETY: forwards to the chained allocator with the caller's arguments.
            || chain::inside(|| unsafe { (n.realloc)(p, size) }).cast(),
            chained_size(n),
        );
        if q.is_null() && size != 0 {
            set_errno(libc::ENOMEM);
        }
        return q.cast();
    }
    // SAFETY: `p` is a live glibc block (caller contract).
    let old = unsafe { counted_size(p.cast()) };
    let q = on_realloc::<ShimHost>(
        &SETTINGS,
        p.cast(),
        old,
        size,
        // SAFETY: forwards to glibc with the caller's arguments.
        || unsafe { __libc_realloc(p, size) }.cast(),
        counted,
    );
    if q.is_null() && size != 0 {
        set_errno(libc::ENOMEM);
    }
    q.cast()
}

/// C `reallocarray`: `realloc(p, n * size)` with an overflow check (NULL and `ENOMEM`).
///
/// # Safety
/// As for `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: same contract as `realloc`.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

/// C `posix_memalign`: returns `EINVAL` for an alignment that is not a power of two multiple of
/// `sizeof(void *)`, `ENOMEM` on failure, and leaves `*memptr` alone unless it succeeds.
///
/// # Safety
/// `memptr` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(
    memptr: *mut *mut c_void,
    align: usize,
    size: usize,
) -> i32 {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    // SAFETY: errno is restored: posix_memalign reports through its return value.
    let saved = unsafe { *libc::__errno_location() };
    // SAFETY: `memalign` has no preconditions; `align`, a power of two, takes its fast path.
    let p = unsafe { memalign(align, size) };
    set_errno(saved);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller guarantees `memptr` is writable.
    unsafe { *memptr = p };
    0
}

/// `memalign` and `aligned_alloc` as glibc 2.36 does them: an alignment above `SIZE_MAX / 2 + 1`
/// (never a power of two) is NULL with `EINVAL`, before anything else, whatever the size;
/// any other alignment is rounded up to a power of two by glibc, and a failure is `ENOMEM`.
/// (Without the early check, glibc's EINVAL was overwritten with the ENOMEM of `alloc_with`.)
fn memalign_like(align: usize, size: usize) -> *mut c_void {
    if align > usize::MAX / 2 + 1 {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    aligned_any(align.max(1).checked_next_power_of_two().unwrap_or(align), size)
}

/// An aligned allocation through the hooks, to whichever allocator is under Ying; `align` is
/// a power of two (glibc rounds others up itself).
fn aligned_any(align: usize, size: usize) -> *mut c_void {
    match chain::next() {
        // SAFETY: forwards to the chained allocator with a power-of-two alignment.
        Some(n) => chained_alloc(n, size, move || unsafe { n.memalign(align, size) }),
        // SAFETY: forwards to glibc with the caller's arguments.
        None => alloc_with(size, move || unsafe { __libc_memalign(align, size) }),
    }
}

/// C11 `aligned_alloc` (glibc 2.36 treats it as `memalign`: any alignment up to
/// `SIZE_MAX / 2 + 1` is accepted and rounded up to a power of two).
///
/// # Safety
/// As for glibc's `aligned_alloc`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    // SAFETY: as for `memalign`.
    memalign_fast_path!()
}

/// Obsolete `memalign`.
///
/// # Safety
/// As for glibc's `memalign`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: as for `malloc` (the same body after the alignment test, which clobbers only rax;
    // the request waits on the stack where `malloc`'s does); the arguments in rdi and rsi reach
    // glibc's `memalign`, or the slow path, untouched.
    memalign_fast_path!()
}

/// `memalign` or `aligned_alloc` of an alignment that is not a power of two, of a giant
/// request, or of any request while the allocator under Ying is not glibc's.
#[cfg(target_arch = "x86_64")]
extern "C" fn memalign_slow(align: usize, size: usize) -> *mut c_void {
    memalign_like(align, size)
}

/// C11 `aligned_alloc` (targets without the %fs-relative fast path).
///
/// # Safety
/// As for glibc's `aligned_alloc`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    memalign_like(align, size)
}

/// Obsolete `memalign` (targets without the %fs-relative fast path).
///
/// # Safety
/// As for glibc's `memalign`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    memalign_like(align, size)
}

/// Obsolete `valloc` (page-aligned).
///
/// # Safety
/// As for glibc's `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    match chain::next() {
        // SAFETY: forwards to the chained allocator.
        Some(n) => chained_alloc(n, size, move || unsafe { n.valloc(size) }),
        // SAFETY: forwards to glibc.
        None => alloc_with(size, move || unsafe { __libc_valloc(size) }),
    }
}

/// Obsolete `pvalloc` (page-aligned, size rounded up to pages).
///
/// # Safety
/// As for glibc's `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match chain::next() {
        // SAFETY: forwards to the chained allocator.
        Some(n) => chained_alloc(n, size, move || unsafe { n.pvalloc(size) }),
        // SAFETY: forwards to glibc.
        None => alloc_with(size, move || unsafe { __libc_pvalloc(size) }),
    }
}

/// `pthread_create`: a safe point (the program is becoming multi-threaded: the report thread
/// may start too), then the new thread runs the shim's thread-start code before `routine`,
/// which sets it up for sampling while nothing of the program's runs on it (see
/// `thread_start`).
///
/// # Safety
/// As for glibc's `pthread_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: thread_start::StartRoutine,
    arg: *mut c_void,
) -> libc::c_int {
    start::safe_point(start::Wait::Always);
    // SAFETY: the caller's arguments, passed on under the same contract.
    unsafe { thread_start::create(thread, attr, routine, arg) }
}

/// `exit`: when another thread is already exiting, waits (bounded) until its exit report is
/// written (see `before_exit`), then glibc's `exit`.
///
/// # Safety
/// As for glibc's `exit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn exit(status: libc::c_int) -> ! {
    ying_profiler::front_end::before_exit();
    let real = start::real_exit();
    // SAFETY: glibc's `exit` (or `_exit` when it could not be found), with the caller's status.
    unsafe { real(status) }
}

/// `dlclose`: glibc's own (found with `dlsym(RTLD_NEXT)` at the first call, in the program's
/// call, never inside an allocation hook), then the unwinder's cached rules are forgotten: an
/// object loaded later at the closed one's addresses has rules of its own. (Cached symbols are
/// checked against the loader's count of unloaded objects at each report instead.)
///
/// # Safety
/// As for glibc's `dlclose`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> libc::c_int {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut real = REAL.load(Ordering::Relaxed);
    if real == 0 {
        // SAFETY: the name is NUL-terminated; RTLD_NEXT finds the next definition after this
        // library in the lookup order, glibc's.
        real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) } as usize;
        if real == 0 {
            return -1;
        }
        REAL.store(real, Ordering::Relaxed);
    }
    // SAFETY: `real` is the non-null address of glibc's `dlclose`, which has this signature.
    let real: unsafe extern "C" fn(*mut c_void) -> libc::c_int =
        unsafe { std::mem::transmute(real) };
    // SAFETY: forwards the caller's handle (the caller's contract).
    let rc = unsafe { real(handle) };
    if rc == 0 {
        // The object that defined a C++ operator may be gone.
        cxx::forget();
        // As profiler code: the flush holds the unwinder's fill lock, which a sample taken by a
        // signal handler on this thread would otherwise wait for forever.
        hooks::run_guarded(host::thread_state(), ying_profiler::front_end::flush_unwind_cache);
    }
    rc
}

/// `mmap`: the system call (see `maps`); an anonymous mapping that is not `PROT_NONE` is
/// counted as an allocation of its pages, at the caller's stack when sampled, and a
/// `MAP_FIXED` mapping replaces what was counted where it lands (see the engine's `mapped`).
/// Errors are the kernel's, in `errno`.
///
/// # Safety
/// As for glibc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut c_void {
    if chain::in_allocator() {
        // The chained allocator's own heap (see `chain::inside`).
        // SAFETY: the caller's arguments, under the caller's contract.
        return unsafe { maps::mmap(addr, len, prot, flags, fd, offset) };
    }
    mapped::on_mmap::<ShimHost>(&SETTINGS, len, prot, flags, || {
        // SAFETY: the caller's arguments, under the caller's contract.
        unsafe { maps::mmap(addr, len, prot, flags, fd, offset) }
    })
}

/// `mmap64`, a second name of `mmap` in glibc on 64-bit targets (Python calls it), exported
/// separately because a program built with `_FILE_OFFSET_BITS=64` binds to it by that name.
///
/// # Safety
/// As for glibc's `mmap64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut c_void {
    // SAFETY: the same function under its other name, with the caller's arguments.
    unsafe { mmap(addr, len, prot, flags, fd, offset) }
}

/// `munmap`: the system call; the counted bytes of the range are freed.
///
/// # Safety
/// As for glibc's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> libc::c_int {
    if chain::in_allocator() {
        // SAFETY: the caller's arguments, under the caller's contract.
        return unsafe { maps::munmap(addr, len) };
    }
    // SAFETY: the caller's arguments, under the caller's contract.
    mapped::on_munmap::<ShimHost>(&SETTINGS, addr, len, || unsafe { maps::munmap(addr, len) })
}

/// `mremap`: the system call; a counted region grows, shrinks or moves as a `realloc`'d block
/// does, with its stack. C declares it variadic, its fifth argument (`new_address`) read only
/// with `MREMAP_FIXED`: on x86_64 and aarch64 Linux a variadic call passes its integer
/// arguments in the same registers as a fixed-argument call, so the fifth parameter here is
/// the caller's when it passed one, and is not looked at otherwise (`maps::mremap`).
///
/// # Safety
/// As for glibc's `mremap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: libc::c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if chain::in_allocator() {
        // SAFETY: the caller's arguments, under the caller's contract.
        return unsafe { maps::mremap(old, old_len, new_len, flags, new_addr) };
    }
    mapped::on_mremap::<ShimHost>(&SETTINGS, old, old_len, new_len, || {
        // SAFETY: the caller's arguments, under the caller's contract.
        unsafe { maps::mremap(old, old_len, new_len, flags, new_addr) }
    })
}

/// `malloc_usable_size`: the chained allocator's, or read from glibc's chunk header (the
/// layout is unchanged).
///
/// # Safety
/// `p` is null or a live block from this allocator family.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    if let Some(n) = chain::next() {
        // SAFETY: `p` is a live block of the chained allocator (caller contract).
        return unsafe { (n.usable)(p) };
    }
    // SAFETY: `p` is a live glibc block (caller contract).
    unsafe { usable_size(p.cast()) }
}

/// C23 `free_sized`: `free` (the size is the caller's promise, not needed).
///
/// # Safety
/// As for `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: the caller's contract is free's.
    unsafe { free(p) }
}

/// C23 `free_aligned_sized`: `free`.
///
/// # Safety
/// As for `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    // SAFETY: the caller's contract is free's.
    unsafe { free(p) }
}

// C++'s `operator new` and `operator delete` (see `cxx`): over glibc, libstdc++'s (which call
// `malloc` and `free`, so the stacks keep their `operator new` frame); over a chained
// allocator, which defines its own operators that call its `malloc` internally, the shim's
// `malloc` and `free` paths, and that allocator's operator only when an allocation fails (it
// runs the new-handler and throws).

cxx::operator_new! {
    /// `operator new(size_t)`.
    0 fn _Znwm try: cxx::try_new
}
cxx::operator_new! {
    /// `operator new[](size_t)`.
    1 fn _Znam try: cxx::try_new
}
cxx::operator_new! {
    /// `operator new(size_t, const std::nothrow_t&)`.
    2 fn _ZnwmRKSt9nothrow_t try: cxx::try_new
}
cxx::operator_new! {
    /// `operator new[](size_t, const std::nothrow_t&)`.
    3 fn _ZnamRKSt9nothrow_t try: cxx::try_new
}
cxx::operator_new! {
    /// `operator new(size_t, std::align_val_t)`.
    4 fn _ZnwmSt11align_val_t try: cxx::try_new_aligned
}
cxx::operator_new! {
    /// `operator new[](size_t, std::align_val_t)`.
    5 fn _ZnamSt11align_val_t try: cxx::try_new_aligned
}
cxx::operator_new! {
    /// `operator new(size_t, std::align_val_t, const std::nothrow_t&)`.
    6 fn _ZnwmSt11align_val_tRKSt9nothrow_t try: cxx::try_new_aligned
}
cxx::operator_new! {
    /// `operator new[](size_t, std::align_val_t, const std::nothrow_t&)`.
    7 fn _ZnamSt11align_val_tRKSt9nothrow_t try: cxx::try_new_aligned
}

/// An aligned `operator new`'s allocation: C++ requires a power-of-two alignment, and a size
/// of zero still returns a distinct block.
pub(crate) fn cxx_aligned(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        return std::ptr::null_mut();
    }
    aligned_any(align.max(std::mem::size_of::<usize>()), size.max(1))
}

cxx::operator_delete! {
    /// `operator delete(void*)`.
    8 fn _ZdlPv(p: *mut c_void)
}
cxx::operator_delete! {
    /// `operator delete[](void*)`.
    9 fn _ZdaPv(p: *mut c_void)
}
cxx::operator_delete! {
    /// `operator delete(void*, size_t)`.
    10 fn _ZdlPvm(p: *mut c_void, size: usize)
}
cxx::operator_delete! {
    /// `operator delete[](void*, size_t)`.
    11 fn _ZdaPvm(p: *mut c_void, size: usize)
}
cxx::operator_delete! {
    /// `operator delete(void*, const std::nothrow_t&)`.
    12 fn _ZdlPvRKSt9nothrow_t(p: *mut c_void, tag: *const c_void)
}
cxx::operator_delete! {
    /// `operator delete[](void*, const std::nothrow_t&)`.
    13 fn _ZdaPvRKSt9nothrow_t(p: *mut c_void, tag: *const c_void)
}
cxx::operator_delete! {
    /// `operator delete(void*, std::align_val_t)`.
    14 fn _ZdlPvSt11align_val_t(p: *mut c_void, align: usize)
}
cxx::operator_delete! {
    /// `operator delete[](void*, std::align_val_t)`.
    15 fn _ZdaPvSt11align_val_t(p: *mut c_void, align: usize)
}
cxx::operator_delete! {
    /// `operator delete(void*, size_t, std::align_val_t)`.
    16 fn _ZdlPvmSt11align_val_t(p: *mut c_void, size: usize, align: usize)
}
cxx::operator_delete! {
    /// `operator delete[](void*, size_t, std::align_val_t)`.
    17 fn _ZdaPvmSt11align_val_t(p: *mut c_void, size: usize, align: usize)
}
cxx::operator_delete! {
    /// `operator delete(void*, std::align_val_t, const std::nothrow_t&)`.
    18 fn _ZdlPvSt11align_val_tRKSt9nothrow_t(p: *mut c_void, align: usize, tag: *const c_void)
}
cxx::operator_delete! {
    /// `operator delete[](void*, std::align_val_t, const std::nothrow_t&)`.
    19 fn _ZdaPvSt11align_val_tRKSt9nothrow_t(p: *mut c_void, align: usize, tag: *const c_void)
}

// Safe points (see `safe_points`): where the report thread may start. `Always`: not
// async-signal-safe, so never called by a signal handler; `OutsideHandlers`: a handler may call
// it, so a safe point only outside the program's handlers (`signals`).

safe_points::safe_point! {
    /// `nanosleep`: a safe point, then glibc's.
    Always REAL_NANOSLEEP fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> libc::c_int
}

safe_points::safe_point! {
    /// `clock_nanosleep` (Python's `time.sleep`): a safe point, then glibc's.
    Always REAL_CLOCK_NANOSLEEP fn clock_nanosleep(
        clock: libc::clockid_t,
        flags: libc::c_int,
        req: *const libc::timespec,
        rem: *mut libc::timespec
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `usleep` (glibc's reaches the kernel without passing through `nanosleep`'s export).
    Always REAL_USLEEP fn usleep(usec: libc::useconds_t) -> libc::c_int
}

safe_points::safe_point! {
    /// C11 `thrd_sleep`.
    Always REAL_THRD_SLEEP fn thrd_sleep(req: *const libc::timespec, rem: *mut libc::timespec) -> libc::c_int
}

safe_points::safe_point! {
    /// `sleep` (async-signal-safe).
    OutsideHandlers REAL_SLEEP fn sleep(secs: libc::c_uint) -> libc::c_uint
}

safe_points::safe_point! {
    /// `epoll_wait` (event loops): a safe point, then glibc's.
    Always REAL_EPOLL_WAIT fn epoll_wait(
        epfd: libc::c_int,
        events: *mut libc::epoll_event,
        max: libc::c_int,
        timeout: libc::c_int
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `epoll_pwait` (libuv): a safe point, then glibc's.
    Always REAL_EPOLL_PWAIT fn epoll_pwait(
        epfd: libc::c_int,
        events: *mut libc::epoll_event,
        max: libc::c_int,
        timeout: libc::c_int,
        sigmask: *const libc::sigset_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `epoll_pwait2` (glibc 2.35; `ENOSYS` where glibc has none).
    Always REAL_EPOLL_PWAIT2 fn epoll_pwait2(
        epfd: libc::c_int,
        events: *mut libc::epoll_event,
        max: libc::c_int,
        timeout: *const libc::timespec,
        sigmask: *const libc::sigset_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `pthread_cond_wait` (glibc's current version, 2.3.2).
    Always REAL_PTHREAD_COND_WAIT fn pthread_cond_wait(
        cond: *mut libc::pthread_cond_t,
        mutex: *mut libc::pthread_mutex_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `pthread_cond_timedwait` (glibc's current version, 2.3.2).
    Always REAL_PTHREAD_COND_TIMEDWAIT fn pthread_cond_timedwait(
        cond: *mut libc::pthread_cond_t,
        mutex: *mut libc::pthread_mutex_t,
        abstime: *const libc::timespec
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `poll` (async-signal-safe).
    OutsideHandlers REAL_POLL fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: libc::c_int) -> libc::c_int
}

safe_points::safe_point! {
    /// `ppoll`.
    OutsideHandlers REAL_PPOLL fn ppoll(
        fds: *mut libc::pollfd,
        n: libc::nfds_t,
        timeout: *const libc::timespec,
        sigmask: *const libc::sigset_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `select` (async-signal-safe).
    OutsideHandlers REAL_SELECT fn select(
        n: libc::c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *mut libc::timeval
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `pselect` (async-signal-safe).
    OutsideHandlers REAL_PSELECT fn pselect(
        n: libc::c_int,
        r: *mut libc::fd_set,
        w: *mut libc::fd_set,
        e: *mut libc::fd_set,
        timeout: *const libc::timespec,
        sigmask: *const libc::sigset_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `read` (async-signal-safe; a pipe, a socket, a timerfd): one relaxed load per call once
    /// the thread has started.
    OutsideHandlers REAL_READ fn read(fd: libc::c_int, buf: *mut c_void, n: usize) -> isize
}

safe_points::safe_point! {
    /// `sigwait`.
    OutsideHandlers REAL_SIGWAIT fn sigwait(set: *const libc::sigset_t, sig: *mut libc::c_int) -> libc::c_int
}

safe_points::safe_point! {
    /// `sigwaitinfo`.
    OutsideHandlers REAL_SIGWAITINFO fn sigwaitinfo(set: *const libc::sigset_t, info: *mut libc::siginfo_t) -> libc::c_int
}

safe_points::safe_point! {
    /// `sigtimedwait`.
    OutsideHandlers REAL_SIGTIMEDWAIT fn sigtimedwait(
        set: *const libc::sigset_t,
        info: *mut libc::siginfo_t,
        timeout: *const libc::timespec
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `sigsuspend` (async-signal-safe).
    OutsideHandlers REAL_SIGSUSPEND fn sigsuspend(set: *const libc::sigset_t) -> libc::c_int
}

safe_points::safe_point! {
    /// `pause` (async-signal-safe).
    OutsideHandlers REAL_PAUSE fn pause() -> libc::c_int
}

safe_points::safe_point! {
    /// `wait` (async-signal-safe).
    OutsideHandlers REAL_WAIT fn wait(status: *mut libc::c_int) -> libc::pid_t
}

safe_points::safe_point! {
    /// `waitpid` (async-signal-safe).
    OutsideHandlers REAL_WAITPID fn waitpid(pid: libc::pid_t, status: *mut libc::c_int, options: libc::c_int) -> libc::pid_t
}

safe_points::safe_point! {
    /// `wait4`.
    OutsideHandlers REAL_WAIT4 fn wait4(
        pid: libc::pid_t,
        status: *mut libc::c_int,
        options: libc::c_int,
        usage: *mut libc::rusage
    ) -> libc::pid_t
}

safe_points::safe_point! {
    /// `waitid`.
    OutsideHandlers REAL_WAITID fn waitid(
        idtype: libc::idtype_t,
        id: libc::id_t,
        info: *mut libc::siginfo_t,
        options: libc::c_int
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `accept` (async-signal-safe).
    OutsideHandlers REAL_ACCEPT fn accept(
        fd: libc::c_int,
        addr: *mut libc::sockaddr,
        len: *mut libc::socklen_t
    ) -> libc::c_int
}

safe_points::safe_point! {
    /// `accept4`.
    OutsideHandlers REAL_ACCEPT4 fn accept4(
        fd: libc::c_int,
        addr: *mut libc::sockaddr,
        len: *mut libc::socklen_t,
        flags: libc::c_int
    ) -> libc::c_int
}

/// glibc's waits and signal functions, looked up from the constructor: a first call from a
/// signal handler must not need `dlsym` (which takes the loader's lock and allocates).
pub(crate) fn warm_lookups() {
    use std::sync::atomic::AtomicUsize;
    let waits: [(&AtomicUsize, &std::ffi::CStr); 26] = [
        (&REAL_NANOSLEEP, c"nanosleep"),
        (&REAL_CLOCK_NANOSLEEP, c"clock_nanosleep"),
        (&REAL_USLEEP, c"usleep"),
        (&REAL_THRD_SLEEP, c"thrd_sleep"),
        (&REAL_SLEEP, c"sleep"),
        (&REAL_EPOLL_WAIT, c"epoll_wait"),
        (&REAL_EPOLL_PWAIT, c"epoll_pwait"),
        (&REAL_EPOLL_PWAIT2, c"epoll_pwait2"),
        (&REAL_PTHREAD_COND_WAIT, c"pthread_cond_wait"),
        (&REAL_PTHREAD_COND_TIMEDWAIT, c"pthread_cond_timedwait"),
        (&REAL_POLL, c"poll"),
        (&REAL_PPOLL, c"ppoll"),
        (&REAL_SELECT, c"select"),
        (&REAL_PSELECT, c"pselect"),
        (&REAL_READ, c"read"),
        (&REAL_SIGWAIT, c"sigwait"),
        (&REAL_SIGWAITINFO, c"sigwaitinfo"),
        (&REAL_SIGTIMEDWAIT, c"sigtimedwait"),
        (&REAL_SIGSUSPEND, c"sigsuspend"),
        (&REAL_PAUSE, c"pause"),
        (&REAL_WAIT, c"wait"),
        (&REAL_WAITPID, c"waitpid"),
        (&REAL_WAIT4, c"wait4"),
        (&REAL_WAITID, c"waitid"),
        (&REAL_ACCEPT, c"accept"),
        (&REAL_ACCEPT4, c"accept4"),
    ];
    for (slot, name) in waits {
        glibc_next::next(slot, name);
    }
    signals::warm();
    exec::warm();
}

// The program's signal handlers run inside a trampoline that counts the thread's handler
// depth (see `signals`); what the program reads back is what it installed.

/// `sigaction`: a real handler is recorded and the kernel given a trampoline with the same
/// flags and mask; an old disposition that is a trampoline reads as the program's handler.
///
/// # Safety
/// As for glibc's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { signals::sigaction(sig, act, old) }
}

/// `signal` (glibc's installs through its internal `sigaction`, so it is wrapped itself).
///
/// # Safety
/// As for glibc's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: libc::c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { signals::signal_like(signals::Which::Signal, sig, h) }
}

/// `bsd_signal` (glibc's `signal` under another name).
///
/// # Safety
/// As for glibc's `bsd_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: libc::c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { signals::signal_like(signals::Which::BsdSignal, sig, h) }
}

/// `sysv_signal` (one-shot, not blocked during its handler).
///
/// # Safety
/// As for glibc's `sysv_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(
    sig: libc::c_int,
    h: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { signals::signal_like(signals::Which::SysvSignal, sig, h) }
}

/// `sigset` (`SIG_HOLD` passes through unchanged).
///
/// # Safety
/// As for glibc's `sigset`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigset(sig: libc::c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { signals::signal_like(signals::Which::Sigset, sig, h) }
}

// Changes of user (see `start::change_user`): a daemon's worker that drops privileges keeps
// writing its reports, into a directory prepared while it still could. Each passes the call
// on with `glibc_next::forward`, as the safe points do (`ENOSYS` when glibc has none).

/// The effective uid a call asks for: `None` for `(uid_t)-1`, "unchanged".
fn asked_euid(e: libc::uid_t) -> Option<libc::uid_t> {
    (e != libc::uid_t::MAX).then_some(e)
}

/// `setuid`, see `start::change_user`.
///
/// # Safety
/// As for glibc's `setuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setuid(uid: libc::uid_t) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    type F = unsafe extern "C" fn(libc::uid_t) -> libc::c_int;
    start::change_user(Some(uid), || {
        // SAFETY: `F` is the type of glibc's `setuid`, called with the caller's argument.
        unsafe { glibc_next::forward(&REAL, c"setuid", -1, |f: F| f(uid)) }
    })
}

/// `seteuid`, see `start::change_user`.
///
/// # Safety
/// As for glibc's `seteuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn seteuid(euid: libc::uid_t) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    type F = unsafe extern "C" fn(libc::uid_t) -> libc::c_int;
    start::change_user(asked_euid(euid), || {
        // SAFETY: `F` is the type of glibc's `seteuid`, called with the caller's argument.
        unsafe { glibc_next::forward(&REAL, c"seteuid", -1, |f: F| f(euid)) }
    })
}

/// `setreuid`, see `start::change_user`.
///
/// # Safety
/// As for glibc's `setreuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setreuid(ruid: libc::uid_t, euid: libc::uid_t) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    type F = unsafe extern "C" fn(libc::uid_t, libc::uid_t) -> libc::c_int;
    start::change_user(asked_euid(euid), || {
        // SAFETY: `F` is the type of glibc's `setreuid`, called with the caller's arguments.
        unsafe { glibc_next::forward(&REAL, c"setreuid", -1, |f: F| f(ruid, euid)) }
    })
}

/// `setresuid`, see `start::change_user`.
///
/// # Safety
/// As for glibc's `setresuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setresuid(
    ruid: libc::uid_t,
    euid: libc::uid_t,
    suid: libc::uid_t,
) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    type F = unsafe extern "C" fn(libc::uid_t, libc::uid_t, libc::uid_t) -> libc::c_int;
    start::change_user(asked_euid(euid), || {
        // SAFETY: `F` is the type of glibc's `setresuid`, called with the caller's arguments.
        unsafe { glibc_next::forward(&REAL, c"setresuid", -1, |f: F| f(ruid, euid, suid)) }
    })
}

// Seccomp (see `seccomp`): the two ways a program installs a filter.

/// `prctl`: the system call, as glibc makes it; `PR_SET_SECCOMP` first makes Ying stop its
/// own system calls where the filter may reach (`seccomp`). C declares it variadic, reading
/// four `unsigned long` arguments after `option`: on x86_64 and aarch64 Linux a variadic call
/// passes them in the same registers as a fixed-argument call, and the ones the caller did not
/// pass are passed on unread by the kernel, as glibc does.
///
/// # Safety
/// As for glibc's `prctl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn prctl(
    option: libc::c_int,
    arg2: libc::c_ulong,
    arg3: libc::c_ulong,
    arg4: libc::c_ulong,
    arg5: libc::c_ulong,
) -> libc::c_int {
    seccomp::before_prctl(option as libc::c_long, arg2 as libc::c_long, arg3 as libc::c_long);
    let args = [option as libc::c_long, arg2 as _, arg3 as _, arg4 as _, arg5 as _, 0];
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { seccomp::raw_syscall(libc::SYS_prctl, args) as libc::c_int }
}

/// `syscall`: the system call `n`, as glibc makes it (a result from -4095 to -1 is -1 with
/// `errno`); `SYS_seccomp` first makes Ying stop its own system calls where the filter may
/// reach (`seccomp`). Variadic in C: the six arguments are read where a variadic call puts
/// them and passed on, used or not. On x86_64 it is glibc's own sequence of instructions
/// (the sixth argument read from the caller's stack slot whether or not it was passed, no
/// frame of its own, so that a `clone` onto a new stack returns as it does from glibc's),
/// with one comparison in front.
///
/// # Safety
/// As for glibc's `syscall`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    // SAFETY: a System V function body: the number in rdi, the arguments in rsi, rdx, rcx,
    // r8, r9 and the caller's stack slot at rsp+8, moved to the kernel's registers (rax, rdi,
    // rsi, rdx, r10, r8, r9); the `syscall` instruction clobbers rcx and r11, caller-saved.
    // The stack is not touched; both jumps reach extern "C" functions with the stack as at
    // entry, so they read the same arguments and return to our caller. The call frame
    // information (the entry's, all through) lets a debugger or an unwinder walk from a thread
    // blocked in a system call made through it to the caller.
    std::arch::naked_asm!(
        ".cfi_startproc",
        "cmp rdi, {seccomp}",
        "je {slow}",
        "mov rax, rdi",
        "mov rdi, rsi",
        "mov rsi, rdx",
        "mov rdx, rcx",
        "mov r10, r8",
        "mov r8, r9",
        "mov r9, qword ptr [rsp + 8]",
        "syscall",
        "cmp rax, -4095",
        "jae 2f",
        "ret",
        "2:",
        "mov rdi, rax",
        "jmp {failed}",
        ".cfi_endproc",
        seccomp = const libc::SYS_seccomp,
        slow = sym syscall_seccomp,
        failed = sym seccomp::syscall_failed,
    )
}

/// `syscall(SYS_seccomp, ...)` (x86_64's `syscall` jumps here).
#[cfg(target_arch = "x86_64")]
extern "C" fn syscall_seccomp(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    seccomp::before_seccomp(a1, a2, a3);
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { seccomp::raw_syscall(n, [a1, a2, a3, a4, a5, a6]) }
}

/// `syscall` (targets without the assembly fast path).
///
/// # Safety
/// As for glibc's `syscall`.
#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    n: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    if n == libc::SYS_seccomp {
        seccomp::before_seccomp(a1, a2, a3);
    }
    // SAFETY: the caller's arguments, under the caller's contract.
    unsafe { seccomp::raw_syscall(n, [a1, a2, a3, a4, a5, a6]) }
}
