//! The allocator under Ying: glibc's, or the next one in the preload list.
//!
//! `LD_PRELOAD=libying.so:libjemalloc.so.2` (or tcmalloc, mimalloc, or a program that links
//! jemalloc as a dependency) puts another definition of `malloc` after ours in the lookup
//! order. The program's calls reach ours first; this module finds that next definition, and
//! then every export forwards to it, as the Rust front end's `YingProfiler<A>` forwards to `A`.
//! Without one, the next `malloc` is glibc's and the shim calls glibc's `__libc_*` functions,
//! with the hand-written fast paths in `lib.rs`, as it always did.
//!
//! # Finding it
//!
//! The first allocation call of the process (usually the dynamic linker's own, before any
//! constructor) resolves the chain: [`next`]. It cannot use `dlsym`, which may allocate (a
//! recursion into the allocator being resolved) and whose result for `RTLD_NEXT` depends on the
//! caller. Instead it walks the loaded objects in load order with `dl_iterate_phdr` (no
//! allocation; the loader's recursive lock) and, after the object holding this code, reads each
//! object's dynamic symbol table in memory (its GNU or SysV hash table) for a defined `malloc`.
//! The first object defining it is the chained allocator, unless it is glibc itself (it defines
//! `gnu_get_libc_version` too; tcmalloc and mimalloc define `__libc_malloc` as well, so that
//! name does not tell). All of that allocator's family is then read from the same object, so
//! no call ever mixes two allocators.
//!
//! # Counting
//!
//! Blocks are counted in the chained allocator's usable bytes (its `malloc_usable_size`), the
//! same value at allocation and at free, so the exact totals stay exact. An allocator without
//! `malloc_usable_size` cannot be counted: the shim then stays on glibc and says so once.
//!
//! # The fast paths
//!
//! glibc keeps `lib.rs`'s hand-written paths at their cost: chained mode reaches its code
//! through the slow paths those already have. `malloc` and `calloc` compare the request with
//! [`MALLOC_FAST_BELOW`], `realloc` its new size with [`REALLOC_FAST_BELOW`] (both zero until
//! the chain is resolved and in chained mode, so every call takes the Rust path), and in
//! chained mode every thread's free filter is the all-ones map
//! (`ShimHost::real_filter`), so every `free` takes the slow path, where the filter that says
//! whether the block may be sampled is read as usual.
//!
//! # Inside the allocator
//!
//! A per-thread flag (initial-exec TLS, `src/tls.c`) is set around every call into the chained
//! allocator (`inside`). While it is set, the allocator's own `mmap`s are its heap, already
//! counted as its blocks, and are not counted again as the program's mappings; and allocation
//! calls that come back into the shim from inside it (tcmalloc's stack capture while it grows
//! its heap, served from an emergency arena its `malloc_usable_size` refuses) go straight to
//! it, uncounted, as glibc's internal allocations are. The thread that resolves the chain warms
//! the allocator up once (`warm`): tcmalloc's first `malloc_usable_size` allocates.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// `malloc`'s and `valloc`'s signature.
pub(crate) type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
/// `free`'s signature.
pub(crate) type FreeFn = unsafe extern "C" fn(*mut c_void);
/// `calloc`'s signature.
pub(crate) type CallocFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
/// `realloc`'s signature.
pub(crate) type ReallocFn = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
/// `memalign`'s and `aligned_alloc`'s signature.
pub(crate) type MemalignFn = unsafe extern "C" fn(usize, usize) -> *mut c_void;
/// `posix_memalign`'s signature.
pub(crate) type PosixMemalignFn = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> i32;
/// `malloc_usable_size`'s signature.
pub(crate) type UsableFn = unsafe extern "C" fn(*mut c_void) -> usize;

/// The chained allocator's functions, read from one object.
#[derive(Debug)]
pub(crate) struct Next {
    pub(crate) malloc: MallocFn,
    pub(crate) free: FreeFn,
    pub(crate) calloc: CallocFn,
    pub(crate) realloc: ReallocFn,
    pub(crate) usable: UsableFn,
    memalign: Option<MemalignFn>,
    aligned_alloc: Option<MemalignFn>,
    posix_memalign: Option<PosixMemalignFn>,
    valloc: Option<MallocFn>,
    pvalloc: Option<MallocFn>,
}

impl Next {
    /// A block of `size` bytes aligned to `align` (a power of two), from whichever aligned
    /// function the allocator has.
    ///
    /// # Safety
    /// `align` is a power of two.
    pub(crate) unsafe fn memalign(&self, align: usize, size: usize) -> *mut c_void {
        // SAFETY: the allocator's own functions with their documented arguments.
        unsafe {
            if let Some(f) = self.memalign {
                return f(align, size);
            }
            if let Some(f) = self.aligned_alloc {
                return f(align, size.next_multiple_of(align));
            }
            let mut p = std::ptr::null_mut();
            match self.posix_memalign {
                Some(f) if f(&mut p, align.max(8), size) == 0 => p,
                _ => std::ptr::null_mut(),
            }
        }
    }

    /// `valloc`: page-aligned.
    ///
    /// # Safety
    /// None beyond the allocator's.
    pub(crate) unsafe fn valloc(&self, size: usize) -> *mut c_void {
        // SAFETY: the allocator's own function, or its aligned allocation at a page.
        unsafe {
            match self.valloc {
                Some(f) => f(size),
                None => self.memalign(page(), size),
            }
        }
    }

    /// `pvalloc`: page-aligned, the size rounded up to whole pages (one page for zero).
    ///
    /// # Safety
    /// None beyond the allocator's.
    pub(crate) unsafe fn pvalloc(&self, size: usize) -> *mut c_void {
        let page = page();
        let Some(rounded) = size.max(1).checked_next_multiple_of(page) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as in `valloc`.
        unsafe {
            match self.pvalloc {
                Some(f) => f(size),
                None => self.memalign(page, rounded),
            }
        }
    }
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
pub(crate) const GLIBC: u8 = 2;
const CHAINED: u8 = 3;

pub(crate) static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);
/// The chained allocator, written once before `STATE` becomes `CHAINED`.
static mut NEXT: Option<Next> = None;
/// The object's path (NUL-terminated, cut at 255 bytes), written with `NEXT`.
static mut PATH: [u8; 256] = [0; 256];

/// `malloc`'s and `calloc`'s fast paths (lib.rs) take requests below this: glibc's giant limit
/// once the chain is resolved to glibc, zero before and in chained mode (every call takes the
/// Rust path).
pub(crate) static MALLOC_FAST_BELOW: AtomicU64 = AtomicU64::new(0);
/// `realloc`'s fast path takes new sizes `n` with `n - 1` (wrapping) below this: the giant
/// limit minus one in glibc mode, so that one compare sends both zero (C `realloc(p, 0)` frees)
/// and giant sizes to the Rust path; zero before and in chained mode.
pub(crate) static REALLOC_FAST_BELOW: AtomicU64 = AtomicU64::new(0);

/// glibc's giant limit as the configuration set it ([`limit_changed`]): the fast paths follow
/// it (kept here, so that the chain asks nothing of `host`, which asks the chain).
static GIANT_LIMIT: AtomicU64 =
    AtomicU64::new(ying_profiler::front_end::hooks::DEFAULT_MAX_ALLOC_BYTES);

/// The fast paths follow glibc's giant limit (glibc mode only).
fn open_fast_paths() {
    let limit = GIANT_LIMIT.load(Ordering::Relaxed);
    MALLOC_FAST_BELOW.store(limit, Ordering::Relaxed);
    REALLOC_FAST_BELOW.store(limit.saturating_sub(1), Ordering::Relaxed);
}

/// The chained allocator, resolving the chain at the first call; `None` for glibc.
#[inline(always)]
pub(crate) fn next() -> Option<&'static Next> {
    match STATE.load(Ordering::Acquire) {
        GLIBC => None,
        // SAFETY: NEXT was written before STATE became CHAINED (release) and never again.
        CHAINED => unsafe { (*std::ptr::addr_of!(NEXT)).as_ref() },
        _ => resolve(),
    }
}

/// The chained allocator's path, `None` for glibc.
pub(crate) fn chained_path() -> Option<String> {
    next()?;
    // SAFETY: PATH was written before STATE became CHAINED and never again.
    let path = unsafe { &*std::ptr::addr_of!(PATH) };
    let s = CStr::from_bytes_until_nul(path).ok()?;
    Some(s.to_string_lossy().into_owned())
}

/// Why the chain stayed on glibc though another `malloc` came after ours (read by `start`,
/// which says it once): the object's path, NUL-terminated.
static mut UNUSABLE: [u8; 256] = [0; 256];

/// The object after ours that defines `malloc` but not `malloc_usable_size`, if any.
pub(crate) fn unusable_path() -> Option<String> {
    if STATE.load(Ordering::Acquire) != GLIBC {
        return None;
    }
    // SAFETY: written before STATE became GLIBC, never again.
    let path = unsafe { &*std::ptr::addr_of!(UNUSABLE) };
    let s = CStr::from_bytes_until_nul(path).ok()?;
    (!s.is_empty()).then(|| s.to_string_lossy().into_owned())
}

#[cold]
#[inline(never)]
fn resolve() -> Option<&'static Next> {
    if STATE.compare_exchange(UNRESOLVED, RESOLVING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        let found = find_next();
        let state = match found {
            Some((next, path)) => {
                // SAFETY: only the thread that moved STATE to RESOLVING writes these, before
                // the release store below; readers read them only after seeing CHAINED.
                unsafe {
                    *std::ptr::addr_of_mut!(NEXT) = Some(next);
                    copy_path(&mut *std::ptr::addr_of_mut!(PATH), path);
                }
                STATE.store(CHAINED, Ordering::Release);
                warm();
                CHAINED
            }
            None => {
                open_fast_paths();
                GLIBC
            }
        };
        STATE.store(state, Ordering::Release);
    } else {
        // Another thread is resolving (only possible if two threads allocate before the first
        // allocation of the process returned): the walk takes microseconds.
        while STATE.load(Ordering::Acquire) == RESOLVING {
            std::hint::spin_loop();
        }
    }
    next()
}

/// The thread warming the chained allocator up (its `pthread_t`), 0 when none.
static WARMING: AtomicUsize = AtomicUsize::new(0);

/// One allocation, size query and free, straight to the chained allocator, on the thread that
/// resolved it. Some allocators set themselves up at their first size query and allocate
/// there: tcmalloc's `malloc_usable_size` creates its extension object with `operator new`,
/// which reaches the shim, whose counting asks the size again, and so on. The blocks allocated
/// during the warm-up are counted as zero bytes ([`counted`]); they are the allocator's own
/// singletons, never freed.
fn warm() {
    WARMING.store(this_thread(), Ordering::Relaxed);
    // SAFETY: NEXT was just written by this thread.
    if let Some(n) = unsafe { (*std::ptr::addr_of!(NEXT)).as_ref() } {
        // SAFETY: the allocator's own functions with valid arguments; the block is its own.
        unsafe {
            let p = (n.malloc)(1);
            if !p.is_null() {
                (n.usable)(p);
                (n.free)(p);
            }
        }
    }
    WARMING.store(0, Ordering::Relaxed);
}

/// The calling thread's identity for [`WARMING`]: its `pthread_t` (a read of its thread
/// pointer in glibc: no lock, no system call, never zero).
fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// Whether the calling thread is warming the chained allocator up.
fn warming() -> bool {
    let w = WARMING.load(Ordering::Relaxed);
    w != 0 && w == this_thread()
}

/// The bytes counted for the chained allocator's live block `p`: its usable size (zero during
/// the warm-up, see [`warm`]).
///
/// # Safety
/// `p` is a live, non-null block of the chained allocator `n`.
#[inline(always)]
pub(crate) unsafe fn counted(n: &Next, p: *mut c_void) -> usize {
    if warming() {
        return 0;
    }
    // SAFETY: caller contract.
    unsafe { (n.usable)(p) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe extern "C" {
    /// The calling thread's "inside the chained allocator" flag (src/tls.c, initial-exec TLS:
    /// no allocation to reach it).
    fn ying_in_allocator_flag() -> *mut i32;
}

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    /// The flag itself (src/tls.c); only its address is used, in `flag`.
    static ying_in_allocator: i32;
}

/// The calling thread's "inside the chained allocator" flag: the thread pointer plus the
/// variable's initial-exec offset, two instructions (as `host::tls_block`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn flag() -> *mut i32 {
    let p: usize;
    // SAFETY: reads the GOT entry holding the variable's TLS offset (filled at load) and the
    // thread pointer at %fs:0, the initial-exec access sequence a C compiler emits; both are
    // constant for the calling thread.
    unsafe {
        std::arch::asm!(
            "mov {p}, qword ptr [rip + {v}@GOTTPOFF]",
            "add {p}, qword ptr fs:[0]",
            v = sym ying_in_allocator,
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    p as *mut i32
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn flag() -> *mut i32 {
    // SAFETY: the accessor only computes an address.
    unsafe { ying_in_allocator_flag() }
}

/// Runs `f`, a call into the chained allocator, with the thread marked as inside it, so that
/// the `mmap`s it makes for its own heap are not counted as the program's mappings (its blocks
/// are counted already).
#[inline(always)]
pub(crate) fn inside<T>(f: impl FnOnce() -> T) -> T {
    // The thread's own flag, which only this thread touches.
    let flag = flag();
    // SAFETY: as above.
    let old = unsafe { flag.replace(1) };
    let r = f();
    // SAFETY: as above.
    unsafe { flag.write(old) };
    r
}

/// Whether the calling thread is inside the chained allocator (see [`inside`]).
pub(crate) fn in_allocator() -> bool {
    // SAFETY: as in `inside`.
    // (Never resolves the chain: the walk's own mappings come before it is known.)
    STATE.load(Ordering::Relaxed) == CHAINED && unsafe { *flag() } != 0
}

/// Whether the calling thread is already inside the chained allocator: an allocation the
/// allocator makes for itself (tcmalloc's stack-trace capture while it grows its heap, whose
/// blocks come from an emergency arena that its `malloc_usable_size` refuses). Such calls go
/// straight to the allocator, uncounted, as glibc's own internal allocations are.
#[inline(always)]
pub(crate) fn reentered() -> bool {
    // SAFETY: as in `inside`.
    unsafe { *flag() != 0 }
}

/// The glibc giant limit changed to `limit` (configuration read): the fast paths follow it in
/// glibc mode.
pub(crate) fn limit_changed(limit: u64) {
    GIANT_LIMIT.store(limit, Ordering::Relaxed);
    if next().is_none() {
        open_fast_paths();
    }
}

fn copy_path(dst: &mut [u8; 256], src: &[u8]) {
    let n = src.len().min(dst.len() - 1);
    dst[..n].copy_from_slice(&src[..n]);
    dst[n] = 0;
}

/// What the object walk carries between objects.
struct Walk {
    /// An address inside this library.
    own: usize,
    /// Whether this library was passed.
    after_own: bool,
    /// The first object after it defining `malloc`: (its load bias, dynamic section, name).
    found: Option<Object>,
}

#[derive(Clone, Copy)]
struct Object {
    bias: usize,
    dynamic: *const Dyn,
    name: *const libc::c_char,
}

/// Walks the objects after ours for the next `malloc`; `None` when it is glibc's (or none).
/// Allocates nothing: the profiler's own allocator may be the one being resolved.
fn find_next() -> Option<(Next, &'static [u8])> {
    let mut walk = Walk { own: find_next as *const () as usize, after_own: false, found: None };
    // SAFETY: the callback only reads the program headers and dynamic sections of loaded
    // objects, which stay mapped during the walk (the loader's lock is held).
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut walk as *mut Walk).cast()) };
    let obj = walk.found?;
    // SAFETY: the object is loaded (our own dependency order keeps it: nothing unloads an
    // object defining the program's `malloc`), and its dynamic section was read above.
    let table = unsafe { Symbols::of(obj) }?;
    let get = |name: &CStr| table.lookup(name);
    if get(c"gnu_get_libc_version").is_some() {
        return None; // glibc's own malloc (tcmalloc and mimalloc define `__libc_malloc` too)
    }
    // SAFETY: a non-null name from dl_iterate_phdr is a NUL-terminated string of the loader's.
    let path = unsafe { CStr::from_ptr(obj.name) }.to_bytes();
    let (Some(malloc), Some(free), Some(calloc), Some(realloc), Some(usable)) =
        (get(c"malloc"), get(c"free"), get(c"calloc"), get(c"realloc"), get(c"malloc_usable_size"))
    else {
        // SAFETY: only this thread writes UNUSABLE, before STATE becomes GLIBC.
        unsafe { copy_path(&mut *std::ptr::addr_of_mut!(UNUSABLE), path) };
        return None;
    };
    let memalign = get(c"memalign");
    let aligned_alloc = get(c"aligned_alloc");
    let posix_memalign = get(c"posix_memalign");
    if memalign.is_none() && aligned_alloc.is_none() && posix_memalign.is_none() {
        // SAFETY: as above.
        unsafe { copy_path(&mut *std::ptr::addr_of_mut!(UNUSABLE), path) };
        return None;
    }
    // SAFETY: each address is the object's definition of the C function of that name, whose
    // signature is the standard one named by the type.
    let next = unsafe {
        Next {
            malloc: std::mem::transmute::<usize, MallocFn>(malloc),
            free: std::mem::transmute::<usize, FreeFn>(free),
            calloc: std::mem::transmute::<usize, CallocFn>(calloc),
            realloc: std::mem::transmute::<usize, ReallocFn>(realloc),
            usable: std::mem::transmute::<usize, UsableFn>(usable),
            memalign: memalign.map(|a| std::mem::transmute::<usize, MemalignFn>(a)),
            aligned_alloc: aligned_alloc.map(|a| std::mem::transmute::<usize, MemalignFn>(a)),
            posix_memalign: posix_memalign
                .map(|a| std::mem::transmute::<usize, PosixMemalignFn>(a)),
            valloc: get(c"valloc").map(|a| std::mem::transmute::<usize, MallocFn>(a)),
            pvalloc: get(c"pvalloc").map(|a| std::mem::transmute::<usize, MallocFn>(a)),
        }
    };
    Some((next, path))
}

/// Finds `name` in the objects loaded after ours, in load order, from the first object that
/// defines it (the C++ operators' next definitions: `cxx`). 0 when none does.
pub(crate) fn next_definition(name: &CStr) -> usize {
    struct Find<'a> {
        own: usize,
        after_own: bool,
        name: &'a CStr,
        found: usize,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Find` passed to dl_iterate_phdr; `info` is the loader's.
        let (find, info) = unsafe { (&mut *(data as *mut Find<'_>), &*info) };
        // SAFETY: as in `visit`.
        let Some(obj) = (unsafe { object_of(info) }) else { return 0 };
        // SAFETY: as in `visit`.
        if unsafe { contains(info, find.own) } {
            find.after_own = true;
            return 0;
        }
        if !find.after_own {
            return 0;
        }
        // SAFETY: the object is loaded while the walk holds the loader's lock.
        if let Some(a) = unsafe { Symbols::of(obj) }.and_then(|t| t.lookup(find.name)) {
            find.found = a;
            return 1;
        }
        0
    }
    let mut find =
        Find { own: next_definition as *const () as usize, after_own: false, name, found: 0 };
    // SAFETY: the callback only reads loaded objects' headers and symbol tables.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find<'_>).cast()) };
    find.found
}

/// Whether `addr` lies in one of the object's loaded segments.
///
/// # Safety
/// `info` is a `dl_iterate_phdr` record.
unsafe fn contains(info: &libc::dl_phdr_info, addr: usize) -> bool {
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers (caller contract).
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    phdrs.iter().any(|ph| {
        let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
        ph.p_type == libc::PT_LOAD && addr >= start && addr < start + ph.p_memsz as usize
    })
}

/// The object of a `dl_iterate_phdr` record, when it has a dynamic section.
///
/// # Safety
/// `info` is a `dl_iterate_phdr` record.
unsafe fn object_of(info: &libc::dl_phdr_info) -> Option<Object> {
    // SAFETY: as in `contains`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let dynamic = phdrs.iter().find(|ph| ph.p_type == libc::PT_DYNAMIC)?;
    let bias = info.dlpi_addr as usize;
    let name = if info.dlpi_name.is_null() { c"".as_ptr() } else { info.dlpi_name };
    Some(Object { bias, dynamic: (bias + dynamic.p_vaddr as usize) as *const Dyn, name })
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `Walk` find_next passed; `info` is the loader's record.
    let (walk, info) = unsafe { (&mut *(data as *mut Walk), &*info) };
    // SAFETY: `info` is a dl_iterate_phdr record.
    if unsafe { contains(info, walk.own) } {
        walk.after_own = true;
        return 0;
    }
    if !walk.after_own {
        return 0;
    }
    // SAFETY: as above.
    let Some(obj) = (unsafe { object_of(info) }) else { return 0 };
    // SAFETY: the object is loaded while the walk holds the loader's lock.
    if unsafe { Symbols::of(obj) }.and_then(|t| t.lookup(c"malloc")).is_some() {
        walk.found = Some(obj);
        return 1;
    }
    0
}

/// An object's dynamic symbol table in memory, with its hash table.
struct Symbols {
    bias: usize,
    symtab: *const libc::Elf64_Sym,
    strtab: *const u8,
    versym: *const u16,
    gnu_hash: *const u32,
    sysv_hash: *const u32,
}

/// An entry of a dynamic section (`Elf64_Dyn`; not in the libc crate).
#[repr(C)]
struct Dyn {
    d_tag: i64,
    d_un: u64,
}

// <elf.h>'s dynamic tags (not in the libc crate).
const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;

impl Symbols {
    /// Reads the object's dynamic section.
    ///
    /// # Safety
    /// The object is loaded and stays loaded while the result is used.
    unsafe fn of(obj: Object) -> Option<Symbols> {
        let mut s = Symbols {
            bias: obj.bias,
            symtab: std::ptr::null(),
            strtab: std::ptr::null(),
            versym: std::ptr::null(),
            gnu_hash: std::ptr::null(),
            sysv_hash: std::ptr::null(),
        };
        // The loader rewrites most objects' table addresses to absolute ones; the vDSO's and
        // read-only dynamic sections keep them relative to the load bias.
        let at = |v: u64| {
            let v = v as usize;
            if v < obj.bias { v + obj.bias } else { v }
        };
        let mut d = obj.dynamic;
        // SAFETY: a PT_DYNAMIC segment is an array of entries ended by DT_NULL.
        unsafe {
            while (*d).d_tag != DT_NULL {
                let v = (*d).d_un;
                match (*d).d_tag {
                    t if t == DT_SYMTAB => s.symtab = at(v) as *const _,
                    t if t == DT_STRTAB => s.strtab = at(v) as *const u8,
                    t if t == DT_HASH => s.sysv_hash = at(v) as *const u32,
                    DT_GNU_HASH => s.gnu_hash = at(v) as *const u32,
                    DT_VERSYM => s.versym = at(v) as *const u16,
                    _ => {}
                }
                d = d.add(1);
            }
        }
        let hashed = !s.gnu_hash.is_null() || !s.sysv_hash.is_null();
        (!s.symtab.is_null() && !s.strtab.is_null() && hashed).then_some(s)
    }

    /// The address of the default, defined function `name`; an indirect function is resolved.
    fn lookup(&self, name: &CStr) -> Option<usize> {
        let want = name.to_bytes();
        let found = if !self.gnu_hash.is_null() {
            // SAFETY: the tables belong to a loaded object (see `of`).
            unsafe { self.gnu_lookup(want) }
        } else {
            // SAFETY: as above.
            unsafe { self.sysv_lookup(want) }
        }?;
        // SAFETY: `found` indexes the symbol table (the hash table gave it).
        let sym = unsafe { &*self.symtab.add(found) };
        let kind = sym.st_info & 0xf;
        if sym.st_shndx == 0 || sym.st_value == 0 || (kind != STT_FUNC && kind != STT_GNU_IFUNC) {
            return None;
        }
        let addr = self.bias + sym.st_value as usize;
        if kind == STT_GNU_IFUNC {
            // SAFETY: an indirect function's value is its resolver, which returns the address
            // of the implementation and takes no argument it needs on x86_64 and aarch64.
            let resolver: unsafe extern "C" fn() -> usize = unsafe { std::mem::transmute(addr) };
            // SAFETY: as above.
            return Some(unsafe { resolver() });
        }
        Some(addr)
    }

    /// Whether symbol `i` is named `want` and is the default (not hidden) version.
    ///
    /// # Safety
    /// `i` indexes the symbol table.
    unsafe fn is(&self, i: usize, want: &[u8]) -> bool {
        // SAFETY: caller contract; st_name is an offset into the string table, NUL-terminated.
        unsafe {
            let sym = &*self.symtab.add(i);
            let name = CStr::from_ptr(self.strtab.add(sym.st_name as usize).cast());
            if name.to_bytes() != want {
                return false;
            }
            self.versym.is_null() || *self.versym.add(i) & 0x8000 == 0
        }
    }

    /// # Safety
    /// `gnu_hash` is the object's DT_GNU_HASH table.
    unsafe fn gnu_lookup(&self, want: &[u8]) -> Option<usize> {
        let h = want.iter().fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
        // SAFETY: the table's layout: nbuckets, symoffset, bloom size, bloom shift, the bloom
        // words (8 bytes each on 64-bit), the buckets, then the chain from symoffset on.
        unsafe {
            let t = self.gnu_hash;
            let (nbuckets, symoffset, bloom_size) = (*t, *t.add(1), *t.add(2));
            if nbuckets == 0 {
                return None;
            }
            let buckets = t.add(4 + 2 * bloom_size as usize);
            let chain = buckets.add(nbuckets as usize);
            let mut i = *buckets.add((h % nbuckets) as usize);
            if i < symoffset {
                return None;
            }
            loop {
                let c = *chain.add((i - symoffset) as usize);
                if (c | 1) == (h | 1) && self.is(i as usize, want) {
                    return Some(i as usize);
                }
                if c & 1 != 0 {
                    return None;
                }
                i += 1;
            }
        }
    }

    /// # Safety
    /// `sysv_hash` is the object's DT_HASH table.
    unsafe fn sysv_lookup(&self, want: &[u8]) -> Option<usize> {
        let h = want.iter().fold(0u32, |h, &c| {
            let h = (h << 4).wrapping_add(c as u32);
            let g = h & 0xf000_0000;
            (h ^ (g >> 24)) & !g
        });
        // SAFETY: the table's layout: nbucket, nchain, the buckets, the chains.
        unsafe {
            let t = self.sysv_hash;
            let (nbucket, nchain) = (*t, *t.add(1));
            if nbucket == 0 {
                return None;
            }
            let buckets = t.add(2);
            let chain = buckets.add(nbucket as usize);
            let mut i = *buckets.add((h % nbucket) as usize);
            let mut steps = 0;
            while i != 0 && i < nchain && steps < nchain {
                if self.is(i as usize, want) {
                    return Some(i as usize);
                }
                i = *chain.add(i as usize);
                steps += 1;
            }
            None
        }
    }
}
