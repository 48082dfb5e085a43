/* A program whose retained memory moves between two report sets, for `ying run` and `ying diff`.
 *
 *   leaky             keep_early (2 MiB), sleep (the first check writes a set), then
 *                     keep_late (6 MiB) and free half of keep_early's blocks, exit(3)
 *                     (the exit report writes the second set)
 *   leaky wait        print "ready <pid>", wait for SIGTERM, exit(42) from its handler
 *   leaky die         keep_early, then kill itself with SIGTERM (default action)
 *
 * The figures are mirrored in cli/tests/ying_run.rs. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)
#define EARLY 32 /* 2 MiB */
#define LATE 96  /* 6 MiB */

void *early[EARLY];
void *late[LATE];

__attribute__((noinline)) void keep_early(void) {
    for (int i = 0; i < EARLY; i++) {
        early[i] = malloc(BLOCK);
        memset(early[i], 1, BLOCK);
    }
}

__attribute__((noinline)) void keep_late(void) {
    for (int i = 0; i < LATE; i++) {
        late[i] = malloc(BLOCK);
        memset(late[i], 2, BLOCK);
    }
}

__attribute__((noinline)) void drop_half_early(void) {
    for (int i = 0; i < EARLY / 2; i++) {
        free(early[i]);
        early[i] = NULL;
    }
}

static void on_term(int sig) {
    (void)sig;
    _exit(42);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "wait") == 0) {
        signal(SIGTERM, on_term);
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        for (;;)
            pause();
    }
    keep_early();
    if (argc > 1 && strcmp(argv[1], "die") == 0) {
        kill(getpid(), SIGTERM);
        pause();
    }
    /* nanosleep is a safe point (called directly: glibc's usleep reaches it internally, where
     * the shim does not see it): the report thread starts, and its first check writes a set. */
    struct timespec ts = {2, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    keep_late();
    drop_half_early();
    long sum = 0;
    for (int i = 0; i < LATE; i++)
        sum += ((char *)late[i])[i];
    for (int i = EARLY / 2; i < EARLY; i++)
        sum += ((char *)early[i])[i];
    printf("%ld\n", sum);
    exit(3);
}
