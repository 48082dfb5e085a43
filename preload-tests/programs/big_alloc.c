/* A program that allocates a lot: 256 blocks of 1 MiB from one marker function, of which it
 * keeps every fourth (64 MiB) to the end and frees the rest, then prints a checksum. Default
 * sampling (one sample per 512 KiB on average) cannot miss it. Arguments (optional): the exit
 * status. Used by run_script.rs (mirrored there: 64 MiB kept). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 256
#define BLOCK (1u << 20)

/* Global, so the compiler cannot drop the stores (and with them the allocations). */
void *kept[BLOCKS / 4];
static void *volatile sink;

__attribute__((noinline)) void *marker_big_alloc(size_t n) {
    char *p = malloc(n);
    if (p) memset(p, 1, 4096);
    return p;
}

int main(int argc, char **argv) {
    unsigned long sum = 0;
    for (int i = 0; i < BLOCKS; i++) {
        void *p = marker_big_alloc(BLOCK);
        if (!p) return 3;
        if (i % 4 == 0) {
            kept[i / 4] = p;
        } else {
            sink = p;
            free(p);
        }
    }
    for (int i = 0; i < BLOCKS / 4; i++) sum += ((unsigned char *)kept[i])[i];
    printf("kept %d MiB, checksum %lu\n", BLOCKS / 4, sum);
    return argc > 1 ? atoi(argv[1]) : 0;
}
