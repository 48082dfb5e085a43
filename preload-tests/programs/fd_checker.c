// Checks, after every open, dup, dup2, dup3, pipe, socket and accept-free socketpair, that the
// kernel gave it the lowest free number (the program keeps its own list of what it holds), and
// that every close of a number it holds succeeds, for `ms` milliseconds while it allocates (so
// that the profiler samples, writes reports and its live file, and serves its endpoint). Then
// checks that a pipe whose write end it closed reads end-of-file at once (nothing else holds
// the write end), and prints what it saw: the same lines with and without the shim.
// Mirrored by tests/descriptors.rs.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 64
static int held[MAXFD]; // 1: the program holds this number
static long wrong_number, failed_close, failed_call, ops;

static int lowest_free(void) {
    for (int i = 0; i < MAXFD; i++)
        if (!held[i]) return i;
    return MAXFD;
}

static void got(int fd, int expected, const char *what) {
    ops++;
    if (fd < 0) { failed_call++; fprintf(stderr, "%s failed: %s\n", what, strerror(errno)); return; }
    if (fd != expected) {
        wrong_number++;
        if (wrong_number <= 5) fprintf(stderr, "%s gave %d, lowest free was %d\n", what, fd, expected);
    }
    if (fd < MAXFD) held[fd] = 1;
}

static void drop(int fd) {
    if (close(fd) != 0) {
        failed_close++;
        if (failed_close <= 5) fprintf(stderr, "close(%d) failed: %s\n", fd, strerror(errno));
    }
    if (fd >= 0 && fd < MAXFD) held[fd] = 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void *volatile keep[4096];

static int inherited[MAXFD]; // held at start: never closed by the program

int main(int argc, char **argv) {
    int ms = argc > 1 ? atoi(argv[1]) : 3000;
    for (int i = 0; i < MAXFD; i++) inherited[i] = held[i] = fcntl(i, F_GETFD) >= 0;
    unsigned seed = 12345;
    double end = now_ms() + ms;
    long round = 0;
    while (now_ms() < end) {
        // Allocate (and free) enough that the profiler samples and its reports move.
        int k = round % 4096;
        free(keep[k]);
        keep[k] = malloc(1000 + (round % 97) * 100);
        if (keep[k]) memset(keep[k], 1, 1000);
        round++;
        int choice = rand_r(&seed) % 7;
        int e = lowest_free();
        if (e >= MAXFD - 4) choice = 6; // full enough: close
        switch (choice) {
        case 0: got(open("/dev/null", O_RDONLY), e, "open"); break;
        case 1: {
            int src = -1;
            for (int i = 3; i < MAXFD; i++) if (held[i] && !inherited[i]) { src = i; break; }
            if (src < 0) src = open("/dev/null", O_RDONLY), got(src, e, "open"), e = lowest_free();
            got(dup(src), e, "dup");
            break;
        }
        case 2: {
            // dup2 onto a free number above the lowest: never EBUSY, lands where asked.
            int target = e + 1 + rand_r(&seed) % 5;
            if (target >= MAXFD || held[target]) break;
            int src = open("/dev/null", O_RDONLY);
            got(src, e, "open");
            got(dup2(src, target), target, "dup2");
            got(dup3(src, target, O_CLOEXEC), target, "dup3 onto itself");
            break;
        }
        case 3: {
            int p[2];
            if (pipe(p) != 0) { failed_call++; break; }
            got(p[0], e, "pipe[0]");
            got(p[1], lowest_free(), "pipe[1]");
            break;
        }
        case 4: got(socket(AF_INET, SOCK_STREAM, 0), e, "socket"); break;
        case 5: {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) { failed_call++; break; }
            got(sv[0], e, "socketpair[0]");
            got(sv[1], lowest_free(), "socketpair[1]");
            break;
        }
        default:
            for (int i = 3; i < MAXFD; i++)
                if (held[i] && !inherited[i] && rand_r(&seed) % 2) drop(i);
        }
        if (round % 64 == 0) {
            struct timespec ts = {0, 200000}; // nanosleep: one of the shim's safe points
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 3; i < MAXFD; i++) if (held[i] && !inherited[i]) drop(i);
    // A pipe whose write end the program closed reads end-of-file at once.
    int p[2];
    int eof = 0;
    if (pipe(p) == 0) {
        close(p[1]);
        struct pollfd pfd = {p[0], POLLIN, 0};
        char c;
        if (poll(&pfd, 1, 5000) == 1 && read(p[0], &c, 1) == 0) eof = 1;
        close(p[0]);
    }
    printf("wrong numbers: %ld\nfailed closes: %ld\nfailed calls: %ld\npipe end-of-file: %s\n",
           wrong_number, failed_close, failed_call, eof ? "yes" : "no");
    int next = open("/dev/null", O_RDONLY);
    printf("next open is the lowest free: %s\n", next == lowest_free() ? "yes" : "no");
    return 0;
}
