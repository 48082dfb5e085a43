/* One call of each hand-written allocating entry of the shim, each from a marker function, with
 * a request no other call makes: tests/debugger.rs stops gdb inside glibc's allocator at each
 * and checks that the backtrace walks through the shim's entry to the marker and to main.
 * Compiled without frame pointers, so that only call frame information can unwind. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) void marker_malloc(void) { sink = malloc(12345); }
__attribute__((noinline)) void marker_calloc(void) { sink = calloc(1, 12346); }
__attribute__((noinline)) void marker_realloc(void) { sink = realloc(malloc(16), 12347); }
__attribute__((noinline)) void marker_memalign(void) { sink = memalign(64, 12348); }
__attribute__((noinline)) void marker_aligned_alloc(void) { sink = aligned_alloc(64, 12352); }

int main(void) {
    marker_malloc();
    marker_calloc();
    marker_realloc();
    marker_memalign();
    marker_aligned_alloc();
    puts("done");
    return 0;
}
