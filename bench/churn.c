/* churn: two threads of malloc/free churn with a realistic size mix.
 *
 * Each thread keeps a ring of RING live blocks; every step frees the block in a random slot and
 * puts a new one there, so blocks live for a while (RING steps on average) instead of being
 * freed at once. Sizes: 99 % are 16..512 B, 1 % are 4 KiB..1 MiB. Each new block is written to
 * (all of a small block, the first 512 B and the last byte of a large one, as a program filling
 * in a record would), and read back before it is freed. Fixed-seed xorshift64* per thread, so every run does the same work.
 *
 *   churn [steps_per_thread]   (default 36000000)
 *
 * With CHURN_MEMINFO=1 the threads meet at a barrier when their churn is done, before freeing
 * their rings, and the main thread prints where the memory is at that point: resident bytes in
 * glibc's heaps ([heap] and the arenas' 64 MiB-aligned heaps, from /proc/self/smaps) and
 * everywhere else (thread stacks, libraries, a profiler's own mappings), with glibc's arena
 * bytes and the bytes in use (mallinfo2). Peak RSS moves with how glibc happens to place blocks
 * in arenas; the resident bytes outside glibc's heaps are what a profiler adds of its own.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 2
#define RING 8192

static int meminfo;
static pthread_barrier_t churned, reported;

struct job {
    uint64_t seed;
    long steps;
    uint64_t checksum;
};

static uint64_t next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static size_t pick_size(uint64_t r) {
    if (r % 100 == 0) {
        /* ~1 %: 4 KiB .. 1 MiB */
        return 4096 + (size_t)((r >> 8) % ((1u << 20) - 4096 + 1));
    }
    /* ~99 %: 16 .. 512 B */
    return 16 + (size_t)((r >> 8) % (512 - 16 + 1));
}

static void *worker(void *arg) {
    struct job *job = arg;
    uint64_t s = job->seed;
    unsigned char **ring = calloc(RING, sizeof *ring);
    size_t *sizes = calloc(RING, sizeof *sizes);
    uint64_t sum = 0;
    if (!ring || !sizes) {
        perror("calloc");
        exit(1);
    }
    for (long i = 0; i < job->steps; i++) {
        uint64_t r = next(&s);
        size_t slot = (size_t)(r >> 40) % RING;
        if (ring[slot]) {
            /* read the block's first and last byte before freeing it */
            sum += ring[slot][0] + ring[slot][sizes[slot] - 1];
            free(ring[slot]);
        }
        size_t size = pick_size(next(&s));
        unsigned char *p = malloc(size);
        if (!p) {
            perror("malloc");
            exit(1);
        }
        size_t head = size < 512 ? size : 512;
        memset(p, (int)(i & 0xff), head);
        p[size - 1] = (unsigned char)r;
        ring[slot] = p;
        sizes[slot] = size;
        sum = sum * 31 + size;
    }
    if (meminfo) {
        pthread_barrier_wait(&churned);
        pthread_barrier_wait(&reported);
    }
    for (size_t k = 0; k < RING; k++) {
        free(ring[k]);
    }
    free(ring);
    free(sizes);
    job->checksum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 36000000;
    pthread_t tid[THREADS];
    struct job jobs[THREADS];
    const char *mi = getenv("CHURN_MEMINFO");
    meminfo = mi && *mi == '1';
    if (meminfo) {
        pthread_barrier_init(&churned, NULL, THREADS + 1);
        pthread_barrier_init(&reported, NULL, THREADS + 1);
    }
    for (int t = 0; t < THREADS; t++) {
        jobs[t].seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(t + 1);
        jobs[t].steps = steps;
        jobs[t].checksum = 0;
        if (pthread_create(&tid[t], NULL, worker, &jobs[t]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    if (meminfo) {
        pthread_barrier_wait(&churned);
        FILE *f = fopen("/proc/self/smaps", "r");
        if (!f) {
            perror("/proc/self/smaps");
            return 1;
        }
        char line[512];
        int in_heap = 0;
        unsigned long heap_kb = 0, other_kb = 0;
        while (fgets(line, sizeof line, f)) {
            unsigned long start, end, kb;
            char perms[8];
            if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3) {
                int anon = strchr(line, '/') == NULL && strchr(line, '[') == NULL;
                in_heap = strstr(line, "[heap]") != NULL ||
                          (anon && perms[0] == 'r' && (start & ((64ul << 20) - 1)) == 0);
            } else if (sscanf(line, "Rss: %lu kB", &kb) == 1) {
                *(in_heap ? &heap_kb : &other_kb) += kb;
            }
        }
        fclose(f);
        struct mallinfo2 m = mallinfo2();
        printf("meminfo: heap_resident_kib %lu other_resident_kib %lu arena_kib %zu in_use_kib %zu\n",
               heap_kb, other_kb, m.arena >> 10, (m.uordblks + m.hblkhd) >> 10);
        fflush(stdout);
        pthread_barrier_wait(&reported);
    }
    uint64_t total = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(tid[t], NULL);
        total ^= jobs[t].checksum;
    }
    printf("churn: %ld steps x %d threads, checksum %016llx\n", steps, THREADS,
           (unsigned long long)total);
    return 0;
}
