// C++ allocation under the shim: new/delete, new[]/delete[] and aligned new (an alignas(64)
// type and an explicit std::align_val_t), each in a marker function. Sizes are multiples of
// their alignment, so every path requests exactly the bytes below (mirrored in tests/cxx.rs).
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

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
        std::memset(b->data, 1, sizeof b->data);
        kept->push_back(b);
    }
}

__attribute__((noinline)) void marker_new_array(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        int *a = new int[2501];  // 10004 bytes, no array cookie for int
        a[2500] = 5;
        kept->push_back(a);
    }
}

__attribute__((noinline)) void marker_aligned_new(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        Aligned *a = new Aligned;  // operator new(6400, align_val_t(64))
        if (reinterpret_cast<unsigned long>(a) % 64 != 0) std::puts("misaligned Aligned");
        a->data[0] = 1;
        kept->push_back(a);
    }
}

__attribute__((noinline)) void marker_align_val_new(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        char *c = new (std::align_val_t(64)) char[3008];  // operator new[](3008, align 64)
        if (reinterpret_cast<unsigned long>(c) % 64 != 0) std::puts("misaligned char[]");
        c[3007] = 2;
        kept->push_back(c);
    }
}

// Allocated and deleted again: allocated bytes only.
__attribute__((noinline)) void marker_new_delete(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) {
        Big *b = new Big;
        b->data[10000] = static_cast<char>(i);
        checksum += static_cast<unsigned char>(b->data[10000]);
        delete b;
        int *a = new int[1000];  // 4000 bytes
        a[999] = 3;
        checksum += static_cast<unsigned long>(a[999]);
        delete[] a;
        Aligned *al = new Aligned;
        al->data[1] = 4;
        checksum += static_cast<unsigned long>(al->data[1]);
        delete al;
    }
}

// With the argument "warmup", one 2 MiB block is allocated and freed first (see tests/cxx.rs).
int main(int argc, char **argv) {
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
    return 0;
}
