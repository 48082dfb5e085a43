/* A single-threaded parent forks a child; both allocate (marker_parent, marker_child), then the
 * child sleeps 1.5 s in nanosleep (a safe point: its report thread starts there) and exits;
 * the parent waits for it. With a check every second the child writes a periodic report of its
 * own before its exit report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void *volatile sink[64];

__attribute__((noinline)) void *marker_parent(size_t n) { return malloc(n); }
__attribute__((noinline)) void *marker_child(size_t n) { return malloc(n); }

int main(void) {
    for (int i = 0; i < 4; i++) sink[i] = marker_parent(40000);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 4; i < 12; i++) sink[i] = marker_child(50000);
        struct timespec ts = {1, 500000000};
        nanosleep(&ts, NULL);
        printf("child done\n");
        return 0;
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("parent done, child exited with %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
