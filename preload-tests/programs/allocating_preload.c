/* A preload that allocates inside every function it interposes, as tracing and mocking
   preloads do (libfaketime opens a file inside clock_gettime): the clock functions, getpid,
   sysconf, sched_yield and getrlimit, each calling malloc and free before the next
   definition. Loaded beside the shim by tests/other_preloads.rs: the shim's allocation and
   sampled paths must never call any of them, or they recurse into malloc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>

static void *volatile sink;

static void touch_heap(void) {
    char *p = malloc(40);
    if (p) {
        memset(p, 7, 40);
        sink = p;
        free(p);
    }
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int clock_gettime(clockid_t id, struct timespec *ts) {
    touch_heap();
    return NEXT(clock_gettime)(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    touch_heap();
    return NEXT(gettimeofday)(tv, tz);
}

time_t time(time_t *t) {
    touch_heap();
    return NEXT(time)(t);
}

pid_t getpid(void) {
    touch_heap();
    return NEXT(getpid)();
}

long sysconf(int name) {
    touch_heap();
    return NEXT(sysconf)(name);
}

int sched_yield(void) {
    touch_heap();
    return NEXT(sched_yield)();
}

int getrlimit(__rlimit_resource_t res, struct rlimit *rl) {
    touch_heap();
    return NEXT(getrlimit)(res, rl);
}
