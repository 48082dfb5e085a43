/* Resident bytes per stack: one function keeps a 40 MiB calloc it never touches (fresh mmapped
 * pages: none present but the chunk header's), another a 24 MiB block it fills with memset
 * (every page present). Both are kept to the exit report. Mirrored by tests/resident.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define UNTOUCHED (40u << 20)
#define TOUCHED (24u << 20)
#define MAPPED (8u << 20)

/* Global, so the compiler cannot drop the allocations. */
void *kept_untouched, *kept_touched, *kept_mapped;

/* An anonymous mapping, half of it written: its record is the mapping table's, not the
 * live table's, and its resident bytes are the half. */
__attribute__((noinline)) void *marker_mapped(void) {
    char *p = mmap(NULL, MAPPED, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 1, MAPPED / 2);
    return p;
}

__attribute__((noinline)) void *marker_untouched(void) { return calloc(1, UNTOUCHED); }

__attribute__((noinline)) void *marker_touched(void) {
    char *p = malloc(TOUCHED);
    if (p) memset(p, 7, TOUCHED);
    return p;
}

int main(void) {
    kept_untouched = marker_untouched();
    kept_touched = marker_touched();
    kept_mapped = marker_mapped();
    if (!kept_untouched || !kept_touched || !kept_mapped) return 3;
    /* Only the filled block is read: reading a page of the calloc would map the zero page. */
    printf("checksum %d\n", ((char *)kept_touched)[12345]);
    return 0;
}
