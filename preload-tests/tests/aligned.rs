//! The aligned allocation functions under the shim return exactly what glibc returns (a pointer
//! or NULL, `errno`, `posix_memalign`'s result) for odd, non-power-of-two and impossible
//! alignments and for huge sizes: `programs/aligned_family.c` prints every outcome and both
//! runs must print the same.

use preload_tests::{QUIET, Run, TestDir, compare};

#[test]
fn aligned_family_matches_glibc_for_every_alignment_and_size() {
    let dir = TestDir::new("aligned");
    let exe = dir.compile_c("aligned_family.c", &[]);
    let c = compare(&Run::new(&exe), QUIET, &dir.reports("aligned"));
    c.check(c.with.success(), "aligned_family.c failed");
    let out = c.with.stdout_str();
    // The cases that matter are there: glibc's EINVAL for impossible alignments (22).
    c.check(out.lines().count() == 620, "unexpected number of lines");
    c.check(
        out.contains("aligned_alloc(18446744073709551615, 64): NULL errno=22\n"),
        "no EINVAL case in the output",
    );
    // Only giant refusals may be printed (sizes of 2^62 and more).
    c.check(
        c.with.ying_lines().iter().all(|l| {
            l.starts_with("ying: refused")
                || l.starts_with("ying:   ")
                || l.starts_with("ying: refusal #")
                || l.starts_with("ying: (refusal #")
        }),
        "unexpected `ying:` lines",
    );
}
