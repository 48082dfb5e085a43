/* A program whose allocations are timed while its profile is scraped, for
 * tests/scrape_latency.rs and bench/scrape.sh: keeps STACKS blocks of 64 bytes at as many
 * distinct call stacks (argv[1], default 65536; distinct_stacks.h's; compile with
 * -fno-optimize-sibling-calls -fno-ipa-icf), prints "ready" and then, for SECS seconds
 * (argv[2], default 3), allocates and frees one block of 100 bytes at a time, timing each
 * malloc; run with every allocation a sample (YING_SAMPLE_INTERVAL_BYTES=1), each of them
 * takes its stack's lock. Prints the slowest malloc in microseconds and the 99.9th percentile
 * to the file named by argv[3] (stdout stays the same in every run). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "distinct_stacks.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

void **keep;
void *volatile sink;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 65536;
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    const char *out = argc > 3 ? argv[3] : "/dev/null";
    keep = malloc(sizeof(void *) * (size_t)n);
    for (long i = 0; i < n; i++)
        keep[i] = distinct_stack(i);
    /* A sleep (the report thread, and with it the endpoint, starts at this safe point). */
    usleep(200000);
    printf("ready\n");
    fflush(stdout);
    /* Latencies in microseconds, a bucket each up to 100 ms. */
    static long hist[100001];
    long k = 0;
    double worst = 0, end = now() + secs;
    while (now() < end) {
        double a = now();
        void *p = malloc(100);
        double us = (now() - a) * 1e6;
        sink = p;
        free(p);
        hist[us < 100000 ? (long)us : 100000]++;
        if (us > worst)
            worst = us;
        k++;
    }
    long seen = 0, p999 = 0;
    for (long b = 0; b <= 100000; b++) {
        seen += hist[b];
        if (seen * 1000 >= k * 999) {
            p999 = b;
            break;
        }
    }
    FILE *f = fopen(out, "w");
    if (f) {
        fprintf(f, "%.0f %ld %ld\n", worst, p999, k);
        fclose(f);
    }
    printf("done\n");
    return 0;
}
