// Lowers its soft RLIMIT_NOFILE to 4, 5, then 6 and opens /dev/null until that fails, prints
// how many it opened, and holds them for 1.3 s (periodic reports are due meanwhile), then
// closes them. Restores the limit before it exits. Mirrored by tests/descriptors.rs.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

// nanosleep, not usleep: it is one of the shim's safe points, where its report thread starts.
static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void *volatile keep[32];

int main(void) {
    struct rlimit old;
    getrlimit(RLIMIT_NOFILE, &old);
    int k = 0;
    for (int lim = 4; lim <= 6; lim++) {
        struct rlimit rl = {lim, old.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) { perror("setrlimit"); return 1; }
        int fds[64], n = 0;
        for (;;) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0) break;
            fds[n++] = fd;
        }
        int err = errno;
        printf("limit %d: opened %d (%s)\n", lim, n, strerror(err));
        fflush(stdout);
        for (int t = 0; t < 13; t++) {
            keep[k % 32] = malloc(20011 * (t + 1));
            memset(keep[k % 32], 1, 20011 * (t + 1));
            k++;
            sleep_ms(100);
        }
        for (int i = 0; i < n; i++) close(fds[i]);
    }
    setrlimit(RLIMIT_NOFILE, &old);
    return 0;
}
