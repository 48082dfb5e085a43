/* main ends with pthread_exit while a worker still runs: glibc ends the process when the
 * worker, its last thread, ends (exit(0): the atexit handler prints). argv[1] is "return" (the
 * worker returns), "exit" (the worker calls pthread_exit too) or "cancel" (a sleeping thread is
 * cancelled by the worker, which returns first: the cancelled thread is the last). main first sleeps (a safe
 * point: under the shim the report thread has started) and keeps a block. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile kept;
static int worker_exits, worker_cancels;
static pthread_t sleeper_thread;

static void *sleeper(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {10, 0};
        nanosleep(&ts, NULL); /* a cancellation point */
    }
    return NULL;
}

__attribute__((noinline)) void *marker_lifecycle_keep(void) { return malloc(5321); }

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void on_exit_handler(void) { printf("atexit handler ran\n"); }

static void *worker(void *arg) {
    (void)arg;
    sleep_ms(300);
    kept = marker_lifecycle_keep();
    printf("worker done\n");
    fflush(stdout);
    if (worker_exits) pthread_exit(NULL);
    if (worker_cancels) pthread_cancel(sleeper_thread);
    return NULL;
}

int main(int argc, char **argv) {
    worker_exits = argc > 1 && strcmp(argv[1], "exit") == 0;
    worker_cancels = argc > 1 && strcmp(argv[1], "cancel") == 0;
    atexit(on_exit_handler);
    kept = marker_lifecycle_keep();
    sleep_ms(20);
    pthread_t t;
    if (worker_cancels && pthread_create(&sleeper_thread, NULL, sleeper, NULL) != 0) return 2;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    printf("main exits\n");
    fflush(stdout);
    pthread_exit(NULL);
}
