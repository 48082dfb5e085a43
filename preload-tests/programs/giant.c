/* A giant request under marker_giant, then ordinary work. The address space is limited first,
 * so that glibc alone refuses the request too (whatever the overcommit setting). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

__attribute__((noinline)) void *marker_giant(size_t n) {
    return malloc(n); /* TAG:marker_giant */
}

int main(void) {
    struct rlimit rl = {8ULL << 30, 8ULL << 30};
    if (setrlimit(RLIMIT_AS, &rl) != 0) perror("setrlimit");
    errno = 0;
    void *p = marker_giant(1ULL << 40);
    printf("malloc(1 TiB): %s errno=%s\n", p ? "non-NULL" : "NULL",
           errno == ENOMEM ? "ENOMEM" : "other");
    free(p);
    /* The program carries on normally. */
    unsigned long sum = 0;
    for (int i = 0; i < 1000; i++) {
        unsigned char *q = malloc((size_t)i + 1);
        memset(q, i & 0xff, (size_t)i + 1);
        sum += q[i];
        free(q);
    }
    printf("continued: %lu\n", sum);
    return 0;
}
