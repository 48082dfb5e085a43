//! The clock of the allocation paths: monotonic time for allocation birth and lifetime, boot time
//! and wall time for the kept peak. Read on sampled paths, so never through an interposable
//! function.
//!
//! # Why not `clock_gettime`
//!
//! `clock_gettime` is a libc function that another preloaded library may replace. libfaketime
//! does (its timestamp-file mode opens and reads a file, which calls `malloc`): a sample's clock
//! read went through it into `malloc`, whose next sample read the clock again, until the stack
//! overflowed. So the clock is the kernel's own `__vdso_clock_gettime`, found once in the vDSO
//! the kernel maps into every process (its ELF image, located by the auxiliary vector's
//! `AT_SYSINFO_EHDR`): no libc, no allocation, no lock, no system call. Where the vDSO has no
//! such function (some kernels, some architectures), the raw `clock_gettime` system call.
//! `SystemTime::now` and `Instant::now` go through libc too, so the engine calls [`wall`] and
//! [`now_ns`] instead.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The vDSO's `clock_gettime`.
type ClockFn = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

/// [`ClockFn`]'s address: 0 not looked up yet, 1 none (the system call is used).
static VDSO_CLOCK: AtomicUsize = AtomicUsize::new(0);

/// Reads clock `id` into a timespec, `None` on failure.
fn read(id: libc::clockid_t) -> Option<libc::timespec> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let f = match VDSO_CLOCK.load(Ordering::Relaxed) {
        0 => {
            let found = vdso_clock_gettime().unwrap_or(1);
            VDSO_CLOCK.store(found, Ordering::Relaxed);
            found
        }
        f => f,
    };
    let rc = if f > 1 {
        // SAFETY: `f` is the address of the vDSO's `__vdso_clock_gettime`, which has the
        // signature of `clock_gettime`; `ts` is a valid out-pointer.
        unsafe {
            let f: ClockFn = std::mem::transmute::<usize, ClockFn>(f);
            f(id, &mut ts)
        }
    } else {
        // SAFETY: the raw system call with a valid out-pointer; it does not allocate or lock.
        unsafe { libc::syscall(libc::SYS_clock_gettime, id, &mut ts) as libc::c_int }
    };
    (rc == 0).then_some(ts)
}

fn nanos(ts: libc::timespec) -> u64 {
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Nanoseconds on the monotonic clock (0 if it cannot be read).
pub(crate) fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC).map_or(0, nanos)
}

/// Nanoseconds on the boot clock (monotonic, counting suspended time; 0 if it cannot be read).
pub(crate) fn boot_ns() -> u64 {
    read(libc::CLOCK_BOOTTIME).map_or(0, nanos)
}

/// The wall clock, as `SystemTime::now` gives it but without libc.
pub(crate) fn wall() -> std::time::SystemTime {
    let since = read(libc::CLOCK_REALTIME).map_or(std::time::Duration::ZERO, |ts| {
        std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    });
    std::time::UNIX_EPOCH + since
}

/// The address of `__vdso_clock_gettime` in the vDSO of this process, read from the vDSO's
/// dynamic symbol table (its `DT_HASH` gives the number of symbols). Reads memory only.
fn vdso_clock_gettime() -> Option<usize> {
    // SAFETY: getauxval reads the auxiliary vector: no lock, no allocation.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
    if base == 0 {
        return None;
    }
    // SAFETY: the kernel maps the whole vDSO image, a valid ELF object, at `base` for the
    // life of the process; `symbol` checks every offset it follows against the image's own
    // headers.
    unsafe { symbol(base, b"__vdso_clock_gettime") }
}

/// An entry of an ELF64 dynamic section (`Elf64_Dyn`; not in the `libc` crate).
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_un: u64,
}

/// The address of the defined function `name` in the ELF image loaded at `base` (the vDSO).
///
/// # Safety
/// `base` is the start of a mapped ELF image whose program headers, dynamic section, symbol,
/// string and hash tables are mapped where its headers say.
unsafe fn symbol(base: usize, name: &[u8]) -> Option<usize> {
    // SAFETY: the caller's contract: the headers are mapped.
    let ehdr = unsafe { &*(base as *const libc::Elf64_Ehdr) };
    if ehdr.e_ident[..4] != *b"\x7fELF" || ehdr.e_ident[4] != 2 {
        return None; // Not a 64-bit ELF image.
    }
    // SAFETY: the program headers are part of the image (caller's contract).
    let phdrs = unsafe {
        std::slice::from_raw_parts(
            (base + ehdr.e_phoff as usize) as *const libc::Elf64_Phdr,
            ehdr.e_phnum as usize,
        )
    };
    // The load bias: where the image is minus where its first segment was linked.
    let load = phdrs.iter().find(|p| p.p_type == libc::PT_LOAD)?;
    let bias = base.wrapping_sub(load.p_vaddr as usize).wrapping_add(load.p_offset as usize);
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    let (mut symtab, mut strtab, mut hash) = (0usize, 0usize, 0usize);
    let mut d = bias.wrapping_add(dynamic.p_vaddr as usize) as *const Dyn;
    loop {
        // SAFETY: the dynamic section is part of the image and ends with DT_NULL.
        let e = unsafe { &*d };
        match e.d_tag as u32 {
            0 => break,                                       // DT_NULL
            4 => hash = bias.wrapping_add(e.d_un as usize),   // DT_HASH
            5 => strtab = bias.wrapping_add(e.d_un as usize), // DT_STRTAB
            6 => symtab = bias.wrapping_add(e.d_un as usize), // DT_SYMTAB
            _ => {}
        }
        // SAFETY: still inside the dynamic section (DT_NULL not reached).
        d = unsafe { d.add(1) };
    }
    if symtab == 0 || strtab == 0 || hash == 0 {
        return None;
    }
    // DT_HASH: nbucket, nchain, ...; nchain is the number of symbols.
    // SAFETY: the hash table is part of the image.
    let count = unsafe { *((hash + 4) as *const u32) } as usize;
    for i in 0..count {
        // SAFETY: symbol `i` of `count` is in the symbol table.
        let sym = unsafe { &*((symtab as *const libc::Elf64_Sym).add(i)) };
        if sym.st_shndx == 0 || sym.st_value == 0 || sym.st_info & 0xf != 2 {
            continue; // Undefined, or not a function (STT_FUNC).
        }
        // SAFETY: `st_name` is an offset into the string table, whose strings end in NUL.
        let found = unsafe {
            std::ffi::CStr::from_ptr((strtab + sym.st_name as usize) as *const libc::c_char)
        };
        if found.to_bytes() == name {
            return Some(bias.wrapping_add(sym.st_value as usize));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vdso_clock_is_found_and_agrees_with_libc() {
        assert!(vdso_clock_gettime().is_some(), "x86-64 Linux maps __vdso_clock_gettime");
        let before = std::time::SystemTime::now();
        let ours = wall();
        let after = std::time::SystemTime::now();
        assert!(before <= ours && ours <= after, "{before:?} {ours:?} {after:?}");
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
        assert!(boot_ns() >= a, "the boot clock counts suspended time too");
    }
}
