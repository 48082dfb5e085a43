/* A library whose allocating function is static: once the library is stripped, only its
 * separate debug file names it (cli/tests/debuginfo.rs). VARIANT makes builds that differ. */
#include <stdlib.h>
#include <string.h>

#ifndef VARIANT
#define VARIANT "a"
#endif

const char *hidden_variant = VARIANT;

static __attribute__((noinline)) void *hidden_alloc_site(size_t n) {
    void *p = malloc(n);
    memset(p, 1, n);
    return p;
}

void *lib_entry(size_t n) { return hidden_alloc_site(n); }
