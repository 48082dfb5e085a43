/* One call of each hand-written allocating entry of the shim, each from a marker function, with
 * a request no other call makes: tests/debugger.rs stops gdb inside glibc's allocator at each
 * and checks that the backtrace walks through the shim's entry to the marker and to main. Then
 * one `syscall(SYS_getppid)`, the shim's hand-written `syscall`, where gdb stops at the system
 * call. Compiled without frame pointers, so that only call frame information can unwind. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) void marker_malloc(void) { sink = malloc(12345); }
__attribute__((noinline)) void marker_calloc(void) { sink = calloc(1, 12346); }
__attribute__((noinline)) void marker_realloc(void) { sink = realloc(malloc(16), 12347); }
__attribute__((noinline)) void marker_memalign(void) { sink = memalign(64, 12348); }
__attribute__((noinline)) void marker_aligned_alloc(void) { sink = aligned_alloc(64, 12352); }
__attribute__((noinline)) long marker_syscall(void) { return syscall(SYS_getppid) + 1; }

int main(void) {
    marker_malloc();
    marker_calloc();
    marker_realloc();
    marker_memalign();
    marker_aligned_alloc();
    printf("done %d\n", marker_syscall() > 0);
    return 0;
}
