//! A debugger stopped inside glibc's allocator walks through the shim's hand-written entries to
//! the program's frames. `programs/debugger_frames.c` (no frame pointers: only call frame
//! information unwinds) calls `malloc`, `calloc`, `realloc`, `memalign` and `aligned_alloc`
//! from marker functions; gdb stops in glibc's function at each and prints the backtrace. The
//! run without the shim is the control: the marker is the frame right after glibc's. Under the
//! shim, the shim's entry comes between, and nothing else: before the entries described their
//! push, gdb read the pushed request as a return address (`0x3039 in ?? ()` for 12345). Last,
//! gdb stops at the program's `syscall(SYS_getppid)`, inside the shim's `syscall` (glibc's in
//! the control), which must lead to its marker and main too (gdb finds that frame by its own
//! analysis even without call frame information, as the entry does not touch the stack; libgcc
//! does not, which the second test checks).

use preload_tests::{Run, TestDir, preload_lib};

/// (marker, glibc's function, the argument register that holds the marker's request, request);
/// the last stop, at the system call, is [`SYSCALL_MARKER`]'s.
const CALLS: &[(&str, &str, &str, u64)] = &[
    ("marker_malloc", "__libc_malloc", "$rdi", 12345),
    ("marker_calloc", "__libc_calloc", "$rsi", 12346),
    ("marker_realloc", "__libc_realloc", "$rsi", 12347),
    ("marker_memalign", "__libc_memalign", "$rsi", 12348),
    ("marker_aligned_alloc", "__libc_memalign", "$rsi", 12352),
];

/// The marker of the `syscall(SYS_getppid)` call.
const SYSCALL_MARKER: &str = "marker_syscall";

/// gdb's backtraces at each of [`CALLS`] in `exe`, then at the `getppid` system call, with the shim preloaded in the debuggee or
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
    // The system call's entry, then its return (not looked at).
    script.push_str("catch syscall getppid\nrun\n");
    for _ in 0..=CALLS.len() {
        script.push_str("echo ==stop\\n\nbt 8\ncontinue\n");
    }
    script.push_str("continue\n");
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
    assert_eq!(stops.len(), CALLS.len() + 1, "gdb did not stop at every call:\n{text}");
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
    // At the system call: `syscall` (glibc's, or the shim's), then the marker and main.
    for (what, bt) in
        [("without the shim", &plain[CALLS.len()]), ("under the shim", &shim[CALLS.len()])]
    {
        assert!(
            bt.len() >= 3
                && bt[0].contains("syscall")
                && bt[1].contains(SYSCALL_MARKER)
                && bt.iter().any(|l| l.contains(" main ")),
            "{what}: gdb's backtrace at the system call does not lead to {SYSCALL_MARKER} and \
             main:\n{}",
            bt.join("\n")
        );
    }
    assert!(shim[CALLS.len()][0].contains("libying.so"), "the system call was not the shim's");
}

/// libgcc's unwinder, which follows call frame information only, walks from a signal handler
/// through the shim's `syscall` (a thread waiting in `syscall(SYS_pause)`) to the function that
/// called it; the plain run is the control. Without the entry's call frame information it
/// stopped at the signal frame.
#[test]
fn a_signal_handlers_backtrace_walks_through_the_shims_syscall() {
    let dir = TestDir::new("unwind-syscall");
    let exe = dir.compile_c("unwind_syscall.c", &["-O2", "-fomit-frame-pointer", "-rdynamic"]);
    for preload in [false, true] {
        let run = Run::new(&exe).timeout(std::time::Duration::from_secs(30));
        let out = if preload {
            run.with_preload().env("YING_REPORT_AT_EXIT", "false").run()
        } else {
            run.without_preload().run()
        };
        out.assert_success(if preload {
            "unwind_syscall under the shim (the marker must be in the handler's backtrace)"
        } else {
            "unwind_syscall without the shim (the control)"
        });
        assert!(out.stdout_str().contains("marker found"), "{}", out.describe());
    }
}
