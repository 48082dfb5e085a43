//! Refused giant allocations: what is said at once, from inside the allocation function, and
//! what is kept for later.
//!
//! A request of at least `YING_MAX_ALLOC_BYTES` is refused before anything is allocated, and
//! the stack that asked is worth reporting. But the refusal runs inside `malloc`, which must
//! not block, do file I/O or be a cancellation point, and symbolizing means reading debug info
//! from files under the symbol cache's lock (a thread cancelled there would leave the lock
//! taken forever). So the refusal does only this:
//!
//! - it prints the request and its raw frames as `module+0xoffset` lines, found with glibc's
//!   lock-free `_dl_find_object` and written with the raw `write` system call (no lock, no
//!   allocation, not a cancellation point);
//! - it keeps the stack's instruction pointers in a small ring ([`KEPT`] slots, written without
//!   a lock under a per-slot sequence count).
//!
//! Report time symbolizes the kept stacks: every snapshot carries them
//! (`Snapshot::giant_refusals`), the text report lists them, and the report writer prints each
//! one, named, to stderr once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

use crate::engine::capture::MAX_FRAMES;

/// Refusals kept for report time (the most recent ones).
pub(crate) const KEPT: usize = 16;

struct Slot {
    /// 0: empty; odd: being written; otherwise `2 * number`, the refusal's number (from 1).
    seq: AtomicU64,
    size: AtomicU64,
    n: AtomicUsize,
    ips: [AtomicUsize; MAX_FRAMES],
}

static SLOTS: [Slot; KEPT] = [const {
    Slot {
        seq: AtomicU64::new(0),
        size: AtomicU64::new(0),
        n: AtomicUsize::new(0),
        ips: [const { AtomicUsize::new(0) }; MAX_FRAMES],
    }
}; KEPT];

/// Refusals recorded so far.
static RECORDED: AtomicU64 = AtomicU64::new(0);

/// Keeps a refusal of `size` bytes requested at `ips`; returns its number (from 1).
pub(crate) fn record(size: u64, ips: &[usize]) -> u64 {
    let number = RECORDED.fetch_add(1, Ordering::Relaxed) + 1;
    let slot = &SLOTS[(number as usize - 1) % KEPT];
    slot.seq.store(2 * number - 1, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.size.store(size, Ordering::Relaxed);
    let n = ips.len().min(MAX_FRAMES);
    for (dst, ip) in slot.ips.iter().zip(ips) {
        dst.store(*ip, Ordering::Relaxed);
    }
    slot.n.store(n, Ordering::Relaxed);
    slot.seq.store(2 * number, Ordering::Release);
    number
}

/// A kept refusal, not yet symbolized.
#[derive(Debug, Clone)]
pub(crate) struct RawRefusal {
    pub(crate) number: u64,
    pub(crate) size: u64,
    pub(crate) ips: Vec<usize>,
}

/// The kept refusals, oldest first (a slot being rewritten at this moment is skipped).
pub(crate) fn recent() -> Vec<RawRefusal> {
    let mut out = Vec::new();
    for slot in SLOTS.iter() {
        let s1 = slot.seq.load(Ordering::Acquire);
        if s1 == 0 || s1 & 1 == 1 {
            continue;
        }
        let size = slot.size.load(Ordering::Relaxed);
        let n = slot.n.load(Ordering::Relaxed).min(MAX_FRAMES);
        let ips: Vec<usize> =
            slot.ips.iter().take(n).map(|ip| ip.load(Ordering::Relaxed)).collect();
        fence(Ordering::Acquire);
        if slot.seq.load(Ordering::Relaxed) == s1 {
            out.push(RawRefusal { number: s1 / 2, size, ips });
        }
    }
    out.sort_by_key(|r| r.number);
    out
}

/// A line buffer on the stack: formatting into it never allocates; a line too long is cut.
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Self { buf: [0; 512], len: 0 }
    }
    fn push(&mut self, bytes: &[u8]) {
        let room = self.buf.len() - 1 - self.len;
        let n = bytes.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }
    fn finish(mut self) {
        self.buf[self.len] = b'\n';
        crate::sys::write_stderr(&self.buf[..self.len + 1]);
    }
}

impl std::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

/// Prints refusal `number` of `size` bytes (limit `limit`) and its raw frames, from inside the
/// allocation function: no allocation, no lock, no cancellation point.
pub(crate) fn print_raw(number: u64, size: u64, limit: u64, ips: &[usize]) {
    use std::fmt::Write as _;
    let mut l = Line::new();
    let _ = write!(
        l,
        "ying: refused a single allocation of {size} bytes (limit {limit} bytes, \
         YING_MAX_ALLOC_BYTES; refusal #{number}); requested at:"
    );
    l.finish();
    for &ip in ips {
        let mut l = Line::new();
        l.push(b"ying:   ");
        match crate::stack::unwind::object_of(ip) {
            Some((bias, name)) => {
                l.push(short_name(name));
                let _ = write!(l, "+{:#x}", ip.wrapping_sub(bias));
            }
            None => {
                let _ = write!(l, "{ip:#x}");
            }
        }
        l.finish();
    }
    let mut l = Line::new();
    let _ = write!(l, "ying: (refusal #{number} is named with file:line in the next report)");
    l.finish();
}

unsafe extern "C" {
    /// glibc's short name of the program (the last component of `argv[0]`).
    static program_invocation_short_name: *const libc::c_char;
}

/// The last path component of a loaded object's name; the program's own name when it is the
/// main executable (whose name the loader leaves empty).
fn short_name(name: *const libc::c_char) -> &'static [u8] {
    // SAFETY: `name` is null or a loader-owned NUL-terminated string that lives as long as the
    // object is loaded (it is on our stack); glibc's program name lives for the whole process.
    let full: &'static [u8] = unsafe {
        let n = if name.is_null() || *name == 0 { program_invocation_short_name } else { name };
        if n.is_null() { b"?" } else { std::ffi::CStr::from_ptr(n).to_bytes() }
    };
    match full.iter().rposition(|&b| b == b'/') {
        Some(i) => &full[i + 1..],
        None => full,
    }
}
