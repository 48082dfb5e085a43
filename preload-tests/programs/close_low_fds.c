// With the profiler's endpoint on (started at the first nanosleep): closes every descriptor from 3 to 63, dup2s stdout over 3
// to 9, closes them again, then opens /dev/null twice and prints the numbers it got (3 and 4
// when nothing else is there). Then writes <ready file> and waits for <stop file> (at most
// <limit> seconds), allocating, so a client can query the endpoint meanwhile.
// Usage: close_low_fds <ready file> <stop file> <limit secs>. Mirrored by tests/descriptors.rs.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// nanosleep, not usleep: it is one of the shim's safe points, where its report thread starts.
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void *volatile keep[64];

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    // A safe point first: under the shim, the endpoint starts here, so the closes below would
    // hit its socket if it were numbered low. 300 ms: after the report thread's start-up, and
    // before its first check, whose brief opens could otherwise race with the opens below.
    sleep_ms(300);
    for (int fd = 3; fd < 64; fd++) close(fd);
    for (int fd = 3; fd < 10; fd++) dup2(1, fd);
    for (int fd = 3; fd < 10; fd++) close(fd);
    int a = open("/dev/null", O_RDONLY);
    int b = open("/dev/null", O_RDONLY);
    printf("opened %d %d\n", a, b);
    fflush(stdout);
    int r = open(argv[1], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (r >= 0) close(r);
    int limit = atoi(argv[3]) * 10;
    for (int i = 0; i < limit && access(argv[2], F_OK) != 0; i++) {
        keep[i % 64] = malloc(4099);
        memset(keep[i % 64], 7, 4099);
        sleep_ms(100);
    }
    printf("done\n");
    return 0;
}
