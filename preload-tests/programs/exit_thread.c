/* exit() called from a thread other than main while other threads keep allocating: exit
 * handlers (the shim's final report) run on that thread with the others still running.
 * Keeps KEEP_N x KEEP_SIZE under marker_exit_keep first, then exits with status 3. The numbers
 * are mirrored in tests/exit.rs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NCHURN 4
#define KEEP_N 9
#define KEEP_SIZE 4321

/* Global, so the compiler cannot drop the stores (and with them the allocations). */
void *kept[KEEP_N];
static volatile unsigned long progress[NCHURN];

static void *churn(void *arg) {
    long t = (long)arg;
    void *ring[32] = {0};
    for (unsigned long n = 0;; n++) {
        unsigned slot = n % 32;
        free(ring[slot]);
        ring[slot] = malloc((n * 7 + (unsigned long)t * 13) % 2000 + 1);
        memset(ring[slot], 1, 1);
        if (n % 7 == 0) ring[slot] = realloc(ring[slot], 3000);
        progress[t] = n;
    }
    return NULL;
}

__attribute__((noinline)) void marker_exit_keep(void) {
    for (int i = 0; i < KEEP_N; i++) {
        kept[i] = malloc(KEEP_SIZE);
        memset(kept[i], 7, KEEP_SIZE);
    }
}

static void *exiter(void *arg) {
    (void)arg;
    marker_exit_keep();
    /* Let the others get going: every one has allocated a few thousand times. */
    for (int t = 0; t < NCHURN; t++)
        while (progress[t] < 2000) usleep(1000);
    printf("exiting from a thread with status 3\n");
    fflush(stdout);
    exit(3);
}

int main(void) {
    pthread_t th[NCHURN + 1];
    for (long t = 0; t < NCHURN; t++) pthread_create(&th[t], NULL, churn, (void *)t);
    pthread_create(&th[NCHURN], NULL, exiter, NULL);
    for (int t = 0; t <= NCHURN; t++) pthread_join(th[t], NULL);
    printf("not reached\n");
    return 0;
}
