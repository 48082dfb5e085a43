//! Resident bytes per stack: how much of what each stack retains is in memory now, and how much
//! is in swap, read from `/proc/self/pagemap` at report time.
//!
//! # Why
//!
//! A retained estimate counts bytes the program asked for. Much of it may never have been
//! touched (a large `calloc`, a reserved buffer, an arena's tail): it costs address space, not
//! memory. The resident set and the OOM killer count pages in memory. A leak hunt on a process
//! near its memory limit needs the stacks that hold *pages*, not just bytes.
//!
//! # The estimate
//!
//! For each live sampled block, the bytes of the block that lie in pages present in memory
//! (pagemap bit 63) and in swap (bit 62), each divided by the block's sampling probability as
//! its retained figure is: `resident(stack) = Σ present_bytes(block) * w.bytes / size`. The sum
//! over the live samples of a stack is an unbiased estimate of the resident bytes of all its
//! live blocks, as the retained figure is of their bytes (Horvitz-Thompson; exact at interval
//! 1). A page two blocks share counts for each with its own bytes in it, so the stacks'
//! figures add up to an estimate of the resident bytes of the live blocks, not to the resident
//! set (which also holds the allocator's free chunks, Ying's memory, code and file pages). A page the
//! program only read maps the kernel's shared zero page and reads as present, though it costs
//! no memory of its own.
//!
//! # How
//!
//! The live table is copied (address, record) one shard at a time under its lock into storage
//! of the profiler's own heap reserved before ([`crate::engine::tables::copy_live`]); the locks
//! are released, the copy sorted by address, and the pagemap read with one `pread` per run of
//! nearby blocks (a run ends where the next block starts more than [`GAP_PAGES`] pages later or
//! where the run would exceed the buffer, [`BUF_PAGES`] entries of 8 bytes: 32 KiB for 64 MiB
//! of address space). A larger block is read in chunks of that buffer. A block freed, or
//! unmapped, since its record was copied reads as not present: a report a little after the
//! figures, like its histograms. Pagemap is readable without privileges (only the page frame
//! numbers are hidden, which this does not need). The descriptor is opened once per report,
//! only with `sys::FD_HEADROOM` descriptors free, and closed before the report is rendered.
//!
//! `YING_RESIDENT=off` turns it off (no pagemap read, no figure shown).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::engine::tables::arena::{Arena, ArenaVec};
use crate::engine::tables::{self, Record};

/// Whether reports measure residency (`YING_RESIDENT`).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Sets whether reports measure residency (`YING_RESIDENT`).
pub(crate) fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether reports measure residency.
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Pagemap entries read by one `pread` at most (8 bytes each).
pub(crate) const BUF_PAGES: usize = 4096;
/// Pages between two blocks that still join one read (reading them costs less than a call).
pub(crate) const GAP_PAGES: u64 = 16;

/// Pagemap bit: the page is present in memory.
const PRESENT: u64 = 1 << 63;
/// Pagemap bit: the page is in swap.
const SWAPPED: u64 = 1 << 62;

/// One live block to measure: where it is, its counted bytes, and what one of its bytes weighs
/// (`w.bytes / size`, the inverse of its sampling probability).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block {
    pub(crate) addr: usize,
    pub(crate) size: u64,
    pub(crate) scale: f64,
    pub(crate) stack: u32,
}

/// The live sampled blocks now (the live table's and the sampled mappings'), sorted by address.
/// The caller holds the re-entrancy guard.
pub(crate) fn live_blocks() -> ArenaVec<Block> {
    let mut raw: ArenaVec<(usize, Record)> = ArenaVec::new_in(Arena);
    // Reserved before any shard is locked, with room for blocks sampled meanwhile.
    let n = tables::live_len();
    raw.reserve_exact(n + n / 16 + 64);
    tables::copy_live(&mut raw);
    let mut out = ArenaVec::with_capacity_in(raw.len(), Arena);
    out.extend(raw.iter().filter(|(_, r)| r.size > 0).map(|&(addr, r)| Block {
        addr,
        size: r.size,
        scale: r.weight.bytes / r.size as f64,
        stack: r.stack,
    }));
    drop(raw);
    // Sampled mappings keep their records in the mapping table.
    let mut maps: ArenaVec<(usize, u64, u32, crate::engine::sampler::Weight)> =
        ArenaVec::new_in(Arena);
    maps.reserve_exact(crate::engine::mapped::region_count() + 64);
    crate::engine::mapped::sampled_into(&mut maps);
    out.extend(maps.iter().filter(|m| m.1 > 0).map(|&(addr, size, stack, w)| Block {
        addr,
        size,
        scale: w.bytes / size as f64,
        stack,
    }));
    drop(maps);
    out.sort_unstable_by_key(|b| b.addr);
    out
}

/// `/proc/self/pagemap`, read in ranges of pages.
pub(crate) struct Pagemap {
    file: File,
    page: u64,
    /// One read's bytes, and its entries.
    bytes: Vec<u8>,
    buf: Vec<u64>,
}

impl Pagemap {
    /// Opens this process's pagemap (None when descriptors are short or it cannot be read).
    pub(crate) fn open() -> Option<Self> {
        if !crate::sys::fd_headroom() {
            return None;
        }
        let file = File::open("/proc/self/pagemap").ok()?;
        let page = crate::sys::page_size() as u64;
        Some(Self { file, page, bytes: vec![0; BUF_PAGES * 8], buf: vec![0; BUF_PAGES] })
    }

    /// Reads the entries of the `n` pages from page number `first` (at most [`BUF_PAGES`])
    /// into the buffer; returns them (fewer when the read came short: the rest not present).
    pub(crate) fn read(&mut self, first: u64, n: usize) -> io::Result<&[u64]> {
        let n = n.min(BUF_PAGES);
        let mut done = 0;
        while done < n {
            let off = (first + done as u64) * 8;
            let got = match self.file.read_at(&mut self.bytes[done * 8..n * 8], off) {
                Ok(0) => break,
                Ok(got) => got / 8,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            done += got;
        }
        for (e, c) in self.buf[..done].iter_mut().zip(self.bytes.chunks_exact(8)) {
            *e = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        }
        self.buf[done..n].fill(0);
        Ok(&self.buf[..n])
    }

    /// Calls `f(block, resident_bytes, swapped_bytes)` for every block of `blocks` (sorted by
    /// address), with the bytes of the block in pages present in memory and in swap, unscaled.
    /// Stops at the first read error (the blocks not measured then are not passed to `f`).
    pub(crate) fn measure(
        &mut self,
        blocks: &[Block],
        mut f: impl FnMut(&Block, u64, u64),
    ) -> io::Result<()> {
        let page = self.page;
        let first_page = |b: &Block| b.addr as u64 / page;
        let last_page = |b: &Block| (b.addr as u64).saturating_add(b.size - 1) / page;
        let mut i = 0;
        while i < blocks.len() {
            let b = &blocks[i];
            let (first, mut last) = (first_page(b), last_page(b));
            if last - first >= BUF_PAGES as u64 {
                // A block larger than the buffer: its pages in chunks.
                let (mut res, mut swp) = (0, 0);
                let mut p = first;
                while p <= last {
                    let n = (last - p + 1).min(BUF_PAGES as u64) as usize;
                    let entries = self.read(p, n)?;
                    let (r, s) = count(b, p, entries, page);
                    res += r;
                    swp += s;
                    p += n as u64;
                }
                f(b, res, swp);
                i += 1;
                continue;
            }
            // A run of blocks read together.
            let mut j = i + 1;
            while j < blocks.len() {
                let next = &blocks[j];
                let end = last_page(next).max(last);
                if first_page(next) > last + GAP_PAGES || end - first >= BUF_PAGES as u64 {
                    break;
                }
                last = end;
                j += 1;
            }
            let n = (last - first + 1) as usize;
            let entries = self.read(first, n)?;
            for b in &blocks[i..j] {
                let (r, s) = count(b, first, entries, page);
                f(b, r, s);
            }
            i = j;
        }
        Ok(())
    }
}

/// The bytes of `b` in present and in swapped pages among `entries`, the pagemap entries of the
/// pages from page number `first`.
fn count(b: &Block, first: u64, entries: &[u64], page: u64) -> (u64, u64) {
    let (start, end) = (b.addr as u64, (b.addr as u64).saturating_add(b.size));
    let (mut res, mut swp) = (0, 0);
    let lo = (start / page).max(first);
    let hi = ((end - 1) / page).min(first + entries.len() as u64 - 1);
    let mut p = lo;
    while p <= hi {
        let e = entries[(p - first) as usize];
        let bytes = end.min((p + 1) * page) - start.max(p * page);
        if e & PRESENT != 0 {
            res += bytes;
        } else if e & SWAPPED != 0 {
            swp += bytes;
        }
        p += 1;
    }
    (res, swp)
}

/// The estimated resident and swapped bytes of the live sampled blocks, per stack id: calls
/// `f(stack, resident, swapped)` for each block (already scaled by its weight). False when the
/// pagemap could not be read (nothing measured). The caller holds the re-entrancy guard.
pub(crate) fn measure_live(mut f: impl FnMut(u32, f64, f64)) -> bool {
    let Some(mut pagemap) = Pagemap::open() else { return false };
    let blocks = live_blocks();
    let r = pagemap
        .measure(&blocks, |b, res, swp| f(b.stack, res as f64 * b.scale, swp as f64 * b.scale));
    r.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping of 64 pages with 10 of them touched reads as 10 present pages; a block lying
    /// across part of them counts only the bytes it has in present pages, scaled by its weight.
    #[test]
    fn pagemap_counts_the_touched_pages_of_a_mapping() {
        let page = crate::sys::page_size();
        let len = 64 * page;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as usize;
        // Touch pages 5..15.
        for i in 5..15 {
            // SAFETY: inside the mapping, which is readable and writable.
            unsafe { std::ptr::write_volatile((base + i * page) as *mut u8, 1) };
        }
        let mut pm = Pagemap::open().expect("pagemap readable");
        let entries = pm.read((base / page) as u64, 64).unwrap().to_vec();
        let present: Vec<usize> =
            (0..64).filter(|&i| entries[i] & PRESENT != 0).collect::<Vec<_>>();
        assert_eq!(present, (5..15).collect::<Vec<_>>());

        // Three blocks: the whole mapping, half a page before page 5 to half a page into page
        // 6, and a block in untouched pages; the second weighs 4 bytes per byte.
        let blocks = [
            Block { addr: base, size: len as u64, scale: 1.0, stack: 1 },
            Block { addr: base + 4 * page + page / 2, size: 2 * page as u64, scale: 4.0, stack: 2 },
            Block { addr: base + 40 * page, size: 3 * page as u64, scale: 1.0, stack: 3 },
        ];
        let mut seen = Vec::new();
        pm.measure(&blocks, |b, r, s| seen.push((b.stack, r, s))).unwrap();
        let p = page as u64;
        assert_eq!(seen, vec![(1, 10 * p, 0), (2, 3 * p / 2, 0), (3, 0, 0)]);

        // The same blocks with a buffer's worth of chunks: a block larger than the buffer.
        // SAFETY: the mapping made above, not used after this.
        unsafe { libc::munmap(p_ptr(base), len) };
        let big = BUF_PAGES * 2 + 3;
        // SAFETY: a fresh private anonymous mapping.
        let q = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                big * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(q, libc::MAP_FAILED);
        let qb = q as usize;
        for i in [0, BUF_PAGES - 1, BUF_PAGES, big - 1] {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile((qb + i * page) as *mut u8, 1) };
        }
        let mut seen = Vec::new();
        let one = [Block { addr: qb, size: (big * page) as u64, scale: 2.0, stack: 9 }];
        pm.measure(&one, |b, r, s| seen.push((b.stack, r, s))).unwrap();
        assert_eq!(seen, vec![(9, 4 * p, 0)]);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(q, big * page) };
    }

    /// The time of the pagemap read for 100,000 live blocks of the host's heap (64 B to 64 KiB,
    /// a tenth of them freed again so that runs have holes), as a report with 100,000 live
    /// samples reads them. A measurement, not a check: BENCHMARKS.md quotes it
    /// (`cargo test --release --lib pagemap_read_time -- --ignored --nocapture`).
    #[test]
    #[ignore = "a measurement (BENCHMARKS.md)"]
    fn pagemap_read_time_for_100k_blocks() {
        let n = 100_000;
        let mut held: Vec<Vec<u8>> = Vec::with_capacity(n);
        let mut blocks = Vec::with_capacity(n);
        let mut x: u64 = 1;
        for i in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let size = 64usize << ((x >> 33) % 11);
            let v = vec![1u8; size];
            blocks.push(Block {
                addr: v.as_ptr() as usize,
                size: size as u64,
                scale: 1.0,
                stack: i as u32,
            });
            held.push(v);
        }
        for v in held.iter_mut().step_by(10) {
            *v = Vec::new();
        }
        blocks.sort_unstable_by_key(|b| b.addr);
        let mut pm = Pagemap::open().expect("pagemap readable");
        let mut best = f64::MAX;
        let mut resident = 0;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            resident = 0;
            pm.measure(&blocks, |_, r, _| resident += r).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let bytes: u64 = blocks.iter().map(|b| b.size).sum();
        println!(
            "pagemap read for {n} blocks ({:.1} MiB, {:.1} MiB resident): best of 5 {:.1} ms",
            bytes as f64 / 1048576.0,
            resident as f64 / 1048576.0,
            best * 1e3
        );
        assert!(resident > 0);
    }

    fn p_ptr(a: usize) -> *mut libc::c_void {
        a as *mut libc::c_void
    }
}
