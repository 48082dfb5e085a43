/* Exercises every function libying.so exports, with its edge cases, and prints what C code can
 * observe (results, errno, alignment, contents) but never addresses, so that a run with the shim
 * must print exactly what a run without it prints.
 *
 * Only the shim exports `cfree` to new programs (glibc keeps it as a compat symbol), so it is
 * looked up with dlsym and the output does not depend on whether it was found. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *errname(int e) {
    switch (e) {
    case 0: return "0";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case EACCES: return "EACCES";
    case 1234: return "1234";
    default: return "other";
    }
}

static int aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Keeps the compiler from treating the results of allocation calls as known. */
static void *volatile sink;

int main(void) {
    const size_t huge = SIZE_MAX / 2;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void (*my_cfree)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");

    /* malloc */
    void *p = malloc(100);
    printf("malloc(100): %s usable>=100:%d aligned16:%d\n", p ? "ok" : "NULL",
           malloc_usable_size(p) >= 100, aligned(p, 16));
    free(p);
    void *z = malloc(0);
    printf("malloc(0): %s usable>=16:%d\n", z ? "non-NULL" : "NULL", malloc_usable_size(z) >= 16);
    free(z);
    errno = 0;
    sink = malloc(huge);
    printf("malloc(SIZE_MAX/2): %s errno=%s\n", sink ? "non-NULL" : "NULL", errname(errno));
    errno = 0;
    sink = malloc(SIZE_MAX);
    printf("malloc(SIZE_MAX): %s errno=%s\n", sink ? "non-NULL" : "NULL", errname(errno));

    /* free */
    free(NULL);
    printf("free(NULL): ok\n");
    p = malloc(333);
    errno = 1234;
    free(p);
    printf("errno after free(small) = %s\n", errname(errno));
    p = malloc(1 << 20); /* above the mmap threshold: glibc munmaps */
    errno = 1234;
    free(p);
    printf("errno after free(1MiB) = %s\n", errname(errno));
    errno = 1234;
    free(NULL);
    printf("errno after free(NULL) = %s\n", errname(errno));

    /* calloc */
    errno = 0;
    sink = calloc(SIZE_MAX / 8 + 1, 16);
    printf("calloc overflow: %s errno=%s\n", sink ? "non-NULL" : "NULL", errname(errno));
    errno = 0;
    sink = calloc(2, SIZE_MAX / 2 + 2);
    printf("calloc overflow 2: %s errno=%s\n", sink ? "non-NULL" : "NULL", errname(errno));
    errno = 0;
    sink = calloc(1, huge);
    printf("calloc(1, SIZE_MAX/2): %s errno=%s\n", sink ? "non-NULL" : "NULL", errname(errno));
    /* Dirty the heap first so that a recycled chunk would show non-zero bytes. */
    for (int i = 0; i < 8; i++) {
        unsigned char *d = malloc(4000);
        memset(d, 0xAB, 4000);
        free(d);
    }
    unsigned char *c = calloc(1000, 4);
    printf("calloc(1000,4): %s zeroed=%d usable>=4000:%d\n", c ? "ok" : "NULL",
           c && all_bytes(c, 4000, 0), malloc_usable_size(c) >= 4000);
    free(c);
    c = calloc(3, 1 << 20);
    printf("calloc(3, 1MiB): %s zeroed=%d\n", c ? "ok" : "NULL", c && all_bytes(c, 3 << 20, 0));
    free(c);
    c = calloc(0, 10);
    printf("calloc(0,10): %s\n", c ? "non-NULL" : "NULL");
    free(c);

    /* realloc */
    unsigned char *r = realloc(NULL, 50);
    printf("realloc(NULL,50): %s usable>=50:%d\n", r ? "ok" : "NULL", malloc_usable_size(r) >= 50);
    memset(r, 0x5A, 50);
    r = realloc(r, 5000);
    printf("realloc grow to 5000: %s kept=%d\n", r ? "ok" : "NULL", r && all_bytes(r, 50, 0x5A));
    memset(r, 0x3C, 5000);
    r = realloc(r, 10);
    printf("realloc shrink to 10: %s kept=%d\n", r ? "ok" : "NULL", r && all_bytes(r, 10, 0x3C));
    r = realloc(r, 300000); /* mmapped */
    printf("realloc grow to 300000: %s kept=%d\n", r ? "ok" : "NULL", r && all_bytes(r, 10, 0x3C));
    memset(r, 0x77, 300000);
    errno = 0;
    unsigned char *r2 = realloc(r, huge);
    printf("realloc(p, SIZE_MAX/2): %s errno=%s old_intact=%d\n", r2 ? "non-NULL" : "NULL",
           errname(errno), all_bytes(r, 300000, 0x77));
    r = realloc(r, 1000);
    printf("realloc back to 1000: %s kept=%d\n", r ? "ok" : "NULL", r && all_bytes(r, 1000, 0x77));
    errno = 0;
    r2 = realloc(r, SIZE_MAX);
    printf("realloc(p, SIZE_MAX): %s errno=%s old_intact=%d\n", r2 ? "non-NULL" : "NULL",
           errname(errno), all_bytes(r, 1000, 0x77));
    r2 = realloc(r, 0);
    printf("realloc(p, 0): %s\n", r2 ? "non-NULL" : "NULL");
    free(r2);

    /* reallocarray */
    errno = 0;
    unsigned char *ra = reallocarray(NULL, 10, 10);
    printf("reallocarray(NULL,10,10): %s usable>=100:%d\n", ra ? "ok" : "NULL",
           malloc_usable_size(ra) >= 100);
    memset(ra, 0x11, 100);
    errno = 0;
    unsigned char *ra2 = reallocarray(ra, SIZE_MAX / 4, 8);
    printf("reallocarray overflow: %s errno=%s old_intact=%d\n", ra2 ? "non-NULL" : "NULL",
           errname(errno), all_bytes(ra, 100, 0x11));
    ra = reallocarray(ra, 100, 20);
    printf("reallocarray(p,100,20): %s kept=%d usable>=2000:%d\n", ra ? "ok" : "NULL",
           ra && all_bytes(ra, 100, 0x11), malloc_usable_size(ra) >= 2000);
    free(ra);

    /* posix_memalign */
    static const size_t bad_aligns[] = {0, 1, 2, 3, 4, 12, 24, 48, 100};
    for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++) {
        void *mp = (void *)&bad_aligns;
        errno = 0;
        int rc = posix_memalign(&mp, bad_aligns[i], 64);
        printf("posix_memalign(align=%zu): rc=%s memptr_unchanged=%d\n", bad_aligns[i],
               errname(rc), mp == (void *)&bad_aligns);
    }
    static const size_t good_aligns[] = {8, 16, 32, 64, 128, 4096, 65536};
    for (size_t i = 0; i < sizeof good_aligns / sizeof good_aligns[0]; i++) {
        void *mp = NULL;
        int rc = posix_memalign(&mp, good_aligns[i], 1000);
        printf("posix_memalign(align=%zu, 1000): rc=%s aligned=%d usable>=1000:%d\n",
               good_aligns[i], errname(rc), mp && aligned(mp, good_aligns[i]),
               mp && malloc_usable_size(mp) >= 1000);
        if (mp) memset(mp, 1, 1000);
        free(mp);
    }
    {
        void *mp = (void *)&good_aligns;
        int rc = posix_memalign(&mp, 64, huge);
        printf("posix_memalign(64, SIZE_MAX/2): rc=%s memptr_unchanged=%d\n", errname(rc),
               mp == (void *)&good_aligns);
        mp = NULL;
        rc = posix_memalign(&mp, 64, 0);
        printf("posix_memalign(64, 0): rc=%s\n", errname(rc));
        free(mp);
    }

    /* aligned_alloc, memalign */
    void *a = aligned_alloc(64, 640);
    printf("aligned_alloc(64,640): %s aligned=%d\n", a ? "ok" : "NULL", aligned(a, 64));
    free(a);
    a = aligned_alloc(4096, 8192);
    printf("aligned_alloc(4096,8192): %s aligned=%d\n", a ? "ok" : "NULL", aligned(a, 4096));
    free(a);
    errno = 0;
    a = aligned_alloc(64, huge);
    printf("aligned_alloc(64, SIZE_MAX/2): %s errno=%s\n", a ? "non-NULL" : "NULL",
           errname(errno));
    a = memalign(256, 1000);
    printf("memalign(256,1000): %s aligned=%d usable>=1000:%d\n", a ? "ok" : "NULL",
           aligned(a, 256), malloc_usable_size(a) >= 1000);
    free(a);
    a = memalign(32, 10);
    printf("memalign(32,10): %s aligned=%d\n", a ? "ok" : "NULL", aligned(a, 32));
    free(a);
    errno = 0;
    a = memalign(64, huge);
    printf("memalign(64, SIZE_MAX/2): %s errno=%s\n", a ? "non-NULL" : "NULL", errname(errno));

    /* valloc, pvalloc */
    a = valloc(100);
    printf("valloc(100): %s page_aligned=%d usable>=100:%d\n", a ? "ok" : "NULL",
           aligned(a, page), malloc_usable_size(a) >= 100);
    free(a);
    a = valloc(3 * page + 1);
    printf("valloc(3 pages+1): %s page_aligned=%d\n", a ? "ok" : "NULL", aligned(a, page));
    free(a);
    a = pvalloc(100);
    printf("pvalloc(100): %s page_aligned=%d usable>=page:%d\n", a ? "ok" : "NULL",
           aligned(a, page), malloc_usable_size(a) >= page);
    free(a);
    a = pvalloc(page + 1);
    printf("pvalloc(page+1): %s page_aligned=%d usable>=2 pages:%d\n", a ? "ok" : "NULL",
           aligned(a, page), malloc_usable_size(a) >= 2 * page);
    free(a);
    errno = 0;
    a = valloc(huge);
    printf("valloc(SIZE_MAX/2): %s errno=%s\n", a ? "non-NULL" : "NULL", errname(errno));
    errno = 0;
    a = pvalloc(huge);
    printf("pvalloc(SIZE_MAX/2): %s errno=%s\n", a ? "non-NULL" : "NULL", errname(errno));

    /* malloc_usable_size */
    printf("malloc_usable_size(NULL) = %zu\n", malloc_usable_size(NULL));
    /* The exact value depends on the heap's layout (glibc may hand out a chunk up to 16 bytes
     * bigger than asked when the rest would be too small to keep), and the shim's own allocations
     * change that layout. So print what must hold in both runs: it covers the request, and it is
     * what glibc's chunk header says (size word minus flags minus the header word). */
    static const size_t sizes[] = {1, 8, 24, 25, 100, 1000, 4096, 10000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *q = malloc(sizes[i]);
        size_t u = malloc_usable_size(q);
        size_t chunk = ((size_t *)q)[-1] & ~(size_t)7;
        printf("malloc_usable_size(malloc(%zu)): >=request:%d header-agrees:%d\n", sizes[i],
               u >= sizes[i], u == chunk - sizeof(size_t));
        free(q);
    }
    void *big = malloc(5 << 20);
    printf("malloc_usable_size(malloc(5MiB)) >= 5MiB: %d\n", malloc_usable_size(big) >= (5 << 20));
    free(big);

    /* cfree (alias of free where available) */
    void *cf = malloc(77);
    if (my_cfree) {
        my_cfree(cf);
        my_cfree(NULL);
    } else {
        free(cf);
    }
    printf("cfree: ok\n");

    /* Many mixed calls, then a checksum of their contents. */
    unsigned long sum = 0;
    void *keep[64];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 64; i++) {
            size_t n = (size_t)(i * 37 + round * 11) % 3000 + 1;
            switch (i % 4) {
            case 0: keep[i] = malloc(n); break;
            case 1: keep[i] = calloc(n, 1); break;
            case 2: keep[i] = memalign(64, n); break;
            default: keep[i] = realloc(NULL, n); break;
            }
            memset(keep[i], i, n);
            sum += ((unsigned char *)keep[i])[n - 1];
        }
        for (int i = 0; i < 64; i++) {
            keep[i] = realloc(keep[i], (size_t)(i + 1) * 50);
            sum += ((unsigned char *)keep[i])[0];
            free(keep[i]);
        }
    }
    printf("checksum %lu\n", sum);

    /* The mapping calls: results and errno as the kernel gives them, errno untouched on
     * success. */
    long pg = sysconf(_SC_PAGESIZE);
    errno = 1234;
    char *m = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("mmap(3 pages): %s errno=%s\n", m == MAP_FAILED ? "MAP_FAILED" : "ok", errname(errno));
    m[0] = 7;
    m = mremap(m, 3 * pg, 40 * pg, MREMAP_MAYMOVE);
    printf("mremap grow: %s kept=%d errno=%s\n", m == MAP_FAILED ? "MAP_FAILED" : "ok",
           m != MAP_FAILED && m[0] == 7, errname(errno));
    int rc = munmap(m + pg, pg);
    printf("munmap part: %d errno=%s\n", rc, errname(errno));
    rc = munmap(m, pg) * 10 + munmap(m + 2 * pg, 38 * pg);
    printf("munmap rest: %d errno=%s\n", rc, errname(errno));
    char *m64 = mmap64(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("mmap64: %s errno=%s\n", m64 == MAP_FAILED ? "MAP_FAILED" : "ok", errname(errno));
    munmap(m64, pg);
    errno = 0;
    sink = mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("mmap(0 bytes): %s errno=%s\n", sink == MAP_FAILED ? "MAP_FAILED" : "ok", errname(errno));
    errno = 0;
    sink = mmap(NULL, pg, PROT_READ, MAP_PRIVATE, -1, 0);
    printf("mmap(bad fd): %s errno=%s\n", sink == MAP_FAILED ? "MAP_FAILED" : "ok", errname(errno));
    errno = 0;
    sink = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1);
    printf("mmap(unaligned offset): %s errno=%s\n", sink == MAP_FAILED ? "MAP_FAILED" : "ok",
           errname(errno));
    errno = 0;
    rc = munmap(m64 + 1, pg);
    printf("munmap(unaligned): %d errno=%s\n", rc, errname(errno));
    errno = 0;
    char *hole = mmap(NULL, 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 2 * pg);
    sink = mremap(hole, pg, 2 * pg, MREMAP_MAYMOVE);
    printf("mremap(unmapped): %s errno=%s\n", sink == MAP_FAILED ? "MAP_FAILED" : "ok",
           errname(errno));
    errno = 0;
    sink = mremap(NULL, pg, pg, MREMAP_FIXED);
    printf("mremap(FIXED without MAYMOVE): %s errno=%s\n", sink == MAP_FAILED ? "MAP_FAILED" : "ok",
           errname(errno));
    return 0;
}
