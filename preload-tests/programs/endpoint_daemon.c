/* A daemon's start (preload-tests/tests/endpoint.rs): sleeps 300 ms (a safe point: the shim's
 * endpoint starts), forks, and the parent exits. The child creates the file argv[2] once its
 * parent is gone, then runs until the file argv[1] exists (at most 30 s). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    struct timespec step = {0, 300 * 1000 * 1000};
    nanosleep(&step, NULL);
    pid_t parent = getpid();
    fflush(stdout);
    if (fork() != 0) return 0;
    int announced = 0;
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 1500 && access(argv[1], F_OK) != 0; i++) {
        if (!announced && getppid() != parent) {
            FILE *f = fopen(argv[2], "w");
            if (f) fclose(f);
            announced = 1;
        }
        nanosleep(&tick, NULL);
    }
    return 0;
}
