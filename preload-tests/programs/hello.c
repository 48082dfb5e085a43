/* A small program for configuration tests: a few allocations and a line of output.
 * Arguments (optional): exit status, then milliseconds to sleep before exiting.
 * It also allocates and frees one 8 MiB block, so that default sampling (one sample per
 * 512 KiB on average) takes a sample (missed with probability e^-16): a process that took no
 * sample writes no report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) void *marker_hello(size_t n) { return malloc(n); }

void *volatile big_sink;

int main(int argc, char **argv) {
    unsigned long sum = 0;
    for (int i = 0; i < 200; i++) {
        char *p = marker_hello((size_t)i * 10 + 1);
        memset(p, 'a' + i % 26, (size_t)i * 10 + 1);
        sum += (unsigned char)p[i];
        if (i % 3) free(p);
    }
    big_sink = malloc(8u << 20);
    free(big_sink);
    printf("hello %lu\n", sum);
    if (argc > 2) {
        long ms = atol(argv[2]);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return argc > 1 ? atoi(argv[1]) : 0;
}
