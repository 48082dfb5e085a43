//! Raw stack capture for sampled allocations: instruction pointers only, into a fixed array,
//! with no lock of our own on the common path and nothing resolved. Symbols come much later, at
//! report time. Stacks are walked by the caching unwinder (`unwind`) and, when it meets a frame
//! it does not follow, by libgcc's `_Unwind_Backtrace` from the start.
//!
//! Our own frames are dropped by address, not by a fixed count. Among the first few frames,
//! everything up to the last one the host recognises as its own (the shim: any address inside
//! `libying.so`; the Rust front end: the `GlobalAlloc` methods, found by function start address)
//! is profiler code; the frames after it belong to the program (under libgcc, frames whose
//! canonical frame address lies below a local of [`capture`] belong to the unwinder and are
//! skipped first). If no entry frame is seen (an entry point that tail-called into the hooks),
//! profiler frames stay at the top of the stack; they are `ying_profiler::` functions, which
//! reports hide (`Frame::is_noise`).

use crate::engine::host::Host;
use crate::engine::thread_state::ThreadState;

pub use crate::engine::tables::MAX_FRAMES;

/// How far down the captured frames the host's entry frame is looked for.
const ENTRY_SEARCH: usize = 16;

/// Keeps the program's frames of an unwind: drops the host's entry frames and everything above.
struct Collector<'a> {
    out: &'a mut [usize; MAX_FRAMES],
    /// Each kept frame's lowest stack address (for [`crate::engine::python::insert`]).
    lows: [usize; MAX_FRAMES],
    n: usize,
    last_entry: Option<usize>,
    past_entry: bool,
    seen: usize,
}

impl<'a> Collector<'a> {
    fn new(out: &'a mut [usize; MAX_FRAMES]) -> Self {
        Self { out, lows: [0; MAX_FRAMES], n: 0, last_entry: None, past_entry: false, seen: 0 }
    }

    /// Takes one frame, innermost first; false once no more frames are wanted.
    #[inline(always)]
    fn push<H: Host>(&mut self, ip: usize, sp: usize, function: impl FnOnce() -> usize) -> bool {
        // Look for the entry point only until the first program frame after it (the check
        // can cost a function-table search per frame).
        if self.seen < ENTRY_SEARCH && !self.past_entry {
            if H::is_entry_frame(ip, function) {
                self.last_entry = Some(self.seen);
            } else if self.last_entry.is_some() {
                self.past_entry = true;
            }
        }
        self.seen += 1;
        if self.past_entry && H::is_own_code(ip) {
            // Below the program's frames: the front end's thread-start frame. Not the program's.
            return true;
        }
        match self.out.get_mut(self.n) {
            Some(slot) => {
                *slot = ip;
                if let Some(low) = self.lows.get_mut(self.n) {
                    *low = sp;
                }
                self.n += 1;
                // Keep unwinding a little past a full buffer only while the entry frame may
                // still be ahead.
                self.n < MAX_FRAMES
            }
            None => false,
        }
    }

    /// The number of frames kept, with the calling thread's Python frames put in
    /// (`engine/python/`) when the process runs an interpreter Ying reads.
    fn finish(mut self) -> usize {
        let mut n = self.n;
        let python = crate::engine::python::active();
        if let Some(e) = self.last_entry {
            let drop = e + 1;
            self.out.copy_within(drop.min(n)..n, 0);
            if python {
                self.lows.copy_within(drop.min(n)..n, 0);
            }
            n = n.saturating_sub(drop);
        }
        if python {
            n = crate::engine::python::insert(self.out, &self.lows, n);
        }
        n
    }
}

/// Captures the calling program's stack into `out` and returns the number of frames: with the
/// caching unwinder (`unwind`) when it can follow every frame, else with libgcc. Inlined into
/// its callers: every profiler frame on the stack is one more frame to unwind per sample.
#[inline(always)]
pub(crate) fn capture<H: Host>(ts: &ThreadState, out: &mut [usize; MAX_FRAMES]) -> usize {
    let mut c = Collector::new(out);
    if ts.stack_top.get() == 0 {
        // Not recorded at thread start: look the bounds up only where that cannot wait on a
        // lock the thread holds (see `Host::LOOKS_UP_STACK_BOUNDS`); an empty range leaves the
        // walk to libgcc, which needs no bounds.
        let bounds = if H::LOOKS_UP_STACK_BOUNDS { crate::sys::stack_bounds() } else { None };
        let (lo, top) = bounds.unwrap_or((1, 1));
        ts.stack_lo.set(lo);
        ts.stack_top.set(top);
    }
    let stack = ts.stack_lo.get()..ts.stack_top.get();
    match crate::stack::unwind::trace(stack, |f| c.push::<H>(f.ip, f.sp, || f.function)) {
        Ok(()) => c.finish(),
        Err(crate::stack::unwind::Unsupported) => capture_libgcc::<H>(Collector::new(c.out)),
    }
}

/// The same with libgcc's unwinder.
#[inline(always)]
fn capture_libgcc<H: Host>(mut c: Collector<'_>) -> usize {
    let marker = 0u8;
    let marker_addr = std::hint::black_box(&marker) as *const u8 as usize;
    // libgcc gives each frame's CFA, the top of its activation: its lowest address is the CFA
    // of the frame before it.
    let mut low = marker_addr;
    // SAFETY: on Linux `trace_unsynchronized` calls libgcc's thread-safe `_Unwind_Backtrace`;
    // the only requirement is that the callback does not re-enter the synchronized tracer,
    // which it does not. The callback neither allocates nor panics (bounded `get_mut`).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            if ip == 0 || (frame.sp() as usize) <= marker_addr && c.seen == 0 {
                return true;
            }
            let sp = std::mem::replace(&mut low, frame.sp() as usize);
            c.push::<H>(ip, sp, || frame.symbol_address() as usize)
        });
    }
    c.finish()
}
