/* churn1: single-threaded malloc(64..120) + free pairs, for instruction counts under callgrind.
 *
 *   churn1 [pairs]   (default 1000000)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    uintptr_t sum = 0;
    for (long i = 0; i < n; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        size_t size = 64 + (size_t)((s * 0x2545F4914F6CDD1DULL) >> 58) % 57; /* 64..120 */
        volatile unsigned char *p = malloc(size);
        if (!p) {
            return 1;
        }
        p[0] = (unsigned char)i;
        sum += (uintptr_t)p[0];
        free((void *)p);
    }
    printf("churn1: %ld pairs, checksum %lu\n", n, (unsigned long)sum);
    return 0;
}
