// C++ allocation under the shim: new/delete, new[]/delete[] and aligned new (an alignas(64)
// type and an explicit std::align_val_t), each in a marker function. Sizes are multiples of
// their alignment, so every path requests exactly the bytes below. The shim counts glibc
// chunks (usable size plus the 8-byte header; the header is $YING_TEST_CHUNK_HEADER bytes when
// set, 0 for a run chained to another allocator, whose usable size the shim counts as is), and
// where an aligned block's chunk ends depends on where the heap starts, so the program counts
// each marker's chunk bytes itself and writes them as `chunks <marker> <allocated> <freed>`
// lines to the file named by $CHUNKS_FILE, if set (tests/cxx.rs and tests/chained.rs read
// them). The counts of allocations are mirrored in preload-tests/src/exact.rs.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

enum { MK_NEW, MK_NEW_ARRAY, MK_ALIGNED_NEW, MK_ALIGN_VAL_NEW, MK_NEW_DELETE, MK_N };
static const char *marker_names[MK_N] = {"marker_new", "marker_new_array", "marker_aligned_new",
                                         "marker_align_val_new", "marker_new_delete"};
static unsigned long chunks_allocated[MK_N], chunks_freed[MK_N];

// The bytes the shim counts for a block on top of its usable size: glibc's 8-byte chunk header
// (none here is mmapped, whose header is 16 bytes), or $YING_TEST_CHUNK_HEADER when set (0
// under another allocator). Read once, at the start of main.
static unsigned long chunk_header = 8;
static void read_chunk_header() {
    const char *h = std::getenv("YING_TEST_CHUNK_HEADER");
    if (h && *h) chunk_header = std::strtoul(h, nullptr, 10);
}

// The bytes the shim counts for a live block.
static unsigned long chunk(void *p) { return malloc_usable_size(p) + chunk_header; }
static void counted(int m, void *p) { chunks_allocated[m] += chunk(p); }
static void count_free(int m, void *p) { chunks_freed[m] += chunk(p); }

struct Big {
    char data[10001];
};

struct alignas(64) Aligned {
    char data[6400];
};

static std::vector<void *> *kept;
static unsigned long checksum;

__attribute__((noinline)) void marker_new(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        Big *b = new Big;  // 10001 bytes
        counted(MK_NEW, b);
        std::memset(b->data, 1, sizeof b->data);
        kept->push_back(b);
    }
}

__attribute__((noinline)) void marker_new_array(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        int *a = new int[2501];  // 10004 bytes, no array cookie for int
        counted(MK_NEW_ARRAY, a);
        a[2500] = 5;
        kept->push_back(a);
    }
}

__attribute__((noinline)) void marker_aligned_new(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        Aligned *a = new Aligned;  // operator new(6400, align_val_t(64))
        counted(MK_ALIGNED_NEW, a);
        if (reinterpret_cast<unsigned long>(a) % 64 != 0) std::puts("misaligned Aligned");
        a->data[0] = 1;
        kept->push_back(a);
    }
}

__attribute__((noinline)) void marker_align_val_new(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        char *c = new (std::align_val_t(64)) char[3008];  // operator new[](3008, align 64)
        counted(MK_ALIGN_VAL_NEW, c);
        if (reinterpret_cast<unsigned long>(c) % 64 != 0) std::puts("misaligned char[]");
        c[3007] = 2;
        kept->push_back(c);
    }
}

// Allocated and deleted again: allocated bytes only.
__attribute__((noinline)) void marker_new_delete(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        Big *b = new Big;
        counted(MK_NEW_DELETE, b);
        b->data[10000] = static_cast<char>(i);
        checksum += static_cast<unsigned char>(b->data[10000]);
        count_free(MK_NEW_DELETE, b);
        delete b;
        int *a = new int[1000];  // 4000 bytes
        counted(MK_NEW_DELETE, a);
        a[999] = 3;
        checksum += static_cast<unsigned long>(a[999]);
        count_free(MK_NEW_DELETE, a);
        delete[] a;
        Aligned *al = new Aligned;
        counted(MK_NEW_DELETE, al);
        al->data[1] = 4;
        checksum += static_cast<unsigned long>(al->data[1]);
        count_free(MK_NEW_DELETE, al);
        delete al;
    }
}

// With the argument "warmup", one 2 MiB block is allocated and freed first (see tests/cxx.rs).
int main(int argc, char **argv) {
    read_chunk_header();
    if (argc > 1 && std::strcmp(argv[1], "warmup") == 0) {
        void *w = ::operator new(2u << 20);
        std::memset(w, 0, 16);
        ::operator delete(w);
    }
    kept = new std::vector<void *>();
    kept->reserve(1000);
    marker_new(30);
    marker_new_array(20);
    marker_aligned_new(10);
    marker_align_val_new(8);
    marker_new_delete(12);
    std::printf("kept %zu objects, checksum %lu\n", kept->size(), checksum);
    if (const char *path = std::getenv("CHUNKS_FILE")) {
        std::FILE *out = std::fopen(path, "w");
        if (!out) return 2;
        for (int m = 0; m < MK_N; m++)
            std::fprintf(out, "chunks %s %lu %lu\n", marker_names[m], chunks_allocated[m],
                         chunks_freed[m]);
        std::fclose(out);
    }
    return 0;
}
