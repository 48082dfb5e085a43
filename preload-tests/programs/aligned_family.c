/* Calls aligned_alloc, memalign, posix_memalign, valloc and pvalloc with odd, non-power-of-two
 * and huge alignments and sizes, and prints for each call whether a pointer came back and what
 * errno (or posix_memalign's result) was. The run under the shim must print exactly what plain
 * glibc prints. errno is set to a sentinel before every call so that "left alone" shows too.
 * Sizes stay below 1 GiB or above 2^62: between those, glibc may or may not find the memory. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SENTINEL 12345

static const char *ptr_or_null(const void *p) { return p ? "ptr" : "NULL"; }

int main(void) {
    const size_t aligns[] = {
        0, 1, 2, 3, 4, 8, 12, 16, 24, 48, 64, 100, 4096, 65536,
        (size_t)1 << 40, SIZE_MAX / 2, (SIZE_MAX / 2) + 1, (SIZE_MAX / 2) + 2,
        SIZE_MAX - 4095, SIZE_MAX,
    };
    const size_t sizes[] = {
        0, 1, 7, 64, 100, 4097, (size_t)1 << 62, SIZE_MAX / 2, SIZE_MAX - 4096, SIZE_MAX,
    };
    const size_t na = sizeof aligns / sizeof *aligns, ns = sizeof sizes / sizeof *sizes;
    for (size_t i = 0; i < na; i++) {
        for (size_t j = 0; j < ns; j++) {
            size_t a = aligns[i], s = sizes[j];
            errno = SENTINEL;
            void *p = aligned_alloc(a, s);
            int e = errno;
            printf("aligned_alloc(%zu, %zu): %s errno=%d\n", a, s, ptr_or_null(p), e);
            free(p);
            errno = SENTINEL;
            p = memalign(a, s);
            e = errno;
            printf("memalign(%zu, %zu): %s errno=%d\n", a, s, ptr_or_null(p), e);
            free(p);
            errno = SENTINEL;
            void *q = (void *)&errno; /* a marker: must stay unless the call succeeds */
            int r = posix_memalign(&q, a, s);
            e = errno;
            printf("posix_memalign(%zu, %zu): %d %s errno=%d\n", a, s, r,
                   q == (void *)&errno ? "untouched" : ptr_or_null(q), e);
            if (r == 0) free(q);
        }
    }
    for (size_t j = 0; j < ns; j++) {
        size_t s = sizes[j];
        errno = SENTINEL;
        void *p = valloc(s);
        int e = errno;
        printf("valloc(%zu): %s errno=%d\n", s, ptr_or_null(p), e);
        free(p);
        errno = SENTINEL;
        p = pvalloc(s);
        e = errno;
        printf("pvalloc(%zu): %s errno=%d\n", s, ptr_or_null(p), e);
        free(p);
    }
    return 0;
}
