//! Naming the addresses of another process, from the files on disk.
//!
//! A report can be written outside the process whose stacks it holds, from the raw addresses
//! and the module list that process recorded, possibly after it ended. [`symbolize`] cannot
//! name those: it lists the modules loaded in the current process, and may ask the backtrace
//! crate, which knows only the current process's. Here the recorded module list says where
//! each module was loaded, and each address is named from its module's file on disk through
//! the same pieces as in the process: the debug info one unit at a time (`dwarf`), the ELF
//! symbol tables for system libraries and for what the debug info does not name or cannot be
//! read (`elf_symbols`). Never the backtrace crate.
//!
//! The file on disk is the one there now, not necessarily the one the process mapped: the
//! program may have been rebuilt, or the library upgraded, since. A name read from another
//! build would be wrong and look right, so a module whose recorded GNU build id differs from
//! its file's (or whose file has none, is gone or cannot be read) is not read at all: its
//! addresses are shown as `module+0xoffset`, which can still be looked up in the right build,
//! and one warning line says so. A module recorded without a build id cannot be checked and is
//! read as it is. A file that changes while it is read is treated as not the build.
//!
//! Addresses no recorded module covers (JIT code) are named from the process's perf map,
//! `/tmp/perf-<pid>.map`, when it is still there and not older than the process (node leaves
//! it behind when it exits): see `perf_map`.
//!
//! [`symbolize`]: crate::symbols::symbolize

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use crate::callstack::Frame;
use crate::symbols::elf_symbols::gnu_build_id;
use crate::symbols::symbolize::{
    Module, NoDwarf, finish_frames, is_system_library, module_index, resolve_module, resolve_system,
};

/// Frames of `ips` (addresses recorded in another process, `pid`, started at `started_ms` when
/// known, whose modules were `mods`, sorted by start), named from the files on disk, and those
/// no module covers (JIT code) from the process's perf map if it is still there and not older
/// than the process (`perf_map`; node leaves it behind). Returns
/// the frames per ip (innermost first, as `resolve_many` returns them) and one warning line per
/// module that could not be used (file missing or unreadable, or its build id differs from the
/// one recorded): the frames of such a module are `module+0xoffset` only, never a name from
/// another build.
pub(crate) fn resolve_offline(
    (pid, started_ms): (u32, Option<u64>),
    mods: &[Module],
    ips: &[usize],
) -> (HashMap<usize, Arc<[Frame]>>, Vec<String>) {
    let mut sorted = ips.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = HashMap::with_capacity(sorted.len());
    // By module index, so that the warnings come in the modules' order.
    let mut by_module: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut unmapped = Vec::new();
    for ip in sorted {
        match module_index(mods, ip) {
            Some(i) => by_module.entry(i).or_default().push(ip),
            None => {
                out.insert(ip, finish_frames(Vec::new(), ip, None));
                unmapped.push(ip);
            }
        }
    }
    out.extend(crate::symbols::perf_map::frames(pid, started_ms, &unmapped));
    let mut warnings = Vec::new();
    for (i, ips) in by_module {
        let m = &mods[i];
        let named = check(m).and_then(|stamp| {
            let named = if is_system_library(&m.name) {
                resolve_system(m, &ips)
            } else {
                resolve_module(m, &ips, NoDwarf::SymbolTable)
            };
            // The readers open the file again by its path: it must still be the one checked.
            match file_stamp(&m.name) {
                Some(now) if now == stamp => Ok(named),
                _ => Err("changed on disk while it was read".to_string()),
            }
        });
        match named {
            Ok(named) => out.extend(named),
            Err(why) => {
                warnings.push(format!(
                    "ying: {}: {why}; its frames are shown as module+0xoffset",
                    m.name
                ));
                out.extend(ips.iter().map(|&ip| (ip, finish_frames(Vec::new(), ip, Some(m)))));
            }
        }
    }
    (out, warnings)
}

/// What tells one file at a path from another: device, inode, size and modification time.
type Stamp = (u64, u64, u64, i64, i64);

/// The stamp of the file at `path`, if it can be read.
fn file_stamp(path: &str) -> Option<Stamp> {
    let md = std::fs::metadata(path).ok()?;
    Some((md.dev(), md.ino(), md.len(), md.mtime(), md.mtime_nsec()))
}

/// Whether the file of module `m` may name its addresses: its stamp when it may, why not when
/// it may not (the middle of a warning line).
fn check(m: &Module) -> Result<Stamp, String> {
    // Only a regular file: the path comes from a file someone else wrote, and opening a FIFO
    // or a device could block or read forever.
    match std::fs::metadata(&*m.name) {
        Ok(md) if !md.is_file() => return Err("is not a regular file".into()),
        _ => {}
    }
    let file = match File::open(&*m.name) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("not found".into()),
        Err(e) => return Err(format!("cannot be read ({e})")),
    };
    let stamp = file
        .metadata()
        .map(|md| (md.dev(), md.ino(), md.len(), md.mtime(), md.mtime_nsec()))
        .map_err(|e| format!("cannot be read ({e})"))?;
    if m.build_id.is_empty() {
        return Ok(stamp); // Recorded without one: nothing to check against.
    }
    match gnu_build_id(&file) {
        Some(found) if found.eq_ignore_ascii_case(&m.build_id) => Ok(stamp),
        found => Err(format!(
            "not the build the process ran (build id {}, on disk {})",
            m.build_id,
            found.as_deref().unwrap_or("none")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::symbolize::{module_of, modules, resolve_many, unnamed};

    /// A pid no process has (above the kernel's maximum), so no perf map unless a test writes
    /// one.
    const NO_PID: u32 = 0x7fff_ffe0;

    fn exe() -> String {
        std::fs::read_link("/proc/self/exe").unwrap().display().to_string()
    }

    fn malloc_addr() -> usize {
        libc::malloc as *const () as usize
    }

    /// Return addresses of a real stack (this function's caller chain, through the test
    /// harness and libc's thread start), and an address inside libc's `malloc` (+1: the
    /// symbolizers look up the byte before a return address).
    #[inline(never)]
    fn stack_and_libc_ips() -> Vec<usize> {
        let mut ips = Vec::new();
        backtrace::trace(|f| {
            ips.push(f.ip() as usize);
            true
        });
        ips.push(malloc_addr() + 1);
        ips
    }

    fn all_frames<'a>(ips: &[usize], frames: &'a HashMap<usize, Arc<[Frame]>>) -> Vec<&'a Frame> {
        ips.iter().flat_map(|ip| frames[ip].iter()).collect()
    }

    /// This test's own function, named with its file and line.
    fn names_this_file(frames: &[&Frame]) -> bool {
        frames.iter().any(|f| {
            f.function.contains("offline::tests::stack_and_libc_ips")
                && f.file.as_deref().is_some_and(|p| p.ends_with("symbols/offline.rs"))
                && f.line.is_some()
        })
    }

    fn names_malloc(frames: &[&Frame]) -> bool {
        frames.iter().any(|f| &*f.function == "malloc" && f.module.is_some())
    }

    #[test]
    fn names_match_the_in_process_symbolizer() {
        let ips = stack_and_libc_ips();
        let mods = modules();
        let theirs = resolve_many(&ips);
        let (ours, warnings) = resolve_offline((NO_PID, None), &mods, &ips);
        assert!(warnings.is_empty(), "{warnings:?}");
        for ip in &ips {
            assert!(theirs.contains_key(ip));
            assert_eq!(ours.get(ip), theirs.get(ip), "at {ip:#x}");
        }
        let frames = all_frames(&ips, &ours);
        assert!(names_this_file(&frames), "{frames:#?}");
        assert!(names_malloc(&frames), "{frames:#?}");
        // Every frame names its module, and only addresses in none (the stack's end) have none.
        for f in &frames {
            assert_eq!(f.module, module_of(&mods, f.ip).map(|m| m.name.clone()), "{f:?}");
        }
    }

    #[test]
    fn a_module_of_another_build_is_shown_unnamed() {
        let ips = stack_and_libc_ips();
        let exe = exe();
        let mut mods = modules();
        let i = mods.iter().position(|m| *m.name == *exe).expect("the test binary is a module");
        let real = mods[i].build_id.clone();
        let wrong = if real == "00".repeat(20) { "11" } else { "00" }.repeat(20);
        mods[i].build_id = wrong.clone();
        let m = mods[i].clone();
        let (ours, warnings) = resolve_offline((NO_PID, None), &mods, &ips);
        let on_disk = if real.is_empty() { "none" } else { &real };
        assert_eq!(
            warnings,
            [format!(
                "ying: {exe}: not the build the process ran (build id {wrong}, on disk \
                 {on_disk}); its frames are shown as module+0xoffset"
            )]
        );
        let in_exe: Vec<usize> =
            ips.iter().copied().filter(|&ip| m.start <= ip && ip < m.end).collect();
        assert!(!in_exe.is_empty());
        for ip in in_exe {
            let expect = Frame {
                ip,
                function: unnamed(&m, ip).into(),
                file: None,
                line: None,
                inlined: false,
                module: Some(m.name.clone()),
            };
            assert_eq!(*ours[&ip], [expect]);
        }
        // The other modules are still named.
        assert!(names_malloc(&all_frames(&ips, &ours)));

        // Recorded without a build id: nothing to check against, the file is read.
        mods[i].build_id = String::new();
        let (ours, warnings) = resolve_offline((NO_PID, None), &mods, &ips);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(names_this_file(&all_frames(&ips, &ours)));
    }

    #[test]
    fn a_missing_file_is_shown_unnamed_and_other_addresses_as_addresses() {
        let gone = Module {
            name: "/nonexistent/ying-offline-test/libgone.so".into(),
            start: 0x1000_0000,
            end: 0x1001_0000,
            bias: 0x0fff_0000,
            build_id: String::new(),
        };
        let ips = [0x1000_0010, 0x1000_ff00, 0x2000_0000, 0x1000_0010];
        let (ours, warnings) = resolve_offline((NO_PID, None), std::slice::from_ref(&gone), &ips);
        assert_eq!(
            warnings,
            [format!("ying: {}: not found; its frames are shown as module+0xoffset", gone.name)]
        );
        assert_eq!(ours.len(), 3);
        let only = |ip: usize| {
            let f = &ours[&ip];
            assert_eq!(f.len(), 1);
            (f[0].function.to_string(), f[0].module.clone(), f[0].file.clone())
        };
        assert_eq!(only(0x1000_0010), ("libgone.so+0x10010".into(), Some(gone.name.clone()), None));
        assert_eq!(only(0x1000_ff00), ("libgone.so+0x1ff00".into(), Some(gone.name.clone()), None));
        assert_eq!(only(0x2000_0000), ("0x20000000".into(), None, None));
    }

    /// An address no recorded module covers is named from the process's perf map when it is
    /// still on disk (JIT code of a process that ended), and shown as an address otherwise.
    #[test]
    fn an_address_of_no_module_is_named_from_the_processs_perf_map() {
        let pid = NO_PID + 1;
        let map = crate::symbols::perf_map::path(pid);
        std::fs::write(&map, "20000000 100 LazyCompile:*holdBuffers /tmp/prog.js:3:21\n").unwrap();
        let (ours, warnings) = resolve_offline((pid, None), &[], &[0x2000_0010, 0x3000_0000]);
        std::fs::remove_file(&map).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let f = &ours[&0x2000_0010];
        assert_eq!(f.len(), 1);
        assert_eq!(&*f[0].function, "LazyCompile:*holdBuffers /tmp/prog.js:3:21");
        assert_eq!(f[0].module.as_deref(), Some(&*format!("[perf-{pid}.map]")));
        assert_eq!(&*ours[&0x3000_0000][0].function, "0x30000000");
        // Without the map, both are addresses.
        let (ours, _) = resolve_offline((pid, None), &[], &[0x2000_0010]);
        assert_eq!(&*ours[&0x2000_0010][0].function, "0x20000010");
    }

    /// A path that names a FIFO (a hostile or stale live file) is refused before it is opened:
    /// opening it would wait for a writer forever.
    #[test]
    fn a_path_that_is_no_regular_file_is_not_opened() {
        let dir = std::env::temp_dir().join(format!("ying-offline-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("libfifo.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let m = Module {
            name: fifo.to_str().unwrap().into(),
            start: 0x1000_0000,
            end: 0x1001_0000,
            bias: 0x0fff_0000,
            build_id: "00ff".into(),
        };
        let (ours, warnings) =
            resolve_offline((NO_PID, None), std::slice::from_ref(&m), &[0x1000_0010]);
        assert_eq!(
            warnings,
            [format!(
                "ying: {}: is not a regular file; its frames are shown as module+0xoffset",
                m.name
            )]
        );
        assert_eq!(&*ours[&0x1000_0010][0].function, "libfifo.so+0x10010");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A module of the other process at addresses where this process has nothing, whose file
    /// has no debug info and is no system library (a copy of libc elsewhere): named from its
    /// symbol table, which the backtrace crate (knowing only this process) could not do.
    #[test]
    fn a_module_without_debug_info_is_named_from_its_symbol_table() {
        let mods = modules();
        let libc = module_of(&mods, malloc_addr()).expect("malloc is in a module").clone();
        let dir = std::env::temp_dir().join(format!("ying-offline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("libcopy.so");
        std::fs::copy(&*libc.name, &copy).unwrap();
        let base = 0x1000_0000_0000usize;
        let other = Module {
            name: copy.display().to_string().into(),
            start: base + (libc.start - libc.bias),
            end: base + (libc.end - libc.bias),
            bias: base,
            build_id: libc.build_id.clone(),
        };
        let ip = base + (malloc_addr() - libc.bias) + 1;
        assert!(module_of(&mods, ip).is_none(), "nothing of this process is at {ip:#x}");
        let (ours, warnings) = resolve_offline((NO_PID, None), std::slice::from_ref(&other), &[ip]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(&*ours[&ip][0].function, "malloc", "{:?}", ours[&ip]);
        assert_eq!(ours[&ip][0].module, Some(other.name.clone()));
    }

    #[test]
    fn build_id_on_disk_matches_the_loaded_modules() {
        let mods = modules();
        let exe = exe();
        let libc = module_of(&mods, malloc_addr()).expect("malloc is in a module");
        assert!(libc.name.contains("libc"), "{}", libc.name);
        assert!(!libc.build_id.is_empty(), "libc has a build id");
        for path in [&*exe, &*libc.name] {
            let m = mods.iter().find(|m| *m.name == *path).unwrap();
            let file = File::open(path).unwrap();
            assert_eq!(gnu_build_id(&file).unwrap_or_default(), m.build_id, "{path}");
        }
        let not_elf = File::open("/proc/self/cmdline").unwrap();
        assert_eq!(gnu_build_id(&not_elf), None);
    }
}
