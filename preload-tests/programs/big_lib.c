/* A shared library with 24 MiB of initialized, read-only data in its file (tests/rss_breakdown.rs
 * loads it and reads every page of its segments: the binaries part grows by that much). Every
 * byte differs from zero, so the linker cannot move it to .bss. */
#define BIG (24 << 20)
#define ONE(i) (unsigned char)(((i) * 131u) % 251u + 1u)
#define R16(i) ONE(i), ONE(i + 1), ONE(i + 2), ONE(i + 3), ONE(i + 4), ONE(i + 5), ONE(i + 6), \
    ONE(i + 7), ONE(i + 8), ONE(i + 9), ONE(i + 10), ONE(i + 11), ONE(i + 12), ONE(i + 13), \
    ONE(i + 14), ONE(i + 15)

/* The first 16 bytes spelled out, the rest set by the range designator (GCC): still in the
 * file's data, byte for byte. */
const unsigned char big_lib_data[BIG] = {R16(0), [16 ... BIG - 1] = 7};

unsigned long big_lib_sum(void) {
    unsigned long s = 0;
    for (unsigned long i = 0; i < BIG; i += 4096) s += big_lib_data[i];
    return s;
}
