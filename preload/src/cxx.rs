//! C++'s `operator new` and `operator delete`, exported (from `lib.rs`, with the macros here)
//! so that a chained allocator's own operators cannot take C++ allocations past Ying.
//!
//! jemalloc, tcmalloc and mimalloc all define the operators, calling their `malloc` inside
//! the library where no interposition reaches. With one of them after libying.so in the lookup
//! order, the program's `new` would bind to it and Ying would see no C++ allocation. So the
//! shim defines the operators too:
//!
//! - **Over a chained allocator** (`chain`): `new` is the shim's `malloc` (or aligned) path and
//!   `delete` its `free`. Only when the allocation fails is the allocator's own `operator new`
//!   called, with the same arguments: it runs the program's new-handler and throws
//!   `std::bad_alloc` (or returns null, for the `nothrow` forms). The exports are written in
//!   assembly so that this call is a tail jump: the exception never meets a frame of the
//!   shim's (see [`operator_new`]).
//! - **Over glibc**: the next definition (libstdc++'s) is jumped to, which calls `malloc` and
//!   `free` as before, so stacks keep their `operator new` frame and its behaviour is
//!   libstdc++'s to the letter. (Other targets than x86_64 export no `operator new`: there a
//!   chained allocator's C++ allocations are not seen.)
//!
//! The next definition is found at the first call in the objects loaded after this library
//! (`chain::next_definition`, which also sees a libstdc++ loaded with `RTLD_LOCAL` by a
//! `dlopen`ed module) and cached in one slot per operator; a successful `dlclose` forgets the
//! slots ([`forget`]), since it may have unloaded the object they point into.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name`, cached in `slot`; 0 when no object after this library
/// defines it.
pub(crate) fn next(slot: &AtomicUsize, name: &CStr) -> usize {
    let f = slot.load(Ordering::Acquire);
    if f != 0 {
        return f;
    }
    look_up(slot, name)
}

#[cold]
#[inline(never)]
fn look_up(slot: &AtomicUsize, name: &CStr) -> usize {
    let f = crate::chain::next_definition(name);
    slot.store(f, Ordering::Release);
    f
}

/// Every operator's slot, for [`forget`].
pub(crate) static SLOTS: [AtomicUsize; 20] = [const { AtomicUsize::new(0) }; 20];

/// Forgets the cached definitions (after a `dlclose`, which may have unloaded their object).
pub(crate) fn forget() {
    for s in &SLOTS {
        s.store(0, Ordering::Release);
    }
}

/// A throwing `operator new` with no definition after ours to throw and no memory: says so and
/// aborts, as an uncaught `std::bad_alloc` would.
#[cold]
pub(crate) fn out_of_memory(name: &CStr) -> ! {
    ying_profiler::front_end::warn(&format!(
        "{} failed and no object after libying.so defines it to throw std::bad_alloc; aborting",
        name.to_string_lossy()
    ));
    std::process::abort()
}

/// Defines one `operator new` export, in assembly: `SLOT fn mangled try: allocation-fn`. Over
/// glibc, once the next definition is known, the export is a check and a tail jump to it (5
/// instructions). Otherwise it calls `allocation-fn` with its arguments (the shim's allocation
/// over a chained allocator; null over glibc, without allocating); a block is returned, and null
/// is followed
/// by a tail jump to the next definition ([`next_new`], which also gives the size to pass on). No frame of the shim's is left on the
/// stack when that definition throws `std::bad_alloc`: the library is built with
/// `panic = "abort"`, under which an exception passing through a Rust frame aborts. The
/// frame it keeps around the call is described to unwinders by its CFI directives, so a
/// sample taken inside the allocation unwinds through it.
macro_rules! operator_new {
    ($(#[$doc:meta])* $slot:literal fn $name:ident try: $try:path) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C++ operator.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            // SAFETY: a System V function body taking up to three integer arguments (rdi, rsi,
            // rdx), all kept across the call; it calls with the stack 16-byte aligned (three
            // pushes on an entry at 8 mod 16), restores it on every path, returns the block in
            // rax, or leaves the stack as at entry and jumps to the next definition with the
            // caller's arguments, which then returns to our caller.
            std::arch::naked_asm!(
                ".cfi_startproc",
                // Over glibc, with the next definition known: straight there (5 instructions).
                "cmp byte ptr [rip + {state}], {glibc}",
                "jne 1f",
                "mov r11, qword ptr [rip + {slots} + {offset}]",
                "test r11, r11",
                "je 2f",
                "jmp r11",
                "1:",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                "call {try_alloc}",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "test rax, rax",
                "je 2f",
                "ret",
                "2:",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                "mov rsi, rdi",
                "mov edi, {slot}",
                "call {next}",
                "mov r11, rax",
                "mov r10, rdx",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "mov rdi, r10",
                "jmp r11",
                ".cfi_endproc",
                try_alloc = sym $try,
                slot = const $slot,
                next = sym cxx::next_new,
                state = sym chain::STATE,
                glibc = const chain::GLIBC,
                slots = sym cxx::SLOTS,
                offset = const $slot * 8,
            )
        }
    };
}
pub(crate) use operator_new;

/// The mangled names of the operators, by slot (`lib.rs` numbers them in this order).
const NAMES: [&CStr; 20] = [
    c"_Znwm",
    c"_Znam",
    c"_ZnwmRKSt9nothrow_t",
    c"_ZnamRKSt9nothrow_t",
    c"_ZnwmSt11align_val_t",
    c"_ZnamSt11align_val_t",
    c"_ZnwmSt11align_val_tRKSt9nothrow_t",
    c"_ZnamSt11align_val_tRKSt9nothrow_t",
    c"_ZdlPv",
    c"_ZdaPv",
    c"_ZdlPvm",
    c"_ZdaPvm",
    c"_ZdlPvRKSt9nothrow_t",
    c"_ZdaPvRKSt9nothrow_t",
    c"_ZdlPvSt11align_val_t",
    c"_ZdaPvSt11align_val_t",
    c"_ZdlPvmSt11align_val_t",
    c"_ZdaPvmSt11align_val_t",
    c"_ZdlPvSt11align_val_tRKSt9nothrow_t",
    c"_ZdaPvSt11align_val_tRKSt9nothrow_t",
];

/// The next definition of the `operator new` in `slot` (0-7), for the export's tail jump: the
/// chained allocator's (its new-handler, its `std::bad_alloc`) or libstdc++'s. Without one
/// (no object after this library defines it, which a program calling it cannot arrange
/// without defining it first itself) a stand-in that allocates through the shim and, for a
/// throwing form, aborts with one line when that fails.
///
/// The size passed on is the caller's, except that a request Ying refused as giant
/// (`YING_MAX_ALLOC_BYTES`) becomes `SIZE_MAX` over a chained allocator: that allocator then
/// fails it as it would any impossible request (new-handler, `std::bad_alloc`) instead of
/// allocating it behind Ying's back. (Over glibc, libstdc++'s operator asks the shim's `malloc`,
/// which refuses it again.)
pub(crate) extern "C" fn next_new(slot: u32, size: usize) -> Target {
    let slot = (slot as usize).min(7);
    let mut f = next(&SLOTS[slot], NAMES[slot]);
    if f == 0 {
        f = match slot {
            0 | 1 => stand_in_new as *const () as usize,
            2 | 3 => stand_in_new_nothrow as *const () as usize,
            4 | 5 => stand_in_new_aligned as *const () as usize,
            _ => stand_in_new_aligned_nothrow as *const () as usize,
        };
    }
    let giant = size as u64 >= crate::host::SETTINGS.max_alloc_bytes();
    let size = if giant && crate::chain::next().is_some() { usize::MAX } else { size };
    Target { function: f, size }
}

/// Where an `operator new` export jumps after a failed allocation, and the size it passes on
/// (returned in rax and rdx).
#[repr(C)]
pub(crate) struct Target {
    function: usize,
    size: usize,
}

extern "C" fn stand_in_new(size: usize) -> *mut c_void {
    let p = crate::malloc_any(size.max(1));
    if p.is_null() {
        out_of_memory(c"operator new");
    }
    p
}

extern "C" fn stand_in_new_nothrow(size: usize) -> *mut c_void {
    crate::malloc_any(size.max(1))
}

extern "C" fn stand_in_new_aligned(size: usize, align: usize) -> *mut c_void {
    let p = crate::cxx_aligned(align, size);
    if p.is_null() {
        out_of_memory(c"operator new");
    }
    p
}

extern "C" fn stand_in_new_aligned_nothrow(size: usize, align: usize) -> *mut c_void {
    crate::cxx_aligned(align, size)
}

/// The next definition of the `operator delete` in `slot` (8-19), for the export's tail jump:
/// libstdc++'s, or the shim's `free` when no object after this library defines it.
pub(crate) extern "C" fn next_delete(slot: u32) -> usize {
    let slot = (slot as usize).clamp(8, 19);
    match next(&SLOTS[slot], NAMES[slot]) {
        0 => crate::free as *const () as usize,
        f => f,
    }
}

/// An `operator new(size_t...)`'s allocation over a chained allocator; null over glibc
/// (libstdc++'s operator is called instead) or when the allocation fails.
pub(crate) extern "C" fn try_new(size: usize) -> *mut c_void {
    if crate::chain::next().is_none() {
        return std::ptr::null_mut();
    }
    crate::malloc_any(size.max(1))
}

/// An `operator new(size_t, std::align_val_t...)`'s allocation, as [`try_new`].
pub(crate) extern "C" fn try_new_aligned(size: usize, align: usize) -> *mut c_void {
    if crate::chain::next().is_none() {
        return std::ptr::null_mut();
    }
    crate::cxx_aligned(align, size)
}

/// Defines one `operator delete` export, in assembly: `SLOT fn mangled(p, args)`. Over a
/// chained allocator (or before the allocator is known), a tail jump to the shim's `free`; over
/// glibc, to the next definition (libstdc++'s, which calls `free`), found once by
/// [`next_delete`].
macro_rules! operator_delete {
    ($(#[$doc:meta])* $slot:literal fn $name:ident($p:ident: *mut c_void $(, $arg:ident: $ty:ty)*)) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the C++ operator.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($p: *mut c_void $(, $arg: $ty)*) {
            // SAFETY: a System V function body whose every path is a tail jump with the stack
            // and the argument registers (rdi, rsi, rdx) as at entry, except around the call
            // to `next_delete`, which keeps them on the stack (three pushes: aligned) and
            // restores them: `free` (ours) over a chained allocator or before the allocator is
            // known, else the next definition of this operator.
            std::arch::naked_asm!(
                ".cfi_startproc",
                "cmp byte ptr [rip + {state}], {glibc}",
                "jne {free}",
                "mov r11, qword ptr [rip + {slots} + {offset}]",
                "test r11, r11",
                "je 2f",
                "jmp r11",
                "2:",
                "push rdi",
                ".cfi_adjust_cfa_offset 8",
                "push rsi",
                ".cfi_adjust_cfa_offset 8",
                "push rdx",
                ".cfi_adjust_cfa_offset 8",
                "mov edi, {slot}",
                "call {next}",
                "mov r11, rax",
                "pop rdx",
                ".cfi_adjust_cfa_offset -8",
                "pop rsi",
                ".cfi_adjust_cfa_offset -8",
                "pop rdi",
                ".cfi_adjust_cfa_offset -8",
                "jmp r11",
                ".cfi_endproc",
                state = sym chain::STATE,
                glibc = const chain::GLIBC,
                slots = sym cxx::SLOTS,
                offset = const $slot * 8,
                slot = const $slot,
                next = sym cxx::next_delete,
                free = sym free,
            )
        }
    };
}
pub(crate) use operator_delete;
