/* Sampled allocations on threads with small stacks.
 *
 *   small_stack run      8 threads with glibc's minimum stack (16 KiB) each allocate 1 MiB a
 *                        few frames deep (at any sampling interval such a block is almost
 *                        always sampled) and free it. Prints one line.
 *   small_stack measure  one thread on a 64 KiB stack the program maps itself paints the unused
 *                        part of its stack, allocates 1 MiB through a noinline function, and
 *                        prints how many bytes below its own frame that call wrote: the stack
 *                        a malloc call uses (glibc's own, plus the profiler's sampled path).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *volatile sink;
static char *stack_lo;

__attribute__((noinline)) void *small_stack_alloc(size_t n) {
    void *p = malloc(n);
    sink = p;
    return p;
}

__attribute__((noinline)) static void *depth3(size_t n) { void *p = small_stack_alloc(n); sink = p; return p; }
__attribute__((noinline)) static void *depth2(size_t n) { void *p = depth3(n); sink = p; return p; }

static void *runner(void *arg) {
    (void)arg;
    void *p = depth2(1 << 20);
    memset(p, 1, 4096);
    free(p);
    return NULL;
}

__attribute__((noinline)) static void paint(void) {
    char here;
    char *end = &here - 2048;
    memset(stack_lo, 0x5a, (size_t)(end - stack_lo));
}

static void *measurer(void *arg) {
    (void)arg;
    char top;
    paint();
    void *p = small_stack_alloc(1 << 20);
    char *q = stack_lo;
    while (q < &top && *q == 0x5a) q++;
    printf("malloc used %ld bytes of stack\n", (long)(&top - q));
    free(p);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "measure") == 0) {
        size_t size = 64 * 1024;
        char *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) return 1;
        stack_lo = stack + 256;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstack(&a, stack, size);
        pthread_t t;
        if (pthread_create(&t, &a, measurer, NULL) != 0) return 1;
        pthread_join(t, NULL);
        return 0;
    }
    pthread_attr_t a;
    pthread_attr_init(&a);
    long min = sysconf(_SC_THREAD_STACK_MIN);
    size_t size = min > 16384 ? (size_t)min : 16384;
    if (pthread_attr_setstacksize(&a, size) != 0) return 1;
    for (int i = 0; i < 8; i++) {
        pthread_t t;
        if (pthread_create(&t, &a, runner, NULL) != 0) return 1;
        pthread_join(t, NULL);
    }
    printf("8 threads with %zu-byte stacks allocated 1 MiB each\n", size);
    return 0;
}
