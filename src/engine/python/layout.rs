//! What Ying knows of each CPython version's memory layout: one row per minor version, read from
//! that version's own headers (`Py_BUILD_CORE`, `offsetof`) on x86_64, so that a new version is a
//! new row and never new code. `scripts/python-layout.c` prints a row from a version's headers;
//! this module's test compiles it against the headers of every interpreter installed and
//! compares.

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `row` and the shared constants, named as `scripts/python-layout.c` prints
    /// them.
    fn printed(row: &Layout) -> Vec<(String, usize)> {
        let mut v = vec![
            ("version", usize::from(row.version)),
            ("runtime_tss", row.runtime_tss),
            ("runtime_finalizing", row.runtime_finalizing),
            ("tstate_frame", row.tstate_frame),
        ];
        if let Some(c) = row.cframe_current {
            v.push(("cframe_current", c));
        }
        v.extend([
            ("frame_code", row.frame_code),
            ("frame_instr", row.frame_instr),
            ("frame_previous", row.frame_previous),
            ("frame_owner", row.frame_owner),
        ]);
        match row.entry {
            Entry::Flag { flag, cframe_previous } => {
                v.push(("entry_flag", flag));
                v.push(("entry_cframe_previous", cframe_previous));
            }
            Entry::CStackOwner { value } => v.push(("entry_cstack_owner", usize::from(value))),
        }
        v.extend([
            ("code_filename", row.code_filename),
            ("code_name", row.code_name),
            ("code_qualname", row.code_qualname),
            ("code_firstlineno", row.code_firstlineno),
            ("code_linetable", row.code_linetable),
            ("code_adaptive", row.code_adaptive),
            ("ascii_size", row.ascii_size),
            ("compact_size", row.compact_size),
            ("ob_refcnt", OB_REFCNT),
            ("ob_type", OB_TYPE),
            ("bytes_size", BYTES_SIZE),
            ("bytes_data", BYTES_DATA),
            ("str_length", STR_LENGTH),
            ("tss_key", TSS_KEY),
        ]);
        v.into_iter().map(|(k, n)| (k.to_string(), n)).collect()
    }

    /// Every interpreter's headers found on this machine (the system's `python3.X-dev`,
    /// pyenv's builds) give the row Ying has for that version.
    #[test]
    fn rows_match_the_headers_of_every_interpreter_installed() {
        let mut dirs: Vec<std::path::PathBuf> = Vec::new();
        for minor in 11..=13 {
            dirs.push(format!("/usr/include/python3.{minor}").into());
        }
        let pyenv =
            std::env::var("PYENV_ROOT").map(std::path::PathBuf::from).unwrap_or_else(|_| {
                std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv")
            });
        if let Ok(rd) = std::fs::read_dir(pyenv.join("versions")) {
            for e in rd.flatten() {
                if let Ok(inc) = std::fs::read_dir(e.path().join("include")) {
                    dirs.extend(inc.flatten().map(|i| i.path()));
                }
            }
        }
        // 3.11 and later (earlier versions have no `co_qualname`, and Ying does not read them).
        let minor = |d: &std::path::Path| -> Option<u32> {
            d.file_name()?.to_str()?.strip_prefix("python3.")?.parse().ok()
        };
        dirs.retain(|d| d.join("internal/pycore_frame.h").exists() && minor(d) >= Some(11));
        let out = std::env::temp_dir().join(format!("ying-python-layout-{}", std::process::id()));
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/python-layout.c");
        let mut checked = 0;
        for dir in &dirs {
            let built = std::process::Command::new("gcc")
                .arg(format!("-I{}", dir.display()))
                .arg(source)
                .arg("-o")
                .arg(&out)
                .output();
            let Ok(built) = built else {
                eprintln!("SKIPPED: gcc is not installed");
                return;
            };
            assert!(
                built.status.success(),
                "scripts/python-layout.c does not build against {}: {}",
                dir.display(),
                String::from_utf8_lossy(&built.stderr)
            );
            let run = std::process::Command::new(&out).output().expect("the layout program runs");
            let text = String::from_utf8_lossy(&run.stdout);
            let theirs: Vec<(String, usize)> = text
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
                .collect();
            let version = theirs.first().map(|(_, v)| *v as u32).expect("a version line");
            let row = row((version >> 8) << 24 | (version & 0xff) << 16)
                .unwrap_or_else(|| panic!("no row for the headers in {}", dir.display()));
            assert_eq!(printed(row), theirs, "{}", dir.display());
            checked += 1;
        }
        let _ = std::fs::remove_file(&out);
        if checked == 0 {
            eprintln!("SKIPPED: no CPython 3.11+ headers with internal/ found");
        }
        eprintln!("{checked} interpreters' headers checked");
    }
}
