// Lists the descriptors the process holds (/proc/self/fd, less the listing's own) and counts
// them with fcntl, before and after a sleep during which the profiler writes periodic reports
// (YING_CHECK_INTERVAL_SECS=1), allocating as it goes. Mirrored by tests/descriptors.rs.
#include <dirent.h>
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

static void list(const char *when) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) { perror("opendir"); exit(1); }
    int own = dirfd(d);
    int fds[256], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd != own) fds[n++] = fd;
    }
    closedir(d);
    // Sorted, so the order of readdir does not matter.
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (fds[j] < fds[i]) { int t = fds[i]; fds[i] = fds[j]; fds[j] = t; }
    printf("%s:", when);
    for (int i = 0; i < n; i++) printf(" %d", fds[i]);
    int count = 0;
    for (int fd = 0; fd < 65536; fd++)
        if (fcntl(fd, F_GETFD) >= 0) count++;
    printf(" (%d open)\n", count);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int ms = argc > 1 ? atoi(argv[1]) : 2500;
    list("start");
    for (int i = 0; i < 64; i++) {
        keep[i] = malloc(10007 * (i + 1));
        memset(keep[i], i, 10007 * (i + 1));
        sleep_ms(ms / 64);
    }
    list("after");
    // The next open gets the lowest free number.
    int fd = open("/dev/null", O_RDONLY);
    printf("next open: %d\n", fd);
    return 0;
}
