// A program whose big std::map lives in build_index's caller and dies at the end of main:
// nothing is retained at exit, about 37 MiB (glibc chunks) at the peak. Prints the map's size
// and its chunk bytes (one 64-byte chunk per 48-byte node on x86-64 glibc) for the peak test.
#include <cstdio>
#include <map>

using Index = std::map<long, long>;

__attribute__((noinline)) void build_index(Index& index, long n) {
    for (long i = 0; i < n; i++) {
        index[i * 7919 % 1000003] = i;
    }
}

int main() {
    Index index;
    build_index(index, 600000);
    // A node is the tree's 32-byte header plus the pair; glibc's chunk adds its 8-byte header
    // and rounds up to 16.
    const unsigned long node = 32 + sizeof(Index::value_type);
    const unsigned long chunk = (node + 8 + 15) / 16 * 16;
    std::printf("nodes %zu chunk_bytes %lu\n", index.size(), index.size() * chunk);
    return 0;
}
