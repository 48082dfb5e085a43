//! A caching stack unwinder for x86_64 Linux, the first choice of [`crate::engine::capture`].
//!
//! libgcc's `_Unwind_Backtrace` finds and interprets the DWARF call-frame program of every frame
//! on every call: about half a microsecond per frame, so 35 µs for a sample deep in gcc's `cc1`
//! (2 % of a compile at the default interval) and 5 % of the time of a malloc-heavy C benchmark
//! (both measured). The answer it computes for a given return address never changes, and
//! sampled stacks repeat the same return addresses, so here it is computed once (with `gimli`,
//! from the object's `.eh_frame_hdr` found by glibc's `_dl_find_object`) and cached in a small
//! table shared by all threads. Unwinding a frame whose rule is cached is then a table probe and
//! two loads from the stack.
//!
//! A rule is kept only in the shapes x86_64 compilers emit for ordinary functions: the
//! canonical frame address (CFA) is `rsp` or `rbp` plus an offset, the return address sits just
//! below the CFA, and `rbp` is either untouched or saved at an offset from the CFA. Anything else
//! (expression rules, signal frames, another return-address rule) makes [`trace`] give up, and
//! the caller unwinds with libgcc instead. Every load is from the stack of the calling thread,
//! at an address checked to lie above the previous frame and below the top of the thread's
//! stack, so that even a stale rule (an object unloaded and another loaded at its address)
//! cannot make it read outside the stack; a thread whose stack bounds are unknown, or that runs
//! on another stack (a signal stack, a coroutine's), is left to libgcc. A frame whose rule
//! leads to no plausible caller is still reported, as libgcc reports it, and ends the stack.
//!
//! Code without unwind information (an address no loaded object covers, which is JIT code in
//! practice, or one its object's `.eh_frame` does not describe) is where libgcc stops, so a
//! stack through JavaScript or Java ended at the first generated frame. Here such code gets
//! the frame-pointer rule instead, cached like any other: the frame keeps its caller's `rbp` at
//! `[rbp]` and the return address at `[rbp + 8]`, so CFA = `rbp + 16`, with the same bounds
//! checks (`rbp` 8-aligned, at or above the current stack pointer, the CFA below the stack's
//! top), and the walk goes back to the tables' rules at the first return address they cover.
//! The rule is right for code that keeps frame pointers (V8's generated code and builtins,
//! JVMs' compiled code, Go) and a wrong guess for code that does not; a wrong guess ends the
//! walk at the bounds checks or adds frames at its end, never reads outside the stack. Measured
//! with node 20 (`--perf-basic-prof`, a function keeping 64 MiB of `Buffer`s): the walk goes
//! from the C++ runtime function through V8's builtins (in node's own text, which `.eh_frame`
//! does not cover: `Builtins_CEntry_*`, the construct stubs, the interpreter's entry
//! trampoline), the JavaScript frames (JIT code, and with `--interpreted-frames-native-stack` a copy of the
//! interpreter's trampoline per function), `Builtins_JSEntry`, and back on cached rules through
//! `v8::internal::Execution::Call` and `node::Start` to `_start`: the whole stack, as
//! `preload-tests/tests/jit_frames.rs` checks. The frames are named at report time from the
//! program's perf map (`symbols/perf_map.rs`).

/// What [`trace`] reports per frame: its instruction pointer (a return address for every frame
/// but the first) and the start of its function.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawFrame {
    pub(crate) ip: usize,
    pub(crate) function: usize,
    /// The lowest stack address of the frame's activation (its stack pointer: the CFA of the
    /// frame it called).
    pub(crate) sp: usize,
}

/// The cached unwinder could not follow a frame; the caller should unwind another way.
#[derive(Debug)]
pub(crate) struct Unsupported;

/// The program's innermost frame as an entry point written in assembly sees it on entry: the
/// return address into its caller, the caller's stack pointer after the call returns (one word
/// above the return address) and the caller's `rbp`, which the entry point has not touched. An
/// unwind that starts here skips every profiler frame between the entry point and the capture
/// (three or four rule lookups per sample: `bench/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerFrame {
    /// The return address the entry point was called with.
    pub return_address: usize,
    /// The caller's stack pointer once the call returns: the address just above the return
    /// address.
    pub stack_pointer: usize,
    /// The caller's `rbp` at the call.
    pub frame_pointer: usize,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) use imp::{flush, lock_for_fork, object_of, trace, trace_from, unlock_after_fork, warm};

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn trace(
    _stack: std::ops::Range<usize>,
    _f: impl FnMut(RawFrame) -> bool,
) -> Result<(), Unsupported> {
    Err(Unsupported)
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn trace_from(
    _stack: std::ops::Range<usize>,
    _caller: CallerFrame,
    _f: impl FnMut(RawFrame) -> bool,
) -> Result<(), Unsupported> {
    Err(Unsupported)
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn object_of(_addr: usize) -> Option<(usize, *const libc::c_char)> {
    None
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn warm() {}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn lock_for_fork() {}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn unlock_after_fork() {}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) fn flush() {}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

    use gimli::{
        BaseAddresses, CfaRule, EhFrame, EhFrameHdr, NativeEndian, Pointer, Register, RegisterRule,
        UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, X86_64,
    };

    use super::{RawFrame, Unsupported};
    use crate::sys::spin::SpinMutex;

    /// glibc's `struct dl_find_object` (x86_64 layout).
    #[repr(C)]
    struct DlFindObject {
        flags: u64,
        map_start: *mut u8,
        map_end: *mut u8,
        link_map: *mut u8,
        eh_frame: *mut u8,
        reserved: [u64; 7],
    }

    type FindObject = unsafe extern "C" fn(*mut u8, *mut DlFindObject) -> i32;

    /// `_dl_find_object` (glibc 2.35 and later), looked up once: 0 = not yet, 1 = absent.
    static FIND_OBJECT: AtomicUsize = AtomicUsize::new(0);

    fn find_object() -> Option<FindObject> {
        let mut f = FIND_OBJECT.load(Ordering::Acquire);
        if f == 0 {
            // SAFETY: dlsym with a valid NUL-terminated name; the caller is profiler code, so
            // an allocation inside dlsym is the profiler's own.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
            f = if p.is_null() { 1 } else { p as usize };
            FIND_OBJECT.store(f, Ordering::Release);
        }
        // SAFETY: a non-sentinel value is the address of glibc's `_dl_find_object`, whose
        // signature is `FindObject`.
        (f > 1).then(|| unsafe { std::mem::transmute::<usize, FindObject>(f) })
    }

    /// Looks `_dl_find_object` up now (it takes the loader's lock once), so that no sample
    /// does it later. For start-up code.
    pub(crate) fn warm() {
        let _ = find_object();
    }

    /// The start of `struct link_map` (glibc's public part).
    #[repr(C)]
    struct LinkMapHead {
        l_addr: usize,
        l_name: *const libc::c_char,
    }

    /// The loaded object holding `addr`: its load bias and its name (empty for the main
    /// program), without a lock or an allocation (`_dl_find_object`).
    pub(crate) fn object_of(addr: usize) -> Option<(usize, *const libc::c_char)> {
        let find = find_object()?;
        // SAFETY: all-zero is a valid `DlFindObject` (integers and null pointers).
        let mut obj: DlFindObject = unsafe { std::mem::zeroed() };
        // SAFETY: `obj` is a valid out-parameter; `_dl_find_object` only reads loader data.
        if unsafe { find(addr as *mut u8, &mut obj) } != 0 || obj.link_map.is_null() {
            return None;
        }
        // SAFETY: `_dl_find_object` returned the object's link map, whose first two fields are
        // glibc's public `l_addr` and `l_name`; it stays valid while code of the object runs.
        let head = unsafe { &*(obj.link_map as *const LinkMapHead) };
        Some((head.l_addr, head.l_name))
    }

    /// A cached rule, decoded.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Rule {
        /// The outermost frame (return address undefined): the stack ends here.
        End,
        /// CFA = `rbp` (else `rsp`) + `cfa_offset`; return address at CFA - 8; `rbp` saved at
        /// CFA + `rbp_offset` unless that is `NO_RBP`.
        Frame { cfa_rbp: bool, cfa_offset: i32, rbp_offset: i32, function: usize },
    }

    const NO_RBP: i32 = i32::MIN;

    /// Cache size (entries); a power of two.
    const ENTRIES: usize = 2048;

    /// One cache entry under a sequence count (odd while a writer changes it), so that readers
    /// never see a key with another key's rule.
    struct Entry {
        seq: AtomicU64,
        key: AtomicU64,
        rule: AtomicU64,
        function: AtomicU64,
    }

    static CACHE: [Entry; ENTRIES] = [const {
        Entry {
            seq: AtomicU64::new(0),
            key: AtomicU64::new(0),
            rule: AtomicU64::new(0),
            function: AtomicU64::new(0),
        }
    }; ENTRIES];
    /// Storage of the unwind context a miss computes its rule in, sized for what x86_64
    /// compilers emit (a handful of saved registers, at most one remembered state); a frame
    /// needing more is left to libgcc. gimli's default storage boxes about 25 KB and builds
    /// rows of 192 rules on the stack: 15 KB of the calling thread's stack per miss, more than
    /// a 16 KiB thread has, and an allocation inside `malloc`.
    struct Small;

    impl UnwindContextStorage<usize> for Small {
        type Rules = [(Register, RegisterRule<usize>); 16];
        type Stack = [UnwindTableRow<usize, Self>; 2];
    }

    type Context = UnwindContext<usize, Small>;

    /// Serialises cache writers (misses), so that sequence counts stay consistent, and holds
    /// the one context they compute rules in (static memory: neither the thread's stack nor
    /// the heap). Created by the first miss.
    static FILL: SpinMutex<Option<Context>> = SpinMutex::new(None);

    /// The two entries `addr` may be cached in (the cache is two-way set-associative). With
    /// one entry per address, two return addresses of every sampled stack that happen to share
    /// an entry evicted each other on every sample: a change of code layout elsewhere made
    /// `bench/churn1.c` pay a `.eh_frame` lookup per sample, 13,000 instructions a sample
    /// instead of 2,400 (callgrind).
    #[inline(always)]
    fn slots(addr: usize) -> [&'static Entry; 2] {
        let i = ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 53) as usize % ENTRIES;
        [&CACHE[i & !1], &CACHE[i | 1]]
    }

    /// Packs a rule into two words: the CFA offset (high half) and rbp offset (low half); and
    /// the function start (low 56 bits) with flags in the top byte (bit 0: a frame rule, bit 2:
    /// CFA from rbp). `End` is the pair (3, 0), which no frame rule can be (its second word
    /// always has bit 56 set).
    fn pack(rule: Rule) -> (u64, u64) {
        match rule {
            Rule::End => (0b11, 0),
            Rule::Frame { cfa_rbp, cfa_offset, rbp_offset, function } => {
                let flags = 0b1 | (u64::from(cfa_rbp) << 2);
                let offsets = (u64::from(cfa_offset as u32) << 32) | u64::from(rbp_offset as u32);
                // User-space addresses use 47 bits, leaving the top byte free.
                (offsets, (function as u64 & ((1 << 56) - 1)) | (flags << 56))
            }
        }
    }

    #[inline(always)]
    fn unpack(rule: u64, function: u64) -> Option<Rule> {
        if rule == 0b11 && function == 0 {
            return Some(Rule::End);
        }
        let flags = function >> 56;
        if flags & 1 == 0 {
            return None;
        }
        Some(Rule::Frame {
            cfa_rbp: flags & 0b100 != 0,
            cfa_offset: (rule >> 32) as u32 as i32,
            rbp_offset: rule as u32 as i32,
            function: (function & ((1 << 56) - 1)) as usize,
        })
    }

    #[inline(always)]
    fn cached(addr: usize) -> Option<Rule> {
        let [a, b] = slots(addr);
        cached_in(a, addr).or_else(|| cached_in(b, addr))
    }

    #[inline(always)]
    fn cached_in(e: &Entry, addr: usize) -> Option<Rule> {
        let s1 = e.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let key = e.key.load(Ordering::Relaxed);
        let rule = e.rule.load(Ordering::Relaxed);
        let function = e.function.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if e.seq.load(Ordering::Relaxed) != s1 || key != addr as u64 {
            return None;
        }
        unpack(rule, function)
    }

    /// Writes `rule` for `addr` into one of its two cache entries: the one already holding
    /// `addr` or empty, else the one written less often (so both keys of a pair stay cached
    /// while only two addresses compete for it). The caller holds [`FILL`].
    fn store(addr: usize, rule: Rule) {
        let [a, b] = slots(addr);
        let holds = |e: &Entry| {
            let k = e.key.load(Ordering::Relaxed);
            k == addr as u64 || k == 0
        };
        let a_written_more = a.seq.load(Ordering::Relaxed) > b.seq.load(Ordering::Relaxed);
        let e = if holds(a) || (!holds(b) && !a_written_more) { a } else { b };
        let (r, f) = pack(rule);
        let s = e.seq.load(Ordering::Relaxed);
        e.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        e.key.store(addr as u64, Ordering::Relaxed);
        e.rule.store(r, Ordering::Relaxed);
        e.function.store(f, Ordering::Relaxed);
        e.seq.store(s + 2, Ordering::Release);
    }

    /// The rule of code without unwind information (see the module documentation): a frame
    /// that keeps the caller's `rbp` at `[rbp]` and its return address at `[rbp + 8]`, so
    /// CFA = `rbp` + 16 and `rbp` saved at CFA - 16. The function start is unknown (0).
    const FRAME_POINTER: Rule =
        Rule::Frame { cfa_rbp: true, cfa_offset: 16, rbp_offset: -16, function: 0 };

    /// Computes the rule at `addr` from the object's unwind tables: [`FRAME_POINTER`] for an
    /// address no object covers (JIT code) or that its object's tables do not describe;
    /// `Err`: a rule this unwinder does not follow.
    fn compute(ctx: &mut Context, addr: usize) -> Result<Rule, Unsupported> {
        let find = find_object().ok_or(Unsupported)?;
        // SAFETY: all-zero is a valid `DlFindObject` (integers and null pointers).
        let mut obj: DlFindObject = unsafe { std::mem::zeroed() };
        // SAFETY: `obj` is a valid out-parameter; `_dl_find_object` only reads loader data.
        if unsafe { find(addr as *mut u8, &mut obj) } != 0 || obj.eh_frame.is_null() {
            return Ok(FRAME_POINTER);
        }
        let hdr_addr = obj.eh_frame as usize;
        // The readable range holding the tables: `_dl_find_object` gives the object's whole
        // mapping for a shared object, but only the segment holding `addr` for the main
        // program, whose tables may lie in another segment (node's do).
        let (start, end) = tables_range(&obj, hdr_addr).ok_or(Unsupported)?;
        // SAFETY: `.eh_frame_hdr` lies inside a mapped segment of the object, which stays
        // mapped while code of the object is on the stack; gimli reads only what the tables
        // point to.
        let hdr_bytes =
            unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, end - hdr_addr) };
        let mut bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
        let hdr =
            EhFrameHdr::new(hdr_bytes, NativeEndian).parse(&bases, 8).map_err(|_| Unsupported)?;
        let eh_addr = match hdr.eh_frame_ptr() {
            Pointer::Direct(a) => a as usize,
            Pointer::Indirect(_) => return Err(Unsupported),
        };
        if eh_addr >= end || eh_addr < start {
            return Err(Unsupported);
        }
        // SAFETY: as above, for `.eh_frame`.
        let eh_bytes = unsafe { std::slice::from_raw_parts(eh_addr as *const u8, end - eh_addr) };
        bases = bases.set_eh_frame(eh_addr as u64);
        let eh_frame = EhFrame::new(eh_bytes, NativeEndian);
        let Some(table) = hdr.table() else { return Err(Unsupported) };
        let Ok(fde) =
            table.fde_for_address(&eh_frame, &bases, addr as u64, EhFrame::cie_from_offset)
        else {
            return Ok(FRAME_POINTER);
        };
        let row = fde
            .unwind_info_for_address(&eh_frame, &bases, ctx, addr as u64)
            .map_err(|_| Unsupported)?;
        let (cfa_rbp, cfa_offset) = match *row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RSP => {
                (false, offset)
            }
            CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RBP => {
                (true, offset)
            }
            _ => return Err(Unsupported),
        };
        match row.register(X86_64::RA) {
            RegisterRule::Offset(-8) => {}
            RegisterRule::Undefined => return Ok(Rule::End),
            _ => return Err(Unsupported),
        }
        let rbp_offset = match row.register(X86_64::RBP) {
            RegisterRule::Undefined | RegisterRule::SameValue => NO_RBP,
            RegisterRule::Offset(o) => i32::try_from(o).map_err(|_| Unsupported)?,
            _ => return Err(Unsupported),
        };
        let cfa_offset = i32::try_from(cfa_offset).map_err(|_| Unsupported)?;
        let function = fde.initial_address() as usize;
        Ok(Rule::Frame { cfa_rbp, cfa_offset, rbp_offset, function })
    }

    /// The mapped range that holds the object's `.eh_frame_hdr` at `hdr`: the range
    /// `_dl_find_object` reported when it holds it, else (the main program) the loadable
    /// segment holding it, from the program headers the kernel passed (`AT_PHDR`). `None`: not
    /// known here (the caller leaves the frame to libgcc).
    fn tables_range(obj: &DlFindObject, hdr: usize) -> Option<(usize, usize)> {
        let (start, end) = (obj.map_start as usize, obj.map_end as usize);
        if (start..end).contains(&hdr) {
            return Some((start, end));
        }
        if obj.link_map.is_null() {
            return None;
        }
        // SAFETY: the link map `_dl_find_object` returned starts with glibc's public fields.
        let head = unsafe { &*(obj.link_map as *const LinkMapHead) };
        // SAFETY: `l_name` is a loader-owned NUL-terminated string (empty for the program).
        if head.l_name.is_null() || unsafe { *head.l_name } != 0 {
            return None;
        }
        // SAFETY: getauxval reads the auxiliary vector the kernel passed; no lock.
        let (phdr, phnum) = unsafe {
            (libc::getauxval(libc::AT_PHDR) as usize, libc::getauxval(libc::AT_PHNUM) as usize)
        };
        if phdr == 0 || phnum == 0 || phnum > 512 {
            return None;
        }
        // SAFETY: AT_PHDR points to the program's `phnum` program headers, mapped for the
        // whole life of the process.
        let headers = unsafe { std::slice::from_raw_parts(phdr as *const libc::Elf64_Phdr, phnum) };
        headers.iter().filter(|h| h.p_type == libc::PT_LOAD).find_map(|h| {
            let lo = head.l_addr.wrapping_add(h.p_vaddr as usize);
            let hi = lo.wrapping_add(h.p_memsz as usize);
            (lo..hi).contains(&hdr).then_some((lo, hi))
        })
    }

    /// The rule at `addr`: a cache probe, inlined into the walk; the fill is out of line so
    /// that the probe does not pay for the registers the fill needs (callgrind: 36 of a
    /// cached frame's 54 instructions were `rule_at`'s entry and exit when it held both).
    #[inline(always)]
    fn rule_at(addr: usize) -> Result<Rule, Unsupported> {
        match cached(addr) {
            Some(r) => Ok(r),
            None => fill_rule(addr),
        }
    }

    /// Computes and caches the rule at `addr`, which the cache did not hold.
    #[cold]
    #[inline(never)]
    fn fill_rule(addr: usize) -> Result<Rule, Unsupported> {
        let mut fill = FILL.lock();
        let ctx = fill.get_or_insert_with(Context::new_in);
        let r = compute(ctx, addr)?;
        store(addr, r);
        Ok(r)
    }

    /// Walks the calling thread's stack from the caller of `trace`, calling `f` with each frame
    /// until it returns false or the stack ends. `stack` is the calling thread's stack. Must run
    /// as profiler code (a cache miss allocates).
    #[inline(never)]
    pub(crate) fn trace(
        stack: std::ops::Range<usize>,
        f: impl FnMut(RawFrame) -> bool,
    ) -> Result<(), Unsupported> {
        let (ip, sp, bp): (usize, usize, usize);
        // SAFETY: reads this function's own instruction pointer, stack pointer and frame
        // register; nothing is written.
        unsafe {
            std::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        if !stack.contains(&sp) {
            return Err(Unsupported); // Unknown bounds, or not on the thread's own stack.
        }
        walk(stack.end, ip, sp, bp, true, f)
    }

    /// The walk of [`trace`] from the program's innermost frame as an entry point saw it
    /// (`caller`), reported first; the frames between that entry point and here are not
    /// visited. `stack` is the calling thread's stack, which must hold `caller`'s stack
    /// pointer. Must run as profiler code, as [`trace`].
    #[inline(always)]
    pub(crate) fn trace_from(
        stack: std::ops::Range<usize>,
        caller: super::CallerFrame,
        f: impl FnMut(RawFrame) -> bool,
    ) -> Result<(), Unsupported> {
        let sp = caller.stack_pointer;
        if !stack.contains(&sp) || caller.return_address == 0 {
            return Err(Unsupported);
        }
        walk(stack.end, caller.return_address, sp, caller.frame_pointer, false, f)
    }

    /// The walk of [`trace`] from a frame whose instruction pointer, stack pointer and `rbp`
    /// are `ip`, `sp` and `bp`, `sp` lying on a mapped stack that ends at `stack_top`. The
    /// first frame is `trace`'s own when `first` (looked up at `ip` itself and not reported);
    /// otherwise `ip` is a return address and its frame is reported.
    #[inline(always)]
    fn walk(
        stack_top: usize,
        mut ip: usize,
        mut sp: usize,
        mut bp: usize,
        mut first: bool,
        mut f: impl FnMut(RawFrame) -> bool,
    ) -> Result<(), Unsupported> {
        loop {
            // A return address points after the call: look up the call itself.
            let lookup = if first { ip } else { ip - 1 };
            let (cfa_rbp, cfa_offset, rbp_offset, function) = match rule_at(lookup)? {
                Rule::Frame { cfa_rbp, cfa_offset, rbp_offset, function } => {
                    (cfa_rbp, cfa_offset, rbp_offset, function)
                }
                // The outermost frame (`_start`, `clone3`) is still a frame, as libgcc says.
                Rule::End => {
                    if !first {
                        f(RawFrame { ip, function: 0, sp });
                    }
                    return Ok(());
                }
            };
            let base = if cfa_rbp { bp } else { sp };
            let cfa = base.wrapping_add_signed(cfa_offset as isize);
            let at = cfa.wrapping_add_signed(rbp_offset as isize);
            let plausible = cfa > sp
                && cfa <= stack_top
                && cfa % 8 == 0
                && (rbp_offset == NO_RBP || (at >= sp && at % 8 == 0 && at < cfa));
            if !plausible {
                // No caller frame here. The frame at `ip` is real (its callee's rule led to
                // it): it is reported, as libgcc does, and the stack ends.
                if !first {
                    f(RawFrame { ip, function, sp });
                }
                return Ok(());
            }
            if rbp_offset != NO_RBP {
                // SAFETY: `at` is 8-aligned and lies between the current stack pointer and
                // the frame's CFA, below the top of this thread's stack, which is mapped.
                bp = unsafe { (at as *const usize).read() };
            }
            // SAFETY: `cfa - 8` is 8-aligned and lies between the current stack pointer and
            // the top of this thread's stack, which is mapped; the frame's unwind rule puts the
            // return address there.
            let ra = unsafe { ((cfa - 8) as *const usize).read() };
            if !first && !f(RawFrame { ip, function, sp }) {
                return Ok(());
            }
            first = false;
            if ra == 0 {
                return Ok(());
            }
            ip = ra;
            sp = cfa;
        }
    }

    /// Forgets every cached rule. For when an object was unloaded: another may be loaded at
    /// its addresses, with other rules. Takes the writers' lock and never allocates; a thread
    /// unwinding meanwhile may still use a rule it already read (a wrong stack at worst, see
    /// the module documentation).
    pub(crate) fn flush() {
        let _g = FILL.lock();
        for e in CACHE.iter() {
            let s = e.seq.load(Ordering::Relaxed);
            e.seq.store(s + 1, Ordering::Relaxed);
            fence(Ordering::Release);
            e.key.store(0, Ordering::Relaxed);
            e.seq.store(s + 2, Ordering::Release);
        }
    }

    /// `fork` prepare: no cache writer may be mid-update in the child.
    pub(crate) fn lock_for_fork() {
        FILL.lock_for_fork();
    }

    /// `fork` parent and child: releases [`lock_for_fork`].
    pub(crate) fn unlock_after_fork() {
        FILL.force_unlock();
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn packed_rules_round_trip() {
            for rule in [
                Rule::End,
                Rule::Frame {
                    cfa_rbp: false,
                    cfa_offset: 8,
                    rbp_offset: NO_RBP,
                    function: 0x5555_0000_1234,
                },
                Rule::Frame {
                    cfa_rbp: true,
                    cfa_offset: 16,
                    rbp_offset: -16,
                    function: 0x7fff_ffff_f000,
                },
                Rule::Frame { cfa_rbp: false, cfa_offset: 70_000, rbp_offset: -24, function: 1 },
            ] {
                let (r, f) = pack(rule);
                assert_eq!(unpack(r, f), Some(rule));
            }
            assert_eq!(unpack(0, 0), None, "an empty entry is not a rule");
        }

        #[test]
        fn two_addresses_of_one_set_stay_cached_together() {
            // Addresses in an unmapped range no trace visits, sharing their pair of entries.
            let base = 0x10_0000_0000usize;
            let first = base;
            let second = (1..1 << 20)
                .map(|k| base + 16 * k)
                .find(|&a| std::ptr::eq(slots(a)[0], slots(first)[0]))
                .expect("another address of the same set");
            let rule = |n: i32| Rule::Frame {
                cfa_rbp: false,
                cfa_offset: n,
                rbp_offset: NO_RBP,
                function: 0x1000,
            };
            let _fill = FILL.lock();
            store(first, rule(8));
            store(second, rule(16));
            assert_eq!(cached(first), Some(rule(8)), "the second store evicted the first");
            assert_eq!(cached(second), Some(rule(16)));
            // Storing again keeps each in its own entry.
            store(first, rule(24));
            assert_eq!((cached(first), cached(second)), (Some(rule(24)), Some(rule(16))));
        }

        #[test]
        fn flush_forgets_every_cached_rule() {
            let (fast, _) = recurse(3);
            let ras: Vec<usize> = fast[1..].iter().map(|ip| ip - 1).collect();
            assert!(ras.iter().any(|&a| cached(a).is_some()), "nothing was cached");
            flush();
            // Another test's trace may refill the cache meanwhile; ours are gone unless so.
            let left = ras.iter().filter(|&&a| cached(a).is_some()).count();
            assert!(left < ras.len(), "{left} of {} rules survived the flush", ras.len());
            for &a in &ras {
                if cached(a).is_none() {
                    assert_eq!(rule_at(a).is_ok(), cached(a).is_some());
                }
            }
        }

        /// An address of no object (a JIT's code): its frame is followed by the frame-pointer
        /// chain, each frame reported, until an address with unwind information takes the
        /// cached rules back; a chain leaving the stack ends the walk at the last real frame.
        #[test]
        fn code_without_unwind_info_is_followed_by_its_frame_pointers() {
            // Addresses no test maps (another range than the cache test's).
            let jit = |k: usize| 0x20_0000_0000 + k * 0x1000 + 0x10;
            assert!(object_of(jit(1)).is_none());
            assert_eq!(rule_at(jit(1) - 1).ok(), Some(FRAME_POINTER));
            // A return address of real code, and its rule (computed from `.eh_frame`).
            let (fast, _) = recurse(0);
            let real = fast[1];
            let Ok(Rule::Frame { cfa_rbp, cfa_offset, .. }) = rule_at(real - 1) else {
                panic!("no ordinary rule at {real:#x}");
            };
            // A stack in memory the walk may read (it reads only between `sp` and `top`).
            let mut st = vec![0usize; 4096];
            let base = st.as_ptr() as usize;
            let at = |i: usize| base + 8 * i;
            let top = at(st.len());
            // JIT frame 1: rbp at slot 4, its caller's rbp and return address above it.
            st[4] = at(10);
            st[5] = jit(2);
            // JIT frame 2 (sp at slot 6) returns into real code, whose sp is slot 12.
            st[10] = at(12);
            st[11] = real;
            let cfa = at(12) + cfa_offset as usize;
            assert!(cfa_offset > 0 && cfa_offset % 8 == 0 && cfa < top, "{cfa_offset}");
            let _ = cfa_rbp; // Either base is slot 12 here: rsp, or rbp as chained above.
            st[(cfa - 8 - base) / 8] = 0; // The real frame's return address: the stack ends.
            // The walk reads `st` through addresses: it is passed to keep it borrowed.
            let walked = |_st: &[usize]| {
                let mut seen = Vec::new();
                walk(top, jit(1), at(0), at(4), false, |f| {
                    seen.push((f.ip, f.sp, f.function));
                    true
                })
                .expect("every rule is an ordinary one");
                seen
            };
            let seen = walked(&st);
            assert_eq!(seen.len(), 3, "{seen:x?}");
            assert_eq!(&seen[..2], [(jit(1), at(0), 0), (jit(2), at(6), 0)], "{seen:x?}");
            assert_eq!((seen[2].0, seen[2].1), (real, at(12)), "{seen:x?}");
            assert_ne!(seen[2].2, 0, "the real frame's function comes from its rule");

            // A saved frame pointer out of bounds (above the stack's top, below the next
            // frame's sp, misaligned) ends the walk at the frame it would lead from: nothing
            // outside the stack is read.
            for bad in [top + 64, at(2), at(5), at(8) + 4] {
                st[4] = bad;
                let seen = walked(&st);
                assert_eq!(
                    seen.iter().map(|f| f.0).collect::<Vec<_>>(),
                    [jit(1), jit(2)],
                    "rbp {bad:#x}"
                );
            }
        }

        #[inline(never)]
        fn both_unwinders() -> (Vec<usize>, Vec<usize>) {
            let mut fast = Vec::new();
            let (lo, top) = crate::sys::stack_bounds().expect("a test thread knows its stack");
            trace(lo..top, |f| {
                fast.push(f.ip);
                true
            })
            .expect("every frame of a Rust test thread has an ordinary rule");
            let mut slow = Vec::new();
            backtrace::trace(|f| {
                slow.push(f.ip() as usize);
                true
            });
            (fast, slow)
        }

        #[inline(never)]
        fn recurse(n: usize) -> (Vec<usize>, Vec<usize>) {
            let r = if n == 0 { both_unwinders() } else { recurse(n - 1) };
            std::hint::black_box(n);
            r
        }

        #[test]
        fn agrees_with_libgcc_frame_for_frame() {
            for _ in 0..2 {
                // The second round runs on cached rules.
                let (fast, slow) = recurse(20);
                // Both walks start inside `both_unwinders` (at different calls); from its
                // caller on they must see the same return addresses down to the stack's end.
                let theirs = slow.iter().position(|&ip| ip == fast[1]).expect("caller found");
                let (a, b) = (&fast[1..], &slow[theirs..]);
                assert!(a.len() >= 22, "{} frames", a.len());
                assert_eq!(a, &b[..a.len()], "first differing frame");
                let name = |ip: &usize| {
                    let mut n = String::new();
                    backtrace::resolve(*ip as *mut std::ffi::c_void, |s| {
                        n = s.name().map(|n| n.to_string()).unwrap_or_default()
                    });
                    format!("{ip:#x} {n}")
                };
                assert!(
                    b.len() - a.len() <= 1,
                    "libgcc went further: ours end {:?}, libgcc's {:?}",
                    a.iter().rev().take(2).map(name).collect::<Vec<_>>(),
                    b.iter().rev().take(4).map(name).collect::<Vec<_>>()
                );
            }
        }
    }
}
