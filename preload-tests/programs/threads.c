/* 16 threads allocate blocks and hand them to their neighbour, which frees them (cross-thread
 * frees), for many rounds; each thread also keeps KEEP_N blocks of KEEP_SIZE bytes allocated
 * under marker_thread_keep until exit. Prints a checksum that does not depend on scheduling.
 * The numbers are mirrored in tests/threads.rs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 16
#define ROUNDS 40
#define PER_ROUND 48
#define KEEP_N 10
#define KEEP_SIZE 5005

static void *mailbox[NTHREADS][PER_ROUND];
static size_t mailsize[NTHREADS][PER_ROUND];
static void *kept[NTHREADS][KEEP_N];
static unsigned long sums[NTHREADS];
static pthread_barrier_t barrier;

static size_t size_for(int t, int r, int i) { return (size_t)((t * 131 + r * 17 + i * 29) % 4000) + 1; }

__attribute__((noinline)) void *marker_thread_handoff(size_t n) { return malloc(n); }

__attribute__((noinline)) void marker_thread_keep(int t) {
    for (int i = 0; i < KEEP_N; i++) {
        kept[t][i] = malloc(KEEP_SIZE);
        memset(kept[t][i], t, KEEP_SIZE);
    }
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    int from = (t + 1) % NTHREADS;
    unsigned long sum = 0;
    marker_thread_keep(t);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < PER_ROUND; i++) {
            size_t n = size_for(t, r, i);
            unsigned char *p = marker_thread_handoff(n);
            memset(p, (t + r + i) & 0xff, n);
            mailbox[t][i] = p;
            mailsize[t][i] = n;
        }
        pthread_barrier_wait(&barrier);
        /* Free the neighbour's blocks, half of them after a realloc on this thread. */
        for (int i = 0; i < PER_ROUND; i++) {
            unsigned char *p = mailbox[from][i];
            size_t n = mailsize[from][i];
            sum += p[n - 1] + n;
            if (i % 2)
                p = realloc(p, n + 100);
            free(p);
        }
        pthread_barrier_wait(&barrier);
    }
    for (int i = 0; i < KEEP_N; i++)
        sum += ((unsigned char *)kept[t][i])[KEEP_SIZE - 1];
    sums[t] = sum;
    return NULL;
}

int main(void) {
    pthread_t th[NTHREADS];
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    for (long t = 0; t < NTHREADS; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) {
            perror("pthread_create");
            return 1;
        }
    unsigned long total = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        total += sums[t];
    }
    printf("threads %d rounds %d checksum %lu\n", NTHREADS, ROUNDS, total);
    return 0;
}
