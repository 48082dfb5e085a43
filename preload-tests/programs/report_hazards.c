/* Things a program may do that must not change where or whether Ying's reports and messages
 * are written. One mode per run:
 *   chdir <dir>          allocate, then chdir(dir) before exiting (the final report is written
 *                        after it)
 *   plant <reportdir>    create, in reportdir, every temporary name the report files of this
 *                        process could have had under a "pid and counter" naming scheme, for
 *                        the next few seconds, then exit normally
 *   reopen-stderr <file> open <file> as fd 2 (as daemons reopen stderr onto a log), ask for
 *                        1 TiB (refused by the shim with its limit lowered), write one line to
 *                        fd 2 and exit
 * Prints a line per step; all blocks kept in a global so the compiler keeps the calls. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void *kept[64];

__attribute__((noinline)) void *marker_hazard(size_t n) { return malloc(n); }

static void allocate(void) {
    for (int i = 0; i < 64; i++) {
        kept[i] = marker_hazard(1000 + (size_t)i);
        memset(kept[i], i, 1000);
    }
}

static int plant(const char *dir) {
    const char *exts[] = {"txt", "folded", "svg", "pb.gz"};
    long pid = (long)getpid();
    time_t now = time(NULL);
    int made = 0;
    for (int dt = 0; dt < 4; dt++) {
        time_t t = now + dt;
        struct tm tm;
        gmtime_r(&t, &tm);
        char ts[32];
        strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
        for (int e = 0; e < 4; e++) {
            for (int seq = 0; seq < 8; seq++) {
                char path[4096];
                snprintf(path, sizeof path, "%s/.ying.report_hazards.%ld.0.%s.%s.%ld.%d.tmp", dir,
                         pid, ts, exts[e], pid, seq);
                int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
                if (fd >= 0) {
                    made++;
                    close(fd);
                }
            }
        }
    }
    printf("planted %s\n", made == 4 * 4 * 8 ? "all" : "some");
    return 0;
}

static int reopen_stderr(const char *file) {
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) {
        printf("cannot reopen stderr: %s\n", strerror(errno));
        return 1;
    }
    close(fd);
    errno = 0;
    void *p = marker_hazard((size_t)1 << 40);
    printf("malloc(1 TiB): %s\n", p ? "ptr" : errno == ENOMEM ? "NULL ENOMEM" : "NULL");
    free(p);
    fputs("the program's own line\n", stderr);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s chdir|plant|reopen-stderr ARG\n", argv[0]);
        return 2;
    }
    allocate();
    if (strcmp(argv[1], "chdir") == 0) {
        if (chdir(argv[2]) != 0) {
            printf("chdir failed: %s\n", strerror(errno));
            return 1;
        }
        printf("moved\n");
        return 0;
    }
    if (strcmp(argv[1], "plant") == 0) return plant(argv[2]);
    if (strcmp(argv[1], "reopen-stderr") == 0) return reopen_stderr(argv[2]);
    return 2;
}
