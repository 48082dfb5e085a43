/* A signal handler's backtrace() (libgcc's unwinder: call frame information only) taken while
 * the program waits in `syscall(SYS_pause)`: under the shim that is the shim's hand-written
 * `syscall`, which the unwinder must walk through to the marker function that called it.
 * Prints `marker found` (exit 0) or `marker missing` (exit 1). Link with -rdynamic, so that
 * dladdr names the marker. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *frames[64];
static volatile int nframes;

static void on_alarm(int sig) {
    (void)sig;
    nframes = backtrace(frames, 64);
}

__attribute__((noinline)) long marker_syscall_wait(void) { return syscall(SYS_pause) + 1; }

int main(void) {
    void *warm[4];
    backtrace(warm, 4); /* loads libgcc's unwinder outside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    if (sigaction(SIGALRM, &sa, NULL) != 0) return 2;
    alarm(1);
    long r = marker_syscall_wait();
    int found = 0;
    for (int i = 0; i < nframes; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_sname &&
            strcmp(info.dli_sname, "marker_syscall_wait") == 0)
            found = 1;
    }
    printf("pause returned %ld, %d frames, marker %s\n", r, nframes, found ? "found" : "missing");
    return found ? 0 : 1;
}
