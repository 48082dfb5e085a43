//! Every exported function behaves like glibc's, edge cases included (`programs/exports.c`
//! prints what C code can observe, and both runs must print the same), and the library exports
//! exactly the documented symbols.

use std::collections::BTreeSet;

use preload_tests::{
    EXACT, QUIET, Run, TestDir, compare, find_in_path, preload_lib, workspace_root,
};

const SIZE_MAX: u64 = u64::MAX;
const HALF: u64 = u64::MAX / 2;

/// The names of `EXPORTED_SYMBOLS` in preload/src/lib.rs.
const EXPECTED: [&str; 84] = [
    "_ZdaPv",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdaPvSt11align_val_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvm",
    "_ZdaPvmSt11align_val_t",
    "_ZdlPv",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdlPvm",
    "_ZdlPvmSt11align_val_t",
    "_Znam",
    "_ZnamRKSt9nothrow_t",
    "_ZnamSt11align_val_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_Znwm",
    "_ZnwmRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "accept",
    "accept4",
    "aligned_alloc",
    "bsd_signal",
    "calloc",
    "cfree",
    "clock_nanosleep",
    "dlclose",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "execv",
    "execve",
    "execveat",
    "execvp",
    "execvpe",
    "exit",
    "fexecve",
    "free",
    "free_aligned_sized",
    "free_sized",
    "malloc",
    "malloc_usable_size",
    "memalign",
    "mmap",
    "mmap64",
    "mremap",
    "munmap",
    "nanosleep",
    "pause",
    "poll",
    "posix_memalign",
    "ppoll",
    "prctl",
    "pselect",
    "pthread_cond_timedwait",
    "pthread_cond_wait",
    "pthread_create",
    "pvalloc",
    "read",
    "realloc",
    "reallocarray",
    "select",
    "seteuid",
    "setresuid",
    "setreuid",
    "setuid",
    "sigaction",
    "signal",
    "sigset",
    "sigsuspend",
    "sigtimedwait",
    "sigwait",
    "sigwaitinfo",
    "sleep",
    "syscall",
    "sysv_signal",
    "thrd_sleep",
    "usleep",
    "valloc",
    "wait",
    "wait4",
    "waitid",
    "waitpid",
];

/// The string literals of `pub const EXPORTED_SYMBOLS: [&str; N] = [...];` in the shim's source.
fn exported_symbols_in_source() -> Vec<String> {
    let path = workspace_root().join("preload/src/lib.rs");
    let src = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let start = src
        .find("pub const EXPORTED_SYMBOLS")
        .unwrap_or_else(|| panic!("no EXPORTED_SYMBOLS in {}", path.display()));
    let body = &src[start..];
    let open = body.find("= [").expect("EXPORTED_SYMBOLS has no `= [`") + 3;
    let close = body[open..].find("];").expect("EXPORTED_SYMBOLS has no `];`") + open;
    let mut names = Vec::new();
    let mut rest = &body[open..close];
    while let Some(q) = rest.find('"') {
        let after = &rest[q + 1..];
        let end = after.find('"').expect("unterminated string in EXPORTED_SYMBOLS");
        names.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    names
}

#[test]
fn exported_symbols_match_the_source_list() {
    let lib = preload_lib();
    let from_source = exported_symbols_in_source();
    assert_eq!(from_source, EXPECTED, "EXPORTED_SYMBOLS in preload/src/lib.rs changed");
    let nm = find_in_path("nm").expect("`nm` (binutils) is needed to list the exported symbols");
    let o = Run::new(nm).args(&["-D", "--defined-only"]).arg(&lib).run();
    o.assert_success("nm -D --defined-only libying.so");
    let mut exported = BTreeSet::new();
    for line in o.stdout_str().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match fields.as_slice() {
            [_, kind, name] | [kind, name] => (*kind, *name),
            _ => panic!("unexpected nm line {line:?}\n{}", o.describe()),
        };
        assert_eq!(
            kind,
            "T",
            "{name} is exported as {kind:?}, not as a function\n{}",
            o.describe()
        );
        exported.insert(name.to_string());
    }
    let expected: BTreeSet<String> = from_source.iter().cloned().collect();
    assert_eq!(
        exported,
        expected,
        "the dynamic symbols of {} differ from EXPORTED_SYMBOLS\n{}",
        lib.display(),
        o.describe()
    );
}

/// The shim's refusals on stderr: (size, first named frame) per refusal. A refusal prints its
/// raw frames at once (`ying: refused a single allocation of N bytes (...; refusal #K)`), and
/// the report written later names them (`ying: refusal #K (N bytes) was requested at:`).
fn refusals(lines: &[String]) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    let mut naming: Option<u64> = None;
    for l in lines {
        if let Some(rest) = l.strip_prefix("ying: refused a single allocation of ") {
            let size = rest.split(' ').next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let number = rest
                .split("refusal #")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            out.push((number, size, String::new()));
            naming = None;
        } else if let Some(rest) = l.strip_prefix("ying: refusal #") {
            naming = rest.split(' ').next().and_then(|n| n.parse().ok());
        } else if let Some(frame) = l.strip_prefix("ying:   ")
            && let Some(n) = naming
            && let Some(r) = out.iter_mut().find(|r| r.0 == n && r.2.is_empty())
        {
            r.2 = frame.to_string();
        }
    }
    out.into_iter().map(|(_, size, frame)| (size, frame)).collect()
}

fn check_refusals(c: &preload_tests::Comparison, expected_sizes: &[u64]) {
    let lines = c.with.ying_lines();
    let got = refusals(&lines);
    let sizes: Vec<u64> = got.iter().map(|r| r.0).collect();
    c.check(
        sizes == expected_sizes,
        format!("refused sizes {sizes:?}, expected {expected_sizes:?}"),
    );
    for (size, frame) in &got {
        c.check(
            frame.starts_with("main (") && frame.contains("exports.c:"),
            format!("refusal of {size} bytes does not name main in exports.c: {frame:?}"),
        );
    }
    // Nothing but refusal messages.
    for l in &lines {
        c.check(
            l.starts_with("ying: refused a single allocation of ")
                || l.starts_with("ying:   ")
                || l.starts_with("ying: refusal #")
                || l.starts_with("ying: (refusal #"),
            format!("unexpected `ying:` line {l:?}"),
        );
    }
}

#[test]
fn exports_behave_like_glibc_with_default_sampling() {
    let dir = TestDir::new("exports-default");
    let exe = dir.compile_c("exports.c", &["-ldl"]);
    let c = compare(&Run::new(&exe), QUIET, &dir.reports("default"));
    c.check(c.with.success(), "exports.c failed");
    // Every request of at least 64 GiB (the default YING_MAX_ALLOC_BYTES) is refused by the
    // shim, with ENOMEM as glibc would: malloc x2, calloc, realloc x2, posix_memalign,
    // aligned_alloc, memalign, valloc, pvalloc.
    check_refusals(&c, &[HALF, SIZE_MAX, HALF, HALF, SIZE_MAX, HALF, HALF, HALF, HALF, HALF]);
    let r = c.main_report();
    c.check(r.has("txt") && r.has("folded") && r.has("svg"), "incomplete report set");
}

#[test]
fn exports_behave_like_glibc_in_exact_mode() {
    // Every block sampled, so every free, realloc and failure path meets a live record; the
    // refusal limit at its maximum lets glibc itself fail the huge requests (only SIZE_MAX,
    // which is "at least" the limit, is still refused by the shim).
    let dir = TestDir::new("exports-exact");
    let exe = dir.compile_c("exports.c", &["-ldl"]);
    let mut vars = EXACT.to_vec();
    vars.push(("YING_MAX_ALLOC_BYTES", "18446744073709551615"));
    let c = compare(&Run::new(&exe), &vars, &dir.reports("exact"));
    c.check(c.with.success(), "exports.c failed");
    check_refusals(&c, &[SIZE_MAX, SIZE_MAX]);
    // Everything main allocated was freed again: no retained bytes have main as their leaf.
    let folded = c.main_report().folded();
    for s in &folded.stacks {
        c.check(
            s.frames.last().map(String::as_str) != Some("main"),
            format!(
                "main still retains {} bytes after freeing everything: {:?}",
                s.bytes, s.frames
            ),
        );
    }
}
