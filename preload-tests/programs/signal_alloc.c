/* A timer signal whose handler allocates, interrupting a loop that takes glibc's arena lock.
 *
 * The main loop callocs, mallocs and frees blocks of 1100 to 64 KiB: sizes tcache does not
 * serve, so glibc takes the arena lock for nearly every call. A SIGALRM every `interval_us`
 * microseconds runs a handler that mallocs and frees small blocks, each at a call stack it has
 * not used before (a chain of `STEPS` calls through one of four functions per level: 4^8
 * distinct stacks), so a profiler that samples them keeps adding stacks to its tables.
 *
 * glibc's malloc is not async-signal-safe in general; this handler stays within what plain
 * glibc survives: its sizes are served by the thread's tcache (warmed before the timer starts,
 * never drained by the main loop, whose sizes are all larger), and each block is freed back to
 * the same tcache bin before the handler returns, so neither call reaches the arena lock the
 * interrupted code may hold. A profiler whose sampled path calls into glibc's arena from the
 * handler deadlocks.
 *
 * A second thread, idle with SIGALRM blocked, keeps glibc out of its single-thread mode, in
 * which malloc takes no lock at all and an allocator re-entered from the handler corrupts the
 * heap instead of deadlocking; `single` leaves it out to test that mode. `altstack` runs the
 * handler on an alternate signal stack (as programs with a stack-overflow handler do).
 *
 * Usage: signal_alloc SECONDS INTERVAL_US [single] [altstack]. Runs for SECONDS of wall time,
 * then prints its counts (which vary from run to run) and `ok`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define STEPS 8
#define HANDLER_ALLOCS 4
#define SLOTS 512

static const size_t handler_sizes[HANDLER_ALLOCS] = {24, 40, 56, 72};

volatile uintptr_t sink;
static volatile sig_atomic_t handler_runs;
static volatile unsigned long handler_allocs;
static unsigned path_counter;

/* The allocation at the end of every handler chain (its frames name the path taken). */
__attribute__((noinline)) void handler_leaf(size_t size) {
    char *p = malloc(size);
    if (p) {
        p[0] = (char)size;
        sink += (uintptr_t)p[0];
        handler_allocs++;
    }
    free(p);
}

static void step(unsigned path, int depth, size_t size);

/* Four distinct callers per level; the work after the call keeps it from being a tail call. */
#define STEP_FN(n)                                                                    \
    __attribute__((noinline)) void step_##n(unsigned path, int depth, size_t size) { \
        step(path, depth, size);                                                      \
        sink += (uintptr_t)(n + depth);                                               \
    }
STEP_FN(0)
STEP_FN(1)
STEP_FN(2)
STEP_FN(3)

__attribute__((noinline)) static void step(unsigned path, int depth, size_t size) {
    if (depth == 0) {
        handler_leaf(size);
    } else {
        switch (path & 3) {
        case 0: step_0(path >> 2, depth - 1, size); break;
        case 1: step_1(path >> 2, depth - 1, size); break;
        case 2: step_2(path >> 2, depth - 1, size); break;
        default: step_3(path >> 2, depth - 1, size); break;
        }
    }
    sink += (uintptr_t)depth;
}

static void on_alarm(int sig) {
    (void)sig;
    for (int i = 0; i < HANDLER_ALLOCS; i++) {
        unsigned path = path_counter++;
        step(path, STEPS, handler_sizes[i]);
    }
    handler_runs++;
}

static int idle_pipe[2];

/* Waits for the end of the run; its only job is to exist. */
static void *idle(void *arg) {
    (void)arg;
    char c;
    while (read(idle_pipe[0], &c, 1) < 0) {
    }
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    long interval_us = argc > 2 ? atol(argv[2]) : 100;
    int single = 0, altstack = 0;
    for (int i = 3; i < argc; i++) {
        single |= strcmp(argv[i], "single") == 0;
        altstack |= strcmp(argv[i], "altstack") == 0;
    }

    /* Warm the tcache bins of the handler's sizes: a few blocks each, allocated and freed. */
    for (int i = 0; i < HANDLER_ALLOCS; i++) {
        void *warm[3];
        for (int j = 0; j < 3; j++) warm[j] = malloc(handler_sizes[i]);
        for (int j = 0; j < 3; j++) free(warm[j]);
    }

    /* The idle thread starts with SIGALRM blocked, so the timer always interrupts this one. */
    sigset_t alarm_set, old_set;
    sigemptyset(&alarm_set);
    sigaddset(&alarm_set, SIGALRM);
    pthread_t idle_thread;
    if (pipe(idle_pipe) != 0) return 5;
    if (!single) {
        pthread_sigmask(SIG_BLOCK, &alarm_set, &old_set);
        if (pthread_create(&idle_thread, NULL, idle, NULL) != 0) return 6;
        pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    if (altstack) {
        static char alt[256 * 1024];
        stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0) return 8;
        sa.sa_flags |= SA_ONSTACK;
    }
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) return 2;
    struct itimerval it = {{0, interval_us}, {0, interval_us}};
    if (setitimer(ITIMER_REAL, &it, NULL) != 0) return 3;

    static void *slots[SLOTS];
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    unsigned long iterations = 0;
    double end = now_s() + seconds;
    for (;;) {
        if ((iterations & 63) == 0 && now_s() >= end) break;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        size_t slot = (size_t)(rng % SLOTS);
        size_t size = 1100 + (size_t)((rng >> 16) % (64 * 1024 - 1100));
        free(slots[slot]);
        char *p = (rng >> 40) & 1 ? calloc(1, size) : malloc(size);
        if (!p) return 4;
        p[size - 1] = 1;
        slots[slot] = p;
        iterations++;
    }

    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    for (size_t i = 0; i < SLOTS; i++) free(slots[i]);
    if (!single) {
        if (write(idle_pipe[1], "x", 1) != 1) return 7;
        pthread_join(idle_thread, NULL);
    }
    printf("iterations %lu\nhandler runs %ld\nhandler allocations %lu\nok\n", iterations,
           (long)handler_runs, handler_allocs);
    return 0;
}
