//! Python frames in native stacks: at sample time, the calling thread's CPython frame chain is
//! read and each Python frame (its code object's qualified name, file and line) is put at the
//! place of the `_PyEval_EvalFrameDefault` activation that runs it, so a stack reads from the
//! allocating C function up through the Python functions that called it to `main`.
//!
//! # Finding the frames
//!
//! The shim's constructor looks up `Py_Version`, `_PyRuntime`, `PyCode_Type` and
//! `PyUnicode_Type` in the global scope ([`detect`]): an interpreter linked into the
//! executable (Debian's `python3.11`, which exports them although it is stripped) or a
//! `libpython` it depends on (pyenv's builds). The version picks a row of [`layout::ROWS`]; an
//! interpreter of another version gets native frames only and one warning line. At a sample,
//! the thread's own thread state comes from the interpreter's thread-specific key
//! (`pthread_getspecific`, lock-free: the key is the one `PyGILState_GetThisThreadState`
//! reads), never from the thread holding the GIL, which may be another one: a C extension
//! allocates with the GIL released.
//!
//! Each activation of the evaluation loop marks its run of frames with a local on its C stack
//! (3.11: its `_PyCFrame`; 3.12 and later: its entry frame, owned by the C stack). The native
//! unwind gives each native frame's stack range, so each run of Python frames goes above the
//! native frame whose range holds its mark: no function address is matched (the loop's cold
//! part has no symbol in a stripped binary) and a run whose activation the unwind did not
//! reach is left out rather than put at another's place.
//!
//! # Why the reads are safe
//!
//! The read happens inside `malloc`, on any thread, with or without the GIL. It never calls
//! into Python, never allocates on the host's heap (code objects are copied into the profiler's
//! own, [`codes`]) and takes one spin lock of its own. It reads only the calling thread's own
//! frame chain, which no other thread changes: frames are pushed and popped by the thread that
//! runs them, and while that thread is inside `malloc` its chain stands still. Every frame
//! reachable from the thread state's current frame is live or being torn down, and a frame
//! holds a strong reference to its code object, which holds its strings and line table.
//! The one window where a linked frame's code object is not alive is its deallocation while
//! the frame is being cleared (its last reference dropped; weak-reference callbacks may run
//! Python code, and allocate, before the memory is freed): a code object is used only when
//! its reference count is positive and its type is the interpreter's `PyCode_Type`. An
//! interpreter that is finalizing (`_PyRuntime._finalizing` set: daemon threads' states may
//! be freed under them) is not read at all.
//!
//! Plain loads are used where this structure vouches for the address; checked reads
//! ([`read::Reader`]: `process_vm_readv`, which fails instead of faulting) wherever it does
//! not: the first [`CHECKED_WALKS`] walks of the process read everything checked, so that a
//! layout that does not fit the running interpreter turns Python frames off instead of
//! faulting, and a code object met for the first time is copied with checked reads.
//!
//! # What the stack table keeps
//!
//! A Python frame is one word, like an address: [`TAG`] (an address no user-space code has),
//! the code object's id and the line ([`encode`]). The report side names it through
//! [`describe`].

pub(crate) mod codes;
pub(crate) mod layout;
pub(crate) mod read;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use layout::{Entry, Layout};
use read::Reader;

/// Bit set in every Python frame's word: user-space addresses stay below 2^47.
pub(crate) const TAG: usize = 1 << 63;

/// Walks made with checked reads only, while the layout proves itself.
pub(crate) const CHECKED_WALKS: u32 = 32;

/// Most runs of Python frames (activations of the evaluation loop) looked at per stack.
const MAX_RUNS: usize = 32;

/// Most frames walked per stack (past the frames kept, the walk goes on only to find
/// where the runs end, so that deep recursion inside one activation still gets its innermost
/// frames placed): eight times CPython's default recursion limit.
const MAX_STEPS: usize = 8192;

/// The interpreter found at start.
#[derive(Debug)]
struct Interpreter {
    runtime: usize,
    types: codes::Types,
    layout: &'static Layout,
    version: u32,
}

static INTERPRETER: OnceLock<Interpreter> = OnceLock::new();
/// Python frames turned off (`YING_PYTHON_FRAMES=false`, or a walk's check failed).
static OFF: AtomicBool = AtomicBool::new(false);
/// A checked walk failed: the layout does not fit this interpreter.
static MISFIT: AtomicBool = AtomicBool::new(false);
/// Checked walks still to make.
static CHECKED_LEFT: AtomicU32 = AtomicU32::new(CHECKED_WALKS);

/// The word the stack table keeps for a Python frame: code object `id` at `line`.
pub(crate) fn encode(id: u32, line: u32) -> usize {
    TAG | ((id as usize & 0x7fff_ffff) << 32) | line as usize
}

/// The code object id and line of a Python frame's word, None for an address.
pub(crate) fn decode(word: usize) -> Option<(u32, u32)> {
    (word & TAG != 0).then_some((((word >> 32) & 0x7fff_ffff) as u32, word as u32))
}

/// The qualified name and file of the code object `id` (see [`decode`]).
pub(crate) fn describe(id: u32) -> Option<(String, String)> {
    codes::describe(id)
}

/// What [`detect`] found: for the report header.
pub(crate) fn interpreter_version() -> Option<String> {
    let i = INTERPRETER.get()?;
    Some(format!("{}.{}.{}", i.version >> 24, (i.version >> 16) & 0xff, (i.version >> 8) & 0xff))
}

/// The report header's words on Python frames: None when no interpreter Ying reads was found.
pub(crate) fn status() -> Option<String> {
    let v = interpreter_version()?;
    Some(if MISFIT.load(Ordering::Relaxed) {
        format!("CPython {v}, Python frames off: its memory did not fit Ying's layout for it")
    } else if OFF.load(Ordering::Relaxed) {
        format!("CPython {v}, Python frames off (YING_PYTHON_FRAMES=false)")
    } else {
        format!("CPython {v}, Python frames in every stack")
    })
}

/// Whether Python frames are being read (an interpreter was found and they are on).
pub(crate) fn active() -> bool {
    INTERPRETER.get().is_some() && !OFF.load(Ordering::Relaxed)
}

/// Looks for a CPython interpreter in the process (see the module docs). `lookup` finds a
/// symbol's address in the global scope (0: none). Returns a warning line for an interpreter
/// whose frames Ying cannot read. Runs once, from the shim's constructor.
pub fn detect(lookup: impl Fn(&std::ffi::CStr) -> usize, enabled: bool) -> Option<String> {
    let runtime = lookup(c"_PyRuntime");
    if runtime == 0 {
        return None;
    }
    let version_at = lookup(c"Py_Version");
    if version_at == 0 {
        return Some(
            "this Python is older than 3.11: its stacks show the interpreter's C functions, not the Python frames (Ying reads 3.11 to 3.13)".into(),
        );
    }
    // SAFETY: `Py_Version` is the interpreter's `const unsigned long`, exported since 3.11.
    let version = unsafe { (version_at as *const u32).read_unaligned() };
    let Some(layout) = layout::row(version) else {
        return Some(format!(
            "Python {}.{} is not a version Ying reads (3.11 to 3.13): its stacks show the interpreter's C functions, not the Python frames",
            version >> 24,
            (version >> 16) & 0xff
        ));
    };
    let types = codes::Types { code: lookup(c"PyCode_Type"), str: lookup(c"PyUnicode_Type") };
    if types.code == 0 || types.str == 0 {
        return Some("this Python exports no PyCode_Type: its stacks show the interpreter's C functions only".into());
    }
    let _ = INTERPRETER.set(Interpreter { runtime, types, layout, version });
    OFF.store(!enabled, Ordering::Relaxed);
    None
}

/// Puts the calling thread's Python frames into the native stack `ips[..n]` (innermost first;
/// `lows[i]` is the lowest stack address of native frame `i`'s activation) and returns the
/// new length (frames beyond `N` are cut, outermost first). Inside the profiler.
#[inline(never)]
pub(crate) fn insert<const N: usize>(ips: &mut [usize; N], lows: &[usize; N], n: usize) -> usize {
    let Some(int) = INTERPRETER.get() else { return n };
    if OFF.load(Ordering::Relaxed) || n == 0 {
        return n;
    }
    let checked = CHECKED_LEFT.load(Ordering::Relaxed) > 0;
    let rd = Reader { checked };
    let mut py = [0usize; N];
    let mut runs = [(0usize, 0usize, 0usize); MAX_RUNS];
    let walked = walk(int, rd, &mut py, &mut runs);
    if checked {
        match walked {
            Walk::Bad => {
                MISFIT.store(true, Ordering::Relaxed);
                OFF.store(true, Ordering::Relaxed);
                return n;
            }
            Walk::Runs(k) if k > 0 => {
                let _ = CHECKED_LEFT
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1));
            }
            _ => {}
        }
    }
    let Walk::Runs(k) = walked else { return n };
    if k == 0 {
        return n;
    }
    // Merge: runs (innermost first, marks rising) into the native frames whose range holds
    // their mark.
    let mut out = [0usize; N];
    let mut m = 0;
    let mut r = 0;
    for i in 0..n {
        let hi = if i + 1 < n { lows[i + 1] } else { usize::MAX };
        while r < k && runs[r].0 < lows[i] {
            r += 1; // Below this frame: its native frame was not kept.
        }
        while r < k && runs[r].0 < hi {
            let (_, from, to) = runs[r];
            for &w in &py[from..to] {
                if m < N {
                    out[m] = w;
                    m += 1;
                }
            }
            r += 1;
        }
        if m < N {
            out[m] = ips[i];
            m += 1;
        }
    }
    ips[..m].copy_from_slice(&out[..m]);
    m
}

enum Walk {
    /// Nothing to read (no thread state, no frame, the interpreter finalizing).
    Nothing,
    /// The number of runs found.
    Runs(usize),
    /// A checked read failed where the layout says a valid pointer must be.
    Bad,
}

/// Reads the calling thread's frames into `py` and their runs (mark, start, end in `py`) into
/// `runs`, innermost first.
fn walk<const N: usize>(
    int: &Interpreter,
    rd: Reader,
    py: &mut [usize; N],
    runs: &mut [(usize, usize, usize); MAX_RUNS],
) -> Walk {
    let lay = int.layout;
    let tss = int.runtime + lay.runtime_tss;
    // The runtime is the interpreter's static data: always mapped.
    let plain = Reader { checked: false };
    let (Some(init), Some(fin)) =
        (plain.i32(tss), plain.word(int.runtime + lay.runtime_finalizing))
    else {
        return Walk::Nothing;
    };
    if init != 1 || fin != 0 {
        return Walk::Nothing;
    }
    let Some(key) = plain.i32(tss + layout::TSS_KEY) else { return Walk::Nothing };
    // SAFETY: `key` is the interpreter's initialised thread-state key; `pthread_getspecific`
    // takes no lock and allocates nothing.
    let tstate = unsafe { libc::pthread_getspecific(key as libc::pthread_key_t) } as usize;
    if tstate == 0 {
        return Walk::Nothing;
    }
    let Some(holder) = rd.word(tstate + lay.tstate_frame) else { return Walk::Bad };
    let (mut frame, mut cframe) = match lay.cframe_current {
        Some(off) => match rd.word(holder + off) {
            Some(f) => (f, holder),
            None => return Walk::Bad,
        },
        None => (holder, 0),
    };
    let mut np = 0;
    let mut k = 0;
    let mut start = 0;
    let mut steps = 0;
    while frame != 0 && k < MAX_RUNS && steps < MAX_STEPS {
        steps += 1;
        let (Some(owner), Some(previous)) =
            (rd.byte(frame + lay.frame_owner), rd.word(frame + lay.frame_previous))
        else {
            return Walk::Bad;
        };
        let mut ends_run = None;
        match lay.entry {
            Entry::CStackOwner { value } if owner == value => {
                ends_run = Some(frame);
            }
            _ => {
                if np < N {
                    let (Some(code), Some(instr)) =
                        (rd.word(frame + lay.frame_code), rd.word(frame + lay.frame_instr))
                    else {
                        return Walk::Bad;
                    };
                    if let Some((id, line)) = codes::frame(rd, lay, int.types, code, instr) {
                        py[np] = encode(id, line);
                        np += 1;
                    }
                }
                if let Entry::Flag { flag, cframe_previous } = lay.entry {
                    let Some(is_entry) = rd.byte(frame + flag) else { return Walk::Bad };
                    if is_entry != 0 {
                        ends_run = Some(cframe);
                        cframe = rd.word(cframe + cframe_previous).unwrap_or(0);
                    }
                }
            }
        }
        if let Some(mark) = ends_run {
            runs[k] = (mark, start, np);
            k += 1;
            start = np;
        }
        frame = previous;
    }
    // A run cut by the step limit: 3.11 knows its mark (its activation's `_PyCFrame`) from the
    // start; later versions find it only at the run's end, so theirs is left out.
    if frame != 0 && np > start && k < MAX_RUNS && matches!(lay.entry, Entry::Flag { .. }) {
        runs[k] = (cframe, start, np);
        k += 1;
    }
    Walk::Runs(k)
}

/// `fork` prepare and after.
pub(crate) fn lock_for_fork() {
    codes::lock_for_fork();
}
pub(crate) fn unlock_after_fork() {
    codes::unlock_after_fork();
}
