/* Allocation patterns for the shim's estimate tests (tests/realloc_estimates.rs). Usage:
 * `realloc_patterns MODE N`, MODE one of
 *   shrink   N blocks malloc(1000) then realloc(p, 50), kept
 *   grow     N blocks grown from 16 to 10,016 bytes in 100 reallocs, kept
 *   threads  N blocks of 1000 or 4000 bytes malloc'd on one thread, grown to 9000 or shrunk to 60
 *            on a second, a quarter freed on a third
 *   all      all of the above, plus calloc, memalign, shrink then grow, realloc(NULL, n) and
 *            realloc(p, 0)
 * Every block not freed stays live until exit. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void **kept;
static size_t nkept;
static unsigned long checksum;

static void keep(void *p) {
    if (!p) abort();
    ((unsigned char *)p)[0] = 1;
    checksum += (size_t)p & 0xff;
    kept[nkept++] = p;
}

__attribute__((noinline)) static void pattern_shrink(int n) {
    for (int i = 0; i < n; i++) keep(realloc(malloc(1000), 50));
}

__attribute__((noinline)) static void pattern_grow(int n) {
    for (int i = 0; i < n; i++) {
        char *p = malloc(16);
        for (int k = 1; k <= 100; k++) p = realloc(p, 16 + 100 * k);
        keep(p);
    }
}

static int nthreads_blocks;
static void **handed;

static void *thread_alloc(void *arg) {
    (void)arg;
    for (int i = 0; i < nthreads_blocks; i++) handed[i] = malloc(i % 2 ? 4000 : 1000);
    return NULL;
}

static void *thread_realloc(void *arg) {
    (void)arg;
    for (int i = 0; i < nthreads_blocks; i++) {
        handed[i] = realloc(handed[i], i % 3 ? 60 : 9000);
        if (!handed[i]) abort();
    }
    return NULL;
}

static void *thread_free(void *arg) {
    (void)arg;
    for (int i = 0; i < nthreads_blocks; i++) {
        if (i % 4 == 0) free(handed[i]);
        else keep(handed[i]);
    }
    return NULL;
}

__attribute__((noinline)) static void pattern_threads(int n) {
    void *(*steps[3])(void *) = {thread_alloc, thread_realloc, thread_free};
    nthreads_blocks = n;
    handed = malloc(sizeof(void *) * n);
    for (int s = 0; s < 3; s++) {
        pthread_t t;
        if (pthread_create(&t, NULL, steps[s], NULL) != 0) abort();
        pthread_join(t, NULL);
    }
    free(handed);
}

__attribute__((noinline)) static void pattern_others(int n) {
    for (int i = 0; i < n; i++) {
        keep(calloc(3, 100 + i % 500));
        keep(memalign(64, 200 + i % 3000));
        char *p = realloc(malloc(1000), 50);
        keep(realloc(p, 3000));
        p = realloc(NULL, 700);
        p = realloc(p, 2000);
        if (i % 2) keep(p);
        else if (realloc(p, 0) != NULL) abort();
    }
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1];
    int n = atoi(argv[2]);
    int all = strcmp(mode, "all") == 0;
    kept = malloc(sizeof(void *) * (size_t)n * 8);
    if (all || strcmp(mode, "shrink") == 0) pattern_shrink(n);
    if (all || strcmp(mode, "grow") == 0) pattern_grow(n);
    if (all || strcmp(mode, "threads") == 0) pattern_threads(n);
    if (all) pattern_others(n);
    printf("kept %zu blocks\n", nkept);
    return checksum == 1 ? 1 : 0;
}
