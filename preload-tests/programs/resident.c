/* Resident bytes per stack: one function keeps a 40 MiB calloc it never touches (fresh mmapped
 * pages: none present but the chunk header's), another a 24 MiB block it fills with memset
 * (every page present). Both are kept to the exit report. Mirrored by tests/resident.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNTOUCHED (40u << 20)
#define TOUCHED (24u << 20)

/* Global, so the compiler cannot drop the allocations. */
void *kept_untouched, *kept_touched;

__attribute__((noinline)) void *marker_untouched(void) { return calloc(1, UNTOUCHED); }

__attribute__((noinline)) void *marker_touched(void) {
    char *p = malloc(TOUCHED);
    if (p) memset(p, 7, TOUCHED);
    return p;
}

int main(void) {
    kept_untouched = marker_untouched();
    kept_touched = marker_touched();
    if (!kept_untouched || !kept_touched) return 3;
    /* Only the filled block is read: reading a page of the calloc would map the zero page. */
    printf("checksum %d\n", ((char *)kept_touched)[12345]);
    return 0;
}
