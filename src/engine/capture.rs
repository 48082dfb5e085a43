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
//!
//! An entry point that knows the program's frame skips that search: the shim's `malloc` (the
//! call that takes most samples) hands its return address, stack pointer and `rbp` on
//! ([`CallerFrame`]), and the caching unwinder starts there, without looking up the three or
//! four profiler frames above it (about 100 instructions each, callgrind). If that walk fails,
//! libgcc unwinds from the top as usual.

use std::mem::MaybeUninit;

use crate::engine::host::Host;
use crate::engine::thread_state::ThreadState;
use crate::stack::unwind::{self, CallerFrame};

pub use crate::engine::tables::MAX_FRAMES;

/// How far down the captured frames the host's entry frame is looked for.
const ENTRY_SEARCH: usize = 16;

/// The buffer a capture writes into, left uninitialised: zeroing its 512 bytes was 49
/// instructions a sample (callgrind), for slots a shallow stack never uses.
pub(crate) type FrameBuf = [MaybeUninit<usize>; MAX_FRAMES];

/// An empty [`FrameBuf`] (no slot written).
#[inline(always)]
pub(crate) fn frame_buf() -> FrameBuf {
    [MaybeUninit::uninit(); MAX_FRAMES]
}

/// Keeps the program's frames of an unwind: drops the host's entry frames and everything above.
/// Invariant: `out[..n]` and `lows[..n]` are written. `lows` comes last (`repr(C)`): next to
/// the zeroed fields, the optimiser zeroed the uninitialised array with them (a 529-byte
/// `memset` a sample).
#[repr(C)]
struct Collector<'a> {
    out: &'a mut FrameBuf,
    n: usize,
    last_entry: Option<usize>,
    past_entry: bool,
    /// Frames searched for the entry point (see `push`).
    seen: usize,
    /// The front end's own code, `[own_start, own_start + own_len)`, read once an unwind
    /// (`Host::own_code`) rather than once a frame.
    own_start: usize,
    own_len: usize,
    /// Each kept frame's lowest stack address (for [`crate::engine::python::insert`]).
    lows: FrameBuf,
}

impl<'a> Collector<'a> {
    fn new<H: Host>(out: &'a mut FrameBuf) -> Self {
        let own = H::own_code();
        Self {
            out,
            n: 0,
            last_entry: None,
            past_entry: false,
            seen: 0,
            own_start: own.start,
            own_len: own.end.saturating_sub(own.start),
            lows: frame_buf(),
        }
    }

    /// Takes one frame, innermost first; false once no more frames are wanted.
    #[inline(always)]
    fn push<H: Host>(&mut self, ip: usize, sp: usize, function: impl FnOnce() -> usize) -> bool {
        // Look for the entry point only until the first program frame after it (the check
        // can cost a function-table search per frame). `seen` counts the frames searched: it
        // matters only there (an unwind that starts at the program's frame, past the entry,
        // tests one flag a frame).
        if !self.past_entry && self.seen < ENTRY_SEARCH {
            if H::is_entry_frame(ip, function) {
                self.last_entry = Some(self.seen);
            } else if self.last_entry.is_some() {
                self.past_entry = true;
            }
            self.seen += 1;
        }
        if self.past_entry {
            return self.push_program(ip, sp);
        }
        self.keep(ip, sp)
    }

    /// [`Collector::push`] once past the entry frames (an unwind that starts at the program's
    /// frame): only the test for the front end's own code is left.
    #[inline(always)]
    fn push_program(&mut self, ip: usize, sp: usize) -> bool {
        if ip.wrapping_sub(self.own_start) < self.own_len {
            // Below the program's frames: the front end's thread-start frame. Not the program's.
            return true;
        }
        self.keep(ip, sp)
    }

    /// Keeps a program frame; false once the buffer is full.
    #[inline(always)]
    fn keep(&mut self, ip: usize, sp: usize) -> bool {
        match self.out.get_mut(self.n) {
            Some(slot) => {
                slot.write(ip);
                if let Some(low) = self.lows.get_mut(self.n) {
                    low.write(sp);
                }
                self.n += 1;
                // Keep unwinding a little past a full buffer only while the entry frame may
                // still be ahead.
                self.n < MAX_FRAMES
            }
            None => false,
        }
    }

    /// Moves the program's frames to the front of `out` and puts the calling thread's Python
    /// frames in (`engine/python/`) when the process runs an interpreter Ying reads; returns
    /// how many frames there are, all written and at most `MAX_FRAMES`. By reference: a
    /// collector passed by value was copied whole (its 512-byte `lows`: an 88-instruction
    /// `memcpy` a sample), its address having gone to the unwinder.
    #[inline(always)]
    fn settle(&mut self) -> usize {
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
            // The Python merge reads whole arrays: the slots past `n` are given a value first.
            for i in n..MAX_FRAMES {
                if let (Some(o), Some(l)) = (self.out.get_mut(i), self.lows.get_mut(i)) {
                    o.write(0);
                    l.write(0);
                }
            }
            // SAFETY: every slot of both arrays is written now (`..n` by `push` and the
            // `copy_within` of written slots, the rest just above), and `MaybeUninit<usize>`
            // has `usize`'s layout, so both are valid `[usize; MAX_FRAMES]`.
            let (ips, lows) = unsafe {
                (
                    &mut *(self.out as *mut FrameBuf).cast::<[usize; MAX_FRAMES]>(),
                    &*(&self.lows as *const FrameBuf).cast::<[usize; MAX_FRAMES]>(),
                )
            };
            n = crate::engine::python::insert(ips, lows, n);
        }
        n.min(MAX_FRAMES)
    }
}

/// The first `n` frames of `out`, which [`Collector::settle`] returned.
#[inline(always)]
fn written(out: &FrameBuf, n: usize) -> &[usize] {
    let n = n.min(MAX_FRAMES);
    // SAFETY: `settle` left `out[..n]` written, and `MaybeUninit<usize>` has `usize`'s layout.
    unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<usize>(), n) }
}

/// Captures the calling program's stack into `out` and returns the number of frames: with the
/// caching unwinder (`unwind`) when it can follow every frame, else with libgcc. Inlined into
/// its callers: every profiler frame on the stack is one more frame to unwind per sample.
/// `caller`, when the entry point knew it, is the program's innermost frame: the caching
/// unwinder starts there instead of walking the profiler's own frames up to it.
#[inline(always)]
pub(crate) fn capture<'b, H: Host>(
    ts: &ThreadState,
    out: &'b mut FrameBuf,
    caller: Option<CallerFrame>,
) -> &'b [usize] {
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
    let mut c = Collector::new::<H>(out);
    let walked = match caller {
        Some(caller) => {
            // The entry frames are already behind the first frame: no search for them.
            c.past_entry = true;
            unwind::trace_from(stack, caller, |f| c.push_program(f.ip, f.sp))
        }
        None => unwind::trace(stack, |f| c.push::<H>(f.ip, f.sp, || f.function)),
    };
    match walked {
        Ok(()) => {
            let n = c.settle();
            written(c.out, n)
        }
        // libgcc starts from here whatever the caching unwinder started from: the profiler's
        // frames are dropped by address as usual.
        Err(unwind::Unsupported) => capture_libgcc::<H>(c.out),
    }
}

/// The same with libgcc's unwinder. Out of line: inlined, its collector and the caching
/// unwinder's were copied to one place for a shared `finish` (an 88-instruction `memcpy` on
/// every sample); its own frame is dropped with the profiler's other frames.
#[cold]
#[inline(never)]
fn capture_libgcc<H: Host>(out: &mut FrameBuf) -> &[usize] {
    let mut c = Collector::new::<H>(out);
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
    let n = c.settle();
    written(c.out, n)
}
