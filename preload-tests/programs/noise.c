/* A program whose retained memory is steady but for the sites asked for, for the tests of
 * `ying diff`'s noise marks and `ying leaks` (cli/tests/noise.rs).
 *
 *   noise MODE SECS [FILL_SECS]
 *
 * Every 10 ms for SECS seconds:
 *   keep_working_set   holds 512 blocks of 8 KiB (4 MiB) and replaces 64 of them at random:
 *                      the same bytes, always young, sampled afresh between dumps
 *   churn_temporaries  allocates and frees 16 buffers of 32 KiB (allocated, never retained)
 *   fill_cache         keeps 4 MiB in 4 KiB blocks for good: all at the start, or spread over
 *                      the first FILL_SECS seconds (a cache that fills, then stays as it is)
 *   leak_slowly        MODE "leak" only: keeps 16 KiB blocks, 2 MiB per second, never freed
 *
 * MODE "leak-freed" leaks like "leak", holds it all for 1.5 s, then frees every block it holds
 * before it exits: a stack that grew all run and ended at zero, which is no leak.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOTS 512
#define SLOT_BYTES (8 * 1024)
#define CACHE_BYTES (4 * 1024 * 1024)
#define CACHE_BLOCK 4096
#define LEAK_BLOCK (16 * 1024)
#define LEAK_PER_SEC (2 * 1024 * 1024)

static void *slots[SLOTS];
static void *cache[CACHE_BYTES / CACHE_BLOCK];
static int cached;
static void **leaked;
static long leaked_n, leaked_cap;
static unsigned rng = 12345;

static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void keep_working_set(void) {
    for (int i = 0; i < 64; i++) {
        int k = next() % SLOTS;
        free(slots[k]);
        slots[k] = malloc(SLOT_BYTES);
        memset(slots[k], 1, SLOT_BYTES);
    }
}

__attribute__((noinline)) void churn_temporaries(void) {
    for (int i = 0; i < 16; i++) {
        char *p = malloc(32 * 1024);
        memset(p, 2, 32 * 1024);
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
}

__attribute__((noinline)) void fill_cache(int upto) {
    while (cached < upto && cached < CACHE_BYTES / CACHE_BLOCK) {
        cache[cached] = malloc(CACHE_BLOCK);
        memset(cache[cached], 3, CACHE_BLOCK);
        cached++;
    }
}

__attribute__((noinline)) void leak_slowly(long upto_bytes) {
    while (leaked_n * LEAK_BLOCK < upto_bytes) {
        if (leaked_n == leaked_cap) {
            leaked_cap = leaked_cap ? 2 * leaked_cap : 256;
            leaked = realloc(leaked, leaked_cap * sizeof *leaked);
        }
        leaked[leaked_n] = malloc(LEAK_BLOCK);
        memset(leaked[leaked_n], 4, LEAK_BLOCK);
        leaked_n++;
    }
}

int main(int argc, char **argv) {
    int freed = argc > 1 && strcmp(argv[1], "leak-freed") == 0;
    int leak = freed || (argc > 1 && strcmp(argv[1], "leak") == 0);
    double secs = argc > 2 ? atof(argv[2]) : 5;
    double fill_secs = argc > 3 ? atof(argv[3]) : 0;
    for (int k = 0; k < SLOTS; k++) slots[k] = malloc(SLOT_BYTES);
    int blocks = CACHE_BYTES / CACHE_BLOCK;
    if (fill_secs <= 0) fill_cache(blocks);
    double start = now(), t;
    struct timespec tick = {0, 10 * 1000 * 1000};
    while ((t = now() - start) < secs) {
        keep_working_set();
        churn_temporaries();
        if (fill_secs > 0) fill_cache(t >= fill_secs ? blocks : (int)(blocks * t / fill_secs));
        if (leak) leak_slowly((long)(t * LEAK_PER_SEC));
        nanosleep(&tick, NULL);
    }
    printf("leaked %ld bytes, cached %d blocks\n", leaked_n * LEAK_BLOCK, cached);
    if (freed) {
        /* Held a while first, so that a periodic dump sees the whole leak. */
        struct timespec hold = {1, 500 * 1000 * 1000};
        nanosleep(&hold, NULL);
        for (long i = 0; i < leaked_n; i++) free(leaked[i]);
        free(leaked);
        for (int i = 0; i < cached; i++) free(cache[i]);
        for (int k = 0; k < SLOTS; k++) free(slots[k]);
        printf("freed every block\n");
    }
    return 0;
}
