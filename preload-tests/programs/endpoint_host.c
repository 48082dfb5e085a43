/* A long-running host for the endpoint and push tests (preload-tests/tests/endpoint.rs,
 * push.rs): keeps KEEP blocks from marker_keep, then churns through marker_churn every 5 ms
 * (nanosleep: a safe point, where the shim starts its threads) until the file argv[1] exists
 * or argv[2] seconds passed. Prints the same line whatever the run's length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEEP 2000      /* endpoint.rs mirrors these */
#define KEEP_SIZE 4099
#define CHURN 50
#define CHURN_SIZE 10007

void *kept[KEEP];
/* The churned blocks escape through here, so the compiler keeps each malloc and free. */
void *volatile churn_sink;

__attribute__((noinline)) void marker_keep(void) {
    for (int i = 0; i < KEEP; i++) {
        kept[i] = malloc(KEEP_SIZE);
        memset(kept[i], i & 0xff, KEEP_SIZE);
    }
}

__attribute__((noinline)) void marker_churn(void) {
    for (int i = 0; i < CHURN; i++) {
        char *p = malloc(CHURN_SIZE);
        p[0] = (char)i;
        churn_sink = p;
        free(churn_sink);
    }
}

int main(int argc, char **argv) {
    const char *stop = argc > 1 ? argv[1] : "";
    int max_secs = argc > 2 ? atoi(argv[2]) : 30;
    marker_keep();
    struct timespec step = {0, 5 * 1000 * 1000};
    time_t start = time(NULL);
    do {
        marker_churn();
        nanosleep(&step, NULL);
    } while (access(stop, F_OK) != 0 && time(NULL) - start < max_secs);
    unsigned long sum = 0;
    for (int i = 0; i < KEEP; i++) sum += ((unsigned char *)kept[i])[KEEP_SIZE - 1];
    printf("kept %d blocks, checksum %lu\n", KEEP, sum);
    return 0;
}
