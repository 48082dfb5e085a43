/* Mapping stress for tests/mmap.rs: 8 threads map, partly unmap, remap and unmap anonymous
 * regions of random sizes while the main thread forks children that map and unmap too. At the
 * end each thread t keeps KEEP regions of t + 1 pages, mapped in keep_region; the program
 * prints their total, the same with and without the shim. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define ROUNDS 3000
#define KEEP 4
#define FORKS 20

static long page;
static char *volatile kept[THREADS][KEEP];

static char *anon(long pages) {
    char *p = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    p[0] = 1;
    return p;
}

__attribute__((noinline)) char *keep_region(long pages) {
    return anon(pages);
}

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned seed = (unsigned)t * 7919u + 1u;
    for (int i = 0; i < ROUNDS; i++) {
        long n = 2 + rand_r(&seed) % 15;
        char *p = anon(n);
        switch (rand_r(&seed) % 4) {
        case 0: /* a hole, then the rest */
            munmap(p + page, page);
            munmap(p, page);
            munmap(p + 2 * page, (n - 2) * page);
            break;
        case 1: { /* grow (may move), then unmap */
            char *q = mremap(p, n * page, (n + 5) * page, MREMAP_MAYMOVE);
            if (q == MAP_FAILED) exit(1);
            q[(n + 4) * page] = 1;
            munmap(q, (n + 5) * page);
            break;
        }
        case 2: { /* shrink in place, then unmap */
            char *q = mremap(p, n * page, page, 0);
            if (q != p) exit(1);
            munmap(q, page);
            break;
        }
        default:
            munmap(p, n * page);
        }
        if (i % 500 == 0) {
            void *m = malloc(100 + i); /* malloc interleaved, sampled on the same thread */
            free(m);
        }
    }
    for (int k = 0; k < KEEP; k++) kept[t][k] = keep_region(t + 1);
    return NULL;
}

int main(void) {
    page = sysconf(_SC_PAGESIZE);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) {
        if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) return 1;
    }
    for (int f = 0; f < FORKS; f++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            char *p = anon(3);
            munmap(p + page, page);
            munmap(p, 3 * page);
            _exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    }
    for (long t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    long total = 0;
    for (long t = 0; t < THREADS; t++) total += KEEP * (t + 1) * page;
    printf("kept %ld bytes mapped in %d regions\n", total, THREADS * KEEP);
    return 0;
}
