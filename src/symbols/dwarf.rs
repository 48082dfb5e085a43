//! Report-time DWARF lookups that hold one compilation unit at a time.
//!
//! The backtrace crate (through addr2line) parses, on its first lookup in a module, every
//! unit's abbreviations, line-program header and address ranges, keeps them all, and reads the
//! whole file. For a 14 MB Rust binary that was about 9 MiB of heap and 13 MiB of resident file
//! pages while a report was symbolized: 26 MiB above the peak of a small program (measured with
//! `bench/rust-cache`), a spike that grows with the binary, not with the report.
//!
//! Here the file is mapped and only the pages the lookups read become resident. The unit of
//! each address comes from `.debug_aranges` (a small table), or, for addresses it does not
//! cover, from one pass over the units' own ranges that keeps only a range index. Addresses are
//! then handled unit by unit: one unit's abbreviations, one pass over its entries for the
//! functions that contain the addresses, the inlined calls inside those, one run of its line
//! program, and the unit is dropped before the next. The answers match addr2line's: innermost
//! frame first, the location of each inlined frame from the line table or from the call site
//! recorded in the frame inside it, files rendered from the compilation directory, the
//! include directory and the name.
//!
//! Modules whose debug sections are compressed or absent return `None` and are left to the
//! backtrace crate.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;

use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset};

type R<'a> = EndianSlice<'a, LittleEndian>;

/// `sh_flags` bit of a compressed section.
const SHF_COMPRESSED: u64 = 0x800;
/// How many `DW_AT_abstract_origin` / `DW_AT_specification` links a name lookup follows.
const NAME_LINKS: usize = 16;

/// One frame of an address: a function (possibly inlined into the next frame) and a location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DwarfFrame {
    /// The function's raw (mangled) name, when the debug info names it.
    pub name: Option<Vec<u8>>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A read-only private mapping of a whole file, unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn open(file: &File) -> Option<Self> {
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of an open file descriptor; the kernel picks
        // the address. The result is checked against MAP_FAILED before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Listed as the profiler's own, so that the resident set's breakdown does not count
        // its pages as the program's binaries.
        crate::engine::tables::arena::note_own_mapping(ptr as usize, len);
        Some(Self { ptr, len })
    }

    /// Drops the pages read so far from the process's resident set (they stay in the page
    /// cache and are read back on the next access), so that the pages of one unit do not add
    /// to those of the next.
    fn release(&self) {
        // SAFETY: MADV_DONTNEED on a read-only private file mapping that was never written only
        // discards page-table entries; later reads fault the same file bytes back in.
        unsafe {
            libc::madvise(self.ptr, self.len, libc::MADV_DONTNEED);
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is a live read-only mapping owned by `self` until drop. A
        // module file changed underneath a running program would change these bytes; gimli
        // bounds-checks every read, so that gives wrong names at worst.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
        crate::engine::tables::arena::forget_own_mapping(self.ptr as usize);
    }
}

/// Resolves `addrs` (file virtual addresses) in the ELF file at `path`. Returns `None` when the
/// file cannot be used here (unreadable, no `.debug_info`, compressed debug sections); otherwise
/// one entry per address: its frames, innermost first, or `None` when the debug info does not
/// cover it.
pub(crate) fn resolve(path: &str, addrs: &[u64]) -> Option<Vec<Option<Vec<DwarfFrame>>>> {
    let file = File::open(path).ok()?;
    let sections = crate::symbols::elf_symbols::named_sections(&file)?;
    let debug = |s: &crate::symbols::elf_symbols::NamedSection| {
        s.name.starts_with(".debug_") || s.name.starts_with(".zdebug_")
    };
    if sections
        .iter()
        .filter(|s| debug(s))
        .any(|s| s.flags & SHF_COMPRESSED != 0 || s.name.starts_with(".zdebug_"))
        || !sections.iter().any(|s| s.name == ".debug_info" && s.size > 0)
    {
        return None;
    }
    let map = Mapping::open(&file)?;
    let data = map.bytes();
    let section = |name: &str| -> &[u8] {
        sections
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| {
                let start = usize::try_from(s.offset).ok()?;
                data.get(start..start.checked_add(usize::try_from(s.size).ok()?)?)
            })
            .unwrap_or(&[])
    };
    let dwarf: gimli::Dwarf<R<'_>> =
        gimli::Dwarf::load(|id| Ok::<_, ()>(EndianSlice::new(section(id.name()), LittleEndian)))
            .ok()?;
    Some(
        Resolver {
            dwarf: &dwarf,
            units: None,
            release: &|| map.release(),
            starts: Default::default(),
        }
        .resolve_all(addrs),
    )
}

/// A unit's start in `.debug_info` and its address ranges.
type UnitIndex = Vec<(u64, u64, gimli::DebugInfoOffset)>;

struct Resolver<'d, 'a> {
    dwarf: &'d gimli::Dwarf<R<'a>>,
    /// Every unit's ranges, built on first need (an address `.debug_aranges` misses).
    units: Option<UnitIndex>,
    /// Drops the file pages read so far from the resident set.
    release: &'d dyn Fn(),
    /// Every unit's (start, end) in `.debug_info`, for references into other units.
    starts: std::cell::OnceCell<Vec<(usize, usize)>>,
}

impl<'a> Resolver<'_, 'a> {
    fn resolve_all(&mut self, addrs: &[u64]) -> Vec<Option<Vec<DwarfFrame>>> {
        let mut out: Vec<Option<Vec<DwarfFrame>>> = vec![None; addrs.len()];
        let aranges = self.aranges();
        let mut by_unit: HashMap<gimli::DebugInfoOffset, Vec<usize>> = HashMap::new();
        let mut missed = Vec::new();
        for (i, &a) in addrs.iter().enumerate() {
            match find_unit(&aranges, a) {
                Some(u) => by_unit.entry(u).or_default().push(i),
                None => missed.push(i),
            }
        }
        drop(aranges);
        self.resolve_units(addrs, by_unit, &mut out);
        // Addresses not covered, or covered by a unit that did not know them: the units' own
        // ranges decide.
        missed.extend((0..addrs.len()).filter(|&i| out[i].is_none()));
        missed.sort_unstable();
        missed.dedup();
        if !missed.is_empty() {
            let index = self.units.get_or_insert_with(|| unit_index(self.dwarf));
            (self.release)();
            let mut by_unit: HashMap<gimli::DebugInfoOffset, Vec<usize>> = HashMap::new();
            for i in missed {
                if let Some(u) = find_unit(index, addrs[i]) {
                    by_unit.entry(u).or_default().push(i);
                }
            }
            self.resolve_units(addrs, by_unit, &mut out);
        }
        out
    }

    /// `.debug_aranges` as (begin, end, unit) sorted by begin.
    fn aranges(&self) -> UnitIndex {
        let mut v = Vec::new();
        let mut headers = self.dwarf.debug_aranges.headers();
        while let Ok(Some(h)) = headers.next() {
            let unit = h.debug_info_offset();
            let mut entries = h.entries();
            loop {
                match entries.next() {
                    Ok(Some(e)) => {
                        let r = e.range();
                        if r.end > r.begin {
                            v.push((r.begin, r.end, unit));
                        }
                    }
                    Ok(None) => break,
                    Err(_) => break,
                }
            }
        }
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    fn resolve_units(
        &self,
        addrs: &[u64],
        by_unit: HashMap<gimli::DebugInfoOffset, Vec<usize>>,
        out: &mut [Option<Vec<DwarfFrame>>],
    ) {
        let mut units: Vec<_> = by_unit.into_iter().collect();
        units.sort_unstable_by_key(|u| u.0);
        for (offset, mut idx) in units {
            idx.sort_unstable_by_key(|&i| addrs[i]);
            let Ok(header) = self.dwarf.debug_info.header_from_offset(offset) else { continue };
            let Ok(unit) = self.dwarf.unit(header) else { continue };
            let targets: Vec<u64> = idx.iter().map(|&i| addrs[i]).collect();
            let frames = UnitLookup { dwarf: self.dwarf, unit: &unit, starts: &self.starts }
                .resolve(&targets);
            for (i, f) in idx.into_iter().zip(frames) {
                if f.is_some() {
                    out[i] = f;
                }
            }
            (self.release)();
        }
    }
}

/// The unit whose range holds `a`, in an index sorted by range start.
fn find_unit(index: &UnitIndex, a: u64) -> Option<gimli::DebugInfoOffset> {
    let end = index.partition_point(|e| e.0 <= a);
    // Ranges rarely overlap; look back a little for one that holds `a`.
    index[..end].iter().rev().take(8).find(|e| a < e.1).map(|e| e.2)
}

/// Every compile unit's address ranges, sorted by start. Each unit is parsed and dropped.
fn unit_index(dwarf: &gimli::Dwarf<R<'_>>) -> UnitIndex {
    let mut v = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(h)) = headers.next() {
        let Some(offset) = h.offset().as_debug_info_offset() else { continue };
        if !matches!(h.type_(), gimli::UnitType::Compilation | gimli::UnitType::Skeleton(_)) {
            continue;
        }
        let Ok(unit) = dwarf.unit(h) else { continue };
        let Ok(mut ranges) = dwarf.unit_ranges(&unit) else { continue };
        while let Ok(Some(r)) = ranges.next() {
            if r.end > r.begin {
                v.push((r.begin, r.end, offset));
            }
        }
    }
    v.sort_unstable_by_key(|e| e.0);
    v
}

/// Lookups inside one parsed unit.
struct UnitLookup<'u, 'a> {
    dwarf: &'u gimli::Dwarf<R<'a>>,
    unit: &'u gimli::Unit<R<'a>>,
    starts: &'u std::cell::OnceCell<Vec<(usize, usize)>>,
}

/// An inlined call containing the address: the inlined function and where it was called from.
struct Inlined {
    offset: UnitOffset,
    call_file: Option<u64>,
    call_line: u32,
}

impl<'a> UnitLookup<'_, 'a> {
    /// Frames for `targets` (sorted), `None` for an address no function or line of this unit
    /// covers.
    fn resolve(&self, targets: &[u64]) -> Vec<Option<Vec<DwarfFrame>>> {
        let functions = self.functions(targets);
        let lines = self.lines(targets);
        let mut files: HashMap<u64, Option<String>> = HashMap::new();
        let mut file = |index: u64| -> Option<String> {
            files.entry(index).or_insert_with(|| self.file_name(index)).clone()
        };
        targets
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let (mut file_line, function) = (lines[i].map(|(f, l)| (Some(f), l)), functions[i]);
                let Some(function) = function else {
                    // Only a location: the caller names it from the symbol table.
                    let (f, l) = file_line?;
                    return Some(vec![DwarfFrame {
                        name: None,
                        file: f.and_then(&mut file),
                        line: l,
                    }]);
                };
                let chain = self.inlined_chain(function, a);
                let mut frames = Vec::with_capacity(chain.len() + 1);
                // Innermost first: each inlined function sits at the current location, and its
                // call site becomes the location of the function it was inlined into.
                for inl in chain.iter().rev() {
                    let (f, l) = file_line.unwrap_or((None, None));
                    frames.push(DwarfFrame {
                        name: self.name(self.unit, inl.offset, NAME_LINKS),
                        file: f.and_then(&mut file),
                        line: l,
                    });
                    file_line =
                        Some((inl.call_file, (inl.call_line != 0).then_some(inl.call_line)));
                }
                let (f, l) = file_line.unwrap_or((None, None));
                frames.push(DwarfFrame {
                    name: self.name(self.unit, function, NAME_LINKS),
                    file: f.and_then(&mut file),
                    line: l,
                });
                Some(frames)
            })
            .collect()
    }

    /// For each target, the deepest subprogram of this unit whose ranges hold it.
    fn functions(&self, targets: &[u64]) -> Vec<Option<UnitOffset>> {
        let mut found: Vec<Option<(isize, UnitOffset)>> = vec![None; targets.len()];
        let mut entries = self.unit.entries();
        let mut depth = 0isize;
        while let Ok(Some((delta, entry))) = entries.next_dfs() {
            depth += delta;
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Ok(mut ranges) = self.dwarf.die_ranges(self.unit, entry) else { continue };
            while let Ok(Some(r)) = ranges.next() {
                let lo = targets.partition_point(|&t| t < r.begin);
                let hi = targets.partition_point(|&t| t < r.end);
                for slot in &mut found[lo..hi] {
                    if slot.is_none_or(|(d, _)| depth >= d) {
                        *slot = Some((depth, entry.offset()));
                    }
                }
            }
        }
        found.into_iter().map(|f| f.map(|(_, o)| o)).collect()
    }

    /// The inlined calls inside `function` that hold `a`, outermost first.
    fn inlined_chain(&self, function: UnitOffset, a: u64) -> Vec<Inlined> {
        let mut chain = Vec::new();
        let Ok(mut tree) = self.unit.entries_tree(Some(function)) else { return chain };
        let Ok(root) = tree.root() else { return chain };
        self.descend(root, a, &mut chain);
        chain
    }

    fn descend(
        &self,
        node: gimli::EntriesTreeNode<'_, '_, '_, R<'a>>,
        a: u64,
        chain: &mut Vec<Inlined>,
    ) {
        let mut children = node.children();
        while let Ok(Some(child)) = children.next() {
            let entry = child.entry();
            match entry.tag() {
                // A nested function is a frame of its own, not part of this one.
                gimli::DW_TAG_subprogram => {}
                gimli::DW_TAG_inlined_subroutine => {
                    if self.holds(entry, a) {
                        chain.push(Inlined {
                            offset: entry.offset(),
                            call_file: self.call_file(entry),
                            call_line: entry
                                .attr_value(gimli::DW_AT_call_line)
                                .ok()
                                .flatten()
                                .and_then(|v| v.udata_value())
                                .and_then(|v| u32::try_from(v).ok())
                                .unwrap_or(0),
                        });
                        return self.descend(child, a, chain);
                    }
                }
                // Lexical blocks and the like: inlined calls may sit inside.
                _ => {
                    if entry.has_children() {
                        self.descend(child, a, chain);
                    }
                }
            }
        }
    }

    fn holds(&self, entry: &gimli::DebuggingInformationEntry<'_, '_, R<'a>>, a: u64) -> bool {
        let Ok(mut ranges) = self.dwarf.die_ranges(self.unit, entry) else { return false };
        while let Ok(Some(r)) = ranges.next() {
            if r.begin <= a && a < r.end {
                return true;
            }
        }
        false
    }

    /// `DW_AT_call_file`: index 0 means "none" before DWARF 5 and is a real file from 5 on.
    fn call_file(&self, entry: &gimli::DebuggingInformationEntry<'_, '_, R<'a>>) -> Option<u64> {
        match entry.attr_value(gimli::DW_AT_call_file).ok().flatten()? {
            AttributeValue::FileIndex(f) if f > 0 || self.unit.header.version() >= 5 => Some(f),
            _ => None,
        }
    }

    /// The linkage name of the entry at `offset` of `unit`, else its name, following abstract
    /// origins and specifications (possibly into other units).
    fn name(&self, unit: &gimli::Unit<R<'a>>, offset: UnitOffset, links: usize) -> Option<Vec<u8>> {
        let entry = unit.entry(offset).ok()?;
        let mut name = None;
        let mut next = None;
        let mut attrs = entry.attrs();
        while let Ok(Some(attr)) = attrs.next() {
            match attr.name() {
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    if let Ok(s) = self.dwarf.attr_string(unit, attr.value()) {
                        return Some(s.slice().to_vec());
                    }
                }
                gimli::DW_AT_name => {
                    name =
                        self.dwarf.attr_string(unit, attr.value()).ok().map(|s| s.slice().to_vec());
                }
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                    next = Some(attr.value())
                }
                _ => {}
            }
        }
        if name.is_some() || links == 0 {
            return name;
        }
        match next? {
            AttributeValue::UnitRef(o) => self.name(unit, o, links - 1),
            AttributeValue::DebugInfoRef(o) => {
                let starts = self.starts.get_or_init(|| unit_starts(self.dwarf));
                let i = starts.partition_point(|s| s.0 <= o.0).checked_sub(1)?;
                let (start, end) = *starts.get(i)?;
                if o.0 >= end {
                    return None;
                }
                let header =
                    self.dwarf.debug_info.header_from_offset(gimli::DebugInfoOffset(start)).ok()?;
                let other = self.dwarf.unit(header).ok()?;
                let o = o.to_unit_offset(&other.header)?;
                self.name(&other, o, links - 1)
            }
            _ => None,
        }
    }

    /// For each target, the file index and line of the line-table row that covers it.
    fn lines(&self, targets: &[u64]) -> Vec<Option<(u64, Option<u32>)>> {
        let mut out = vec![None; targets.len()];
        let Some(program) = self.unit.line_program.clone() else { return out };
        let mut rows = program.rows();
        let mut prev: Option<(u64, u64, Option<u32>)> = None;
        while let Ok(Some((_, row))) = rows.next_row() {
            let address = row.address();
            if let Some((start, file, line)) = prev
                && address > start
            {
                let lo = targets.partition_point(|&t| t < start);
                let hi = targets.partition_point(|&t| t < address);
                for slot in &mut out[lo..hi] {
                    *slot = Some((file, line));
                }
            }
            prev = if row.end_sequence() {
                None
            } else {
                let line = row.line().and_then(|l| u32::try_from(l.get()).ok());
                Some((address, row.file_index(), line))
            };
        }
        out
    }

    /// The path of file `index` of this unit's line table: the compilation directory, then
    /// the file's directory unless it is entry 0 (the compilation directory itself), then the
    /// name, each absolute part replacing what came before.
    fn file_name(&self, index: u64) -> Option<String> {
        let header = self.unit.line_program.as_ref()?.header();
        let file = header.file(index)?;
        let string = |v| -> Option<String> {
            let s = self.dwarf.attr_string(self.unit, v).ok()?;
            Some(String::from_utf8_lossy(s.slice()).into_owned())
        };
        let mut path = self
            .unit
            .comp_dir
            .map(|d| String::from_utf8_lossy(d.slice()).into_owned())
            .unwrap_or_default();
        if file.directory_index() != 0
            && let Some(dir) = file.directory(header)
        {
            push_path(&mut path, &string(dir)?);
        }
        push_path(&mut path, &string(file.path_name())?);
        Some(path)
    }
}

/// Every unit's (start, end) offsets in `.debug_info`, in order (headers only).
fn unit_starts(dwarf: &gimli::Dwarf<R<'_>>) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(h)) = headers.next() {
        if let Some(start) = h.offset().as_debug_info_offset() {
            v.push((start.0, start.0 + h.length_including_self()));
        }
    }
    v
}

/// Appends `part` to `path` with a `/`, or replaces `path` when `part` is absolute.
fn push_path(path: &mut String, part: &str) {
    if part.starts_with('/') {
        *path = part.to_string();
    } else {
        if !path.is_empty() && !path.ends_with('/') {
            path.push('/');
        }
        path.push_str(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_path_joins_and_absolute_parts_replace() {
        let mut p = String::from("/build");
        push_path(&mut p, "src");
        push_path(&mut p, "main.rs");
        assert_eq!(p, "/build/src/main.rs");
        push_path(&mut p, "/rustc/abc/library/core/src/ptr/mod.rs");
        assert_eq!(p, "/rustc/abc/library/core/src/ptr/mod.rs");
        let mut e = String::new();
        push_path(&mut e, "a.c");
        assert_eq!(e, "a.c");
    }

    #[test]
    fn unusable_files_are_left_to_the_caller() {
        assert!(resolve("/nonexistent/ying-test", &[0x1000]).is_none());
        // Not ELF.
        let p = std::env::temp_dir().join(format!("ying-dwarf-{}", std::process::id()));
        std::fs::write(&p, b"not an ELF file at all").unwrap();
        assert!(resolve(p.to_str().unwrap(), &[0x1000]).is_none());
        std::fs::remove_file(&p).unwrap();
    }
}

#[cfg(test)]
mod c_tests {
    use super::*;
    use std::process::Command;

    /// Builds `sources` (name, text) with gcc and `flags`, then checks every address of the
    /// program's `.text` against binutils' addr2line: the same inlined frames, names, files
    /// and lines. Returns (addresses compared, inlined frames among them, frames whose
    /// location is in `frames_in`).
    fn matches_binutils(
        tag: &str,
        sources: &[(&str, &str)],
        flags: &[&str],
        frames_in: &str,
    ) -> (usize, usize, usize) {
        let dir = std::env::temp_dir().join(format!("ying-dwarf-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("prog");
        let mut cc = Command::new("gcc");
        cc.args(flags).arg("-o").arg(&exe);
        for (name, text) in sources {
            std::fs::write(dir.join(name), text).unwrap();
            cc.arg(dir.join(name));
        }
        assert!(cc.status().unwrap().success(), "gcc {flags:?}");
        let path = exe.to_str().unwrap();
        let file = File::open(path).unwrap();
        let text = crate::symbols::elf_symbols::named_sections(&file)
            .unwrap()
            .into_iter()
            .find(|s| s.name == ".text")
            .unwrap();
        // .text's file offset is its address in this non-relocated layout (gcc's default PIE).
        let addrs: Vec<u64> = (text.offset..text.offset + text.size).collect();
        let ours = resolve(path, &addrs).expect("uncompressed DWARF");
        let out = Command::new("addr2line")
            .args(["-a", "-f", "-i", "-e", path])
            .args(addrs.iter().map(|a| format!("{a:#x}")))
            .output()
            .expect("addr2line (binutils) is installed with gcc");
        let text_out = String::from_utf8(out.stdout).unwrap();
        let mut theirs: Vec<Vec<(String, String)>> = Vec::new();
        let mut lines = text_out.lines().peekable();
        while let Some(l) = lines.next() {
            assert!(l.starts_with("0x"), "{l}");
            let mut frames = Vec::new();
            while lines.peek().is_some_and(|l| !l.starts_with("0x")) {
                let f = lines.next().unwrap().to_string();
                let loc = lines.next().unwrap();
                let loc = loc.split(" (discriminator").next().unwrap().to_string();
                frames.push((f, loc));
            }
            theirs.push(frames);
        }
        assert_eq!(theirs.len(), addrs.len());
        let (mut compared, mut inlined, mut located) = (0, 0, 0);
        for ((a, o), t) in addrs.iter().zip(&ours).zip(&theirs) {
            // Addresses of C runtime code (no line info) are named from the symbol table.
            if t.iter().all(|(_, loc)| loc.starts_with("??") || loc.ends_with(":?")) {
                continue;
            }
            let o = o.as_ref().unwrap_or_else(|| panic!("{a:#x}: none, binutils {t:?}"));
            let o: Vec<(String, String)> = o
                .iter()
                .map(|f| {
                    let name = f
                        .name
                        .as_deref()
                        .map_or("??".into(), |n| String::from_utf8_lossy(n).into_owned());
                    let line = f.line.map_or("?".into(), |l| l.to_string());
                    (name, format!("{}:{line}", f.file.as_deref().unwrap_or("??")))
                })
                .collect();
            // binutils 2.40 names the line-table file of gcc's link-time unit after the unit
            // ("<artificial>", file entry 0) where the DWARF 5 row says entry 1, the real
            // source file; objdump --dwarf=decodedline agrees with us. Compare name and line.
            let same = o.len() == t.len()
                && o.iter().zip(t).all(|((on, ol), (tn, tl))| {
                    on == tn
                        && (ol == tl
                            || tl.contains("<artificial>")
                                && ol.ends_with(&format!(
                                    ":{}",
                                    tl.rsplit(':').next().unwrap_or("?")
                                ))
                                && ol.contains(".c:"))
                });
            assert!(same, "{tag} at {a:#x}: ours {o:?}, binutils {t:?}");
            compared += 1;
            inlined += o.len() - 1;
            located += o.iter().filter(|(_, loc)| loc.contains(frames_in)).count();
        }
        std::fs::remove_dir_all(&dir).unwrap();
        (compared, inlined, located)
    }

    const INL_C: &str = "#include <stdio.h>\n\
         static inline int leaf(int x) { return x * 3 + (x >> 2); }\n\
         static inline int mid(int x) {\n  int s = 0;\n  for (int i = 0; i < x; i++)\n    s += leaf(i);\n  return s;\n}\n\
         __attribute__((noinline)) int outer(int x) { return mid(x) + mid(x + 1); }\n\
         int main(int argc, char **argv) {\n  (void)argv;\n  printf(\"%d\\n\", outer(argc + 5));\n  return 0;\n}\n";

    /// DWARF 5 from gcc (the shim's usual customer).
    #[test]
    fn gcc_dwarf5_matches_binutils_addr2line() {
        let (compared, inlined, _) =
            matches_binutils("dwarf5", &[("inl.c", INL_C)], &["-O2", "-g"], "inl.c");
        assert!(compared > 50 && inlined > 20, "compared {compared}, inlined frames {inlined}");
    }

    /// DWARF 4, where call-site file index 0 means "no file" rather than the first entry.
    #[test]
    fn gcc_dwarf4_matches_binutils_addr2line() {
        let (compared, inlined, _) =
            matches_binutils("dwarf4", &[("inl.c", INL_C)], &["-O2", "-gdwarf-4"], "inl.c");
        assert!(compared > 50 && inlined > 20, "compared {compared}, inlined frames {inlined}");
    }

    /// Link-time optimisation inlines a function of one file into another; gcc then describes
    /// the inlined copy in the link-time unit and names it through a reference into the unit of
    /// the file that defined it (`DW_FORM_ref_addr`), the cross-unit path of `name`.
    #[test]
    fn lto_cross_unit_names_match_binutils_addr2line() {
        let lib = "int scale(int x);\n\
                   int scale(int x) {\n  int s = 0;\n  for (int i = 0; i < x; i++)\n    s += i * 7 - (i >> 1);\n  return s;\n}\n";
        let main = "#include <stdio.h>\n\
                    int scale(int x);\n\
                    __attribute__((noinline)) int twice(int x) { return scale(x) + scale(x + 3); }\n\
                    int main(int argc, char **argv) {\n  (void)argv;\n  printf(\"%d\\n\", twice(argc + 9));\n  return 0;\n}\n";
        let (compared, inlined, in_lib) = matches_binutils(
            "lto",
            &[("main.c", main), ("lib.c", lib)],
            &["-O2", "-g", "-flto"],
            "lib.c",
        );
        assert!(compared > 20, "compared {compared}");
        assert!(
            inlined > 0 && in_lib > 0,
            "scale() from lib.c inlined into twice(): {inlined}, {in_lib}"
        );
    }
}
