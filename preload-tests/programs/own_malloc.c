/* A program that defines the malloc family itself (a bump allocator over a static pool) and
 * exports it (-rdynamic): every call, libc's own included, binds to these definitions, so the
 * shim sees none of them. Prints what it allocated. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static _Alignas(16) char pool[1 << 22];
static size_t used;

void *malloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof pool - used) return NULL;
    void *p = pool + used;
    used += n;
    return p;
}
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
    if (b && a > (size_t)-1 / b) return NULL;
    void *p = malloc(a * b);
    if (p) memset(p, 0, a * b);
    return p;
}
void *realloc(void *p, size_t n) {
    void *q = malloc(n);
    if (q && p) memmove(q, p, n); /* the pool is contiguous: reading n bytes past p is inside */
    return q;
}
int posix_memalign(void **out, size_t align, size_t n) {
    used = (used + align - 1) & ~(align - 1);
    *out = malloc(n);
    return *out ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    return posix_memalign(&p, align, n) ? NULL : p;
}
void *memalign(size_t align, size_t n) { return aligned_alloc(align, n); }

int main(void) {
    size_t total = 0;
    for (int i = 0; i < 1000; i++) {
        char *s = malloc(1000);
        memset(s, 'x', 1000);
        total += 1000 + (size_t)(s[i % 1000] == 'x');
    }
    printf("own malloc: %zu\n", total);
    return 0;
}
