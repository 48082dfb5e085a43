/* Prints how many threads the process has when main starts (from /proc/self/status): a
 * program that must be single-threaded at start (to enter a user namespace, say) sees 1. */
#include <stdio.h>
#include <string.h>

int main(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int threads = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0) sscanf(line + 8, "%d", &threads);
    if (f) fclose(f);
    printf("threads at start: %d\n", threads);
    return 0;
}
