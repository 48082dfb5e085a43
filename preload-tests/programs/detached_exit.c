/* Threads that end without the profiler seeing them start or run code of their own:
 *  - 16 detached threads at once that never call malloc (their first hooked call is glibc
 *    freeing their TLS after their key destructors ran); glibc unmaps most of their stacks
 *    when they end (its stack cache keeps 40 MiB);
 *  - 8 threads on stacks the program maps itself and makes inaccessible after joining them,
 *    whose first malloc happens in the last round of key destructors
 *    (PTHREAD_DESTRUCTOR_ITERATIONS = 4).
 * Then the program allocates a little and exits (the exit report reads every thread's
 * counters). Usage: detached_exit [detached|late] (default: both). Prints the same lines with
 * and without the shim.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static atomic_int finished;
static pthread_key_t key;
void *volatile sink;

static void *quiet(void *arg) {
    volatile unsigned long x = (unsigned long)arg;
    for (int i = 0; i < 100000; i++) x += (unsigned long)i;
    atomic_fetch_add(&finished, 1);
    return NULL;
}

/* Re-arms itself for the next round until the last one, then allocates for the first time. */
static void destructor(void *v) {
    long round = (long)v;
    if (round < 4) {
        pthread_setspecific(key, (void *)(round + 1));
        return;
    }
    void *p = malloc(1000 + (size_t)round);
    sink = p;
    free(p);
    sink = NULL;
}

static void *late_allocator(void *arg) {
    (void)arg;
    pthread_setspecific(key, (void *)1L);
    return NULL;
}

static void *late_allocator_warmup(void *arg) {
    void *p = malloc(100);
    sink = p;
    free(p);
    return arg;
}

int main(int argc, char **argv) {
    int detached_part = argc < 2 || strcmp(argv[1], "late") != 0;
    int late_part = argc < 2 || strcmp(argv[1], "detached") != 0;
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    for (long i = 0; detached_part && i < 16; i++) {
        pthread_t t;
        if (pthread_create(&t, &detached, quiet, (void *)i) != 0) return 1;
    }
    while (detached_part && atomic_load(&finished) < 16) usleep(1000);
    usleep(50000); /* let them get past their TLS release */
    if (late_part) {
        /* A thread that allocates first, so that a profiler which creates its own thread-exit
         * key lazily has it by now: then that key is processed before this program's key in
         * each destructor round, as it would be in any program that started threads earlier. */
        pthread_t warm;
        if (pthread_create(&warm, NULL, late_allocator_warmup, NULL) != 0) return 1;
        pthread_join(warm, NULL);
    }
    pthread_key_create(&key, destructor);
    const size_t size = 256 * 1024;
    for (int i = 0; late_part && i < 8; i++) {
        void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) return 1;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstack(&a, stack, size);
        pthread_t t;
        if (pthread_create(&t, &a, late_allocator, NULL) != 0) return 1;
        pthread_join(t, NULL);
        pthread_attr_destroy(&a);
        /* The stack is gone: its pages become inaccessible (reading them faults, whatever
         * the kernel would otherwise map there later). */
        if (mmap(stack, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            return 1;
    }
    unsigned long sum = 0;
    for (int i = 0; i < 1000; i++) {
        unsigned char *p = malloc((size_t)i + 1);
        p[i] = (unsigned char)i;
        sum += p[i];
        free(p);
    }
    printf("detached %d, checksum %lu\n", atomic_load(&finished), sum);
    return 0;
}
