/* Prints the row of `src/engine/python/layout.rs` for the CPython whose headers are on the
 * include path: `gcc -I/usr/include/python3.11 scripts/python-layout.c && ./a.out`. The
 * library's layout test compiles it against every interpreter's headers it finds and compares. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_code.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_runtime.h"

#define ROW(name, value) printf("%s %zu\n", name, (size_t)(value))

int main(void) {
    ROW("version", (PY_MAJOR_VERSION << 8) | PY_MINOR_VERSION);
#if PY_VERSION_HEX < 0x030C0000
    ROW("runtime_tss", offsetof(_PyRuntimeState, gilstate.autoTSSkey));
#else
    ROW("runtime_tss", offsetof(_PyRuntimeState, autoTSSkey));
#endif
    ROW("runtime_finalizing", offsetof(_PyRuntimeState, _finalizing));
#if PY_VERSION_HEX < 0x030D0000
    ROW("tstate_frame", offsetof(PyThreadState, cframe));
    ROW("cframe_current", offsetof(_PyCFrame, current_frame));
    ROW("frame_code", offsetof(_PyInterpreterFrame, f_code));
    ROW("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
    ROW("tstate_frame", offsetof(PyThreadState, current_frame));
    ROW("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    ROW("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    ROW("frame_previous", offsetof(_PyInterpreterFrame, previous));
    ROW("frame_owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
    ROW("entry_flag", offsetof(_PyInterpreterFrame, is_entry));
    ROW("entry_cframe_previous", offsetof(_PyCFrame, previous));
#else
    ROW("entry_cstack_owner", FRAME_OWNED_BY_CSTACK);
#endif
    ROW("code_filename", offsetof(PyCodeObject, co_filename));
    ROW("code_name", offsetof(PyCodeObject, co_name));
    ROW("code_qualname", offsetof(PyCodeObject, co_qualname));
    ROW("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    ROW("code_linetable", offsetof(PyCodeObject, co_linetable));
    ROW("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    ROW("ascii_size", sizeof(PyASCIIObject));
    ROW("compact_size", sizeof(PyCompactUnicodeObject));
    /* The constants every row shares (layout.rs). */
    ROW("ob_refcnt", offsetof(PyObject, ob_refcnt));
    ROW("ob_type", offsetof(PyObject, ob_type));
    ROW("bytes_size", offsetof(PyVarObject, ob_size));
    ROW("bytes_data", offsetof(PyBytesObject, ob_sval));
    ROW("str_length", offsetof(PyASCIIObject, length));
    ROW("tss_key", offsetof(Py_tss_t, _key));
    return 0;
}
