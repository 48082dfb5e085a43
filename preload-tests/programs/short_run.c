/* A short-lived process, as a build's compiler or a cron job is: keeps BLOCKS blocks of BLOCK
   bytes under marker_short (enough for a sample or two at the default interval) and exits at
   once. For the tests of retention across processes and of what short processes write.
   usage: short_run [BLOCKS [BLOCK]] (defaults 10, 100000) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *kept[1000];

__attribute__((noinline)) void marker_short(int blocks, size_t block) {
    for (int i = 0; i < blocks && i < 1000; i++) {
        kept[i] = malloc(block);
        memset(kept[i], 0x11, block);
    }
}

int main(int argc, char **argv) {
    int blocks = argc > 1 ? atoi(argv[1]) : 10;
    size_t block = argc > 2 ? (size_t)atol(argv[2]) : 100000;
    marker_short(blocks, block);
    printf("kept %d blocks\n", blocks);
    return 0;
}
