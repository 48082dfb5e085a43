/* An image that ends by exec, for tests/churn.rs. Modes (argv[1]):
 *   first   keeps 4 MiB under marker_first, sleeps 700 ms (the report thread writes the live
 *           file meanwhile), then execv's itself with "second";
 *   second  keeps 2 MiB under marker_second and exits normally;
 *   fail    keeps 4 MiB, sleeps 300 ms, calls execv on a path that does not exist (it fails),
 *           sleeps 700 ms more and ends with _exit(0), which runs no exit handler: its live
 *           file must be there, written again after the failed exec removed it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *kept[64];

__attribute__((noinline)) void marker_first(void) {
    for (int i = 0; i < 16; i++) {
        kept[i] = malloc(256 << 10);
        memset(kept[i], 1, 256 << 10);
    }
}

__attribute__((noinline)) void marker_second(void) {
    for (int i = 0; i < 8; i++) {
        kept[i] = malloc(256 << 10);
        memset(kept[i], 2, 256 << 10);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "first";
    if (strcmp(mode, "second") == 0) {
        marker_second();
        printf("second image done\n");
        return 0;
    }
    marker_first();
    if (strcmp(mode, "fail") == 0) {
        usleep(300000);
        char *args[] = {"nothing", NULL};
        if (execv("/nonexistent/ying-test", args) != 0)
            printf("exec failed as it should\n");
        fflush(stdout);
        usleep(700000);
        _exit(0);
    }
    usleep(700000);
    printf("first image execs\n");
    fflush(stdout);
    char *args[] = {argv[0], "second", NULL};
    execv("/proc/self/exe", args);
    perror("execv");
    return 1;
}
