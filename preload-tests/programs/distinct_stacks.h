/* Blocks of 64 bytes allocated at as many distinct call stacks as a test wants
 * (distinct_stack(i) for i = 0, 1, ...), for many_stacks.c, limit_fill.c and scrape_target.c.
 *
 * Allocation i is made at the bottom of a recursion of depth 1 + i % 60 through two functions;
 * the bits of a hash of i choose which one each level calls, so (almost) every i has a call path
 * of its own. Compile with -fno-optimize-sibling-calls -fno-ipa-icf so that every level keeps
 * its frame and the two functions stay two. */
#include <stdint.h>
#include <stdlib.h>

static void *marker_right(int depth, uint64_t bits);

__attribute__((noinline)) static void *marker_left(int depth, uint64_t bits) {
    void *p = depth == 0       ? malloc(64)
              : (bits & 1) != 0 ? marker_right(depth - 1, bits >> 1)
                                : marker_left(depth - 1, bits >> 1);
    __asm__ volatile("" ::: "memory"); /* keeps the calls out of tail position */
    return p;
}

__attribute__((noinline)) static void *marker_right(int depth, uint64_t bits) {
    void *p = depth == 0       ? malloc(64)
              : (bits & 1) != 0 ? marker_right(depth - 1, bits >> 1)
                                : marker_left(depth - 1, bits >> 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

static uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A block of 64 bytes allocated at the i-th distinct stack. */
static void *distinct_stack(long i) {
    return marker_left(1 + (int)(i % 60), splitmix((uint64_t)i));
}
