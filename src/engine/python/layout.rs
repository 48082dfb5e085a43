//! What Ying knows of each CPython version's memory layout: one row per minor version, read from
//! that version's own headers (`Py_BUILD_CORE`, `offsetof`) on x86_64, so that a new version is a
//! new row and never new code. `scripts/python-layout.c` prints a row from a version's headers;
//! `preload-tests/tests/python_frames.rs` checks the rows against the headers installed here.

/// How the frames run by one `_PyEval_EvalFrameDefault` activation are told from the next
/// activation's, and where on the C stack that activation's mark lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// 3.11: the outermost frame of an activation has `is_entry` set (a byte at `flag`), and each
    /// activation's `_PyCFrame` is a local of it, linked from the thread state's `cframe` through
    /// `previous`: the k-th `_PyCFrame` marks the k-th run of frames.
    Flag { flag: usize, cframe_previous: usize },
    /// 3.12 and later: each activation links a frame of its own (a local, owner
    /// `FRAME_OWNED_BY_CSTACK`) below the frames it runs: that frame's address is the mark.
    CStackOwner { value: u8 },
}

/// One CPython version's offsets (bytes, x86_64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `(major << 8) | minor`.
    pub(crate) version: u16,
    /// `_PyRuntime`: the `Py_tss_t` of the thread-state key (`autoTSSkey`), and `_finalizing`.
    pub(crate) runtime_tss: usize,
    pub(crate) runtime_finalizing: usize,
    /// `PyThreadState`: the `_PyCFrame *cframe` (then `current_frame` at `cframe_current` in it),
    /// or, with `cframe_current` None, the `_PyInterpreterFrame *current_frame` itself.
    pub(crate) tstate_frame: usize,
    pub(crate) cframe_current: Option<usize>,
    /// `_PyInterpreterFrame`: the code object (`f_code`, `f_executable`), the next frame out,
    /// the instruction pointer (`prev_instr`, `instr_ptr`) and the owner byte.
    pub(crate) frame_code: usize,
    pub(crate) frame_previous: usize,
    pub(crate) frame_instr: usize,
    pub(crate) frame_owner: usize,
    pub(crate) entry: Entry,
    /// `PyCodeObject`.
    pub(crate) code_filename: usize,
    pub(crate) code_name: usize,
    pub(crate) code_qualname: usize,
    pub(crate) code_firstlineno: usize,
    pub(crate) code_linetable: usize,
    /// Where the bytecode starts (`co_code_adaptive`); instruction offsets count 2-byte units.
    pub(crate) code_adaptive: usize,
    /// The size of `PyASCIIObject` (a compact ASCII string's characters follow it) and of
    /// `PyCompactUnicodeObject` (any other compact string's do).
    pub(crate) ascii_size: usize,
    pub(crate) compact_size: usize,
}

/// `PyObject`: the reference count and the type (all versions here).
pub(crate) const OB_REFCNT: usize = 0;
pub(crate) const OB_TYPE: usize = 8;
/// `PyVarObject.ob_size` (a bytes object's length) and `PyBytesObject.ob_sval`.
pub(crate) const BYTES_SIZE: usize = 16;
pub(crate) const BYTES_DATA: usize = 32;
/// `PyASCIIObject`: `length` (in characters) and the `state` bit field (`kind` in bits 2..5,
/// `compact` bit 5, `ascii` bit 6: the same in 3.11 to 3.13).
pub(crate) const STR_LENGTH: usize = 16;
pub(crate) const STR_STATE: usize = 32;
/// `Py_tss_t._key` (a `pthread_key_t` after an `int`).
pub(crate) const TSS_KEY: usize = 4;

/// Every version Ying reads.
pub(crate) const ROWS: &[Layout] = &[
    Layout {
        version: 0x030b,
        runtime_tss: 592,
        runtime_finalizing: 24,
        tstate_frame: 56,
        cframe_current: Some(8),
        frame_code: 32,
        frame_previous: 48,
        frame_instr: 56,
        frame_owner: 69,
        entry: Entry::Flag { flag: 68, cframe_previous: 16 },
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_firstlineno: 72,
        code_linetable: 136,
        code_adaptive: 184,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        version: 0x030c,
        runtime_tss: 1544,
        runtime_finalizing: 24,
        tstate_frame: 56,
        cframe_current: Some(0),
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        entry: Entry::CStackOwner { value: 3 },
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_firstlineno: 68,
        code_linetable: 136,
        code_adaptive: 192,
        ascii_size: 40,
        compact_size: 56,
    },
    Layout {
        version: 0x030d,
        runtime_tss: 2160,
        runtime_finalizing: 608,
        tstate_frame: 72,
        cframe_current: None,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        entry: Entry::CStackOwner { value: 3 },
        code_filename: 112,
        code_name: 120,
        code_qualname: 128,
        code_firstlineno: 68,
        code_linetable: 136,
        code_adaptive: 200,
        ascii_size: 40,
        compact_size: 56,
    },
];

/// The row of `Py_Version` (`PY_VERSION_HEX`: major, minor, micro, level, serial bytes).
pub(crate) fn row(py_version: u32) -> Option<&'static Layout> {
    let v = (py_version >> 16) as u16;
    ROWS.iter().find(|r| r.version == v)
}
