// cxx_churn: single-threaded new[] + delete[] pairs of 64..120 bytes, for instruction counts
// under callgrind (the C++ operators' cost in the shim; see BENCHMARKS.md).
//
//   cxx_churn [pairs]   (default 1000000)
#include <cstdio>
#include <cstdlib>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    unsigned long s = 0x9E3779B97F4A7C15ULL, sum = 0;
    for (long i = 0; i < n; i++) {
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        size_t size = 64 + ((s * 0x2545F4914F6CDD1DULL) >> 58) % 57;
        volatile char *p = new char[size];
        p[0] = (char)i; sum += p[0];
        delete[] p;
    }
    printf("%lu\n", sum);
}
