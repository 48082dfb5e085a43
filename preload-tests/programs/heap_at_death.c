/* A program that dies with memory held, for tests/heap_at_death.rs: it grows in steps of
 * BLOCKS blocks of BLOCK bytes, all allocated in death_grow() and kept, printing after each
 * step the chunk bytes it holds ("held N"), then ends as MODE says:
 *
 *   pause  wait for a signal (the test kills it: SIGKILL, unhandled SIGTERM)
 *   segv   write through a null pointer
 *   abort  abort()
 *   _exit  _exit(7), which runs no exit handler
 *   exit   exit(0): the control, whose live file must be gone
 *   sigkill, sigterm  raise(SIGKILL), raise(SIGTERM) (not handled)
 *   dlopen LIB  dlopen and dlclose LIB, calling its tlslib_touch, in a loop until killed
 *   forkloop    fork children that allocate a little and _exit, waiting for each, until killed
 *   fork   fork a child that grows by the same steps in death_grow_child() and waits for a
 *          signal; the parent prints "child PID" and waits for a signal too
 *
 * usage: heap_at_death MODE STEPS BLOCKS BLOCK STEP_US
 * Each line is flushed, so a test reading the pipe knows what was held when it killed. */
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void *volatile keep[100000];
static int kept;

__attribute__((noinline)) void *death_grow(size_t n) {
    char *p = malloc(n);
    memset(p, 0x5a, n);
    return p;
}

__attribute__((noinline)) void *death_grow_child(size_t n) {
    char *p = malloc(n);
    memset(p, 0x3c, n);
    return p;
}

static void grow(int steps, int blocks, size_t block, long step_us, int child) {
    long held = 0;
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < blocks && kept < 100000; b++) {
            void *p = child ? death_grow_child(block) : death_grow(block);
            held += (long)malloc_usable_size(p) + 8;
            keep[kept++] = p;
        }
        printf("%s %ld\n", child ? "child-held" : "held", held);
        fflush(stdout);
        if (step_us > 0)
            usleep(step_us);
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODE STEPS BLOCKS BLOCK STEP_US\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int steps = atoi(argv[2]), blocks = atoi(argv[3]);
    size_t block = (size_t)atol(argv[4]);
    long step_us = atol(argv[5]);
    if (strcmp(mode, "fork") == 0) {
        grow(steps, blocks, block, step_us, 0);
        pid_t pid = fork();
        if (pid == 0) {
            grow(steps, blocks, block, step_us, 1);
            printf("child done\n");
            fflush(stdout);
            for (;;)
                pause();
        }
        printf("child %d\n", (int)pid);
        fflush(stdout);
        for (;;)
            pause();
    }
    grow(steps, blocks, block, step_us, 0);
    printf("done\n");
    fflush(stdout);
    if (strcmp(mode, "segv") == 0) {
        usleep(400000);
        *(volatile int *)0 = 1;
    } else if (strcmp(mode, "abort") == 0) {
        usleep(400000);
        abort();
    } else if (strcmp(mode, "_exit") == 0) {
        usleep(400000);
        _exit(7);
    } else if (strcmp(mode, "sigkill") == 0) {
        usleep(400000);
        raise(SIGKILL);
    } else if (strcmp(mode, "sigterm") == 0) {
        usleep(400000);
        raise(SIGTERM);
    } else if (strcmp(mode, "dlopen") == 0 && argc > 6) {
        for (unsigned long n = 1;; n++) {
            void *h = dlopen(argv[6], RTLD_NOW);
            if (!h) {
                fprintf(stderr, "%s\n", dlerror());
                return 3;
            }
            unsigned long (*touch)(unsigned long) = (unsigned long (*)(unsigned long))dlsym(h, "tlslib_touch");
            if (touch)
                touch(n);
            dlclose(h);
        }
    } else if (strcmp(mode, "forkloop") == 0) {
        for (;;) {
            pid_t pid = fork();
            if (pid == 0) {
                void *volatile p = malloc(100);
                free(p);
                _exit(0);
            }
            if (pid > 0)
                waitpid(pid, NULL, 0);
        }
    } else if (strcmp(mode, "exit") == 0) {
        usleep(400000);
        exit(0);
    }
    for (;;)
        pause();
}
