/* A program driven by its arguments, for the dump triggers' tests (tests/triggers.rs).
 *
 *   triggers STOPFILE CMD...
 *
 * Commands, run in order:
 *   aN   allocate N MiB in one block and touch every page (the block is kept)
 *   f    free the most recent block kept
 *   sN   sleep N ms (nanosleep: a safe point of the shim)
 *   r    print "ready" (flushed)
 *   g    print "grown" (flushed)
 *   w    wait until STOPFILE exists (nanosleep every 20 ms), at most 60 s
 *   W    the same without any safe point: busy-polls with access() and clock_gettime()
 *   h    install the program's own SIGUSR2 handler (a counter) and print "handler installed"
 *   c    print "host handler ran N times" (N > 0 printed as "at least once")
 *
 * Blocks are allocated with the mmap threshold fixed at 1 MiB, so that each is its own mapping
 * and freeing it lowers the resident set at once. Prints "done" at the end.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t host_runs;

static void host_handler(int sig) {
    (void)sig;
    host_runs++;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    static char *blocks[1024];
    int nblocks = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: triggers STOPFILE CMD...\n");
        return 2;
    }
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    const char *stop = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *c = argv[i];
        long n = atol(c + 1);
        switch (c[0]) {
        case 'a': {
            size_t size = (size_t)n << 20;
            char *p = malloc(size);
            if (!p || nblocks == 1024) {
                fprintf(stderr, "allocation failed\n");
                return 1;
            }
            memset(p, 1, size);
            blocks[nblocks++] = p;
            break;
        }
        case 'f':
            if (nblocks > 0) free(blocks[--nblocks]);
            break;
        case 's':
            sleep_ms(n);
            break;
        case 'r':
            printf("ready\n");
            fflush(stdout);
            break;
        case 'g':
            printf("grown\n");
            fflush(stdout);
            break;
        case 'w': {
            for (int k = 0; k < 3000 && access(stop, F_OK) != 0; k++) sleep_ms(20);
            break;
        }
        case 'W': {
            double end = now_s() + 60;
            while (access(stop, F_OK) != 0 && now_s() < end) {
            }
            break;
        }
        case 'h': {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = host_handler;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGUSR2, &sa, NULL);
            printf("handler installed\n");
            fflush(stdout);
            break;
        }
        case 'c':
            printf("host handler ran %s\n", host_runs > 0 ? "at least once" : "0 times");
            break;
        default:
            fprintf(stderr, "unknown command %s\n", c);
            return 2;
        }
    }
    printf("done\n");
    return 0;
}
