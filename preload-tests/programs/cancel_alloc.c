/* A thread cancelled (deferred cancellation) while it allocates in a loop whose only
 * cancellation point is pthread_testcancel(): malloc must never be one. A cleanup handler
 * records where the cancellation struck. Then the program allocates and exits (the exit report
 * takes every profiler lock a cancelled thread could have left behind).
 *
 *   cancel_alloc giant     requests of 2 GiB (refused by the shim at YING_MAX_ALLOC_BYTES=1GiB,
 *                          and by glibc under the 8 GiB address-space limit set here)
 *   cancel_alloc sampled   requests of 100 bytes (sampled at YING_SAMPLE_INTERVAL_BYTES=1)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static volatile int phase;
static volatile int struck = -1;
static size_t request;
void *volatile sink;

static void cleanup(void *arg) {
    (void)arg;
    struck = phase;
}

__attribute__((noinline)) void *cancel_alloc_request(size_t n) {
    void *p = malloc(n);
    sink = p;
    return p;
}

static void *worker(void *arg) {
    (void)arg;
    pthread_cleanup_push(cleanup, NULL);
    for (;;) {
        phase = 1;
        void *p = cancel_alloc_request(request);
        phase = 2;
        free(p);
        pthread_testcancel();
    }
    pthread_cleanup_pop(0);
    return NULL;
}

int main(int argc, char **argv) {
    int giant = argc > 1 && strcmp(argv[1], "giant") == 0;
    request = giant ? (size_t)2 << 30 : 100;
    struct rlimit rl = {8ULL << 30, 8ULL << 30};
    if (giant && setrlimit(RLIMIT_AS, &rl) != 0) perror("setrlimit");
    for (int round = 0; round < 5; round++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
        usleep(20000);
        pthread_cancel(t);
        void *res = NULL;
        pthread_join(t, &res);
        if (res != PTHREAD_CANCELED || struck != 2) {
            printf("round %d: cancelled %s\n", round, struck == 1 ? "inside malloc" : "elsewhere");
            return 1;
        }
        struck = -1;
    }
    unsigned long sum = 0;
    for (int i = 0; i < 1000; i++) {
        unsigned char *p = malloc((size_t)i + 1);
        p[i] = (unsigned char)i;
        sum += p[i];
        free(p);
    }
    printf("5 cancellations, all at pthread_testcancel; checksum %lu\n", sum);
    return 0;
}
