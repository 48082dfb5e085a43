/* Three threads call exit(7) at the same moment (released together by a barrier) while main
 * waits to join them. Every block allocated is kept, so a report is due at exit. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

void *volatile kept[64];
static pthread_barrier_t go;

__attribute__((noinline)) void *marker_race_keep(size_t n) { return malloc(n); }

static void *racer(void *arg) {
    (void)arg;
    pthread_barrier_wait(&go);
    exit(7);
}

int main(void) {
    for (int i = 0; i < 64; i++) kept[i] = marker_race_keep(1000 + 16 * i);
    pthread_barrier_init(&go, NULL, 3);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&t[i], NULL, racer, NULL) != 0) return 2;
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 3;
}
