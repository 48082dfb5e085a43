/* One allocation pattern per run, for the coverage of the printed 95 % intervals
 * (tests/error_bars.rs): each keeps about half of what it allocates, so that both the
 * retained and the allocated estimates are tested against the exact totals.
 *
 *   error_bars small    20,000 mallocs of 256 bytes
 *   error_bars large    300 mallocs of 48 KiB (near the 64 KiB interval)
 *   error_bars realloc  4,000 blocks grown from 64 to 2,048 bytes in 8 steps, and shrunk back
 *                       to 512
 *   error_bars mmap     400 anonymous mappings of 16 KiB
 *   error_bars calloc   20,000 callocs of 256 bytes
 *   error_bars memalign 20,000 memaligns of 256 bytes at 64-byte alignment
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define KEEP(i) ((i) % 2 == 0)

static void *volatile sink;

/* 20,000 blocks of 256 bytes from `malloc`, `calloc` or `memalign` (kind 0, 1, 2). */
__attribute__((noinline)) static void small(int kind) {
    static void *p[20000];
    for (int i = 0; i < 20000; i++)
        p[i] = kind == 1 ? calloc(1, 256) : kind == 2 ? memalign(64, 256) : malloc(256);
    for (int i = 0; i < 20000; i++)
        if (!KEEP(i)) free(p[i]);
    sink = p;
}

__attribute__((noinline)) static void large(void) {
    static void *p[300];
    for (int i = 0; i < 300; i++) p[i] = malloc(48 * 1024);
    for (int i = 0; i < 300; i++)
        if (!KEEP(i)) free(p[i]);
    sink = p;
}

__attribute__((noinline)) static void grow(void) {
    static void *p[4000];
    for (int i = 0; i < 4000; i++) p[i] = malloc(64);
    for (size_t size = 256; size <= 2048; size += 256)
        for (int i = 0; i < 4000; i++) p[i] = realloc(p[i], size);
    for (int i = 0; i < 4000; i++) {
        if (KEEP(i)) p[i] = realloc(p[i], 512);
        else free(p[i]);
    }
    sink = p;
}

__attribute__((noinline)) static void maps(void) {
    static void *p[400];
    for (int i = 0; i < 400; i++)
        p[i] = mmap(NULL, 16 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 400; i++)
        if (!KEEP(i)) munmap(p[i], 16 * 1024);
    sink = p;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "small")) small(0);
    else if (!strcmp(mode, "calloc")) small(1);
    else if (!strcmp(mode, "memalign")) small(2);
    else if (!strcmp(mode, "large")) large();
    else if (!strcmp(mode, "realloc")) grow();
    else if (!strcmp(mode, "mmap")) maps();
    else return 2;
    return 0;
}
