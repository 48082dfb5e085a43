//! dlopen from many threads under the shim (the TLS recursion hazard: a library's dynamic TLS
//! block is allocated with malloc from inside `__tls_get_addr`): a C program loading system
//! libraries and a library with `__thread` variables from 8 threads, and python3 importing C
//! extension modules from 8 threads. No crash, no hang, the same output.

use preload_tests::{EXACT, QUIET, Run, TestDir, compare, programs_dir, python3};

/// System libraries to load; whichever are missing print "missing" in both runs.
const SYSTEM_LIBS: &[&str] = &[
    "libz.so.1",
    "libm.so.6",
    "libcrypt.so.1",
    "libbz2.so.1.0",
    "liblzma.so.5",
    "libsqlite3.so.0",
    "libssl.so.3",
    "libcrypto.so.3",
    "libexpat.so.1",
    "libffi.so.8",
    "libuuid.so.1",
    "libstdc++.so.6",
    "libdoes-not-exist.so.7",
];

#[test]
fn dlopen_from_eight_threads() {
    let dir = TestDir::new("dlopen-threads");
    let tls = dir.compile_c("tlslib.c", &["-shared", "-fPIC"]);
    let exe = dir.compile_c("dlopen_threads.c", &["-pthread", "-ldl"]);
    let mut args = vec![tls.display().to_string()];
    args.extend(SYSTEM_LIBS.iter().map(|s| s.to_string()));
    let run = Run::new(&exe).args(&args);
    for (i, vars) in [QUIET, EXACT, QUIET, EXACT].into_iter().enumerate() {
        let c = compare(&run, vars, &dir.reports(&format!("run-{i}")));
        c.check(c.with.success(), "dlopen_threads.c failed");
        c.assert_no_ying_lines();
        let out = c.with.stdout_str();
        c.check(out.contains("libtlslib.so: loaded\n"), "the TLS library did not load");
        c.check(!out.contains("inconsistent"), "a library loaded in some threads only");
        let loaded = out.lines().filter(|l| l.ends_with(": loaded")).count();
        c.check(loaded >= 4, "fewer than 3 system libraries could be loaded: the test is weak");
        c.main_report();
    }
}

#[test]
fn python_imports_from_eight_threads() {
    let Some((py, _)) = python3() else { return };
    let dir = TestDir::new("python-imports");
    let script = programs_dir().join("imports_threads.py");
    let run = Run::new(&py).arg(&script);
    for (i, vars) in [QUIET, EXACT, QUIET].into_iter().enumerate() {
        let c = compare(&run, vars, &dir.reports(&format!("run-{i}")));
        c.check(c.with.success(), "python failed");
        c.assert_no_ying_lines();
        c.check(
            c.with.stdout_str().lines().count() == 8
                && c.with.stdout_str().contains("('json', 'ok')"),
            "unexpected output",
        );
    }
}
