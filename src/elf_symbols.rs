//! Function names for system libraries, from their ELF symbol tables.
//!
//! System libraries are named from their symbol tables rather than their (detached, compressed)
//! debug info; see `symbolize`. `dladdr` would do that one address at a time by scanning every
//! exported symbol of the object, which is slow for objects that export a lot: gcc's `cc1`
//! exports 28,900 symbols, and naming the few thousand addresses of its exit report that way
//! took 0.25 s, 7 % of the compile (measured). Here each object's function symbols (`.symtab`
//! when present, and `.dynsym`) are read once per report pass, through a read cache that loads
//! only the ranges it needs (not the whole file), sorted, and searched by address.

use std::collections::HashMap;

use object::{Object, ObjectSymbol, SymbolKind};

/// One object's function symbols, sorted by start address.
#[derive(Debug, Default)]
pub(crate) struct ElfSymbols {
    /// (start, end, name range in `names`), file virtual addresses.
    funcs: Vec<(u64, u64, u32, u32)>,
    names: String,
}

impl ElfSymbols {
    /// Reads the function symbols of the ELF file at `path`; an unreadable or non-ELF file
    /// gives an empty table.
    pub(crate) fn load(path: &str) -> Self {
        let mut out = Self::default();
        let Ok(file) = std::fs::File::open(path) else { return out };
        let cache = object::ReadCache::new(file);
        let Ok(elf) = object::File::parse(&cache) else { return out };
        for sym in elf.symbols().chain(elf.dynamic_symbols()) {
            if sym.kind() != SymbolKind::Text || !sym.is_definition() || sym.address() == 0 {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() {
                continue;
            }
            let (Ok(at), Ok(len)) = (u32::try_from(out.names.len()), u32::try_from(name.len()))
            else {
                break;
            };
            out.names.push_str(name);
            let start = sym.address();
            out.funcs.push((start, start.saturating_add(sym.size().max(1)), at, len));
        }
        // Aliases share an address (`malloc` and `__libc_malloc`, `free` and `cfree`): keep the
        // public-looking one, the name with the fewest leading underscores, then the shortest.
        let names = &out.names;
        let rank = |f: &(u64, u64, u32, u32)| {
            let name = names.get(f.2 as usize..).unwrap_or_default();
            (name.bytes().take_while(|&b| b == b'_').count(), f.3)
        };
        out.funcs.sort_by(|a, b| a.0.cmp(&b.0).then(rank(a).cmp(&rank(b))));
        out.funcs.dedup_by_key(|f| f.0);
        out
    }

    /// The function containing the file address `addr`, if a symbol covers it.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.funcs.partition_point(|f| f.0 <= addr).checked_sub(1)?;
        let &(_, end, at, len) = self.funcs.get(i)?;
        if addr >= end {
            return None;
        }
        self.names.get(at as usize..(at as usize + len as usize))
    }
}

/// Symbol tables of the objects seen during one report pass, by path.
#[derive(Debug, Default)]
pub(crate) struct ElfSymbolCache {
    by_path: HashMap<String, ElfSymbols>,
}

impl ElfSymbolCache {
    /// The name of the function at file address `addr` of the object at `path`.
    pub(crate) fn lookup(&mut self, path: &str, addr: u64) -> Option<&str> {
        if !self.by_path.contains_key(path) {
            self.by_path.insert(path.to_string(), ElfSymbols::load(path));
        }
        self.by_path.get(path)?.lookup(addr)
    }
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
        let table = ElfSymbols::load(&path);
        assert!(table.funcs.len() > 100, "{path}: {} functions", table.funcs.len());
        // libc is a shared object: file address = runtime address - load base.
        let at = |f: usize| table.lookup((f - base) as u64 + 1);
        assert_eq!(at(libc::malloc as *const () as usize), Some("malloc"));
        assert_eq!(at(libc::free as *const () as usize), Some("free"));
        assert_eq!(at(libc::fopen as *const () as usize), Some("fopen"));
        assert_eq!(table.lookup(0), None);
        assert!(ElfSymbols::load("/nonexistent/lib.so").funcs.is_empty());
    }
}
