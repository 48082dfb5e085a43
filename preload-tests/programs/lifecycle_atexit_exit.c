/* exit(5) from an atexit handler, after main returned 0: glibc runs the remaining handlers
 * and ends with status 5. */
#include <stdio.h>
#include <stdlib.h>

void *volatile kept;

__attribute__((noinline)) void *marker_atexit_keep(void) { return malloc(7321); }

static void handler(void) {
    printf("handler calls exit(5)\n");
    fflush(stdout);
    exit(5);
}

int main(void) {
    kept = marker_atexit_keep();
    atexit(handler);
    return 0;
}
