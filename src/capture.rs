//! Raw stack capture for sampled allocations: instruction pointers only, into a fixed array,
//! with no lock and no allocation of our own. Symbols are resolved much later, at report time.
//!
//! Our own frames are dropped by address, not by a fixed count. Frames whose canonical frame
//! address lies below a local of [`capture`] belong to the unwinder. Among the next few frames,
//! everything up to the last one the host recognises as its own (the shim: any address inside
//! `libying.so`; the Rust front end: the `GlobalAlloc` methods, found by function start address)
//! is profiler code; the frames after it belong to the program. If no entry frame is seen (an
//! entry point that tail-called into the hooks), profiler frames stay at the top of the stack;
//! they are `ying_profiler::` functions, which reports hide (`Frame::is_noise`).

use crate::hooks::Host;

/// Deepest stack kept (frames beyond it are cut off).
pub const MAX_FRAMES: usize = 64;

/// How far down the captured frames the host's entry frame is looked for.
const ENTRY_SEARCH: usize = 16;

/// Captures the calling program's stack into `out` and returns the number of frames. Inlined
/// into its callers: every profiler frame on the stack is one more frame to unwind per sample.
#[inline(always)]
pub(crate) fn capture<H: Host>(out: &mut [usize; MAX_FRAMES]) -> usize {
    let marker = 0u8;
    let marker_addr = std::hint::black_box(&marker) as *const u8 as usize;
    let mut n = 0usize;
    let mut last_entry: Option<usize> = None;
    let mut past_entry = false;
    let mut seen = 0usize;
    // SAFETY: on Linux `trace_unsynchronized` calls libgcc's thread-safe `_Unwind_Backtrace`;
    // the only requirement is that the callback does not re-enter the synchronized tracer,
    // which it does not. The callback neither allocates nor panics (bounded `get_mut`).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            if ip == 0 || (frame.sp() as usize) <= marker_addr && seen == 0 {
                return true;
            }
            // Look for the entry point only until the first program frame after it (the check
            // can cost a function-table search per frame).
            if seen < ENTRY_SEARCH && !past_entry {
                if H::is_entry_frame(frame) {
                    last_entry = Some(seen);
                } else if last_entry.is_some() {
                    past_entry = true;
                }
            }
            seen += 1;
            match out.get_mut(n) {
                Some(slot) => {
                    *slot = ip;
                    n += 1;
                    // Keep unwinding a little past a full buffer only while the entry frame
                    // may still be ahead.
                    n < MAX_FRAMES
                }
                None => false,
            }
        });
    }
    if let Some(e) = last_entry {
        let drop = e + 1;
        out.copy_within(drop.min(n)..n, 0);
        n = n.saturating_sub(drop);
    }
    n
}
