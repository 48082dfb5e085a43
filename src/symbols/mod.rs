//! Symbols: from instruction pointers to function names, files and lines.
//!
//! Code here runs at report time only, on the report thread or on a program thread that holds
//! the profiler's guard (so its own allocations are profiler memory, not the program's). It may
//! allocate, read files (DWARF in [`dwarf`], ELF symbol tables in [`elf_symbols`]) and take its
//! time; it caches each answer per address ([`symbolize`]). It may use [`crate::sys`] and the
//! engine's data types, and it is never called from an allocation hook.
//! Addresses recorded by another process, possibly ended, are named from the files on disk by
//! [`offline`], from that process's module list and without the symbol cache.
//!
//! The engine never calls into this folder. A `fork` must find every profiler lock free, this
//! folder's symbol cache lock too: [`lock_for_fork`] and [`unlock_after_fork`] are called by the
//! crate's fork handlers (`front_end::fork_prepare` and the others, in `front_end.rs`), which sit
//! above both sides.

pub(crate) mod debug_file;
pub(crate) mod dwarf;
pub(crate) mod elf_symbols;
pub(crate) mod offline;
pub(crate) mod perf_map;
pub(crate) mod symbolize;

/// `fork` prepare (the crate's fork handler, before the engine's): takes the symbol cache's lock.
pub(crate) fn lock_for_fork() {
    symbolize::SYMBOLS.lock_for_fork();
}

/// `fork` parent and child (the crate's fork handlers, after the engine's): releases that lock.
pub(crate) fn unlock_after_fork() {
    symbolize::SYMBOLS.force_unlock();
}
