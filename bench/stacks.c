/* stacks: one allocation at each of ~10,000 distinct call stacks, kept alive until exit, to
 * measure what one report set costs when the profile holds that many stacks.
 *
 * Allocation i is made at the bottom of a recursion of depth 1 + i % 100 through two functions,
 * left() and right(); the bits of a hash of i choose which one each level calls, so (almost)
 * every i has a call path of its own. Build with -fno-optimize-sibling-calls -fno-ipa-icf so
 * that every level keeps its frame and left/right stay two functions. Run with
 * YING_SAMPLE_INTERVAL_BYTES=1 so that every allocation is sampled.
 *
 * Just before returning from main it prints `main_done_ns <CLOCK_REALTIME ns>`: the time from
 * then until the process has exited is the cost of the exit report.
 *
 *   stacks [count [hold_secs]]   (default 10000, 0)
 *
 * With hold_secs, it then sleeps that long (nanosleep: where the shim starts its threads)
 * before returning, for bench/endpoint.py to ask its endpoint for the profile.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long left_calls, right_calls;

static void *right(int depth, uint64_t a, uint64_t b);

__attribute__((noinline)) static void *left(int depth, uint64_t a, uint64_t b) {
    void *p;
    if (depth == 0) {
        p = malloc(64);
    } else if (a & 1) {
        p = right(depth - 1, (a >> 1) | (b << 63), b >> 1);
    } else {
        p = left(depth - 1, (a >> 1) | (b << 63), b >> 1);
    }
    left_calls++;
    return p;
}

__attribute__((noinline)) static void *right(int depth, uint64_t a, uint64_t b) {
    void *p;
    if (depth == 0) {
        p = malloc(64);
    } else if (a & 1) {
        p = right(depth - 1, (a >> 1) | (b << 63), b >> 1);
    } else {
        p = left(depth - 1, (a >> 1) | (b << 63), b >> 1);
    }
    right_calls += 2;
    return p;
}

static uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    void **keep = malloc(sizeof(void *) * (size_t)n);
    if (!keep) {
        return 1;
    }
    for (long i = 0; i < n; i++) {
        int depth = 1 + (int)(i % 100);
        uint64_t a = splitmix((uint64_t)i), b = splitmix((uint64_t)i + 0x100000000ULL);
        keep[i] = (a & 1) ? right(depth, a >> 1, b) : left(depth, a >> 1, b);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("stacks: %ld allocations (%lu/%lu calls)\n", n, left_calls, right_calls);
    printf("main_done_ns %lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fflush(stdout);
    int hold = argc > 2 ? atoi(argv[2]) : 0;
    for (int s = 0; s < hold * 10; s++) {
        struct timespec tenth = {0, 100 * 1000 * 1000};
        nanosleep(&tenth, NULL);
    }
    return 0; /* the blocks stay allocated: every stack retains 64 B at exit */
}
