/* churn1: single-threaded malloc(64..120) + free pairs, for instruction counts under callgrind.
 *
 *   churn1 [pairs] [malloc|calloc|realloc|aligned]   (default 1000000 malloc)
 *
 * `calloc` allocates with calloc(1, size) instead, `aligned` with aligned_alloc(32, size); `realloc` grows each block once with
 * realloc(p, size + 64) before freeing it, so its cost is the realloc mode's minus malloc's.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    const char *kind = argc > 2 ? argv[2] : "malloc";
    int use_calloc = strcmp(kind, "calloc") == 0;
    int use_realloc = strcmp(kind, "realloc") == 0;
    int use_aligned = strcmp(kind, "aligned") == 0;
    if (!use_calloc && !use_realloc && !use_aligned && strcmp(kind, "malloc") != 0) {
        fprintf(stderr, "churn1: unknown kind %s (malloc, calloc, realloc or aligned)\n", kind);
        return 2;
    }
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    uintptr_t sum = 0;
    for (long i = 0; i < n; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        size_t size = 64 + (size_t)((s * 0x2545F4914F6CDD1DULL) >> 58) % 57; /* 64..120 */
        volatile unsigned char *p = use_calloc    ? calloc(1, size)
                                    : use_aligned ? aligned_alloc(32, size)
                                                  : malloc(size);
        if (p && use_realloc) {
            p = realloc((void *)p, size + 64);
        }
        if (!p) {
            return 1;
        }
        p[0] = (unsigned char)i;
        sum += (uintptr_t)p[0];
        free((void *)p);
    }
    printf("churn1: %ld %s pairs, checksum %lu\n", n, kind, (unsigned long)sum);
    return 0;
}
