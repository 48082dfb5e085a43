//! Function names for system libraries, from their ELF symbol tables.
//!
//! System libraries are named from their symbol tables rather than their (detached, compressed)
//! debug info; see `symbolize`. `dladdr` would do that one address at a time by scanning every
//! exported symbol of the object, which is slow for objects that export a lot: gcc's `cc1`
//! exports 28,900 symbols, and naming the few thousand addresses of its exit report that way
//! took 0.25 s, 7 % of the compile (measured). Loading a whole symbol table instead (28,900
//! names) cost 5 MiB of peak memory in the same report. So all the addresses a report needs in
//! one object are named in a single pass over its symbol tables (`.symtab` when present, and
//! `.dynsym`), read from the file in 64 KiB chunks: memory in proportion to the addresses, not
//! to the symbols, and only the winning names are read.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Symbol-table entries read per chunk (24 bytes each: 64 KiB).
const CHUNK_SYMBOLS: usize = 2730;
/// Longest name kept (longer ones are cut; C++ names can be long but not this long).
const MAX_NAME: usize = 4096;

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;

/// A section header's fields this module needs.
#[derive(Debug, Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

/// The best symbol so far for one address: its start and where its name is.
#[derive(Debug, Clone, Copy)]
struct Best {
    start: u64,
    strtab: usize,
    name_offset: u32,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The section headers of a 64-bit little-endian ELF file.
fn sections(file: &File) -> Option<Vec<Section>> {
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0).ok()?;
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let shoff = u64_at(&eh, 0x28)?;
    let shentsize = u64::from(u16_at(&eh, 0x3A)?);
    let mut shnum = u64::from(u16_at(&eh, 0x3C)?);
    if shentsize < 64 || shoff == 0 {
        return None;
    }
    let read = |i: u64| -> Option<Section> {
        let mut sh = [0u8; 64];
        file.read_exact_at(&mut sh, shoff.checked_add(i.checked_mul(shentsize)?)?).ok()?;
        Some(Section {
            name: u32_at(&sh, 0)?,
            kind: u32_at(&sh, 4)?,
            flags: u64_at(&sh, 8)?,
            offset: u64_at(&sh, 0x18)?,
            size: u64_at(&sh, 0x20)?,
            link: u32_at(&sh, 0x28)?,
            entsize: u64_at(&sh, 0x38)?,
        })
    };
    if shnum == 0 {
        // Extended numbering: the count is in section 0's size.
        shnum = read(0)?.size;
    }
    (0..shnum.min(1 << 16)).map(read).collect()
}

/// A section's name and where its bytes are in the file.
#[derive(Debug, Clone)]
pub(crate) struct NamedSection {
    pub name: String,
    pub offset: u64,
    pub size: u64,
    /// `sh_flags` (`SHF_COMPRESSED` = 0x800 marks a compressed section).
    pub flags: u64,
}

/// The named sections of a 64-bit little-endian ELF file (`SHT_NOBITS` ones have no bytes in
/// the file and are left out).
pub(crate) fn named_sections(file: &File) -> Option<Vec<NamedSection>> {
    const SHT_NOBITS: u32 = 8;
    let secs = sections(file)?;
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0).ok()?;
    let mut shstrndx = u64::from(u16_at(&eh, 0x3E)?);
    if shstrndx == 0xFFFF {
        // Extended numbering: the index is in section 0's link.
        shstrndx = u64::from(secs.first()?.link);
    }
    let names = secs.get(usize::try_from(shstrndx).ok()?)?;
    Some(
        secs.iter()
            .filter(|s| s.kind != SHT_NOBITS)
            .filter_map(|s| {
                Some(NamedSection {
                    name: read_name(file, names, s.name)?,
                    offset: s.offset,
                    size: s.size,
                    flags: s.flags,
                })
            })
            .collect(),
    )
}

/// `p_type` of a program header that holds notes.
const PT_NOTE: u32 = 4;
/// Note type of the GNU build id (name "GNU").
const NT_GNU_BUILD_ID: u32 = 3;
/// Most note bytes read from one segment or section (build-id notes are 36 bytes or so).
const MAX_NOTES: u64 = 1 << 16;

/// The GNU build id of the 64-bit little-endian ELF file `file`, in lowercase hex as
/// `findshlibs` formats a loaded module's id (`lib.id().to_string()`, what
/// [`crate::symbols::symbolize::modules`] records), or `None` when the file has none. Read as
/// the loader sees it, from the `PT_NOTE` segments, the way `findshlibs` reads it in memory; a
/// file without program headers is searched for its `.note.gnu.build-id` section instead.
pub(crate) fn gnu_build_id(file: &File) -> Option<String> {
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0).ok()?;
    if eh[..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let phoff = u64_at(&eh, 0x20)?;
    let phentsize = u64::from(u16_at(&eh, 0x36)?);
    let phnum = u64::from(u16_at(&eh, 0x38)?);
    // Where notes are: (file offset, size, alignment).
    let mut areas: Vec<(u64, u64, u64)> = Vec::new();
    if phoff != 0 && phentsize >= 56 {
        for i in 0..phnum {
            let mut ph = [0u8; 56];
            let Some(at) = i.checked_mul(phentsize).and_then(|o| o.checked_add(phoff)) else {
                break;
            };
            if file.read_exact_at(&mut ph, at).is_err() {
                break;
            }
            if u32_at(&ph, 0) == Some(PT_NOTE) {
                areas.push((u64_at(&ph, 8)?, u64_at(&ph, 0x20)?, u64_at(&ph, 0x30)?));
            }
        }
    }
    if areas.is_empty() {
        areas.extend(
            named_sections(file)?
                .iter()
                .filter(|s| s.name == ".note.gnu.build-id")
                .map(|s| (s.offset, s.size, 4)),
        );
    }
    for (offset, size, align) in areas {
        let mut notes = vec![0u8; usize::try_from(size.min(MAX_NOTES)).ok()?];
        if file.read_exact_at(&mut notes, offset).is_err() {
            continue;
        }
        if let Some(id) = build_id_note(&notes, align) {
            return Some(id.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    None
}

/// The descriptor of the first `NT_GNU_BUILD_ID` note named "GNU" in the notes `notes`, laid
/// out as `readelf` (and `findshlibs`) read them: a 12-byte header (name size, descriptor
/// size, type), the name, then the descriptor and the next header each at a multiple of the
/// alignment (4, or 8 when the segment says so).
fn build_id_note(notes: &[u8], align: u64) -> Option<&[u8]> {
    let align = usize::try_from(align.max(4)).ok()?;
    if align != 4 && align != 8 {
        return None;
    }
    let up = |n: usize| n.checked_add(align - 1).map(|n| n & !(align - 1));
    let mut at = 0usize;
    while at.checked_add(12)? <= notes.len() {
        let namesz = usize::try_from(u32_at(notes, at)?).ok()?;
        let descsz = usize::try_from(u32_at(notes, at + 4)?).ok()?;
        let kind = u32_at(notes, at + 8)?;
        let name_at = at + 12;
        let name = notes.get(name_at..name_at.checked_add(namesz)?)?;
        let desc_at = up(name_at + namesz)?;
        let end = desc_at.checked_add(descsz)?;
        let desc = notes.get(desc_at..end)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        at = up(end)?;
    }
    None
}

/// Reads the NUL-terminated name at `offset` of string table `strtab`.
fn read_name(file: &File, strtab: &Section, offset: u32) -> Option<String> {
    let mut at = u64::from(offset);
    if at >= strtab.size {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while out.len() < MAX_NAME {
        let want = (strtab.size - at).min(buf.len() as u64) as usize;
        let chunk = buf.get_mut(..want)?;
        file.read_exact_at(chunk, strtab.offset + at).ok()?;
        match chunk.iter().position(|&b| b == 0) {
            Some(end) => {
                out.extend_from_slice(chunk.get(..end)?);
                break;
            }
            None => out.extend_from_slice(chunk),
        }
        at += want as u64;
        if at >= strtab.size {
            break;
        }
    }
    String::from_utf8(out).ok()
}

/// Of two symbols at the same address (`malloc` and `__libc_malloc`, `free` and `cfree`),
/// whether `a` is the better name: fewer leading underscores, then shorter.
fn better(a: &str, b: &str) -> bool {
    let us = |s: &str| s.bytes().take_while(|&c| c == b'_').count();
    (us(a), a.len()) < (us(b), b.len())
}

/// Names the functions containing each of `addrs` (file virtual addresses, sorted ascending)
/// in the ELF file at `path`. An address no function symbol covers, and every address of an
/// unreadable or non-ELF file, gets `None`.
pub(crate) fn name_functions(path: &str, addrs: &[u64]) -> Vec<Option<String>> {
    let mut names = vec![None; addrs.len()];
    let Ok(file) = File::open(path) else { return names };
    let Some(secs) = sections(&file) else { return names };
    let mut best: Vec<Option<Best>> = vec![None; addrs.len()];
    let mut tie_names: Vec<(usize, Best)> = Vec::new();
    let mut chunk = vec![0u8; CHUNK_SYMBOLS * 24];
    for sec in secs.iter().filter(|s| s.kind == SHT_SYMTAB || s.kind == SHT_DYNSYM) {
        if sec.entsize != 24 || secs.get(sec.link as usize).is_none() {
            continue;
        }
        let count = sec.size / 24;
        let mut first = 0u64;
        while first < count {
            let n = (count - first).min(CHUNK_SYMBOLS as u64) as usize;
            let Some(buf) = chunk.get_mut(..n * 24) else { break };
            if file.read_exact_at(buf, sec.offset + first * 24).is_err() {
                break;
            }
            for sym in buf.chunks_exact(24) {
                let kind = sym[4] & 0xf;
                let shndx = u16_at(sym, 6).unwrap_or(0);
                let (Some(name), Some(start), Some(size)) =
                    (u32_at(sym, 0), u64_at(sym, 8), u64_at(sym, 16))
                else {
                    continue;
                };
                if !(kind == STT_FUNC || kind == STT_GNU_IFUNC) || shndx == 0 || start == 0 {
                    continue;
                }
                let end = start.saturating_add(size.max(1));
                let from = addrs.partition_point(|&a| a < start);
                for (i, _) in addrs.iter().enumerate().skip(from).take_while(|(_, a)| **a < end) {
                    let cand = Best { start, strtab: sec.link as usize, name_offset: name };
                    match best[i] {
                        None => best[i] = Some(cand),
                        Some(b) if start > b.start => best[i] = Some(cand),
                        Some(b) if start == b.start && name != b.name_offset => {
                            tie_names.push((i, cand))
                        }
                        Some(_) => {}
                    }
                }
            }
            first += n as u64;
        }
    }
    let name_of = |b: &Best| secs.get(b.strtab).and_then(|t| read_name(&file, t, b.name_offset));
    for (i, b) in best.iter().enumerate() {
        names[i] = b.as_ref().and_then(name_of);
    }
    // Aliases: keep the public-looking name.
    for (i, cand) in tie_names {
        let Some(b) = best[i] else { continue };
        if cand.start != b.start {
            continue; // A later, closer symbol won.
        }
        if let (Some(new), Some(old)) = (name_of(&cand), names[i].as_deref())
            && better(&new, old)
        {
            names[i] = Some(new);
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_libc_functions_like_the_loader_does() {
        // SAFETY: dladdr only reads the loader's tables; `info` is a valid out-parameter.
        let (path, base) = unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let f = libc::malloc as *const libc::c_void;
            assert_ne!(libc::dladdr(f, &mut info), 0);
            let path = std::ffi::CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned();
            (path, info.dli_fbase as usize)
        };
        // libc is a shared object: file address = runtime address - load base.
        let file = |f: *const ()| (f as usize - base) as u64 + 1;
        let mut addrs = vec![
            file(libc::malloc as *const ()),
            file(libc::free as *const ()),
            file(libc::fopen as *const ()),
            1, // below every function
        ];
        addrs.sort_unstable();
        let names = name_functions(&path, &addrs);
        let name_at = |a: u64| names[addrs.iter().position(|&x| x == a).unwrap()].as_deref();
        assert_eq!(name_at(file(libc::malloc as *const ())), Some("malloc"));
        assert_eq!(name_at(file(libc::free as *const ())), Some("free"));
        assert_eq!(name_at(file(libc::fopen as *const ())), Some("fopen"));
        assert_eq!(name_at(1), None);
        assert!(name_functions("/nonexistent/lib.so", &addrs).iter().all(Option::is_none));
    }

    /// Notes are walked with the segment's alignment: a build id after another note is found
    /// at 4- and 8-byte alignment, and a note of another type or name is not taken for it.
    #[test]
    fn build_id_note_is_found_after_other_notes() {
        let note = |name: &[u8], kind: u32, desc: &[u8], align: usize| {
            let pad = |v: &mut Vec<u8>| v.resize(v.len().next_multiple_of(align), 0);
            let mut v = Vec::new();
            v.extend_from_slice(&(name.len() as u32).to_le_bytes());
            v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            v.extend_from_slice(&kind.to_le_bytes());
            v.extend_from_slice(name);
            pad(&mut v);
            v.extend_from_slice(desc);
            pad(&mut v);
            v
        };
        for align in [4usize, 8] {
            let mut notes = note(b"GNU\0", 1, &[9; 16], align); // NT_GNU_ABI_TAG
            notes.extend(note(b"stapsdt\0", NT_GNU_BUILD_ID, &[7; 5], align));
            notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab, 0x01, 0xff], align));
            assert_eq!(build_id_note(&notes, align as u64), Some(&[0xab, 0x01, 0xff][..]));
            let others = note(b"GNU\0", 1, &[9; 16], align);
            assert_eq!(build_id_note(&others, align as u64), None);
        }
    }
}
