/* A program that handles ENOMEM, for tests/memory_limits.rs (run under `ulimit -v` or
 * `ulimit -d`). Its output never depends on how much memory it got, so a run under the shim
 * prints what the plain run prints. Modes (argv[1]):
 *
 *   fill     allocates 64 KiB blocks (touching a page of each), each followed by a small one,
 *            until malloc returns NULL, frees every other big block (holes of 64 KiB between
 *            blocks still held) and exits 0;
 *   retry    sleeps 100 ms, fills the same way, then for SECS seconds (argv[2], default 3) frees one block
 *            at a time and allocates it again, with small blocks freed and asked for between
 *            them, sleeping 2 ms each round: as at a cache's limit, where every retry must
 *            succeed (it asks for no more than it just gave back). Prints how many failed;
 *   stacks   fills the same way, frees one block in eight (glibc keeps them: the address
 *            space stays at its limit), then keeps 20,000 blocks of 64 bytes allocated at as
 *            many distinct call stacks (distinct_stacks.h; compile with
 *            -fno-optimize-sibling-calls -fno-ipa-icf): sampled, each stack a new entry of the
 *            profiler's tables, which cannot grow at the limit;
 *   mallinfo takes mallinfo2() WARM seconds after its start (argv[4], default 0), runs SECS seconds of balanced allocation with
 *            sleeps (reports are written meanwhile), and says whether the heap in use grew by
 *            more than TOLERANCE bytes (argv[3], default 0) and whether the arena grew (a leak
 *            check of the program's own).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distinct_stacks.h"

#define BLOCK (64 << 10)
#define SMALL 200
#define MAX_BLOCKS (1 << 18)

static void *blocks[MAX_BLOCKS];
static void *smalls[MAX_BLOCKS];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void *grab(size_t n) {
    char *p = malloc(n);
    if (p)
        memset(p, 1, n < 4096 ? n : 4096);
    return p;
}

/* Fills memory with BLOCK-byte blocks and small ones between them; returns the count. */
static size_t fill(void) {
    size_t n = 0;
    while (n < MAX_BLOCKS) {
        void *p = grab(BLOCK);
        if (!p)
            break;
        blocks[n] = p;
        smalls[n] = grab(SMALL);
        n++;
    }
    return n;
}

static void *stacked[20000];

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fill";
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    long tolerance = argc > 3 ? atol(argv[3]) : 0;
    if (strcmp(mode, "fill") == 0) {
        size_t n = fill();
        /* Every other big block: holes of 64 KiB between small blocks still held. */
        for (size_t i = 0; i < n; i += 2)
            free(blocks[i]);
        printf("filled to the limit, freed half\n");
        return n > 0 ? 0 : 1;
    }
    if (strcmp(mode, "retry") == 0) {
        /* A sleep first, as a service's start-up has (the report thread starts there). */
        usleep(100000);
        size_t n = fill();
        long rounds = 0, failed = 0;
        double end = now() + secs;
        for (size_t i = 0; now() < end; i = (i + 1) % n) {
            free(blocks[i]);
            free(smalls[i]);
            smalls[i] = grab(SMALL);
            blocks[i] = grab(BLOCK);
            failed += blocks[i] == NULL;
            if (!blocks[i])
                blocks[i] = grab(BLOCK);
            rounds++;
            usleep(2000);
        }
        printf("at the limit: %s\n", failed ? "some retries failed" : "every retry succeeded");
        if (failed)
            fprintf(stderr, "%ld of %ld retries failed\n", failed, rounds);
        return failed != 0;
    }
    if (strcmp(mode, "stacks") == 0) {
        size_t n = fill();
        for (size_t i = 0; i < n; i += 8)
            free(blocks[i]);
        long made = 0;
        for (long i = 0; i < 20000; i++) {
            stacked[i] = distinct_stack(i);
            made += stacked[i] != NULL;
        }
        printf("at the limit: %s\n", made == 20000 ? "every small block made" : "some failed");
        return made != 20000;
    }
    if (strcmp(mode, "mallinfo") == 0) {
        /* Warm up: the program's own first allocations, one round of its loop and a sleep (the
           report thread starts at the first safe point, before the baseline). */
        void *warm = grab(100000);
        double warm_secs = argc > 4 ? atof(argv[4]) : 0;
        double start = now(), end = start + warm_secs + secs;
        int first = 1;
        struct mallinfo2 before = {0};
        while (first || now() < end) {
            void *p[64];
            for (int i = 0; i < 64; i++)
                p[i] = grab(1000 + i * 64);
            for (int i = 0; i < 64; i++)
                free(p[i]);
            usleep(5000);
            if (first && now() >= start + warm_secs) {
                before = mallinfo2();
                first = 0;
            }
        }
        struct mallinfo2 after = mallinfo2();
        free(warm);
        long grew = (long)after.uordblks - (long)before.uordblks;
        printf("heap in use %s, arena %s\n", grew >= 0 && grew <= tolerance ? "unchanged" : "changed",
               after.arena == before.arena ? "unchanged" : "changed");
        if (grew < 0 || grew > tolerance || after.arena != before.arena)
            fprintf(stderr, "uordblks %zu -> %zu, arena %zu -> %zu\n", before.uordblks,
                    after.uordblks, before.arena, after.arena);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
