/* 16 threads allocate blocks and hand them to their neighbour, which frees them (cross-thread
 * frees), for many rounds; each thread also keeps KEEP_N blocks of KEEP_SIZE bytes allocated
 * under marker_thread_keep until exit. Prints a checksum that does not depend on scheduling.
 * The numbers are mirrored in tests/threads.rs. The shim counts glibc chunks, whose sizes
 * depend on how the heap was used before, so the program counts each marker's chunk bytes
 * itself (a realloc's growth as allocated, its shrink as freed) and writes them as
 * `chunks <marker> <allocated> <freed>` lines to the file named by $CHUNKS_FILE, if set. */
#include <malloc.h>
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
/* Chunk bytes by the thread that allocated, reallocated or freed them: allocated and freed
 * under marker_thread_keep, then under marker_thread_handoff. */
static unsigned long chunks[NTHREADS][4];

/* A live block's glibc chunk (none here is mmapped, whose header is 16 bytes). */
static size_t chunk(void *p) { return malloc_usable_size(p) + 8; }

static size_t size_for(int t, int r, int i) { return (size_t)((t * 131 + r * 17 + i * 29) % 4000) + 1; }

__attribute__((noinline)) void *marker_thread_handoff(size_t n) { return malloc(n); }

__attribute__((noinline)) void marker_thread_keep(int t) {
    for (int i = 0; i < KEEP_N; i++) {
        kept[t][i] = malloc(KEEP_SIZE);
        chunks[t][0] += chunk(kept[t][i]);
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
            chunks[t][2] += chunk(p);
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
            if (i % 2) {
                size_t old = chunk(p);
                p = realloc(p, n + 100);
                size_t c = chunk(p);
                if (c > old) chunks[t][2] += c - old;
                else chunks[t][3] += old - c;
            }
            chunks[t][3] += chunk(p);
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
    const char *path = getenv("CHUNKS_FILE");
    if (path) {
        unsigned long c[4] = {0};
        for (int t = 0; t < NTHREADS; t++)
            for (int k = 0; k < 4; k++) c[k] += chunks[t][k];
        FILE *out = fopen(path, "w");
        if (!out) return 2;
        fprintf(out, "chunks marker_thread_keep %lu %lu\n", c[0], c[1]);
        fprintf(out, "chunks marker_thread_handoff %lu %lu\n", c[2], c[3]);
        fclose(out);
    }
    return 0;
}
