/* Allocates known numbers of bytes under distinct marker functions, so that an exact-mode
 * profile (YING_SAMPLE_INTERVAL_BYTES=1) can be checked to the byte. Every marker calls the
 * allocator directly; the lines tagged `TAG:<name>` are the call sites the test looks up to
 * check the file:line the report gives. The counts are mirrored in preload-tests/src/exact.rs;
 * the bytes are counted here as the shim counts them, in glibc chunks (a block's usable size
 * plus the 8-byte header; the header is $YING_TEST_CHUNK_HEADER bytes when set, 0 for a run
 * chained to another allocator, whose usable size the shim counts as is), and printed as
 * `chunks <marker> <allocated> <freed>` lines: a realloc's growth counts as allocated bytes, its
 * shrink as freed bytes. They go to the file named by
 * $CHUNKS_FILE, if set, not to stdout: where an aligned block's chunk ends depends on where the
 * heap starts, which differs from run to run. With $EXACT_SKIP_MARKERS=1 no marker runs: the
 * program's other allocations alone, the baseline a run's exact totals are compared with. With
 * $EXACT_REFUSE_FIRST=N it first asks for N bytes, which must fail (a run whose giant limit is
 * below N: the refusal makes the shim write its exit report though nothing was sampled). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_N 100
#define KEEP_SIZE 11001
#define CHURN_N 50
#define CHURN_SIZE 22002
#define CALLOC_N 10
#define CALLOC_COUNT 7
#define CALLOC_SIZE 1003
#define MEMALIGN_N 20
#define MEMALIGN_SIZE 3003
#define REALLOC_N 5
#define ALIGNED_N 4
#define ALIGNED_SIZE 8192
#define VALLOC_N 3
#define VALLOC_SIZE 5000
#define ZERO_N 3
#define ZERO_SIZE 4004
#define ARRAY_N 6

/* Global, so the compiler cannot drop the stores (and with them the allocations). */
void *kept[1000];
int nkept;
static unsigned long checksum;
/* Stores to it keep the compiler from eliding an allocation that is freed right away. */
static void *volatile sink;

enum {
    MK_KEEP,
    MK_CHURN,
    MK_CALLOC,
    MK_POSIX_MEMALIGN,
    MK_REALLOC_CHAIN,
    MK_ALIGNED_ALLOC,
    MK_VALLOC,
    MK_REALLOC_ZERO,
    MK_REALLOC_NULL,
    MK_N
};
static const char *marker_names[MK_N] = {
    "marker_keep", "marker_churn", "marker_calloc", "marker_posix_memalign", "marker_realloc_chain",
    "marker_aligned_alloc", "marker_valloc", "marker_realloc_zero", "marker_realloc_null",
};
static unsigned long chunks_allocated[MK_N], chunks_freed[MK_N];

/* The bytes the shim counts for a block on top of its usable size: glibc's 8-byte chunk header
 * (16 for mmapped blocks, which are far larger than any block here), or $YING_TEST_CHUNK_HEADER
 * when set (0 under another allocator). Read once, at the start of main. */
static size_t chunk_header = 8;
static void read_chunk_header(void) {
    const char *h = getenv("YING_TEST_CHUNK_HEADER");
    if (h && *h) chunk_header = strtoul(h, NULL, 10);
}

/* The bytes the shim counts for a live block. */
static size_t chunk(void *p) { return malloc_usable_size(p) + chunk_header; }
static void *counted(int m, void *p) {
    chunks_allocated[m] += chunk(p);
    return p;
}
static void count_free(int m, void *p) { chunks_freed[m] += chunk(p); }
/* After a realloc from a block of `old` chunk bytes to `p`. */
static void *count_realloc(int m, size_t old, void *p) {
    size_t c = chunk(p);
    if (c > old) chunks_allocated[m] += c - old;
    else chunks_freed[m] += old - c;
    return p;
}

static void keep(void *p, size_t n) {
    memset(p, (int)(n & 0xff), n);
    checksum += n + ((unsigned char *)p)[n / 2];
    kept[nkept++] = p;
}

__attribute__((noinline)) void marker_keep(void) {
    for (int i = 0; i < KEEP_N; i++) {
        void *p = counted(MK_KEEP, malloc(KEEP_SIZE)); /* TAG:marker_keep */
        keep(p, KEEP_SIZE);
    }
}

__attribute__((noinline)) void marker_churn(void) {
    for (int i = 0; i < CHURN_N; i++) {
        unsigned char *p = counted(MK_CHURN, malloc(CHURN_SIZE)); /* TAG:marker_churn */
        memset(p, i, CHURN_SIZE);
        checksum += p[i];
        sink = p;
        count_free(MK_CHURN, p);
        free(p);
    }
}

/* Exits when a block's first n bytes are not all `byte`: calloc and realloc go through the
 * shim's hooks (and sampled reallocations move their records), and must still keep what the
 * allocator's contract promises. */
static void expect_bytes(const unsigned char *p, size_t n, unsigned char byte, const char *what) {
    for (size_t j = 0; j < n; j++)
        if (p[j] != byte) {
            fprintf(stderr, "%s: byte %zu is %d, expected %d\n", what, j, p[j], byte);
            exit(3);
        }
}

__attribute__((noinline)) void marker_calloc(void) {
    for (int i = 0; i < CALLOC_N; i++) {
        /* Dirty a block of the same size first, so calloc is likely handed reused memory. */
        unsigned char *d = counted(MK_CALLOC, malloc(CALLOC_COUNT * CALLOC_SIZE));
        memset(d, 0xaa, CALLOC_COUNT * CALLOC_SIZE);
        sink = d;
        count_free(MK_CALLOC, d);
        free(d);
        unsigned char *p = calloc(CALLOC_COUNT, CALLOC_SIZE); /* TAG:marker_calloc */
        counted(MK_CALLOC, p);
        expect_bytes(p, CALLOC_COUNT * CALLOC_SIZE, 0, "calloc");
        checksum += p[i];
        keep(p, CALLOC_COUNT * CALLOC_SIZE);
    }
}

__attribute__((noinline)) void marker_posix_memalign(void) {
    for (int i = 0; i < MEMALIGN_N; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, MEMALIGN_SIZE) != 0) /* TAG:marker_posix_memalign */
            abort();
        if ((size_t)p % 64 != 0) abort();
        keep(counted(MK_POSIX_MEMALIGN, p), MEMALIGN_SIZE);
    }
}

/* malloc 1000, grow to 30000, shrink to 2000: retained 2000, allocated 1000 + 29000. */
__attribute__((noinline)) void marker_realloc_chain(void) {
    for (int i = 0; i < REALLOC_N; i++) {
        unsigned char *p = counted(MK_REALLOC_CHAIN, malloc(1000)); /* TAG:marker_realloc_chain */
        memset(p, 1, 1000);
        size_t old = chunk(p);
        p = count_realloc(MK_REALLOC_CHAIN, old, realloc(p, 30000));
        expect_bytes(p, 1000, 1, "realloc grown");
        memset(p, 2, 30000);
        old = chunk(p);
        p = count_realloc(MK_REALLOC_CHAIN, old, realloc(p, 2000));
        expect_bytes(p, 2000, 2, "realloc shrunk");
        keep(p, 2000);
    }
}

/* aligned_alloc 8192 each, freed with free: allocated only. */
__attribute__((noinline)) void marker_aligned_alloc(void) {
    for (int i = 0; i < ALIGNED_N; i++) {
        unsigned char *p = counted(MK_ALIGNED_ALLOC, aligned_alloc(4096, ALIGNED_SIZE));
        memset(p, 3, ALIGNED_SIZE);
        checksum += p[100];
        sink = p;
        count_free(MK_ALIGNED_ALLOC, p);
        free(p);
    }
}

/* valloc + memalign kept. */
__attribute__((noinline)) void marker_valloc(void) {
    for (int i = 0; i < VALLOC_N; i++) {
        keep(counted(MK_VALLOC, valloc(VALLOC_SIZE)), VALLOC_SIZE);
        keep(counted(MK_VALLOC, memalign(128, VALLOC_SIZE)), VALLOC_SIZE);
    }
}

/* realloc(p, 0) frees the block and returns NULL (glibc, jemalloc, tcmalloc); mimalloc instead
 * shrinks it to a minimal block, freed here. Either way: one allocation, one free, allocated
 * bytes only. */
__attribute__((noinline)) void marker_realloc_zero(void) {
    for (int i = 0; i < ZERO_N; i++) {
        unsigned char *p = counted(MK_REALLOC_ZERO, malloc(ZERO_SIZE));
        memset(p, 4, ZERO_SIZE);
        sink = p;
        size_t old = chunk(p);
        p = realloc(p, 0);
        if (p == NULL) {
            chunks_freed[MK_REALLOC_ZERO] += old;
        } else {
            count_realloc(MK_REALLOC_ZERO, old, p);
            sink = p;
            count_free(MK_REALLOC_ZERO, p);
            free(p);
        }
    }
}

/* realloc(NULL, n) and reallocarray(NULL, ...) are allocations of their own: kept. */
__attribute__((noinline)) void marker_realloc_null(void) {
    for (int i = 0; i < ARRAY_N; i++) {
        keep(counted(MK_REALLOC_NULL, realloc(NULL, 700)), 700);
        keep(counted(MK_REALLOC_NULL, reallocarray(NULL, 30, 11)), 330);
    }
}

int main(void) {
    read_chunk_header();
    const char *refuse = getenv("EXACT_REFUSE_FIRST");
    if (refuse && *refuse) {
        void *giant = malloc(strtoul(refuse, NULL, 10));
        if (giant) return 3;
    }
    const char *skip = getenv("EXACT_SKIP_MARKERS");
    if (!skip || strcmp(skip, "1") != 0) {
        marker_keep();
        marker_churn();
        marker_calloc();
        marker_posix_memalign();
        marker_realloc_chain();
        marker_aligned_alloc();
        marker_valloc();
        marker_realloc_zero();
        marker_realloc_null();
    }
    printf("kept %d blocks, checksum %lu\n", nkept, checksum);
    const char *path = getenv("CHUNKS_FILE");
    FILE *out = path ? fopen(path, "w") : NULL;
    if (path && !out) return 2;
    for (int m = 0; out && m < MK_N; m++)
        fprintf(out, "chunks %s %lu %lu\n", marker_names[m], chunks_allocated[m], chunks_freed[m]);
    if (out) fclose(out);
    return 0;
}
