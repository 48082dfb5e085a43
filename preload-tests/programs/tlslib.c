/* A shared library with dynamic (global-dynamic) TLS, loaded with dlopen by dlopen_threads.c:
 * the first access to `counter` from each thread makes __tls_get_addr allocate that thread's
 * block with malloc, i.e. a call into the shim from inside the TLS machinery. */
#include <stdlib.h>
#include <string.h>

static __thread unsigned long counter;
static __thread char scratch[4096];

unsigned long tlslib_touch(unsigned long n) {
    counter += n;
    scratch[n % sizeof scratch] = (char)n;
    char *p = malloc(n % 512 + 1);
    memset(p, 1, n % 512 + 1);
    unsigned long v = counter + (unsigned char)p[0] + (unsigned char)scratch[n % sizeof scratch];
    free(p);
    return v - counter;
}
