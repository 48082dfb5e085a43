#define _GNU_SOURCE
/* Threads that ask glibc for their own attributes first thing (as Rust's std does at every
 * thread start): pthread_getattr_np allocates while holding the thread's lock. Usage:
 * getattr_threads N. Prints the number of threads whose stack size was read.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_long ok;

static void *worker(void *arg) {
    (void)arg;
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        size_t size = 0;
        if (pthread_attr_getstacksize(&a, &size) == 0 && size > 0) atomic_fetch_add(&ok, 1);
        pthread_attr_destroy(&a);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i += 2) {
        pthread_t t[2];
        for (int j = 0; j < 2; j++)
            if (pthread_create(&t[j], NULL, worker, NULL) != 0) return 1;
        for (int j = 0; j < 2; j++) pthread_join(t[j], NULL);
    }
    printf("threads %ld, attributes read %ld\n", n, atomic_load(&ok));
    return 0;
}
