// A daemon's pattern: the parent (root) forks a worker that drops to uid/gid 65534 (nobody),
// allocates and sleeps for <ms> (periodic reports are due meanwhile), then exits; the parent
// waits for it. Mirrored by tests/descriptors.rs.
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// nanosleep, not usleep: it is one of the shim's safe points, where its report thread starts.
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void *volatile keep[64];

int main(int argc, char **argv) {
    int ms = argc > 1 ? atoi(argv[1]) : 2500;
    keep[0] = malloc(30011);
    memset(keep[0], 1, 30011);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
            perror("drop privileges");
            _exit(3);
        }
        for (int i = 1; i < 64; i++) {
            keep[i] = malloc(50021 * i);
            memset(keep[i], 2, 50021 * i);
            sleep_ms(ms / 64);
        }
        printf("worker uid %d\n", (int)getuid());
        exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("worker exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
