/* Forks CHILDREN short-lived children one after the other (argv[1], default 1000), each of
   which allocates 16 blocks of 4 KiB and 1 of 60 KiB under marker_storm, frees them and
   exits; the parent keeps 16 MiB of its own. Prints how many children failed (none). For
   tests/churn.rs and bench/churn.sh (with SECS, argv[2]: fork for that many seconds instead,
   and print the rate). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) void marker_storm(void) {
    void *p[17];
    for (int i = 0; i < 16; i++) {
        p[i] = malloc(4096);
        memset(p[i], 2, 4096);
    }
    p[16] = malloc(60 << 10);
    memset(p[16], 3, 60 << 10);
    for (int i = 0; i < 17; i++)
        free(p[i]);
}

void *keep[64];

int main(int argc, char **argv) {
    long children = argc > 1 ? atol(argv[1]) : 1000;
    double secs = argc > 2 ? atof(argv[2]) : 0;
    for (int i = 0; i < 64; i++) {
        keep[i] = malloc(256 << 10);
        memset(keep[i], 1, 256 << 10);
    }
    long forks = 0, failed = 0;
    double start = now();
    while (secs > 0 ? now() - start < secs : forks < children) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            marker_storm();
            exit(0);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
        forks++;
    }
    if (secs > 0)
        printf("%ld forks in %.1f s: %.0f a second, %ld failed\n", forks, secs, forks / secs, failed);
    else
        printf("%ld children, %ld failed\n", forks, failed);
    return failed != 0;
}
