//! The code objects Ying has met: each one's names and line table copied once into the
//! profiler's heap, under an id that the stack table keeps in place of an address (see
//! [`super::encode`]).
//!
//! A code object may be freed and its memory reused by another. An entry is therefore found by
//! the code object's address and then confirmed: its name, qualified name, file name and line
//! table pointers and its first line must be the ones copied, and the bytes of its qualified name
//! and file name as they are now must equal the copies. A reused address with other strings gets
//! a new id (the old one keeps naming the stacks taken before), so a name printed is always
//! the name the code object had when the sample was taken.

use super::layout::{self, Layout};
use super::read::Reader;
use crate::engine::tables::arena::{Arena, ArenaVec};
use crate::engine::tables::{ArenaMap, Build};
use crate::sys::spin::SpinMutex;

/// Most code objects kept: a program that makes more (code compiled in a loop) gets its later
/// ones' frames named `<python>`.
const MAX_CODES: usize = 1 << 20;
/// Longest line table copied (bytes): a longer one gives its function's first line.
const MAX_TABLE: usize = 1 << 16;
/// Longest name or file name copied (bytes of the string's own encoding).
const MAX_STR: usize = 4096;

/// A string as the interpreter stores it: its characters' width (1, 2 or 4 bytes) and bytes.
struct Str {
    kind: u8,
    raw: ArenaVec<u8>,
}

impl Str {
    fn to_utf8(&self) -> String {
        let w = usize::from(self.kind.max(1));
        self.raw
            .chunks_exact(w)
            .map(|c| {
                let mut v = [0u8; 4];
                v[..w].copy_from_slice(c);
                char::from_u32(u32::from_ne_bytes(v)).unwrap_or('\u{fffd}')
            })
            .collect()
    }
}

/// The pointers that identify one code object's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    qualname: usize,
    filename: usize,
    linetable: usize,
    first_line: i32,
}

struct Code {
    key: Key,
    qualname: Str,
    filename: Str,
    table: ArenaVec<u8>,
}

struct Registry {
    by_addr: ArenaMap<usize, u32>,
    codes: ArenaVec<Code>,
}

static REGISTRY: SpinMutex<Option<Registry>> = SpinMutex::new(None);

/// The interpreter's type objects frames are checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Types {
    pub(crate) code: usize,
    pub(crate) str: usize,
}

/// The id of the code object at `code` and the line its frame is at (`instr`, the frame's
/// instruction pointer), registering the code object when it is new. None when `code` is not a
/// live code object (a frame of the interpreter's own, a code object being deallocated) or
/// the registry is full.
pub(crate) fn frame(
    rd: Reader,
    lay: &Layout,
    ty: Types,
    code: usize,
    instr: usize,
) -> Option<(u32, u32)> {
    let refcnt = rd.word(code + layout::OB_REFCNT)? as isize;
    if refcnt <= 0 || rd.word(code + layout::OB_TYPE)? != ty.code {
        return None;
    }
    let key = Key {
        qualname: rd.word(code + lay.code_qualname)?,
        filename: rd.word(code + lay.code_filename)?,
        linetable: rd.word(code + lay.code_linetable)?,
        first_line: rd.i32(code + lay.code_firstlineno)?,
    };
    let first = code + lay.code_adaptive;
    let unit = if instr > first { (instr - first) / 2 } else { 0 };
    let mut g = REGISTRY.lock();
    let reg = g.get_or_insert_with(|| Registry {
        by_addr: ArenaMap::with_hasher_in(Build::default(), Arena),
        codes: ArenaVec::new_in(Arena),
    });
    if let Some(&id) = reg.by_addr.get(&code) {
        let c = reg.codes.get(id as usize)?;
        if c.key == key
            && same_str(rd, lay, ty, key.qualname, &c.qualname)
            && same_str(rd, lay, ty, key.filename, &c.filename)
        {
            return Some((id, line_at(&c.table, key.first_line, unit)));
        }
    }
    // New, or its address reused: copy it with checked reads (once per code object).
    let safe = Reader { checked: true };
    let qualname = copy_str(safe, lay, ty, key.qualname)?;
    let filename = copy_str(safe, lay, ty, key.filename)?;
    let table = copy_bytes_object(safe, key.linetable).unwrap_or_else(|| ArenaVec::new_in(Arena));
    if reg.codes.len() >= MAX_CODES
        || reg.codes.try_reserve(1).is_err()
        || reg.by_addr.try_reserve(1).is_err()
    {
        return None;
    }
    let id = reg.codes.len() as u32;
    let line = line_at(&table, key.first_line, unit);
    reg.codes.push(Code { key, qualname, filename, table });
    reg.by_addr.insert(code, id);
    Some((id, line))
}

/// The string object at `obj`: its width, its characters' address and its length in bytes.
fn str_at(rd: Reader, lay: &Layout, ty: Types, obj: usize) -> Option<(u8, usize, usize)> {
    if rd.word(obj + layout::OB_TYPE)? != ty.str {
        return None;
    }
    let len = rd.word(obj + layout::STR_LENGTH)?;
    let state = rd.byte(obj + layout::STR_STATE)?;
    let kind = (state >> 2) & 7;
    let compact = state & (1 << 5) != 0;
    let ascii = state & (1 << 6) != 0;
    if !compact || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let bytes = len.checked_mul(usize::from(kind)).filter(|&b| b <= MAX_STR)?;
    let data = obj + if ascii { lay.ascii_size } else { lay.compact_size };
    Some((kind, data, bytes))
}

/// Whether the string at `obj` holds exactly `s`'s characters.
fn same_str(rd: Reader, lay: &Layout, ty: Types, obj: usize, s: &Str) -> bool {
    let Some((kind, data, len)) = str_at(rd, lay, ty, obj) else { return false };
    if kind != s.kind || len != s.raw.len() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(buf.len());
        if !rd.bytes(data + at, &mut buf[..n]) || buf[..n] != s.raw[at..at + n] {
            return false;
        }
        at += n;
    }
    true
}

fn copy_str(rd: Reader, lay: &Layout, ty: Types, obj: usize) -> Option<Str> {
    let (kind, data, len) = str_at(rd, lay, ty, obj)?;
    let mut raw = ArenaVec::new_in(Arena);
    raw.try_reserve(len).ok()?;
    raw.resize(len, 0);
    rd.bytes(data, &mut raw).then_some(Str { kind, raw })
}

fn copy_bytes_object(rd: Reader, obj: usize) -> Option<ArenaVec<u8>> {
    let len = rd.word(obj + layout::BYTES_SIZE)?;
    if len > MAX_TABLE {
        return None;
    }
    let mut v = ArenaVec::new_in(Arena);
    v.try_reserve(len).ok()?;
    v.resize(len, 0);
    rd.bytes(obj + layout::BYTES_DATA, &mut v).then_some(v)
}

/// The source line of code unit `unit` in a location table (the format of CPython 3.11 to
/// 3.13, `Objects/locations.md`): entries of one header byte (bit 7 set; bits 3..7 the form,
/// bits 0..3 the number of code units less one) and the form's data. The line moves by the
/// form's delta: none for "no location" (15), a signed varint for the long (14) and
/// no-column (13) forms, `form - 10` for the one-line forms (10..13, two column bytes), zero
/// for the short forms (0..10, one column byte). A unit past the table gives its last line.
pub(crate) fn line_at(table: &[u8], first_line: i32, unit: usize) -> u32 {
    let mut line = first_line;
    let mut addr = 0usize;
    let mut i = 0usize;
    let varint = |i: &mut usize| -> u32 {
        let mut v = 0u32;
        let mut shift = 0;
        while let Some(&b) = table.get(*i) {
            *i += 1;
            v |= u32::from(b & 63) << shift.min(31);
            shift += 6;
            if b & 64 == 0 {
                break;
            }
        }
        v
    };
    while let Some(&b) = table.get(i) {
        i += 1;
        let form = (b >> 3) & 15;
        let len = usize::from(b & 7) + 1;
        let delta = match form {
            15 => 0,
            14 => {
                let u = varint(&mut i);
                let d = if u & 1 != 0 { -((u >> 1) as i32) } else { (u >> 1) as i32 };
                for _ in 0..3 {
                    varint(&mut i);
                }
                d
            }
            13 => {
                let u = varint(&mut i);
                if u & 1 != 0 { -((u >> 1) as i32) } else { (u >> 1) as i32 }
            }
            10..=12 => {
                i += 2;
                i32::from(form) - 10
            }
            _ => {
                i += 1;
                0
            }
        };
        line = line.saturating_add(delta);
        if unit < addr + len {
            break;
        }
        addr += len;
    }
    line.max(0) as u32
}

/// A code object's qualified name and file name, for the report side. The strings are copied
/// within the profiler's heap under the lock and converted after it is released: a `String` on
/// the host's heap may sample, and a sample may want the lock.
pub(crate) fn describe(id: u32) -> Option<(String, String)> {
    let copy = |s: &Str| {
        let mut raw = ArenaVec::new_in(Arena);
        raw.try_reserve(s.raw.len()).ok()?;
        raw.extend_from_slice(&s.raw);
        Some(Str { kind: s.kind, raw })
    };
    let (q, f) = {
        let g = REGISTRY.lock();
        let c = g.as_ref()?.codes.get(id as usize)?;
        (copy(&c.qualname)?, copy(&c.filename)?)
    };
    Some((q.to_utf8(), f.to_utf8()))
}

/// `fork` prepare and after: the registry's lock (taken before the heap's, like a table's).
pub(crate) fn lock_for_fork() {
    REGISTRY.lock_for_fork();
}
pub(crate) fn unlock_after_fork() {
    REGISTRY.force_unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_table_forms() {
        // Short form (0): 2 units at line 10; one-line form 11: 1 unit, +1; no-column form 13
        // with delta +3 (svarint 6): 2 units; long form 14 with delta -2 (svarint 5) and three
        // varints: 1 unit; "no location" (15): 1 unit, line unchanged.
        let t = [
            0x80 | 1,
            0x00,
            0x80 | (11 << 3),
            0x01,
            0x02,
            0x80 | (13 << 3) | 1,
            6,
            0x80 | (14 << 3),
            5,
            0,
            1,
            1,
            0x80 | (15 << 3),
        ];
        let lines: Vec<u32> = (0..8).map(|u| line_at(&t, 10, u)).collect();
        assert_eq!(lines, [10, 10, 11, 14, 14, 12, 12, 12]);
    }
}
