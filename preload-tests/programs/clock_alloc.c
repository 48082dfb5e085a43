/* Allocates in a loop (about 25 MB in 20,000 blocks, a third of them kept) and reads the wall
   clock, for the test of other preloads beside the shim (tests/other_preloads.rs): under
   libfaketime, or under a preload that allocates inside the functions it interposes. Prints
   what it allocated and whether the clock answered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile sink;

int main(void) {
    size_t total = 0, kept = 0;
    static char *keep[20000];
    for (int i = 0; i < 20000; i++) {
        size_t n = 1000 + i % 500;
        char *p = malloc(n);
        memset(p, 1, 16);
        sink = p;
        total += n;
        if (i % 3) {
            free(p);
        } else {
            keep[kept++] = p;
        }
    }
    struct timespec ts;
    int clock_ok = clock_gettime(CLOCK_REALTIME, &ts) == 0 && ts.tv_sec > 946684800;
    printf("allocated %zu bytes, kept %zu blocks; clock %s\n", total, kept, clock_ok ? "ok" : "failed");
    for (size_t i = 0; i < kept; i++) free(keep[i]);
    return 0;
}
