//! Turning raw instruction pointers into frames, at report time only.
//!
//! Every address a module covers is resolved once and cached for the life of the process (the
//! cache is the profiler's own memory, excluded from the program's totals). Inlined functions
//! are kept: one address yields several frames, innermost first, all but the last marked
//! `inlined`. Names are demangled (legacy and v0 Rust, C++) without cutting any path segment.
//! Addresses with no symbol are shown as `module+0xoffset`, so even stripped binaries give
//! something to look up.
//!
//! Where the answers come from: debug info of the program's own modules through `dwarf`, one
//! compilation unit at a time; the ELF symbol tables of system libraries through
//! `elf_symbols`; a stripped module's separate debug file (`debug_file`: installed by a debug
//! package, or in the debuginfod cache) for its names and, outside system libraries, its DWARF;
//! the backtrace crate for modules whose debug info `dwarf` does not read (compressed, absent);
//! and, for addresses no module covers (JIT code), the perf map the program may write
//! (`perf_map`), read again for each batch and never cached.
//! Addresses of another process are named by `offline` from the same pieces, without the
//! backtrace crate.

use std::collections::HashMap;
use std::sync::Arc;

use crate::callstack::Frame;
use crate::engine::tables::AddrHasher;
use crate::sys::spin::SpinMutex;

/// The symbol cache: address -> its frames (innermost first).
#[derive(Debug)]
pub(crate) struct SymbolCache {
    map: HashMap<usize, Arc<[Frame]>, std::hash::BuildHasherDefault<AddrHasher>>,
}

/// Serialises symbolization (the backtrace crate's DWARF caches are not thread-safe when used
/// unsynchronized) and guards our cache. Taken before any other profiler lock.
pub(crate) static SYMBOLS: SpinMutex<SymbolCache> =
    SpinMutex::new(SymbolCache { map: HashMap::with_hasher(std::hash::BuildHasherDefault::new()) });

/// Number of cached addresses.
pub(crate) fn cache_len() -> usize {
    SYMBOLS.lock().map.len()
}

/// A loaded module, for naming addresses that have no symbol.
#[derive(Debug, Clone)]
pub struct Module {
    /// Path of the module (the executable's real path for the main program).
    pub name: Arc<str>,
    /// Lowest address of its code.
    pub start: usize,
    /// One past its highest code address.
    pub end: usize,
    /// Load bias: file virtual address = runtime address - bias.
    pub bias: usize,
    /// GNU build id in hex, or empty.
    pub build_id: String,
}

/// The modules currently loaded (re-read on every report; `dlopen` adds modules).
pub fn modules() -> Vec<Module> {
    use findshlibs::{SharedLibrary, TargetSharedLibrary};
    let mut out = Vec::new();
    // The calling thread's entry still names the executable once the main thread has ended.
    let exe = std::fs::read_link("/proc/self/exe")
        .or_else(|_| std::fs::read_link("/proc/thread-self/exe"))
        .map(|p| p.display().to_string())
        .ok();
    TargetSharedLibrary::each(|lib| {
        let mut name = lib.name().to_string_lossy().into_owned();
        if name.is_empty() {
            name = exe.clone().unwrap_or_else(|| "[main]".to_string());
        }
        if name.contains("linux-vdso") {
            return;
        }
        let bias = lib.virtual_memory_bias().0;
        let Some((start, end)) = code_range(lib) else { return };
        let build_id = lib.id().map(|id| id.to_string()).unwrap_or_default();
        out.push(Module { name: name.into(), start, end, bias, build_id });
    });
    out.sort_by_key(|m| m.start);
    out
}

/// The code range `[start, end)` of the loaded object whose code contains `addr` (start-up of
/// the shim: cheaper than [`modules`], which names every module and formats its build id).
pub fn code_range_of(addr: usize) -> Option<(usize, usize)> {
    use findshlibs::{SharedLibrary, TargetSharedLibrary};
    let mut found = None;
    TargetSharedLibrary::each(|lib| {
        if let Some((start, end)) = code_range(lib).filter(|&(s, e)| s <= addr && addr < e) {
            found = Some((start, end));
        }
    });
    found
}

/// The `[start, end)` range of a loaded object's code segments (None if it has none).
fn code_range(lib: &findshlibs::TargetSharedLibrary<'_>) -> Option<(usize, usize)> {
    use findshlibs::{Segment, SharedLibrary};
    let (mut start, mut end) = (usize::MAX, 0usize);
    for seg in lib.segments().filter(|seg| seg.is_code()) {
        let s = seg.actual_virtual_memory_address(lib).0;
        start = start.min(s);
        end = end.max(s + seg.len());
    }
    (start < end).then_some((start, end))
}

/// The module containing `ip`.
pub fn module_of(mods: &[Module], ip: usize) -> Option<&Module> {
    mods.get(module_index(mods, ip)?)
}

/// The index in `mods` (sorted by start) of the module containing `ip`.
pub(crate) fn module_index(mods: &[Module], ip: usize) -> Option<usize> {
    let i = mods.partition_point(|m| m.start <= ip).checked_sub(1)?;
    (ip < mods.get(i)?.end).then_some(i)
}

/// Whether `path` is a system library (C runtime, loader, compiler runtimes). Their frames are
/// named from their ELF symbol tables (`elf_symbols`): their debug info, when installed, is
/// detached and compressed, and inflating libc's alone cost ~90 ms and ~35 MiB per report
/// (measured), paid by every process because every stack ends in `__libc_start_main` or
/// `start_thread`.
pub(crate) fn is_system_library(path: &str) -> bool {
    ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"].iter().any(|p| path.starts_with(p))
}

/// The name of an address no symbol covers: `module+0xoffset`, so that it can still be looked
/// up offline.
pub(crate) fn unnamed(m: &Module, ip: usize) -> String {
    let short = m.name.rsplit('/').next().unwrap_or(&m.name);
    format!("{short}+{:#x}", ip.wrapping_sub(m.bias))
}

/// The frame of `ip` in system library `m`, named `name` (from its symbol table) when known.
fn system_frame(ip: usize, m: &Module, name: Option<&str>) -> Arc<[Frame]> {
    let function = match name {
        Some(n) => format!("{:#}", backtrace::SymbolName::new(n.as_bytes())),
        None => unnamed(m, ip),
    };
    let frame = Frame {
        ip,
        function: function.into(),
        file: None,
        line: None,
        inlined: false,
        module: Some(m.name.clone()),
    };
    Arc::from(vec![frame])
}

/// Names the addresses `ips` of system library `m` in one pass over its symbol tables. The
/// address before each `ip` is looked up, so that a return address at a function's end names
/// its caller.
pub(crate) fn resolve_system(m: &Module, ips: &[usize]) -> Vec<(usize, Arc<[Frame]>)> {
    let mut by_addr: Vec<(u64, usize)> =
        ips.iter().map(|&ip| (ip.wrapping_sub(1).wrapping_sub(m.bias) as u64, ip)).collect();
    by_addr.sort_unstable();
    let addrs: Vec<u64> = by_addr.iter().map(|a| a.0).collect();
    let mut names = crate::symbols::elf_symbols::name_functions(&m.name, &addrs);
    // A stripped library names only its exports: the rest from its separate debug file's full
    // symbol table, when one for its build is installed or cached (`debug_file`).
    if names.iter().any(Option::is_none)
        && let Some(debug) = crate::symbols::debug_file::find(&m.name, &m.build_id)
    {
        let full = crate::symbols::elf_symbols::name_functions(&debug.to_string_lossy(), &addrs);
        for (name, better) in names.iter_mut().zip(full) {
            if better.is_some() {
                *name = better;
            }
        }
    }
    by_addr
        .iter()
        .zip(names.iter())
        .map(|(&(_, ip), name)| (ip, system_frame(ip, m, name.as_deref())))
        .collect()
}

/// What [`resolve_module`] does with a module whose debug info `dwarf` cannot read
/// (compressed or detached debug info, no debug info).
#[derive(Debug, Clone, Copy)]
pub(crate) enum NoDwarf<'a> {
    /// Ask the backtrace crate, which reads those too; `mods` are the modules loaded now. Only
    /// for addresses of the current process: the backtrace crate knows no other.
    Backtrace(&'a [Module]),
    /// Name from the module's ELF symbol table (addresses of another process: `offline`).
    SymbolTable,
}

/// Resolves the addresses `ips` of module `m` (not a system library) from its debug info, one
/// compilation unit at a time (`dwarf`). An address the debug info does not name is named from
/// the module's symbol table, as the backtrace crate does. A module `dwarf` cannot read
/// (compressed or detached debug info, no debug info) is handled as `no_dwarf` says.
pub(crate) fn resolve_module(
    m: &Module,
    ips: &[usize],
    no_dwarf: NoDwarf<'_>,
) -> Vec<(usize, Arc<[Frame]>)> {
    // Return addresses: look up the call instruction before each one.
    let addrs: Vec<u64> =
        ips.iter().map(|&ip| ip.wrapping_sub(1).wrapping_sub(m.bias) as u64).collect();
    // The module's own debug info, else its separate debug file's (`debug_file`): DWARF when
    // it reads, else that file's symbol table.
    let mut names_from = m.name.to_string();
    let mut found = crate::symbols::dwarf::resolve(&m.name, &addrs);
    if found.is_none()
        && let Some(debug) = crate::symbols::debug_file::find(&m.name, &m.build_id)
    {
        names_from = debug.to_string_lossy().into_owned();
        found = crate::symbols::dwarf::resolve(&names_from, &addrs);
        if found.is_none() {
            return resolve_system(m, ips);
        }
    }
    let Some(found) = found else {
        return match no_dwarf {
            NoDwarf::SymbolTable => resolve_system(m, ips),
            // The backtrace crate lists the modules once: after an unload it may take this
            // address for the closed object's. The symbol table of the file mapped now cannot.
            NoDwarf::Backtrace(_)
                if UNLOADS_SEEN.load(std::sync::atomic::Ordering::Relaxed) != 0 =>
            {
                resolve_system(m, ips)
            }
            NoDwarf::Backtrace(mods) => {
                ips.iter().map(|&ip| (ip, resolve_uncached(ip, mods))).collect()
            }
        };
    };
    let unnamed_at: Vec<usize> = (0..ips.len())
        .filter(|&i| found[i].as_ref().is_none_or(|fr| fr.iter().any(|f| f.name.is_none())))
        .collect();
    let mut symtab: HashMap<usize, String> = HashMap::new();
    if !unnamed_at.is_empty() {
        let mut want: Vec<(u64, usize)> = unnamed_at.iter().map(|&i| (addrs[i], i)).collect();
        want.sort_unstable();
        let sorted: Vec<u64> = want.iter().map(|w| w.0).collect();
        let names = crate::symbols::elf_symbols::name_functions(&names_from, &sorted);
        for ((_, i), name) in want.into_iter().zip(names) {
            if let Some(n) = name {
                symtab.insert(i, n);
            }
        }
    }
    let demangle = |raw: &[u8]| format!("{:#}", backtrace::SymbolName::new(raw));
    ips.iter()
        .zip(found)
        .enumerate()
        .map(|(i, (&ip, frames))| {
            let fallback = symtab.get(&i).map(|n| demangle(n.as_bytes())).unwrap_or_default();
            let mut out: Vec<Frame> = frames
                .unwrap_or_default()
                .into_iter()
                .map(|f| Frame {
                    ip,
                    function: match &f.name {
                        Some(raw) => demangle(raw),
                        None => fallback.clone(),
                    }
                    .into(),
                    file: f.file.map(Into::into),
                    line: f.line,
                    inlined: true,
                    module: None,
                })
                .collect();
            if out.is_empty() && !fallback.is_empty() {
                out.push(Frame {
                    ip,
                    function: fallback.into(),
                    file: None,
                    line: None,
                    inlined: true,
                    module: None,
                });
            }
            (ip, finish_frames(out, ip, Some(m)))
        })
        .collect()
}

/// Resolves `ip` outside system libraries: DWARF (with inlined frames) or the ELF symbol table
/// of its module, through the backtrace crate.
fn resolve_uncached(ip: usize, mods: &[Module]) -> Arc<[Frame]> {
    let module = module_of(mods, ip);
    let mut frames: Vec<Frame> = Vec::new();
    // SAFETY: `resolve_unsynchronized` must not run concurrently with another resolution; the
    // caller holds `SYMBOLS`, which every resolution in this crate takes.
    unsafe {
        backtrace::resolve_unsynchronized(ip as *mut std::ffi::c_void, |sym| {
            let function = match sym.name() {
                Some(n) => format!("{n:#}"),
                None => String::new(),
            };
            frames.push(Frame {
                ip,
                function: function.into(),
                file: sym.filename().map(|f| f.display().to_string().into()),
                line: sym.lineno(),
                inlined: true,
                module: None,
            });
        });
    }
    finish_frames(frames, ip, module)
}

/// The frames of `ip` (innermost first, all marked inlined) made presentable: the outermost is
/// not inlined, frames with neither name nor file go, nameless ones become `??`, an address
/// with no frame at all is named `module+0xoffset`, and every frame names its module.
pub(crate) fn finish_frames(
    mut frames: Vec<Frame>,
    ip: usize,
    module: Option<&Module>,
) -> Arc<[Frame]> {
    if let Some(last) = frames.last_mut() {
        last.inlined = false;
    }
    frames.retain(|f| !f.function.is_empty() || f.file.is_some());
    if frames.is_empty() {
        let function = match module {
            Some(m) => unnamed(m, ip),
            None => format!("{ip:#x}"),
        };
        frames.push(Frame {
            ip,
            function: function.into(),
            file: None,
            line: None,
            inlined: false,
            module: None,
        });
    }
    let mname = module.map(|m| m.name.clone());
    for f in frames.iter_mut() {
        if f.function.is_empty() {
            f.function = "??".into();
        }
        f.module = mname.clone();
    }
    frames.into()
}

/// The loader's count of objects unloaded so far (`dlpi_subs`), as of the last resolution.
static UNLOADS_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The loader's count of objects unloaded so far (`dlpi_subs` of `dl_iterate_phdr`).
fn unloads() -> u64 {
    loader_counters().1
}

/// The loader's counts of objects loaded and unloaded so far (`dlpi_adds`, `dlpi_subs`): a
/// list of [`modules`] is current while they have not moved.
pub(crate) fn loader_counters() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut std::ffi::c_void,
    ) -> libc::c_int {
        let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;
        if size >= end {
            // SAFETY: the loader passes a valid `info` of `size` bytes, which covers both
            // counters; `out` is the `(u64, u64)` passed below.
            unsafe { *out.cast::<(u64, u64)>() = ((*info).dlpi_adds, (*info).dlpi_subs) };
        }
        1 // The counters are the same in every entry: one is enough.
    }
    let mut counters = (0u64, 0u64);
    // SAFETY: `first` matches the callback type and only writes the pair it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut counters).cast()) };
    counters
}

/// `YING_SYMBOLIZE=offline`: no debug info or symbol table is read; every address is named
/// `module+0xoffset` (see [`set_offline`]).
static OFFLINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Names every address `module+0xoffset` from now on, reading no debug info and no symbol
/// table (`YING_SYMBOLIZE=offline`; `ying report` names them from the live file), or names
/// them fully again. Addresses already named keep their names.
pub(crate) fn set_offline(offline: bool) {
    OFFLINE.store(offline, std::sync::atomic::Ordering::Relaxed);
}

/// Whether addresses are left for offline naming ([`set_offline`]).
pub(crate) fn offline() -> bool {
    OFFLINE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The frame of a Python frame's word (see `engine/python/`), named from this process's code
/// objects. None for an address.
pub(crate) fn python_frame(word: usize) -> Option<Arc<[Frame]>> {
    let (id, _) = crate::engine::python::decode(word)?;
    Some(python_frame_named(word, crate::engine::python::describe(id)))
}

/// The frame of the Python frame's word `word` whose code object has the qualified name and
/// file `names` (`<python>` when unknown).
pub(crate) fn python_frame_named(word: usize, names: Option<(String, String)>) -> Arc<[Frame]> {
    let line = crate::engine::python::decode(word).map_or(0, |(_, line)| line);
    let (function, file) = names.unwrap_or_else(|| ("<python>".to_string(), String::new()));
    Arc::from([Frame {
        ip: word,
        function: Arc::from(function),
        file: (!file.is_empty()).then(|| Arc::from(file)),
        line: (line > 0).then_some(line),
        inlined: false,
        module: None,
    }])
}

/// Resolves every address in `ips` into the cache (one lock hold, one module scan).
pub(crate) fn resolve_many(ips: &[usize]) -> HashMap<usize, Arc<[Frame]>> {
    let mut cache = SYMBOLS.lock();
    // An object was unloaded since the cache was filled: another may sit at its addresses now.
    let subs = unloads();
    if UNLOADS_SEEN.swap(subs, std::sync::atomic::Ordering::Relaxed) != subs {
        cache.map.clear();
    }
    let mut missing: Vec<usize> =
        ips.iter().copied().filter(|ip| !cache.map.contains_key(ip)).collect();
    // Python frames (`engine/python/`) are named from the code objects the sampled path copied.
    missing.retain(|&ip| match python_frame(ip) {
        Some(f) => {
            cache.map.insert(ip, f);
            false
        }
        None => true,
    });
    missing.sort_unstable();
    missing.dedup();
    // Addresses no module covers (JIT code), named for this batch only: the same address may
    // hold other code by the next report.
    let mut unmapped: HashMap<usize, Arc<[Frame]>> = HashMap::new();
    if !missing.is_empty() && offline() {
        let mods = modules();
        for &ip in &missing {
            let f = finish_frames(Vec::new(), ip, module_of(&mods, ip));
            cache.map.insert(ip, f);
        }
    } else if !missing.is_empty() {
        let mods = modules();
        // System libraries: all of a module's addresses in one pass over its symbol tables.
        // Other modules: all of a module's addresses in one pass over its debug info.
        let mut system: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut other: HashMap<usize, Vec<usize>> = HashMap::new();
        for &ip in &missing {
            match module_index(&mods, ip) {
                Some(i) if is_system_library(&mods[i].name) => {
                    system.entry(i).or_default().push(ip)
                }
                Some(i) => other.entry(i).or_default().push(ip),
                None => {
                    unmapped.insert(ip, resolve_uncached(ip, &mods));
                }
            }
        }
        if !unmapped.is_empty() {
            let ips: Vec<usize> = unmapped.keys().copied().collect();
            let own = crate::symbols::perf_map::own_start_ms();
            unmapped.extend(crate::symbols::perf_map::frames(std::process::id(), own, &ips));
        }
        for (i, ips) in system {
            for (ip, f) in resolve_system(&mods[i], &ips) {
                cache.map.insert(ip, f);
            }
        }
        for (i, ips) in other {
            for (ip, f) in resolve_module(&mods[i], &ips, NoDwarf::Backtrace(&mods)) {
                cache.map.insert(ip, f);
            }
        }
        // Our per-address cache keeps every answer; the parsed debug info behind them (tens of
        // MiB for a large binary) is dropped until the next report needs new addresses.
        backtrace::clear_symbol_cache();
    }
    let mut out = HashMap::with_capacity(ips.len());
    for &ip in ips {
        if let Some(f) = cache.map.get(&ip).or_else(|| unmapped.get(&ip)) {
            out.insert(ip, Arc::clone(f));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-unit DWARF path names every address as the backtrace crate (addr2line) does:
    /// return addresses of a real stack, and a sweep through the test binary's own code.
    #[test]
    fn unit_at_a_time_lookup_matches_the_backtrace_crate() {
        let mut ips = Vec::new();
        backtrace::trace(|f| {
            ips.push(f.ip() as usize);
            true
        });
        let mods = modules();
        let exe = std::fs::read_link("/proc/self/exe").unwrap().display().to_string();
        let m = mods.iter().find(|m| *m.name == *exe).expect("the test binary is a module");
        ips.retain(|&ip| m.start <= ip && ip < m.end);
        assert!(!ips.is_empty());
        let step = ((m.end - m.start) / 3000).max(1) | 1;
        ips.extend((m.start + 1..m.end).step_by(step));
        let _lock = SYMBOLS.lock();
        let ours = resolve_module(m, &ips, NoDwarf::Backtrace(&mods));
        let mut differ = Vec::new();
        let (mut inlined, mut compared) = (0, 0);
        for (ip, frames) in &ours {
            let theirs = resolve_uncached(*ip, &mods);
            // Addresses the debug info does not cover are named from the symbol table, which
            // `elf_symbols` reads with symbol sizes (the sweep's padding between functions
            // gets `module+0x...` where backtrace names the function before the gap).
            if theirs.iter().all(|f| f.file.is_none()) {
                continue;
            }
            compared += 1;
            inlined += frames.iter().filter(|f| f.inlined).count();
            if **frames != *theirs {
                differ.push(format!("{ip:#x}:\n  ours   {frames:?}\n  theirs {theirs:?}"));
            }
        }
        backtrace::clear_symbol_cache();
        assert!(compared > ips.len() / 2, "{compared} of {} compared", ips.len());
        assert!(inlined > 0, "the sweep should meet inlined frames");
        assert!(
            differ.is_empty(),
            "{} of {} differ:\n{}",
            differ.len(),
            ips.len(),
            differ[..differ.len().min(12)].join("\n")
        );
    }
}
