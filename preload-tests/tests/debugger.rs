//! A debugger stopped inside glibc's allocator walks through the shim's hand-written entries to
//! the program's frames. `programs/debugger_frames.c` (no frame pointers: only call frame
//! information unwinds) calls `malloc`, `calloc`, `realloc`, `memalign` and `aligned_alloc`
//! from marker functions; gdb stops in glibc's function at each and prints the backtrace. The
//! run without the shim is the control: the marker is the frame right after glibc's. Under the
//! shim, the shim's entry comes between, and nothing else: before the entries described their
//! push, gdb read the pushed request as a return address (`0x3039 in ?? ()` for 12345).

use preload_tests::{Run, TestDir, preload_lib};

/// (marker, glibc's function, the argument register that holds the marker's request, request)
const CALLS: &[(&str, &str, &str, u64)] = &[
    ("marker_malloc", "__libc_malloc", "$rdi", 12345),
    ("marker_calloc", "__libc_calloc", "$rsi", 12346),
    ("marker_realloc", "__libc_realloc", "$rsi", 12347),
    ("marker_memalign", "__libc_memalign", "$rsi", 12348),
    ("marker_aligned_alloc", "__libc_memalign", "$rsi", 12352),
];

/// gdb's backtraces at each of [`CALLS`] in `exe`, with the shim preloaded in the debuggee or
/// not: one `Vec` of frame lines per stop, in the order of the calls.
fn backtraces(dir: &TestDir, exe: &std::path::Path, shim: bool) -> Vec<Vec<String>> {
    let mut script =
        String::from("set pagination off\nset confirm off\nset breakpoint pending on\n");
    if shim {
        script.push_str(&format!("set environment LD_PRELOAD={}\n", preload_lib().display()));
        script.push_str("set environment YING_REPORT_AT_EXIT=false\n");
    }
    for (_, function, register, request) in CALLS {
        script.push_str(&format!("break {function} if {register} == {request}\n"));
    }
    script.push_str("run\n");
    for _ in CALLS {
        script.push_str("echo ==stop\\n\nbt 8\ncontinue\n");
    }
    let path = dir.join(if shim { "shim.gdb" } else { "plain.gdb" });
    std::fs::write(&path, script).expect("write the gdb script");
    // gdb itself runs without the shim: only the debuggee gets it, through `set environment`.
    let out = Run::new("gdb")
        .args(&["-q", "-batch", "-nx", "-x"])
        .arg(&path)
        .arg(exe)
        .without_preload()
        .timeout(std::time::Duration::from_secs(120))
        .run();
    out.assert_success("gdb");
    let text = out.stdout_str();
    let stops: Vec<Vec<String>> = text
        .split("==stop\n")
        .skip(1)
        .map(|s| s.lines().filter(|l| l.starts_with('#')).map(str::to_string).collect())
        .collect();
    assert_eq!(stops.len(), CALLS.len(), "gdb did not stop at every call:\n{text}");
    stops
}

#[test]
fn gdb_walks_through_the_shims_entries_to_the_program() {
    let dir = TestDir::new("debugger");
    let exe = dir.compile_c("debugger_frames.c", &["-O2", "-fomit-frame-pointer"]);
    let plain = backtraces(&dir, &exe, false);
    let shim = backtraces(&dir, &exe, true);
    for (i, (marker, function, _, _)) in CALLS.iter().enumerate() {
        let (p, s) = (&plain[i], &shim[i]);
        // The control: glibc's function, then the marker.
        assert!(
            p.len() >= 3 && p[1].contains(marker) && p.iter().any(|l| l.contains("main")),
            "{marker}: without the shim, gdb's backtrace from {function} is not the marker's:\n{}",
            p.join("\n")
        );
        assert!(
            s.len() >= 4
                && s[1].contains("libying.so")
                && s[2].contains(marker)
                && s.iter().any(|l| l.contains(" main ")),
            "{marker}: under the shim, gdb's backtrace from {function} does not go through the \
             shim's entry to the marker and main:\n{}",
            s.join("\n")
        );
        assert!(
            !s.iter().take_while(|l| !l.contains(" main ")).any(|l| l.contains("?? ()")),
            "{marker}: an unknown frame before main under the shim:\n{}",
            s.join("\n")
        );
    }
}
