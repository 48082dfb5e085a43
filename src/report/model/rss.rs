//! The resident set explained: the process's RSS cut into parts that add up to it exactly.
//!
//! # Why
//!
//! A report's figures count what the program asked for (retained bytes, mapped bytes, the
//! profiler's own bytes); the kernel's RSS counts pages. The two never agree: `malloc` keeps
//! freed memory and headers, threads have stacks, binaries and files are mapped, and some
//! memory was mapped where Ying could not see it. Printed side by side, they leave the reader to
//! guess the difference. This module reads `/proc/self/smaps` once per report (on the report
//! thread, never on an allocation path: it allocates and reads files) and gives every
//! mapping's `Rss:` to exactly one [`Part`], so the parts sum to the RSS the kernel reports
//! (the sum of the `Rss:` fields, which is what `smaps_rollup` prints).
//!
//! # How a mapping is classified
//!
//! In order, first match wins:
//!
//! * **The profiler's own** mappings (its heap, `engine/tables/arena.rs`, and the debug-info
//!   files `symbols/dwarf.rs` maps), listed by address as they are made.
//! * **`[stack]`** (the main thread's) is a thread stack; `[vdso]`, `[vvar]`, `[vsyscall]` are
//!   binaries' code.
//! * **File mappings** of a file some mapping of which is executable (same device and inode):
//!   a loaded ELF module, the program's or a library's code and data. Other files are *file
//!   mappings*.
//! * **Anonymous mappings** are cut at the program's counted mmaps (`engine/mapped.rs`'s table)
//!   and the profiler's; what is left is, in order: a glibc arena heap (the mapping starts on a
//!   64 MiB boundary with a `heap_info` whose `mprotect_size` is the mapping's length), glibc's
//!   own mmapped chunks (a chunk header with `prev_size` 0 and a size with only `IS_MMAPPED`
//!   set, walked chunk by chunk: adjacent chunks merge into one mapping), a binary's `.bss`
//!   (right after one of its file mappings), a thread stack (right after a `PROT_NONE` guard,
//!   the way `pthread_create` maps one), and otherwise memory Ying did not see. `[heap]` (the
//!   `brk` heap) is glibc's. glibc's regions count only when `malloc` is glibc's: under the
//!   shim without a foreign `malloc`, or the Rust front end over `System`.
//!
//! Stacks are told by their guard page rather than by the bounds the shim records at thread
//! start: those bounds live in each thread's own storage, which the report thread cannot read
//! without a race, and the pattern also finds the stacks of threads started before the shim's
//! constructor (and Ying's own report and endpoint threads, whose stacks are counted as thread
//! stacks).
//!
//! Headers are read with `pread` on `/proc/self/mem`, which answers `EIO` for a page another
//! thread unmapped meanwhile, where a plain load would fault. A mapping cut into parts of
//! different kinds gives each part the resident pages `mincore` finds in it; the kernel's
//! `Rss:` of the mapping stays the total (any difference, the mapping having changed between
//! the two reads, goes to its largest part), so the sum stays exact.
//!
//! # The heap
//!
//! glibc's resident regions hold the live blocks, their headers, and the free memory `malloc`
//! keeps. *Heap in use* is the exact retained heap (retained bytes minus the counted mmaps)
//! capped by those resident bytes: when more is retained than resident (pages never touched,
//! or swapped), the excess is printed as such. The rest of the regions is *allocator overhead
//! and free memory*, less the blocks report code allocated on the host heap (the profiler's
//! memory outside its own heap), which go to the profiler's part. Under another allocator,
//! its memory is mapped where Ying cannot tell it from other anonymous memory: it shows as
//! unseen, with a line saying so.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};

use super::smaps::{self, Mapping};

/// One part of the resident set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    HeapInUse,
    AllocatorFree,
    Mapped,
    Stacks,
    Binaries,
    Files,
    Profiler,
    Unseen,
}

impl Part {
    /// Every part, in the order reports print them.
    pub(crate) const ALL: [Part; 8] = [
        Part::HeapInUse,
        Part::AllocatorFree,
        Part::Mapped,
        Part::Stacks,
        Part::Binaries,
        Part::Files,
        Part::Profiler,
        Part::Unseen,
    ];

    /// The part's name in the manifest's `rss_breakdown` and the endpoint's status.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Part::HeapInUse => "heap_in_use",
            Part::AllocatorFree => "allocator_overhead",
            Part::Mapped => "mmaps_counted",
            Part::Stacks => "thread_stacks",
            Part::Binaries => "binaries",
            Part::Files => "file_mappings",
            Part::Profiler => "profiler",
            Part::Unseen => "unseen_anonymous",
        }
    }

    /// The part's name in the text and the page.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Part::HeapInUse => "heap in use",
            Part::AllocatorFree => "malloc overhead",
            Part::Mapped => "mmaps counted",
            Part::Stacks => "thread stacks",
            Part::Binaries => "binaries",
            Part::Files => "file mappings",
            Part::Profiler => "profiler",
            Part::Unseen => "unseen anonymous",
        }
    }

    /// What the part is, in one line.
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Part::HeapInUse => "malloc's resident memory holding the live blocks (retained, exact)",
            Part::AllocatorFree => "malloc's headers, padding and the freed memory it keeps",
            Part::Mapped => "the program's anonymous mmaps Ying counts",
            Part::Stacks => "the main stack and every thread's stack",
            Part::Binaries => "code and data of the executable and loaded libraries",
            Part::Files => "other files mapped",
            Part::Profiler => "Ying's own tables, blocks and debug info",
            Part::Unseen => {
                "anonymous memory Ying did not see mapped (before start, raw syscalls, other allocators)"
            }
        }
    }
}

/// The resident set cut into [`Part`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RssBreakdown {
    /// The resident set, bytes: the sum of every mapping's `Rss:`, and of the parts.
    pub(crate) rss: u64,
    /// Bytes of each part, in [`Part::ALL`]'s order.
    pub(crate) parts: [u64; 8],
    /// Retained heap bytes that are not resident (never touched, or swapped out).
    pub(crate) heap_not_resident: u64,
    /// Whether `malloc`'s regions were told apart (glibc's); otherwise they count as unseen.
    pub(crate) allocator_known: bool,
    /// How long before the report's other figures it was read, ms: 0 for a report, up to a
    /// second or so in a version of the live file (which reads it at most once a second).
    pub(crate) age_ms: u64,
}

impl RssBreakdown {
    /// Bytes of `part`.
    #[cfg(test)]
    pub(crate) fn get(&self, part: Part) -> u64 {
        self.parts[Part::ALL.iter().position(|&p| p == part).unwrap_or(0)]
    }

    /// The breakdown as a JSON object: `{"rss_bytes":..,"heap_not_resident_bytes":..,
    /// "allocator_known":..,"parts":{"<part>":bytes,..}}` (the endpoint's status).
    pub(crate) fn json(&self) -> String {
        let parts: Vec<String> =
            self.iter().map(|(p, b)| format!("\"{}\":{}", p.key(), b)).collect();
        format!(
            "{{\"rss_bytes\":{},\"heap_not_resident_bytes\":{},\"allocator_known\":{},\"parts\":{{{}}}}}",
            self.rss,
            self.heap_not_resident,
            self.allocator_known,
            parts.join(",")
        )
    }

    /// The parts with their bytes, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Part, u64)> + '_ {
        Part::ALL.iter().copied().zip(self.parts.iter().copied())
    }
}

/// Which allocator the heap is: [`HEAP_SHIM`] until the Rust front end says.
static HEAP: AtomicU8 = AtomicU8::new(HEAP_SHIM);
/// The shim: glibc's `malloc`, unless a foreign `malloc` owns the program's calls.
const HEAP_SHIM: u8 = 0;
/// The Rust front end over `System`: glibc's `malloc`.
const HEAP_SYSTEM: u8 = 1;
/// The Rust front end over another allocator, whose memory Ying cannot tell apart.
const HEAP_OTHER: u8 = 2;

/// The Rust front end's inner allocator: `System` (glibc's `malloc`) or another one.
pub(crate) fn set_inner_allocator_is_system(system: bool) {
    HEAP.store(if system { HEAP_SYSTEM } else { HEAP_OTHER }, Ordering::Relaxed);
}

/// Which ranges are already known, and whether glibc's regions are to be looked for.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// The profiler's own mappings, `(start, end)`, sorted.
    pub(crate) profiler: Vec<(usize, usize)>,
    /// The program's counted mmaps, `(start, end)`, sorted.
    pub(crate) counted: Vec<(usize, usize)>,
    /// Whether `malloc` is glibc's.
    pub(crate) glibc: bool,
}

/// Reads the process's memory for the classifier (a double in the tests).
pub(crate) trait Probe {
    /// The four words at `addr`, or `None` when they cannot be read (unmapped meanwhile).
    fn words(&self, addr: usize) -> Option<[u64; 4]>;
    /// Resident bytes of `start..end` (page-aligned), or `None` when unknown.
    fn resident(&self, start: usize, end: usize) -> Option<u64>;
}

/// What the mappings hold, before the heap is split: bytes per kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Classified {
    /// glibc's regions (`[heap]`, arena heaps, mmapped chunks).
    pub(crate) allocator: u64,
    pub(crate) mapped: u64,
    pub(crate) stacks: u64,
    pub(crate) binaries: u64,
    pub(crate) files: u64,
    pub(crate) profiler: u64,
    pub(crate) unseen: u64,
}

/// The kind of a piece of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Allocator,
    Mapped,
    Stack,
    Binary,
    File,
    Profiler,
    Unseen,
}

impl Classified {
    fn add(&mut self, k: Kind, bytes: u64) {
        *match k {
            Kind::Allocator => &mut self.allocator,
            Kind::Mapped => &mut self.mapped,
            Kind::Stack => &mut self.stacks,
            Kind::Binary => &mut self.binaries,
            Kind::File => &mut self.files,
            Kind::Profiler => &mut self.profiler,
            Kind::Unseen => &mut self.unseen,
        } += bytes;
    }

    /// The sum of every kind.
    pub(crate) fn total(&self) -> u64 {
        self.allocator
            + self.mapped
            + self.stacks
            + self.binaries
            + self.files
            + self.profiler
            + self.unseen
    }
}

/// glibc's `HEAP_MAX_SIZE` on 64-bit targets: a non-main arena's heaps are aligned to it.
const ARENA_HEAP_ALIGN: usize = 64 << 20;
/// glibc's `IS_MMAPPED` bit of a chunk's size field.
const IS_MMAPPED: u64 = 0x2;
const PAGE: usize = 4096;

/// The end of the range of `ranges` (sorted) that contains `addr`.
fn containing(ranges: &[(usize, usize)], addr: usize) -> Option<usize> {
    let i = ranges.partition_point(|&(_, e)| e <= addr);
    ranges.get(i).filter(|&&(s, _)| s <= addr).map(|&(_, e)| e)
}

/// The start of the first range of `ranges` (sorted) that starts after `addr`.
fn next_start(ranges: &[(usize, usize)], addr: usize) -> usize {
    let i = ranges.partition_point(|&(s, _)| s <= addr);
    ranges.get(i).map_or(usize::MAX, |&(s, _)| s)
}

/// Whether `start..end` (a whole anonymous mapping) is a glibc arena heap's resident part.
fn arena_heap(probe: &impl Probe, start: usize, end: usize) -> bool {
    if start % ARENA_HEAP_ALIGN != 0 {
        return false;
    }
    // heap_info: ar_ptr, prev, size, mprotect_size.
    let Some([ar_ptr, prev, size, mprotect_size]) = probe.words(start) else { return false };
    ar_ptr != 0
        && (prev as usize) % ARENA_HEAP_ALIGN == 0
        && size != 0
        && size <= mprotect_size
        && mprotect_size as usize == end - start
}

/// The length of the glibc mmapped chunk at `at`, if one starts there and ends by `end`.
fn mmapped_chunk(probe: &impl Probe, at: usize, end: usize) -> Option<usize> {
    let [prev_size, size, _, _] = probe.words(at)?;
    let len = (size & !7) as usize;
    (prev_size == 0 && size & 7 == IS_MMAPPED && len >= PAGE && len % PAGE == 0 && len <= end - at)
        .then_some(len)
}

/// Gives every mapping's resident bytes to one kind (see the module docs).
pub(crate) fn classify(maps: &[Mapping], known: &Known, probe: &impl Probe) -> Classified {
    let mut out = Classified::default();
    // Files with an executable mapping: loaded modules.
    let binaries: HashSet<(&str, u64)> = maps
        .iter()
        .filter(|m| m.file_backed() && m.executable() && m.inode != 0)
        .map(|m| (m.dev.as_str(), m.inode))
        .collect();
    let is_binary = |m: &Mapping| m.inode != 0 && binaries.contains(&(m.dev.as_str(), m.inode));
    let mut pieces: Vec<(usize, usize, Kind)> = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if m.rss == 0 {
            continue;
        }
        let prev = i.checked_sub(1).map(|j| &maps[j]).filter(|p| p.end == m.start);
        pieces.clear();
        if containing(&known.profiler, m.start).is_some_and(|e| e >= m.end) {
            out.add(Kind::Profiler, m.rss);
            continue;
        }
        let whole = match m.path.as_str() {
            "[stack]" => Some(Kind::Stack),
            "[vdso]" | "[vvar]" | "[vvar_vclock]" | "[vsyscall]" => Some(Kind::Binary),
            "[heap]" => Some(if known.glibc { Kind::Allocator } else { Kind::Unseen }),
            _ if m.file_backed() => Some(if is_binary(m) { Kind::Binary } else { Kind::File }),
            _ if !m.anonymous() => Some(Kind::Unseen),
            _ => None,
        };
        if let Some(k) = whole {
            out.add(k, m.rss);
            continue;
        }
        // An anonymous mapping: cut at the known ranges, the gaps classified.
        let after_binary = prev.is_some_and(|p| p.file_backed() && is_binary(p));
        let after_guard = prev.is_some_and(|p| p.anonymous() && p.no_access());
        let rest = |a: usize, b: usize, pieces: &mut Vec<(usize, usize, Kind)>| {
            let k = if a != m.start {
                Kind::Unseen
            } else if after_binary {
                Kind::Binary
            } else if after_guard {
                Kind::Stack
            } else {
                Kind::Unseen
            };
            pieces.push((a, b, k));
        };
        let mut p = m.start;
        while p < m.end {
            if let Some(e) = containing(&known.profiler, p) {
                pieces.push((p, e.min(m.end), Kind::Profiler));
                p = e.min(m.end);
                continue;
            }
            if let Some(e) = containing(&known.counted, p) {
                pieces.push((p, e.min(m.end), Kind::Mapped));
                p = e.min(m.end);
                continue;
            }
            let gap_end =
                next_start(&known.profiler, p).min(next_start(&known.counted, p)).min(m.end);
            let mut q = p;
            if known.glibc {
                if q == m.start && gap_end == m.end && arena_heap(probe, m.start, m.end) {
                    pieces.push((q, gap_end, Kind::Allocator));
                    q = gap_end;
                }
                while q < gap_end {
                    let Some(len) = mmapped_chunk(probe, q, gap_end) else { break };
                    pieces.push((q, q + len, Kind::Allocator));
                    q += len;
                }
            }
            if q < gap_end {
                rest(q, gap_end, &mut pieces);
            }
            p = gap_end;
        }
        share(m, &mut pieces, probe, &mut out);
    }
    out
}

/// Gives `m`'s resident bytes to its pieces: all to the one kind when there is one, otherwise
/// each piece its resident pages (`mincore`; by length when unknown), the difference to the
/// largest.
fn share(
    m: &Mapping,
    pieces: &mut Vec<(usize, usize, Kind)>,
    probe: &impl Probe,
    out: &mut Classified,
) {
    pieces.dedup_by(|b, a| {
        let merge = a.2 == b.2 && a.1 == b.0;
        if merge {
            a.1 = b.1;
        }
        merge
    });
    match pieces.as_slice() {
        [] => out.add(Kind::Unseen, m.rss),
        [(_, _, k)] => out.add(*k, m.rss),
        many => {
            let len = (m.end - m.start).max(1) as u64;
            let mut shares: Vec<u64> = many
                .iter()
                .map(|&(a, b, _)| {
                    probe
                        .resident(a, b)
                        .unwrap_or_else(|| (m.rss as u128 * (b - a) as u128 / len as u128) as u64)
                })
                .collect();
            let mut sum: u64 = shares.iter().sum();
            // Trim from the last piece back until the shares fit in the mapping's Rss.
            for s in shares.iter_mut().rev() {
                if sum <= m.rss {
                    break;
                }
                let cut = (sum - m.rss).min(*s);
                *s -= cut;
                sum -= cut;
            }
            let largest = (0..shares.len()).max_by_key(|&i| shares[i]).unwrap_or(0);
            shares[largest] += m.rss - sum;
            for (&(_, _, k), s) in many.iter().zip(shares) {
                out.add(k, s);
            }
        }
    }
}

/// The breakdown of `c`: glibc's regions split into the heap in use (`heap_retained` at most),
/// the blocks report code holds on the host heap (`profiler_heap`, at most what is left) and
/// the allocator's overhead and free memory.
pub(crate) fn breakdown(
    c: &Classified,
    heap_retained: u64,
    profiler_heap: u64,
    allocator_known: bool,
) -> RssBreakdown {
    let (in_use, free, profiler_blocks, unseen_heap) = if allocator_known {
        let in_use = heap_retained.min(c.allocator);
        let left = c.allocator - in_use;
        let profiler_blocks = profiler_heap.min(left);
        (in_use, left - profiler_blocks, profiler_blocks, 0)
    } else {
        (0, 0, 0, c.allocator)
    };
    RssBreakdown {
        rss: c.total(),
        parts: [
            in_use,
            free,
            c.mapped,
            c.stacks,
            c.binaries,
            c.files,
            c.profiler + profiler_blocks,
            c.unseen + unseen_heap,
        ],
        heap_not_resident: if allocator_known { heap_retained - in_use } else { 0 },
        allocator_known,
        age_ms: 0,
    }
}

/// `pread` on `/proc/self/mem` and `mincore`: the live process's [`Probe`].
struct Live {
    mem: Option<std::fs::File>,
}

impl Probe for Live {
    fn words(&self, addr: usize) -> Option<[u64; 4]> {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 32];
        self.mem.as_ref()?.read_exact_at(&mut b, addr as u64).ok()?;
        let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Some([w(0), w(1), w(2), w(3)])
    }

    fn resident(&self, start: usize, end: usize) -> Option<u64> {
        let page = crate::sys::page_size();
        if end <= start || start % page != 0 {
            return None;
        }
        let mut v = vec![0u8; (end - start).div_ceil(page)];
        // SAFETY: `mincore` only reads the page tables of `start..end` and writes one byte per
        // page into `v`, which has that many; an address range no longer mapped fails with
        // ENOMEM and touches nothing.
        let r = unsafe { libc::mincore(start as *mut libc::c_void, end - start, v.as_mut_ptr()) };
        (r == 0).then(|| v.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64)
    }
}

/// The process's resident set now, explained; `None` when `/proc/self/smaps` cannot be read.
/// `retained` and `profiler_bytes` are the exact totals read for the same report, `counted` the
/// counted mmaps' bytes, `foreign_malloc` whether another object owns `malloc`. Report thread
/// only (it allocates and reads files), with the re-entrancy guard held.
pub(crate) fn read(
    retained: u64,
    counted: u64,
    profiler_bytes: u64,
    foreign_malloc: bool,
) -> Option<RssBreakdown> {
    if !crate::sys::fd_headroom() {
        return None;
    }
    let mut known = Known::default();
    crate::engine::mapped::regions_into(&mut known.counted);
    crate::engine::tables::arena::for_each_own_mapping(|s, e| known.profiler.push((s, e)));
    known.profiler.sort_unstable();
    let glibc = match HEAP.load(Ordering::Relaxed) {
        HEAP_SHIM => !foreign_malloc,
        HEAP_SYSTEM => true,
        _ => false,
    };
    known.glibc = glibc;
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let maps = smaps::parse(&text);
    if maps.is_empty() {
        return None;
    }
    let probe = Live { mem: std::fs::File::open("/proc/self/mem").ok() };
    let c = classify(&maps, &known, &probe);
    let profiler_heap =
        profiler_bytes.saturating_sub(crate::engine::tables::arena::mapped_bytes() as u64);
    Some(breakdown(&c, retained.saturating_sub(counted), profiler_heap, glibc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Memory words and resident bytes by address, as a test lays them out.
    #[derive(Default)]
    struct Fake {
        words: HashMap<usize, [u64; 4]>,
        resident: HashMap<(usize, usize), u64>,
    }

    impl Probe for Fake {
        fn words(&self, addr: usize) -> Option<[u64; 4]> {
            Some(self.words.get(&addr).copied().unwrap_or([0; 4]))
        }
        fn resident(&self, start: usize, end: usize) -> Option<u64> {
            self.resident.get(&(start, end)).copied()
        }
    }

    /// A captured smaps (Debian 12, x86-64, a C program under the shim), trimmed to the
    /// fields the parser reads, addresses kept.
    const CAPTURED: &str = "\
5581a3a00000-5581a3a01000 r--p 00000000 fd:01 4001  /tmp/prog
Rss:                   4 kB
5581a3a01000-5581a3a02000 r-xp 00001000 fd:01 4001  /tmp/prog
Rss:                   4 kB
5581a3a03000-5581a3a04000 rw-p 00002000 fd:01 4001  /tmp/prog
Rss:                   4 kB
5581a3a04000-5581a3a06000 rw-p 00000000 00:00 0 
Rss:                   8 kB
5581a4000000-5581a4100000 rw-p 00000000 00:00 0                          [heap]
Rss:                 800 kB
7f3c00000000-7f3c00400000 rw-p 00000000 00:00 0 
Rss:                 900 kB
7f3c00400000-7f3c04000000 ---p 00000000 00:00 0 
Rss:                   0 kB
7f3c10000000-7f3c10800000 rw-p 00000000 00:00 0 
Rss:                6000 kB
7f3c20000000-7f3c20001000 ---p 00000000 00:00 0 
Rss:                   0 kB
7f3c20001000-7f3c20801000 rw-p 00000000 00:00 0 
Rss:                  24 kB
7f3c30000000-7f3c30100000 rw-p 00000000 00:00 0 
Rss:                1024 kB
7f3c40000000-7f3c40200000 r--s 00000000 fd:01 5002  /data/big.db
Rss:                2048 kB
7f3c50000000-7f3c50100000 r--p 00000000 fd:01 6003  /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 400 kB
7f3c50100000-7f3c50200000 r-xp 00100000 fd:01 6003  /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 600 kB
7f3c50200000-7f3c50210000 rw-p 00000000 00:00 0 
Rss:                  16 kB
7f3c60000000-7f3c60040000 rw-p 00000000 00:00 0 
Rss:                 256 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Rss:                 132 kB
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   8 kB
";

    /// The layout behind [`CAPTURED`]: an arena heap at 0x7f3c00000000, glibc's mmapped
    /// chunks and a counted mmap sharing one mapping at 0x7f3c10000000, a thread stack after its
    /// guard, an unseen mapping, the profiler's heap at 0x7f3c60000000.
    fn layout() -> (Known, Fake) {
        let mut f = Fake::default();
        let heap = 0x7f3c00000000;
        f.words.insert(heap, [heap as u64 + 48, 0, 0x300000, 0x400000]);
        let m = 0x7f3c10000000;
        f.words.insert(m, [0, 0x200000 | IS_MMAPPED, 0, 0]);
        f.words.insert(m + 0x200000, [0, 0x100000 | IS_MMAPPED, 0, 0]);
        // 0x300000..0x500000: a counted mmap; 0x500000..0x800000: unseen.
        // The two chunks are one piece (adjacent, of one kind).
        f.resident.insert((m, m + 0x300000), 3072 * 1024);
        f.resident.insert((m + 0x300000, m + 0x500000), 2048 * 1024);
        f.resident.insert((m + 0x500000, m + 0x800000), 880 * 1024);
        let known = Known {
            profiler: vec![(0x7f3c60000000, 0x7f3c60040000)],
            counted: vec![(m + 0x300000, m + 0x500000)],
            glibc: true,
        };
        (known, f)
    }

    #[test]
    fn every_mapping_goes_to_one_kind_and_the_sum_is_the_rss() {
        let maps = smaps::parse(CAPTURED);
        let (known, fake) = layout();
        let c = classify(&maps, &known, &fake);
        let rss: u64 = maps.iter().map(|m| m.rss).sum();
        assert_eq!(c.total(), rss);
        let kb = 1024;
        // [heap] 800 + arena heap 900 + two chunks 2048 + 1024.
        assert_eq!(c.allocator, (800 + 900 + 2048 + 1024) * kb);
        assert_eq!(c.mapped, 2048 * kb);
        // The 6000 kB mapping: 2048 + 1024 + 2048 measured, the rest (880) unseen.
        assert_eq!(c.stacks, (24 + 132) * kb);
        // prog 12 + .bss 8 + libc 1000 + its .bss 16 + vdso 8.
        assert_eq!(c.binaries, (12 + 8 + 1000 + 16 + 8) * kb);
        assert_eq!(c.files, 2048 * kb);
        assert_eq!(c.profiler, 256 * kb);
        assert_eq!(c.unseen, (880 + 1024) * kb);
    }

    #[test]
    fn mincore_disagreeing_with_rss_keeps_the_sum() {
        let maps = smaps::parse(CAPTURED);
        let (known, mut fake) = layout();
        // The unseen piece now claims far more than the mapping's Rss leaves.
        let m = 0x7f3c10000000;
        fake.resident.insert((m + 0x500000, m + 0x800000), 3 * 1024 * 1024);
        let c = classify(&maps, &known, &fake);
        assert_eq!(c.total(), maps.iter().map(|m| m.rss).sum::<u64>());
        assert_eq!(c.unseen, (6000 - 2048 - 1024 - 2048 + 1024) * 1024);
    }

    #[test]
    fn without_glibc_the_heap_is_unseen() {
        let maps = smaps::parse(CAPTURED);
        let (mut known, fake) = layout();
        known.glibc = false;
        let c = classify(&maps, &known, &fake);
        assert_eq!(c.allocator, 0);
        let b = breakdown(&c, 10 << 20, 0, false);
        assert_eq!(b.get(Part::HeapInUse), 0);
        assert_eq!(b.parts.iter().sum::<u64>(), b.rss);
        assert!(!b.allocator_known);
    }

    #[test]
    fn the_heap_splits_into_use_profiler_blocks_and_overhead() {
        let c = Classified { allocator: 1000, unseen: 5, ..Classified::default() };
        let b = breakdown(&c, 700, 100, true);
        assert_eq!(
            (b.get(Part::HeapInUse), b.get(Part::Profiler), b.get(Part::AllocatorFree)),
            (700, 100, 200)
        );
        assert_eq!((b.rss, b.parts.iter().sum::<u64>()), (1005, 1005));
        let b = breakdown(&c, 1500, 100, true);
        assert_eq!(
            (b.get(Part::HeapInUse), b.heap_not_resident, b.get(Part::Profiler)),
            (1000, 500, 0)
        );
    }

    #[test]
    fn reads_this_process() {
        // VmRSS just before and just after: the other tests of this process allocate and free
        // while smaps is read, so the sum is compared with the range the process went through.
        let vm_rss = || -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let kb: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap();
            kb * 1024
        };
        let before = vm_rss();
        let b = read(0, 0, 0, false).expect("smaps readable");
        let after = vm_rss();
        assert_eq!(b.parts.iter().sum::<u64>(), b.rss);
        assert!(b.get(Part::Binaries) > 0 && b.get(Part::Stacks) > 0);
        let slack = b.rss / 5 + (4 << 20);
        let (low, high) = (before.min(after).saturating_sub(slack), before.max(after) + slack);
        assert!((low..=high).contains(&b.rss), "smaps {} vs VmRSS {before} then {after}", b.rss);
    }
}
