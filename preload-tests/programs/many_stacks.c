/* many_stacks: one 64-byte allocation at each of N distinct call stacks (default 20000), all
 * kept until exit, so that the exit report has N stacks to write (report_memory.rs); the stacks
 * are distinct_stacks.h's. Compiled with -fno-optimize-sibling-calls -fno-ipa-icf. */
#include <stdio.h>
#include <stdlib.h>

#include "distinct_stacks.h"

void **keep; /* non-static: the blocks stay observably reachable */

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000;
    keep = malloc(sizeof(void *) * (size_t)n);
    if (!keep) {
        return 1;
    }
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        keep[i] = distinct_stack(i);
        sum += keep[i] != NULL;
    }
    printf("many_stacks: %lu blocks kept\n", sum);
    return 0;
}
