/* dlopen from many threads at once under the shim: NTHREADS threads each load and unload the
 * libraries named on the command line (a missing one prints "missing", the same in every run)
 * ROUNDS times, calling tlslib_touch in libraries that have it (dynamic TLS, see tlslib.c) and
 * allocating in between. Output is one line per library plus a checksum. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 8
#define ROUNDS 5

static int nlibs;
static char **libs;
static int *found; /* per library: 1 if every thread could load it, 0 if none could */
static int *missing;
static unsigned long sums[NTHREADS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start;

static void *worker(void *arg) {
    long t = (long)arg;
    unsigned long sum = 0;
    pthread_barrier_wait(&start);
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < nlibs; k++) {
            int i = (k + (int)t) % nlibs;
            void *h = dlopen(libs[i], RTLD_NOW | (r % 2 ? RTLD_GLOBAL : RTLD_LOCAL));
            char *buf = malloc(100 + (size_t)i * 10);
            memset(buf, 'x', 100);
            sum += (unsigned char)buf[99];
            free(buf);
            pthread_mutex_lock(&lock);
            if (h) found[i]++;
            else missing[i]++;
            pthread_mutex_unlock(&lock);
            if (!h) continue;
            unsigned long (*touch)(unsigned long) =
                (unsigned long (*)(unsigned long))dlsym(h, "tlslib_touch");
            if (touch) sum += touch((unsigned long)(t * 100 + r));
            dlclose(h);
        }
    }
    sums[t] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    nlibs = argc - 1;
    libs = argv + 1;
    found = calloc((size_t)nlibs + 1, sizeof *found);
    missing = calloc((size_t)nlibs + 1, sizeof *missing);
    pthread_barrier_init(&start, NULL, NTHREADS);
    pthread_t th[NTHREADS];
    for (long t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    unsigned long total = 0;
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(th[t], NULL);
        total += sums[t];
    }
    for (int i = 0; i < nlibs; i++) {
        const char *name = strrchr(libs[i], '/') ? strrchr(libs[i], '/') + 1 : libs[i];
        printf("%s: %s\n", name,
               found[i] == NTHREADS * ROUNDS ? "loaded" : missing[i] == NTHREADS * ROUNDS ? "missing" : "inconsistent");
    }
    printf("checksum %lu\n", total);
    return 0;
}
